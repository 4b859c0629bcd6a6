"""Admin UI for plans: read-only plans with their allocations inline, re-plan runs, a
"Re-plan now" button on the plan list and approve/reject actions, for policy admins.

Plans are written only by re-planning, so nobody adds, changes or deletes them here; the
button and the actions call the same services as the API, which check the role again.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from controlplane.core.admin import ReadOnlyAdminMixin
from controlplane.core.roles import POLICY_ADMIN, user_roles
from controlplane.plans import services
from controlplane.plans.models import Plan, PlanAllocation, ReplanRun


def _is_policy_admin(request: HttpRequest) -> bool:
    return POLICY_ADMIN in user_roles(request.user)


class PlanAllocationInline(ReadOnlyAdminMixin, admin.TabularInline[PlanAllocation, Plan]):
    model = PlanAllocation
    fields: ClassVar[tuple[str, ...]] = (
        "region",
        "zone",
        "shape",
        "accelerator",
        "gpus_per_replica",
        "replicas",
        "cost_per_hour",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False


def _pretty_json(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))


@admin.register(Plan)
class PlanAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[Plan]):
    list_display = [
        "version",
        "state",
        "solver_status",
        "trigger",
        "cost_per_hour",
        "planned_requests_per_s",
        "unserved_requests_per_s",
        "stale_figure_count",
        "created_at",
        "activated_at",
    ]
    list_filter = ["state", "solver_status", "trigger"]
    ordering = ["-version"]
    inlines = [PlanAllocationInline]
    actions = ["approve_plans", "reject_plans"]
    fields: ClassVar[tuple[str, ...]] = (
        "version",
        "state",
        "solver_status",
        "trigger",
        "inputs_hash",
        "cost_per_hour",
        "gap",
        "solve_seconds",
        "planned_requests_per_s",
        "unserved_requests_per_s",
        "created_at",
        "created_by",
        "activated_at",
        "approved_by",
        "rejected_at",
        "rejected_by",
        "explanation_text",
        "binding_text",
        "stale_figures_text",
        "forecast_band_text",
        "diff_text",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Plan]:
        return (
            super().get_queryset(request).select_related("created_by", "approved_by", "rejected_by")
        )

    @admin.display(description="stale figures")
    def stale_figure_count(self, obj: Plan) -> int:
        return len(obj.stale_figures or [])

    @admin.display(description="explanation")
    def explanation_text(self, obj: Plan) -> str:
        return _pretty_json(obj.explanation)

    @admin.display(description="binding constraints")
    def binding_text(self, obj: Plan) -> str:
        return _pretty_json(obj.binding)

    @admin.display(description="stale capacity figures")
    def stale_figures_text(self, obj: Plan) -> str:
        return _pretty_json(obj.stale_figures)

    @admin.display(description="forecast band")
    def forecast_band_text(self, obj: Plan) -> str:
        return _pretty_json(obj.forecast_band)

    @admin.display(description="diff against the active plan")
    def diff_text(self, obj: Plan) -> str:
        return _pretty_json(obj.diff)

    # -- actions for policy admins ----------------------------------------------------------

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        if not _is_policy_admin(request):
            actions.pop("approve_plans", None)
            actions.pop("reject_plans", None)
        return actions

    @admin.action(description="Approve the selected plan (it becomes active)")
    def approve_plans(self, request: HttpRequest, queryset: QuerySet[Plan]) -> None:
        self._decide(request, queryset, services.plan_approve, "approved")

    @admin.action(description="Reject the selected plans")
    def reject_plans(self, request: HttpRequest, queryset: QuerySet[Plan]) -> None:
        self._decide(request, queryset, services.plan_reject, "rejected")

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[Plan], decide: Any, verb: str
    ) -> None:
        for plan in queryset.order_by("-version"):
            try:
                decide(plan=plan, user=request.user)
            except (ValidationError, PermissionDenied) as exc:
                text = " ".join(getattr(exc, "messages", None) or [str(exc)])
                self.message_user(request, f"Plan v{plan.version}: {text}", messages.ERROR)
            else:
                self.message_user(request, f"Plan v{plan.version} {verb}.", messages.SUCCESS)

    # -- the "Re-plan now" button -----------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        replan = path(
            "replan/",
            self.admin_site.admin_view(self.replan_view),
            name="plans_plan_replan",
        )
        return [replan, *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "can_replan": _is_policy_admin(request)}
        return super().changelist_view(request, extra_context=context)

    def replan_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not _is_policy_admin(request):
            raise PermissionDenied
        run = services.replan_request(trigger=Plan.Trigger.ADMIN, user=request.user)
        run.refresh_from_db()
        level = messages.SUCCESS
        if run.status == ReplanRun.Status.SUCCEEDED and run.plan is not None:
            text = (
                f"Re-plan #{run.pk} made plan v{run.plan.version} ({run.plan.get_state_display()})."
            )
        elif run.status == ReplanRun.Status.UNCHANGED and run.plan is not None:
            text = (
                f"Re-plan #{run.pk}: inputs unchanged since plan v{run.plan.version}; no new plan."
            )
        elif run.status in (ReplanRun.Status.QUEUED, ReplanRun.Status.RUNNING):
            text = f"Re-plan #{run.pk} queued."
        else:
            level = messages.WARNING
            text = f"Re-plan #{run.pk} {run.get_status_display()}: {run.error}"
        self.message_user(request, text, level)
        return HttpResponseRedirect(reverse("admin:plans_plan_changelist"))


@admin.register(ReplanRun)
class ReplanRunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[ReplanRun]):
    list_display = [
        "id",
        "status",
        "trigger",
        "requested_by",
        "plan",
        "created_at",
        "finished_at",
        "attempts",
    ]
    list_filter = ["status", "trigger"]
    ordering = ["-created_at"]
    fields: ClassVar[tuple[str, ...]] = (
        "status",
        "trigger",
        "requested_by",
        "plan",
        "created_at",
        "started_at",
        "finished_at",
        "attempts",
        "error",
        "reason",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[ReplanRun]:
        return super().get_queryset(request).select_related("requested_by", "plan")
