"""Read endpoints for telemetry, and acknowledging drift alerts.

Under ``/api/telemetry/``: ``pulls/``, ``derivations/``, ``observations/``, ``profiles/``
(workload profiles measured from telemetry), ``series/`` (with ``{id}/samples/``) and
``alerts/`` (with ``{id}/acknowledge/``), ``pool-alerts/`` (each pool's drift with its
price) and ``pool-signal-alerts/`` (each pool's engine latency and KV capacity against its
plan). Any role reads; acknowledging needs
``policy-admin``. A tenant key reads its own tenant's observations, profiles, series and
drift alerts (and acknowledges its alerts); pulls, derivations and pool alerts (drift and
signal) span tenants
and are refused to it. Lists are paginated (``limit``/``offset``) and filter on the fields named in
each view's ``filterset_fields``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.serializers import BurstinessField, PercentileBoundsFields
from controlplane.core.api import ReadOnlyViewSet
from controlplane.core.serializers import read_only_by
from controlplane.core.tenancy import TENANT_OWN, request_principal
from controlplane.policies.models import PROFILE_FIGURES, WorkloadProfile
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

# -- serializers ----------------------------------------------------------------------------------


class TelemetryPullSerializer(serializers.ModelSerializer[TelemetryPull]):
    duration_s = serializers.FloatField(read_only=True, allow_null=True)

    class Meta:
        model = TelemetryPull
        fields = [
            "id",
            "task_id",
            "attempt",
            "status",
            "started_at",
            "finished_at",
            "duration_s",
            "window_start",
            "window_end",
            "bucket_s",
            "queries",
            "series_fetched",
            "samples_fetched",
            "samples_stored",
            "skipped_series",
            "unknown_labels",
            "missing_metrics",
            "error",
        ]


class ProfileDerivationSerializer(serializers.ModelSerializer[ProfileDerivation]):
    class Meta:
        model = ProfileDerivation
        fields = [
            "id",
            "status",
            "started_at",
            "finished_at",
            "window_start",
            "window_end",
            "profiles_created",
            "profiles_unchanged",
            "alerts_raised",
            "alerts_updated",
            "alerts_resolved",
            "unknown_labels",
            "skipped",
            "error",
        ]


class ObservedWorkloadSerializer(
    PercentileBoundsFields, BurstinessField, serializers.ModelSerializer[ObservedWorkload]
):
    class Meta:
        model = ObservedWorkload
        fields = [
            "id",
            "derivation",
            "tenant",
            "model",
            "region",
            "workload_class",
            "profile",
            "requests",
            "buckets",
            "mean_requests_per_s",
            "peak_requests_per_s",
            "prompt_tokens_p50",
            "prompt_tokens_mean",
            "prompt_tokens_p90",
            "prompt_tokens_p95",
            "prompt_tokens_p99",
            "output_tokens_p50",
            "output_tokens_mean",
            "output_tokens_p90",
            "output_tokens_p95",
            "output_tokens_p99",
            "prefix_cache_hit_rate",
            "censored",
            "percentile_bounds",
            "coarse",
            "between",
            "ttft_p95_s",
            "residence_s",
            "kv_cache_usage_mean",
            "running_mean",
            "waiting_mean",
            "preemptions_per_s",
            "rate_source",
            "itl_mean_s",
            "itl_p95_s",
            "queue_time_mean_s",
            "queue_time_p95_s",
            "kv_cache_capacity_tokens",
            "burstiness",
        ]


class TelemetryProfileSerializer(
    PercentileBoundsFields, BurstinessField, serializers.ModelSerializer[WorkloadProfile]
):
    tenant = read_only_by()
    model = read_only_by()
    workload_class = read_only_by()
    region = read_only_by()
    lower_bounds = serializers.SerializerMethodField(
        help_text='Censored figures as they read: "≥ 5,000" (beyond the top histogram bucket).'
    )

    def get_lower_bounds(self, profile: WorkloadProfile) -> dict[str, str]:
        return {name: f"≥ {getattr(profile, name):,.0f}" for name in profile.censored}

    def to_representation(self, instance: WorkloadProfile) -> dict[str, Any]:
        data = dict(super().to_representation(instance))
        principal = request_principal(self.context.get("request"))
        if principal is not None:
            # A pooled profile stands for several tenants; a key learns only that its own
            # tenant is among them, not who the others are.
            data["pool_tenants"] = [n for n in data["pool_tenants"] if n == principal.tenant_name]
        return data

    class Meta:
        model = WorkloadProfile
        fields = [
            "id",
            "tenant",
            "model",
            "workload_class",
            "region",
            "version",
            "source",
            "created_at",
            *PROFILE_FIGURES,
            "censored",
            "lower_bounds",
            "percentile_bounds",
            "coarse",
            "between",
            "unmeasured",
            "pool_tenants",
            "burstiness",
        ]


class TelemetrySeriesSerializer(serializers.ModelSerializer[TelemetrySeries]):
    class Meta:
        model = TelemetrySeries
        fields = [
            "id",
            "tenant",
            "model",
            "region",
            "workload_class",
            "metric",
            "le",
            "bucket_s",
            "first_seen_at",
        ]


class SampleSerializer(serializers.Serializer[dict[str, Any]]):
    bucket_start = serializers.DateTimeField()
    value = serializers.FloatField()


class DriftAlertSerializer(serializers.ModelSerializer[DriftAlert]):
    tenant = read_only_by()
    model = read_only_by()
    region = read_only_by()
    workload_class = read_only_by()
    shape = read_only_by()
    acknowledged_by = read_only_by("username")
    replica_delta = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = DriftAlert
        fields = [
            "id",
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
            "replica_delta",
            "pool_alert",
            "pool_share",
            "occurrences",
            "first_seen_at",
            "last_seen_at",
            "acknowledged_at",
            "acknowledged_by",
            "resolved_at",
        ]
        read_only_fields = fields


class PoolDriftAlertSerializer(serializers.ModelSerializer[PoolDriftAlert]):
    model = read_only_by()
    region = read_only_by()
    replica_delta = serializers.IntegerField(read_only=True, allow_null=True)
    cost_per_hour_delta = serializers.FloatField(read_only=True, allow_null=True)
    tenant_alerts: serializers.PrimaryKeyRelatedField[Any] = serializers.PrimaryKeyRelatedField(
        many=True, read_only=True
    )

    class Meta:
        model = PoolDriftAlert
        fields = [
            "id",
            "model",
            "region",
            "status",
            "message",
            "pricing",
            "pricing_error",
            "priced_at",
            "replicas_before",
            "replicas_after",
            "replica_delta",
            "gpus_before",
            "gpus_after",
            "cost_per_hour_before",
            "cost_per_hour_after",
            "cost_per_hour_delta",
            "unserved_before",
            "unserved_after",
            "pools",
            "tenants",
            "tenant_alerts",
            "raised_by",
            "changed_by",
            "occurrences",
            "first_seen_at",
            "last_seen_at",
            "resolved_at",
        ]
        read_only_fields = fields


class PoolSignalAlertSerializer(serializers.ModelSerializer[PoolSignalAlert]):
    model = read_only_by()
    region = read_only_by()
    shape = read_only_by()

    class Meta:
        model = PoolSignalAlert
        fields = [
            "id",
            "model",
            "region",
            "kind",
            "status",
            "message",
            "measured_value",
            "raised_value",
            "reference_value",
            "threshold",
            "window_s",
            "shape",
            "figures",
            "raised_by",
            "changed_by",
            "occurrences",
            "first_seen_at",
            "last_seen_at",
            "resolved_at",
        ]
        read_only_fields = fields


# -- views ----------------------------------------------------------------------------------------


class TelemetryReadViewSet(ReadOnlyViewSet):
    """List and retrieve; any role reads."""


class TelemetryPullViewSet(TelemetryReadViewSet):
    queryset = TelemetryPull.objects.all()
    serializer_class = TelemetryPullSerializer
    filterset_fields = ["status", "bucket_s", "task_id"]
    ordering_fields = ["id", "started_at", "window_end"]


class ProfileDerivationViewSet(TelemetryReadViewSet):
    queryset = ProfileDerivation.objects.all()
    serializer_class = ProfileDerivationSerializer
    filterset_fields = ["status"]
    ordering_fields = ["id", "started_at", "window_end"]


class ObservedWorkloadViewSet(TelemetryReadViewSet):
    tenant_access = TENANT_OWN
    tenant_lookup = "tenant"
    queryset = ObservedWorkload.objects.all()
    serializer_class = ObservedWorkloadSerializer
    filterset_fields = ["derivation", "tenant", "model", "region", "workload_class"]
    ordering_fields = ["id", "tenant", "peak_requests_per_s"]


class TelemetryProfileViewSet(TelemetryReadViewSet):
    """Workload profile versions measured from telemetry (every version, newest first)."""

    tenant_access = TENANT_OWN
    tenant_lookup = "tenant__name"

    queryset = (
        WorkloadProfile.objects.filter(source=WorkloadProfile.Source.TELEMETRY)
        .select_related("tenant", "model", "workload_class", "region")
        .order_by("tenant__name", "model__name", "region__name", "-version")
    )
    serializer_class = TelemetryProfileSerializer
    filterset_fields = {
        "tenant__name": ["exact"],
        "model__name": ["exact"],
        "region__name": ["exact"],
        "workload_class__name": ["exact"],
    }
    ordering_fields = ["id", "version", "created_at"]


class TelemetrySeriesViewSet(TelemetryReadViewSet):
    tenant_access = TENANT_OWN
    tenant_lookup = "tenant"
    queryset = TelemetrySeries.objects.all()
    serializer_class = TelemetrySeriesSerializer
    filterset_fields = ["tenant", "model", "region", "workload_class", "metric", "le", "bucket_s"]
    ordering_fields = ["id", "tenant", "metric"]

    @extend_schema(
        summary="Samples of one series",
        description="Bucket start and value, oldest first; ``start`` and ``end`` (ISO 8601) "
        "bound the bucket starts, [start, end).",
        parameters=[
            OpenApiParameter("start", str, description="First bucket start (inclusive)."),
            OpenApiParameter("end", str, description="Last bucket start (exclusive)."),
        ],
        responses=SampleSerializer(many=True),
        filters=False,
    )
    @action(detail=True, methods=["get"], serializer_class=SampleSerializer, filter_backends=[])
    def samples(self, request: Request, pk: str) -> Response:
        series = self.get_object()
        rows: QuerySet[Any] = series.samples.order_by("bucket_start")
        for name, lookup in (("start", "bucket_start__gte"), ("end", "bucket_start__lt")):
            raw = request.query_params.get(name)
            if raw is None:
                continue
            moment = parse_datetime(raw)
            if moment is None or moment.tzinfo is None:
                raise exceptions.ValidationError(
                    {name: ["Give an ISO 8601 date-time with a time zone."]}
                )
            rows = rows.filter(**{lookup: moment})
        page = self.paginate_queryset(rows.values("bucket_start", "value"))
        # The stubs type a serializer's instance as one object, also with many=True.
        data = SampleSerializer(page, many=True).data  # type: ignore[arg-type]
        return self.get_paginated_response(data)


class DriftAlertViewSet(TelemetryReadViewSet):
    tenant_access = TENANT_OWN
    tenant_lookup = "tenant__name"
    tenant_writes = frozenset({"acknowledge"})
    queryset = DriftAlert.objects.select_related(
        "tenant", "model", "region", "workload_class", "shape", "acknowledged_by"
    )
    serializer_class = DriftAlertSerializer
    filterset_fields = {
        "status": ["exact"],
        "kind": ["exact"],
        "tenant__name": ["exact"],
        "model__name": ["exact"],
        "region__name": ["exact"],
    }
    ordering_fields = ["id", "last_seen_at", "first_seen_at"]

    @extend_schema(
        summary="Acknowledge a drift alert",
        description="Marks an open alert as seen (policy-admin). Acknowledging twice changes "
        "nothing; a resolved alert answers 400.",
        request=None,
        responses=DriftAlertSerializer,
    )
    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str) -> Response:
        alert = self.get_object()
        alert = drift.drift_alert_acknowledge(alert=alert, user=request.user)
        return Response(self.get_serializer(alert).data)


class PoolDriftAlertViewSet(TelemetryReadViewSet):
    """Each pool's drift: every tenant alert of the pool summed and priced by re-solving."""

    queryset = PoolDriftAlert.objects.select_related("model", "region").prefetch_related(
        "tenant_alerts"
    )
    serializer_class = PoolDriftAlertSerializer
    filterset_fields = {
        "status": ["exact"],
        "pricing": ["exact"],
        "model__name": ["exact"],
        "region__name": ["exact"],
    }
    ordering_fields = ["id", "last_seen_at", "first_seen_at"]


class PoolSignalAlertViewSet(TelemetryReadViewSet):
    """Each pool's engine signals (p95 inter-token latency, p95 queue time, KV-cache capacity)
    against what the active plan assumed of them."""

    queryset = PoolSignalAlert.objects.select_related("model", "region", "shape")
    serializer_class = PoolSignalAlertSerializer
    filterset_fields = {
        "status": ["exact"],
        "kind": ["exact"],
        "model__name": ["exact"],
        "region__name": ["exact"],
    }
    ordering_fields = ["id", "last_seen_at", "first_seen_at"]
