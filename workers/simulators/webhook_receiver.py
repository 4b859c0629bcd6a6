"""A small webhook receiver for Headroom's allocation webhooks, for tests and demos.

It does what a real consumer must do, in the simplest way:

- verifies each request's signature (``planner.signing``) against its secret and
  refuses a missing, stale or wrong one with 401, and a body that is not a JSON object with 400;
- applies each idempotency key once: the first valid request with a key is recorded as a
  delivery, a later one with the same key is acknowledged (200, ``"duplicate": true``) and
  not applied again;
- keeps, per region, the document of the highest plan version seen (an older plan arriving
  late is acknowledged but does not replace it);
- can be told to fail the next N requests (``fail_next``), with a status of choice, either
  before applying them (the sender must retry) or after (the acknowledgement is lost; the
  sender retries and must not be applied twice).

In-process use (tests)::

    with WebhookReceiver(secret="...") as receiver:
        sink.url = receiver.url
        receiver.fail_next(3)
        ...
        assert len(receiver.deliveries) == 1

From the command line (demos)::

    HEADROOM_WEBHOOK_SECRET=... python -m workers.simulators.webhook_receiver --port 8089 --fail-next 3

It then also answers ``GET /deliveries`` (every applied delivery), ``GET /regions`` (the
latest document per region) and ``POST /fail-next?count=N&status=503&after_apply=0``.
State lives in memory only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from planner import signing

logger = logging.getLogger("headroom.webhook_receiver")

# Bodies larger than this are refused (413): an allocation document is a few kilobytes.
MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Delivery:
    """One applied delivery: the first valid request with its idempotency key."""

    idempotency_key: str
    timestamp: int
    received_at: float
    document: dict[str, Any]

    @property
    def region(self) -> str:
        return str(self.document.get("region", ""))

    @property
    def plan_version(self) -> int:
        plan = self.document.get("plan")
        return int(plan.get("version", 0)) if isinstance(plan, dict) else 0


@dataclass(frozen=True)
class RequestRecord:
    """Every request received, with what the receiver answered and why."""

    idempotency_key: str
    status: int
    reason: str


@dataclass
class _Failures:
    remaining: int = 0
    status: int = 503
    after_apply: bool = False


@dataclass
class _State:
    deliveries: dict[str, Delivery] = field(default_factory=dict)
    latest: dict[str, Delivery] = field(default_factory=dict)
    requests: list[RequestRecord] = field(default_factory=list)
    failures: _Failures = field(default_factory=_Failures)


class WebhookReceiver:
    """An HTTP server on ``host:port`` (port 0 picks a free one) running in a thread."""

    def __init__(
        self,
        *,
        secret: str,
        host: str = "127.0.0.1",
        port: int = 0,
        tolerance_s: float = signing.DEFAULT_TOLERANCE_S,
        control: bool = False,
        delay_s: float = 0.0,
    ) -> None:
        if not secret:
            raise ValueError("the receiver needs the sink's secret")
        if delay_s < 0:
            raise ValueError("delay_s must be zero or more")
        self.secret = secret
        self.tolerance_s = tolerance_s
        self.delay_s = delay_s
        self.control = control
        self._lock = threading.Lock()
        self._state = _State()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/allocations"

    def start(self) -> WebhookReceiver:
        # A short poll interval makes stop() quick (shutdown waits for the next poll).
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="webhook-receiver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control and inspection ------------------------------------------------------------

    def fail_next(self, count: int, *, status: int = 503, after_apply: bool = False) -> None:
        """Answer the next ``count`` signed requests with ``status``; with ``after_apply``
        the delivery is recorded first (as if the acknowledgement were lost on the way)."""
        if count < 0 or not 100 <= status <= 599:
            raise ValueError("count must be ≥ 0 and status an HTTP status")
        with self._lock:
            self._state.failures = _Failures(count, status, after_apply)

    @property
    def deliveries(self) -> dict[str, Delivery]:
        """Applied deliveries by idempotency key (one per key, however often it came)."""
        with self._lock:
            return dict(self._state.deliveries)

    @property
    def latest(self) -> dict[str, Delivery]:
        """The delivery of the highest plan version per region."""
        with self._lock:
            return dict(self._state.latest)

    @property
    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._state.requests)

    # -- the protocol ----------------------------------------------------------------------

    def receive(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """Handle one POST: the status and JSON answer (also usable without HTTP).

        With ``delay_s`` the answer comes that much later (a slow consumer)."""
        if self.delay_s:
            time.sleep(self.delay_s)
        try:
            key = signing.verify(
                secret=self.secret, headers=headers, body=body, tolerance_s=self.tolerance_s
            )
        except signing.SignatureError as exc:
            return self._answer("", 401, f"signature refused: {exc}")
        try:
            document = json.loads(body)
        except ValueError:
            return self._answer(key, 400, "body is not JSON")
        if not isinstance(document, dict):
            return self._answer(key, 400, "body is not a JSON object")
        timestamp = int(signing.header(headers, signing.TIMESTAMP_HEADER))
        with self._lock:
            failures = self._state.failures
            failing = failures.remaining > 0
            if failing:
                failures.remaining -= 1
                if not failures.after_apply:
                    return self._answer_locked(key, failures.status, "told to fail")
            duplicate = key in self._state.deliveries
            if not duplicate:
                delivery = Delivery(key, timestamp, time.time(), document)
                self._state.deliveries[key] = delivery
                current = self._state.latest.get(delivery.region)
                if current is None or delivery.plan_version >= current.plan_version:
                    self._state.latest[delivery.region] = delivery
            if failing:
                return self._answer_locked(key, failures.status, "applied, then told to fail")
            reason = "duplicate: acknowledged, not applied again" if duplicate else "applied"
            status, answer = self._answer_locked(key, 200, reason)
            answer["duplicate"] = duplicate
            return status, answer

    def _answer(self, key: str, status: int, reason: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            return self._answer_locked(key, status, reason)

    def _answer_locked(self, key: str, status: int, reason: str) -> tuple[int, dict[str, Any]]:
        self._state.requests.append(RequestRecord(key, status, reason))
        logger.info("%s %s: %s", status, key or "-", reason)
        return status, {"status": status, "idempotency_key": key, "detail": reason}

    def _control(self, path: str, query: str) -> tuple[int, dict[str, Any]]:
        if path == "/fail-next":
            params = parse_qs(query)
            try:
                count = int(params.get("count", ["1"])[0])
                status = int(params.get("status", ["503"])[0])
                after = params.get("after_apply", ["0"])[0] in ("1", "true", "yes")
                self.fail_next(count, status=status, after_apply=after)
            except ValueError as exc:
                return 400, {"detail": str(exc)}
            return 200, {"detail": f"failing the next {count} requests with {status}"}
        return 404, {"detail": "not found"}

    def _read(self, path: str) -> tuple[int, Any]:
        if path == "/deliveries":
            return 200, [
                {"idempotency_key": d.idempotency_key, "timestamp": d.timestamp, **d.document}
                for d in self.deliveries.values()
            ]
        if path == "/regions":
            return 200, {region: d.document for region, d in sorted(self.latest.items())}
        return 404, {"detail": "not found"}


def _handler_for(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "HeadroomWebhookReceiver/1"

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("%s " + format, self.address_string(), *args)

        def _send(self, status: int, answer: Any) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if not receiver.control:
                self._send(404, {"detail": "not found"})
                return
            self._send(*receiver._read(urlsplit(self.path).path))

        def do_POST(self) -> None:
            parts = urlsplit(self.path)
            if receiver.control and parts.path == "/fail-next":
                self._send(*receiver._control(parts.path, parts.query))
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY_BYTES:
                self._send(413 if length > MAX_BODY_BYTES else 400, {"detail": "bad length"})
                return
            body = self.rfile.read(length)
            headers = {name: value for name, value in self.headers.items()}
            self._send(*receiver.receive(headers, body))

    return Handler


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument(
        "--secret-env",
        default="HEADROOM_WEBHOOK_SECRET",
        help="environment variable holding the sink's secret",
    )
    parser.add_argument("--tolerance-s", type=float, default=signing.DEFAULT_TOLERANCE_S)
    parser.add_argument("--fail-next", type=int, default=0, help="fail this many requests first")
    parser.add_argument("--fail-status", type=int, default=503)
    parser.add_argument("--delay-s", type=float, default=0.0, help="answer this much later")
    args = parser.parse_args(argv)
    secret = os.environ.get(args.secret_env, "")
    if not secret:
        print(f"set {args.secret_env} to the sink's secret", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    receiver = WebhookReceiver(
        secret=secret,
        host=args.host,
        port=args.port,
        tolerance_s=args.tolerance_s,
        control=True,
        delay_s=args.delay_s,
    )
    receiver.fail_next(args.fail_next, status=args.fail_status)
    logger.info("listening on %s", receiver.url)
    try:
        receiver.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
