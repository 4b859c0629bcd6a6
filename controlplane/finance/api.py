"""Finance over the API: forecast, commitments, promises, showback and history, as JSON or CSV.

Reads need any role (``finance``, ``viewer``, ``policy-admin``). Every endpoint answers JSON,
or CSV with ``?format=csv`` or ``Accept: text/csv`` (the same rows and numbers). A bad query
parameter is a 400 naming it; no active plan is a 404. Each view parses its query, calls one
service and returns its report. A tenant key gets its own tenant's rows (the services'
``tenant``); the commitments are the fleet's and refused to it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from controlplane.core.api import QueryGuardMixin
from controlplane.core.renderers import RenderedOnceJSONRenderer
from controlplane.core.roles import ROLES, RolePermission
from controlplane.core.tenancy import TENANT_OWN, request_principal
from controlplane.finance import opencost, services
from controlplane.finance.renderers import CSVRenderer, ReportCSVRenderer
from controlplane.finance.serializers import (
    GroupedQuerySerializer,
    OpenCostQuerySerializer,
    OpenCostResponseSerializer,
    ReportQuerySerializer,
    ReportSerializer,
)

NOT_FOUND = OpenApiResponse(description="No plan is active yet.")
CSV_NOTE = (
    " Add `?format=csv` or send `Accept: text/csv` for the same rows as CSV (header: `columns`)."
)


class _FinanceView(QueryGuardMixin, APIView):
    permission_classes = [RolePermission]
    read_roles = frozenset(ROLES)
    # A stored report's JSON and CSV are rendered once per process (core.renderers).
    renderer_classes = [RenderedOnceJSONRenderer, BrowsableAPIRenderer, ReportCSVRenderer]
    query_serializer: type[Serializer[Any]] = ReportQuerySerializer
    tenant_access: str | None = TENANT_OWN

    @property
    def tenant(self) -> str | None:
        """The tenant a tenant key's request is cut down to; None for a user."""
        principal = request_principal(self.request)
        return principal.tenant_name if principal is not None else None

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        # Errors keep the API's JSON error contract even when CSV was asked for.
        if response.status_code >= 400 and isinstance(
            getattr(request, "accepted_renderer", None), CSVRenderer
        ):
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)

    def query(self, request: Request) -> dict[str, Any]:
        params = {k: v for k, v in request.query_params.items() if k != "format"}
        serializer = self.query_serializer(data=params)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def answer(self, build: Any) -> Response:
        try:
            report = build()
        except services.FinanceInputError as exc:
            raise exceptions.ValidationError({exc.field: [exc.message]}) from exc
        except services.NoActivePlan as exc:
            raise exceptions.NotFound(str(exc)) from exc
        if isinstance(report, dict):
            return Response(report)
        response = Response(report.as_dict())
        if report.stored:
            response.rendered_from = report  # type: ignore[attr-defined]
        return response


class ForecastView(_FinanceView):
    query_serializer = GroupedQuerySerializer

    @extend_schema(
        summary="Replica-hours, GPU-hours and cost per period and group",
        description=(
            "For the active plan and the demand forecast, from the current period on: each row "
            "a period and a group (`group_by`), with the quantile it was sized at and the band's "
            "low and high edges. Every period is the sum of its days: today and before are the "
            "active plan, hour for hour; later days the placement re-solved at the day's "
            "forecast." + CSV_NOTE
        ),
        parameters=[GroupedQuerySerializer],
        responses={200: ReportSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        q = self.query(request)
        return self.answer(
            lambda: services.finance_forecast(
                period=q["period"],
                group_by=q["group_by"],
                horizon=q.get("horizon"),
                tenant=self.tenant,
            )
        )


class CommitmentsView(_FinanceView):
    # The fleet's reservation: no tenant's figure.
    tenant_access = None

    @extend_schema(
        summary="Reserved GPUs per region and GPU type, the on-demand remainder and the saving",
        description=(
            "The least-cost reservation for the horizon's hourly GPUs at the forecast's low "
            "quantile, priced per period at the planned quantile." + CSV_NOTE
        ),
        parameters=[ReportQuerySerializer],
        responses={200: ReportSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        q = self.query(request)
        return self.answer(
            lambda: services.finance_commitments(period=q["period"], horizon=q.get("horizon"))
        )


class PromisesView(_FinanceView):
    query_serializer = ReportQuerySerializer

    @extend_schema(
        summary="The price of each promise: zone survival, N+1, burst headroom",
        description=(
            "The active plan's problem re-solved one promise lighter at a time: the fleet's "
            "cost per hour with and without each promise, and its price per hour and month, "
            "shared among tiers and tenants by the load that promised it. Computed once per "
            "plan version (the first request waits for the solves)." + CSV_NOTE
        ),
        parameters=[
            OpenApiParameter("format", str, enum=["json", "csv"], description="Answer format.")
        ],
        responses={200: ReportSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        return self.answer(lambda: services.finance_promises(tenant=self.tenant))


class ShowbackView(_FinanceView):
    @extend_schema(
        summary="Cost per tenant per period and per million tokens, idle headroom as a line",
        description=(
            "Each tenant's usage cost and its share of the idle headroom (shared in proportion "
            "to usage), and one idle-headroom line per period." + CSV_NOTE
        ),
        parameters=[ReportQuerySerializer],
        responses={200: ReportSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        q = self.query(request)
        return self.answer(
            lambda: services.finance_showback(
                period=q["period"], horizon=q.get("horizon"), tenant=self.tenant
            )
        )


class HistoryView(_FinanceView):
    query_serializer = GroupedQuerySerializer

    @extend_schema(
        summary="Actuals: what the active plans held in past periods, against the forecast",
        description=(
            "The last `horizon` periods up to now, from the plans' activation times, by group; "
            "`planned_*` is what the earliest stored forecast covering the period said, and "
            "`variance_*` held less planned once the period has ended." + CSV_NOTE
        ),
        parameters=[GroupedQuerySerializer],
        responses={200: ReportSerializer},
    )
    def get(self, request: Request) -> Response:
        q = self.query(request)
        return self.answer(
            lambda: services.finance_history(
                period=q["period"],
                group_by=q["group_by"],
                horizon=q.get("horizon"),
                tenant=self.tenant,
            )
        )


class OpenCostAllocationView(_FinanceView):
    query_serializer = OpenCostQuerySerializer
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer]

    @extend_schema(
        summary="The forecast in OpenCost's allocation API",
        description=(
            "For cost tools that read OpenCost's `/allocation` API: OpenCost's parameters "
            "(`window`, `step`, `aggregate`, `accumulate`, `accumulateBy`, `includeIdle`, "
            "`shareIdle`, …) and response, `data` one set per step, each mapping the "
            "aggregate's name to an allocation with OpenCost's 49 fields; the idle headroom is "
            "`__idle__`. Windows are whole UTC days from today to the forecast's end. An "
            "unknown parameter, or a value this forecast cannot answer, is a 400 naming it."
        ),
        parameters=[OpenCostQuerySerializer],
        responses={200: OpenCostResponseSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        params = {str(k): str(v) for k, v in request.query_params.items() if k != "format"}
        return self.answer(lambda: opencost.opencost_allocation(params, tenant=self.tenant))
