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
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
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
    port = free_port()
    process = subprocess.Popen(
        web_command(port), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + START_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"gunicorn exited: {process.stderr.read() if process.stderr else ''!r}"
                )
            try:
                get(port, "/healthz", "127.0.0.1")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
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
