"""The job-row base: one row per piece of work the control plane runs (a re-plan, a benchmark,
a telemetry pull, a profile derivation), with one set of statuses.

A job row is created ``queued`` (or ``running`` when the work starts in the same call), moves
to ``running`` when a worker starts it, and ends in one of the finished statuses with
``finished_at`` set and, when it failed or was skipped, ``error`` saying why. The app's
service owns those moves; its task takes the row's id and calls the service, so a task
delivered twice finds the row finished and does nothing.

A job's task is sent when the transaction that created its row commits
(``controlplane.core.tasks.job_send_on_commit``): a worker must never receive a task whose row it cannot read yet.
When the broker cannot be reached at that moment the row is already committed, so it is
failed at once with the reason and ``BrokerUnavailable`` is raised (the API answers 503 with
``Retry-After``): the job is reported, never left queued with no task behind it. A row that is
still queued because even that write failed (the database down too), or because the broker
lost the message (a Redis restart), is re-sent or failed by the recovery sweep
(``controlplane.pipeline.recovery``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from controlplane.core.outage import on_fresh_connection


class JobStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    # Finished without new output: the inputs were those of the last result (a re-plan).
    UNCHANGED = "unchanged", "inputs unchanged"
    # Did not run: another job held the claim this one needs (the planner lock).
    SKIPPED = "skipped", "skipped (another run held the lock)"
    FAILED = "failed", "failed"


ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)
FINISHED = (JobStatus.SUCCEEDED, JobStatus.UNCHANGED, JobStatus.SKIPPED, JobStatus.FAILED)


class Job(models.Model):
    """Status, who asked, when it started and finished, and the error if it failed."""

    Status = JobStatus
    ACTIVE = ACTIVE
    FINISHED = FINISHED

    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Who asked for it; empty for the schedule and the pipeline.",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        abstract = True

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to end; None until the job has both."""
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


def job_fail(
    model: type[Job], job_id: int, error: str, *, statuses: tuple[str, ...] = (JobStatus.QUEUED,)
) -> bool:
    """Fail the job ``job_id`` if it is in one of ``statuses``; False when it was not (another
    process moved it first). Retried once on a new connection (``on_fresh_connection``)."""
    return bool(
        on_fresh_connection(
            lambda: model._default_manager.filter(pk=job_id, status__in=statuses).update(
                status=JobStatus.FAILED, finished_at=timezone.now(), error=error
            )
        )
    )
