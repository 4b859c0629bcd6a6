"""A simulated OpenAI-compatible replica: continuous batching by the token cost model, over HTTP.

The endpoint load test needs something to drive in tests and rehearsals that behaves like one
replica of a continuous-batching runtime (vLLM and most others) and whose capacity is known in
advance. This server is that: it speaks the OpenAI streaming protocol the runtimes serve and does
the work the planner's cost model says a request costs, in real time.

HTTP (what vLLM serves, the subset a load test uses):

* ``POST /v1/completions`` (``prompt`` a string, a list of one string or a list of token ids)
  and ``POST /v1/chat/completions`` (``messages``; the prompt is the words of every message's
  text). ``max_tokens`` (chat also ``max_completion_tokens``, default 16) output tokens are
  produced: the simulated model never stops early, which is what ``ignore_eos: true`` asks of a
  real one (the flag is accepted). With ``stream: true`` the answer is Server-Sent Events,
  ``data: {json}`` chunks then ``data: [DONE]``; chat opens with a role chunk; with
  ``stream_options.include_usage`` the last chunk before ``[DONE]`` carries ``usage``
  (``prompt_tokens``, ``completion_tokens``, ``prompt_tokens_details.cached_tokens``).
* ``GET /v1/models``, ``GET /health``.
* Errors are OpenAI's ``{"error": {"message", "type", "param", "code"}}``: 400 for a malformed
  body or a prompt plus ``max_tokens`` over ``max_model_len``, 404 for another model name.

A token is a whitespace-separated word: the simulated model has no tokenizer.

The scheduler (``BatchingEngine``) is continuous batching in the planner's cost model, worked out
exactly in time rather than in fixed steps:

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

Each wake-up of the server is a scheduler iteration whose token budget is the time elapsed since
the last one × the rates. The budget is spent in time order: every admission, phase end and
completion in between is replayed at its exact instant, so no engine time is lost to the
wake-up period, whatever it is; only delivery waits for a wake-up. The first token and the last
chunk are sent at their own times, other tokens every ``stream_interval_s`` (vLLM's stream
interval). Driven this way, ``max_concurrency`` = c with ``max_sequence_share`` = 1/c is exactly
the planner's c-server FIFO queue with service time request_cost at 1/c of the rates
(``ReplicaConfig.fifo_slots``); the endpoint load test's acceptance check rests on this.

Run it with ``python -m workers.benchmarks.replica_server --help``, in a thread with
``ReplicaServer``, or as a subprocess with ``replica_server_process``. Both bind a free loopback
port by default.

Units: tokens, tokens per second, seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from planner.errors import PlannerInputError
from workers.benchmarks.workload import VOCABULARY

__all__ = [
    "BatchingEngine",
    "Emission",
    "PrefixCache",
    "ReplicaConfig",
    "ReplicaServer",
    "app_engine",
    "block_hashes",
    "make_app",
    "replica_server_process",
]

logger = logging.getLogger(__name__)

# Float slack when rounding decoded tokens to whole tokens and snapping phase ends: far below
# a token, far above the rounding noise of sums over a run.
_TOKEN_EPS = 1e-6


@dataclass(frozen=True)
class ReplicaConfig:
    """The simulated replica's model name, speeds and limits.

    ``prefill_tokens_per_s`` and ``decode_tokens_per_s`` are the replica's aggregate rates (what
    a ``CapacityFigure`` records); ``max_sequence_share`` in (0, 1] is the largest fraction of
    the engine one sequence can use (1: a lone sequence gets the whole engine).
    ``prefix_cache_tokens`` 0 turns the prefix cache off. ``stream_interval_s`` is how often
    decoded tokens are sent between the first token and the last.
    """

    model: str = "headroom-sim"
    prefill_tokens_per_s: float = 4000.0
    decode_tokens_per_s: float = 160.0
    max_concurrency: int = 8
    max_sequence_share: float = 1.0
    max_model_len: int = 32_768
    prefix_cache_tokens: int = 1 << 20
    block_tokens: int = 16
    stream_interval_s: float = 0.02

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise PlannerInputError("model", f"must be a non-empty string, got {self.model!r}")
        for name in ("prefill_tokens_per_s", "decode_tokens_per_s", "stream_interval_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise PlannerInputError(name, f"must be a finite number > 0, got {value!r}")
        share = self.max_sequence_share
        if not isinstance(share, int | float) or not 0 < share <= 1:
            raise PlannerInputError("max_sequence_share", f"must be in (0, 1], got {share!r}")
        for name, least in (
            ("max_concurrency", 1),
            ("max_model_len", 2),
            ("prefix_cache_tokens", 0),
            ("block_tokens", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise PlannerInputError(name, f"must be a whole number >= {least}, got {value!r}")

    @classmethod
    def fifo_slots(
        cls,
        slots: int,
        prefill_tokens_per_s: float,
        decode_tokens_per_s: float,
        **options: Any,
    ) -> ReplicaConfig:
        """A replica of aggregate rates whose ``slots`` sequences never slow each other down.

        Each admitted request runs at 1/slots of the rates, so it takes
        ``request_cost(prompt, output, prefill/slots, decode/slots)`` seconds and the replica is
        the planner's FIFO queue with ``servers = slots``.
        """
        return cls(
            prefill_tokens_per_s=prefill_tokens_per_s,
            decode_tokens_per_s=decode_tokens_per_s,
            max_concurrency=slots,
            max_sequence_share=1.0 / slots,
            **options,
        )

    def argv(self) -> list[str]:
        """The command-line options that give this configuration."""
        return [
            f"--model={self.model}",
            f"--prefill-tokens-per-s={self.prefill_tokens_per_s!r}",
            f"--decode-tokens-per-s={self.decode_tokens_per_s!r}",
            f"--max-concurrency={self.max_concurrency}",
            f"--max-sequence-share={self.max_sequence_share!r}",
            f"--max-model-len={self.max_model_len}",
            f"--prefix-cache-tokens={self.prefix_cache_tokens}",
            f"--block-tokens={self.block_tokens}",
            f"--stream-interval-s={self.stream_interval_s!r}",
        ]


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


class _Sequence:
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
        self._running: list[_Sequence] = []
        self._waiting: deque[_Sequence] = deque()
        self._finished: list[_Sequence] = []
        self._cache = PrefixCache(config.prefix_cache_tokens // config.block_tokens)
        self._next_flush = start_s
        self.sequences: dict[int, _Sequence] = {}
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
        seq = _Sequence(next(self._ids), self._clock, prompt_tokens, max_tokens, list(hashes))
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
        at = self._clock + wake
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
            done: list[_Sequence] = []
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


# -- HTTP ---------------------------------------------------------------------------------------


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    kinds = {400: "invalid_request_error", 404: "not_found_error"}
    body = {
        "error": {
            "message": message,
            "type": kinds.get(status, "server_error"),
            "param": param,
            "code": status,
        }
    }
    return web.json_response(body, status=status)


def _text_words(content: Any, param: str) -> list[str]:
    if content is None:  # an assistant turn that only called tools
        return []
    if isinstance(content, str):
        return content.split()
    if isinstance(content, list):
        words: list[str] = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                raise _BadRequest(400, "content parts must be objects with a text field", param)
            words += part.get("text", "").split()
        return words
    raise _BadRequest(400, "must be a string or a list of content parts", param)


def _prompt_words(body: dict[str, Any], chat: bool) -> tuple[list[str], int]:
    """The prompt's words (for the prefix cache) and its token count."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest(400, "messages must be a non-empty list", "messages")
        words: list[str] = []
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise _BadRequest(400, "each message needs a role and content", "messages")
            words += _text_words(message.get("content", ""), "messages")
        return words, len(words)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        words = prompt.split()
        return words, len(words)
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return [str(t) for t in prompt], len(prompt)
    raise _BadRequest(400, "prompt must be a string or a list of token ids", "prompt")


