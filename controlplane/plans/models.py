"""Stored placement plans: what the planner decided, from which inputs, and what it changed.

A plan is a snapshot: allocations and routing keep region, zone and shape *names* rather than
foreign keys, so a plan still reads correctly after the fleet records it was built from change.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from controlplane.core.jobs import Job


class Plan(models.Model):
    class State(models.TextChoices):
        PROPOSED = "proposed", "proposed"
        AWAITING_APPROVAL = "awaiting-approval", "awaiting approval"
        ACTIVE = "active", "active"
        SUPERSEDED = "superseded", "superseded"
        REJECTED = "rejected", "rejected"

    class SolverStatus(models.TextChoices):
        OPTIMAL = "optimal", "optimal"
        FEASIBLE = "feasible", "feasible (time limit)"
        INVALID = "invalid", "invalid problem"

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule", "schedule"
        API = "api", "API"
        ADMIN = "admin", "admin"
        COMMAND = "command", "command line"
        DRIFT = "drift", "drift alert"

    version = models.PositiveIntegerField(unique=True)
    inputs_hash = models.CharField(
        max_length=64, db_index=True, help_text="SHA-256 of the canonical problem JSON."
    )
    state = models.CharField(max_length=24, choices=State.choices, default=State.PROPOSED)
    solver_status = models.CharField(max_length=16, choices=SolverStatus.choices)
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.SCHEDULE)
    problem = models.JSONField(help_text="The placement-problem/v1 document that was solved.")
    solution = models.JSONField(help_text="The placement-solution/v1 document.")
    explanation = models.JSONField(default=dict, blank=True)
    cost_per_hour = models.FloatField(null=True, blank=True)
    gap = models.FloatField(null=True, blank=True)
    solve_seconds = models.FloatField(null=True, blank=True)
    planned_requests_per_s = models.FloatField(default=0.0)
    unserved_requests_per_s = models.FloatField(default=0.0)
    binding = models.JSONField(default=list, blank=True)
    stale_figures = models.JSONField(
        default=list, blank=True, help_text="Capacity figures older than the freshness limit."
    )
    forecast_band = models.JSONField(
        default=dict,
        blank=True,
        help_text="Quantile planned for, and the cost per hour at the band's low and high edges.",
    )
    diff = models.JSONField(
        default=dict, blank=True, help_text="Changes against the plan active when this was made."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    activated_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rejected_at = models.DateTimeField(null=True, blank=True)
    rejected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-version"]
        constraints = [
            # At most one active plan, enforced by the database.
            models.UniqueConstraint(
                fields=["state"],
                condition=models.Q(state="active"),
                name="one_active_plan",
            )
        ]

    def __str__(self) -> str:
        return f"plan v{self.version} ({self.state})"


class PlanAllocation(models.Model):
    """Whole replicas of one shape in one zone."""

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="allocations")
    region = models.CharField(max_length=64)
    zone = models.CharField(max_length=64)
    shape = models.CharField(max_length=128)
    accelerator = models.CharField(max_length=64)
    gpus_per_replica = models.PositiveIntegerField()
    replicas = models.PositiveIntegerField()
    cost_per_hour = models.FloatField()

    class Meta:
        ordering = ["region", "zone", "shape"]
        constraints = [
            models.UniqueConstraint(fields=["plan", "zone", "shape"], name="unique_plan_allocation")
        ]

    def __str__(self) -> str:
        return f"{self.zone}: {self.replicas} × {self.shape}"


class PlanRouting(models.Model):
    """Requests/s of one demand served by one shape in one region (planned units)."""

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="routing")
    demand = models.CharField(max_length=256)
    tenant = models.CharField(max_length=64)
    region = models.CharField(max_length=64)
    shape = models.CharField(max_length=128)
    requests_per_s = models.FloatField()

    class Meta:
        ordering = ["demand", "region", "shape"]

    def __str__(self) -> str:
        return f"{self.demand} → {self.region}/{self.shape}: {self.requests_per_s:g}/s"


class ReplanRun(Job):
    """One attempt to re-plan: a job row that owns status, timing and errors."""

    trigger = models.CharField(max_length=16, choices=Plan.Trigger.choices)
    plan = models.ForeignKey(
        Plan, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    attempts = models.PositiveIntegerField(
        default=0, help_text="Times a worker started this run; above 1 after a redelivery."
    )
    reason = models.TextField(
        blank=True,
        help_text="Why it was requested beyond its trigger, e.g. the drift alerts behind it.",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"re-plan #{self.pk} ({self.status})"


class PlannerLock(models.Model):
    """A single row claimed by conditional UPDATE so that one re-plan runs at a time, across
    processes and machines. ``holder`` is empty when free; a claim older than ``expires_at`` is
    considered abandoned (its worker died) and may be taken over."""

    name = models.CharField(max_length=32, unique=True)
    holder = models.CharField(max_length=128, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"lock {self.name} held by {self.holder or 'nobody'}"


class PlanDecision(models.Model):
    """One decision on a plan awaiting approval: who approved or rejected it, when and why.

    The plan's history: written by ``plan_approve`` and ``plan_reject`` in the transaction that
    changes the plan's state, never edited afterwards.
    """

    class Action(models.TextChoices):
        APPROVED = "approved", "approved"
        REJECTED = "rejected", "rejected"

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="decisions")
    action = models.CharField(max_length=16, choices=Action.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True, help_text="Why, in the decider's words.")
    decided_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-decided_at", "-pk"]

    def __str__(self) -> str:
        return f"plan v{self.plan.version} {self.action}"


class WhatIfJob(Job):
    """One what-if preview asked for from the web or the API: the change, who asked, and the
    preview once solved (``controlplane.plans.whatif_jobs``). The solve runs off the web
    worker; the page and the API poll this row."""

    tenant = models.CharField(max_length=200, help_text="The tenant the change is about.")
    change = models.JSONField(help_text="The change previewed (WhatIfChange's fields).")
    result = models.JSONField(
        null=True, blank=True, help_text="The preview (WhatIfResult's fields) once succeeded."
    )
    created_at = models.DateTimeField(default=timezone.now)

    # Not stored: the queued jobs ahead of this one when it was submitted, which the submit
    # counts anyway (``whatif_jobs.queue_position`` reads it instead of counting again).
    queue_ahead: int | None = None

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["status", "created_at"], name="whatif_status_created")]

    def __str__(self) -> str:
        return f"what-if #{self.pk} for {self.tenant} ({self.status})"
