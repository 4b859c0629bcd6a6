"""Plans over the API: read plans and re-plan runs; trigger a re-plan; approve or reject a plan.

Reads need any role (``policy-admin``, ``finance``, ``viewer``); triggering, approving and
rejecting need ``policy-admin``. A tenant key reads plans as its tenant sees them (only its
routing rows, the allocations that serve them and its unserved load); re-plan runs, triggering
and deciding are refused to it. Each action validates its body and calls one service;
approving and rejecting take a required ``reason``, as the plan's page does. The error
contract is ``controlplane.api.errors``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from controlplane.core.api import ReadOnlyViewSet
from controlplane.core.filters import StrictFilterSet
from controlplane.core.memo import RowMemo
from controlplane.core.tenancy import TENANT_FLEET
from controlplane.plans import selectors, services
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.serializers import (
    PlanDecisionSerializer,
    PlanDetailSerializer,
    PlanSerializer,
    PlanTenantDetailSerializer,
    ReplanRequestSerializer,
    ReplanRunSerializer,
)

# The details of the last few plans served, while each is unchanged (``plans.selectors.
# plan_detail_key``): shared by the requests of this process and never changed by them.
PLAN_DETAILS: RowMemo[dict[str, Any] | None] = RowMemo(size=8)

# Ids are bigints: longer digit strings cannot name a row (and would overflow the lookup).


class PlanFilter(StrictFilterSet):
    class Meta:
        model = Plan
        fields = ("state", "solver_status", "trigger")


class ReplanRunFilter(StrictFilterSet):
    class Meta:
        model = ReplanRun
        fields = ("status", "trigger")


def _validate_body(serializer_class: type[BaseSerializer[Any]], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class PlanViewSet(ReadOnlyViewSet):
    """Stored plans, newest first, with their allocations, routing, diff and explanation."""

    filterset_class = PlanFilter
    ordering_fields = ("version", "created_at", "cost_per_hour", "unserved_requests_per_s")
    # A key reads every plan, each cut down to its own tenant (``_detail``); it decides none.
    tenant_access = TENANT_FLEET

    def get_queryset(self) -> QuerySet[Plan]:
        if self.action == "list":
            # The list shows no document of a plan (its stale figures are counted).
            return selectors.plan_list().defer(*selectors.PLAN_DOCUMENTS)
        return selectors.plan_detail_queryset()

    def get_serializer_class(self) -> type[BaseSerializer[Any]]:
        if self.action == "list":
            return PlanSerializer
        if self.action == "replan":
            return ReplanRunSerializer
        if self.tenant_principal is not None:
            return PlanTenantDetailSerializer
        return PlanDetailSerializer

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        principal = self.tenant_principal
        if principal is not None:
            context["tenant"] = principal.tenant_name
        return context

    def _detail(self, plan: Plan) -> dict[str, Any]:
        """One plan in full, or as the key's tenant sees it."""
        if self.tenant_principal is not None:
            return dict(
                PlanTenantDetailSerializer(plan, context=self.get_serializer_context()).data
            )
        return dict(PlanDetailSerializer(plan).data)

    @extend_schema(
        summary="The active plan",
        responses={
            200: PlanDetailSerializer,
            404: OpenApiResponse(description="No plan is active."),
        },
        filters=False,
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def active(self, request: Request) -> Response:
        key = selectors.plan_detail_key(state=Plan.State.ACTIVE)
        if key is None:
            raise exceptions.NotFound("No plan is active yet: run a re-plan.")
        pk, created_at, decision = key
        if self.tenant_principal is not None:
            plan = selectors.plan_detail_queryset().filter(pk=pk).first()
            if plan is None:
                raise exceptions.NotFound("No plan is active yet: run a re-plan.")
            return Response(self._detail(plan))
        # The same plan, unchanged since: its detail as this process last served it, rendered
        # once (a large fleet's plan is about 100 kB of JSON).
        data = PLAN_DETAILS.get(pk, created_at, lambda: self._full_detail(pk), *decision)
        if data is None:  # superseded and deleted since the key was read
            raise exceptions.NotFound("No plan is active yet: run a re-plan.")
        response = Response(data)
        response.rendered_from = data  # type: ignore[attr-defined]
        return response

    @staticmethod
    def _full_detail(pk: int) -> dict[str, Any] | None:
        plan = selectors.plan_detail_queryset().filter(pk=pk).first()
        return None if plan is None else dict(PlanDetailSerializer(plan).data)

    @extend_schema(
        summary="Re-plan now",
        description=(
            "Queue a re-plan run (policy-admin). Answers 202 with the run; follow it at "
            "/api/plans/runs/{id}/. It runs off the web server: on a worker, or without a "
            "broker in a child process of its own."
        ),
        request=ReplanRequestSerializer,
        responses={202: ReplanRunSerializer},
        filters=False,
    )
    @action(detail=False, methods=["post"], pagination_class=None)
    def replan(self, request: Request) -> Response:
        _validate_body(ReplanRequestSerializer, request)
        run = services.replan_request(trigger=Plan.Trigger.API, user=request.user)
        run.refresh_from_db()
        location = reverse("plan-run-detail", kwargs={"pk": run.pk})
        return Response(
            ReplanRunSerializer(run).data,
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": location},
        )

    @extend_schema(
        summary="Approve a plan awaiting approval (policy-admin); it becomes active",
        request=PlanDecisionSerializer,
        responses={200: PlanDetailSerializer},
        filters=False,
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        reason = _validate_body(PlanDecisionSerializer, request)["reason"]
        plan = services.plan_approve(plan=self.get_object(), user=request.user, reason=reason)
        return Response(PlanDetailSerializer(self._fresh(plan)).data)

    @extend_schema(
        summary="Reject a plan awaiting approval (policy-admin); the active plan stays",
        request=PlanDecisionSerializer,
        responses={200: PlanDetailSerializer},
        filters=False,
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        reason = _validate_body(PlanDecisionSerializer, request)["reason"]
        plan = services.plan_reject(plan=self.get_object(), user=request.user, reason=reason)
        return Response(PlanDetailSerializer(self._fresh(plan)).data)

    @staticmethod
    def _fresh(plan: Plan) -> Plan:
        return selectors.plan_detail_queryset().get(pk=plan.pk)


class ReplanRunViewSet(ReadOnlyViewSet):
    """Re-plan runs, newest first: status, timing, attempts, error, the plan they made and the
    reason they were requested (the drift alerts behind a drift re-plan)."""

    serializer_class = ReplanRunSerializer
    filterset_class = ReplanRunFilter
    ordering_fields = ("created_at", "finished_at")

    def get_queryset(self) -> QuerySet[ReplanRun]:
        return selectors.replan_run_list()
