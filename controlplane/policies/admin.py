"""Admin UI for tenant policy: tiers, tenants (with quota and workload profiles inline),
quotas and workload profiles.

Revisioned records (tier, tenant, quota) are edited through ``RevisionCheckedForm`` so an
admin save never silently overwrites a change made meanwhile through the API. Every model
keeps its audit trail through ``SimpleHistoryAdmin``.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from simple_history.admin import SimpleHistoryAdmin

from controlplane.core.admin import RevisionCheckedForm, RevisionedAdmin
from controlplane.policies.forms import TenantAdminForm
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile


@admin.register(Tier)
class TierAdmin(RevisionedAdmin):
    list_display = [
        "name",
        "priority",
        "p95_ttft_slo_s",
        "failure_promise",
        "target_utilization",
        "burst_factor",
        "tenant_count",
        "revision",
    ]
    list_filter = ["failure_promise"]
    # Explicit: an annotated (GROUP BY) queryset drops Meta.ordering, and autocomplete pages.
    ordering = ["priority", "name"]
    search_fields = ["name"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tier]:
        rows: QuerySet[Tier] = super().get_queryset(request)
        return rows.annotate(_tenant_count=Count("tenants"))

    @admin.display(description="tenants", ordering="_tenant_count")
    def tenant_count(self, obj: Tier) -> int:
        return int(getattr(obj, "_tenant_count", 0))


class TenantQuotaInline(admin.StackedInline[TenantQuota, Tenant]):
    model = TenantQuota
    form = RevisionCheckedForm[TenantQuota]
    fields = [
        "budget_rate_replica_s_per_s",
        "budget_burst_replica_s",
        "tokens_per_minute_limit",
        "tokens_per_minute_burst",
        "expected_revision",
        "revision",
    ]
    readonly_fields = ["revision"]
    extra = 1
    max_num = 1
    can_delete = True


class WorkloadProfileInline(admin.TabularInline[WorkloadProfile, Tenant]):
    model = WorkloadProfile
    fields = [
        "model",
        "workload_class",
        "region",
        "version",
        "source",
        "peak_requests_per_s",
        "prompt_tokens_p50",
        "prompt_tokens_mean",
        "prompt_tokens_p95",
        "prompt_tokens_p99",
        "output_tokens_p50",
        "output_tokens_mean",
        "output_tokens_p95",
        "output_tokens_p99",
        "prefix_cache_hit_rate",
        "residence_s",
    ]
    autocomplete_fields = ["model", "workload_class", "region"]
    extra = 0
    show_change_link = True


@admin.register(Tenant)
class TenantAdmin(RevisionedAdmin):
    form = TenantAdminForm
    list_display = [
        "name",
        "display_name",
        "tier",
        "home_region",
        "residency",
        "spill_allowed",
        "max_spill_rtt_ms",
        "fair_share_weight",
        "revision",
    ]
    list_filter = [
        "tier",
        "home_region",
        "residency_geography",
        "residency_regions",
        "spill_allowed",
    ]
    search_fields = ["name", "display_name"]
    autocomplete_fields = ["tier", "home_region", "residency_geography", "residency_regions"]
    list_select_related = ["tier", "home_region", "residency_geography"]
    readonly_fields = ["allowed_regions_display"]
    fieldsets = [
        (None, {"fields": ["name", "display_name", "tier", "fair_share_weight"]}),
        (
            "Where it is served",
            {
                "fields": [
                    "home_region",
                    "residency_geography",
                    "residency_regions",
                    "allowed_regions_display",
                    "spill_allowed",
                    "max_spill_rtt_ms",
                ],
                "description": (
                    "Residency: a geography, a region list, or both. The home region must be "
                    "among the residency regions, and every residency region inside the "
                    "geography."
                ),
            },
        ),
        ("Revision", {"fields": ["expected_revision", "revision"]}),
    ]
    inlines = [TenantQuotaInline, WorkloadProfileInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        return super().get_queryset(request).prefetch_related("residency_regions")

    @admin.display(description="residency")
    def residency(self, obj: Tenant) -> str:
        """The residency rule in one line: geography, region list, or anywhere."""
        parts = []
        if obj.residency_geography_id is not None:
            parts.append(str(obj.residency_geography))
        regions = sorted(r.name for r in obj.residency_regions.all())
        if regions:
            parts.append(", ".join(regions))
        return " · ".join(parts) if parts else "anywhere"

    @admin.display(description="allowed regions")
    def allowed_regions_display(self, obj: Tenant) -> str | None:
        """Regions the residency rule leaves open, as saved (edits show after saving)."""
        if obj.pk is None:
            return None
        return ", ".join(r.name for r in obj.allowed_regions()) or "none"


@admin.register(TenantQuota)
class TenantQuotaAdmin(RevisionedAdmin):
    list_display = [
        "tenant",
        "budget_rate_replica_s_per_s",
        "budget_burst_replica_s",
        "tokens_per_minute_limit",
        "tokens_per_minute_burst",
        "revision",
    ]
    list_filter = ["tenant__tier"]
    search_fields = ["tenant__name", "tenant__display_name"]
    autocomplete_fields = ["tenant"]
    list_select_related = ["tenant"]


@admin.register(WorkloadProfile)
class WorkloadProfileAdmin(SimpleHistoryAdmin):
    list_display = [
        "tenant",
        "model",
        "workload_class",
        "region",
        "version",
        "source",
        "peak_requests_per_s",
        "prompt_tokens_p50",
        "prompt_tokens_p95",
        "output_tokens_p50",
        "output_tokens_p95",
        "prefix_cache_hit_rate",
        "created_at",
    ]
    list_filter = ["source", "tenant__tier", "model", "workload_class", "region"]
    search_fields = ["tenant__name", "model__name", "workload_class__name"]
    autocomplete_fields = ["tenant", "model", "workload_class", "region"]
    list_select_related = ["tenant", "model", "workload_class", "region"]
    readonly_fields = ["created_at"]
    fieldsets = [
        (None, {"fields": ["tenant", "model", "workload_class", "region", "version", "source"]}),
        ("Rate", {"fields": ["peak_requests_per_s", "residence_s", "prefix_cache_hit_rate"]}),
        (
            "Prompt tokens",
            {
                "fields": [
                    "prompt_tokens_p50",
                    "prompt_tokens_mean",
                    "prompt_tokens_p95",
                    "prompt_tokens_p99",
                ]
            },
        ),
        (
            "Output tokens",
            {
                "fields": [
                    "output_tokens_p50",
                    "output_tokens_mean",
                    "output_tokens_p95",
                    "output_tokens_p99",
                ]
            },
        ),
        ("Recorded", {"fields": ["created_at"]}),
    ]
