"""A benchmark requested from the web app with Ray unreachable fails with a reason, and the
web server goes on serving (embedded default: no broker).

Before, the run started Ray inside the request thread: the request took seconds, and when Ray
could not reach its cluster it ended the whole server process. Runs only with
``HEADROOM_E2E=1`` (CI sets it): a real gunicorn on loopback, a real Ray client that finds no
cluster (``ray://127.0.0.1:<closed port>``, about 40 s to give up).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.workers.live_services import REPO, free_port, manage, stop, wait_for_url

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("HEADROOM_E2E") != "1", reason="set HEADROOM_E2E=1"),
]

SETUP = """
from django.contrib.auth.models import Group, User
from rest_framework.authtoken.models import Token
user = User.objects.create_user("ops", password="unused-pw-8c1f")
user.groups.add(Group.objects.get_or_create(name="policy-admin")[0])
print(Token.objects.create(user=user).key)
"""


def call(url: str, token: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.loads(response.read())


def test_a_benchmark_with_ray_unreachable_fails_and_the_server_survives(tmp_path: Path) -> None:
    port, ray_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "CELERY_"))}
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'web.sqlite3'}",
        HEADROOM_VAR_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        HEADROOM_RAY_ADDRESS=f"ray://127.0.0.1:{ray_port}",
    )
    manage(env, "migrate", "--noinput", "--verbosity", "0")
    manage(env, "load_scenario", "docs/scenarios/support-assistant.yaml")
    token = manage(env, "shell", "-c", SETUP).strip().splitlines()[-1]
    shape = manage(
        env, "shell", "-c", "from controlplane.fleet.models import ReplicaShape; "
        "print(ReplicaShape.objects.order_by('pk').first().name)"
    ).strip().splitlines()[-1]  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:controlplane.serving", "controlplane.wsgi",
         "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--threads", "2", "--timeout", "120"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_url(f"{base}/admin/login/", 90, server)
        status, run = call(f"{base}/api/benchmarks/runs/", token, {"shape": shape})
        assert status == 202
        assert run["status"] in ("queued", "running")  # answered before the run finished
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            _, run = call(f"{base}/api/benchmarks/runs/{run['id']}/", token)
            if run["status"] not in ("queued", "running"):
                break
            time.sleep(2)
        assert run["status"] == "failed", run
        assert "ray" in run["error"].lower(), run["error"]
        assert server.poll() is None  # the web process is still there...
        status, _ = call(f"{base}/api/tenants/", token)
        assert status == 200  # ...and serving
    finally:
        stop(server)
