"""Two re-plans triggered at once: one runs, the other is skipped (or, asked to wait, runs
after it and finds the inputs unchanged). Real threads with their own database connections
contend for the planner lock row, on SQLite and on PostgreSQL alike.

SQLite note: the test database is in memory with a shared cache, where a writer that meets
another's lock fails at once instead of waiting; the claim is a single UPDATE, so only the
claim itself is contended and the lock decides who runs. Each thread opens its own
connection and closes it at the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from controlplane.plans import services
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.services import replan_execute, replan_request
from tests.controlplane.plans_helpers import load_support_assistant

pytestmark = pytest.mark.django_db(transaction=True)

# How long the solve is held up when the other re-plan waits for the lock, seconds.
SLOW_SOLVE_S = 0.8


@pytest.fixture
def slow_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    real_solve = services._solve

    def slow(*args: Any, **kwargs: Any) -> dict[str, Any]:
        time.sleep(SLOW_SOLVE_S)
        return real_solve(*args, **kwargs)

    monkeypatch.setattr(services, "_solve", slow)


@pytest.fixture
def solve_until_the_other_ended(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The solve holds the lock until the other re-plan has ended, so the two surely overlap
    however late the machine runs the other thread (a fixed sleep would race with it)."""
    ended = threading.Event()
    real_solve = services._solve

    def held(*args: Any, **kwargs: Any) -> dict[str, Any]:
        assert ended.wait(timeout=60), "the other re-plan never ended"
        return real_solve(*args, **kwargs)

    monkeypatch.setattr(services, "_solve", held)
    return ended


def _in_threads(*targets: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported to the test below
                errors.append(exc)
            finally:
                connection.close()

        return run

    threads = [threading.Thread(target=guarded(t)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors


def _trigger(
    barrier: threading.Barrier,
    statuses: list[str],
    wait_s: float = 0.0,
    ended: threading.Event | None = None,
) -> Callable[[], None]:
    queued = replan_request(trigger=Plan.Trigger.API, enqueue=False)

    def run() -> None:
        barrier.wait(timeout=30)
        finished = replan_execute(run_id=queued.pk, wait_s=wait_s)
        assert finished is not None
        statuses.append(finished.status)
        if ended is not None:
            ended.set()

    return run


def test_two_replans_at_once_one_runs_the_other_is_skipped(
    solve_until_the_other_ended: threading.Event,
) -> None:
    load_support_assistant()
    barrier = threading.Barrier(2)
    statuses: list[str] = []
    ended = solve_until_the_other_ended

    _in_threads(_trigger(barrier, statuses, ended=ended), _trigger(barrier, statuses, ended=ended))

    assert sorted(statuses) == [ReplanRun.Status.SKIPPED, ReplanRun.Status.SUCCEEDED]
    assert Plan.objects.count() == 1
    skipped = ReplanRun.objects.get(status=ReplanRun.Status.SKIPPED)
    succeeded = ReplanRun.objects.get(status=ReplanRun.Status.SUCCEEDED)
    assert f"run:{succeeded.pk}" in skipped.error


def test_a_replan_asked_to_wait_runs_after_the_other(slow_solve: None) -> None:
    load_support_assistant()
    barrier = threading.Barrier(2)
    statuses: list[str] = []

    _in_threads(_trigger(barrier, statuses, wait_s=30), _trigger(barrier, statuses, wait_s=30))

    # The second finds the plan the first stored and the same inputs: nothing new.
    assert sorted(statuses) == [ReplanRun.Status.SUCCEEDED, ReplanRun.Status.UNCHANGED]
    assert Plan.objects.count() == 1
