"""solve: the spec's examples, shortage by priority and fairness, stability, exactness.

Every solution a test gets is checked by the independent verifier first (``solved``).
"""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.placement.solver as solver_module
from planner.errors import PlannerInputError
from planner.placement import parse_problem, solve
from planner.placement.decompose import home_plan, relaxation, relaxed_plan
from planner.placement.explain import explain
from planner.placement.generator import generate_problem
from planner.placement.model import Instance, PlacementModel, plan_violations, sites
from planner.placement.reference import reference_plan
from planner.placement.solver import _restrict, start_plan
from planner.placement.verify import verify

DATA = Path(__file__).resolve().parent.parent / "data" / "placement"


def load(name: str) -> dict[str, Any]:
    with (DATA / f"{name}.json").open() as f:
        data: dict[str, Any] = json.load(f)
    return data


def solved(problem: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Solve and insist the plan satisfies every hard constraint."""
    solution = solve(problem, **kwargs)
    assert solution["status"] in ("optimal", "feasible")
    assert verify(problem, solution) == []
    return solution


def total_replicas(solution: dict[str, Any]) -> int:
    return sum(row["replicas"] for row in solution["replicas"])


def served(solution: dict[str, Any], demand: str) -> float:
    return sum(r["requests_per_s"] for r in solution["routing"] if r["demand"] == demand)


def zones_of(solution: dict[str, Any]) -> dict[str, int]:
    return {row["zone"]: row["replicas"] for row in solution["replicas"]}


def one_region(
    *, gpus_per_zone: tuple[int, ...] = (1000, 1000, 1000), price: float = 2.0
) -> dict[str, Any]:
    """The seeds' sizing fleet: one region, one 1-GPU shape with 1 s of decode per request."""
    zones = [f"r1-{chr(ord('a') + i)}" for i in range(len(gpus_per_zone))]
    return {
        "format": "placement-problem/v1",
        "regions": [{"name": "r1", "geo": "eu", "zones": zones}],
        "accelerators": [{"name": "gpu80", "price_per_gpu_hour": price}],
        "inventory": [
            {"zone": z, "accelerator": "gpu80", "gpus": g}
            for z, g in zip(zones, gpus_per_zone, strict=True)
            if g > 0
        ],
        "shapes": [
            {
                "name": "m/gpu80x1",
                "model": "m",
                "accelerator": "gpu80",
                "gpus": 1,
                "prefill_tokens_per_s": 4000,
                "decode_tokens_per_s": 100,
            }
        ],
        "demands": [],
    }


def demand(name: str, rate: float, **extra: Any) -> dict[str, Any]:
    """A demand on model m homed in r1 whose request costs one replica-second."""
    row = {
        "id": name,
        "tenant": extra.pop("tenant", name),
        "model": "m",
        "home_region": "r1",
        "requests_per_s": rate,
        "prompt_tokens": 0,
        "output_tokens": 100,
    }
    row.update(extra)
    return row


# ---------------------------------------------------------------------------------------
# The shared examples and the seeds' sizing arithmetic.


@pytest.mark.parametrize("name", ["sizing-base", "sizing-burst", "sizing-zonal", "fragmentation"])
def test_shared_examples_reach_their_known_replica_counts(name: str) -> None:
    problem = load(name)
    solution = solved(problem)
    assert solution["status"] == "optimal"
    assert solution["gap"] == 0.0
    assert total_replicas(solution) == problem["expect_total_replicas"]
    assert solution["unserved"] == []
    assert solution["unserved_requests_per_s"] == 0.0


@pytest.mark.parametrize("backend", ["scip", "cpsat"])
@pytest.mark.parametrize("name", ["sizing-zonal", "fragmentation"])
def test_other_backends_agree_on_the_examples(name: str, backend: Any) -> None:
    problem = load(name)
    solution = solved(problem, backend=backend)
    assert total_replicas(solution) == problem["expect_total_replicas"]


def test_zonal_example_spreads_nine_per_zone() -> None:
    # N − max zone ≥ 12 / 0.7 = 17.1 needs 18 survivors: (9, 9, 9) is the only 27.
    assert zones_of(solved(load("sizing-zonal"))) == {"r1-a": 9, "r1-b": 9, "r1-c": 9}


def test_fragmentation_pays_a_floor_per_region() -> None:
    solution = solved(load("fragmentation"))
    per_region: dict[str, int] = {}
    for row in solution["replicas"]:
        region = row["zone"].split("-")[0]
        per_region[region] = per_region.get(region, 0) + row["replicas"]
    # ceil(6/0.7)+1, 14/0.7 = 20 exactly (float noise is not a 21st) + 1, ceil(0.6/0.7)+1.
    assert per_region == {"eu": 10, "us": 21, "ap": 2}
    assert solution["cost_per_hour"] == pytest.approx(66.0)


def test_routing_is_in_planned_units() -> None:
    solution = solved(load("sizing-burst"))
    assert solution["routing"] == [
        {"demand": "assistant", "region": "r1", "shape": "m/gpu80x1", "requests_per_s": 12.0}
    ]


def test_the_tolerance_never_saves_a_replica() -> None:
    problem = one_region()
    # 8.4 req/s is exactly 12 replicas at 0.7; a hair more needs a 13th.
    problem["demands"] = [demand("exact", 8.4)]
    assert total_replicas(solved(problem)) == 12
    problem["demands"] = [demand("hair", 8.4 * (1 + 2e-7))]
    assert total_replicas(solved(problem)) == 13


def test_concurrency_can_set_the_replica_count() -> None:
    problem = one_region()
    problem["shapes"][0]["max_concurrency"] = 4
    # Little's law: 8 req/s × 5 s = 40 in flight needs 10 replicas of 4; capacity needs 12.
    problem["demands"] = [demand("chat", 8.0, residence_s=5.0)]
    assert total_replicas(solved(problem)) == 12
    problem["demands"] = [demand("chat", 8.0, residence_s=8.0)]  # 64 in flight → 16
    solution = solved(problem)
    assert total_replicas(solution) == 16
    assert any(s.startswith("concurrency for m/gpu80x1 in r1") for s in solution["binding"])


# ---------------------------------------------------------------------------------------
# Invalid input never raises from solve.


def test_invalid_problem_gets_status_invalid_with_the_field() -> None:
    problem = load("sizing-base")
    problem["demands"][0]["allowed_regions"] = []
    solution = solve(problem)
    assert solution["status"] == "invalid"
    assert solution["field"] == "demands[0].allowed_regions"
    assert "demands[0].allowed_regions" in solution["message"]
    assert "replicas" not in solution
    assert verify(problem, solution) == []


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"time_limit_s": 0}, "time_limit_s"),
        ({"time_limit_s": float("nan")}, "time_limit_s"),
        ({"workers": 0}, "workers"),
    ],
)
def test_solver_arguments_out_of_range_are_refused(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(PlannerInputError) as info:
        solve(load("sizing-base"), **kwargs)
    assert info.value.argument == argument


def test_not_even_an_object_gets_status_invalid() -> None:
    solution = solve([])  # type: ignore[arg-type]
    assert solution["status"] == "invalid"
    assert solution["field"] == "problem"


# ---------------------------------------------------------------------------------------
# Determinism, time limits, stability.


def test_same_problem_gives_the_same_plan_whatever_the_input_order() -> None:
    problem = generate_problem(tenants=12, regions=3, zones_per_region=3, gpu_types=2, seed=5)
    first = solved(problem)
    shuffled = copy.deepcopy(problem)
    rng = random.Random(1)
    for key in ("regions", "inventory", "shapes", "demands", "rtt_ms", "accelerators"):
        rng.shuffle(shuffled[key])
    second = solved(shuffled)
    again = solved(problem)
    for other in (second, again):
        for key in ("status", "cost_per_hour", "replicas", "routing", "unserved", "binding"):
            assert other[key] == first[key], key


def test_a_tiny_time_limit_still_returns_a_verified_plan_and_a_gap() -> None:
    problem = generate_problem(tenants=200, regions=12, zones_per_region=3, gpu_types=4, seed=3)
    solution = solved(problem, time_limit_s=0.05)
    assert solution["status"] == "feasible"
    assert isinstance(solution["gap"], float) and 0 < solution["gap"] <= 1
    assert solution["replicas"]
    assert solution["unserved"] == []  # the fleet is ample: the start serves everyone


def test_previous_plan_is_kept_among_equal_cost_plans() -> None:
    problem = load("sizing-burst")  # 18 replicas, promise none: any zone split costs the same
    fresh = solved(problem)
    assert zones_of(fresh) == {"r1-a": 6, "r1-b": 6, "r1-c": 6}  # even by default
    problem["previous"] = [
        {"zone": "r1-b", "shape": "m/gpu80x1", "replicas": 11},
        {"zone": "r1-c", "shape": "m/gpu80x1", "replicas": 7},
    ]
    assert zones_of(solved(problem)) == {"r1-b": 11, "r1-c": 7}


def test_previous_plan_gives_way_to_cost_then_changes_least() -> None:
    problem = load("sizing-burst")
    problem["previous"] = [{"zone": "r1-a", "shape": "m/gpu80x1", "replicas": 25}]
    # Cost first: 18, not 25; then the fewest changes: drop 7 from r1-a, move nothing.
    assert zones_of(solved(problem)) == {"r1-a": 18}


def test_previous_plan_decides_between_equal_cost_shapes() -> None:
    problem = load("sizing-base")
    twin = dict(problem["shapes"][0], name="m/gpu80x1-b")
    problem["shapes"].append(twin)
    problem["previous"] = [{"zone": "r1-c", "shape": "m/gpu80x1-b", "replicas": 12}]
    solution = solved(problem)
    assert {(r["zone"], r["shape"]) for r in solution["replicas"]} == {("r1-c", "m/gpu80x1-b")}
    assert total_replicas(solution) == 12


def test_spill_when_it_saves_a_region_its_floor() -> None:
    problem = load("fragmentation")
    # ap users may spill to eu (40 ms); eu then needs ceil(6.6/0.7)+1 = 11 replicas, and ap's
    # two are saved: 10 + 21 + 2 = 33 becomes 11 + 21 = 32.
    problem["rtt_ms"] = [{"from": "ap", "to": "eu", "ms": 40}]
    problem["demands"][2]["allowed_regions"] = ["ap", "eu"]
    problem["demands"][2]["max_spill_rtt_ms"] = 50
    solution = solved(problem)
    assert total_replicas(solution) == 32
    assert served(solution, "ap-users") == pytest.approx(0.6)
    assert {r["region"] for r in solution["routing"] if r["demand"] == "ap-users"} == {"eu"}


def test_spill_is_the_last_tie_break() -> None:
    problem = one_region()
    problem["regions"].append({"name": "r2", "geo": "eu", "zones": ["r2-a", "r2-b"]})
    problem["inventory"] += [
        {"zone": z, "accelerator": "gpu80", "gpus": 100} for z in ("r2-a", "r2-b")
    ]
    problem["rtt_ms"] = [{"from": "r1", "to": "r2", "ms": 10}]
    problem["demands"] = [
        demand("one", 6.0, promise="n+1", allowed_regions=["r1"]),
        dict(demand("two", 6.0, promise="n+1", allowed_regions=["r2"]), home_region="r2"),
        # 10 replicas in each region leave room for 0.3 req/s more: the small demand costs
        # nothing in either, so the least spill keeps it home.
        dict(demand("small", 0.2, max_spill_rtt_ms=20), home_region="r2"),
    ]
    solution = solved(problem)
    assert total_replicas(solution) == 20
    assert [r["region"] for r in solution["routing"] if r["demand"] == "small"] == ["r2"]


# ---------------------------------------------------------------------------------------
# Shortage: priority first, max-min fair within a priority, residency always.


def test_shortage_serves_priority_zero_first_then_shares_fairly() -> None:
    problem = one_region(gpus_per_zone=(10, 0, 0))  # 10 replicas carry 7 requests/s
    problem["demands"] = [
        demand("a", 3.0, priority=0),
        demand("b", 10.0, priority=1),
        demand("c", 5.0, priority=1),
    ]
    solution = solved(problem)
    assert served(solution, "a") == pytest.approx(3.0)
    # The 4 requests/s left are shared in equal fractions: 4 / 15 of b and of c.
    assert served(solution, "b") / 10 == pytest.approx(4 / 15, rel=1e-6)
    assert served(solution, "c") / 5 == pytest.approx(4 / 15, rel=1e-6)
    assert solution["unserved_requests_per_s"] == pytest.approx(11.0)
    rows = {row["demand"]: row for row in solution["unserved"]}
    assert set(rows) == {"b", "c"}
    assert rows["b"]["tenant"] == "b" and rows["b"]["priority"] == 1
    sentences = " | ".join(solution["binding"])
    assert "demand b (tenant b, priority 1)" in sentences
    assert "needs about 15 gpu80 GPUs" in sentences and "10 are there" in sentences
    assert "inventory r1-a gpu80: 10 of 10 GPUs in use" in solution["binding"]


def test_priority_zero_is_never_short_while_priority_one_is_served() -> None:
    problem = one_region(gpus_per_zone=(6, 0, 0))  # 4.2 requests/s in all
    problem["demands"] = [demand("gold", 5.0, priority=0), demand("bronze", 5.0, priority=1)]
    solution = solved(problem)
    assert served(solution, "gold") == pytest.approx(4.2)
    assert served(solution, "bronze") == 0.0


def test_fairness_raises_whoever_can_still_rise() -> None:
    problem = one_region(gpus_per_zone=(3, 0, 0))
    problem["regions"].append({"name": "r2", "geo": "eu", "zones": ["r2-a"]})
    problem["inventory"].append({"zone": "r2-a", "accelerator": "gpu80", "gpus": 10})
    problem["rtt_ms"] = [{"from": "r1", "to": "r2", "ms": 10}]
    problem["demands"] = [
        demand("stuck", 10.0, allowed_regions=["r1"]),  # residency: 3 replicas, 2.1 req/s
        demand("mobile", 10.0, max_spill_rtt_ms=20),  # r1 or r2
    ]
    solution = solved(problem)
    # Max-min: stuck gets all of r1 (0.21 of its rate); mobile is not held to 0.21 but
    # takes all of r2 (7 req/s).
    assert served(solution, "stuck") == pytest.approx(2.1)
    assert served(solution, "mobile") == pytest.approx(7.0)
    assert {r["region"] for r in solution["routing"] if r["demand"] == "stuck"} == {"r1"}


def test_fairness_evens_out_demands_that_compete_for_the_same_gpus() -> None:
    problem = one_region(gpus_per_zone=(10, 0, 0))
    problem["regions"].append({"name": "r2", "geo": "eu", "zones": ["r2-a"]})
    problem["inventory"].append({"zone": "r2-a", "accelerator": "gpu80", "gpus": 3})
    problem["rtt_ms"] = [{"from": "r1", "to": "r2", "ms": 10}]
    problem["demands"] = [
        demand("resident", 10.0, allowed_regions=["r1"]),
        demand("mobile", 10.0, max_spill_rtt_ms=20),
    ]
    solution = solved(problem)
    # 13 replicas carry 9.1 requests/s; equal fractions 0.455 for both.
    assert served(solution, "resident") == pytest.approx(4.55, rel=1e-6)
    assert served(solution, "mobile") == pytest.approx(4.55, rel=1e-6)


def test_residency_holds_under_shortage() -> None:
    problem = one_region(gpus_per_zone=(2, 0, 0))
    problem["regions"].append({"name": "us", "geo": "us", "zones": ["us-a"]})
    problem["inventory"].append({"zone": "us-a", "accelerator": "gpu80", "gpus": 100})
    problem["rtt_ms"] = [{"from": "r1", "to": "us", "ms": 90}]
    problem["demands"] = [demand("eu-only", 8.0, allowed_regions=["r1"], max_spill_rtt_ms=500)]
    solution = solved(problem)
    assert {r["region"] for r in solution["routing"]} == {"r1"}
    assert served(solution, "eu-only") == pytest.approx(1.4)


def test_a_zone_promise_in_a_one_zone_region_is_unserved_and_says_why() -> None:
    problem = one_region(gpus_per_zone=(100,))
    problem["demands"] = [demand("zonal", 2.0, promise="zone")]
    solution = solved(problem)
    assert solution["unserved_requests_per_s"] == pytest.approx(2.0)
    assert solution["replicas"] == []
    assert "needs m in two zones of a region" in solution["binding"][0]


def test_a_demand_with_no_region_is_unserved_and_says_why() -> None:
    problem = one_region()
    problem["regions"].append({"name": "r2", "zones": ["r2-a"]})
    problem["demands"] = [demand("lost", 1.0, allowed_regions=["r2"])]
    solution = solved(problem)
    assert solution["unserved"] == [
        {"demand": "lost", "tenant": "lost", "priority": 0, "requests_per_s": 1.0}
    ]
    assert "not among its allowed regions (r2) and it may not spill" in solution["binding"][0]


def test_shapes_competing_for_a_zone_are_solved_together() -> None:
    # Model a's zone promise needs one 2-GPU replica per zone; b's 1-GPU replicas must fit
    # into what is left of the same 3-GPU zones, which the parts alone cannot see.
    problem = one_region(gpus_per_zone=(3, 3, 0))
    problem["shapes"].append(
        dict(problem["shapes"][0], name="a/gpu80x2", model="a", gpus=2, decode_tokens_per_s=100)
    )
    problem["demands"] = [
        dict(demand("zonal", 0.5, promise="zone"), model="a"),
        demand("plain", 2.0),  # 3 replicas of m
    ]
    solution = solved(problem)
    assert solution["status"] == "optimal"
    # Both need 7 of the 6 GPUs. Dropping the 0.5 req/s zonal demand leaves less unserved
    # than cutting the plain one to two replicas (0.6 req/s short).
    assert solution["unserved_requests_per_s"] == pytest.approx(0.5)
    assert [r["demand"] for r in solution["unserved"]] == ["zonal"]


# ---------------------------------------------------------------------------------------
# Explanation: binding rows and the price of promises.


def test_price_of_promises_for_the_zonal_example() -> None:
    problem = load("sizing-zonal")
    solution = solved(problem)
    explanation = explain(problem, solution, time_limit_s=10)
    prices = {p.promise: (p.replicas, p.cost_per_hour) for p in explanation.promise_prices}
    # Zone loss 27; N+1: ceil(12/0.7) + 1 = 19 (not 18); burst alone 18.
    assert prices == {"as planned": (27, 54.0), "n+1": (19, 38.0), "none": (18, 36.0)}
    text = "\n".join(explanation.lines())
    assert "promises relaxed to n+1: 19 replicas" in text
    assert "zone loss r1-a, r1-b, r1-c for m/gpu80x1 in r1" in text


def test_binding_names_what_sets_each_count() -> None:
    zonal = solved(load("sizing-zonal"))
    assert zonal["binding"] == [
        "zone loss r1-a, r1-b, r1-c for m/gpu80x1 in r1: losing r1-a leaves 18 replicas for "
        "17.1 replicas of zone-promised load at 70%"
    ]
    fragmentation = solved(load("fragmentation"))
    assert any(
        s.startswith("N+1 for m/gpu80x1 in us: 21 replicas") for s in fragmentation["binding"]
    )
    base = solved(load("sizing-base"))
    assert base["binding"] == [
        "capacity for m/gpu80x1 in r1: 12 replicas carry 11.4 replicas of load at 70%"
    ]


def test_explanation_groups_unserved_by_tenant() -> None:
    problem = one_region(gpus_per_zone=(4, 0, 0))
    problem["demands"] = [
        demand("acme/chat", 2.0, tenant="acme"),
        demand("acme/batch", 2.0, tenant="acme"),
    ]
    solution = solved(problem)
    explanation = explain(problem, solution, promise_prices=False)
    assert explanation.unserved_by_tenant == {"acme": pytest.approx(4.0 - 2.8)}
    assert explanation.to_dict()["unserved_by_tenant"]["acme"] == pytest.approx(1.2)


# ---------------------------------------------------------------------------------------
# Generated fleets.


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_fleet_is_solved_to_optimality(seed: int) -> None:
    problem = generate_problem(tenants=20, regions=4, zones_per_region=3, gpu_types=2, seed=seed)
    solution = solved(problem, time_limit_s=60)
    assert solution["status"] == "optimal"
    assert solution["unserved"] == []
    assert parse_problem(problem).demands  # the generator's problems parse


def test_scarce_generated_fleet_settles_priority_zero_first() -> None:
    problem = generate_problem(
        tenants=15, regions=3, zones_per_region=3, gpu_types=2, seed=4, scarcity=0.5
    )
    solution = solved(problem, time_limit_s=60)
    assert solution["status"] == "optimal"
    assert solution["unserved"]  # the fleet cannot serve everyone
    # Less important demands cannot take anything from priority 0: it is short by exactly
    # as much as it would be alone on the same fleet.
    alone = copy.deepcopy(problem)
    alone["demands"] = [d for d in problem["demands"] if d.get("priority", 0) == 0]
    by_itself = solved(alone, time_limit_s=60)
    priority = {d["id"]: d.get("priority", 0) for d in problem["demands"]}
    short_zero = sum(
        r["requests_per_s"] for r in solution["unserved"] if priority[r["demand"]] == 0
    )
    assert short_zero == pytest.approx(by_itself["unserved_requests_per_s"], abs=1e-6)


# ---------------------------------------------------------------------------------------
# Any valid problem gets a plan.

_numbers = st.floats(min_value=0, max_value=6, allow_nan=False).map(lambda x: round(x, 3))


@st.composite
def small_problems(draw: st.DrawFn) -> dict[str, Any]:
    """Small valid problems: awkward inventories, every promise, spill, residency, previous."""
    regions = []
    zones: list[str] = []
    for r in range(draw(st.integers(1, 2))):
        names = [f"r{r}-{z}" for z in range(draw(st.integers(1, 3)))]
        zones += names
        regions.append({"name": f"r{r}", "zones": names})
    accelerators = [
        {"name": f"g{a}", "price_per_gpu_hour": draw(st.sampled_from([0.0, 1.0, 2.5]))}
        for a in range(draw(st.integers(1, 2)))
    ]
    inventory = [
        {"zone": z, "accelerator": a["name"], "gpus": draw(st.integers(0, 8))}
        for z in zones
        for a in accelerators
        if draw(st.booleans())
    ]
    shapes = []
    for i in range(draw(st.integers(1, 3))):
        shape = {
            "name": f"s{i}",
            "model": draw(st.sampled_from(["m1", "m2"])),
            "accelerator": draw(st.sampled_from(accelerators))["name"],
            "gpus": draw(st.integers(1, 3)),
            "prefill_tokens_per_s": draw(st.sampled_from([1000.0, 4000.0])),
            "decode_tokens_per_s": draw(st.sampled_from([50.0, 100.0, 300.0])),
            "target_utilization": draw(st.sampled_from([0.5, 0.7, 1.0])),
        }
        if draw(st.booleans()):
            shape["max_concurrency"] = draw(st.integers(0, 16))
        shapes.append(shape)
    region_names = [r["name"] for r in regions]
    demands = []
    for i in range(draw(st.integers(1, 4))):
        row: dict[str, Any] = {
            "id": f"d{i}",
            "tenant": draw(st.sampled_from(["t1", "t2"])),
            "model": draw(st.sampled_from(sorted({s["model"] for s in shapes}))),
            "home_region": draw(st.sampled_from(region_names)),
            "requests_per_s": draw(_numbers),
            "burst": draw(st.sampled_from([1.0, 1.5])),
            "prompt_tokens": draw(st.integers(0, 2000)),
            "output_tokens": draw(st.integers(0, 300)),
            "prefix_cache_hit_rate": draw(st.sampled_from([0.0, 0.5, 1.0])),
            "promise": draw(st.sampled_from(["none", "n+1", "zone"])),
            "priority": draw(st.integers(0, 2)),
        }
        if draw(st.booleans()):
            row["allowed_regions"] = draw(
                st.lists(st.sampled_from(region_names), min_size=1, unique=True)
            )
        if draw(st.booleans()):
            row["max_spill_rtt_ms"] = draw(st.sampled_from([0.0, 50.0]))
        if draw(st.booleans()):
            row["residence_s"] = draw(st.sampled_from([0.0, 2.0, 10.0]))
        demands.append(row)
    problem: dict[str, Any] = {
        "regions": regions,
        "accelerators": accelerators,
        "inventory": inventory,
        "shapes": shapes,
        "demands": demands,
        "rtt_ms": [{"from": "r0", "to": "r1", "ms": 40}] if len(regions) > 1 else [],
    }
    if draw(st.booleans()):
        problem["previous"] = [
            {"zone": z, "shape": s["name"], "replicas": draw(st.integers(0, 4))}
            for z in zones
            for s in shapes
            if draw(st.booleans())
        ]
    return problem


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_any_valid_problem_gets_a_verified_plan(problem: dict[str, Any]) -> None:
    parse_problem(problem)  # valid by construction
    solution = solved(problem, time_limit_s=10)
    assert solution["status"] == "optimal"


# ---------------------------------------------------------------------------------------
# Large-part help: the home start serves everyone with an exact plan.


def test_home_plan_serves_everyone_with_an_exact_plan() -> None:
    problem = generate_problem(tenants=40, regions=12, zones_per_region=3, gpu_types=2, seed=7)
    instance = Instance.build(parse_problem(problem))
    places = sites(instance)
    for part in instance.parts():
        model = PlacementModel(instance, part, places=places)
        home = home_plan(
            model, deadline=time.perf_counter() + 10, workers=1, seed=0, backend="highs"
        )
        assert home is not None and plan_violations(instance, home) == []
        for di in part.demands:  # everyone served in full, in one region
            routes = [ri for ri in instance.routes_of[di] if home.share.get(ri, 0.0) > 0]
            assert sum(home.share[ri] for ri in routes) == pytest.approx(1.0)
            assert len({instance.routes[ri].region for ri in routes}) == 1


def test_relaxation_bounds_the_cost_and_its_blocks_give_a_cheaper_exact_plan() -> None:
    problem = generate_problem(tenants=40, regions=12, zones_per_region=3, gpu_types=2, seed=7)
    instance = Instance.build(parse_problem(problem))
    places = sites(instance)
    start = start_plan(instance, places)
    improved = 0
    total_bound = 0.0
    for part in instance.parts():
        model = PlacementModel(instance, part, places=places)
        plan = _restrict(instance, start, part)
        cost = model.cost_objective()
        bound, values = relaxation(model, cost, time_limit_s=10, workers=1, seed=0, backend="highs")
        assert bound is not None and values is not None
        total_bound += bound
        better = relaxed_plan(
            model,
            plan,
            cost,
            values,
            deadline=time.perf_counter() + 10,
            workers=1,
            seed=0,
            backend="highs",
        )
        if better is None:
            continue
        assert plan_violations(instance, better) == []
        assert (
            bound - 1e-6 <= model.objective_value(cost, better) < model.objective_value(cost, plan)
        )
        for di in part.demands:  # everyone still served in full
            assert sum(better.share.get(ri, 0.0) for ri in instance.routes_of[di]) == (
                pytest.approx(1.0)
            )
        improved += 1
    assert improved  # the greedy start leaves something to find
    # The relaxations bound the optimum (this instance solves to proven optimality).
    solution = solved(problem, time_limit_s=60)
    assert solution["status"] == "optimal" and solution["unserved"] == []
    assert total_bound <= solution["cost_per_hour"] * (1 + 1e-9)


def test_large_part_path_returns_a_verified_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every part counts as large and its full solve gets almost no time, so the home start
    # and the MIP on the blocks the relaxation opens do the work.
    monkeypatch.setattr(solver_module, "LARGE_PART_ROUTES", 0)
    monkeypatch.setattr(solver_module, "LARGE_COST_SHARE", 0.001)
    problem = generate_problem(tenants=40, regions=12, zones_per_region=3, gpu_types=2, seed=7)
    solution = solved(problem, time_limit_s=20)
    assert solution["unserved"] == []
    assert solution["status"] == "feasible"


def test_huge_part_path_skips_the_full_solve_and_stays_near_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every part counts as huge: no full MIP, no captive bounds; the relaxation bounds it
    # and the MIP on the blocks the relaxation opens finds the plan.
    monkeypatch.setattr(solver_module, "LARGE_PART_ROUTES", 0)
    monkeypatch.setattr(solver_module, "HUGE_PART_ROUTES", 0)
    runs: list[str] = []
    real_run = solver_module._Stages._run

    def recording_run(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        runs.append(name)
        return real_run(self, name, *args, **kwargs)

    monkeypatch.setattr(solver_module._Stages, "_run", recording_run)
    # Parts in this process, one at a time, so that their stages are recorded here.
    monkeypatch.setattr(solver_module, "_can_fork", lambda: False)
    problem = generate_problem(tenants=40, regions=12, zones_per_region=3, gpu_types=2, seed=7)
    solution = solved(problem, time_limit_s=30)
    assert runs and "cost" not in runs
    assert solution["unserved"] == []
    assert solution["status"] == "feasible"
    reference = reference_plan(problem, time_limit_s=30)
    bound = solution["cost_per_hour"] * (1 - solution["gap"])
    assert 0 < bound <= reference.cost_per_hour * (1 + 1e-6)
    assert solution["cost_per_hour"] <= reference.cost_per_hour * 1.05


def test_shares_that_add_up_to_one_within_float_noise_leave_nothing_unserved() -> None:
    # 0.3 + 0.6 + 0.1 is 0.9999999999999999 in floating point: served in full, not a demand
    # with 1e-16 of its rate unserved (nor an unserved stage run for it).
    problem = one_region()
    base = problem["shapes"][0]
    problem["shapes"] = [{**base, "name": f"m/gpu80x1-{i}"} for i in range(3)]
    problem["demands"] = [demand("d", 9.0)]
    instance = Instance.build(parse_problem(problem))
    (di,) = range(len(instance.demands))
    routes = instance.routes_of[di]
    assert len(routes) == 3
    shares = dict(zip(routes, (0.3, 0.6, 0.1), strict=True))
    assert sum(shares.values()) < 1.0
    plan = solver_module.Plan(
        replicas={("r1-a", f"m/gpu80x1-{i}"): 10 for i in range(3)}, share=shares
    )
    model = PlacementModel(
        instance, instance.parts(set())[0], coupled=set(), places=sites(instance)
    )
    assert model.objective_value(model.unserved_objective([di]), plan) == 0.0
    progress = solver_module._Progress(cost=60.0, cost_bound=60.0)
    solution = solver_module.solution_dict(instance, plan, progress, seconds=0.0)
    assert solution["unserved"] == []
    assert solution["unserved_requests_per_s"] == 0.0
