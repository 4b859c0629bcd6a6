"""export_problem: the placement problem (placement-problem/v1) built from the database."""

from __future__ import annotations

import copy
import importlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.models import CapacityFigure, ReplicaShape, WorkloadClass, Zone
from controlplane.plans.problem import problem_export, problem_summary, request_cost_s
from controlplane.policies.models import Tenant, Tier, WorkloadProfile
from controlplane.scenarios.services import scenario_load
from tests.controlplane.test_scenarios import SUPPORT_ASSISTANT, base_scenario

# What placement-v1 requires of each part of a problem (the rest has defaults).
REQUIRED = {
    "problem": {"format", "regions", "accelerators", "inventory", "shapes", "demands"},
    "regions": {"name", "zones"},
    "accelerators": {"name", "price_per_gpu_hour"},
    "inventory": {"zone", "accelerator", "gpus"},
    "shapes": {
        "name",
        "model",
        "accelerator",
        "gpus",
        "prefill_tokens_per_s",
        "decode_tokens_per_s",
    },
    "rtt_ms": {"from", "to", "ms"},
    "demands": {"id", "model", "home_region", "requests_per_s", "prompt_tokens", "output_tokens"},
}
PROMISES = {"none", "n+1", "zone"}


def check_against_spec(problem: dict[str, Any]) -> None:
    """Every required field present, every reference resolvable, counts whole, rules kept."""
    assert problem["format"] == "placement-problem/v1"
    assert REQUIRED["problem"] <= problem.keys()
    for part in ("regions", "accelerators", "inventory", "shapes", "rtt_ms", "demands"):
        for row in problem.get(part, []):
            missing = REQUIRED[part] - row.keys()
            assert not missing, f"{part} row {row} lacks {missing}"

    regions = {r["name"]: r for r in problem["regions"]}
    zones = [z for r in problem["regions"] for z in r["zones"]]
    accelerators = {a["name"] for a in problem["accelerators"]}
    shapes = {s["name"]: s for s in problem["shapes"]}
    models = {s["model"] for s in shapes.values()}
    assert len(regions) == len(problem["regions"])
    assert len(set(zones)) == len(zones)
    assert len(accelerators) == len(problem["accelerators"])
    assert len(shapes) == len(problem["shapes"])

    seen_inventory = set()
    for row in problem["inventory"]:
        assert row["zone"] in zones
        assert row["accelerator"] in accelerators
        assert isinstance(row["gpus"], int) and row["gpus"] >= 0
        seen_inventory.add((row["zone"], row["accelerator"]))
    assert len(seen_inventory) == len(problem["inventory"])
    for shape in shapes.values():
        assert shape["accelerator"] in accelerators
        assert isinstance(shape["gpus"], int) and shape["gpus"] >= 1
        assert 0 < shape.get("target_utilization", problem["target_utilization"]) <= 1
        assert shape["prefill_tokens_per_s"] > 0 and shape["decode_tokens_per_s"] > 0
    for link in problem.get("rtt_ms", []):
        assert link["from"] in regions and link["to"] in regions and link["ms"] >= 0
    assert 0 < problem.get("target_utilization", 0.7) <= 1

    ids = [d["id"] for d in problem["demands"]]
    assert len(set(ids)) == len(ids)
    for d in problem["demands"]:
        assert d["model"] in models
        assert d["home_region"] in regions
        allowed = d.get("allowed_regions", list(regions))
        assert allowed and set(allowed) <= regions.keys()
        assert d["requests_per_s"] >= 0
        assert d.get("burst", 1.0) >= 1.0
        assert d["prompt_tokens"] >= 0 and d["output_tokens"] >= 0
        assert 0 <= d.get("prefix_cache_hit_rate", 0.0) <= 1
        assert d.get("promise", "none") in PROMISES
        assert isinstance(d.get("priority", 0), int)


@pytest.fixture
def support_assistant(db: None) -> None:
    scenario_load(path=SUPPORT_ASSISTANT)


def demand(problem: dict[str, Any], demand_id: str) -> dict[str, Any]:
    return next(d for d in problem["demands"] if d["id"] == demand_id)


