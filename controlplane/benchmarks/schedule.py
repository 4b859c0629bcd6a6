"""Keeping capacity figures fresh: the periodic pass (Celery beat) that requests benchmark runs.

``benchmarks_schedule`` requests one run per shape whose figures need measuring again
(``selectors.refresh_reasons``): an endpoint load test when the shape has an enabled endpoint
(it measures the served replica, knee included), else an engine benchmark. Never a second one
of that kind while one is queued or running, not again soon after one failed, and no engine run
for a model whose architecture is incomplete (the engine benchmark builds the model from it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from controlplane.benchmarks import selectors
from controlplane.benchmarks.conf import benchmark_settings
from controlplane.benchmarks.models import BenchmarkRun
from controlplane.benchmarks.runs import benchmark_run_fail, benchmark_run_request
from controlplane.core.schedule import ScheduledTask

SCHEDULE_TASK = "headroom.benchmarks.schedule"
SCHEDULE_NAME = "benchmarks: measure shapes with stale capacity figures"


@dataclass
class ScheduleReport:
    """What one scheduling pass did: runs queued, shapes skipped and why, overdue runs
    failed, and how many shapes were fresh."""

    queued: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)
    fresh: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "queued": list(self.queued),
            "skipped": list(self.skipped),
            "expired": list(self.expired),
            "fresh": self.fresh,
        }


def benchmarks_schedule(*, now: datetime | None = None, enqueue: bool = True) -> ScheduleReport:
    """Request a benchmark for each shape whose figures need measuring again.

    First fails runs queued or running for over twice ``HEADROOM_BENCHMARK_TIMEOUT_S`` (their
    worker or message was lost; they would otherwise block their shape for ever). Then, per
    shape with refresh reasons, the kind of run: an endpoint load test when the shape has an
    enabled ``BenchmarkEndpoint``, else an engine benchmark. The shape is skipped when a run of
    that kind is already queued or running (idempotent), when its last run of that kind failed
    less than ``HEADROOM_BENCHMARK_RETRY_AFTER_S`` ago, or, for an engine run, when its model's
    architecture is incomplete; else one run is queued with the reasons.
    """
    conf = benchmark_settings()
    now = now or timezone.now()
    report = ScheduleReport()
    for run in selectors.overdue_runs(timeout=timedelta(seconds=2 * conf.timeout_s), now=now):
        benchmark_run_fail(
            run=run,
            error=(
                f"abandoned: still {run.status} after {2 * conf.timeout_s:g} s (its worker or "
                "its task message was lost)"
            ),
        )
        report.expired.append(run.pk)
    with_endpoint = selectors.enabled_endpoint_shape_ids()
    for freshness in selectors.shapes_freshness():
        shape = freshness.shape
        if freshness.is_fresh:
            report.fresh += 1
            continue
        kind = BenchmarkRun.Kind.ENDPOINT if shape.pk in with_endpoint else BenchmarkRun.Kind.ENGINE
        row = {"shape": shape.name, "kind": str(kind), "reasons": list(freshness.reasons)}
        if selectors.active_run(shape, kind) is not None:
            report.skipped.append({**row, "why": "a run is already queued or running"})
            continue
        if kind == BenchmarkRun.Kind.ENGINE and not shape.model.has_architecture:
            report.skipped.append({**row, "why": f"model {shape.model.name} lacks dimensions"})
            continue
        last = selectors.last_finished_run(shape, kind)
        if (
            last is not None
            and last.status == BenchmarkRun.Status.FAILED
            and last.finished_at is not None
            and (now - last.finished_at).total_seconds() < conf.retry_after_s
        ):
            report.skipped.append({**row, "why": f"run {last.pk} failed recently"})
            continue
        run, created = benchmark_run_request(
            shape=shape,
            kind=kind,
            trigger=BenchmarkRun.Trigger.SCHEDULE,
            reason="; ".join(freshness.reasons),
            enqueue=enqueue,
        )
        if created:
            report.queued.append({**row, "run": run.pk})
        else:
            report.skipped.append({**row, "why": "a run is already queued or running"})
    return report


def benchmark_schedule() -> tuple[ScheduledTask, ...]:
    """The beat entry that keeps figures fresh (every ``HEADROOM_BENCHMARK_SCHEDULE_S``)."""
    return (
        ScheduledTask(
            SCHEDULE_NAME,
            SCHEDULE_TASK,
            int(benchmark_settings().schedule_s),
            "Queue a benchmark for each shape whose capacity figure is stale: an endpoint load "
            "test where the shape has an enabled endpoint, else an engine benchmark.",
        ),
    )
