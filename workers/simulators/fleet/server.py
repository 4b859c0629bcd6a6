"""HTTP server for the simulated fleet.

- ``GET /metrics``: Prometheus text format, advanced to the current time first.
- ``GET /api/v1/query_range``: Prometheus' range-query API over the simulated history (see
  ``query_api``), when the server was given a history; the telemetry pull reads it as it reads
  Prometheus.
- ``GET /healthz``: ``ok``.
- ``POST /drift`` with ``{"extra_prompt_tokens": 1200}``: apply (or, with 0, undo) prompt
  growth from now on, in the live counters and in the history alike.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from workers.simulators.fleet.exposition import LabelNames, render
from workers.simulators.fleet.fleet import FleetSimulator
from workers.simulators.fleet.history import FleetHistory
from workers.simulators.fleet.query_api import QueryApi


def make_server(
    simulator: FleetSimulator,
    *,
    host: str = "127.0.0.1",
    port: int = 9400,
    labels: LabelNames | None = None,
    clock: Callable[[], float] = time.time,
    history: FleetHistory | None = None,
) -> ThreadingHTTPServer:
    api = QueryApi(history, labels, clock) if history is not None else None

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: str, content_type: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/metrics":
                now = clock()
                simulator.advance_to(now)
                if history is not None:
                    # Prompt growth the history schedules (--drift-at) reaches the live
                    # counters once its moment has come.
                    simulator.set_extra_prompt_tokens(history.extra_now(now))
                self._reply(200, render(simulator, labels), "text/plain; version=0.0.4")
            elif url.path == "/api/v1/query_range" and api is not None:
                params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
                status, body = api.answer(params)
                self._reply(status, json.dumps(body, separators=(",", ":")), "application/json")
            elif url.path == "/healthz":
                self._reply(200, "ok\n")
            else:
                self._reply(404, "not found\n")

        def do_POST(self) -> None:
            if self.path != "/drift":
                self._reply(404, "not found\n")
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                payload = json.loads(self.rfile.read(length) or b"{}")
                tokens = float(payload["extra_prompt_tokens"])
                now = clock()
                simulator.advance_to(now)
                simulator.set_extra_prompt_tokens(tokens)
                if history is not None:
                    history.set_extra_prompt_tokens(at=now, tokens=tokens)
            except (ValueError, KeyError, TypeError) as exc:
                self._reply(400, json.dumps({"error": f"extra_prompt_tokens: {exc}"}) + "\n")
                return
            self._reply(200, json.dumps({"extra_prompt_tokens": tokens}) + "\n")

        def log_message(self, format: str, *args: object) -> None:
            return  # scrapes every few seconds would flood the log

    simulator.advance_to(clock())
    return ThreadingHTTPServer((host, port), Handler)


@contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[str]:
    """Serve ``server`` from a background thread of this process; yields its base URL and
    shuts it down on leaving."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    )
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
