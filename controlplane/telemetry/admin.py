"""Admin for telemetry: pull and derivation reports, what was measured, stored series, and drift
alerts (acknowledged from the list by users who may change alerts, i.e. policy-admin).

Everything here is written by the pipeline, so it is read-only in the admin; the one action is
acknowledging alerts, through the same service the API uses.
"""

from __future__ import annotations

from typing import ClassVar

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from simple_history.admin import SimpleHistoryAdmin

from controlplane.core.admin import ListActionsOnlyAdminMixin, ReadOnlyAdmin, ReadOnlyAdminMixin
from controlplane.telemetry import drift
from controlplane.telemetry.models import (
    DriftAlert,
    ObservedWorkload,
    PoolDriftAlert,
    PoolSignalAlert,
    ProfileDerivation,
    TelemetryPull,
    TelemetrySeries,
)


@admin.register(TelemetryPull)
class TelemetryPullAdmin(ReadOnlyAdmin):
    list_display = [
        "started_at",
        "status",
        "attempt",
        "window_start",
        "window_end",
        "bucket_s",
        "samples_fetched",
        "samples_stored",
        "short_error",
    ]
    list_filter = ["status", "bucket_s"]
    search_fields = ["task_id", "error"]
    date_hierarchy = "started_at"

    @admin.display(description="error")
    def short_error(self, obj: TelemetryPull) -> str:
        return obj.error[:120]


class ObservedWorkloadInline(
    ReadOnlyAdminMixin, admin.TabularInline[ObservedWorkload, ProfileDerivation]
):
    model = ObservedWorkload
    fields: ClassVar[tuple[str, ...]] = (
        "tenant",
        "model",
        "region",
        "workload_class",
        "profile",
        "requests",
        "peak_requests_per_s",
        "prompt_tokens_mean",
        "output_tokens_mean",
        "prefix_cache_hit_rate",
        "ttft_p95_s",
        "residence_s",
    )
    readonly_fields = list(fields)
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(ProfileDerivation)
class ProfileDerivationAdmin(ReadOnlyAdmin):
    list_display = [
        "started_at",
        "status",
        "window_start",
        "window_end",
        "profiles_created",
        "profiles_unchanged",
        "alerts_raised",
        "alerts_updated",
        "alerts_resolved",
    ]
    list_filter = ["status"]
    date_hierarchy = "started_at"
    inlines = [ObservedWorkloadInline]


@admin.register(ObservedWorkload)
class ObservedWorkloadAdmin(ReadOnlyAdmin):
    list_display = [
        "tenant",
        "model",
        "region",
        "workload_class",
        "derivation",
        "peak_requests_per_s",
        "prompt_tokens_mean",
        "output_tokens_mean",
        "prefix_cache_hit_rate",
        "ttft_p95_s",
        "residence_s",
        "itl_mean_s",
        "queue_time_mean_s",
        "kv_cache_capacity_tokens",
    ]
    list_filter = ["region", "model"]
    search_fields = ["tenant", "model", "region"]
    list_select_related = ["derivation"]


@admin.register(TelemetrySeries)
class TelemetrySeriesAdmin(ReadOnlyAdmin):
    list_display = ["metric", "tenant", "model", "region", "workload_class", "le", "bucket_s"]
    list_filter = ["metric", "region", "bucket_s"]
    search_fields = ["tenant", "model", "region", "metric"]
    show_full_result_count = False  # counting millions of rows on every page is slow


@admin.register(PoolDriftAlert)
class PoolDriftAlertAdmin(ReadOnlyAdmin):
    list_display = ["last_seen_at", "status", "model", "region", "pricing", "message"]
    list_filter = ["status", "pricing", "region", "model"]
    list_select_related = ["model", "region"]


@admin.register(PoolSignalAlert)
class PoolSignalAlertAdmin(ReadOnlyAdmin):
    list_display = ["last_seen_at", "status", "kind", "model", "region", "message"]
    list_filter = ["status", "kind", "region", "model"]
    list_select_related = ["model", "region"]


@admin.register(DriftAlert)
class DriftAlertAdmin(ListActionsOnlyAdminMixin, SimpleHistoryAdmin):
    """ "Change" means acknowledging, from the list; an alert's own page only shows it."""

    list_display = [
        "last_seen_at",
        "status",
        "kind",
        "tenant",
        "region",
        "replica_impact",
        "message",
        "occurrences",
    ]
    list_filter = ["status", "kind", "region", "model"]
    search_fields = ["tenant__name", "message"]
    list_select_related = ["tenant", "region"]
    actions = ["acknowledge"]
    readonly_fields = [
        "tenant",
        "model",
        "region",
        "workload_class",
        "kind",
        "status",
        "message",
        "baseline_value",
        "current_value",
        "threshold",
        "baseline_profile",
        "current_profile",
        "shape",
        "target_utilization",
        "replicas_before",
        "replicas_after",
        "pool_alert",
        "pool_share",
        "occurrences",
        "first_seen_at",
        "last_seen_at",
        "acknowledged_at",
        "acknowledged_by",
        "resolved_at",
    ]

    @admin.display(description="replicas")
    def replica_impact(self, obj: DriftAlert) -> str:
        delta = obj.replica_delta
        if delta is None:
            return "—"
        return f"{delta:+d} ({obj.replicas_before} → {obj.replicas_after})"

    @admin.action(description="Acknowledge selected alerts", permissions=["change"])
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[DriftAlert]) -> None:
        done = skipped = 0
        for alert in queryset:
            try:
                drift.drift_alert_acknowledge(alert=alert, user=request.user)
            except ValidationError:
                skipped += 1
            else:
                done += 1
        self.message_user(request, f"Acknowledged {done} alert(s).", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"{skipped} resolved alert(s) were left as they are.", messages.WARNING
            )
