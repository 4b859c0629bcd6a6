"""A beat tick delivered twice (beat restarted, two beat processes) makes one job.

Deliveries carry the header django-celery-beat puts on every message
(``periodic_task_name``); ``Task.apply(headers=...)`` delivers them as a worker would, and the
race runs two deliveries at once on PostgreSQL, each thread on its own connection.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from controlplane.core.models import ScheduleTick
from controlplane.core.schedule import tick_claim
from controlplane.pipeline.schedule import schedule_install
from controlplane.pipeline.tasks import pull
from controlplane.plans import tasks as plan_tasks
from controlplane.plans.models import ReplanRun
from controlplane.telemetry.models import TelemetryPull

REPLAN_ENTRY = "plans: re-plan"
PULL_ENTRY = "telemetry: pull from Prometheus"


def _beat(name: str) -> dict[str, str]:
    return {"periodic_task_name": name}


@pytest.fixture
def no_replan_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduled request creates its run without running it (the run itself is tested
    elsewhere; here only how many runs a tick creates matters)."""
    real = plan_tasks.replan_request
    monkeypatch.setattr(plan_tasks, "replan_request", lambda **kw: real(**kw, enqueue=False))


@pytest.mark.django_db
def test_the_same_replan_tick_delivered_twice_makes_one_run(no_replan_run: None) -> None:
    schedule_install(parts=["plans"])
    first = plan_tasks.replan_scheduled.apply(headers=_beat(REPLAN_ENTRY)).get()
    second = plan_tasks.replan_scheduled.apply(headers=_beat(REPLAN_ENTRY)).get()
    assert isinstance(first, int)
    assert second is None
    assert list(ReplanRun.objects.values_list("pk", flat=True)) == [first]
    tick = ScheduleTick.objects.get(name=REPLAN_ENTRY)
    assert (tick.ticks, tick.duplicates) == (1, 1)


@pytest.mark.django_db
def test_calls_that_beat_did_not_send_are_never_refused(no_replan_run: None) -> None:
    schedule_install(parts=["plans"])
    ids = {plan_tasks.replan_scheduled(), plan_tasks.replan_scheduled()}
    assert len(ids) == 2
    assert not ScheduleTick.objects.exists()


@pytest.mark.django_db
def test_a_repeated_pull_tick_pulls_nothing() -> None:
    """The repeat returns before any Prometheus query and writes no pull report."""
    schedule_install(parts=["telemetry"])
    assert tick_claim(name=PULL_ENTRY, every_s=60)
    summary = pull.apply(headers=_beat(PULL_ENTRY)).get()
    assert summary["status"] == "duplicate tick"
    assert not TelemetryPull.objects.exists()


@pytest.mark.django_db
def test_the_next_tick_is_taken_and_a_repeat_within_half_an_interval_is_not() -> None:
    start = timezone.now()
    assert tick_claim(name="e", every_s=3600, now=start)
    assert not tick_claim(name="e", every_s=3600, now=start + timedelta(seconds=1799))
    assert tick_claim(name="e", every_s=3600, now=start + timedelta(seconds=1800))
    assert tick_claim(name="e", every_s=3600, now=start + timedelta(seconds=3600 + 1800))
    tick = ScheduleTick.objects.get(name="e")
    assert (tick.ticks, tick.duplicates) == (3, 1)


def _race(deliveries: int) -> tuple[list[Any], list[BaseException]]:
    """``deliveries`` threads deliver the re-plan tick at once; their results and errors."""
    barrier = threading.Barrier(deliveries)
    results: list[Any] = []
    errors: list[BaseException] = []

    def deliver() -> None:
        try:
            barrier.wait(timeout=10)
            results.append(plan_tasks.replan_scheduled.apply(headers=_beat(REPLAN_ENTRY)).get())
        except BaseException as exc:  # reported by the caller, on the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(deliveries)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results, errors


@pytest.mark.django_db(transaction=True)
def test_two_deliveries_at_once_make_one_run(no_replan_run: None) -> None:
    """Two workers take the same tick at the same moment, on their own connections; repeated
    for a few ticks. Exactly one run per tick."""
    if connection.vendor != "postgresql":
        pytest.skip("the race needs a database that runs two connections at once")
    schedule_install(parts=["plans"])
    trials = 6
    for trial in range(trials):
        ScheduleTick.objects.filter(name=REPLAN_ENTRY).update(last_tick_at=None)
        results, errors = _race(2)
        assert not errors, errors
        assert sorted(results, key=lambda r: r is None)[1:] == [None], results
        assert ReplanRun.objects.count() == trial + 1
    tick = ScheduleTick.objects.get(name=REPLAN_ENTRY)
    assert (tick.ticks, tick.duplicates) == (trials, trials)
