"""The recovery sweep: jobs no worker took, and jobs whose worker stopped, are re-sent or
reported failed, never left queued or running for ever.

A job's task can be lost between its row and a worker: the broker was unreachable at commit
and the database too, so the row could not be failed at once (``core.tasks.job_send``); Redis
restarted with the message queued (it keeps nothing on disk); the sending process died right
after the commit. And a job can be left running: the database restarted under it and its
failure could not be written, or the broker forgot an unacknowledged task.

Every ``HEADROOM_RECOVERY_EVERY_S`` (300) beat sends ``headroom.pipeline.recover_jobs``, which
for each kind of job:

- **queued** re-plans and benchmark runs that have waited ``HEADROOM_JOB_RESEND_AFTER_S``
  (300): their task is sent again, once (by the first sweep after that wait: the one whose
  interval the wait ends in), so a long but healthy queue does not fill with copies. A second
  delivery of a task whose first one does arrive is harmless: the run's status guard (and, for
  a re-plan, the planner lock and the inputs hash) makes it do nothing more.
- **queued** re-plans older than ``HEADROOM_JOB_QUEUED_TIMEOUT_S`` (3600): failed, saying no
  worker took it. Benchmark runs may wait hours behind each other on the benchmark workers:
  the benchmark schedule fails those queued for twice the benchmark timeout.
- **running** re-plans, telemetry pulls and profile derivations whose start is older than the
  hard task time limit plus a minute: failed (no task runs past the limit, so its worker is
  gone). Benchmark runs have their own rule in the benchmark schedule (twice their timeout).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from controlplane.benchmarks.models import BenchmarkRun
from controlplane.benchmarks.runs import run_task
from controlplane.core.conf import setting_int
from controlplane.core.jobs import Job, JobStatus, job_fail
from controlplane.core.outage import DependencyUnavailable
from controlplane.core.schedule import ScheduledTask
from controlplane.core.tasks import task_send
from controlplane.plans.models import ReplanRun
from controlplane.plans.services import REPLAN_TASK
from controlplane.telemetry.models import ProfileDerivation, TelemetryPull

logger = logging.getLogger(__name__)

RECOVER_TASK = "headroom.pipeline.recover_jobs"
RECOVERY_SCHEDULE_NAME = "jobs: re-send or fail jobs no worker finished"


@dataclass(frozen=True)
class RecoverySettings:
    every_s: int
    resend_after_s: int
    queued_timeout_s: int
    running_timeout_s: int


def recovery_settings() -> RecoverySettings:
    resend = setting_int("HEADROOM_JOB_RESEND_AFTER_S", 300, minimum=1)
    return RecoverySettings(
        every_s=setting_int("HEADROOM_RECOVERY_EVERY_S", 300, minimum=10),
        resend_after_s=resend,
        queued_timeout_s=setting_int("HEADROOM_JOB_QUEUED_TIMEOUT_S", 3600, minimum=resend + 1),
        running_timeout_s=int(settings.CELERY_TASK_TIME_LIMIT) + 60,
    )


@dataclass
class RecoveryReport:
    """What one sweep did: ``"<kind> <id>"`` per job re-sent or failed."""

    resent: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    send_errors: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"resent": self.resent, "failed": self.failed, "send_errors": self.send_errors}


@dataclass(frozen=True)
class _Queued:
    model: type[Job]
    queued_at: str
    task: Callable[[Any], str]
    # Fail it when queued past HEADROOM_JOB_QUEUED_TIMEOUT_S (else its app's own rule does).
    times_out: bool


_QUEUED = (
    _Queued(ReplanRun, "created_at", lambda run: REPLAN_TASK, times_out=True),
    _Queued(BenchmarkRun, "requested_at", run_task, times_out=False),
)
_RUNNING: tuple[type[Job], ...] = (ReplanRun, TelemetryPull, ProfileDerivation)


def _label(model: type[Job], pk: int) -> str:
    return f"{model._meta.model_name} {pk}"


def jobs_recover(*, now: datetime | None = None) -> RecoveryReport:
    """One sweep (see the module doc)."""
    now = now or timezone.now()
    conf = recovery_settings()
    report = RecoveryReport()
    for kind in _QUEUED:
        queued = kind.model._default_manager.filter(status=JobStatus.QUEUED)
        if kind.times_out:
            too_old = now - timedelta(seconds=conf.queued_timeout_s)
            for pk in queued.filter(**{f"{kind.queued_at}__lte": too_old}).values_list(
                "pk", flat=True
            ):
                error = (
                    f"No worker took it within {conf.queued_timeout_s} s of being queued (its "
                    "task was lost: the broker unreachable or restarted). Request it again."
                )
                if job_fail(kind.model, pk, error):
                    report.failed.append(_label(kind.model, pk))
        # The wait ended within the last sweep interval: this sweep is the one that re-sends.
        waited = now - timedelta(seconds=conf.resend_after_s)
        due = queued.filter(
            **{
                f"{kind.queued_at}__lte": waited,
                f"{kind.queued_at}__gt": waited - timedelta(seconds=conf.every_s),
            }
        )
        for job in due:
            try:
                task_send(kind.task(job), job.pk)
            except DependencyUnavailable as exc:
                report.send_errors.append(f"{_label(kind.model, job.pk)}: {exc}")
                continue
            report.resent.append(_label(kind.model, job.pk))
    started_before = now - timedelta(seconds=conf.running_timeout_s)
    for model in _RUNNING:
        running = model._default_manager.filter(
            status=JobStatus.RUNNING, started_at__lte=started_before
        )
        for pk in running.values_list("pk", flat=True):
            error = (
                f"Still running {conf.running_timeout_s} s after it started, past the task time "
                "limit: its worker stopped without recording the end (the database or the "
                "broker restarted under it, or the worker died)."
            )
            if job_fail(model, pk, error, statuses=(JobStatus.RUNNING,)):
                report.failed.append(_label(model, pk))
    if report.resent or report.failed or report.send_errors:
        logger.warning("job recovery: %s", report.summary())
    return report


def recovery_schedule() -> tuple[ScheduledTask, ...]:
    """The beat entry of the sweep."""
    return (
        ScheduledTask(
            RECOVERY_SCHEDULE_NAME,
            RECOVER_TASK,
            recovery_settings().every_s,
            "Re-send the tasks of jobs queued for long (lost by the broker); fail jobs queued "
            "or running past their limits, saying why.",
        ),
    )
