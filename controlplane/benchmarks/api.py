"""Benchmarks over the API, under ``/api/benchmarks/``.

- ``runs/``: benchmark runs, newest first (filter on ``status``, ``kind``, ``trigger``,
  ``shape``); ``POST`` queues an engine benchmark or (``"kind": "endpoint"``) an endpoint load
  test of a shape (policy-admin): 202 with the new run, or 200 with the run already queued or
  running for that shape and kind (requests are idempotent).
- ``endpoints/``: the replica each shape's endpoint load test measures, one per shape, with
  the record endpoints' contract (CRUD, ``history/``, ETag and If-Match; filter on ``shape``,
  ``enabled``, ``api``).
- ``freshness/``: per shape, its freshest capacity figure, its age, and why it would be
  measured again (empty: fresh), with its active and last run.

Reads need any role; queueing and endpoint writes need ``policy-admin``.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from controlplane.api.viewsets import RevisionedRecordViewSet
from controlplane.benchmarks import selectors, services
from controlplane.benchmarks.models import BenchmarkEndpoint, BenchmarkRun
from controlplane.benchmarks.serializers import (
    BenchmarkEndpointSerializer,
    BenchmarkRequestSerializer,
    BenchmarkRunSerializer,
    FreshnessSerializer,
)
from controlplane.core.api import QueryGuardMixin, ReadOnlyViewSet, RecordPagination
from controlplane.core.filters import StrictFilterSet
from controlplane.core.parsers import StrictJSONParser
from controlplane.core.roles import ROLES, RolePermission


class BenchmarkRunFilter(StrictFilterSet):
    shape = django_filters.CharFilter(field_name="shape__name")

    class Meta:
        model = BenchmarkRun
        fields = ("status", "kind", "trigger", "device", "shape")


class BenchmarkRunViewSet(mixins.CreateModelMixin, ReadOnlyViewSet):
    """Benchmark runs: status, timing, what they measured on, results and figures."""

    parser_classes = [StrictJSONParser]
    filterset_class = BenchmarkRunFilter
    ordering_fields = ("requested_at", "finished_at")

    def get_queryset(self) -> QuerySet[BenchmarkRun]:
        return BenchmarkRun.objects.select_related("shape", "requested_by").prefetch_related(
            "figures"
        )

    def get_serializer_class(self) -> type[BaseSerializer[Any]]:
        if self.action == "create":
            return BenchmarkRequestSerializer
        return BenchmarkRunSerializer

    @extend_schema(
        summary="Queue a benchmark of a shape",
        description=(
            "policy-admin. `kind` `engine` (default) or `endpoint` (the load test of the "
            "shape's enabled benchmark endpoint; 400 without one). Answers 202 with the new "
            "run, or 200 with the run already queued or running for the shape and kind. "
            "Without a broker the run has finished when this answers."
        ),
        request=BenchmarkRequestSerializer,
        responses={200: BenchmarkRunSerializer, 202: BenchmarkRunSerializer},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = BenchmarkRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run, created = services.benchmark_run_request(
            shape=body.validated_data["shape"],
            kind=body.validated_data["kind"],
            reason=body.validated_data["reason"] or "requested through the API",
            user=request.user,
        )
        run.refresh_from_db()
        return Response(
            BenchmarkRunSerializer(run).data,
            status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK,
            headers={"Location": reverse("benchmark-run-detail", kwargs={"pk": run.pk})},
        )


class BenchmarkEndpointFilter(StrictFilterSet):
    shape = django_filters.CharFilter(field_name="shape__name")

    class Meta:
        model = BenchmarkEndpoint
        fields = ("shape", "enabled", "api")


class BenchmarkEndpointViewSet(RevisionedRecordViewSet):
    """Benchmark endpoints: the replica of each shape its endpoint load test measures."""

    queryset = BenchmarkEndpoint.objects.select_related("shape")
    serializer_class = BenchmarkEndpointSerializer
    filterset_class = BenchmarkEndpointFilter
    search_fields = ("shape__name", "base_url", "served_model_name")
    ordering_fields = ("id", "shape__name", "enabled")


class FreshnessViewSet(QueryGuardMixin, viewsets.GenericViewSet[Any]):
    """How fresh each shape's capacity figures are, in shape name order."""

    permission_classes = [RolePermission]
    read_roles = frozenset(ROLES)
    serializer_class = FreshnessSerializer
    pagination_class = RecordPagination

    def get_queryset(self) -> QuerySet[Any]:
        # The rows are computed (selectors.shapes_freshness); the schema needs a model.
        return BenchmarkRun.objects.none()

    @extend_schema(
        summary="Capacity figure freshness per shape", responses=FreshnessSerializer(many=True)
    )
    def list(self, request: Request) -> Response:
        rows = selectors.shapes_freshness()
        # The rows are a list, which the paginator takes as it takes a queryset; the stubs
        # accept only a queryset, and type a serializer's instance as one object even with
        # many=True.
        page = self.paginate_queryset(rows)  # type: ignore[arg-type]
        data = FreshnessSerializer(page if page is not None else rows, many=True).data  # type: ignore[arg-type]
        return self.get_paginated_response(data) if page is not None else Response(data)
