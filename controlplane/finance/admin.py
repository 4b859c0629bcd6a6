"""Stored finance results in the admin: read-only (the finance services write them)."""

from __future__ import annotations

from django.contrib import admin

from controlplane.core import formatting
from controlplane.core.admin import ReadOnlyAdmin
from controlplane.finance.models import FinanceReport, FinanceSnapshot, PromisePricing


@admin.register(FinanceSnapshot)
class FinanceSnapshotAdmin(ReadOnlyAdmin):
    list_display = ("id", "plan", "start", "hours", "compute_seconds_text", "created_at")
    list_select_related = ("plan",)
    # The arrays are a binary archive: nothing to read on the page.
    exclude = ("arrays",)
    readonly_fields = (
        "plan",
        "start",
        "hours",
        "forecast_key",
        "quantiles",
        "notes",
        "compute_seconds_text",
        "created_at",
        "pools",
        "loads",
        "gpu_pools",
    )

    @admin.display(description="compute time (s)", ordering="compute_seconds")
    def compute_seconds_text(self, obj: FinanceSnapshot) -> str:
        return formatting.rate(obj.compute_seconds)


@admin.register(PromisePricing)
class PromisePricingAdmin(ReadOnlyAdmin):
    list_display = ("id", "plan", "solve_seconds_text", "created_at")
    list_select_related = ("plan",)
    readonly_fields = ("plan", "rungs", "weights", "solve_seconds_text", "created_at")

    @admin.display(description="solve time (s)", ordering="solve_seconds")
    def solve_seconds_text(self, obj: PromisePricing) -> str:
        return formatting.rate(obj.solve_seconds)


@admin.register(FinanceReport)
class FinanceReportAdmin(ReadOnlyAdmin):
    list_display = ("id", "snapshot", "endpoint", "params", "size_bytes", "read_at", "created_at")
    list_filter = ("endpoint",)
    readonly_fields = (
        "snapshot",
        "endpoint",
        "params",
        "size_bytes",
        "read_at",
        "rows",
        "created_at",
    )
