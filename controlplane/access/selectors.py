"""Reads of tenant keys."""

from __future__ import annotations

from django.db.models import QuerySet

from controlplane.access.models import TenantKey


def tenant_key_list(*, tenant: str | None = None) -> QuerySet[TenantKey]:
    """Keys with their tenant and who made and revoked them; one tenant's (by name) if given."""
    rows = TenantKey.objects.select_related("tenant", "created_by", "revoked_by")
    return rows.filter(tenant__name=tenant) if tenant is not None else rows


def tenant_key_by_prefix(*, prefix: str) -> TenantKey | None:
    return TenantKey.objects.select_related("tenant").filter(prefix=prefix).first()