# -- the shipped scenario ---------------------------------------------------------------------


@pytest.mark.usefixtures("support_assistant")
def test_support_assistant_problem_follows_the_spec() -> None:
    warnings: list[str] = []
    problem = problem_export(warn=warnings.append)

    check_against_spec(problem)
    assert warnings == []
    assert problem["target_utilization"] == 0.7
    assert [r["name"] for r in problem["regions"]] == ["eu-west", "us-east"]
    assert problem["regions"][0] == {
        "name": "eu-west",
        "geo": "eu",
        "zones": ["eu-west-a", "eu-west-b", "eu-west-c"],
        "price_multiplier": 1.1,
    }
    assert problem["accelerators"] == [
        {"name": "gpu80", "memory_gb": 80, "price_per_gpu_hour": 4.1}  # on-demand price
    ]
    assert sum(row["gpus"] for row in problem["inventory"]) == 288
    assert problem["rtt_ms"] == [{"from": "eu-west", "to": "us-east", "ms": 90}]
    assert problem["shapes"][0] == {
        "name": "chat-70b/gpu80x2",
        "model": "chat-70b",
        "accelerator": "gpu80",
        "gpus": 2,
        # The whole-mix figure, not the long-summary one.
        "prefill_tokens_per_s": 4000,
        "decode_tokens_per_s": 160,
        "max_concurrency": 12,
        "target_utilization": 0.7,
    }
    assert len(problem["demands"]) == 21
    assert sum(d["requests_per_s"] for d in problem["demands"]) == pytest.approx(8.0)
    assert "previous" not in problem


@pytest.mark.usefixtures("support_assistant")
def test_demands_carry_residency_spill_promise_and_priority() -> None:
    problem = problem_export()

    resident = demand(problem, "nordlicht-versicherung/chat-70b/policy-question")
    assert resident == {
        "id": "nordlicht-versicherung/chat-70b/policy-question",
        "tenant": "nordlicht-versicherung",
        "tier": "premium",
        "model": "chat-70b",
        "home_region": "eu-west",
        "allowed_regions": ["eu-west"],
        "requests_per_s": 1.496,
        # Premium plans at 0.65 against the shapes' 0.7: burst 1.5 × 0.7 / 0.65.
        "burst": pytest.approx(1.5 * 0.7 / 0.65),
        "prompt_tokens": 1300,
        "output_tokens": 80,
        "prefix_cache_hit_rate": 0.35,
        "residence_s": 3.8,
        # The tier's objective and the profile's p95 lengths: shape eligibility and replay.
        "ttft_slo_s": 1.5,
        "prompt_tokens_p95": 2970,
        "output_tokens_p95": 215,
        "promise": "zone",
        "priority": 0,
    }
    assert "max_spill_rtt_ms" not in resident  # no spill allowed
    # A declared profile has no measured burstiness (replays synthesise Poisson arrivals)
    # and no request log.
    assert "arrival_scv" not in resident and "request_trace" not in resident

    us_resident = demand(problem, "keystone-mutual/chat-70b/order-lookup")
    assert us_resident["allowed_regions"] == ["us-east"]
    assert us_resident["home_region"] == "us-east"

    spilling = demand(problem, "harborline-retail/chat-70b/order-lookup@eu-west")
    assert spilling["home_region"] == "eu-west"  # the profile's region, not the tenant's home
    assert spilling["allowed_regions"] == ["eu-west", "us-east"]
    assert spilling["max_spill_rtt_ms"] == 120
    assert (spilling["promise"], spilling["priority"], spilling["burst"]) == ("n+1", 1, 1.3)
    assert demand(problem, "harborline-retail/chat-70b/order-lookup")["home_region"] == "us-east"

    free = demand(problem, "brightpath-learning/chat-70b/long-summary")
    assert (free["promise"], free["priority"], free["burst"]) == ("none", 2, 1)
    batch = demand(problem, "parcelpoint-logistics/chat-70b/long-summary@eu-west")
    assert batch["priority"] == 3
    assert batch["prompt_tokens"] == 9000 and batch["output_tokens"] == 400


