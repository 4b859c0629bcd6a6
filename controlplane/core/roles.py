"""Role-based access: roles are Django groups.

- ``policy-admin``: read and write policy and fleet records, trigger re-plans.
- ``finance``: read everything, including plans and forecasts; no policy writes.
- ``viewer``: read.
Superusers hold every role. A tenant key (``core.tenancy``) holds none: each endpoint's
``tenant_access`` says what a key may do there.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from controlplane.core.tenancy import TENANT_FLEET, TENANT_OWN, TenantPrincipal, request_principal

POLICY_ADMIN = "policy-admin"
FINANCE = "finance"
VIEWER = "viewer"
ROLES = (POLICY_ADMIN, FINANCE, VIEWER)


def user_roles(user: Any) -> set[str]:
    if not getattr(user, "is_authenticated", False) or isinstance(user, TenantPrincipal):
        return set()
    if user.is_superuser:
        return set(ROLES)
    cached = getattr(user, "_headroom_roles", None)
    if cached is None:
        cached = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        user._headroom_roles = cached
    return set(cached)


class RolePermission(BasePermission):
    """Reads need any role; writes need ``policy-admin`` unless a view widens them.

    A view may set ``write_roles`` (a set of role names) to allow other roles to write.
    A tenant key is let in by the view's ``tenant_access`` only (``core.tenancy``).
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = request_principal(request)
        if principal is not None:
            return self._tenant_key_permitted(request, view, principal)
        roles = user_roles(request.user)
        if request.method in SAFE_METHODS:
            read_roles = getattr(view, "read_roles", set(ROLES))
            return bool(roles & set(read_roles))
        write_roles = getattr(view, "write_roles", {POLICY_ADMIN})
        return bool(roles & set(write_roles))

    def _tenant_key_permitted(
        self, request: Request, view: Any, principal: TenantPrincipal
    ) -> bool:
        # The message is per instance: DRF makes the permission objects afresh per request.
        access = getattr(view, "tenant_access", None)
        if access not in (TENANT_OWN, TENANT_FLEET):
            self.message = "A tenant key cannot use this endpoint."
            return False
        if request.method in SAFE_METHODS:
            return True
        if access != TENANT_OWN or getattr(view, "action", None) not in getattr(
            view, "tenant_writes", frozenset()
        ):
            self.message = "A tenant key cannot make this change."
            return False
        if principal.read_only:
            self.message = "This tenant key is read-only."
            return False
        return True
