"""The web process as ``deploy/kubernetes`` runs it answers the kubelet's probes.

gunicorn is started with the web container's own command (bound to a free loopback port
instead of 0.0.0.0:8000) and the manifests' environment: the ConfigMap (``DEBUG=false``, the
public ``ALLOWED_HOSTS``) plus generated secrets, on a SQLite file instead of the cluster's
PostgreSQL. A kubelet sends the pod's IP as the Host header: the probe paths answer 200 to it,
while every other path, and an unknown host name on any path, still gets Django's 400. Static
files are collected as the image build does and served by the web process itself.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.workers.live_services import free_port, stop

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
POD_IP = "10.244.3.17"
START_S = 90.0


def manifest_environment(tmp: Path) -> dict[str, str]:
    (config,) = [
        d for d in yaml.safe_load_all((K8S / "config.yaml").read_text()) if d["kind"] == "ConfigMap"
    ]
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO", "HEADROOM_", "CELERY_")) and key != "DEBUG"
    }
    env.update({str(k): str(v) for k, v in config["data"].items()})
    env.update(
        SECRET_KEY=secrets.token_urlsafe(60),
        DATABASE_URL=f"sqlite:///{tmp / 'web.sqlite3'}",
        STATIC_ROOT=str(tmp / "static"),
        HEADROOM_VAR_DIR=str(tmp),
        DJANGO_SETTINGS_MODULE="controlplane.settings",
    )
    return env


def web_command(port: int) -> list[str]:
    web = next(
        d
        for d in yaml.safe_load_all((K8S / "web.yaml").read_text())
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "headroom-web"
    )
    (container,) = web["spec"]["template"]["spec"]["containers"]
    command = list(container["command"])
    assert command[0] == "gunicorn"
    command[command.index("--bind") + 1] = f"127.0.0.1:{port}"
    command[command.index("--workers") + 1] = "1"
    return [sys.executable, "-m", *command]


def get(port: int, path: str, host: str, **headers: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers={"Host": host, **headers})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def start_web(env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """The manifest's web command on a free loopback port (``extra`` options after it), once
    it answers ``/healthz``."""
    port = free_port()
    process = subprocess.Popen(
        [*web_command(port), *extra],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + START_S
    while True:
        if process.poll() is not None:
            stop(process)
            raise RuntimeError(
                f"gunicorn exited: {process.stderr.read() if process.stderr else ''!r}"
            )
        try:
            get(port, "/healthz", "127.0.0.1")
            return process, port
        except OSError:
            if time.monotonic() > deadline:
                stop(process)
                raise
            time.sleep(0.2)


@pytest.fixture(scope="module")
def web_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("web")
    env = manifest_environment(tmp)
    # As the image build does (deploy/Dockerfile); the probes need no migrated schema.
    for args in (("collectstatic", "--noinput"),):
        done = subprocess.run(
            [sys.executable, "manage.py", *args, "-v", "0"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
    return env


@pytest.fixture(scope="module")
def web(web_env: dict[str, str]) -> Iterator[int]:
    process, port = start_web(web_env)
    try:
        yield port
    finally:
        stop(process)


def test_the_kubelets_probes_from_the_pod_ip_are_answered(web: int) -> None:
    for path in ("/readyz", "/healthz"):
        status, body = get(web, path, f"{POD_IP}:8000")
        assert (status, body) == (200, b"ok\n"), path
    assert get(web, "/readyz", "[fd00:10:244::17]:8000")[0] == 200


def test_other_paths_and_unknown_hosts_are_still_refused(web: int) -> None:
    # The pod IP opens the probe paths only: ALLOWED_HOSTS is unchanged everywhere else.
    assert get(web, "/api/", f"{POD_IP}:8000")[0] == 400
    assert get(web, "/admin/login/", "attacker.example")[0] == 400
    assert get(web, "/healthz", "attacker.example")[0] == 400


def test_the_public_host_is_served_with_static_files(web: int) -> None:
    https = {"X-Forwarded-Proto": "https"}
    status, page = get(web, "/admin/login/", "headroom.example.com", **https)
    assert status == 200
    # The login page links the collected, hashed stylesheet; the web process serves it.
    marker = b"/static/admin/css/base."
    start = page.index(marker)
    href = page[start : page.index(b'"', start)].decode()
    assert href != "/static/admin/css/base.css"  # a hashed name, cacheable forever
    status, css = get(web, href, "headroom.example.com", **https)
    assert status == 200 and b"body" in css


def test_production_refuses_a_placeholder_secret_key(tmp_path: Path) -> None:
    env = manifest_environment(tmp_path)
    for placeholder in ("replace-with-60-random-characters", "short"):
        env["SECRET_KEY"] = placeholder
        done = subprocess.run(
            [sys.executable, "manage.py", "check"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0
        assert "SECRET_KEY looks like a placeholder" in done.stderr


def raw_exchange(port: int, request: bytes) -> tuple[int, str, dict[str, Any]]:
    """Send ``request`` as it is; the status, the Content-Type and the JSON body answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    assert headers["Content-Length"] == str(len(body))
    return int(status_line.split(" ")[1]), headers["Content-Type"], json.loads(body)


# Requests gunicorn refuses while parsing them, before Django sees them, and what it answers.
REFUSED_BY_THE_SERVER = (
    # A request line over limit_request_line (4,094 bytes): a query too long to read.
    (b"GET /api/tenants/?" + b"limit=1&" * 600 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
     414, "uri_too_long", "4094 bytes"),
    # More headers than limit_request_fields (100).
    (b"GET /api/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
     + b"".join(b"X-Filler-%d: 1\r\n" % i for i in range(120)) + b"\r\n",
     431, "headers_too_large", "100 headers"),
    # Not HTTP at all.
    (b"NOT HTTP\r\n\r\n", 400, "bad_request", "Invalid HTTP request line"),
)  # fmt: skip


def assert_refusals_are_api_errors(port: int) -> None:
    for request, status, code, said in REFUSED_BY_THE_SERVER:
        answered, content_type, body = raw_exchange(port, request)
        assert (answered, content_type) == (status, "application/json"), request[:40]
        assert body["error"]["code"] == code
        assert said in body["error"]["message"]
    # The worker still serves after refusing.
    assert get(port, "/healthz", "127.0.0.1") == (200, b"ok\n")


def test_requests_the_server_refuses_get_the_api_error_body(web: int) -> None:
    assert_refusals_are_api_errors(web)


def test_a_threaded_worker_refuses_with_the_api_error_body_too(web_env: dict[str, str]) -> None:
    # --threads above one makes gunicorn pick its gthread worker instead of sync.
    process, port = start_web(web_env, "--threads", "2")
    try:
        assert_refusals_are_api_errors(port)
    finally:
        stop(process)
