"""Tenant-scoped callers: who a tenant key is, and how each endpoint serves one.

A request authenticated with a tenant key (``controlplane.access``) carries a
``TenantPrincipal`` as ``request.user``: not a Django user, with no role, bound to exactly one
tenant. Every endpoint says how it serves such a caller with ``tenant_access``:

- ``TENANT_OWN``: the endpoint's rows belong to tenants; a key sees only its own tenant's
  (``tenant_lookup`` is the path from a row to its tenant's *name*), another tenant's row is
  a 404, and a write naming another tenant is a 400 on that field. The actions named in
  ``tenant_writes`` are the only writes a key may make there, the fields named in
  ``tenant_fields`` the only ones it may change (the rest are its operators': a change is a
  403 naming them), and ``tenant_owned_when`` the rows it may write at all.
- ``TENANT_FLEET``: fleet-wide records a key needs to read its own figures (regions, shapes,
  tiers, ...): it reads them all and writes none (403).
- ``None`` (the default): the endpoint is refused to a key (403). A new endpoint is therefore
  closed to tenant keys until it says otherwise.

``core.roles.RolePermission`` enforces the access, ``core.api.TenantScopeMixin`` the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

TENANT_OWN: Final = "own"
TENANT_FLEET: Final = "fleet"


@dataclass(frozen=True)
class TenantPrincipal:
    """The caller behind a tenant key: which key, which tenant, and whether it may write.

    It quacks like an authenticated user for DRF (``is_authenticated``) but is no Django user:
    it holds no role, is never staff, and Django's session machinery never sees it (the web
    pages and the admin authenticate sessions only).
    """

    key_id: int
    prefix: str
    tenant_id: int
    tenant_name: str
    read_only: bool = False

    is_authenticated: ClassVar[bool] = True
    is_anonymous: ClassVar[bool] = False
    is_active: ClassVar[bool] = True
    is_staff: ClassVar[bool] = False
    is_superuser: ClassVar[bool] = False
    # Not a user row: nothing may store it as one.
    pk: ClassVar[None] = None
    id: ClassVar[None] = None

    @property
    def username(self) -> str:
        return f"tenant-key:{self.prefix}"

    def __str__(self) -> str:
        return f"tenant key {self.prefix} ({self.tenant_name})"


def request_principal(request: Any) -> TenantPrincipal | None:
    """The tenant key behind a request, or None for a user (or nobody)."""
    user = getattr(request, "user", None)
    return user if isinstance(user, TenantPrincipal) else None
