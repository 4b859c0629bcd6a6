"""The simulated replica in virtual time, behind the load generators' interface.

``VirtualReplicaPool`` is a ``LoadPool`` (``workers.benchmarks.endpoint``): the endpoint load
test sends its runs through it as it would through Ray load generators, and it plays each run
on a ``BatchingEngine`` whose clock is the run's own schedule. A request is submitted at the
instant it is due, its first token and its end are the engine's exact times, a client that gives
up after the endpoint's ``timeout_s`` aborts its sequence at that instant; no wall-clock time
passes, so a sweep measures the replica model exactly, in milliseconds, however busy the
machine is. That makes it the place to check what depends on timing (the knee against the
planner's prediction, goodput, inter-token latency, the token-rate probes) and to rehearse a
sweep's settings; the HTTP server (``server``) is the same engine in real time, for checking
the protocol and the load generators.

What the HTTP path adds and this leaves out: the network and the event loops' delays, and the
stream interval (tokens here arrive at their own times, as the first and last chunk do over
HTTP). A closed-loop client sends its next request the instant its previous one ends.

Requests are checked as the server checks them: another model name is an HTTP 404 error, a
prompt plus ``max_tokens`` over ``max_model_len`` an HTTP 400 error.

Units: seconds, tokens.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from planner.errors import PlannerInputError
from workers.benchmarks.endpoint import Endpoint, RequestRecord
from workers.benchmarks.workload import RequestSample, prompt_words, shared_prefix_words
from workers.simulators.replica.batching import BatchingEngine, block_hashes
from workers.simulators.replica.config import ReplicaConfig

__all__ = ["VirtualReplicaPool"]

# Event kinds, in the order events at the same instant are handled: a request that ends at its
# client's deadline has made it.
_SEND = 0
_DEADLINE = 1


@dataclass
class _InFlight:
    index: int
    scheduled_s: float
    sent_s: float
    user: int


class VirtualReplicaPool:
    """Load generators and one simulated replica in one virtual clock.

    The replica's state (its prefix cache) lasts across runs, as a server's does; each run
    starts at the engine's clock after the previous one ended.
    """

    def __init__(self, config: ReplicaConfig) -> None:
        self.config = config
        self.engine = BatchingEngine(config)
        self.hosts: tuple[str, ...] = (f"virtual-time replica {config.model}",)

    def close(self) -> None:
        """Nothing to stop: the pool runs no process and holds no socket."""

    def __enter__(self) -> VirtualReplicaPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- LoadPool -------------------------------------------------------------------------------

    def run_open(
        self,
        endpoint: Endpoint,
        sample: RequestSample,
        offsets_s: npt.ArrayLike,
        *,
        run_key: int,
    ) -> list[RequestRecord]:
        """Request i is sent at ``offsets_s[i]`` seconds from the start; records in request
        order."""
        offsets = np.asarray(offsets_s, dtype=np.float64)
        if offsets.shape != (sample.count,):
            raise PlannerInputError("offsets_s", "must hold one send time per request")
        if not np.all(np.isfinite(offsets)) or np.any(offsets < 0):
            raise PlannerInputError("offsets_s", "send times must be finite and >= 0")
        return self._play(endpoint, sample, run_key, offsets=offsets, users=0)

    def run_closed(
        self, endpoint: Endpoint, sample: RequestSample, users: int, *, run_key: int
    ) -> list[RequestRecord]:
        """``users`` clients each send their next request the instant their previous one ended
        (or timed out), until every request of ``sample`` is sent; records in request order."""
        if isinstance(users, bool) or not isinstance(users, int) or users < 1:
            raise PlannerInputError("users", f"must be a whole number >= 1, got {users!r}")
        return self._play(endpoint, sample, run_key, offsets=None, users=users)

    def warm_up(
        self, endpoint: Endpoint, sample: RequestSample, run_key: int
    ) -> list[RequestRecord]:
        """Cache each sharing class's common prefix: one request per class, one at a time, as
        long as the longest shared part of the run (as ``LoadGenerator.warm_up`` sends)."""
        records: list[RequestRecord] = []
        for k, tokens in sorted(sample.shared_prefix_tokens().items()):
            words = shared_prefix_words(sample.seed, run_key, k, tokens)
            records += self._play_one(endpoint, words, index=-1 - k)
        return records

    # -- the clock ------------------------------------------------------------------------------

    def _refusal(self, endpoint: Endpoint, prompt_tokens: int, max_tokens: int) -> str:
        """The HTTP error the server would answer, or empty when it would serve the request."""
        config = self.config
        if endpoint.model != config.model:
            return f"HTTP 404: The model `{endpoint.model}` does not exist."
        if prompt_tokens + max_tokens > config.max_model_len:
            return (
                f"HTTP 400: This model's maximum context length is {config.max_model_len} "
                f"tokens; the request asks for {prompt_tokens + max_tokens}"
            )
        return ""

    def _hashes(self, words: list[str]) -> list[int]:
        if not self.config.prefix_cache_tokens:
            return []
        return block_hashes(words, self.config.block_tokens)

    def _play_one(self, endpoint: Endpoint, words: list[str], *, index: int) -> list[RequestRecord]:
        """One request of one output token, alone (the warm-up)."""
        sample = RequestSample(
            ("warm-up",),
            np.zeros(1, dtype=np.int64),
            np.array([len(words)], dtype=np.int64),
            np.ones(1, dtype=np.int64),
            np.zeros(1, dtype=np.bool_),
        )
        (record,) = self._play(endpoint, sample, 0, offsets=np.zeros(1), users=0, words=[words])
        return [
            RequestRecord(
                index,
                record.scheduled_s,
                record.sent_s,
                record.first_token_s,
                record.done_s,
                record.output_tokens,
                record.prompt_tokens,
                record.cached_tokens,
                record.outcome,
                record.detail,
            )
        ]

    def _play(
        self,
        endpoint: Endpoint,
        sample: RequestSample,
        run_key: int,
        *,
        offsets: npt.NDArray[np.float64] | None,
        users: int,
        words: list[list[str]] | None = None,
    ) -> list[RequestRecord]:
        """Play one run on the engine: sends (at their offsets, or as closed-loop clients
        free up), completions and client deadlines in time order."""
        engine = self.engine
        origin = engine.clock
        timeout = float(endpoint.timeout_s)
        events: list[tuple[float, int, int, int]] = []  # (time, kind, order, payload)
        order = 0

        def push(at: float, kind: int, payload: int) -> None:
            nonlocal order
            heapq.heappush(events, (at, kind, order, payload))
            order += 1

        # Closed loop: the payload of a send is the client; the request is the next unsent one.
        positions: Iterator[int] = iter(range(sample.count))
        if offsets is None:
            for user in range(min(users, sample.count)):
                push(origin, _SEND, user)
        else:
            for index in range(sample.count):
                push(origin + float(offsets[index]), _SEND, index)

        records: dict[int, RequestRecord] = {}
        flying: dict[int, _InFlight] = {}

        def finish(seq_id: int, now: float, outcome: str) -> None:
            state = engine.sequences[seq_id]
            req = flying.pop(seq_id)
            first = state.first_token_s
            if outcome == "ok":
                engine.release(seq_id)
                record = RequestRecord(
                    req.index,
                    req.scheduled_s,
                    req.sent_s,
                    first - origin,
                    state.done_s - origin,
                    state.max_tokens,
                    state.prompt_tokens,
                    state.cached_tokens,
                    "ok",
                    "",
                    req.user,
                )
            else:
                engine.abort(seq_id, now)
                record = RequestRecord(
                    req.index,
                    req.scheduled_s,
                    req.sent_s,
                    first - origin if math.isfinite(first) else math.nan,
                    math.nan,
                    math.floor(state.decoded),
                    -1,
                    -1,
                    "timeout",
                    f"no complete answer within {timeout:g} s",
                    req.user,
                )
            records[req.index] = record
            if offsets is None:
                push(now, _SEND, req.user)

        def send(now: float, payload: int) -> None:
            if offsets is None:
                index = next(positions, -1)
                if index < 0:
                    return
                user, scheduled = payload, now - origin
            else:
                index, user, scheduled = payload, -1, float(offsets[payload])
            prompt = words[index] if words is not None else prompt_words(sample, index, run_key)
            max_tokens = int(sample.output_tokens[index])
            refusal = self._refusal(endpoint, len(prompt), max_tokens)
            # Open loop: sent on schedule exactly (``now`` is origin + offset, up to rounding).
            sent = scheduled if offsets is not None else now - origin
            if refusal:
                records[index] = RequestRecord(
                    index, scheduled, sent, math.nan, math.nan, 0, -1, -1, "error", refusal, user
                )
                if offsets is None:
                    push(now, _SEND, user)
                return
            seq_id = engine.submit(len(prompt), max_tokens, now, self._hashes(prompt))
            flying[seq_id] = _InFlight(index, scheduled, sent, user)
            push(now + timeout, _DEADLINE, seq_id)

        while events or flying:
            # A deadline of a request that already ended is no event at all.
            while events and events[0][1] == _DEADLINE and events[0][3] not in flying:
                heapq.heappop(events)
            due = events[0][0] if events else math.inf
            wake = engine.next_wake()
            now = min(due, math.inf if wake is None else wake)
            if math.isinf(now):
                break
            engine.advance(now)
            for seq_id in [s for s in flying if engine.sequences[s].finished]:
                finish(seq_id, now, "ok")
            while events and events[0][0] <= now:
                _, kind, _, payload = heapq.heappop(events)
                if kind == _SEND:
                    send(now, payload)
                elif payload in flying:
                    finish(payload, now, "timeout")
        return [records[i] for i in range(sample.count)]
