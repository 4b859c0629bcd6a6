"""Stored finance results: computed once per plan version and forecast, read by every request.

A ``FinanceSnapshot`` holds what the forecast endpoints aggregate: for one plan and one horizon
(its first hour and length), the replica-hours each pool (zone × shape) is sized for day by
day at the planned quantile and the band's edges, the replica-hours each tenant's load uses,
its tokens, and the hourly GPUs each region's GPU type needs (for commitments). The arrays are
stored as one compressed NumPy archive (``arrays``); the pools and loads they index are JSON.

A ``PromisePricing`` holds the plan's problem re-solved one promise lighter at a time, and each
tenant's promised load that shares each promise's price. A ``FinanceReport`` caches one endpoint's rows for one snapshot and one
set of parameters, so a repeated request reads one row; the stored reports are capped in
number and bytes (``controlplane.finance.conf``), the least recently read evicted first.
"""

from __future__ import annotations

from django.db import models

from controlplane.plans.models import Plan


class FinanceSnapshot(models.Model):
    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="finance_snapshots")
    start = models.DateTimeField(help_text="First hour of the horizon (UTC).")
    hours = models.PositiveIntegerField(help_text="Hours in the horizon.")
    forecast_key = models.CharField(
        max_length=64,
        help_text="SHA-256 of what the forecast was fitted to: the plan's anchor, the band's "
        "quantiles and each group's rate history.",
    )
    pools = models.JSONField(help_text="Zone × shape rows of the plan, in the arrays' order.")
    loads = models.JSONField(help_text="Demand × region × shape rows, in the arrays' order.")
    gpu_pools = models.JSONField(help_text="Region × GPU type rows with their prices.")
    hosted = models.JSONField(
        default=list,
        blank=True,
        help_text="Demand × hosted provider rows (hosted overflow), in the arrays' order.",
    )
    arrays = models.BinaryField(help_text="NumPy .npz archive of the daily and hourly series.")
    quantiles = models.JSONField(default=dict, help_text="Sizing quantile per tier; band edges.")
    notes = models.JSONField(default=list, blank=True)
    compute_seconds = models.FloatField(default=0.0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["plan", "start", "hours"], name="unique_finance_snapshot"
            )
        ]

    def __str__(self) -> str:
        return f"finance snapshot of plan v{self.plan.version} from {self.start:%Y-%m-%d}"


class PromisePricing(models.Model):
    plan = models.OneToOneField(Plan, on_delete=models.CASCADE, related_name="promise_pricing")
    rungs = models.JSONField(help_text="The fleet's ladder: cost, replicas and GPUs per rung.")
    weights = models.JSONField(
        help_text="Per tenant: its tier and the promised load (replicas' worth) of each promise."
    )
    solve_seconds = models.FloatField(default=0.0)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"promise prices of plan v{self.plan.version}"


class FinanceReport(models.Model):
    snapshot = models.ForeignKey(FinanceSnapshot, on_delete=models.CASCADE, related_name="reports")
    endpoint = models.CharField(max_length=32)
    params = models.CharField(max_length=255, help_text="Canonical query parameters.")
    rows = models.JSONField()
    size_bytes = models.PositiveIntegerField(
        default=0, help_text="Bytes of the stored rows as JSON (what the storage caps count)."
    )
    read_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the report was last read (to the minute or so); the least recently "
        "read go first when the stored reports are over their cap.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["snapshot", "endpoint", "params"], name="unique_finance_report"
            )
        ]

    def __str__(self) -> str:
        return f"{self.endpoint}?{self.params}"
