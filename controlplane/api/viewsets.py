"""One endpoint per fleet and policy record type, all alike.

Every endpoint lists (filtered, searchable, ordered, paginated), retrieves, creates, updates
and deletes its records, and shows each record's audit history at ``{id}/history/``. Reads
need any role; writes need ``policy-admin``. Tiers, tenants and tenant quotas are updated
under optimistic concurrency (``concurrency.py``).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Model, QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status, viewsets
from rest_framework.decorators import action
from rest_framework.filters import SearchFilter
from rest_framework.parsers import FormParser
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api import filters, serializers
from controlplane.api.concurrency import (
    ETAG_HEADER,
    IF_MATCH_PARAMETER,
    IF_NONE_MATCH_PARAMETER,
    etag_matches_weakly,
    lock_for_write,
    require_if_match,
)
from controlplane.api.history import HistoryEntrySerializer, history_entries
from controlplane.api.services import record_delete
from controlplane.core.api import (
    ID_PATTERN,
    QueryGuardMixin,
    RecordPagination,
    StableOrderingFilter,
    TenantScopeMixin,
)
from controlplane.core.filters import StrictFilterBackend
from controlplane.core.parsers import StrictJSONParser, StrictMultiPartParser
from controlplane.core.roles import POLICY_ADMIN, ROLES, RolePermission
from controlplane.core.tenancy import TENANT_FLEET, TENANT_OWN
from controlplane.fleet.models import (
    AcceleratorType,
    CapacityFigure,
    Geography,
    HostedProvider,
    LlmModel,
    Region,
    RegionLink,
    ReplicaShape,
    WorkloadClass,
    Zone,
    ZoneInventory,
)
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile


class RecordViewSet(QueryGuardMixin, TenantScopeMixin, viewsets.ModelViewSet[Any]):
    """List, retrieve, create, update, delete and history of one kind of record.

    Refused to a tenant key unless the endpoint sets ``tenant_access`` (``core.tenancy``):
    fleet records are read-only to a key (``FleetRecordViewSet``), policy records its own."""

    permission_classes = [RolePermission]
    read_roles = frozenset(ROLES)
    write_roles = frozenset({POLICY_ADMIN})
    parser_classes = [StrictJSONParser, FormParser, StrictMultiPartParser]
    filter_backends = [StrictFilterBackend, StableOrderingFilter, SearchFilter]
    pagination_class = RecordPagination
    lookup_value_regex = ID_PATTERN
    search_fields: tuple[str, ...] = ("name",)
    ordering_fields: tuple[str, ...] = ("id", "name")

    def perform_create(self, serializer: Any) -> None:
        self.tenant_check_write(serializer)
        super().perform_create(serializer)

    def perform_update(self, serializer: Any) -> None:
        self.tenant_check_write(serializer)
        super().perform_update(serializer)

    def perform_destroy(self, instance: Model) -> None:
        self.tenant_check_owned(instance)
        record_delete(record=instance)

    @extend_schema(
        summary="Audit history of one record",
        description=(
            "Who changed the record, when, and each field's value before and after; newest "
            "first. Works for deleted records too."
        ),
        responses=HistoryEntrySerializer(many=True),
        filters=False,
    )
    @action(detail=True, methods=["get"], serializer_class=HistoryEntrySerializer)
    def history(self, request: Request, pk: str) -> Response:
        model = self.get_queryset().model
        if self.tenant_principal is not None:
            # A key reads the history of its own tenant's live records only (404 otherwise).
            self.get_object()
        rows: QuerySet[Any] = (
            model.history.filter(**{model._meta.pk.attname: pk})
            .select_related("history_user")
            .order_by("-history_date", "-history_id")
        )
        page = self.paginate_queryset(rows)
        if page is None:  # pragma: no cover - pagination is always configured
            page = list(rows)
        if not page:
            if not rows.exists():
                raise exceptions.NotFound(f"No history for {model._meta.verbose_name} {pk}.")
            return self.get_paginated_response([])
        # The row just before this page, so its last entry can say what changed.
        start = getattr(self.paginator, "offset", 0) + len(page)
        older = next(iter(rows[start : start + 1]), None)
        data = HistoryEntrySerializer(history_entries(page, older), many=True).data
        return self.get_paginated_response(data)


class RevisionedRecordViewSet(RecordViewSet):
    """Records updated under optimistic concurrency: ETag on reads, If-Match on writes.

    The row's write lock is taken first, then the If-Match check and the write run in the
    same transaction, so of two writers holding the same ETag exactly one wins.
    """

    @extend_schema(parameters=[IF_NONE_MATCH_PARAMETER, ETAG_HEADER])
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        instance = self.get_object()
        etag = instance.etag
        if_none_match = request.headers.get("If-None-Match")
        if if_none_match is not None and etag_matches_weakly(if_none_match, etag):
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        return Response(self.get_serializer(instance).data, headers={"ETag": etag})

    @extend_schema(parameters=[ETAG_HEADER])
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().create(request, *args, **kwargs)
        return _with_etag(response)

    @extend_schema(parameters=[IF_MATCH_PARAMETER, ETAG_HEADER])
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        with transaction.atomic():
            self._lock_and_check(request)
            response = super().update(request, *args, **kwargs)
        return _with_etag(response)

    @extend_schema(parameters=[IF_MATCH_PARAMETER, ETAG_HEADER])
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        kwargs["partial"] = True
        return self.update(request, *args, **kwargs)

    @extend_schema(parameters=[IF_MATCH_PARAMETER])
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        with transaction.atomic():
            self._lock_and_check(request)
            return super().destroy(request, *args, **kwargs)

    def _lock_and_check(self, request: Request) -> None:
        lookup = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        lock_for_write(self.get_queryset().model, lookup)
        require_if_match(request, self.get_object().etag)


def _with_etag(response: Response) -> Response:
    """Add the saved record's new ETag to a successful write's response."""
    serializer = getattr(response.data, "serializer", None)
    instance = getattr(serializer, "instance", None)
    if response.status_code < 300 and instance is not None:
        response["ETag"] = instance.etag
    return response


class FleetRecordViewSet(RecordViewSet):
    """Fleet-wide records: a tenant key reads them (to read its own figures), writes none."""

    tenant_access = TENANT_FLEET


class GeographyViewSet(FleetRecordViewSet):
    queryset = Geography.objects.all()
    serializer_class = serializers.GeographySerializer
    search_fields = ("name", "description")


class RegionViewSet(FleetRecordViewSet):
    queryset = Region.objects.all()
    serializer_class = serializers.RegionSerializer
    filterset_class = filters.RegionFilter
    ordering_fields = ("id", "name", "geography__name", "price_multiplier")


class ZoneViewSet(FleetRecordViewSet):
    queryset = Zone.objects.all()
    serializer_class = serializers.ZoneSerializer
    filterset_class = filters.ZoneFilter
    ordering_fields = ("id", "name", "region__name", "state")


class HostedProviderViewSet(FleetRecordViewSet):
    queryset = HostedProvider.objects.select_related("region").prefetch_related("served_models")
    serializer_class = serializers.HostedProviderSerializer
    filterset_class = filters.HostedProviderFilter
    search_fields = ("name",)
    ordering_fields = ("id", "name", "region__name", "tpm_limit")


class RegionLinkViewSet(FleetRecordViewSet):
    queryset = RegionLink.objects.all()
    serializer_class = serializers.RegionLinkSerializer
    filterset_class = filters.RegionLinkFilter
    search_fields = ("region_a__name", "region_b__name")
    ordering_fields = ("id", "region_a__name", "region_b__name", "rtt_ms")


class AcceleratorTypeViewSet(FleetRecordViewSet):
    queryset = AcceleratorType.objects.all()
    serializer_class = serializers.AcceleratorTypeSerializer
    ordering_fields = (
        "id",
        "name",
        "memory_gb",
        "peak_bf16_tflops",
        "memory_tbps",
        "on_demand_price_per_gpu_hour",
        "reserved_price_per_gpu_hour",
        "spot_price_per_gpu_hour",
    )


class ZoneInventoryViewSet(FleetRecordViewSet):
    queryset = ZoneInventory.objects.all()
    serializer_class = serializers.ZoneInventorySerializer
    filterset_class = filters.ZoneInventoryFilter
    search_fields = ("zone__name", "accelerator__name")
    ordering_fields = ("id", "zone__name", "accelerator__name", "gpus_available")


class LlmModelViewSet(FleetRecordViewSet):
    queryset = LlmModel.objects.all()
    serializer_class = serializers.LlmModelSerializer
    ordering_fields = ("id", "name", "parameters_billions")


class ReplicaShapeViewSet(FleetRecordViewSet):
    # The derived KV figures read the model and accelerator of every shape.
    queryset = ReplicaShape.objects.select_related("model", "accelerator")
    serializer_class = serializers.ReplicaShapeSerializer
    filterset_class = filters.ReplicaShapeFilter
    search_fields = ("name", "model__name", "accelerator__name", "runtime_version")
    ordering_fields = ("id", "name", "model__name", "accelerator__name", "gpus_per_replica")


class WorkloadClassViewSet(FleetRecordViewSet):
    queryset = WorkloadClass.objects.all()
    serializer_class = serializers.WorkloadClassSerializer
    search_fields = ("name", "description")


class CapacityFigureViewSet(FleetRecordViewSet):
    queryset = CapacityFigure.objects.all()
    serializer_class = serializers.CapacityFigureSerializer
    filterset_class = filters.CapacityFigureFilter
    search_fields = ("shape__name", "workload_class__name")
    ordering_fields = (
        "id",
        "shape__name",
        "measured_at",
        "prefill_tokens_per_s",
        "decode_tokens_per_s",
        "knee_requests_per_s",
    )


class TierViewSet(RevisionedRecordViewSet):
    tenant_access = TENANT_FLEET
    queryset = Tier.objects.all()
    serializer_class = serializers.TierSerializer
    filterset_class = filters.TierFilter
    ordering_fields = ("id", "name", "priority", "p95_ttft_slo_s")


class TenantViewSet(RevisionedRecordViewSet):
    # A key reads and updates its own tenant; creating or deleting tenants is an operator's,
    # and so is every field but its display name: the name (keys and telemetry find the
    # tenant by it), tier, home region, residency, spill and fair-share weight (403).
    tenant_access = TENANT_OWN
    tenant_lookup = "name"
    tenant_writes = frozenset({"update", "partial_update"})
    tenant_fields = frozenset({"display_name"})
    # Constant query count for a page of any size: the quota joins in, regions prefetch.
    queryset = Tenant.objects.select_related("quota").prefetch_related("residency_regions")
    serializer_class = serializers.TenantSerializer
    filterset_class = filters.TenantFilter
    search_fields = ("name", "display_name")
    ordering_fields = ("id", "name", "tier__priority", "home_region__name", "fair_share_weight")


class TenantQuotaViewSet(RevisionedRecordViewSet):
    # A key reads its quota; every figure of it is the operators' (a change is a 403 naming
    # the field; a PUT sending it back unchanged changes nothing).
    tenant_access = TENANT_OWN
    tenant_lookup = "tenant__name"
    tenant_writes = frozenset({"update", "partial_update"})
    tenant_fields = frozenset[str]()
    queryset = TenantQuota.objects.all()
    serializer_class = serializers.TenantQuotaSerializer
    filterset_class = filters.TenantQuotaFilter
    search_fields = ("tenant__name",)
    ordering_fields = ("id", "tenant__name", "budget_rate_replica_s_per_s")


class WorkloadProfileViewSet(RecordViewSet):
    # A key declares its own workload: it makes, changes and deletes declared profiles;
    # measured ones (source telemetry) are telemetry's (403 naming ``source``).
    tenant_access = TENANT_OWN
    tenant_lookup = "tenant__name"
    tenant_writes = frozenset({"create", "update", "partial_update", "destroy"})
    tenant_fields = frozenset(serializers.WorkloadProfileSerializer.Meta.fields) - {"source"}
    tenant_owned_when = {"source": WorkloadProfile.Source.DECLARED}
    queryset = WorkloadProfile.objects.all()
    serializer_class = serializers.WorkloadProfileSerializer
    filterset_class = filters.WorkloadProfileFilter
    search_fields = ("tenant__name", "model__name", "workload_class__name")
    ordering_fields = ("id", "tenant__name", "version", "created_at", "peak_requests_per_s")
