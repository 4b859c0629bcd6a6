"""A write whose values equal the stored ones changes nothing: through the API (PUT and PATCH)
it answers 200 with the record as it is, the revision and the ETag stay, and no audit history
row is written; through the admin, saving an unchanged form writes no history row either. A
real change still makes exactly one new revision and one history row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Model
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.core.roles import POLICY_ADMIN
from controlplane.policies.models import Tenant, Tier
from controlplane.policies.services import tenant_save
from tests.controlplane.admin_support import admin_url, form_data
from tests.controlplane.api_harness import Records, an_hour_ago

pytestmark = pytest.mark.django_db


@pytest.fixture
def records() -> Records:
    return Records()


@pytest.fixture
def admin_api(api_client_for: Callable[[str], APIClient]) -> APIClient:
    return api_client_for(POLICY_ADMIN)


def _history_count(record: Model) -> int:
    count: int = type(record).history.filter(id=record.pk).count()  # type: ignore[attr-defined]
    return count


def _revision(record: Model) -> int | None:
    record.refresh_from_db()
    return getattr(record, "revision", None)


def _url(basename: str, pk: int) -> str:
    return reverse(f"{basename}-detail", args=[pk])


# Each endpoint with a record to write back unchanged, and a field and value that change it.
ENDPOINTS: dict[str, tuple[Callable[[Records], Model], str, Any]] = {
    "tier": (lambda r: r.tier(burst_factor=1.5), "burst_factor", 2.0),
    "tenant": (
        lambda r: r.quota(tenant=r.tenant(max_spill_rtt_ms=40.0, spill_allowed=True)).tenant,
        "fair_share_weight",
        2.0,
    ),
    "tenant-quota": (
        lambda r: r.quota(tokens_per_minute_limit=10_000),
        "tokens_per_minute_limit",
        20_000,
    ),
    "shape": (lambda r: r.shape(extra_args=["--enable-prefix-caching"]), "gpus_per_replica", 2),
    "capacity-figure": (lambda r: r.figure(measured_at=an_hour_ago()), "max_concurrency", 32),
    "region": (lambda r: r.region(price_multiplier=1.1), "price_multiplier", 1.2),
    "accelerator": (lambda r: r.accelerator(), "on_demand_price_per_gpu_hour", 5.0),
    "inventory": (lambda r: r.inventory(), "gpus_available", 24),
    "model": (lambda r: r.llm_model(), "parameters_billions", 9.0),
    "workload-profile": (lambda r: r.profile(residence_s=3.0), "peak_requests_per_s", 13.0),
}


def _headers(client: APIClient, url: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The record's body and, for revisioned records, the If-Match header for writing it."""
    response = client.get(url)
    assert response.status_code == 200
    etag = response.headers.get("ETag")
    return response.json(), ({"HTTP_IF_MATCH": etag} if etag else {})


@pytest.mark.parametrize("basename", sorted(ENDPOINTS))
@pytest.mark.parametrize("method", ["put", "patch"])
def test_writing_back_the_record_as_read_changes_nothing(
    basename: str, method: str, records: Records, admin_api: APIClient
) -> None:
    make, _, _ = ENDPOINTS[basename]
    record = make(records)
    url = _url(basename, record.pk)
    body, if_match = _headers(admin_api, url)
    revision, history = _revision(record), _history_count(record)

    response = getattr(admin_api, method)(url, body, format="json", **if_match)

    assert response.status_code == 200, response.content
    assert response.json() == body
    assert _revision(record) == revision
    assert _history_count(record) == history
    if if_match:
        assert response.headers["ETag"] == if_match["HTTP_IF_MATCH"]
        # The old ETag is still current: a GET with it is answered 304.
        assert admin_api.get(url, HTTP_IF_NONE_MATCH=if_match["HTTP_IF_MATCH"]).status_code == 304


