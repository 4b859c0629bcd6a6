"""The simulated replica's model: continuous batching by the token cost model, worked out exactly
in virtual time (``BatchingEngine``), with a chained-block prefix cache (``PrefixCache``).

* at most ``max_concurrency`` sequences run; the others wait in arrival order (FIFO admission),
  and a slot that frees is refilled at that instant;
* the engine's time is shared equally among the running sequences, each taking at most
  ``max_sequence_share`` of it. A sequence in prefill progresses at share × ``prefill_tokens_per_s``
  tokens/s, one in decode at share × ``decode_tokens_per_s``; so a request costs
  prompt/prefill + output/decode replica-seconds in all, ``planner.capacity.workload.request_cost``.
  The per-sequence cap is the runtime's limit of one token per sequence per iteration: with a
  cap of 1/c and c slots each admitted request runs alone at its own speed;
* prefill produces no token; the first output token comes one decode token after prefill ends;
* a prefix cache of ``prefix_cache_tokens`` (least recently used first out) holds the prompt's
  full ``block_tokens``-word blocks, chained so a block matches only after the same prefix, as
  vLLM's automatic prefix caching does. At admission the leading cached blocks are skipped from
  prefill (the last prompt token is always computed); a finished prefill adds its blocks.

The engine has no clock of its own: its owner says what time it is (``submit``, ``advance``,
``abort`` take ``now``). The HTTP server (``server``) drives it from its event loop's clock; the
virtual-time pool (``virtual``) from the load's own schedule, so no wall-clock time passes.

Units: tokens, tokens per second, seconds.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from planner.errors import PlannerInputError
from workers.simulators.replica.config import ReplicaConfig

# Float slack when rounding decoded tokens to whole tokens and snapping phase ends: far below
# a token, far above the rounding noise of sums over a run.
_TOKEN_EPS = 1e-6


# -- the prefix cache ---------------------------------------------------------------------------


def block_hashes(words: Sequence[str], block_tokens: int) -> list[int]:
    """Chained hashes of the full blocks of a prompt: block k's hash covers blocks 0..k, so
    equal hashes mean equal prefixes (up to hash collisions, as in vLLM)."""
    hashes: list[int] = []
    previous = 0
    for start in range(0, len(words) - block_tokens + 1, block_tokens):
        previous = hash((previous, *words[start : start + block_tokens]))
        hashes.append(previous)
    return hashes


class PrefixCache:
    """Cached prompt blocks, least recently used evicted first; capacity in blocks."""

    def __init__(self, capacity_blocks: int) -> None:
        self._capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def cached_blocks(self, hashes: Sequence[int]) -> int:
        """How many leading blocks are cached; they become the most recently used."""
        count = 0
        for h in hashes:
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            count += 1
        return count

    def insert(self, hashes: Sequence[int]) -> None:
        """Cache the blocks, evicting the least recently used beyond capacity."""
        if self._capacity == 0:
            return
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self._capacity:
            self._blocks.popitem(last=False)


# -- the scheduler ------------------------------------------------------------------------------


class SequenceState:
    """One request inside the engine. Times in engine seconds; token counts in tokens."""

    __slots__ = (
        "admitted_s",
        "arrival_s",
        "block_hashes",
        "cached_tokens",
        "decoded",
        "done_s",
        "emitted",
        "finished",
        "first_token_s",
        "id",
        "max_tokens",
        "prefill_done_s",
        "prefill_left",
        "prompt_tokens",
    )

    def __init__(
        self, seq_id: int, arrival_s: float, prompt_tokens: int, max_tokens: int, hashes: list[int]
    ) -> None:
        self.id = seq_id
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.block_hashes = hashes
        self.cached_tokens = 0
        self.prefill_left = float(prompt_tokens)
        self.decoded = 0.0
        self.emitted = 0
        self.finished = False
        self.admitted_s = math.nan
        self.prefill_done_s = math.nan
        self.first_token_s = math.nan
        self.done_s = math.nan


@dataclass(frozen=True)
class Emission:
    """Output ready to send for one sequence: ``tokens`` new whole tokens (the first of the
    sequence's output is token number ``first_token_index``), and whether it has finished."""

    seq_id: int
    first_token_index: int
    tokens: int
    finished: bool


class BatchingEngine:
    """Continuous batching in virtual time (see the module docstring for the model).

    The owner calls ``submit`` when a request arrives, ``advance(now)`` to replay the engine up
    to ``now`` and collect what to send, and ``next_wake()`` to learn when output next becomes
    due. Times are whatever clock the owner uses (the server uses its event loop's).
    """

    def __init__(self, config: ReplicaConfig, start_s: float = 0.0) -> None:
        self.config = config
        self._clock = start_s
        self._ids = itertools.count(1)
        self._running: list[SequenceState] = []
        self._waiting: deque[SequenceState] = deque()
        self._finished: list[SequenceState] = []
        self._cache = PrefixCache(config.prefix_cache_tokens // config.block_tokens)
        self._next_flush = start_s
        self.sequences: dict[int, SequenceState] = {}
        #: Totals since start: requests admitted, prompt tokens, cached prompt tokens, output.
        self.admitted = 0
        self.prompt_tokens_total = 0
        self.cached_tokens_total = 0
        self.generated_tokens_total = 0

    @property
    def clock(self) -> float:
        """The engine time the state is at."""
        return self._clock

    @property
    def running(self) -> int:
        """Sequences running now."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Sequences waiting for a slot now."""
        return len(self._waiting)

    def submit(
        self, prompt_tokens: int, max_tokens: int, now: float, hashes: Sequence[int] = ()
    ) -> int:
        """Admit (or queue) a request arriving at ``now``; returns its sequence id."""
        if prompt_tokens < 1:
            raise PlannerInputError("prompt_tokens", f"must be at least 1, got {prompt_tokens}")
        if max_tokens < 1:
            raise PlannerInputError("max_tokens", f"must be at least 1, got {max_tokens}")
        self._run_until(now)
        seq = SequenceState(next(self._ids), self._clock, prompt_tokens, max_tokens, list(hashes))
        self.sequences[seq.id] = seq
        self._waiting.append(seq)
        self._admit()
        return seq.id

    def abort(self, seq_id: int, now: float) -> None:
        """Drop a sequence whose client went away, freeing its slot at ``now``."""
        self._run_until(now)
        seq = self.sequences.pop(seq_id, None)
        if seq is None or seq.finished:
            return
        if seq in self._running:
            self._running.remove(seq)
        elif seq in self._waiting:
            self._waiting.remove(seq)
        self._admit()

    def release(self, seq_id: int) -> None:
        """Forget a finished sequence once its answer is sent."""
        self.sequences.pop(seq_id, None)

    def advance(self, now: float) -> list[Emission]:
        """Replay the engine up to ``now``; return the output due: every sequence's first token
        and last chunk at once, other tokens on the stream-interval cadence."""
        self._run_until(now)
        flush = self._clock >= self._next_flush - _TOKEN_EPS * 1e-3
        out: list[Emission] = []
        for seq in itertools.chain(self._finished, self._running):
            whole = seq.max_tokens if seq.finished else math.floor(seq.decoded + _TOKEN_EPS)
            new = whole - seq.emitted
            if new > 0 and (seq.finished or seq.emitted == 0 or flush):
                out.append(Emission(seq.id, seq.emitted, new, seq.finished))
                seq.emitted = whole
        self._finished.clear()
        if flush:
            self._next_flush = self._clock + self.config.stream_interval_s
        return out

    def next_wake(self) -> float | None:
        """The engine time at which output next becomes due (None: nothing is running)."""
        if self._finished:
            return self._clock
        if not self._running:
            return None
        pre, dec = self._rates()
        wake = math.inf
        decoding = False
        for seq in self._running:
            prefill_s = seq.prefill_left / pre
            if seq.emitted == 0:
                wake = min(wake, prefill_s + max(0.0, 1.0 - seq.decoded) / dec)
            wake = min(wake, prefill_s + (seq.max_tokens - seq.decoded) / dec)
            decoding = decoding or (seq.emitted > 0 and seq.prefill_left == 0)
        # A phase end closer than the clock's float resolution would round to the clock itself,
        # and a wake-up then would replay nothing: wake one representable instant later, where
        # ``_run_until`` ends that phase.
        at = max(self._clock + wake, math.nextafter(self._clock, math.inf))
        if decoding:
            at = min(at, max(self._clock, self._next_flush))
        return at

    def _rates(self) -> tuple[float, float]:
        share = min(self.config.max_sequence_share, 1.0 / len(self._running))
        return share * self.config.prefill_tokens_per_s, share * self.config.decode_tokens_per_s

    def _admit(self) -> None:
        block = self.config.block_tokens
        while self._waiting and len(self._running) < self.config.max_concurrency:
            seq = self._waiting.popleft()
            # The last prompt token is always computed: its logits give the first output token.
            cached = min(self._cache.cached_blocks(seq.block_hashes) * block, seq.prompt_tokens - 1)
            seq.cached_tokens = cached
            seq.prefill_left = float(seq.prompt_tokens - cached)
            seq.admitted_s = self._clock
            self._running.append(seq)
            self.admitted += 1
            self.prompt_tokens_total += seq.prompt_tokens
            self.cached_tokens_total += cached

    def _run_until(self, end: float) -> None:
        """Replay every phase end, completion and admission up to ``end``, in time order."""
        while self._clock < end and self._running:
            pre, dec = self._rates()
            phase_s = [
                s.prefill_left / pre if s.prefill_left > 0 else (s.max_tokens - s.decoded) / dec
                for s in self._running
            ]
            first_end = min(phase_s)
            step = min(first_end, end - self._clock)
            ends_now = first_end <= end - self._clock
            start = self._clock
            self._clock = start + step
            done: list[SequenceState] = []
            for seq, left_s in zip(self._running, phase_s, strict=True):
                if seq.prefill_left > 0:
                    if ends_now and left_s <= first_end:
                        seq.prefill_left = 0.0
                    else:
                        seq.prefill_left = max(0.0, seq.prefill_left - step * pre)
                    if seq.prefill_left == 0.0:
                        seq.prefill_done_s = self._clock
                        self._cache.insert(seq.block_hashes)
                    continue
                before = seq.decoded
                if ends_now and left_s <= first_end:
                    seq.decoded = float(seq.max_tokens)
                else:
                    seq.decoded = min(float(seq.max_tokens), before + step * dec)
                if before < 1.0 <= seq.decoded + _TOKEN_EPS and math.isnan(seq.first_token_s):
                    seq.first_token_s = start + (1.0 - before) / dec
                if seq.decoded >= seq.max_tokens:
                    done.append(seq)
            for seq in done:
                seq.finished = True
                seq.done_s = self._clock
                self._running.remove(seq)
                self._finished.append(seq)
                self.generated_tokens_total += seq.max_tokens
            if done:
                self._admit()
        self._clock = max(self._clock, end)