@pytest.mark.usefixtures("support_assistant")
def test_parses_with_the_planner() -> None:
    try:
        placement = importlib.import_module("planner.placement")
    except ModuleNotFoundError:
        pytest.skip("planner.placement is not written yet")
    if not hasattr(placement, "parse_problem"):
        pytest.skip("planner.placement.parse_problem is not written yet")

    parsed = placement.parse_problem(json.loads(json.dumps(problem_export())))

    assert len(parsed.demands) == 21
    assert {s.name for s in parsed.shapes} == {"chat-70b/gpu80x2", "chat-70b/gpu80x4"}


@pytest.mark.django_db
def test_the_same_database_gives_the_same_problem_whatever_the_insertion_order() -> None:
    data = json.loads(json.dumps(yaml.safe_load(SUPPORT_ASSISTANT.read_text(encoding="utf-8"))))
    reversed_data = copy.deepcopy(data)
    for value in reversed_data.values():
        if isinstance(value, list):
            value.reverse()
            for entry in value:
                if isinstance(entry, dict) and isinstance(entry.get("zones"), list):
                    entry["zones"].reverse()

    exports = []
    for scenario in (data, reversed_data):
        with transaction.atomic():
            scenario_load(data=scenario)
            exports.append(json.dumps(problem_export()))
            exports.append(json.dumps(problem_export()))
            transaction.set_rollback(True)

    assert len(set(exports)) == 1


# -- what the database says, and defaults -----------------------------------------------------


@pytest.mark.usefixtures("support_assistant")
def test_down_zones_are_left_out_and_degraded_ones_kept() -> None:
    Zone.objects.filter(name="eu-west-c").update(state=Zone.State.DOWN)
    Zone.objects.filter(name="us-east-a").update(state=Zone.State.DEGRADED)

    problem = problem_export()

    check_against_spec(problem)
    zones = {r["name"]: r["zones"] for r in problem["regions"]}
    assert zones == {
        "eu-west": ["eu-west-a", "eu-west-b"],
        "us-east": ["us-east-a", "us-east-b", "us-east-c"],
    }
    assert "eu-west-c" not in {row["zone"] for row in problem["inventory"]}
    assert "us-east-a" in {row["zone"] for row in problem["inventory"]}


@pytest.mark.usefixtures("support_assistant")
def test_a_region_with_every_zone_down_stays_so_references_hold() -> None:
    Zone.objects.filter(region__name="eu-west").update(state=Zone.State.DOWN)

    problem = problem_export()

    check_against_spec(problem)
    assert problem["regions"][0]["zones"] == []


@pytest.mark.usefixtures("support_assistant")
def test_a_shape_without_a_figure_is_left_out_and_reported() -> None:
    CapacityFigure.objects.filter(shape__name="chat-70b/gpu80x4").delete()
    warnings: list[str] = []

    problem = problem_export(warn=warnings.append)

    check_against_spec(problem)
    assert [s["name"] for s in problem["shapes"]] == ["chat-70b/gpu80x2"]
    assert warnings == ["shape chat-70b/gpu80x4 left out: it has no capacity figure"]
    assert len(problem["demands"]) == 21


@pytest.mark.usefixtures("support_assistant")
def test_demands_of_a_model_with_no_shape_left_are_left_out_and_reported() -> None:
    CapacityFigure.objects.all().delete()
    warnings: list[str] = []

    problem = problem_export(warn=warnings.append)

    check_against_spec(problem)
    assert problem["shapes"] == [] and problem["demands"] == []
    assert len(warnings) == 2 + 21
    assert (
        "demand keystone-mutual/chat-70b/policy-question left out: no shape of model "
        "chat-70b has a capacity figure"
    ) in warnings


