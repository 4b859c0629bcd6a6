"""The Celery app: in-process by default, and a real round trip through a real broker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers.live_services import redis_up
from workers.celery import app, ping

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("HEADROOM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def test_embedded_default_runs_tasks_in_process() -> None:
    assert app.conf.task_always_eager is True
    assert ping.delay().get(timeout=5) == "pong"


@pytest.mark.skipif(
    not redis_up() and os.environ.get("CI") != "true",
    reason="no Redis on 127.0.0.1:6379 (CI always starts one)",
)
def test_round_trip_through_real_redis_broker_and_worker_process() -> None:
    env = {**os.environ, "CELERY_BROKER_URL": REDIS_URL, "CELERY_RESULT_BACKEND": REDIS_URL}
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool=solo",
         "--loglevel=WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat",
         "-Q", "headroom-test-ping"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        code = (
            "from workers.celery import ping;"
            "print(ping.apply_async(queue='headroom-test-ping').get(timeout=30))"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "pong"
    finally:
        worker.terminate()
        worker.wait(timeout=30)
