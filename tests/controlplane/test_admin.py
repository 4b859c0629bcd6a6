"""The admin UI: who may open and change what, the audit trail it writes, the tenant form's
residency check, optimistic concurrency on revisioned records, and the derived figures shown.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import models
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince

from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.fleet.models import (
    AcceleratorType,
    CapacityFigure,
    Geography,
    HostedProvider,
    LlmModel,
    Region,
    RegionLink,
    ReplicaShape,
    WorkloadClass,
    Zone,
    ZoneInventory,
)
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile
from tests.controlplane.admin_support import admin_url, form_data

APP_LABELS = ("fleet", "policies")


def _record_models() -> list[type[models.Model]]:
    """Every fleet and policy model, without the history models simple_history adds."""
    return [
        model
        for label in APP_LABELS
        for model in apps.get_app_config(label).get_models()
        if not model.__name__.startswith("Historical")
    ]


RECORD_MODELS = _record_models()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """The role users get passwords; the production hasher makes each one cost a second."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _saved(obj: models.Model) -> Any:
    obj.full_clean()
    obj.save()
    return obj


@pytest.fixture
def fleet(db: None) -> dict[str, models.Model]:
    """One record of every fleet and policy model: a 70B model on 2 × 80 GB in eu-west.

    Seed figures: 140 GB of weights on 2 × 80 GB with 6 GB reserve leaves an 8 GB KV pool;
    80 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes = 327,680 bytes per token.
    """
    eu = _saved(Geography(name="eu", description="European Union"))
    us = _saved(Geography(name="us"))
    eu_west = _saved(Region(name="eu-west", geography=eu))
    eu_north = _saved(Region(name="eu-north", geography=eu))
    us_east = _saved(Region(name="us-east", geography=us))
    zone = _saved(Zone(name="eu-west-a", region=eu_west))
    link = _saved(RegionLink(region_a=eu_west, region_b=eu_north, rtt_ms=25))
    h100 = _saved(
        AcceleratorType(
            name="h100-80gb",
            memory_gb=80,
            peak_bf16_tflops=989,
            memory_tbps=3.35,
            on_demand_price_per_gpu_hour=4.0,
            reserved_price_per_gpu_hour=2.5,
        )
    )
    inventory = _saved(ZoneInventory(zone=zone, accelerator=h100, gpus_available=64))
    llama = _saved(
        LlmModel(name="llama-3-70b", parameters_billions=70, layers=80, kv_heads=8, head_dim=128)
    )
    shape = _saved(
        ReplicaShape(name="llama-3-70b-h100x2", model=llama, accelerator=h100, gpus_per_replica=2)
    )
    chat = _saved(WorkloadClass(name="chat"))
    figure = _saved(
        CapacityFigure(
            shape=shape,
            workload_class=chat,
            prefill_tokens_per_s=12000,
            decode_tokens_per_s=2400,
            max_concurrency=32,
            knee_requests_per_s=3.5,
            measured_at=timezone.now() - timedelta(days=45),
        )
    )
    hosted = _saved(
        HostedProvider(
            name="eu-hosted",
            region=eu_west,
            input_price_per_mtok=0.6,
            output_price_per_mtok=2.4,
            tpm_limit=2_000_000,
            p95_ttft_s=0.5,
        )
    )
    hosted.served_models.set([llama])
    gold = _saved(Tier(name="gold", p95_ttft_slo_s=0.8, burst_factor=1.2))
    acme = _saved(Tenant(name="acme", tier=gold, home_region=eu_west, residency_geography=eu))
    acme.residency_regions.set([eu_west, eu_north])
    quota = _saved(
        TenantQuota(tenant=acme, budget_rate_replica_s_per_s=4, budget_burst_replica_s=60)
    )
    profile = _saved(
        WorkloadProfile(
            tenant=acme,
            model=llama,
            workload_class=chat,
            peak_requests_per_s=20,
            prompt_tokens_p50=800,
            prompt_tokens_mean=1000,
            prompt_tokens_p95=3000,
            prompt_tokens_p99=6000,
            output_tokens_p50=150,
            output_tokens_mean=200,
            output_tokens_p95=600,
            output_tokens_p99=900,
        )
    )
    return {
        "geography": eu,
        "geography_us": us,
        "region": eu_west,
        "region_north": eu_north,
        "region_us": us_east,
        "zone": zone,
        "regionlink": link,
        "hostedprovider": hosted,
        "acceleratortype": h100,
        "zoneinventory": inventory,
        "llmmodel": llama,
        "replicashape": shape,
        "workloadclass": chat,
        "capacityfigure": figure,
        "tier": gold,
        "tenant": acme,
        "tenantquota": quota,
        "workloadprofile": profile,
    }


