"""The simulated replica over HTTP: the OpenAI streaming protocol the runtimes serve, in front of a
``BatchingEngine`` driven by the event loop's clock.

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

Each wake-up of the server is a scheduler iteration whose token budget is the time elapsed since
the last one × the rates. The budget is spent in time order: every admission, phase end and
completion in between is replayed at its exact instant, so no engine time is lost to the
wake-up period, whatever it is; only delivery waits for a wake-up. The first token and the last
chunk are sent at their own times, other tokens every ``stream_interval_s`` (vLLM's stream
interval).

``ReplicaServer`` serves from a background thread; ``serve`` inside a running event loop.

Units: tokens, tokens per second, seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from workers.benchmarks.workload import VOCABULARY
from workers.simulators.replica.batching import BatchingEngine, Emission, block_hashes
from workers.simulators.replica.config import ReplicaConfig

logger = logging.getLogger(__name__)


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