def _positive_int(body: dict[str, Any], names: Sequence[str], default: int) -> int:
    for name in names:
        if body.get(name) is not None:
            value = body[name]
            if type(value) is not int or value < 1:
                raise _BadRequest(400, f"{name} must be a whole number >= 1", name)
            return value
    return default


def _output_text(seq_id: int, first: int, count: int) -> str:
    size = len(VOCABULARY)
    return "".join(" " + VOCABULARY[(seq_id * 7 + k) % size] for k in range(first, first + count))


def _report_crash(task: asyncio.Task[None]) -> None:
    # Without its scheduler the replica would leave every request hanging: say why, loudly.
    if not task.cancelled() and task.exception() is not None:
        logger.error("the replica's scheduler stopped", exc_info=task.exception())


class _Replica:
    """The HTTP side: parses requests, feeds the engine, streams what it emits."""

    def __init__(self, config: ReplicaConfig) -> None:
        self.config = config
        self.engine: BatchingEngine | None = None
        self._queues: dict[int, asyncio.Queue[Emission]] = {}
        self._wakeup: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._created = int(time.time())

    async def start(self, app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        self.engine = BatchingEngine(self.config, loop.time())
        self._task = asyncio.create_task(self._schedule())
        self._task.add_done_callback(_report_crash)

    async def stop(self, app: web.Application) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _kick(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        engine = self.engine
        assert engine is not None
        while True:
            for emission in engine.advance(loop.time()):
                queue = self._queues.get(emission.seq_id)
                if queue is not None:
                    queue.put_nowait(emission)
            wake = engine.next_wake()
            self._wakeup = loop.create_future()
            timer = None
            if wake is not None:
                timer = loop.call_at(wake, self._kick)
            await self._wakeup
            if timer is not None:
                timer.cancel()

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def models(self, request: web.Request) -> web.Response:
        model = {
            "id": self.config.model,
            "object": "model",
            "created": self._created,
            "owned_by": "headroom",
            "max_model_len": self.config.max_model_len,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "the body must be a JSON object")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        try:
            return await self._generate(request, body, chat=chat)
        except _BadRequest as exc:
            return _error(exc.status, exc.message, exc.param)

    async def _generate(
        self, request: web.Request, body: dict[str, Any], *, chat: bool
    ) -> web.StreamResponse:
        config = self.config
        engine = self.engine
        assert engine is not None
        if body.get("model") != config.model:
            raise _BadRequest(404, f"The model `{body.get('model')}` does not exist.", "model")
        words, prompt_tokens = _prompt_words(body, chat)
        if prompt_tokens < 1:
            raise _BadRequest(400, "the prompt is empty", "messages" if chat else "prompt")
        names = ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",)
        max_tokens = _positive_int(body, names, 16)
        if body.get("n", 1) != 1:
            raise _BadRequest(400, "only n = 1 is served", "n")
        if prompt_tokens + max_tokens > config.max_model_len:
            raise _BadRequest(
                400,
                f"This model's maximum context length is {config.max_model_len} tokens; the "
                f"request asks for {prompt_tokens + max_tokens} ({prompt_tokens} in the prompt, "
                f"{max_tokens} to generate).",
                "max_tokens",
            )
        stream = bool(body.get("stream", False))
        options = body.get("stream_options") or {}
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))

        loop = asyncio.get_running_loop()
        hashes = block_hashes(words, config.block_tokens) if config.prefix_cache_tokens else []
        queue: asyncio.Queue[Emission] = asyncio.Queue()
        seq_id = engine.submit(prompt_tokens, max_tokens, loop.time(), hashes)
        self._queues[seq_id] = queue
        self._kick()
        prefix = "chatcmpl" if chat else "cmpl"
        meta = {
            "id": f"{prefix}-{seq_id}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": config.model,
        }
        finished = False
        try:
            if stream:
                response = await self._stream(request, queue, meta, chat, include_usage)
            else:
                response = await self._whole(queue, meta, chat)
            finished = True
            return response
        finally:
            self._queues.pop(seq_id, None)
            if finished:
                engine.release(seq_id)
            else:
                engine.abort(seq_id, loop.time())
                self._kick()

    def _usage(self, seq_id: int) -> dict[str, Any]:
        assert self.engine is not None
        seq = self.engine.sequences[seq_id]
        return {
            "prompt_tokens": seq.prompt_tokens,
            "completion_tokens": seq.max_tokens,
            "total_tokens": seq.prompt_tokens + seq.max_tokens,
            "prompt_tokens_details": {"cached_tokens": seq.cached_tokens},
        }

    async def _stream(
        self,
        request: web.Request,
        queue: asyncio.Queue[Emission],
        meta: dict[str, Any],
        chat: bool,
        include_usage: bool,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)

        async def send(payload: dict[str, Any] | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            await response.write(f"data: {data}\n\n".encode())

        usage_field: dict[str, Any] = {"usage": None} if include_usage else {}
        if chat:
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
            await send(
                {**meta, "choices": [{**role, "logprobs": None, "finish_reason": None}]}
                | usage_field
            )
        while True:
            emission = await queue.get()
            text = _output_text(emission.seq_id, emission.first_token_index, emission.tokens)
            reason = "length" if emission.finished else None
            if chat:
                choice: dict[str, Any] = {"index": 0, "delta": {"content": text}}
            else:
                choice = {"index": 0, "text": text}
            choice |= {"logprobs": None, "finish_reason": reason}
            await send({**meta, "choices": [choice]} | usage_field)
            if emission.finished:
                break
        if include_usage:
            await send({**meta, "choices": [], "usage": self._usage(emission.seq_id)})
        await send("[DONE]")
        await response.write_eof()
        return response

    async def _whole(
        self, queue: asyncio.Queue[Emission], meta: dict[str, Any], chat: bool
    ) -> web.Response:
        parts: list[str] = []
        while True:
            emission = await queue.get()
            parts.append(_output_text(emission.seq_id, emission.first_token_index, emission.tokens))
            if emission.finished:
                break
        text = "".join(parts)
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
            kind = "text_completion"
        body = {**meta, "object": kind, "choices": [choice], "usage": self._usage(emission.seq_id)}
        return web.json_response(body)


_REPLICA = web.AppKey("replica", _Replica)


def make_app(config: ReplicaConfig) -> web.Application:
    """The aiohttp application of one simulated replica (its engine starts with the app)."""
    replica = _Replica(config)
    # Prompts of tens of thousands of words exceed aiohttp's 1 MiB default only at the margin;
    # the limit follows the context length so any admissible prompt fits.
    app = web.Application(client_max_size=max(1 << 20, config.max_model_len * 64))
    app.on_startup.append(replica.start)
    app.on_cleanup.append(replica.stop)
    app.router.add_get("/health", replica.health)
    app.router.add_get("/v1/models", replica.models)
    app.router.add_post("/v1/completions", replica.completions)
    app.router.add_post("/v1/chat/completions", replica.chat_completions)
    app[_REPLICA] = replica
    return app


def app_engine(app: web.Application) -> BatchingEngine | None:
    """The engine of a running application made by ``make_app`` (None before it starts)."""
    return app[_REPLICA].engine


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _url(host: str, sock: socket.socket) -> str:
    port = sock.getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(
    app: web.Application,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve ``app`` (``make_app``) until ``stop`` is set (forever without one); ``ready``
    gets the base URL once the socket listens (port 0: a free port)."""
    sock = _listening_socket(host, port)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        if ready is not None:
            ready(_url(host, sock))
        await (stop or asyncio.Event()).wait()
    finally:
        await runner.cleanup()


class ReplicaServer:
    """A simulated replica served from a background thread with its own event loop.

    ``with ReplicaServer(config) as server: server.base_url`` (a free loopback port unless
    ``port`` is given). The server shares the process's interpreter: for load beyond a few
    hundred requests per second run it as a subprocess (``replica_server_process``).
    """

    def __init__(self, config: ReplicaConfig, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config
        self._host = host
        self._port = port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._app = make_app(config)
        self.base_url = ""

    @property
    def engine(self) -> BatchingEngine:
        """The running scheduler, for inspection (read it from the server's own thread only
        when the server is idle: it is not locked)."""
        engine = app_engine(self._app)
        if engine is None:
            raise RuntimeError("the replica server is not started")
        return engine

    def start(self) -> str:
        """Start serving; returns the base URL (``http://127.0.0.1:PORT``)."""
        if self._thread is not None:
            raise RuntimeError("the replica server is already started")
        self._thread = threading.Thread(target=self._run, name="replica-server", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError(f"the replica server did not start: {self._error}")
        return self.base_url

    def _run(self) -> None:
        def ready(url: str) -> None:
            self.base_url = url
            self._ready.set()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve(self._app, host=self._host, port=self._port, ready=ready, stop=self._stop)

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to start(); the thread must not die silently
            self._error = exc
        finally:
            self._ready.set()

    def stop(self) -> None:
        """Stop serving and join the thread."""
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> ReplicaServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_READY_PREFIX = "Headroom simulated replica listening on "


@contextlib.contextmanager
def replica_server_process(
    config: ReplicaConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout_s: float = 60.0,
) -> Iterator[str]:
    """Run ``python -m workers.benchmarks.replica_server`` as a subprocess; yields its base URL
    and terminates it on exit. Its own interpreter keeps its timing off the caller's."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    args = [sys.executable, "-m", "workers.benchmarks.replica_server"]
    args += [f"--host={host}", f"--port={port}", *config.argv()]
    # Its log goes to a file: a pipe nobody reads would fill and stall the server.
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=root
        )
        try:
            url = _await_ready(proc, startup_timeout_s)
            if url is None:
                proc.kill()
                proc.wait()
                log.seek(0)
                raise RuntimeError(f"the replica server did not start: {log.read()[-2000:]}")
            yield url
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def _await_ready(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The base URL the server prints on its first line (None: it did not in time)."""
    found: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.startswith(_READY_PREFIX):
            found.append(line[len(_READY_PREFIX) :].strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    return found[0] if found else None


def _parse_args(argv: Sequence[str] | None) -> tuple[ReplicaConfig, str, int]:
    defaults = ReplicaConfig()
    parser = argparse.ArgumentParser(
        prog="python -m workers.benchmarks.replica_server",
        description="Serve a simulated OpenAI-compatible replica (continuous batching by the "
        "token cost model).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (default)")
    parser.add_argument("--model", default=defaults.model)
    parser.add_argument("--prefill-tokens-per-s", type=float, default=defaults.prefill_tokens_per_s)
    parser.add_argument("--decode-tokens-per-s", type=float, default=defaults.decode_tokens_per_s)
    parser.add_argument("--max-concurrency", type=int, default=defaults.max_concurrency)
    parser.add_argument(
        "--max-sequence-share",
        type=float,
        default=defaults.max_sequence_share,
        help="largest fraction of the engine one sequence uses (1/c: c independent slots)",
    )
    parser.add_argument("--max-model-len", type=int, default=defaults.max_model_len)
    parser.add_argument("--prefix-cache-tokens", type=int, default=defaults.prefix_cache_tokens)
    parser.add_argument("--block-tokens", type=int, default=defaults.block_tokens)
    parser.add_argument("--stream-interval-s", type=float, default=defaults.stream_interval_s)
    ns = parser.parse_args(argv)
    try:
        config = ReplicaConfig(
            model=ns.model,
            prefill_tokens_per_s=ns.prefill_tokens_per_s,
            decode_tokens_per_s=ns.decode_tokens_per_s,
            max_concurrency=ns.max_concurrency,
            max_sequence_share=ns.max_sequence_share,
            max_model_len=ns.max_model_len,
            prefix_cache_tokens=ns.prefix_cache_tokens,
            block_tokens=ns.block_tokens,
            stream_interval_s=ns.stream_interval_s,
        )
    except PlannerInputError as exc:
        parser.error(str(exc))
    return config, ns.host, ns.port


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until SIGINT or SIGTERM; prints the base URL on the first line of stdout."""
    config, host, port = _parse_args(argv)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def ready(url: str) -> None:
            print(_READY_PREFIX + url, flush=True)

        await serve(make_app(config), host=host, port=port, ready=ready, stop=stop)

    try:
        asyncio.run(run())
    except OSError as exc:  # the address is taken or not this machine's
        sys.exit(f"cannot listen on {host}:{port}: {exc}")


if __name__ == "__main__":
    main()
