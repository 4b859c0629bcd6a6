"""gunicorn's configuration for the web process: ``gunicorn -c python:controlplane.serving``.

Some requests never reach Django: gunicorn refuses them while it parses them (a request line
over ``limit_request_line``, 4,094 bytes by default; too many or too large headers; bytes that
are not HTTP). gunicorn answers those with an HTML page of its own, outside the API's error
contract. Under this configuration every worker answers them with the API's one error body,
``{"error": {"code": ..., "message": ...}}`` as ``application/json``, keeping gunicorn's status,
its logging and its access-log line.

The JSON answer is given by whatever worker class gunicorn chose (``sync``, or ``gthread``
when ``--threads`` is above one, or one named with ``--worker-class``): the server hooks below
swap it for a subclass with the JSON ``handle_error`` when the server starts and when it
reloads its configuration.

This module is read by gunicorn's master before Django is set up, so it imports no Django.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from gunicorn import util

from controlplane.core.error_codes import error_code

# The messages for the statuses gunicorn answers itself; the rest say what gunicorn found.
_MESSAGES = {
    414: "The request line (method, path and query) is longer than this server accepts "
    "({limit} bytes): send fewer or shorter query parameters.",
    431: "The request's headers are over this server's limits ({fields} headers of at most "
    "{field_size} bytes each).",
    500: "The server failed to answer this request; the failure is logged. Try again later.",
}


class _Captured:
    """A stand-in for the client socket that keeps what gunicorn's own error writer sends
    (its status line tells which status gunicorn chose) and passes anything else through."""

    def __init__(self, client: socket.socket) -> None:
        self._client = client
        self.sent = b""

    def gettimeout(self) -> float:
        return 0.0  # gunicorn's writer then sends without touching the socket's mode

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def error_response(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 response carrying the API's error body; the connection closes."""
    body = json.dumps(
        {"error": {"code": error_code(status), "message": message}}, ensure_ascii=True
    ).encode("ascii")
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    )
    return head.encode("latin-1") + body


class JsonErrors:
    """Mixed into a gunicorn worker class: its protocol-level errors become JSON errors."""

    cfg: Any  # gunicorn.config.Config, set by gunicorn's Worker

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        captured = _Captured(client)
        # gunicorn classifies the error, logs it and writes its access line; only its page
        # is replaced.
        super().handle_error(req, captured, addr, exc)  # type: ignore[misc]
        status_line = captured.sent.split(b"\r\n", 1)[0].decode("latin-1")
        _, status_text, reason = [*status_line.split(" ", 2), "", ""][:3]
        status = int(status_text) if status_text.isdigit() else 500
        template = _MESSAGES.get(status)
        if template is not None:
            message = template.format(
                limit=self.cfg.limit_request_line,
                fields=self.cfg.limit_request_fields,
                field_size=self.cfg.limit_request_field_size,
            )
        else:
            message = f"{reason or 'Bad Request'}: {exc}"
        try:
            util.write_nonblock(client, error_response(status, reason or "Error", message))
        except OSError:  # the client is gone; gunicorn's own writer gives up the same way
            pass


def with_json_errors(worker_class: type) -> type:
    """``worker_class`` answering protocol errors with the API's error body."""
    if issubclass(worker_class, JsonErrors):
        return worker_class
    return type(f"Json{worker_class.__name__}", (JsonErrors, worker_class), {})


def on_starting(server: Any) -> None:
    server.worker_class = with_json_errors(server.worker_class)


def on_reload(server: Any) -> None:
    # A reload sets up the worker class from the configuration again, before new workers
    # are spawned.
    server.worker_class = with_json_errors(server.worker_class)


def post_worker_init(worker: Any) -> None:
    """Warm a new worker before it takes requests: import every URL module (the views, the
    viewsets and their serializers) and build Django's reverse-URL map.

    Django does both on first use, so each worker's first request paid for them (a read
    about 140 ms, and the first request that builds a URL, such as a what-if submit's
    ``Location``, another 40 ms), and requests queued behind it in that worker waited as
    long. A worker restarted (``--max-requests``, a crash) paid it again under load. Called
    by gunicorn in the worker once the application is loaded, so Django is set up.
    """
    from django.urls import get_resolver

    resolver = get_resolver()
    resolver.url_patterns  # noqa: B018  (imports the URL modules)
    resolver.reverse_dict  # noqa: B018  (builds the reverse map)
