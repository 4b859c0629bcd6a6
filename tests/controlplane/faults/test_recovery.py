"""The recovery sweep: jobs whose task was lost are re-sent while young, failed with a reason
when old; jobs left running past the task time limit are failed. Virtual time (``now``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.benchmarks.models import BenchmarkRun
from controlplane.benchmarks.services import ENGINE_TASK, benchmark_run_request
from controlplane.pipeline import recovery
from controlplane.pipeline.recovery import jobs_recover
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.services import replan_request
from controlplane.telemetry.models import TelemetryPull
from tests.controlplane.faults.support import closed_port_broker, make_shape

pytestmark = pytest.mark.django_db


def _queued_run(age_s: float) -> ReplanRun:
    run = replan_request(trigger=Plan.Trigger.SCHEDULE, enqueue=False)
    ReplanRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(seconds=age_s))
    return run


def test_a_queued_run_is_sent_again_once_by_the_sweep_after_its_wait() -> None:
    """Sweeps every 300 s, re-send after 300 s: the run that waited between 300 and 600 s is
    re-sent; a younger one waits for a later sweep; an older one had its re-send already."""
    young, due, resent_before = _queued_run(60), _queued_run(400), _queued_run(800)
    report = jobs_recover()
    assert report.resent == [f"replanrun {due.pk}"]
    for run in (young, due, resent_before):
        run.refresh_from_db()
    assert young.status == resent_before.status == ReplanRun.Status.QUEUED
    # Sent again (here in-process): the run was executed and finished, whatever its outcome.
    assert due.status in ReplanRun.FINISHED
    assert due.attempts == 1


def test_a_run_queued_past_the_timeout_is_failed_with_the_reason() -> None:
    run = _queued_run(3601)
    report = jobs_recover()
    assert report.failed == [f"replanrun {run.pk}"]
    run.refresh_from_db()
    assert run.status == ReplanRun.Status.FAILED
    assert "No worker took it" in run.error
    assert run.finished_at is not None


def test_a_resend_the_broker_refuses_is_reported_and_the_run_stays_queued() -> None:
    run = _queued_run(400)
    with closed_port_broker():
        report = jobs_recover()
    assert report.resent == []
    assert report.send_errors and report.send_errors[0].startswith(f"replanrun {run.pk}:")
    run.refresh_from_db()
    assert run.status == ReplanRun.Status.QUEUED


def test_a_lost_benchmark_run_is_sent_again_but_not_timed_out_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Benchmark runs can wait hours behind each other: the sweep re-sends a lost one once, and
    leaves failing it to the benchmark schedule (twice the benchmark timeout)."""
    sent: list[tuple[str, tuple[object, ...]]] = []
    monkeypatch.setattr(recovery, "task_send", lambda name, *args: sent.append((name, args)))
    shape = make_shape()
    run, _ = benchmark_run_request(shape=shape, enqueue=False)
    BenchmarkRun.objects.filter(pk=run.pk).update(
        requested_at=timezone.now() - timedelta(seconds=400)
    )
    assert jobs_recover().resent == [f"benchmarkrun {run.pk}"]
    assert sent == [(ENGINE_TASK, (run.pk,))]
    BenchmarkRun.objects.filter(pk=run.pk).update(requested_at=timezone.now() - timedelta(hours=5))
    assert jobs_recover().failed == []
    run.refresh_from_db()
    assert run.status == BenchmarkRun.Status.QUEUED


def test_a_pull_left_running_past_the_time_limit_is_failed(settings: object) -> None:
    now = timezone.now()
    window = {"window_start": now - timedelta(minutes=5), "window_end": now, "bucket_s": 60}
    dead = TelemetryPull.objects.create(started_at=now - timedelta(hours=3), **window)
    live = TelemetryPull.objects.create(started_at=now - timedelta(minutes=1), **window)
    assert jobs_recover(now=now).failed == [f"telemetrypull {dead.pk}"]
    dead.refresh_from_db()
    live.refresh_from_db()
    assert dead.status == TelemetryPull.Status.FAILED
    assert "past the task time limit" in dead.error
    assert live.status == TelemetryPull.Status.RUNNING
