"""The admin site: Headroom's name on every page, and the index ordered for policy work first
(tenants and tiers, then the fleet, plans, telemetry, emission, benchmarks, and the rest)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest

# App labels in the order the index lists them; apps not named come after, alphabetically.
APP_ORDER = ("policies", "fleet", "plans", "telemetry", "emission", "benchmarks", "auth")
# Within policies, what a policy admin opens most.
MODEL_ORDER = {"policies": ("Tenant", "TenantQuota", "Tier", "WorkloadProfile")}


class HeadroomAdminSite(admin.AdminSite):
    site_header = "Headroom administration"
    site_title = "Headroom admin"
    index_title = "Policy and fleet records"
    site_url = "/"

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[Any]:
        apps = super().get_app_list(request, app_label)

        def app_key(app: dict[str, Any]) -> tuple[int, str]:
            label = app["app_label"]
            return (APP_ORDER.index(label) if label in APP_ORDER else len(APP_ORDER), label)

        apps.sort(key=app_key)
        for app in apps:
            order = MODEL_ORDER.get(app["app_label"])
            if order:
                app["models"].sort(
                    key=lambda m: (
                        order.index(m["object_name"]) if m["object_name"] in order else len(order),
                        m["name"],
                    )
                )
        return apps


class HeadroomAdminConfig(AdminConfig):
    """The admin, on Headroom's site."""

    default_site = "controlplane.web.admin_site.HeadroomAdminSite"
