"""Admin UI for tenant policy: tiers, tenants (with quota and workload profiles inline),
quotas and workload profiles.

Revisioned records (tier, tenant, quota) are edited through ``RevisionCheckedForm`` so an
admin save never silently overwrites a change made meanwhile through the API. Every model
keeps its audit trail through ``SimpleHistoryAdmin``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db.models import Count, ManyToManyField, Model, QuerySet
from django.forms import BaseInlineFormSet, ModelForm
from django.http import HttpRequest, HttpResponse
from simple_history.models import DeletedObject
from simple_history.template_utils import HistoricalRecordContextHelper
from simple_history.utils import get_m2m_reverse_field_name

from controlplane.core.admin import HistoryAdmin, RevisionCheckedForm, RevisionedAdmin, reverting
from controlplane.fleet.admin_forms import HUMAN_LABELS, HumanFieldsMixin
from controlplane.fleet.models import Region
from controlplane.policies.forms import TenantAdminForm
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile
from controlplane.policies.services import tenant_save

QUOTA_FIELDS = (
    "budget_rate_replica_s_per_s",
    "budget_burst_replica_s",
    "tokens_per_minute_limit",
    "tokens_per_minute_burst",
)
KINDS = {"+": "created", "~": "changed", "-": "deleted"}


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: Any
    after: Any


@dataclass(frozen=True)
class QuotaChange:
    """One history row of a tenant's quota, for the tenant's history page."""

    date: datetime
    kind: str
    user: str | None
    change_reason: str | None
    revision: int
    changes: list[FieldChange]


def _quota_changes(rows: list[Any]) -> list[QuotaChange]:
    """``rows`` (newest first) as entries with what each changed; saves that changed nothing
    are left out."""
    out = []
    for index, row in enumerate(rows):
        older = rows[index + 1] if index + 1 < len(rows) else None
        if row.history_type == "~" and older is not None:
            delta = row.diff_against(older, included_fields=list(QUOTA_FIELDS))
            changes = [FieldChange(HUMAN_LABELS[c.field], c.old, c.new) for c in delta.changes]
            if not changes:
                continue
        else:
            after = row.history_type != "-"
            changes = [
                FieldChange(
                    HUMAN_LABELS[name],
                    None if after else getattr(row, name),
                    getattr(row, name) if after else None,
                )
                for name in QUOTA_FIELDS
            ]
        user = row.history_user
        out.append(
            QuotaChange(
                date=row.history_date,
                kind=KINDS[row.history_type],
                user=None if user is None else user.get_username(),
                change_reason=row.history_change_reason,
                revision=row.revision,
                changes=changes,
            )
        )
    return out


class HistoryContextHelper(HistoricalRecordContextHelper):
    """History rows in words: an empty foreign key as "—" (not "Deleted geography
    (pk=None)"), region lists by name rather than by id."""

    def prepare_delta_change_value(self, change: Any, value: Any) -> Any:
        if isinstance(value, DeletedObject) and value.pk is None:
            return "—"
        field = self.model._meta.get_field(change.field)
        if isinstance(field, ManyToManyField):
            target = get_m2m_reverse_field_name(field)
            # The rows hold the related objects (diff_against(foreign_keys_are_objs=True)).
            return ", ".join(sorted(str(row[target]) for row in value)) or "—"
        return super().prepare_delta_change_value(change, value)


class PolicyHistoryMixin(HumanFieldsMixin):
    """History pages that read well (empty foreign keys and region lists in words), field
    labels in words, finite numbers."""

    def get_historical_record_context_helper(
        self, request: HttpRequest, historical_record: Any
    ) -> HistoricalRecordContextHelper:
        return HistoryContextHelper(self.model, historical_record)  # type: ignore[attr-defined]


class PolicyHistoryAdmin(PolicyHistoryMixin, HistoryAdmin):
    """A policy record's admin with its audit history."""


class PolicyRevisionedAdmin(PolicyHistoryMixin, RevisionedAdmin):
    """A revisioned policy record's admin (``core.admin.RevisionedAdmin``)."""


@admin.register(Tier)
class TierAdmin(PolicyRevisionedAdmin):
    list_display = [
        "name",
        "priority",
        "p95_ttft_slo_s",
        "p95_itl_slo_s",
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


class TenantQuotaInline(HumanFieldsMixin, admin.StackedInline[TenantQuota, Tenant]):
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


class WorkloadProfileInline(HumanFieldsMixin, admin.TabularInline[WorkloadProfile, Tenant]):
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
class TenantAdmin(PolicyRevisionedAdmin):
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
    # The tier is a short list picked by its SLO and promise (``TenantAdminForm``).
    autocomplete_fields = ["home_region", "residency_geography", "residency_regions"]
    list_select_related = ["tier", "home_region", "residency_geography"]
    object_history_template = "admin/policies/tenant/object_history.html"
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

    # -- saving: one service, one history row ---------------------------------------------

    def save_model(
        self, request: HttpRequest, obj: Any, form: ModelForm[Any], change: bool
    ) -> None:
        """Save through ``tenant_save``, the service behind the API: the residency regions go
        with the other fields, so an update writes one history row holding every change."""
        if change and not form.has_changed() and not reverting(request):
            return
        tenant_save(tenant=obj, residency_regions=form.cleaned_data.get("residency_regions"))

    def save_related(
        self,
        request: HttpRequest,
        form: ModelForm[Any],
        formsets: list[BaseInlineFormSet[Any, Any, Any]],
        change: bool,
    ) -> None:
        # The regions were saved by ``tenant_save``; only the inlines are left.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    # -- history: reverting restores the regions; quota changes are listed too -------------

    def get_form(
        self, request: HttpRequest, obj: Model | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        regions = getattr(request, "_headroom_revert_regions", None)
        if regions is None:
            return form

        class RevertForm(form):  # type: ignore[misc, valid-type]
            """The history entry's region list, not today's, as the form's start."""

            def __init__(self, *args: Any, **form_kwargs: Any) -> None:
                super().__init__(*args, **form_kwargs)
                if not self.is_bound:
                    self.initial["residency_regions"] = regions

        return RevertForm

    def history_form_view(
        self,
        request: HttpRequest,
        object_id: str,
        version_id: str,
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        record = Tenant.history.filter(id=object_id, history_id=version_id).first()  # type: ignore[attr-defined]
        if record is not None:
            request._headroom_revert_regions = list(  # type: ignore[attr-defined]
                Region.objects.filter(
                    pk__in=record.residency_regions.values_list("region_id", flat=True)
                )
            )
        return super().history_form_view(request, object_id, version_id, extra_context)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        rows = list(
            TenantQuota.history.filter(tenant_id=object_id)  # type: ignore[attr-defined]
            .select_related("history_user")
            .order_by("-history_date", "-history_id")[:200]
        )
        quota_changes = _quota_changes(rows)
        context = {**(extra_context or {}), "quota_changes": quota_changes}
        response: HttpResponse = super().history_view(  # type: ignore[no-untyped-call]
            request, object_id, extra_context=context
        )
        return response


@admin.register(TenantQuota)
class TenantQuotaAdmin(PolicyRevisionedAdmin):
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
class WorkloadProfileAdmin(PolicyHistoryAdmin):
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
