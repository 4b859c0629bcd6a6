"""The greedy baseline: the seeds' sizing sheet per region, checked by the verifier."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from planner.capacity.sizing import replicas_needed
from planner.placement.generator import generate_problem
from planner.placement.greedy import greedy_plan
from planner.placement.verify import verify

DATA = Path(__file__).resolve().parent.parent / "data" / "placement"


def load(name: str) -> dict[str, Any]:
    with (DATA / f"{name}.json").open() as f:
        data: dict[str, Any] = json.load(f)
    return data


def per_zone(solution: dict[str, Any]) -> dict[str, int]:
    return {row["zone"]: row["replicas"] for row in solution["replicas"]}


def test_the_baselines_sizing_function_is_the_seeds() -> None:
    assert replicas_needed(800, 100) == 12
    assert replicas_needed(800, 100, burst=1.5) == 18
    assert replicas_needed(800, 100, burst=1.5, zones=3) == 27
    # 20 req/s at 1 req/s per replica; 14 / 0.7 is 20.000000000000004 in floating point.
    assert replicas_needed(20, 1) == 29
    assert replicas_needed(14, 1) == 20


@pytest.mark.parametrize(
    ("name", "zones"),
    [
        ("sizing-base", {"r1-a": 4, "r1-b": 4, "r1-c": 4}),
        ("sizing-burst", {"r1-a": 6, "r1-b": 6, "r1-c": 6}),
        ("sizing-zonal", {"r1-a": 9, "r1-b": 9, "r1-c": 9}),
    ],
)
def test_greedy_matches_the_seeds_on_one_region(name: str, zones: dict[str, int]) -> None:
    problem = load(name)
    solution = greedy_plan(problem)
    assert verify(problem, solution) == []
    assert per_zone(solution) == zones
    assert solution["cost_per_hour"] == pytest.approx(2.0 * sum(zones.values()))
    assert solution["status"] == "feasible" and solution["unserved_requests_per_s"] == 0


def test_greedy_pays_equal_zone_rounding_on_fragmented_regions() -> None:
    # N+1 per region gives 10 + 21 + 2 = 33; equal replicas per zone make it 12 + 21 + 3.
    problem = load("fragmentation")
    solution = greedy_plan(problem)
    assert verify(problem, solution) == []
    zones = per_zone(solution)
    assert [sum(n for z, n in zones.items() if z.startswith(r)) for r in ("eu", "us", "ap")] == [
        12,
        21,
        3,
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_greedy_plans_verify_and_serve_everything_with_ample_inventory(seed: int) -> None:
    problem = generate_problem(
        tenants=40, regions=6, zones_per_region=3, gpu_types=3, seed=seed, models=5
    )
    solution = greedy_plan(problem)
    assert verify(problem, solution) == []
    assert solution["unserved"] == [] and solution["unserved_requests_per_s"] == 0
    assert solution["cost_per_hour"] > 0


@pytest.mark.parametrize("seed", [1, 2])
def test_greedy_reports_unserved_when_inventory_is_short(seed: int) -> None:
    problem = generate_problem(
        tenants=40, regions=4, zones_per_region=3, gpu_types=2, seed=seed, scarcity=0.4
    )
    solution = greedy_plan(problem)
    assert verify(problem, solution) == []
    assert solution["unserved_requests_per_s"] > 0
    assert any("inventory" in sentence for sentence in solution["binding"])


def test_greedy_never_spills() -> None:
    problem = generate_problem(
        tenants=60, regions=6, zones_per_region=3, gpu_types=3, seed=9, spill_share=1.0
    )
    # Move a few homes out of their allowed regions: those go to the first allowed region.
    regions = [r["name"] for r in problem["regions"]]
    for demand in problem["demands"][:5]:
        demand["allowed_regions"] = [r for r in regions if r != demand["home_region"]][:2]
    solution = greedy_plan(problem)
    assert verify(problem, solution) == []
    demands = {d["id"]: d for d in problem["demands"]}
    for row in solution["routing"]:
        demand = demands[row["demand"]]
        allowed = demand.get("allowed_regions", regions)
        expected = demand["home_region"] if demand["home_region"] in allowed else allowed[0]
        assert row["region"] == expected


def test_demand_with_no_reachable_region_is_unserved() -> None:
    problem = load("fragmentation")
    problem["demands"][0]["allowed_regions"] = ["us"]  # home eu not allowed, no rtt link
    solution = greedy_plan(problem)
    assert verify(problem, solution) == []
    assert solution["unserved"] == [{"demand": "eu-users", "requests_per_s": 6.0}]


def test_shortage_serves_priorities_in_order_with_equal_fractions_inside() -> None:
    problem = load("sizing-base")
    problem["inventory"] = [
        {"zone": z, "accelerator": "gpu80", "gpus": 3} for z in ("r1-a", "r1-b", "r1-c")
    ]
    base = problem["demands"][0]
    problem["demands"] = [
        dict(base, id="gold", priority=0, requests_per_s=4.0),
        dict(base, id="silver-1", priority=1, requests_per_s=4.0),
        dict(base, id="silver-2", priority=1, requests_per_s=2.0),
    ]
    solution = greedy_plan(problem)
    assert verify(problem, solution) == []
    # 9 replicas carry 6.3 requests/s: gold gets 4, the silvers share 2.3 at equal fractions.
    served = {row["demand"]: row["requests_per_s"] for row in solution["routing"]}
    assert served["gold"] == pytest.approx(4.0)
    assert served["silver-1"] / 4.0 == pytest.approx(served["silver-2"] / 2.0)
    assert served["silver-1"] + served["silver-2"] == pytest.approx(2.3)


def test_one_zone_region_cannot_keep_a_zone_promise_but_serves_the_rest() -> None:
    problem = load("sizing-base")
    problem["regions"][0]["zones"] = ["r1-a"]
    problem["inventory"] = problem["inventory"][:1]
    base = problem["demands"][0]
    problem["demands"] = [
        dict(base, id="zonal", promise="zone"),
        dict(base, id="plain", promise="none"),
    ]
    solution = greedy_plan(problem)
    assert verify(problem, solution) == []
    assert solution["unserved"] == [{"demand": "zonal", "requests_per_s": 8.0}]
    assert solution["routing"] == [
        {"demand": "plain", "region": "r1", "shape": "m/gpu80x1", "requests_per_s": 8.0}
    ]


def test_cheapest_shape_that_fits_is_chosen() -> None:
    problem = load("sizing-base")
    cheap = dict(problem["shapes"][0], name="m/gpu80x2", gpus=2, decode_tokens_per_s=400)
    problem["shapes"].append(cheap)
    solution = greedy_plan(problem)
    # Two GPUs at 400 tokens/s: ceil(8 × 0.25 / 0.7) = 3 replicas, 6 GPUs, not 12 single GPUs.
    assert per_zone(solution) == {"r1-a": 1, "r1-b": 1, "r1-c": 1}
    assert {row["shape"] for row in solution["replicas"]} == {"m/gpu80x2"}
    assert solution["cost_per_hour"] == pytest.approx(12.0)
    # Moved to a GPU class that only one zone has, it cannot be spread equally: the other
    # shape is used.
    scarce = copy.deepcopy(problem)
    scarce["accelerators"].append({"name": "gpu80b", "memory_gb": 80, "price_per_gpu_hour": 1.0})
    scarce["shapes"][1]["accelerator"] = "gpu80b"
    scarce["inventory"].append({"zone": "r1-a", "accelerator": "gpu80b", "gpus": 100})
    solution = greedy_plan(scarce)
    assert verify(scarce, solution) == []
    assert {row["shape"] for row in solution["replicas"]} == {"m/gpu80x1"}


def test_invalid_problem_gets_status_invalid() -> None:
    problem = load("sizing-base")
    problem["demands"][0]["burst"] = 0.5
    solution = greedy_plan(problem)
    assert solution["status"] == "invalid"
    assert "demands[0].burst" in solution["message"]
    assert verify(problem, solution) == []
