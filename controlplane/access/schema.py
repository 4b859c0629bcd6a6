"""The OpenAPI security scheme of tenant keys (``Authorization: Bearer <key>``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class TenantKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "controlplane.access.authentication.TenantKeyAuthentication"
    name = "tenantKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "hr_<8 hex>_<secret>",
            "description": (
                "A tenant key (docs/api.md, 'Tenant keys'): reads and changes one tenant's "
                "records only."
            ),
        }
