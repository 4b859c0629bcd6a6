"""End to end: PostgreSQL and Redis restarted under the control plane, on private servers.

Runs only with ``HEADROOM_E2E=1``. A PostgreSQL cluster of the module's own (initdb into a
temporary folder, a free port; as the ``postgres`` user when run as root) and a redis-server
of its own without persistence are started, and only they are stopped and restarted; the
shared services are never touched. The control plane runs in subprocesses whose
``DATABASE_URL`` (and broker) name the private servers: migrations and the support-assistant
scenario once, then each case (``driver.py``) restarts the server at the moment it needs and
reports what the database holds afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.controlplane.faults.support import PrivatePostgres, PrivateRedis
from tests.workers.live_services import REPO, manage

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("HEADROOM_E2E") != "1", reason="set HEADROOM_E2E=1"),
    pytest.mark.skipif(not PrivatePostgres.available(), reason="no PostgreSQL 15 binaries"),
    # The cases run on clusters of their own whatever the suite's database is: once per CI run
    # (the SQLite pass) is enough.
    pytest.mark.skipif(
        os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="runs on its own servers; run once, in the SQLite pass",
    ),
]

SCENARIO = REPO / "docs" / "scenarios" / "support-assistant.yaml"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres()
    try:
        pg.init()
        yield pg
    finally:
        pg.destroy()


@pytest.fixture(scope="module")
def env(postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "CELERY_"))}
    variables.update(
        DATABASE_URL=postgres.url,
        HEADROOM_VAR_DIR=str(tmp_path_factory.mktemp("faults-var")),
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        LOG_LEVEL="WARNING",
        HEADROOM_RETRY_AFTER_S="17",
        # Short solves: the faults, not the plans, are under test.
        HEADROOM_REPLAN_TIME_LIMIT_S="2",
        HEADROOM_REPLAN_BAND_TIME_LIMIT_S="0.5",
        **postgres.env(),
    )
    manage(variables, "migrate", "--noinput", "--verbosity", "0")
    manage(variables, "load_scenario", str(SCENARIO))
    return variables


def _case(env: dict[str, str], name: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.controlplane.faults.driver", name],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, f"case {name} failed:\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_api_answers_503_with_retry_after_while_postgres_is_down(env: dict[str, str]) -> None:
    result = _case(env, "api")
    assert result["down"] == {
        "status": 503,
        "retry_after": "17",
        "code": "unavailable",
        "readyz": 503,
        "readyz_retry_after": "17",
    }
    assert (result["up"]["status"], result["up"]["readyz"]) == (200, 200)


def test_postgres_restarted_during_a_pull_stores_each_sample_once(env: dict[str, str]) -> None:
    result = _case(env, "pull")
    # The pull met the restart: it raised (its task is retried), stored nothing, and its
    # report says why, written on a new connection.
    assert result["raised"] in {"OperationalError", "InterfaceError"}
    assert result["failed_pull"]["status"] == "failed"
    assert "Error" in result["failed_pull"]["error"]
    assert result["stored_after_failure"] == 0
    # Pulled again: every bucket once; a third pull of the same window adds nothing.
    metrics, buckets = result["series"], result["buckets"]
    assert result["second_pull"]["status"] == "succeeded"
    assert result["second_pull"]["samples_stored"] == metrics * buckets == result["samples"]
    assert result["third_pull"]["samples_stored"] == 0
    assert buckets == 10
    assert result["duplicated"] == 0


def test_postgres_restarted_during_a_replan_stores_one_whole_plan(env: dict[str, str]) -> None:
    result = _case(env, "replan")
    assert result["restarted"]
    failed = result["failed_run"]
    assert (failed["status"], failed["plan"]) == ("failed", None)
    assert failed["error"]
    assert result["plans_after_failure"] == result["plans_before"]
    retried = result["retried_run"]
    assert retried["status"] == "succeeded", retried
    new = [p for p in result["plans"] if p["id"] == retried["plan"]]
    assert len(result["plans"]) == result["plans_before"] + 1
    assert new and new[0]["allocations"] > 0 and new[0]["runs"] == 1
    assert result["lock_holders"] == []


@pytest.fixture
def redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool", "solo",
             "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _statuses(postgres: PrivatePostgres, runs: list[str]) -> dict[str, str]:
    """The runs' statuses, read straight from the private cluster."""
    with psycopg.connect(postgres.url.replace("postgres://", "postgresql://")) as db:
        rows = db.execute(
            "SELECT id, status FROM plans_replanrun WHERE id = ANY(%s)", ([int(r) for r in runs],)
        ).fetchall()
    return {str(pk): str(status) for pk, status in rows}


def test_redis_restarted_with_tasks_queued_the_sweep_sends_them_again(
    env: dict[str, str], postgres: PrivatePostgres, redis: PrivateRedis, tmp_path: Path
) -> None:
    """Redis keeps nothing on disk: a restart loses the queued re-plans. Their rows stay
    queued; the recovery sweep sends them again and a worker runs them to the end."""
    with_broker = {**env, "CELERY_BROKER_URL": redis.url}
    runs = [str(pk) for pk in _case(with_broker, "enqueue")["runs"]]
    redis.restart()
    worker = _worker(with_broker, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 60
        while b"ready" not in (tmp_path / "worker.log").read_bytes():
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.2)
        # The messages are gone: nothing runs them.
        status = _statuses(postgres, runs)
        assert [status[pk] for pk in runs] == ["queued", "queued"]
        report = _case(with_broker, "recover")
        assert sorted(report["resent"]) == sorted(f"replanrun {pk}" for pk in runs)
        while True:
            status = _statuses(postgres, runs)
            if all(status[pk] not in ("queued", "running") for pk in runs):
                break
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline + 60, status
            time.sleep(0.5)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    # One of them made the plan; the other found the inputs unchanged (or the lock held).
    assert sorted(status[pk] for pk in runs)[0] in ("skipped", "succeeded", "unchanged")
    assert "failed" not in [status[pk] for pk in runs], (tmp_path / "worker.log").read_text()
