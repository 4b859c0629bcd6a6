"""End to end: a real Celery worker on Redis is killed with SIGKILL in the middle of a
re-plan; a new worker gets the unacknowledged task again and exactly one plan is stored.

Runs only with ``HEADROOM_E2E=1`` and a Redis at 127.0.0.1:6379 (it uses database 14 and
empties it). Everything runs in subprocesses on a SQLite file of its own: migrate, load the
support-assistant scenario, a worker whose solve sleeps 60 s, the re-plan queued through the
broker, SIGKILL once the run is running, then a worker without the delay. About a minute.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.workers.live_services import manage, redis_up

REPO = Path(__file__).resolve().parents[2]
BROKER = "redis://127.0.0.1:6379/14"


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("HEADROOM_E2E") != "1", reason="set HEADROOM_E2E=1"),
    pytest.mark.skipif(not redis_up(), reason="no Redis at 127.0.0.1:6379"),
]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "CELERY_"))}
    variables.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'e2e.sqlite3'}",
        HEADROOM_VAR_DIR=str(tmp_path),
        CELERY_BROKER_URL=BROKER,
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        LOG_LEVEL="WARNING",
    )
    return variables


@pytest.fixture
def workers(env: dict[str, str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for worker in started:
        if worker.poll() is None:
            worker.kill()
        worker.wait(timeout=30)


def _worker(env: dict[str, str], solve_delay_s: float, log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "celery", "-A", "tests.workers.replan_worker_app", "worker",
        "--pool", "solo", "--without-heartbeat", "--without-gossip", "--without-mingle",
        "--loglevel", "INFO",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(
            command,
            cwd=REPO,
            env={**env, "HEADROOM_TEST_SOLVE_DELAY_S": str(solve_delay_s)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _run_row(database: Path, run_id: int) -> tuple[str, int]:
    with sqlite3.connect(database, timeout=10) as db:
        row = db.execute(
            "SELECT status, attempts FROM plans_replanrun WHERE id = ?", (run_id,)
        ).fetchone()
    return str(row[0]), int(row[1])


def _wait_for(database: Path, run_id: int, statuses: set[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, _ = _run_row(database, run_id)
        if status in statuses:
            return status
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not reach {statuses} in {timeout_s} s")


def test_a_worker_killed_mid_replan_leaves_exactly_one_plan(
    env: dict[str, str], workers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    import redis

    redis.Redis.from_url(BROKER).flushdb()
    database = tmp_path / "e2e.sqlite3"
    manage(env, "migrate", "--noinput", "--verbosity", "0")
    manage(env, "load_scenario", "docs/scenarios/support-assistant.yaml")

    workers.append(_worker(env, 60.0, tmp_path / "worker-1.log"))
    queued = manage(
        env,
        "shell",
        "-c",
        "from controlplane.plans.models import Plan;"
        "from controlplane.plans.services import replan_request;"
        "print(replan_request(trigger=Plan.Trigger.API).pk)",
    )
    run_id = int(queued.strip().splitlines()[-1])

    _wait_for(database, run_id, {"running"}, timeout_s=120)
    time.sleep(1.0)  # inside the slowed solve
    workers[0].send_signal(signal.SIGKILL)
    workers[0].wait(timeout=30)
    assert _run_row(database, run_id) == ("running", 1)

    workers.append(_worker(env, 0.0, tmp_path / "worker-2.log"))
    status = _wait_for(database, run_id, {"succeeded", "failed", "skipped"}, timeout_s=120)

    log = (tmp_path / "worker-2.log").read_text(errors="replace")
    assert status == "succeeded", log
    assert _run_row(database, run_id) == ("succeeded", 2)
    with sqlite3.connect(database) as db:
        plans = db.execute("SELECT version, state FROM plans_plan").fetchall()
        lock = db.execute("SELECT holder FROM plans_plannerlock").fetchall()
    assert plans == [(1, "active")]
    assert lock == [("",)]
