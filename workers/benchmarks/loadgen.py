"""Load generators: the HTTP client of the endpoint load test, run as Ray actors.

One generator is an asyncio event loop with an aiohttp session. The load of a run is split over
several generators so it can exceed what one process (or one machine) can send: each takes a
share of the arrival schedule (request i goes to generator i mod k, so each share is the same
process thinned), and the driver merges their records. Generators agree on the start through
the wall clock (``start_at``, seconds since the epoch): on one machine that is exact, across a
Ray cluster it is as good as the nodes' clock synchronisation (NTP: about a millisecond).

Open loop. Each request is sent at its scheduled offset whatever happened to the ones before,
on its own connection if need be (the connection pool is unbounded, so a slow server never
holds the next request back: that would be a closed loop in disguise). How late each request
left is recorded (``sent_s - scheduled_s``), so a generator that could not keep up shows.
Closed loop. ``users`` clients each send their next request when the previous one completes.

What is measured, per request, in seconds from the run's start on the generator's monotonic
clock: when it was due, when it was sent, when the first non-empty text arrived (TTFT counts
from the send), when the stream ended; output tokens and cached prompt tokens from the
``usage`` the server reports (``stream_options.include_usage``), else the count of text chunks.
A request ends ``ok``, ``timeout`` (no complete answer within the endpoint's ``timeout_s``) or
``error`` (refused connection, HTTP status other than 200, an error object or a malformed
stream), with the reason kept.

Request bodies are built from the ``RequestSample`` inside the generator (only lengths cross the
wire to it), ahead of their send time, so building a 10,000-token prompt never delays a send.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np
import numpy.typing as npt

from planner.errors import PlannerInputError
from workers.benchmarks.endpoint import Endpoint, Outcome, RequestRecord
from workers.benchmarks.workload import RequestSample, prompt_words, shared_prefix_words

__all__ = [
    "Endpoint",
    "LoadGenerator",
    "LoadGeneratorPool",
    "RequestRecord",
]

# Bodies built ahead of the schedule. Enough to cover the start of any run; the rest is built
# while waiting for the next send, never later than this margin before it is due.
_LOOKAHEAD = 256
_BUILD_MARGIN_S = 0.002


@dataclass(frozen=True)
class _Job:
    endpoint: Endpoint
    sample: RequestSample
    run_key: int
    indices: tuple[int, ...]
    offsets_s: tuple[float, ...]  # open loop: due times; closed loop: empty
    users: int  # closed loop: clients on this generator; open loop: 0
    first_user: int = 0  # closed loop: number of this generator's first client


def _count(value: object, default: int) -> int:
    """A token count the server reported, or ``default`` when it reported none (or garbage)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _text_of(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or "")
    return str(choice.get("text") or "")


async def _send(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    body: bytes,
    index: int,
    scheduled_s: float,
    origin: float,
    user: int = -1,
) -> RequestRecord:
    """Send one streaming request and time it; never raises for what the endpoint does."""
    sent = time.monotonic() - origin
    first = math.nan
    chunks = 0
    usage: dict[str, Any] = {}

    def record(outcome: Outcome, detail: str = "", done: float = math.nan) -> RequestRecord:
        details = usage.get("prompt_tokens_details")
        return RequestRecord(
            index=index,
            scheduled_s=scheduled_s,
            sent_s=sent,
            first_token_s=first,
            done_s=done,
            output_tokens=_count(usage.get("completion_tokens"), chunks),
            prompt_tokens=_count(usage.get("prompt_tokens"), -1),
            cached_tokens=_count(
                details.get("cached_tokens") if isinstance(details, dict) else None, -1
            ),
            outcome=outcome,
            detail=detail,
            user=user,
        )

    try:
        async with asyncio.timeout(endpoint.timeout_s):
            async with session.post(endpoint.url, data=body, headers=endpoint.headers()) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:300]
                    return record("error", f"HTTP {resp.status}: {text}")
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        return record("ok", done=time.monotonic() - origin)
                    chunk = json.loads(data)
                    if not isinstance(chunk, dict):
                        return record("error", f"malformed chunk: {data[:200]!r}")
                    if "error" in chunk:
                        return record("error", f"stream error: {str(chunk['error'])[:300]}")
                    if _text_of(chunk):
                        if math.isnan(first):
                            first = time.monotonic() - origin
                        chunks += 1
                    if isinstance(chunk.get("usage"), dict):
                        usage = chunk["usage"]
                return record("error", "the stream ended without [DONE]")
    except TimeoutError:
        return record("timeout", f"no complete answer within {endpoint.timeout_s:g} s")
    except (aiohttp.ClientError, OSError, json.JSONDecodeError, ValueError) as exc:
        return record("error", f"{type(exc).__name__}: {exc}"[:300])


