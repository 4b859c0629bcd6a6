"""Admin behaviour an operator relies on: unchanged saves change nothing, one history row per
save, reverts restore the regions, history in words, finite numbers kept as typed, labels and
the tier picker, the re-plan button on an empty database, the API roots and static files."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import models
from django.test import Client

from controlplane.plans.models import Plan, ReplanRun
from controlplane.policies.models import Tenant, TenantQuota, Tier
from tests.controlplane.admin_support import admin_url, form_data
from tests.controlplane.test_admin import admin_client_, fleet

__all__ = ["admin_client_", "fleet"]

pytestmark = pytest.mark.django_db


def test_saving_a_tenant_unchanged_changes_nothing(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    tenant, quota = fleet["tenant"], fleet["tenantquota"]
    tenant_rows, quota_rows = tenant.history.count(), quota.history.count()
    revisions = (tenant.revision, quota.revision)
    change_url = admin_url(Tenant, "change", tenant.pk)
    response = admin_client_.post(change_url, form_data(admin_client_.get(change_url)))
    assert response.status_code == 302
    tenant.refresh_from_db()
    quota.refresh_from_db()
    assert (tenant.revision, quota.revision) == revisions
    assert (tenant.history.count(), quota.history.count()) == (tenant_rows, quota_rows)


def test_saving_a_tier_unchanged_changes_nothing(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    tier = fleet["tier"]
    rows, revision = tier.history.count(), tier.revision
    change_url = admin_url(Tier, "change", tier.pk)
    assert (
        admin_client_.post(change_url, form_data(admin_client_.get(change_url))).status_code == 302
    )
    tier.refresh_from_db()
    assert (tier.revision, tier.history.count()) == (revision, rows)


def test_one_save_writes_one_history_row_with_the_regions(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    tenant = fleet["tenant"]
    rows = tenant.history.count()
    change_url = admin_url(Tenant, "change", tenant.pk)
    data = form_data(admin_client_.get(change_url))
    data["residency_regions"] = [fleet["region"].pk]
    data["display_name"] = "Acme Corp"
    assert admin_client_.post(change_url, data).status_code == 302
    assert tenant.history.count() == rows + 1
    newest = tenant.history.latest()
    assert newest.display_name == "Acme Corp"
    assert [r.region_id for r in newest.residency_regions.all()] == [fleet["region"].pk]


def test_revert_restores_the_residency_regions(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    tenant = fleet["tenant"]
    both = tenant.history.latest()
    assert sorted(r.region_id for r in both.residency_regions.all()) == sorted(
        [fleet["region"].pk, fleet["region_north"].pk]
    )
    change_url = admin_url(Tenant, "change", tenant.pk)
    data = form_data(admin_client_.get(change_url))
    data["residency_regions"] = [fleet["region"].pk]
    assert admin_client_.post(change_url, data).status_code == 302
    assert [r.name for r in Tenant.objects.get(pk=tenant.pk).residency_regions.all()] == ["eu-west"]

    revert_url = admin_url(Tenant, "simple_history", tenant.pk, both.history_id)
    data = form_data(admin_client_.get(revert_url))
    assert sorted(data["residency_regions"]) == sorted(
        [fleet["region"].pk, fleet["region_north"].pk]
    )
    assert admin_client_.post(revert_url, data).status_code == 302
    regions = sorted(r.name for r in Tenant.objects.get(pk=tenant.pk).residency_regions.all())
    assert regions == ["eu-north", "eu-west"]


def test_tenant_history_reads_in_words_and_lists_quota_changes(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    tenant, quota = fleet["tenant"], fleet["tenantquota"]
    change_url = admin_url(Tenant, "change", tenant.pk)
    data = form_data(admin_client_.get(change_url))
    data.pop("residency_geography", None)
    data["quota-0-budget_burst_replica_s"] = "90"
    response = admin_client_.post(change_url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    quota.refresh_from_db()
    assert quota.budget_burst_replica_s == 90
    body = admin_client_.get(admin_url(Tenant, "history", tenant.pk)).content.decode()
    assert "pk=None" not in body
    assert ">None<" not in body.replace(" ", "").replace("\n", "")
    assert "Quota changes" in body
    assert "Budget burst (replica-seconds)" in body and "60" in body and "90" in body
    assert "eu-north, eu-west" in body  # the region list by name, not by id


def test_an_overflowing_number_is_refused_and_kept(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    tier = fleet["tier"]
    change_url = admin_url(Tier, "change", tier.pk)
    data = form_data(admin_client_.get(change_url))
    data["p95_ttft_slo_s"] = "1e309"
    response = admin_client_.post(change_url, data)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Enter a finite number" in body
    assert 'value="1e309"' in body
    assert "This field is required" not in body


def test_labels_in_words_and_the_tier_picker_shows_slo_and_promise(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    body = admin_client_.get(admin_url(Tenant, "change", fleet["tenant"].pk)).content.decode()
    assert "Budget refill (replica-seconds per second)" in body
    assert "Budget rate replica s per s" not in body
    assert "gold — p95 TTFT ≤ 0.8 s, none, priority 0" in body


def test_replan_now_on_an_empty_database_makes_no_plan_and_says_why(
    admin_client_: Client, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client_.post(admin_url(Plan, "replan"))
    assert response.status_code == 302
    assert Plan.objects.count() == 0
    run = ReplanRun.objects.get()
    assert run.status == ReplanRun.Status.FAILED
    assert "Nothing to plan" in run.error
    # The fleet overview says so where the last re-plan is shown.
    overview = admin_client_.get("/").content.decode()
    assert "Nothing to plan" in overview and "No plan is active yet" in overview


def test_admin_index_puts_policy_first(admin_client_: Client) -> None:
    body = admin_client_.get("/admin/").content.decode()
    assert body.index("Tenants") < body.index("Regions") < body.index("Plans")


def test_api_root_links_every_part(api_client_for: Any) -> None:
    client = api_client_for("viewer")
    root = client.get("/api/").json()
    for key in ("plans", "telemetry", "emission-sinks", "benchmarks", "tenants", "docs"):
        assert key in root, key
    telemetry = client.get("/api/telemetry/")
    assert telemetry.status_code == 200 and "alerts" in telemetry.json()
    benchmarks = client.get("/api/benchmarks/")
    assert benchmarks.status_code == 200 and "runs" in benchmarks.json()
    assert client.get(root["telemetry"]).status_code == 200


def test_the_pages_and_the_admin_assets_are_served_by_headroom(
    settings: Any, role_users: dict[str, User]
) -> None:
    # WhiteNoise serves them (from the finders here; from collectstatic's files in production).
    settings.WHITENOISE_USE_FINDERS = True
    for path in (
        "/static/admin/css/base.css",
        "/static/web/headroom.css",
        "/static/web/favicon.svg",
    ):
        response = Client().get(path)
        assert response.status_code == 200, path


def test_quota_inline_unchanged_keeps_its_revision(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    quota = fleet["tenantquota"]
    revision = quota.revision
    change_url = admin_url(TenantQuota, "change", quota.pk)
    assert (
        admin_client_.post(change_url, form_data(admin_client_.get(change_url))).status_code == 302
    )
    quota.refresh_from_db()
    assert quota.revision == revision
