"""Hosted providers as fleet records: the problem builder puts the enabled ones that serve a
demanded model in the problem's ``hosted`` list and flags the demands whose tier allows
hosted overflow; a re-plan then sends what a shortage leaves unserved to the provider,
inside its quota and the tenants' residency. The API and admin edit the records."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from controlplane.core.roles import POLICY_ADMIN, VIEWER
from controlplane.fleet.models import HostedProvider, LlmModel, Region
from controlplane.plans.problem import problem_export
from controlplane.plans.selectors import read_solution
from controlplane.policies.models import Tenant, Tier
from tests.controlplane.plans_helpers import load_support_assistant, run_replan, shrink_region

pytestmark = pytest.mark.django_db


def provider(region: str = "us-east", *, tpm: int = 50_000_000, **extra: Any) -> HostedProvider:
    made = HostedProvider.objects.create(
        name=extra.pop("name", "hosted-api"),
        region=Region.objects.get(name=region),
        input_price_per_mtok=extra.pop("input_price_per_mtok", 0.5),
        output_price_per_mtok=extra.pop("output_price_per_mtok", 1.5),
        tpm_limit=tpm,
        p95_ttft_s=0.4,
        **extra,
    )
    made.served_models.set(LlmModel.objects.all())
    return made


def test_without_providers_the_problem_is_unchanged_and_with_one_it_is_listed() -> None:
    load_support_assistant()
    before = problem_export()
    assert "hosted" not in before
    assert not any("hosted_overflow" in d for d in before["demands"])

    made = provider(rpm_limit=60_000)
    Tier.objects.filter(name="standard").update(hosted_overflow=True)
    after = problem_export()
    (row,) = after["hosted"]
    assert row["name"] == made.name and row["region"] == "us-east"
    assert row["tpm_limit"] == 50_000_000 and row["rpm_limit"] == 60_000
    assert set(row["models"]) == {str(d["model"]) for d in after["demands"]}
    flagged = {d["tenant"] for d in after["demands"] if d.get("hosted_overflow")}
    standard = set(Tenant.objects.filter(tier__name="standard").values_list("name", flat=True))
    assert flagged == standard and flagged

    made.enabled = False
    made.save()
    assert "hosted" not in problem_export()


def test_a_shortage_overflows_to_the_provider_inside_residency_and_quota() -> None:
    load_support_assistant()
    shrink_region("us-east", 0)
    short = run_replan().plan
    assert short is not None
    short_solution = read_solution(short.solution)
    assert short_solution.unserved_requests_per_s > 0
    unserved = {u.demand for u in short_solution.unserved}

    provider()
    Tier.objects.update(hosted_overflow=True)
    run = run_replan()
    assert run.plan is not None, run.error
    solution = read_solution(run.plan.solution)
    assert solution.hosted, "the overflow goes to the hosted provider"
    sent = {h.demand for h in solution.hosted}
    assert sent & unserved
    assert solution.unserved_requests_per_s < short_solution.unserved_requests_per_s
    # Only demands that may be served in us-east went there.
    problem = {d["id"]: d for d in run.plan.problem["demands"]}
    assert all("us-east" in problem[d]["allowed_regions"] for d in sent)
    assert sum(h.tokens_per_minute for h in solution.hosted) <= 50_000_000
    assert solution.hosted_cost_per_hour == pytest.approx(
        sum(h.cost_per_hour for h in solution.hosted)
    )


def test_the_api_edits_providers_for_policy_admins_and_names_bad_fields(
    role_users: dict[str, User | None],
) -> None:
    load_support_assistant()
    admin, viewer = APIClient(), APIClient()
    admin.force_authenticate(role_users[POLICY_ADMIN])
    viewer.force_authenticate(role_users[VIEWER])
    region = Region.objects.get(name="eu-west").pk
    model = LlmModel.objects.order_by("pk").first()
    assert model is not None
    body = {
        "name": "eu-hosted",
        "region": region,
        "served_models": [model.pk],
        "input_price_per_mtok": 0.6,
        "output_price_per_mtok": 2.4,
        "tpm_limit": 2_000_000,
        "p95_ttft_s": 0.5,
    }
    assert viewer.post("/api/hosted-providers/", body, format="json").status_code == 403
    made = admin.post("/api/hosted-providers/", body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["served_models"] == [model.pk] and made.json()["enabled"] is True
    assert viewer.get(f"/api/hosted-providers/{made.json()['id']}/").status_code == 200
    for field, value in (
        ("served_models", []),
        ("tpm_limit", 0),
        ("input_price_per_mtok", -1),
        ("p95_ttft_s", "fast"),
    ):
        bad = admin.post(
            "/api/hosted-providers/", {**body, "name": "x", field: value}, format="json"
        )
        assert bad.status_code == 400 and field in bad.json()["error"]["fields"], (
            field,
            bad.json(),
        )
    changed = admin.patch(
        f"/api/hosted-providers/{made.json()['id']}/", {"enabled": False}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["enabled"] is False
    both = list(LlmModel.objects.order_by("pk").values_list("pk", flat=True)[:2])
    served = admin.patch(
        f"/api/hosted-providers/{made.json()['id']}/", {"served_models": both}, format="json"
    )
    assert served.status_code == 200 and served.json()["served_models"] == both
    stored = HostedProvider.objects.get(pk=made.json()["id"])
    assert sorted(stored.served_models.values_list("pk", flat=True)) == both
    assert stored.enabled is False  # the earlier change kept
