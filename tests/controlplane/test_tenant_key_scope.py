"""Every API route, walked with a key of one tenant: nothing of the other tenant shows.

The route list comes from the URL resolver, so a new endpoint fails
``test_every_api_route_is_classified`` until it says how it serves a tenant key. Then, per
route: refused routes answer 403; readable ones answer 200 (or a 404 for the other tenant's
record) and their JSON holds neither the other tenant's name nor its records' ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.plans.models import Plan
from tests.controlplane.tenant_key_support import (
    OTHER,
    TenantRecords,
    World,
    issue_key,
    key_client,
    two_tenant_world,
)

pytestmark = pytest.mark.django_db


def _api_routes() -> dict[str, tuple[str, Any]]:
    """Route name → (pattern, view) of every route under /api/ (format-suffix twins once)."""
    out: dict[str, tuple[str, Any]] = {}

    def walk(patterns: list[Any], prefix: str, namespace: str) -> None:
        for pattern in patterns:
            text = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                ns = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
                walk(pattern.url_patterns, text, ns)
            elif isinstance(pattern, URLPattern) and text.lstrip("^").startswith("api/"):
                if pattern.name and f"{namespace}{pattern.name}" not in out:
                    out[f"{namespace}{pattern.name}"] = (text, pattern.callback)

    walk(get_resolver().url_patterns, "", "")
    return out


ROUTES = _api_routes()

# Open to anyone, or about no tenant: the index pages, the schema and its docs, sign-in.
PUBLIC = {
    "api-root",
    "telemetry-root",
    "benchmarks-root",
    "schema",
    "api-docs",
    "api-docs-asset",
    "auth-token",
    "rest_framework:login",
    "rest_framework:logout",
}
# Refused to a tenant key (403): fleet operations and records that span tenants.
REFUSED = {
    "tenant-key-list",
    "tenant-key-detail",
    "tenant-key-revoke",
    "plan-run-list",
    "plan-run-detail",
    "plan-replan",
    "plan-approve",
    "plan-reject",
    "plan-what-if-list",
    "plan-what-if-detail",
    "telemetry-pull-list",
    "telemetry-pull-detail",
    "telemetry-derivation-list",
    "telemetry-derivation-detail",
    "pool-drift-alert-list",
    "pool-drift-alert-detail",
    "pool-signal-alert-list",
    "pool-signal-alert-detail",
    "allocation-sink-list",
    "allocation-sink-detail",
    "allocation-sink-history",
    "outbox-entry-list",
    "outbox-entry-detail",
    "outbox-entry-retry",
    "shadow-diff-list",
    "shadow-diff-detail",
    "benchmark-run-list",
    "benchmark-run-detail",
    "benchmark-endpoint-list",
    "benchmark-endpoint-detail",
    "benchmark-endpoint-history",
    "benchmark-freshness-list",
    "finance-commitments",
}
# Fleet-wide records a key reads whole (and writes none).
FLEET_BASENAMES = {
    "geography",
    "region",
    "zone",
    "region-link",
    "hosted-provider",
    "accelerator",
    "inventory",
    "model",
    "shape",
    "capacity-figure",
    "workload-class",
    "tier",
}
FLEET = {f"{b}-{kind}" for b in FLEET_BASENAMES for kind in ("list", "detail", "history")}
# Plans: every plan, each cut to the key's tenant.
PLANS = {"plan-list", "plan-detail", "plan-active"}
FINANCE = {
    "finance-forecast",
    "finance-opencost",
    "finance-promises",
    "finance-showback",
    "finance-history",
}
# Tenant-owned records: basename → the attribute of ``TenantRecords`` holding one.
OWN_BASENAMES = {
    "tenant": "tenant",
    "tenant-quota": "quota",
    "workload-profile": "profile",
    "telemetry-observation": "observation",
    "telemetry-profile": "telemetry_profile",
    "telemetry-series": "series",
    "drift-alert": "alert",
}
OWN_ACTIONS = {
    "tenant": ("list", "detail", "history"),
    "tenant-quota": ("list", "detail", "history"),
    "workload-profile": ("list", "detail", "history"),
    "telemetry-observation": ("list", "detail"),
    "telemetry-profile": ("list", "detail"),
    "telemetry-series": ("list", "detail", "samples"),
    "drift-alert": ("list", "detail", "acknowledge"),
}
OWN = {f"{b}-{kind}": b for b, kinds in OWN_ACTIONS.items() for kind in kinds}


def test_every_api_route_is_classified() -> None:
    classified = PUBLIC | REFUSED | FLEET | PLANS | FINANCE | set(OWN)
    assert set(ROUTES) - classified == set(), "classify the new routes for tenant keys"
    assert classified - set(ROUTES) == set(), "routes that no longer exist"


@pytest.fixture
def world() -> World:
    return two_tenant_world()


@pytest.fixture
def client(world: World) -> APIClient:
    return key_client(issue_key(world.own.tenant))


def _methods(name: str) -> list[str]:
    callback = ROUTES[name][1]
    actions = getattr(callback, "actions", None)
    if actions:
        return sorted(actions)
    cls = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    return [m for m in ("get", "post") if cls is not None and hasattr(cls, m)] or ["get"]


def _call(client: APIClient, name: str, kwargs: dict[str, Any] | None = None) -> Any:
    url = reverse(name, kwargs=kwargs)
    method = "get" if "get" in _methods(name) else _methods(name)[0]
    return getattr(client, method)(url, format="json") if method != "get" else client.get(url)


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _dicts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _dicts(item)


def assert_nothing_of(other: TenantRecords, response: Any) -> None:
    """The answer names neither the other tenant nor one of its records."""
    text = response.content.decode("utf-8", "replace")
    assert OTHER not in text.lower(), text[:2000]
    if not response.get("Content-Type", "").startswith("application/json"):
        return
    foreign = {
        "tenant": {other.tenant.pk, other.tenant.name},
        "profile": {other.telemetry_profile.pk},
        "current_profile": {other.telemetry_profile.pk, other.profile.pk},
        "baseline_profile": {other.telemetry_profile.pk, other.profile.pk},
    }
    for row in _dicts(json.loads(text)):
        for field, values in foreign.items():
            assert row.get(field) not in values, (field, row)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_routes_are_403(name: str, world: World, client: APIClient) -> None:
    pattern = ROUTES[name][0]
    kwargs = {"pk": 1} if "<pk>" in pattern or "?P<pk>" in pattern else None
    response = _call(client, name, kwargs)
    assert response.status_code == 403, response.content
    assert "tenant key" in response.json()["error"]["message"]


@pytest.mark.parametrize("name", sorted(PUBLIC - {"api-docs-asset"}))
def test_public_routes_show_nothing_of_the_other_tenant(
    name: str, world: World, client: APIClient
) -> None:
    response = _call(client, name)
    assert response.status_code < 500
    assert_nothing_of(world.other, response)


@pytest.mark.parametrize("name", sorted(b for b in FLEET_BASENAMES))
def test_fleet_records_are_read_whole_and_never_written(
    name: str, world: World, client: APIClient
) -> None:
    listed = client.get(reverse(f"{name}-list"))
    assert listed.status_code == 200, listed.content
    assert listed.json()["count"] >= 1
    assert_nothing_of(world.other, listed)
    pk = listed.json()["results"][0]["id"]
    for kind in ("detail", "history"):
        response = client.get(reverse(f"{name}-{kind}", kwargs={"pk": pk}))
        assert response.status_code == 200, response.content
        assert_nothing_of(world.other, response)
    assert client.post(reverse(f"{name}-list"), {}, format="json").status_code == 403
    detail = reverse(f"{name}-detail", kwargs={"pk": pk})
    assert client.patch(detail, {}, format="json").status_code == 403
    assert client.delete(detail).status_code == 403


@pytest.mark.parametrize("name", sorted(OWN_BASENAMES))
def test_own_records_only(name: str, world: World, client: APIClient) -> None:
    attribute = OWN_BASENAMES[name]
    mine = getattr(world.own, attribute)
    theirs = getattr(world.other, attribute)
    listed = client.get(reverse(f"{name}-list"))
    assert listed.status_code == 200, listed.content
    ids = {row["id"] for row in listed.json()["results"]}
    assert mine.pk in ids and theirs.pk not in ids
    assert_nothing_of(world.other, listed)
    for kind in OWN_ACTIONS[name]:
        if kind == "list":
            continue
        route = f"{name}-{kind}"
        own = _call(client, route, {"pk": mine.pk})
        assert own.status_code == 200, (route, own.content)
        assert_nothing_of(world.other, own)
        foreign = _call(client, route, {"pk": theirs.pk})
        assert foreign.status_code == 404, (route, foreign.content)
        assert_nothing_of(world.other, foreign)
    # Filtering on the other tenant finds nothing either.
    if name in ("telemetry-observation", "telemetry-series"):
        filtered = client.get(reverse(f"{name}-list"), {"tenant": OTHER})
        assert filtered.status_code == 200 and filtered.json()["count"] == 0


@pytest.mark.parametrize("name", sorted(PLANS))
def test_plans_show_only_the_tenants_routing(name: str, world: World, client: APIClient) -> None:
    kwargs = {"pk": world.plan.pk} if name == "plan-detail" else None
    response = client.get(reverse(name, kwargs=kwargs))
    assert response.status_code == 200, response.content
    assert_nothing_of(world.other, response)
    if name != "plan-list":
        body = response.json()
        assert body["routing"] and {r["tenant"] for r in body["routing"]} == {"assistant"}
        assert body["allocations"]
        assert "explanation" not in body and "diff" not in body
        # An operator sees both tenants' routing in the same plan.
        assert world.plan.routing.filter(tenant=OTHER).exists()


@pytest.mark.parametrize("name", sorted(FINANCE))
def test_finance_rows_are_the_tenants_own(name: str, world: World, client: APIClient) -> None:
    params: dict[str, Any] = {"horizon": 2}
    if name == "finance-opencost":
        params["aggregate"] = "region"
    if name == "finance-history":
        # Active since two days ago: whole days of history, split between both tenants.
        Plan.objects.filter(pk=world.plan.pk).update(
            activated_at=timezone.now() - timedelta(days=2)
        )
        params = {"period": "day", "horizon": 3, "group_by": "region"}
    response = client.get(reverse(name), params)
    assert response.status_code == 200, response.content
    assert_nothing_of(world.other, response)
    body = response.json()
    if name == "finance-opencost":
        assert body["data"] and all(
            alloc["properties"]["labels"]["tenant"] == "assistant"
            for window in body["data"]
            for alloc in window.values()
        )
        return
    assert body["rows"]
    if name == "finance-promises":
        assert {(r["scope"], r["name"]) for r in body["rows"]} == {("tenant", "assistant")}
    else:
        assert {r["tenant"] for r in body["rows"]} == {"assistant"}


@pytest.mark.parametrize(
    "name",
    [
        "tenant-list",
        "drift-alert-list",
        "plan-active",
        "finance-showback",
        "plan-detail",
        "finance-history",
    ],
)
def test_an_operator_sees_both_tenants_where_a_key_sees_one(
    name: str, world: World, api_client_for: Any
) -> None:
    """The walk's check can fail: the same routes name the other tenant to a user."""
    Plan.objects.filter(pk=world.plan.pk).update(activated_at=timezone.now() - timedelta(days=2))
    kwargs = {"pk": world.plan.pk} if name == "plan-detail" else None
    params = {"period": "day", "horizon": 3, "group_by": "tenant"} if "history" in name else {}
    response = api_client_for("viewer").get(reverse(name, kwargs=kwargs), params)
    assert response.status_code == 200
    assert OTHER in response.content.decode()


def test_a_pooled_profile_names_only_the_keys_tenant(world: World, client: APIClient) -> None:
    url = reverse("telemetry-profile-detail", kwargs={"pk": world.own.telemetry_profile.pk})
    assert client.get(url).json()["pool_tenants"] == ["assistant"]
