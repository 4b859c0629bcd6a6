"""Tenant keys: made and shown once, stored as a hash, revoked, expired, audited, and the writes
a key may and may not make."""

from __future__ import annotations

import hashlib
import io
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.access.models import TenantKey
from controlplane.access.services import tenant_key_authenticate, tenant_key_revoke
from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.policies.models import Tenant, WorkloadProfile
from tests.controlplane.api_harness import Records, profile_figures
from tests.controlplane.tenant_key_support import OTHER, OWN, issue_key, key_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenants() -> tuple[Tenant, Tenant]:
    records = Records()
    region = records.region(name="r1")
    tier = records.tier(name="standard")
    own = records.tenant(name=OWN, tier=tier, home_region=region, display_name="Assistant Co")
    other = records.tenant(name=OTHER, tier=tier, home_region=region, display_name="Helper Inc")
    for tenant in (own, other):
        records.quota(tenant=tenant)
        records.profile(tenant=tenant)
    return own, other


def _create(client: APIClient, tenant: Tenant, **extra: Any) -> Any:
    return client.post(
        reverse("tenant-key-list"), {"tenant": tenant.pk, "name": "ci", **extra}, format="json"
    )


# -- made, shown once, stored hashed ---------------------------------------------------------


def test_the_key_is_shown_once_and_stored_only_as_its_hash(
    tenants: tuple[Tenant, Tenant], api_client_for: Any
) -> None:
    admin = api_client_for(POLICY_ADMIN)
    made = _create(admin, tenants[0])
    assert made.status_code == 201, made.content
    assert made["Cache-Control"] == "no-store"
    body = made.json()
    key = body["key"]
    assert key.startswith(body["prefix"] + "_") and body["prefix"].startswith("hr_")
    assert len(body["prefix"]) == 11 and body["tenant_name"] == OWN and body["state"] == "active"
    # Never again: not in the list, not in the detail, not in the history.
    for url in (reverse("tenant-key-list"), reverse("tenant-key-detail", args=[body["id"]])):
        response = admin.get(url)
        assert response.status_code == 200
        assert key not in response.content.decode()
        assert '"key"' not in response.content.decode()
    # The database holds the SHA-256 only: no column of the row or its history holds the key,
    # nor its secret part.
    secret = key.split("_", 2)[2]
    row = TenantKey.objects.get(pk=body["id"])
    assert row.secret_hash == hashlib.sha256(key.encode()).hexdigest()
    stored = [*TenantKey.objects.values().get(pk=row.pk).values()]
    stored += [v for h in TenantKey.history.values() for v in h.values()]
    assert not any(isinstance(v, str) and secret in v for v in stored)
    # ...and the key works.
    assert key_client(key).get(reverse("tenant-list")).status_code == 200


def test_two_keys_differ_and_each_names_its_tenant(tenants: tuple[Tenant, Tenant]) -> None:
    first, second = issue_key(tenants[0]), issue_key(tenants[1])
    assert first != second and first[:11] != second[:11]
    assert tenant_key_authenticate(key=second).tenant == tenants[1]


def test_bad_create_bodies_are_400_naming_the_field(
    tenants: tuple[Tenant, Tenant], api_client_for: Any
) -> None:
    admin = api_client_for(POLICY_ADMIN)
    past = (timezone.now() - timedelta(days=1)).isoformat()
    for body, field in (
        ({"name": "ci"}, "tenant"),
        ({"tenant": tenants[0].pk}, "name"),
        ({"tenant": tenants[0].pk, "name": ""}, "name"),
        ({"tenant": 10**9, "name": "ci"}, "tenant"),
        ({"tenant": tenants[0].pk, "name": "ci", "expires_at": past}, "expires_at"),
    ):
        response = admin.post(reverse("tenant-key-list"), body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert field in response.content.decode(), (body, response.content)
    assert not TenantKey.objects.exists()
    # The key and its prefix are the server's to choose: sent ones are ignored, as every
    # read-only field is.
    chosen = "hr_00000000_" + "x" * 43
    made = admin.post(
        reverse("tenant-key-list"),
        {"tenant": tenants[0].pk, "name": "ci", "key": chosen, "prefix": "hr_00000000"},
        format="json",
    ).json()
    assert made["key"] != chosen and made["prefix"] != "hr_00000000"


# -- refused keys: 401 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer a b",
        "Bearer hr_00000000_" + "x" * 43,
        "Bearer not-a-key",
        "Bearer hr_" + "é" * 52,
    ],
)
def test_malformed_or_unknown_keys_are_401(header: str, tenants: tuple[Tenant, Tenant]) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(reverse("tenant-list"))
    assert response.status_code == 401, response.content