@pytest.mark.parametrize("basename", sorted(ENDPOINTS))
def test_patching_one_field_to_its_stored_value_changes_nothing_and_a_new_value_once(
    basename: str, records: Records, admin_api: APIClient
) -> None:
    make, field, new_value = ENDPOINTS[basename]
    record = make(records)
    url = _url(basename, record.pk)
    body, if_match = _headers(admin_api, url)
    revision, history = _revision(record), _history_count(record)

    same = admin_api.patch(url, {field: body[field]}, format="json", **if_match)
    assert same.status_code == 200, same.content
    assert (_revision(record), _history_count(record)) == (revision, history)

    changed = admin_api.patch(url, {field: new_value}, format="json", **if_match)
    assert changed.status_code == 200, changed.content
    assert changed.json()[field] == new_value
    assert _history_count(record) == history + 1
    if revision is not None:
        assert _revision(record) == revision + 1
        assert changed.headers["ETag"] != if_match["HTTP_IF_MATCH"]
        assert changed.headers["ETag"] == changed.json()["etag"]


def test_a_tenant_written_back_with_its_regions_in_another_order_changes_nothing(
    records: Records, admin_api: APIClient
) -> None:
    geography = records.geography()
    home, other = records.region(geography=geography), records.region(geography=geography)
    tenant = records.tenant(home_region=home, residency_regions=(home, other))
    records.quota(tenant=tenant)
    url = _url("tenant", tenant.pk)
    body, if_match = _headers(admin_api, url)
    revision, history = _revision(tenant), _history_count(tenant)

    reordered = {**body, "residency_regions": sorted(body["residency_regions"], reverse=True)}
    response = admin_api.put(url, reordered, format="json", **if_match)

    assert response.status_code == 200, response.content
    assert (_revision(tenant), _history_count(tenant)) == (revision, history)
    assert response.headers["ETag"] == if_match["HTTP_IF_MATCH"]

    # Dropping a region is a change: one revision, one history row holding the new list.
    response = admin_api.patch(url, {"residency_regions": [home.pk]}, format="json", **if_match)
    assert response.status_code == 200, response.content
    assert (_revision(tenant), _history_count(tenant)) == (revision + 1, history + 1)
    assert list(tenant.residency_regions.all()) == [home]


def test_tenant_save_of_an_unchanged_tenant_saves_nothing(records: Records) -> None:
    tenant = records.tenant()
    revision, history = _revision(tenant), _history_count(tenant)

    tenant_save(tenant=Tenant.objects.get(pk=tenant.pk), residency_regions=[])

    assert (_revision(tenant), _history_count(tenant)) == (revision, history)


def test_a_refused_no_op_write_is_still_refused(records: Records, admin_api: APIClient) -> None:
    """The no-op shortcut comes after validation: a stored value now out of bounds (written
    before the bounds existed) is named, even in a write that changes nothing."""
    tier = records.tier()
    Tier.objects.filter(pk=tier.pk).update(burst_factor=1e308)
    url = _url("tier", tier.pk)
    body, if_match = _headers(admin_api, url)

    response = admin_api.patch(url, {"name": body["name"]}, format="json", **if_match)

    assert response.status_code == 400
    assert "burst_factor" in response.json()["error"]["fields"]


# -- the admin ------------------------------------------------------------------------------


ADMIN_RECORDS: dict[str, Callable[[Records], Model]] = {
    "tier": lambda r: r.tier(),
    "tenant": lambda r: r.quota().tenant,
    "tenant quota": lambda r: r.quota(),
    "region": lambda r: r.region(),
    "accelerator": lambda r: r.accelerator(),
    "inventory": lambda r: r.inventory(),
    "model": lambda r: r.llm_model(),
    "shape": lambda r: r.shape(),
    # The admin's date and time inputs hold whole seconds: a figure measured to the
    # microsecond is saved truncated, which is a change.
    "capacity figure": lambda r: r.figure(measured_at=timezone.now().replace(microsecond=0)),
    "workload profile": lambda r: r.profile(),
}


@pytest.mark.parametrize("kind", sorted(ADMIN_RECORDS))
def test_saving_an_unchanged_admin_form_writes_no_history(
    kind: str, records: Records, role_users: dict[str, User | None]
) -> None:
    record = ADMIN_RECORDS[kind](records)
    user = role_users[POLICY_ADMIN]
    assert user is not None
    client = Client()
    client.force_login(user)
    url = admin_url(type(record), "change", record.pk)
    data = form_data(client.get(url))
    revision, history = _revision(record), _history_count(record)

    response = client.post(url, data)

    assert response.status_code == 302, response.content.decode()[:2000]
    assert (_revision(record), _history_count(record)) == (revision, history)