def _client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin_client_(role_users: dict[str, User | None]) -> Client:
    """Logged in as the policy-admin (a staff member of the ``policy-admin`` group)."""
    user = role_users[POLICY_ADMIN]
    assert user is not None
    return _client_for(user)


# -- registration and access -------------------------------------------------------------


def test_every_fleet_and_policy_model_is_registered_with_history() -> None:
    from simple_history.admin import SimpleHistoryAdmin

    assert len(RECORD_MODELS) == 15
    for model in RECORD_MODELS:
        assert model in admin.site._registry, f"{model._meta.label} is not in the admin"
        assert isinstance(admin.site._registry[model], SimpleHistoryAdmin), model._meta.label


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m._meta.label)
def test_policy_admin_opens_every_page(
    model: type[models.Model], admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    obj = fleet[model._meta.model_name]  # type: ignore[index]
    for url in (
        admin_url(model, "changelist"),
        admin_url(model, "add"),
        admin_url(model, "change", obj.pk),
        admin_url(model, "history", obj.pk),
    ):
        response = admin_client_.get(url)
        assert response.status_code == 200, url


def test_changelist_search_filters_and_autocomplete_answer(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    tenants = admin_url(Tenant, "changelist")
    region_us = fleet["region_us"]
    for query, expect_acme in [
        ({"q": "acm"}, True),
        ({"tier__id__exact": fleet["tier"].pk}, True),
        ({"home_region__id__exact": fleet["region"].pk}, True),
        ({"residency_geography__id__exact": fleet["geography_us"].pk}, False),
        ({"residency_regions__id__exact": fleet["region_north"].pk}, True),
        ({"residency_regions__id__exact": region_us.pk}, False),
    ]:
        response = admin_client_.get(tenants, query)
        assert response.status_code == 200, query
        names = [t.name for t in response.context["cl"].result_list]
        assert ("acme" in names) is expect_acme, query

    response = admin_client_.get(
        reverse("admin:autocomplete"),
        {
            "app_label": "policies",
            "model_name": "tenant",
            "field_name": "home_region",
            "term": "eu",
        },
    )
    assert response.status_code == 200
    assert {r["text"] for r in response.json()["results"]} == {"eu-north", "eu-west"}


@pytest.mark.parametrize("role", [VIEWER, FINANCE])
def test_viewer_and_finance_without_staff_cannot_enter_the_admin(
    role: str, role_users: dict[str, User | None], fleet: dict[str, models.Model]
) -> None:
    user = role_users[role]
    assert user is not None and not user.is_staff
    client = _client_for(user)
    for url in (reverse("admin:index"), admin_url(Tier, "change", fleet["tier"].pk)):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


@pytest.mark.parametrize("role", [VIEWER, FINANCE])
def test_viewer_and_finance_as_staff_can_look_but_not_change(
    role: str, role_users: dict[str, User | None], fleet: dict[str, models.Model]
) -> None:
    user = role_users[role]
    assert user is not None
    user.is_staff = True
    user.save()
    client = _client_for(user)

    request = RequestFactory().get("/admin/")
    request.user = User.objects.get(pk=user.pk)  # fresh: no cached permissions
    for model in RECORD_MODELS:
        model_admin = admin.site._registry[model]
        obj = fleet[model._meta.model_name]
        assert model_admin.has_view_permission(request, obj), model._meta.label
        assert not model_admin.has_add_permission(request), model._meta.label
        assert not model_admin.has_change_permission(request, obj), model._meta.label
        assert not model_admin.has_delete_permission(request, obj), model._meta.label

    tier = fleet["tier"]
    change_url = admin_url(Tier, "change", tier.pk)
    response = client.get(change_url)
    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    assert 'name="_save"' not in response.content.decode()

    assert client.get(admin_url(Tier, "add")).status_code == 403
    assert client.post(admin_url(Tier, "delete", tier.pk), {"post": "yes"}).status_code == 403
    response = client.post(
        change_url,
        {"name": "gold", "p95_ttft_slo_s": "9", "failure_promise": "none", "priority": "0"},
    )
    assert response.status_code == 403
    tier.refresh_from_db()
    assert tier.p95_ttft_slo_s == 0.8
    assert tier.history.count() == 1


# -- audit trail ---------------------------------------------------------------------------


def test_admin_change_writes_history_with_user_and_before_after(
    admin_client_: Client, role_users: dict[str, User | None], fleet: dict[str, models.Model]
) -> None:
    tier = fleet["tier"]
    change_url = admin_url(Tier, "change", tier.pk)
    data = form_data(admin_client_.get(change_url))
    data["p95_ttft_slo_s"] = "1.5"
    data["burst_factor"] = "1.5"

    response = admin_client_.post(change_url, data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    newest, before = tier.history.all()[:2]
    assert newest.history_type == "~"
    assert newest.history_user == role_users[POLICY_ADMIN]
    delta = newest.diff_against(before)
    changes = {c.field: (c.old, c.new) for c in delta.changes}
    assert changes["p95_ttft_slo_s"] == (0.8, 1.5)
    assert changes["burst_factor"] == (1.2, 1.5)
    assert set(changes) == {"p95_ttft_slo_s", "burst_factor"}
    tier.refresh_from_db()
    assert tier.revision == 2

    page = admin_client_.get(admin_url(Tier, "history", tier.pk)).content.decode()
    assert "admin-user" in page
    assert "0.8" in page and "1.5" in page


def test_tenant_change_records_residency_regions_and_inline_quota(
    admin_client_: Client, role_users: dict[str, User | None], fleet: dict[str, models.Model]
) -> None:
    tenant = fleet["tenant"]
    quota = fleet["tenantquota"]
    change_url = admin_url(Tenant, "change", tenant.pk)
    data = form_data(admin_client_.get(change_url))
    data["residency_regions"] = [fleet["region"].pk]
    data["quota-0-budget_burst_replica_s"] = "120"
    before = tenant.history.latest()

    response = admin_client_.post(change_url, data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    user = role_users[POLICY_ADMIN]
    # The save writes one row and the region list change another; both name the user.
    written = list(tenant.history.filter(history_date__gt=before.history_date))
    assert written and all(row.history_user == user for row in written)
    delta = tenant.history.latest().diff_against(before)
    regions = next(c for c in delta.changes if c.field == "residency_regions")
    assert {row["region"] for row in regions.old} == {
        fleet["region"].pk,
        fleet["region_north"].pk,
    }
    assert {row["region"] for row in regions.new} == {fleet["region"].pk}

    quota_newest, quota_before = quota.history.all()[:2]
    assert quota_newest.history_user == user
    quota_changes = {
        c.field: (c.old, c.new) for c in quota_newest.diff_against(quota_before).changes
    }
    assert quota_changes["budget_burst_replica_s"] == (60, 120)


# -- tenant residency --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            {"residency_regions": ["region", "region_us"]},
            "residency_regions",
            "us-east lie outside the residency geography eu.",
        ),
        (
            {"residency_regions": ["region_north"]},
            "residency_regions",
            "The home region eu-west must be one of the residency regions.",
        ),
        (
            {"home_region": "region_us", "residency_regions": []},
            "home_region",
            "Home region us-east is in us, outside the residency geography eu.",
        ),
    ],
    ids=["region-outside-geography", "home-not-listed", "home-outside-geography"],
)
def test_tenant_form_refuses_bad_residency_with_the_message(
    change: dict[str, Any],
    field: str,
    message: str,
    admin_client_: Client,
    fleet: dict[str, models.Model],
) -> None:
    tenant = fleet["tenant"]
    change_url = admin_url(Tenant, "change", tenant.pk)
    data = form_data(admin_client_.get(change_url))
    for name, value in change.items():
        data[name] = (
            [fleet[key].pk for key in value] if isinstance(value, list) else fleet[value].pk
        )

    response = admin_client_.post(change_url, data)

    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors[field] == [message]
    assert message in response.content.decode()
    tenant.refresh_from_db()
    assert tenant.revision == 1
    assert tenant.home_region == fleet["region"]
    assert set(tenant.residency_regions.all()) == {fleet["region"], fleet["region_north"]}


def test_tenant_add_form_checks_residency_too(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    add_url = admin_url(Tenant, "add")
    data = form_data(admin_client_.get(add_url))
    data.update(
        name="globex",
        tier=fleet["tier"].pk,
        fair_share_weight="1",
        home_region=fleet["region_us"].pk,
        residency_regions=[fleet["region"].pk],
    )
    response = admin_client_.post(add_url, data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["residency_regions"] == [
        "The home region us-east must be one of the residency regions."
    ]
    assert not Tenant.objects.filter(name="globex").exists()

    data["residency_regions"] = [fleet["region_us"].pk]
    response = admin_client_.post(add_url, data)
    assert response.status_code == 302
    globex = Tenant.objects.get(name="globex")
    assert [r.name for r in globex.allowed_regions()] == ["us-east"]


# -- optimistic concurrency ----------------------------------------------------------------


def test_admin_refuses_to_overwrite_a_change_made_since_the_form_opened(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    tier = fleet["tier"]
    change_url = admin_url(Tier, "change", tier.pk)
    data = form_data(admin_client_.get(change_url))
    assert data["expected_revision"] == 1
    data["p95_ttft_slo_s"] = "2"

    # Someone else (the API, a scenario load) saves the tier meanwhile.
    meanwhile = Tier.objects.get(pk=tier.pk)
    meanwhile.priority = 5
    meanwhile.save()

    response = admin_client_.post(change_url, data)

    assert response.status_code == 200
    errors = response.context["adminform"].form.non_field_errors()
    assert errors == [
        "This tier was changed by someone else since you opened it (revision 1, now 2). "
        "Reload the page, look at their change, and apply yours again."
    ]
    tier.refresh_from_db()
    assert (tier.priority, tier.p95_ttft_slo_s, tier.revision) == (5, 0.8, 2)

    data = form_data(admin_client_.get(change_url))
    data["p95_ttft_slo_s"] = "2"
    assert admin_client_.post(change_url, data).status_code == 302
    tier.refresh_from_db()
    assert (tier.priority, tier.p95_ttft_slo_s, tier.revision) == (5, 2.0, 3)


def test_revert_from_history_moves_the_revision_forward(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    tier = fleet["tier"]
    first = tier.history.earliest()
    for slo in (1.0, 1.5):
        tier.p95_ttft_slo_s = slo
        tier.save()
    assert tier.revision == 3

    revert_url = admin_url(Tier, "simple_history", tier.pk, first.history_id)
    data = form_data(admin_client_.get(revert_url))
    assert data["expected_revision"] == 3
    response = admin_client_.post(revert_url, data)

    assert response.status_code == 302
    tier.refresh_from_db()
    # Back to the first values, under a new revision: an old ETag must not match again.
    assert (tier.p95_ttft_slo_s, tier.revision) == (0.8, 4)


# -- derived read-only figures -----------------------------------------------------------


def test_shape_and_model_pages_show_derived_memory_figures(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    shape = fleet["replicashape"]
    page = admin_client_.get(admin_url(ReplicaShape, "change", shape.pk)).content.decode()
    assert "KV pool per replica" in page
    assert "70.0 GB" in page  # weights per GPU: 140 GB over 2
    assert "8.0 GB" in page  # 2 × (80 − 70 − 6)
    assert "24,414" in page  # 8e9 // 327,680

    listing = admin_client_.get(admin_url(ReplicaShape, "changelist")).content.decode()
    assert "8.0 GB" in listing and "24,414" in listing

    model_page = admin_client_.get(
        admin_url(LlmModel, "change", fleet["llmmodel"].pk)
    ).content.decode()
    assert "140.0 GB (140,000,000,000 bytes)" in model_page
    assert "327,680 B (0.312 MiB)" in model_page

    # An add form has no model yet: the derived fields are empty, not an error.
    assert admin_client_.get(admin_url(ReplicaShape, "add")).status_code == 200


def test_capacity_figures_show_age_and_stale_flag(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    figure = fleet["capacityfigure"]
    assert isinstance(figure, CapacityFigure)
    fresh = _saved(
        CapacityFigure(
            shape=figure.shape,
            workload_class=None,
            prefill_tokens_per_s=11000,
            decode_tokens_per_s=2200,
            max_concurrency=32,
            measured_at=timezone.now() - timedelta(days=2),
        )
    )
    listing = admin_client_.get(admin_url(CapacityFigure, "changelist"))
    cl = listing.context["cl"]
    assert {f.pk for f in cl.result_list} == {figure.pk, fresh.pk}
    content = listing.content.decode()
    assert "all classes" in content
    assert 'alt="True"' in content and 'alt="False"' in content

    for freshness, expected in [("stale", {figure.pk}), ("fresh", {fresh.pk})]:
        response = admin_client_.get(
            admin_url(CapacityFigure, "changelist"), {"freshness": freshness}
        )
        assert {f.pk for f in response.context["cl"].result_list} == expected

    page = admin_client_.get(admin_url(CapacityFigure, "change", figure.pk)).content.decode()
    assert timesince(figure.measured_at) in page
    assert 'alt="True"' in page


def test_tenant_page_shows_allowed_regions_and_revision(
    admin_client_: Client, fleet: dict[str, models.Model]
) -> None:
    page = admin_client_.get(admin_url(Tenant, "change", fleet["tenant"].pk)).content.decode()
    assert "eu-north, eu-west" in page
    listing = admin_client_.get(admin_url(Tenant, "changelist")).content.decode()
    assert "eu · eu-north, eu-west" in listing