def test_a_right_prefix_with_a_wrong_secret_is_401(tenants: tuple[Tenant, Tenant]) -> None:
    key = issue_key(tenants[0])
    forged = key[:12] + ("A" if key[12] != "A" else "B") + key[13:]
    assert key_client(forged).get(reverse("tenant-list")).status_code == 401


def test_a_revoked_key_is_401(tenants: tuple[Tenant, Tenant], api_client_for: Any) -> None:
    key = issue_key(tenants[0])
    client = key_client(key)
    assert client.get(reverse("tenant-list")).status_code == 200
    record = TenantKey.objects.get()
    admin = api_client_for(POLICY_ADMIN)
    assert admin.delete(reverse("tenant-key-detail", args=[record.pk])).status_code == 204
    response = client.get(reverse("tenant-list"))
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]["message"]
    # Revoking again changes nothing; the revoke action answers the record.
    again = admin.post(reverse("tenant-key-revoke", args=[record.pk]))
    assert again.status_code == 200 and again.json()["state"] == "revoked"
    assert again.json()["revoked_by"] == "admin-user"


def test_an_expired_key_is_401(tenants: tuple[Tenant, Tenant]) -> None:
    key = issue_key(tenants[0])
    TenantKey.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = key_client(key).get(reverse("tenant-list"))
    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]


def test_last_use_is_recorded_to_the_minute(tenants: tuple[Tenant, Tenant]) -> None:
    key = issue_key(tenants[0])
    assert TenantKey.objects.get().last_used_at is None
    start = timezone.now()
    tenant_key_authenticate(key=key, now=start)
    assert TenantKey.objects.get().last_used_at == start
    # Within the minute: no write; after it, the new moment.
    tenant_key_authenticate(key=key, now=start + timedelta(seconds=30))
    assert TenantKey.objects.get().last_used_at == start
    later = start + timedelta(minutes=2)
    tenant_key_authenticate(key=key, now=later)
    assert TenantKey.objects.get().last_used_at == later
    # Through the API as well.
    TenantKey.objects.update(last_used_at=None)
    key_client(key).get(reverse("region-list"))
    assert TenantKey.objects.get().last_used_at is not None


# -- who manages keys ------------------------------------------------------------------------


@pytest.mark.parametrize("role", [FINANCE, VIEWER, "no-role", "anonymous"])
def test_only_policy_admins_manage_keys(
    role: str, tenants: tuple[Tenant, Tenant], api_client_for: Any
) -> None:
    client = api_client_for(role)
    assert _create(client, tenants[0]).status_code in (401, 403)
    assert client.get(reverse("tenant-key-list")).status_code in (401, 403)
    assert not TenantKey.objects.exists()


def test_a_key_cannot_make_list_or_revoke_keys(tenants: tuple[Tenant, Tenant]) -> None:
    client = key_client(issue_key(tenants[0]))
    assert _create(client, tenants[0]).status_code == 403
    assert client.get(reverse("tenant-key-list")).status_code == 403
    record = TenantKey.objects.get()
    assert client.delete(reverse("tenant-key-detail", args=[record.pk])).status_code == 403
    assert client.post(reverse("tenant-key-revoke", args=[record.pk])).status_code == 403
    assert TenantKey.objects.count() == 1 and TenantKey.objects.get().revoked_at is None
    # Nor exchange itself for a user's token, nor pass for one.
    assert client.post(reverse("auth-token"), {}, format="json").status_code == 400
    assert client.delete(reverse("auth-token")).status_code == 403
    assert TenantKey.objects.get().revoked_at is None


def test_a_key_does_not_sign_in_to_the_pages_or_the_admin(tenants: tuple[Tenant, Tenant]) -> None:
    client = key_client(issue_key(tenants[0]))
    for url in ("/", "/tenants/", f"/tenants/{OWN}/", "/finance/", "/admin/"):
        response = client.get(url)
        assert response.status_code == 302, (url, response.status_code)
        assert "login" in response["Location"]


# -- audit -------------------------------------------------------------------------------------


def test_making_and_revoking_are_audited(
    tenants: tuple[Tenant, Tenant], api_client_for: Any
) -> None:
    admin = api_client_for(POLICY_ADMIN)
    made = _create(admin, tenants[0]).json()
    admin.post(reverse("tenant-key-revoke", args=[made["id"]]))
    rows = list(TenantKey.history.filter(id=made["id"]).order_by("history_id"))
    assert [r.history_type for r in rows] == ["+", "~"]
    assert all(r.history_user is not None and r.history_user.username == "admin-user" for r in rows)
    assert rows[0].revoked_at is None and rows[1].revoked_at is not None
    assert made["created_by"] == "admin-user"


