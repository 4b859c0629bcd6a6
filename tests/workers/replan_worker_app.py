"""The Celery app as a worker for the SIGKILL test runs it (``celery -A
tests.workers.replan_worker_app worker``).

It is the project's app with two changes for the test: Redis hands an unacknowledged task to
another worker after 5 s rather than an hour, and each re-plan solve first sleeps
``HEADROOM_TEST_SOLVE_DELAY_S`` seconds, so the test can kill the worker in the middle of one.
"""

from __future__ import annotations

import os
import time
from typing import Any

import django

from workers.celery import app

django.setup()

from controlplane.plans import services  # noqa: E402  (needs the apps loaded)

app.conf.broker_transport_options = {
    "visibility_timeout": 5,
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
}

SOLVE_DELAY_S = float(os.environ.get("HEADROOM_TEST_SOLVE_DELAY_S", "0"))
_solve = services._solve


def _slow_solve(*args: Any, **kwargs: Any) -> dict[str, Any]:
    time.sleep(SOLVE_DELAY_S)
    return _solve(*args, **kwargs)


if SOLVE_DELAY_S > 0:
    services._solve = _slow_solve

__all__ = ["app"]
