"""The Prometheus client against a local stand-in server: good answers, garbage, errors, down."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from controlplane.telemetry.prometheus import (
    PrometheusBadResponse,
    PrometheusClient,
    PrometheusQueryError,
    PrometheusUnavailable,
)

MATRIX = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            {
                "metric": {"tenant": "acme", "region": "eu-west"},
                "values": [[1700000000, "1.5"], [1700000300, "NaN"], [1700000600, "2"]],
            }
        ],
    },
}


class Script:
    """What the stand-in answers, one entry per request (the last one repeats)."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, bytes]] = [(200, json.dumps(MATRIX).encode())]
        self.paths: list[str] = []


@pytest.fixture
def prom() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            script.paths.append(self.path)
            index = min(len(script.paths), len(script.answers)) - 1
            status, body = script.answers[index]
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", script
    finally:
        server.shutdown()
        server.server_close()


def _client(url: str, sleeps: list[float] | None = None) -> PrometheusClient:
    record = sleeps if sleeps is not None else []
    return PrometheusClient(url, timeout_s=2, retries=2, backoff_s=0.25, sleep=record.append)


def test_range_query_returns_points_and_skips_nan(prom: tuple[str, Script]) -> None:
    url, script = prom
    series = _client(url).query_range("up", start=1700000000, end=1700000600, step_s=300)
    assert len(series) == 1
    assert series[0].labels == {"tenant": "acme", "region": "eu-west"}
    assert series[0].points == ((1700000000.0, 1.5), (1700000600.0, 2.0))
    assert script.paths[0].startswith("/api/v1/query_range?query=up&start=1700000000.000")


def test_server_errors_are_retried_with_backoff_then_succeed(prom: tuple[str, Script]) -> None:
    url, script = prom
    script.answers = [(503, b"busy"), (502, b"bad gateway"), (200, json.dumps(MATRIX).encode())]
    sleeps: list[float] = []
    series = _client(url, sleeps).query_range("up", start=0, end=600, step_s=300)
    assert len(series) == 1
    assert sleeps == [0.25, 0.5]
    assert len(script.paths) == 3


def test_persistent_server_errors_make_it_unavailable(prom: tuple[str, Script]) -> None:
    url, script = prom
    script.answers = [(503, b"busy")]
    with pytest.raises(PrometheusUnavailable, match="did not answer after 3 tries"):
        _client(url).query_range("up", start=0, end=600, step_s=300)


def test_a_bad_query_is_not_retried(prom: tuple[str, Script]) -> None:
    url, script = prom
    script.answers = [(400, json.dumps({"status": "error", "error": "parse error"}).encode())]
    with pytest.raises(PrometheusQueryError, match="parse error"):
        _client(url).query_range("up{", start=0, end=600, step_s=300)
    assert len(script.paths) == 1


@pytest.mark.parametrize(
    "body",
    [
        b"<html>proxy error</html>",
        b'{"data": {}}',
        b'{"status": "success", "data": {"resultType": "vector", "result": []}}',
        b'{"status": "success", "data": {"resultType": "matrix", "result": [{"values": []}]}}',
        b'{"status": "success", "data": {"resultType": "matrix", '
        b'"result": [{"metric": {}, "values": [["x", "y"]]}]}}',
    ],
)
def test_garbage_is_a_bad_response(prom: tuple[str, Script], body: bytes) -> None:
    url, script = prom
    script.answers = [(200, body)]
    with pytest.raises(PrometheusBadResponse):
        _client(url).query_range("up", start=0, end=600, step_s=300)


def test_nobody_listening_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sleeps: list[float] = []
    with pytest.raises(PrometheusUnavailable):
        _client(f"http://127.0.0.1:{port}", sleeps).query_range("up", start=0, end=1, step_s=1)
    assert len(sleeps) == 2


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="http"):
        PrometheusClient("prometheus:9090")
    client = PrometheusClient("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="end is before start"):
        client.query_range("up", start=10, end=0, step_s=1)
    with pytest.raises(ValueError, match="step_s"):
        client.query_range("up", start=0, end=10, step_s=0)
