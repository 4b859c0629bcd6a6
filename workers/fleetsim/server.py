"""HTTP server for the simulated fleet.

- ``GET /metrics``: Prometheus text format, advanced to the current time first.
- ``GET /healthz``: ``ok``.
- ``POST /drift`` with ``{"extra_prompt_tokens": 1200}``: apply (or, with 0, undo) prompt
  growth from now on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from workers.fleetsim.exposition import LabelNames, render
from workers.fleetsim.fleet import FleetSimulator


def make_server(
    simulator: FleetSimulator,
    *,
    host: str = "127.0.0.1",
    port: int = 9400,
    labels: LabelNames | None = None,
    clock: Callable[[], float] = time.time,
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: str, content_type: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/metrics":
                simulator.advance_to(clock())
                self._reply(200, render(simulator, labels), "text/plain; version=0.0.4")
            elif self.path == "/healthz":
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
                simulator.advance_to(clock())
                simulator.set_extra_prompt_tokens(tokens)
            except (ValueError, KeyError, TypeError) as exc:
                self._reply(400, json.dumps({"error": f"extra_prompt_tokens: {exc}"}) + "\n")
                return
            self._reply(200, json.dumps({"extra_prompt_tokens": tokens}) + "\n")

        def log_message(self, format: str, *args: object) -> None:
            return  # scrapes every few seconds would flood the log

    simulator.advance_to(clock())
    return ThreadingHTTPServer((host, port), Handler)