def test_a_change_made_with_a_key_names_the_key_in_the_history(
    tenants: tuple[Tenant, Tenant],
) -> None:
    own = tenants[0]
    key = issue_key(own)
    client = key_client(key)
    etag = client.get(reverse("tenant-detail", args=[own.pk]))["ETag"]
    response = client.patch(
        reverse("tenant-detail", args=[own.pk]),
        {"display_name": "Assistant Ltd"},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    assert response.status_code == 200, response.content
    latest = own.history.latest()
    assert latest.display_name == "Assistant Ltd"
    assert latest.history_user is None
    assert latest.history_change_reason == f"tenant key {key[:11]}"


# -- what a key may write --------------------------------------------------------------------


def test_a_key_declares_its_workload_and_names_its_tenant(tenants: tuple[Tenant, Tenant]) -> None:
    own, _ = tenants
    client = key_client(issue_key(own))
    etag = client.get(reverse("tenant-detail", args=[own.pk]))["ETag"]
    renamed = client.patch(
        reverse("tenant-detail", args=[own.pk]),
        {"display_name": "Assistant Ltd"},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    assert renamed.status_code == 200, renamed.content
    profile = WorkloadProfile.objects.get(tenant=own)
    body = {
        "tenant": own.pk,
        "model": profile.model_id,
        "workload_class": profile.workload_class_id,
        "version": 2,
        **profile_figures(),
    }
    made = client.post(reverse("workload-profile-list"), body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["source"] == "declared"
    url = reverse("workload-profile-detail", args=[made.json()["id"]])
    changed = client.patch(url, {"peak_requests_per_s": 3.0}, format="json")
    assert changed.status_code == 200, changed.content
    assert client.delete(url).status_code == 204


# What a key tried to raise in the review: its tier, its fair-share weight, its quota.
OPERATOR_TENANT_CHANGES = {
    "tier": "other_tier",
    "fair_share_weight": 1000.0,
    "spill_allowed": True,
    "max_spill_rtt_ms": 80.0,
    "name": "renamed",
    "home_region": "other_region",
    "residency_regions": "other_regions",
}


@pytest.mark.parametrize("field", sorted(OPERATOR_TENANT_CHANGES))
def test_a_key_cannot_change_its_tenants_operator_fields(
    field: str, tenants: tuple[Tenant, Tenant]
) -> None:
    own, _ = tenants
    # Spill needs a largest round trip: with one set, spill alone is a valid change.
    Tenant.objects.filter(pk=own.pk).update(max_spill_rtt_ms=50.0)
    own.refresh_from_db()
    records = Records()
    better = records.tier(name="premium", priority=1000, failure_promise="zone")
    elsewhere = records.region(name="r2")
    value: Any = {
        "other_tier": better.pk,
        "other_region": elsewhere.pk,
        "other_regions": [own.home_region_id, elsewhere.pk],
    }.get(str(OPERATOR_TENANT_CHANGES[field]), OPERATOR_TENANT_CHANGES[field])
    client = key_client(issue_key(own))
    url = reverse("tenant-detail", args=[own.pk])
    etag = client.get(url)["ETag"]
    response = client.patch(url, {field: value}, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "permission_denied" and set(error["fields"]) == {field}
    assert field in error["message"]
    fresh = Tenant.objects.get(pk=own.pk)
    assert (fresh.revision, fresh.tier_id, fresh.fair_share_weight) == (
        own.revision,
        own.tier_id,
        own.fair_share_weight,
    )
    # The same change by a policy admin goes through (the test's values are valid ones).
    admin = APIClient()
    admin.force_authenticate(user=User.objects.create_superuser("root", password="pw-root"))
    done = admin.patch(url, {field: value}, format="json", HTTP_IF_MATCH="*")
    assert done.status_code == 200, done.content


def test_a_put_sending_operator_fields_back_unchanged_is_allowed(
    tenants: tuple[Tenant, Tenant],
) -> None:
    own, _ = tenants
    client = key_client(issue_key(own))
    url = reverse("tenant-detail", args=[own.pk])
    current = client.get(url)
    body = {k: v for k, v in current.json().items() if k not in ("quota",)}
    body["display_name"] = "Assistant GmbH"
    response = client.put(url, body, format="json", HTTP_IF_MATCH=current["ETag"])
    assert response.status_code == 200, response.content
    assert Tenant.objects.get(pk=own.pk).display_name == "Assistant GmbH"
    # Several operator fields at once: all named.
    etag = response["ETag"]
    raised = client.patch(
        url,
        {"fair_share_weight": 1000.0, "display_name": "x", "spill_allowed": True},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    assert raised.status_code == 403
    assert set(raised.json()["error"]["fields"]) == {"fair_share_weight", "spill_allowed"}
    assert Tenant.objects.get(pk=own.pk).display_name == "Assistant GmbH"


@pytest.mark.parametrize(
    "field",
    [
        "budget_rate_replica_s_per_s",
        "budget_burst_replica_s",
        "tokens_per_minute_limit",
        "tokens_per_minute_burst",
    ],
)
def test_a_key_cannot_raise_its_quota(field: str, tenants: tuple[Tenant, Tenant]) -> None:
    own, _ = tenants
    client = key_client(issue_key(own))
    quota = own.quota
    url = reverse("tenant-quota-detail", args=[quota.pk])
    etag = client.get(url)["ETag"]
    value = 10**9 if field.startswith("tokens") else 1000.0
    body = {field: value}
    if field == "tokens_per_minute_limit":
        body["tokens_per_minute_burst"] = value
    response = client.patch(url, body, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 403, response.content
    assert field in response.json()["error"]["fields"]
    quota.refresh_from_db()
    assert quota.revision == own.quota.revision
    assert getattr(quota, field) != value


def test_a_key_writes_only_declared_profiles(tenants: tuple[Tenant, Tenant]) -> None:
    own, _ = tenants
    client = key_client(issue_key(own))
    profile = WorkloadProfile.objects.get(tenant=own)
    body = {
        "tenant": own.pk,
        "model": profile.model_id,
        "workload_class": profile.workload_class_id,
        "version": 3,
        "source": "telemetry",
        **profile_figures(),
    }
    posed = client.post(reverse("workload-profile-list"), body, format="json")
    assert posed.status_code == 403 and set(posed.json()["error"]["fields"]) == {"source"}
    measured = WorkloadProfile.objects.create(
        tenant=own,
        model=profile.model,
        workload_class=profile.workload_class,
        version=4,
        source=WorkloadProfile.Source.TELEMETRY,
        **profile_figures(),
    )
    url = reverse("workload-profile-detail", args=[measured.pk])
    for response in (
        client.patch(url, {"peak_requests_per_s": 0.5}, format="json"),
        client.delete(url),
    ):
        assert response.status_code == 403, response.content
        assert set(response.json()["error"]["fields"]) == {"source"}
    relabelled = client.patch(
        reverse("workload-profile-detail", args=[profile.pk]),
        {"source": "telemetry"},
        format="json",
    )
    assert relabelled.status_code == 403
    assert WorkloadProfile.objects.filter(pk=measured.pk, peak_requests_per_s=0.5).count() == 0
    assert WorkloadProfile.objects.get(pk=profile.pk).source == "declared"


def test_writes_naming_another_tenant_are_refused(tenants: tuple[Tenant, Tenant]) -> None:
    own, other = tenants
    client = key_client(issue_key(own))
    profile = WorkloadProfile.objects.get(tenant=own)
    body = {
        "tenant": other.pk,
        "model": profile.model_id,
        "workload_class": profile.workload_class_id,
        "version": 2,
        **profile_figures(),
    }
    made = client.post(reverse("workload-profile-list"), body, format="json")
    assert made.status_code == 400 and "tenant" in made.json()["error"]["fields"], made.content
    assert not WorkloadProfile.objects.filter(tenant=other, version=2).exists()
    # Moving its own profile or quota to another tenant: the same 400.
    moved = client.patch(
        reverse("workload-profile-detail", args=[profile.pk]), {"tenant": other.pk}, format="json"
    )
    assert moved.status_code == 400 and "tenant" in moved.json()["error"]["fields"]
    quota = own.quota
    etag = client.get(reverse("tenant-quota-detail", args=[quota.pk]))["ETag"]
    moved = client.patch(
        reverse("tenant-quota-detail", args=[quota.pk]),
        {"tenant": other.pk},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    assert moved.status_code == 400 and "tenant" in moved.json()["error"]["fields"]
    # The other tenant's records are not there at all.
    theirs = WorkloadProfile.objects.get(tenant=other)
    url = reverse("workload-profile-detail", args=[theirs.pk])
    assert client.patch(url, {"peak_requests_per_s": 1.0}, format="json").status_code == 404
    assert client.delete(url).status_code == 404
    assert (
        client.patch(reverse("tenant-detail", args=[other.pk]), {}, format="json").status_code
        == 404
    )
    assert WorkloadProfile.objects.filter(pk=theirs.pk).exists()


def test_a_key_neither_makes_nor_deletes_tenants(tenants: tuple[Tenant, Tenant]) -> None:
    own, _ = tenants
    client = key_client(issue_key(own))
    body = {"name": "newco", "tier": own.tier_id, "home_region": own.home_region_id}
    assert client.post(reverse("tenant-list"), body, format="json").status_code == 403
    assert client.delete(reverse("tenant-detail", args=[own.pk])).status_code == 403
    assert Tenant.objects.filter(pk=own.pk).exists() and not Tenant.objects.filter(name="newco")


def test_a_read_only_key_reads_and_writes_nothing(tenants: tuple[Tenant, Tenant]) -> None:
    own, _ = tenants
    client = key_client(issue_key(own, read_only=True))
    assert client.get(reverse("tenant-detail", args=[own.pk])).status_code == 200
    profile = WorkloadProfile.objects.get(tenant=own)
    response = client.patch(
        reverse("workload-profile-detail", args=[profile.pk]),
        {"peak_requests_per_s": 1.0},
        format="json",
    )
    assert response.status_code == 403
    assert "read-only" in response.json()["error"]["message"]


# -- the command and the admin ---------------------------------------------------------------


def test_the_command_makes_lists_and_revokes(tenants: tuple[Tenant, Tenant]) -> None:
    out = io.StringIO()
    call_command("tenant_key", "create", "--tenant", OWN, "--name", "ops", "--quiet", stdout=out)
    key = out.getvalue().strip()
    assert tenant_key_authenticate(key=key).tenant.name == OWN
    listed = io.StringIO()
    call_command("tenant_key", "list", stdout=listed)
    assert key[:11] in listed.getvalue() and key not in listed.getvalue()
    call_command("tenant_key", "revoke", key[:11], stdout=io.StringIO())
    assert TenantKey.objects.get().state == "revoked"
    with pytest.raises(CommandError, match="--tenant"):
        call_command("tenant_key", "create", "--tenant", "nobody", "--name", "x")
    with pytest.raises(CommandError, match="No tenant key"):
        call_command("tenant_key", "revoke", "hr_ffffffff")


def test_the_admin_shows_a_new_key_once(
    tenants: tuple[Tenant, Tenant], role_users: dict[str, User | None]
) -> None:
    admin_user = role_users[POLICY_ADMIN]
    assert admin_user is not None
    admin_user.is_superuser = True
    admin_user.save()
    client = Client()
    client.force_login(admin_user)
    response = client.post(
        "/admin/access/tenantkey/add/",
        {"tenant": tenants[0].pk, "name": "from-admin", "expires_at_0": "", "expires_at_1": ""},
        follow=True,
    )
    assert response.status_code == 200
    record = TenantKey.objects.get()
    page = response.content.decode()
    assert record.prefix in page and "shown only this once" in page
    assert TenantKey.history.filter(id=record.pk, history_type="+").count() == 1
    tenant_key_revoke(key=record, user=admin_user)
    listing = client.get("/admin/access/tenantkey/").content.decode()
    assert record.prefix in listing and "shown only this once" not in listing


def test_the_schema_names_the_key_scheme(api_client_for: Any) -> None:
    schema = api_client_for(VIEWER).get(reverse("schema"), {"format": "json"}).json()
    scheme = schema["components"]["securitySchemes"]["tenantKey"]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer"}
    tenants_get = schema["paths"]["/api/tenants/"]["get"]
    assert {"tenantKey": []} in tenants_get["security"]
    # The 403 a key's change of an operator's field gets is documented, with its fields.
    for path in ("/api/tenants/{id}/", "/api/tenant-quotas/{id}/", "/api/workload-profiles/{id}/"):
        for method in ("put", "patch"):
            refused = schema["paths"][path][method]["responses"]["403"]
            ref = refused["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/Error"), (path, method)
            assert "tenant key" in refused["description"]
    detail = schema["components"]["schemas"]["ErrorDetail"]["properties"]["fields"]
    assert "403" in detail["description"]


def test_a_key_costs_one_query_a_request(tenants: tuple[Tenant, Tenant]) -> None:
    """Finding the key (with its tenant) is one SELECT; its use is written once a minute."""
    client = key_client(issue_key(tenants[0]))
    url = reverse("tenant-detail", args=[tenants[0].pk])
    assert client.get(url).status_code == 200  # records the first use
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    key_queries = [q["sql"] for q in queries if "access_tenantkey" in q["sql"]]
    assert len(key_queries) == 1 and key_queries[0].startswith("SELECT"), key_queries
