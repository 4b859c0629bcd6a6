"""Role-based access: roles are Django groups.

- ``policy-admin``: read and write policy and fleet records, trigger re-plans.
- ``finance``: read everything, including plans and forecasts; no policy writes.
- ``viewer``: read.
Superusers hold every role.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

POLICY_ADMIN = "policy-admin"
FINANCE = "finance"
VIEWER = "viewer"
ROLES = (POLICY_ADMIN, FINANCE, VIEWER)


def user_roles(user: Any) -> set[str]:
    if not getattr(user, "is_authenticated", False):
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
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        roles = user_roles(request.user)
        if request.method in SAFE_METHODS:
            read_roles = getattr(view, "read_roles", set(ROLES))
            return bool(roles & set(read_roles))
        write_roles = getattr(view, "write_roles", {POLICY_ADMIN})
        return bool(roles & set(write_roles))