@pytest.mark.usefixtures("support_assistant")
def test_the_whole_mix_figure_wins_over_a_fresher_class_figure() -> None:
    shape = ReplicaShape.objects.get(name="chat-70b/gpu80x2")
    policy = WorkloadClass.objects.get(name="policy-question")
    now = timezone.now()
    CapacityFigure.objects.filter(shape=shape).update(measured_at=now - timedelta(days=3))
    CapacityFigure.objects.create(
        shape=shape,
        prefill_tokens_per_s=3900,
        decode_tokens_per_s=150,
        max_concurrency=11,
        measured_at=now - timedelta(days=1),
    )
    CapacityFigure.objects.create(
        shape=shape,
        workload_class=policy,
        prefill_tokens_per_s=5000,
        decode_tokens_per_s=200,
        max_concurrency=16,
        measured_at=now,
    )

    figures = {s["name"]: s for s in problem_export()["shapes"]}
    assert figures["chat-70b/gpu80x2"]["decode_tokens_per_s"] == 150  # freshest whole-mix

    # With no whole-mix figure left, the freshest figure of any class.
    CapacityFigure.objects.filter(shape=shape, workload_class=None).delete()
    figures = {s["name"]: s for s in problem_export()["shapes"]}
    assert figures["chat-70b/gpu80x2"]["decode_tokens_per_s"] == 200
    assert figures["chat-70b/gpu80x2"]["max_concurrency"] == 16


@pytest.mark.usefixtures("support_assistant")
def test_a_stale_figure_is_used_and_reported(settings: Any) -> None:
    settings.HEADROOM_CAPACITY_MAX_AGE_DAYS = 30
    CapacityFigure.objects.filter(shape__name="chat-70b/gpu80x4").update(
        measured_at=timezone.now() - timedelta(days=45)
    )
    warnings: list[str] = []

    problem = problem_export(warn=warnings.append)

    assert len(problem["shapes"]) == 2
    assert len(warnings) == 1
    assert warnings[0].startswith("shape chat-70b/gpu80x4: its capacity figure of ")
    assert warnings[0].endswith("is older than 30 days")


@pytest.mark.usefixtures("support_assistant")
def test_shape_target_comes_from_the_shape_else_the_setting(settings: Any) -> None:
    settings.HEADROOM_DEFAULT_TARGET_UTILIZATION = 0.6
    ReplicaShape.objects.filter(name="chat-70b/gpu80x4").update(target_utilization=0.8)

    problem = problem_export()

    check_against_spec(problem)
    assert problem["target_utilization"] == 0.6
    targets = {s["name"]: s["target_utilization"] for s in problem["shapes"]}
    assert targets == {"chat-70b/gpu80x2": 0.6, "chat-70b/gpu80x4": 0.8}
    # Every tier's scale follows the default: premium 1.5 × 0.6/0.65, standard 1.3 × 0.6/0.7.
    premium = demand(problem, "keystone-mutual/chat-70b/policy-question")
    assert premium["burst"] == pytest.approx(1.5 * 0.6 / 0.65)
    standard = demand(problem, "harborline-retail/chat-70b/policy-question")
    assert standard["burst"] == pytest.approx(1.3 * 0.6 / 0.7)


@pytest.mark.usefixtures("support_assistant")
def test_a_tier_hotter_than_the_default_plans_at_burst_1_and_says_so() -> None:
    Tier.objects.filter(name="batch").update(target_utilization=0.9, burst_factor=1.0)
    Tier.objects.filter(name="free").update(target_utilization=0.8, burst_factor=1.4)
    warnings: list[str] = []

    problem = problem_export(warn=warnings.append)

    check_against_spec(problem)
    batch = [d for d in problem["demands"] if d["tier"] == "batch"]
    assert {d["burst"] for d in batch} == {1}
    assert warnings == [
        "tier batch: target utilisation 0.9 is above the default 0.7 and burst 1 cannot "
        "absorb it; planned at burst 1 (the shapes' own target)"
    ]
    # A burst large enough absorbs the hotter target: 1.4 × 0.7 / 0.8 = 1.225.
    free = demand(problem, "brightpath-learning/chat-70b/policy-question")
    assert free["burst"] == pytest.approx(1.225)


