"""A redelivered or retried re-plan task is harmless: a worker dying mid-re-plan, a task run
twice, an expired claim of a dead worker, a live claim of another run, and a claim lost while
solving all end with at most one plan per input."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane.plans import lock, services
from controlplane.plans.models import Plan, PlannerLock, ReplanRun
from controlplane.plans.services import replan_request
from controlplane.plans.tasks import replan, replan_scheduled
from tests.controlplane.plans_helpers import load_support_assistant

pytestmark = pytest.mark.django_db


class WorkerKilled(BaseException):
    """Stands for SIGKILL: no handler of the task runs (it is not an ``Exception``)."""


@pytest.fixture(autouse=True)
def scenario() -> None:
    load_support_assistant()


def _queued() -> ReplanRun:
    return replan_request(trigger=Plan.Trigger.SCHEDULE, enqueue=False)


def _lock_row() -> PlannerLock:
    return PlannerLock.objects.get(name=lock.REPLAN_LOCK)


def test_a_worker_killed_after_solving_stores_exactly_one_plan_after_redelivery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = _queued()
    real_store = services.plan_store
    stores: list[int] = []

    def killed_once(**kwargs: Any) -> Plan:
        stores.append(1)
        if len(stores) == 1:
            raise WorkerKilled  # after the solve, before the plan's transaction commits
        return real_store(**kwargs)

    monkeypatch.setattr(services, "plan_store", killed_once)

    with pytest.raises(WorkerKilled):
        replan(run.pk)

    run.refresh_from_db()
    assert run.status == ReplanRun.Status.RUNNING and run.attempts == 1
    assert Plan.objects.count() == 0
    assert _lock_row().holder == f"run:{run.pk}"

    # The broker redelivers the unacknowledged task: the same run gets its claim back.
    assert replan(run.pk) == ReplanRun.Status.SUCCEEDED

    run.refresh_from_db()
    assert run.attempts == 2 and run.plan is not None
    assert Plan.objects.count() == 1
    assert _lock_row().holder == ""


def test_a_task_delivered_twice_runs_once() -> None:
    run = _queued()

    assert replan(run.pk) == ReplanRun.Status.SUCCEEDED
    assert replan(run.pk) == ReplanRun.Status.SUCCEEDED

    run.refresh_from_db()
    assert run.attempts == 1
    assert Plan.objects.count() == 1


def test_an_expired_claim_of_a_dead_worker_is_taken_over(settings: Any) -> None:
    dead = _queued()
    claim = lock.lock_claim(holder=lock.lock_holder_for_run(dead.pk), ttl_s=60)
    assert claim.claimed
    ReplanRun.objects.filter(pk=dead.pk).update(status=ReplanRun.Status.RUNNING, attempts=1)
    PlannerLock.objects.filter(name=lock.REPLAN_LOCK).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    fresh = _queued()
    assert replan(fresh.pk) == ReplanRun.Status.SUCCEEDED

    dead.refresh_from_db()
    assert dead.status == ReplanRun.Status.FAILED
    assert dead.error.startswith("Abandoned") and f"run:{fresh.pk}" in dead.error
    # The dead worker's task, redelivered later, finds its run closed.
    assert replan(dead.pk) == ReplanRun.Status.FAILED
    assert Plan.objects.count() == 1


def test_a_live_claim_of_another_run_skips_this_one() -> None:
    running = _queued()
    assert lock.lock_claim(holder=lock.lock_holder_for_run(running.pk), ttl_s=600).claimed

    skipped = _queued()
    assert replan(skipped.pk) == ReplanRun.Status.SKIPPED

    skipped.refresh_from_db()
    assert f"run:{running.pk}" in skipped.error and "holds the planner lock" in skipped.error
    assert Plan.objects.count() == 0
    assert _lock_row().holder == f"run:{running.pk}"
    # Redelivered, a skipped run stays skipped.
    assert replan(skipped.pk) == ReplanRun.Status.SKIPPED


def test_a_claim_lost_while_solving_stores_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _queued()
    real_solve = services._solve

    def solve_and_lose_the_lock(*args: Any, **kwargs: Any) -> dict[str, Any]:
        solution = real_solve(*args, **kwargs)
        # Meanwhile the claim expired and another run took it over.
        PlannerLock.objects.filter(name=lock.REPLAN_LOCK).update(holder="run:999999")
        return solution

    monkeypatch.setattr(services, "_solve", solve_and_lose_the_lock)

    assert replan(run.pk) == ReplanRun.Status.FAILED

    run.refresh_from_db()
    assert "LockLost" in run.error
    assert Plan.objects.count() == 0
    assert _lock_row().holder == "run:999999", "a run never releases another run's claim"


def test_the_lock_renews_and_releases_only_for_its_holder() -> None:
    first = lock.lock_claim(holder="run:1", ttl_s=60)
    assert first.claimed and first.taken_over_from is None
    assert lock.lock_claim(holder="run:1", ttl_s=60).claimed, "a holder may claim again"
    second = lock.lock_claim(holder="run:2", ttl_s=60)
    assert not second.claimed and second.held_by == "run:1" and second.expires_at

    assert not lock.lock_renew(holder="run:2", ttl_s=60)
    assert not lock.lock_release(holder="run:2")
    assert lock.lock_held_by(holder="run:1")
    assert lock.lock_renew(holder="run:1", ttl_s=60)
    assert lock.lock_release(holder="run:1")
    assert lock.lock_claim(holder="run:2", ttl_s=60).claimed


def test_the_scheduled_task_requests_a_run_that_runs_after_commit(
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        run_id = replan_scheduled()

    run = ReplanRun.objects.get(pk=run_id)
    assert run.trigger == Plan.Trigger.SCHEDULE
    assert run.status == ReplanRun.Status.SUCCEEDED
    assert run.plan is not None and run.plan.trigger == Plan.Trigger.SCHEDULE