class LoadGenerator:
    """One load generator (a Ray actor in ``LoadGeneratorPool``; usable directly in a loop).

    ``prepare`` takes a job and builds the first request bodies; ``run`` then sends it, starting
    at the wall-clock time ``start_at``, and returns the records.
    """

    def __init__(self) -> None:
        self._job: _Job | None = None
        self._bodies: dict[int, bytes] = {}

    def host(self) -> str:
        """The host this generator runs on (for the run's provenance)."""
        return socket.gethostname()

    def _build(self, position: int) -> bytes:
        job = self._job
        assert job is not None
        body = self._bodies.get(position)
        if body is None:
            index = job.indices[position]
            words = prompt_words(job.sample, index, job.run_key)
            body = job.endpoint.body(words, int(job.sample.output_tokens[index]))
            self._bodies[position] = body
        return body

    def prepare(self, job: _Job) -> int:
        """Take a job and build its first bodies; returns how many requests it holds."""
        self._job = job
        self._bodies = {}
        for position in range(min(len(job.indices), _LOOKAHEAD)):
            self._build(position)
        return len(job.indices)

    async def run(self, start_at: float) -> list[RequestRecord]:
        """Send the prepared job; ``start_at`` is the run's start in seconds since the epoch."""
        job = self._job
        if job is None:
            raise RuntimeError("prepare a job before running it")
        origin = time.monotonic() + (start_at - time.time())
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=None)
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                if job.users:
                    return await self._closed(session, job, origin)
                return await self._open(session, job, origin)
        finally:
            self._job = None
            self._bodies = {}

    async def _open(
        self, session: aiohttp.ClientSession, job: _Job, origin: float
    ) -> list[RequestRecord]:
        tasks: list[asyncio.Task[RequestRecord]] = []
        built = min(len(job.indices), _LOOKAHEAD)
        for position, (index, offset) in enumerate(zip(job.indices, job.offsets_s, strict=True)):
            due = origin + offset
            # Use the wait for this send to build bodies further ahead.
            while built < len(job.indices) and due - time.monotonic() > _BUILD_MARGIN_S:
                self._build(built)
                built += 1
            body = self._build(position)
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(
                asyncio.create_task(_send(session, job.endpoint, body, index, offset, origin))
            )
            self._bodies.pop(position, None)
        return list(await asyncio.gather(*tasks))

    async def _closed(
        self, session: aiohttp.ClientSession, job: _Job, origin: float
    ) -> list[RequestRecord]:
        delay = origin - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        records: list[RequestRecord] = []
        positions = iter(range(len(job.indices)))

        async def user(number: int) -> None:
            for position in positions:
                body = self._build(position)
                self._bodies.pop(position, None)
                issued = time.monotonic() - origin
                index = job.indices[position]
                records.append(
                    await _send(session, job.endpoint, body, index, issued, origin, number)
                )

        await asyncio.gather(*(user(job.first_user + u) for u in range(job.users)))
        return records

    async def warm_up(
        self, endpoint: Endpoint, sample: RequestSample, run_key: int
    ) -> list[RequestRecord]:
        """Cache each class's common prefix on the endpoint before a warm run: one request per
        sharing class, one at a time, as long as the longest shared part of the run."""
        records: list[RequestRecord] = []
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            origin = time.monotonic()
            for k, tokens in sorted(sample.shared_prefix_tokens().items()):
                words = shared_prefix_words(sample.seed, run_key, k, tokens)
                body = endpoint.body(words, 1)
                records.append(await _send(session, endpoint, body, -1 - k, 0.0, origin))
        return records


