"""Benchmark runs: one row per measurement of one replica shape, whatever its outcome.

A ``BenchmarkRun`` is a job: it is queued (by the schedule, an admin or the API), runs (the
engine benchmark on a Ray worker with the shape's GPUs, or the endpoint load test), and ends
succeeded, with the capacity figures it measured, or failed, with the error; a failed run
stores no figure, so the previous figures stay. At most one run per shape and kind is queued or
running at a time (a partial unique constraint), which makes requesting a run idempotent.

``ShapeFreshness`` is a proxy of ``ReplicaShape`` that the admin lists to show how fresh each
shape's capacity figure is and why it would be measured again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from simple_history.models import HistoricalRecords

from controlplane.fleet.models import CapacityFigure, ReplicaShape


class BenchmarkRun(models.Model):
    class Kind(models.TextChoices):
        ENGINE = "engine", "engine benchmark"
        ENDPOINT = "endpoint", "endpoint load test"

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule", "schedule"
        MANUAL = "manual", "requested by a user"

    class Device(models.TextChoices):
        GPU = "gpu", "the shape's GPUs"
        CPU = "cpu", "CPU (development only)"

    ACTIVE = (Status.QUEUED, Status.RUNNING)
    FINISHED = (Status.SUCCEEDED, Status.FAILED)

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.ENGINE)
    shape = models.ForeignKey(ReplicaShape, on_delete=models.CASCADE, related_name="benchmark_runs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.MANUAL)
    reason = models.CharField(
        max_length=500, blank=True, help_text="Why the run was requested (stale figure, …)."
    )
    device = models.CharField(
        max_length=8,
        choices=Device.choices,
        default=Device.GPU,
        help_text="Where the engine benchmark runs; CPU figures describe the host, not the GPU.",
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    requested_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    task_id = models.CharField(max_length=64, blank=True, help_text="Celery task id.")
    error = models.TextField(blank=True)
    results = models.JSONField(
        default=dict, blank=True, help_text="Every measured point, in the units it names."
    )
    hardware = models.JSONField(
        default=dict, blank=True, help_text="GPU name and count, or the CPU model."
    )
    software = models.JSONField(
        default=dict, blank=True, help_text="torch, Ray, Python and CUDA versions."
    )
    inputs = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "What the run measured, as it was when it started: the workload (tokens), the "
            "model's architecture, the shape, the runtime version."
        ),
    )
    workload_profile_version = models.CharField(
        max_length=64,
        blank=True,
        help_text="Identifies the model's current workload profiles when the run started.",
    )
    figures = models.ManyToManyField(
        CapacityFigure, blank=True, related_name="benchmark_runs", editable=False
    )
    history = HistoricalRecords(excluded_fields=["results"])

    class Meta:
        ordering = ["-requested_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["shape", "kind"],
                condition=Q(status__in=["queued", "running"]),
                name="one_active_benchmark_run",
                violation_error_message=(
                    "This shape already has a queued or running benchmark run of this kind."
                ),
            )
        ]
        indexes = [models.Index(fields=["shape", "kind", "-requested_at"])]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} of {self.shape} #{self.pk}: {self.status}"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to end; None until the run has both."""
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def figure_source(self) -> str:
        """The ``CapacityFigure.source`` of the figures this kind of run measures."""
        if self.kind == self.Kind.ENDPOINT:
            return str(CapacityFigure.Source.ENDPOINT_LOAD_TEST)
        return str(CapacityFigure.Source.ENGINE_BENCHMARK)

    def is_overdue(self, *, timeout: timedelta, now: datetime | None = None) -> bool:
        """Whether an active run has been queued or running longer than ``timeout`` (its
        worker died, or the broker lost the message)."""
        if not self.is_active:
            return False
        since = self.started_at or self.requested_at
        return (now or timezone.now()) - since > timeout


class ShapeFreshness(ReplicaShape):
    """A replica shape seen from its capacity figures: how old, and why to measure again."""

    class Meta:
        proxy = True
        verbose_name = "capacity figure freshness"
        verbose_name_plural = "capacity figure freshness"
