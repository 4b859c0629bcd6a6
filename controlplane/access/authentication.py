"""``Authorization: Bearer <tenant key>``: the API's authentication of tenant keys.

A request with a ``Bearer`` header is the key's or nobody's: a malformed, unknown, revoked or
expired key is a 401 (the request does not fall through to another way of signing in). The
caller is a ``core.tenancy.TenantPrincipal`` (``request.user``) and the key record is
``request.auth``. Only the API authenticates keys: the web pages and the admin read Django
sessions, which a key never opens.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from controlplane.access import services
from controlplane.access.models import TenantKey
from controlplane.core.tenancy import TenantPrincipal

KEYWORD = "Bearer"


def principal_for(key: TenantKey) -> TenantPrincipal:
    return TenantPrincipal(
        key_id=key.pk,
        prefix=key.prefix,
        tenant_id=key.tenant_id,
        tenant_name=key.tenant.name,
        read_only=key.read_only,
    )


class TenantKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                f"Send one tenant key: 'Authorization: {KEYWORD} <key>'."
            )
        try:
            key = parts[1].decode("ascii")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed("Malformed tenant key.") from exc
        try:
            record = services.tenant_key_authenticate(key=key)
        except services.TenantKeyRefused as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from exc
        # Read by the history stamp (``audit``): which key made a change.
        request._request.headroom_tenant_key = record.prefix  # type: ignore[attr-defined]
        return principal_for(record), record

    def authenticate_header(self, request: Request) -> str:
        return f'{KEYWORD} realm="api"'