class LoadGeneratorPool:
    """``generators`` load-generator actors on the connected Ray cluster
    (``workers.benchmarks.ray_runner.ray_init``), spread over its nodes, each reserving
    ``cpus_per_generator`` CPUs; reused across runs."""

    def __init__(self, generators: int = 2, *, cpus_per_generator: float = 1.0) -> None:
        import ray

        if isinstance(generators, bool) or not isinstance(generators, int) or generators < 1:
            raise PlannerInputError("generators", f"must be a whole number >= 1, got {generators}")
        if not ray.is_initialized():
            raise RuntimeError("connect to Ray first (workers.benchmarks.ray_runner.ray_init)")
        remote = ray.remote(LoadGenerator).options(
            num_cpus=cpus_per_generator, scheduling_strategy="SPREAD"
        )
        self._ray = ray
        self._actors: list[Any] = [remote.remote() for _ in range(generators)]
        self.hosts: tuple[str, ...] = tuple(ray.get([a.host.remote() for a in self._actors]))

    @property
    def size(self) -> int:
        """Number of generators."""
        return len(self._actors)

    def _run(self, jobs: list[tuple[Any, _Job]], lead_s: float) -> list[RequestRecord]:
        ray = self._ray
        ray.get([actor.prepare.remote(job) for actor, job in jobs])
        # Every generator has its first bodies built: start together a little from now.
        start_at = time.time() + lead_s
        parts = ray.get([actor.run.remote(start_at) for actor, _ in jobs])
        records = [r for part in parts for r in part]
        records.sort(key=lambda r: r.index)
        return records

    def run_open(
        self,
        endpoint: Endpoint,
        sample: RequestSample,
        offsets_s: npt.ArrayLike,
        *,
        run_key: int,
        lead_s: float = 0.2,
    ) -> list[RequestRecord]:
        """Send ``sample`` open-loop, request i at ``offsets_s[i]`` seconds from the start;
        records in request order."""
        offsets = np.asarray(offsets_s, dtype=np.float64)
        if offsets.shape != (sample.count,):
            raise PlannerInputError("offsets_s", "must hold one send time per request")
        k = len(self._actors)
        jobs = []
        for a, actor in enumerate(self._actors):
            indices = tuple(range(a, sample.count, k))
            if indices:
                due = tuple(float(offsets[i]) for i in indices)
                jobs.append((actor, _Job(endpoint, sample, run_key, indices, due, 0)))
        return self._run(jobs, lead_s)

    def run_closed(
        self,
        endpoint: Endpoint,
        sample: RequestSample,
        users: int,
        *,
        run_key: int,
        lead_s: float = 0.2,
    ) -> list[RequestRecord]:
        """Send ``sample`` from ``users`` closed-loop clients split over the generators (each
        generator's share of requests in proportion to its users); records in request order."""
        if isinstance(users, bool) or not isinstance(users, int) or users < 1:
            raise PlannerInputError("users", f"must be a whole number >= 1, got {users!r}")
        k = min(len(self._actors), users)
        split = [users // k + (1 if a < users % k else 0) for a in range(k)]
        jobs = []
        start = 0
        assigned = 0
        for a in range(k):
            assigned += split[a]
            # Cumulative rounding: the shares add up to exactly every request.
            end = round(sample.count * assigned / users)
            indices = tuple(range(start, end))
            start = end
            if indices:
                first_user = assigned - split[a]
                job = _Job(endpoint, sample, run_key, indices, (), split[a], first_user)
                jobs.append((self._actors[a], job))
        return self._run(jobs, lead_s)

    def warm_up(
        self, endpoint: Endpoint, sample: RequestSample, run_key: int
    ) -> list[RequestRecord]:
        """Cache the run's common prefixes on the endpoint (see ``LoadGenerator.warm_up``)."""
        records: list[RequestRecord] = self._ray.get(
            self._actors[0].warm_up.remote(endpoint, sample, run_key)
        )
        return records

    def close(self) -> None:
        """Stop the generators."""
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []

    def __enter__(self) -> LoadGeneratorPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