@pytest.mark.usefixtures("support_assistant")
def test_only_the_current_profile_version_is_a_demand() -> None:
    v1 = WorkloadProfile.objects.get(
        tenant__name="brightpath-learning", workload_class__name="policy-question"
    )
    v2 = copy.copy(v1)
    v2.pk = None
    v2.version = 2
    v2.peak_requests_per_s = 1.25
    v2.save()

    problem = problem_export()

    rows = [d for d in problem["demands"] if d["id"].startswith("brightpath-learning/")]
    assert len(rows) == 3
    assert demand(problem, "brightpath-learning/chat-70b/policy-question")[
        "requests_per_s"
    ] == pytest.approx(1.25)


@pytest.mark.usefixtures("support_assistant")
def test_spill_limit_is_exported_only_when_spill_is_allowed() -> None:
    Tenant.objects.filter(name="harborline-retail").update(spill_allowed=False)

    problem = problem_export()

    rows = [d for d in problem["demands"] if d["tenant"] == "harborline-retail"]
    assert rows and all("max_spill_rtt_ms" not in d for d in rows)
    assert (
        demand(problem, "brightpath-learning/chat-70b/policy-question")["max_spill_rtt_ms"] == 150
    )


@pytest.mark.django_db
def test_fractional_means_are_kept_as_they_are() -> None:
    data = base_scenario()
    data["workload_profiles"][0]["prompt_tokens"]["mean"] = 1500.5
    scenario_load(data=data)

    problem = problem_export()

    check_against_spec(problem)
    assert problem["demands"][0]["prompt_tokens"] == 1500.5
    assert problem["demands"][0]["id"] == "acme/chat-70b/policy-question"


# -- summary and command ----------------------------------------------------------------------


def test_request_cost_follows_the_worked_example() -> None:
    shape = {"prefill_tokens_per_s": 4000, "decode_tokens_per_s": 160}
    costs = [
        request_cost_s({"prompt_tokens": p, "output_tokens": o}, shape)
        for p, o in ((1300, 80), (3200, 150), (9000, 400))
    ]
    assert costs == pytest.approx([0.825, 1.7375, 4.75])
    # A 35% prefix-cache hit removes prefill work only.
    cached = {"prompt_tokens": 1300, "output_tokens": 80, "prefix_cache_hit_rate": 0.35}
    assert request_cost_s(cached, shape) == pytest.approx(0.325 * 0.65 + 0.5)


@pytest.mark.usefixtures("support_assistant")
def test_summary_reads_like_the_scenario() -> None:
    problem = problem_export()

    summary = problem_summary(problem)

    assert "Regions: 2, zones: 6" in summary
    assert "GPUs: 288 × gpu80 (eu-west 96, us-east 192)" in summary
    assert "Shapes: 2" in summary
    assert "premium (promise zone, priority 0): 6 demands, 3.76 req/s at peak" in summary
    assert "batch (promise none, priority 3): 6 demands, 0.84 req/s at peak" in summary
    planned = sum(d["requests_per_s"] * d.get("burst", 1) for d in problem["demands"])
    assert f"Total planned: {planned:.2f} req/s (8.00 req/s at peak × burst)" in summary
    load = sum(
        d["requests_per_s"] * d["burst"] * request_cost_s(d, problem["shapes"][0])
        for d in problem["demands"]
    )
    assert f"chat-70b/gpu80x2: {load:.2f} replica-seconds/s" in summary
    # Tiers in priority order.
    assert summary.index("premium (") < summary.index("standard (") < summary.index("free (")


@pytest.mark.usefixtures("support_assistant")
def test_command_writes_the_problem_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("export_problem")
    out, err = capsys.readouterr()

    assert json.loads(out) == problem_export()
    assert err == ""


@pytest.mark.usefixtures("support_assistant")
def test_command_writes_a_file_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    CapacityFigure.objects.filter(shape__name="chat-70b/gpu80x4").delete()
    target = tmp_path / "problem.json"

    call_command("export_problem", "--output", str(target), "--summary")
    out, err = capsys.readouterr()

    assert out == ""
    assert json.loads(target.read_text(encoding="utf-8")) == problem_export()
    assert "warning: shape chat-70b/gpu80x4 left out: it has no capacity figure" in err
    assert "Placement problem (placement-problem/v1)" in err
    assert "Demands by tier: 21" in err
