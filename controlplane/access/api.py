"""Tenant keys over the API, at ``/api/tenant-keys/`` (policy-admin only, reads included).

``POST`` makes a key and answers it once (``key``); the list and detail show its prefix, name,
tenant, state and last use, never the key. ``DELETE /api/tenant-keys/{id}/`` and
``POST /api/tenant-keys/{id}/revoke/`` revoke it (the record stays, for the audit trail).
A tenant key cannot reach these endpoints (``tenant_access`` is unset): keys do not make keys.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from controlplane.access import selectors, services
from controlplane.access.models import TenantKey
from controlplane.core.api import (
    ID_PATTERN,
    QueryGuardMixin,
    RecordPagination,
    StableOrderingFilter,
)
from controlplane.core.filters import StrictFilterSet
from controlplane.core.parsers import StrictJSONParser
from controlplane.core.roles import POLICY_ADMIN, RolePermission
from controlplane.core.serializers import StrictModelSerializer, read_only_by

KEY_FIELDS = (
    "id",
    "name",
    "prefix",
    "tenant",
    "tenant_name",
    "state",
    "read_only",
    "expires_at",
    "created_by",
    "created_at",
    "last_used_at",
    "revoked_at",
    "revoked_by",
)


class TenantKeySerializer(StrictModelSerializer):
    """A key as listed: everything but the key itself, which is never stored."""

    tenant_name = serializers.CharField(source="tenant.name", read_only=True)
    state = serializers.ChoiceField(choices=TenantKey.State.choices, read_only=True)
    created_by = read_only_by("username")
    revoked_by = read_only_by("username")

    class Meta:
        model = TenantKey
        fields: tuple[str, ...] = KEY_FIELDS
        read_only_fields = ("prefix", "created_at", "last_used_at", "revoked_at")

    def create(self, validated_data: dict[str, Any]) -> TenantKey:
        request = self.context["request"]
        issued = services.tenant_key_create(
            tenant=validated_data["tenant"],
            name=validated_data["name"],
            created_by=request.user,
            expires_at=validated_data.get("expires_at"),
            read_only=validated_data.get("read_only", False),
        )
        # The one moment the whole key exists outside its holder's hands.
        issued.record.issued_key = issued.key  # type: ignore[attr-defined]
        return issued.record


class IssuedKeySerializer(TenantKeySerializer):
    """A key just made: as listed, plus ``key``, shown this once and never again."""

    key = serializers.CharField(
        source="issued_key",
        read_only=True,
        help_text="The whole key: send it as 'Authorization: Bearer <key>'. Shown only now.",
    )

    class Meta(TenantKeySerializer.Meta):
        fields = (*KEY_FIELDS, "key")


class TenantKeyFilter(StrictFilterSet):
    class Meta:
        model = TenantKey
        fields = ("tenant", "read_only")


class TenantKeyViewSet(
    QueryGuardMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[TenantKey],
):
    permission_classes = [RolePermission]
    read_roles = frozenset({POLICY_ADMIN})
    write_roles = frozenset({POLICY_ADMIN})
    parser_classes = [StrictJSONParser]
    filter_backends = [DjangoFilterBackend, StableOrderingFilter]
    filterset_class = TenantKeyFilter
    ordering_fields = ("id", "name", "created_at", "last_used_at")
    pagination_class = RecordPagination
    lookup_value_regex = ID_PATTERN

    def get_queryset(self) -> QuerySet[TenantKey]:
        return selectors.tenant_key_list()

    def get_serializer_class(self) -> type[BaseSerializer[Any]]:
        return IssuedKeySerializer if self.action == "create" else TenantKeySerializer

    @extend_schema(
        summary="Make a tenant key (policy-admin)",
        request=TenantKeySerializer,
        responses={201: IssuedKeySerializer},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().create(request, *args, **kwargs)
        # Nobody caches the one answer that holds the key.
        response["Cache-Control"] = "no-store"
        return response

    @extend_schema(summary="Revoke a tenant key (policy-admin)", responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.tenant_key_revoke(key=self.get_object(), user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Revoke a tenant key (policy-admin); revoking twice changes nothing",
        request=None,
        responses=TenantKeySerializer,
    )
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        key = services.tenant_key_revoke(key=self.get_object(), user=request.user)
        return Response(TenantKeySerializer(selectors.tenant_key_list().get(pk=key.pk)).data)
