"""Hosted providers and the tiers' hosted overflow in scenario files: loaded field by field,
idempotently, refused with the entry and field named, and re-planned with: the shipped
example with us-east's GPUs gone sends its us-east demands to a provider there, and the
emitted routing weights and LiteLLM configuration split each demand as the plan does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command

from controlplane.emission import services as emission
from controlplane.emission.payload import region_documents
from controlplane.emission.sinks import litellm_config
from controlplane.fleet.models import HostedProvider
from controlplane.plans.selectors import plan_problem, plan_solution
from controlplane.policies.models import Tier
from controlplane.scenarios.schema import ScenarioError
from controlplane.scenarios.services import scenario_load
from tests.controlplane.plans_helpers import run_replan

pytestmark = pytest.mark.django_db

SUPPORT_ASSISTANT = (
    Path(__file__).resolve().parents[2] / "docs" / "scenarios" / "support-assistant.yaml"
)

PROVIDERS: list[dict[str, Any]] = [
    {
        "name": "us-api",
        "region": "us-east",
        "models": ["chat-70b"],
        "input_price_per_mtok": 0.6,
        "output_price_per_mtok": 2.4,
        "tpm_limit": 50_000_000,
        "rpm_limit": 60_000,
        "p95_ttft_s": 0.4,
    },
    {
        "name": "eu-api",
        "region": "eu-west",
        "models": ["chat-70b"],
        "input_price_per_mtok": 0.8,
        "output_price_per_mtok": 3.2,
        "tpm_limit": 1_000_000,
        "p95_ttft_s": 0.9,
        "enabled": False,
    },
]


def scenario(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SUPPORT_ASSISTANT.read_text())
    data["hosted_providers"] = [dict(p) for p in PROVIDERS]
    for tier in data["tiers"]:
        tier["hosted_overflow"] = tier["name"] != "batch"
    data.update(changes)
    return data


def test_providers_and_the_overflow_flag_load_and_a_reload_changes_nothing() -> None:
    report = scenario_load(data=scenario())
    assert report.counts["hosted_providers"] == {"created": 2, "updated": 0, "unchanged": 0}
    us = HostedProvider.objects.get(name="us-api")
    assert us.region.name == "us-east"
    assert list(us.served_models.values_list("name", flat=True)) == ["chat-70b"]
    assert (us.input_price_per_mtok, us.output_price_per_mtok) == (0.6, 2.4)
    assert (us.tpm_limit, us.rpm_limit, us.p95_ttft_s, us.enabled) == (
        50_000_000,
        60_000,
        0.4,
        True,
    )
    eu = HostedProvider.objects.get(name="eu-api")
    assert eu.rpm_limit is None and eu.enabled is False
    assert set(Tier.objects.filter(hosted_overflow=True).values_list("name", flat=True)) == {
        "premium",
        "standard",
        "free",
    }

    again = scenario_load(data=scenario())
    assert again.total("created") == again.total("updated") == 0
    assert again.counts["hosted_providers"]["unchanged"] == 2

    changed = scenario()
    changed["hosted_providers"][0]["tpm_limit"] = 40_000_000
    changed["hosted_providers"][0].pop("rpm_limit")
    third = scenario_load(data=changed)
    assert third.changes == ["hosted_providers[0] (us-api): updated tpm_limit, rpm_limit"]
    us.refresh_from_db()
    assert (us.tpm_limit, us.rpm_limit) == (40_000_000, None)


def test_a_scenario_without_the_flag_keeps_tiers_off_hosted_overflow() -> None:
    scenario_load(path=SUPPORT_ASSISTANT)
    assert not Tier.objects.filter(hosted_overflow=True).exists()
    assert not HostedProvider.objects.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"models": ["chat-7b"]},
            "hosted_providers[0] (us-api): models: unknown model 'chat-7b'",
        ),
        ({"models": []}, "hosted_providers[0] (us-api): models: name at least one model"),
        ({"region": "mars"}, "hosted_providers[0] (us-api): region: unknown region 'mars'"),
        ({"tpm_limit": 0}, "hosted_providers[0] (us-api): tpm_limit: "),
        ({"tpm_limit": "lots"}, "tpm_limit: expected a whole number, got 'lots'"),
        ({"input_price_per_mtok": -1}, "hosted_providers[0] (us-api): input_price_per_mtok: "),
        ({"p95_ttft_s": None}, "p95_ttft_s: expected a number, got null"),
        ({"enabled": "yes"}, "enabled: expected true or false, got 'yes'"),
        ({"quota": 5}, "hosted_providers[0] (us-api): unknown field 'quota'"),
        ({"name": "Not A Slug"}, "hosted_providers[0] (Not A Slug): name: "),
    ],
)
def test_a_bad_provider_is_refused_naming_the_entry_and_field(
    change: dict[str, Any], message: str
) -> None:
    data = scenario()
    data["hosted_providers"][0].update(change)
    with pytest.raises(ScenarioError) as caught:
        scenario_load(data=data)
    assert message in str(caught.value)
    assert not HostedProvider.objects.exists()


def test_a_missing_required_field_and_a_bad_flag_are_named() -> None:
    data = scenario()
    del data["hosted_providers"][1]["tpm_limit"]
    with pytest.raises(
        ScenarioError, match=r"hosted_providers\[1\] \(eu-api\): tpm_limit: required"
    ):
        scenario_load(data=data)
    data = scenario()
    data["tiers"][0]["hosted_overflow"] = 1
    with pytest.raises(ScenarioError, match=r"tiers\[0\] \(premium\): hosted_overflow: expected"):
        scenario_load(data=data)


def test_the_command_exits_2_with_the_message(tmp_path: Path) -> None:
    data = scenario()
    data["hosted_providers"][0]["models"] = ["chat-7b"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CommandError) as caught:
        call_command("load_scenario", str(path))
    assert caught.value.returncode == 2
    assert str(caught.value) == "hosted_providers[0] (us-api): models: unknown model 'chat-7b'"


def test_a_loaded_scenario_replans_onto_its_provider_and_emits_the_split() -> None:
    data = scenario()
    for row in data["inventory"]:
        if str(row["zone"]).startswith("us-east"):
            row["gpus_available"] = 0
    scenario_load(data=data)
    run = run_replan()
    assert run.plan is not None, run.error
    solution = plan_solution(run.plan)
    assert solution.hosted, "the us-east demands overflow to the provider loaded from the file"
    assert {h.provider for h in solution.hosted} == {"us-api"}  # eu-api is disabled
    problem = plan_problem(run.plan)
    assert [p.name for p in problem.hosted] == ["us-api"]

    documents = region_documents(emission.plan_snapshot(plan=run.plan))
    by_demand = {
        d["demand"]: (region, d)
        for region, document in documents.items()
        for d in document["routing_weights"]
    }
    homes = {d.id: d.home_region for d in problem.demands}
    hosted_seen = 0
    for demand_id, (region, weights) in by_demand.items():
        assert region == homes[demand_id]
        pools = solution.routing_of(demand_id)
        hosted = solution.hosted_of(demand_id)
        served = sum(r.requests_per_s for r in pools) + sum(h.requests_per_s for h in hosted)
        assert weights["served_requests_per_s"] == pytest.approx(served)
        assert weights["unserved_requests_per_s"] == pytest.approx(solution.unserved_of(demand_id))
        if served > 0:
            assert sum(t["weight"] for t in weights["targets"]) == pytest.approx(1.0)
        for target in weights["targets"]:
            if target["kind"] == "hosted":
                hosted_seen += 1
                (row,) = [h for h in hosted if h.provider == target["provider"]]
                assert target["weight"] == pytest.approx(row.requests_per_s / served)
                assert target["region"] == "us-east"
    assert hosted_seen == len([h for h in solution.hosted if h.requests_per_s > 0])

    endpoints = litellm_config.Endpoints(
        namespace="inference", hosted={"us-api": {"provider": "openai"}}
    )
    config = litellm_config.gateway_config(documents["us-east"], endpoints)
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in config["model_list"]:
        groups.setdefault(entry["model_name"], []).append(entry["litellm_params"])
    assert groups and all(
        sum(p["weight"] for p in deployments) == litellm_config.WEIGHT_TOTAL
        for deployments in groups.values()
    )
    hosted_models = {p["model"] for ds in groups.values() for p in ds if "api_key" in p}
    assert hosted_models == {"openai/chat-70b"}
