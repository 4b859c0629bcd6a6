"""The per-region allocation document: allocations, routing, totals, and the autoscaler's
floor, ceiling and in-flight target, checked against the seeds' sizing arithmetic."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from controlplane.emission.payload import (
    FORMAT,
    AllocationRow,
    PlanSnapshot,
    RoutingRow,
    ShapeServing,
    region_documents,
)
from planner.placement.problem import parse_problem
from planner.placement.verify import verify
from tests.controlplane.emission_support import ALLOCATIONS, GPU_HOUR, PROBLEM, ROUTING, solution

CREATED = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ACTIVATED = datetime(2026, 3, 2, 9, 5, tzinfo=UTC)


def snapshot(problem: dict | None = None, routing: list | None = None) -> PlanSnapshot:  # type: ignore[type-arg]
    return PlanSnapshot(
        plan_id=41,
        version=7,
        inputs_hash="ab" * 32,
        created_at=CREATED,
        activated_at=ACTIVATED,
        problem=parse_problem(PROBLEM if problem is None else problem),
        allocations=tuple(
            AllocationRow(r, z, s, "gpu80", g, n, GPU_HOUR * g * n) for r, z, s, g, n in ALLOCATIONS
        ),
        routing=tuple(RoutingRow(*row) for row in (ROUTING if routing is None else routing)),
    )


def shapes_of(document: dict) -> dict:  # type: ignore[type-arg]
    return {entry["shape"]: entry for entry in document["shapes"]}


def test_the_fixture_plan_is_a_valid_placement() -> None:
    # The floors below are only meaningful for a plan that keeps the contract.
    assert verify(PROBLEM, solution()) == []


def test_every_problem_region_gets_a_document_even_an_empty_one() -> None:
    documents = region_documents(snapshot())
    assert sorted(documents) == ["ap", "eu", "us"]
    ap = documents["ap"]
    assert ap["allocations"] == [] and ap["shapes"] == [] and ap["routing"] == []
    assert ap["total_replicas"] == 0 and ap["total_cost_per_hour"] == 0


def test_document_header_and_allocations_per_zone_and_shape() -> None:
    eu = region_documents(snapshot())["eu"]
    assert eu["format"] == FORMAT
    assert eu["region"] == "eu"
    assert eu["plan"] == {
        "id": 41,
        "version": 7,
        "inputs_hash": "ab" * 32,
        "created_at": "2026-03-02T09:00:00Z",
        "activated_at": "2026-03-02T09:05:00Z",
    }
    assert [(a["zone"], a["shape"], a["replicas"], a["gpus"]) for a in eu["allocations"]] == [
        ("eu-a", "m/gpu80x1", 9, 9),
        ("eu-a", "m/gpu80x2", 3, 6),
        ("eu-b", "m/gpu80x1", 9, 9),
        ("eu-c", "m/gpu80x1", 9, 9),
    ]
    assert eu["total_replicas"] == 30
    assert eu["total_gpus"] == 33
    # 33 GPUs at $2/GPU-hour.
    assert eu["total_cost_per_hour"] == pytest.approx(66.0)
    assert eu["sizing_note"] == ""


def test_routing_is_grouped_per_tenant_in_the_region() -> None:
    documents = region_documents(snapshot())
    assert documents["eu"]["routing"] == [
        {
            "tenant": "acme",
            "requests_per_s": 14.0,
            "demands": [
                {"demand": "acme/batch", "shape": "m/gpu80x2", "requests_per_s": 2.0},
                {"demand": "acme/chat", "shape": "m/gpu80x1", "requests_per_s": 12.0},
            ],
        }
    ]
    assert [t["tenant"] for t in documents["us"]["routing"]] == ["globex"]


def test_seeds_sizing_exercise_floor_12_under_a_plan_of_18() -> None:
    # 8 req/s × 1 replica-second at 70%: ceil(8 / 0.7) = 12 stand; the 1.5 burst plans 18.
    us = shapes_of(region_documents(snapshot())["us"])["m/gpu80x1"]
    assert us["replicas"] == 18
    assert us["standing_floor"] == 12
    assert us["zones"] == {"us-a": 9, "us-b": 9}
    # The seeds' target: 70% of 5 in flight per replica (1 req/s × 5 s at saturation).
    assert us["inflight_target_per_replica"] == pytest.approx(3.5)
    # 40 GPUs in the region, 18 used: 22 more one-GPU replicas fit.
    assert us["max_replicas"] == 40


def test_zone_promise_floor_survives_a_zone_loss_without_the_burst() -> None:
    # Un-bursted 8 replica-s/s over 3 zones: ceil(8 / (0.7 × 2/3)) = 18, 6 per zone.
    eu = shapes_of(region_documents(snapshot())["eu"])
    chat = eu["m/gpu80x1"]
    assert (chat["replicas"], chat["standing_floor"]) == (27, 18)
    # 120 GPUs, 27 + 3 × 2 = 33 used: 87 free one-GPU replicas on top of 27.
    assert chat["max_replicas"] == 27 + 87
    batch = eu["m/gpu80x2"]
    # 2 req/s × 1 replica-s at 70%: 3 replicas, which is the plan; 87 free GPUs hold 43 more.
    assert (batch["replicas"], batch["standing_floor"], batch["max_replicas"]) == (3, 3, 46)
    # The batch demand gives no residence time: no in-flight target can be derived.
    assert batch["inflight_target_per_replica"] is None


def test_n_plus_1_promise_adds_one_spare_to_the_floor() -> None:
    problem = copy.deepcopy(PROBLEM)
    problem["demands"][2]["promise"] = "n+1"
    us = shapes_of(region_documents(snapshot(problem))["us"])["m/gpu80x1"]
    assert us["standing_floor"] == 13


def test_concurrency_cap_can_set_the_floor() -> None:
    # 8 req/s × 60 s in the system = 480 in flight; 32 per replica needs 15 > 12.
    problem = copy.deepcopy(PROBLEM)
    problem["demands"][2]["residence_s"] = 60.0
    us = shapes_of(region_documents(snapshot(problem))["us"])["m/gpu80x1"]
    assert us["standing_floor"] == 15


def test_floor_never_exceeds_the_plan_and_is_at_least_one() -> None:
    # A shape with replicas but no routed load still keeps one standing replica.
    routing = [row for row in ROUTING if row[0] != "globex/search"]
    us = shapes_of(region_documents(snapshot(routing=routing))["us"])["m/gpu80x1"]
    assert us["standing_floor"] == 1
    assert us["inflight_target_per_replica"] is None


def test_unreadable_problem_fixes_the_bounds_at_the_plan_and_says_so() -> None:
    unread = replace(snapshot(), problem=None, problem_error="regions: must be a list")
    documents = region_documents(unread)
    assert sorted(documents) == ["eu", "us"]  # regions come from the rows alone
    chat = shapes_of(documents["eu"])["m/gpu80x1"]
    assert chat["standing_floor"] == chat["max_replicas"] == chat["replicas"] == 27
    assert "could not be read" in documents["eu"]["sizing_note"]


def test_routing_to_an_unknown_demand_keeps_the_plan_as_floor() -> None:
    routing = [*ROUTING, ("ghost/x", "ghost", "us", "m/gpu80x1", 1.0)]
    us = shapes_of(region_documents(snapshot(routing=routing))["us"])["m/gpu80x1"]
    assert us["standing_floor"] == us["replicas"] == 18


def test_fractional_token_means_from_telemetry_keep_the_autoscaler_bounds() -> None:
    # Telemetry-derived means are never whole; the document must still size the autoscaler
    # (the plan's problem is read as the solver read it) rather than fall back to the plan.
    problem = copy.deepcopy(PROBLEM)
    problem["demands"][2]["output_tokens"] = 100.0000001
    problem["demands"][2]["prompt_tokens"] = 0.29
    us = region_documents(snapshot(problem))["us"]
    assert us["sizing_note"] == ""
    search = shapes_of(us)["m/gpu80x1"]
    assert search["model"] == "m"
    assert (search["standing_floor"], search["max_replicas"]) == (12, 40)


def test_zone_floors_spread_the_standing_floor_so_a_zone_loss_leaves_enough() -> None:
    eu = shapes_of(region_documents(snapshot())["eu"])
    chat = eu["m/gpu80x1"]["zone_bounds"]
    # 18 standing over 3 zones: 6 each, so any two hold the 12 = ceil(8 / 0.7) needed.
    assert {z: b["floor"] for z, b in chat.items()} == {"eu-a": 6, "eu-b": 6, "eu-c": 6}
    # Ceilings per zone: eu-a's 40 GPUs also hold the batch shape's 6.
    assert {z: b["max_replicas"] for z, b in chat.items()} == {"eu-a": 34, "eu-b": 40, "eu-c": 40}
    assert eu["m/gpu80x2"]["zone_bounds"] == {
        "eu-a": {"replicas": 3, "floor": 3, "max_replicas": 15}
    }
    us = shapes_of(region_documents(snapshot())["us"])["m/gpu80x1"]["zone_bounds"]
    assert {z: b["floor"] for z, b in us.items()} == {"us-a": 6, "us-b": 6}


def test_every_zone_keeps_one_replica_even_when_the_region_floor_is_one() -> None:
    routing = [row for row in ROUTING if row[0] != "globex/search"]
    us = shapes_of(region_documents(snapshot(routing=routing))["us"])["m/gpu80x1"]
    assert us["standing_floor"] == 1
    assert {z: b["floor"] for z, b in us["zone_bounds"].items()} == {"us-a": 1, "us-b": 1}


def test_serving_and_tenants_of_each_shape() -> None:
    serving = ShapeServing(
        image="registry.example/vllm:1",
        model_path="org/m",
        served_model_name="m",
        tensor_parallel_size=1,
        max_model_len=4096,
        extra_args=("--enable-prefix-caching",),
        gpu_product="NVIDIA-A100-SXM4-80GB",
    )
    documents = region_documents(replace(snapshot(), serving={"m/gpu80x1": serving}))
    eu = shapes_of(documents["eu"])
    assert eu["m/gpu80x1"]["serving"] == serving.as_dict()
    assert eu["m/gpu80x1"]["tenants"] == ["acme"]
    # A shape whose record is gone is served under the model's name, on its plan's GPUs.
    assert eu["m/gpu80x2"]["serving"] == {
        "image": "",
        "model_path": "m",
        "served_model_name": "m",
        "tensor_parallel_size": 2,
        "max_model_len": None,
        "extra_args": [],
        "gpu_product": "gpu80",
    }


def test_quotas_of_every_tenant_served_bound_the_ceiling_never_below_the_plan() -> None:
    # globex may keep 14 replica-seconds per second busy: 20 replicas at 70%, under the 40
    # the inventory allows. Each zone may take it all while the other is down: 20 per zone.
    capped = replace(snapshot(), quota_replica_s_per_s={"globex": 14.0})
    us = shapes_of(region_documents(capped)["us"])["m/gpu80x1"]
    assert us["max_replicas"] == 20
    assert {z: b["max_replicas"] for z, b in us["zone_bounds"].items()} == {"us-a": 20, "us-b": 20}
    # A quota below the plan never takes replicas away from it.
    tight = replace(snapshot(), quota_replica_s_per_s={"globex": 1.0})
    us = shapes_of(region_documents(tight)["us"])["m/gpu80x1"]
    assert us["max_replicas"] == 18
    assert {z: b["max_replicas"] for z, b in us["zone_bounds"].items()} == {"us-a": 9, "us-b": 9}
    # A served tenant without a quota: only inventory bounds it.
    eu = shapes_of(region_documents(capped)["eu"])["m/gpu80x1"]
    assert eu["max_replicas"] == 27 + 87
