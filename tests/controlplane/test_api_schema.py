"""The OpenAPI schema generates without warnings; the docs page needs no internet."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from django.core.management import call_command
from django.http import HttpRequest

from tests.controlplane.api_harness import APITest

RECORD_PATHS = (
    "geographies",
    "regions",
    "zones",
    "region-links",
    "accelerators",
    "inventory",
    "models",
    "shapes",
    "capacity-figures",
    "workload-classes",
    "tiers",
    "tenants",
    "tenant-quotas",
    "workload-profiles",
)


def test_schema_validates_without_warnings(tmp_path: Path) -> None:
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    schema = yaml.safe_load(target.read_text())
    paths = schema["paths"]
    for name in RECORD_PATHS:
        assert f"/api/{name}/" in paths
        assert set(paths[f"/api/{name}/{{id}}/"]) == {"get", "put", "patch", "delete"}
        assert f"/api/{name}/{{id}}/history/" in paths
    tenant_put = paths["/api/tenants/{id}/"]["put"]
    if_match = next(p for p in tenant_put["parameters"] if p["name"] == "If-Match")
    assert if_match == {**if_match, "in": "header", "required": True}
    tenant_filters = {p["name"] for p in paths["/api/tenants/"]["get"]["parameters"]}
    assert {"tier", "home_region", "residency_geography", "limit", "offset"} <= tenant_filters
    assert "/api/auth/token/" in paths


class TestDocsPage(APITest):
    def test_schema_and_docs_are_served(self, client: Any) -> None:
        assert client.get("/api/schema/").status_code == 200
        page = client.get("/api/docs/")
        assert page.status_code == 200
        html = page.content.decode()
        assets = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert "/api/docs/assets/swagger-ui-bundle.js" in assets
        assert "/api/docs/assets/swagger-ui.css" in assets
        # Everything the page loads comes from this server.
        assert all(url.startswith("/") for url in assets), assets
        assert '"validatorUrl": null' in html

    def test_assets_are_served_and_nothing_else(self, client: Any) -> None:
        script = client.get("/api/docs/assets/swagger-ui-bundle.js")
        assert script.status_code == 200
        assert script["Content-Type"] == "text/javascript"
        assert b"SwaggerUIBundle" in b"".join(script.streaming_content)
        assert client.get("/api/docs/assets/settings.py").status_code == 404
        assert client.get("/api/docs/assets/..%2F..%2Fsettings.py").status_code == 404

    def test_browsable_api_has_a_login_page_for_any_user(
        self, client: Any, role_users: Any
    ) -> None:
        assert client.get("/api/auth/login/").status_code == 200
        assert client.login(
            request=HttpRequest(), username="viewer-user", password="pw-viewer-user"
        )
        page = client.get("/api/zones/", HTTP_ACCEPT="text/html")
        assert page.status_code == 200
        assert b"Zone" in page.content

    def test_api_root_lists_the_endpoints_for_any_role(self, api_client_for: Any) -> None:
        body = api_client_for("viewer").get("/api/").json()
        assert set(RECORD_PATHS) <= set(body)
        assert api_client_for("anonymous").get("/api/").status_code == 401
