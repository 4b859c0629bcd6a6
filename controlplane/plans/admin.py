"""Admin UI for plans: read-only plans with their allocations inline, re-plan runs, a
"Re-plan now" button on the plan list and approve/reject actions, for policy admins.

Plans are written only by re-planning, so nobody adds, changes or deletes them here; the
button calls the same service as the API, which checks the role again. Approving and
rejecting lead to the plan's confirmation page (``controlplane.web``), which asks for the
reason the decision is recorded with.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from controlplane.core import formatting
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
        "cost_text",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description="cost ($/h)")
    def cost_text(self, obj: PlanAllocation) -> str:
        return formatting.money(obj.cost_per_hour)


def _pretty_json(value: Any) -> str:
    text = json.dumps(formatting.tidy(value), indent=2, ensure_ascii=False)
    return format_html("<pre>{}</pre>", text)


@admin.register(Plan)
class PlanAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[Plan]):
    list_display = [
        "version",
        "review_link",
        "state",
        "solver_status",
        "trigger",
        "cost_text",
        "planned_text",
        "unserved_text",
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
        "cost_text",
        "gap_text",
        "solve_seconds_text",
        "planned_text",
        "unserved_text",
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

    # Stored floats, rounded by what they mean (money to the cent, rates to three
    # significant figures), sorting by the stored value.

    @admin.display(description="cost ($/h)", ordering="cost_per_hour")
    def cost_text(self, obj: Plan) -> str:
        return formatting.money(obj.cost_per_hour)

    @admin.display(description="planned req/s", ordering="planned_requests_per_s")
    def planned_text(self, obj: Plan) -> str:
        return formatting.rate(obj.planned_requests_per_s)

    @admin.display(description="unserved req/s", ordering="unserved_requests_per_s")
    def unserved_text(self, obj: Plan) -> str:
        return formatting.rate(obj.unserved_requests_per_s)

    @admin.display(description="optimality gap")
    def gap_text(self, obj: Plan) -> str:
        return formatting.rate(obj.gap)

    @admin.display(description="solve time (s)")
    def solve_seconds_text(self, obj: Plan) -> str:
        return formatting.rate(obj.solve_seconds)

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

    @admin.action(description="Approve the selected plan… (asks for a reason)")
    def approve_plans(self, request: HttpRequest, queryset: QuerySet[Plan]) -> HttpResponse | None:
        return self._confirm(request, queryset, "approve")

    @admin.action(description="Reject the selected plan… (asks for a reason)")
    def reject_plans(self, request: HttpRequest, queryset: QuerySet[Plan]) -> HttpResponse | None:
        return self._confirm(request, queryset, "reject")

    def _confirm(
        self, request: HttpRequest, queryset: QuerySet[Plan], action: str
    ) -> HttpResponse | None:
        """A decision is never one click: the plan's confirmation page shows what it changes
        and asks for the reason ``plan_approve`` / ``plan_reject`` record with the actor."""
        plans = list(queryset.order_by("-version")[:2])
        if len(plans) != 1:
            self.message_user(
                request,
                f"Select one plan to {action}: its page asks for a reason.",
                messages.ERROR,
            )
            return None
        url = reverse("web:plan-decide", args=[plans[0].version])
        return HttpResponseRedirect(f"{url}?action={action}")

    @admin.display(description="review")
    def review_link(self, obj: Plan) -> str:
        return format_html('<a href="{}">plan page</a>', reverse("web:plan", args=[obj.version]))

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
