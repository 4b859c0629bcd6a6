"""Generated placement problems: the generator's contract, and plans checked on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.errors import PlannerInputError
from planner.placement import parse_problem, solve
from planner.placement.generator import generate_problem
from planner.placement.greedy import greedy_plan
from planner.placement.reference import reference_cost_bound, reference_plan
from planner.placement.verify import read_spec_problem, verify


def _small(seed: int, **overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "tenants": 12,
        "regions": 3,
        "zones_per_region": 3,
        "gpu_types": 2,
        "seed": seed,
    }
    arguments.update(overrides)
    return generate_problem(**arguments)


def test_generator_is_deterministic_and_json_serialisable() -> None:
    first = _small(7)
    assert json.dumps(first) == json.dumps(_small(7))
    assert json.loads(json.dumps(first)) == first
    assert json.dumps(first) != json.dumps(_small(8))


@pytest.mark.parametrize(
    ("tenants", "regions", "zones", "gpu_types"),
    [(50, 6, 3, 3), (200, 12, 3, 4)],
)
def test_benchmark_sizes_have_the_requested_shape(
    tenants: int, regions: int, zones: int, gpu_types: int
) -> None:
    problem = generate_problem(
        tenants=tenants, regions=regions, zones_per_region=zones, gpu_types=gpu_types, seed=1
    )
    assert problem["format"] == "placement-problem/v1"
    assert len(problem["regions"]) == regions
    assert all(len(r["zones"]) == zones for r in problem["regions"])
    assert len(problem["accelerators"]) == gpu_types
    assert len({d["tenant"] for d in problem["demands"]}) == tenants
    # One or two demands per tenant, never two on the same model.
    per_tenant: dict[str, list[str]] = {}
    for demand in problem["demands"]:
        per_tenant.setdefault(demand["tenant"], []).append(demand["model"])
    assert all(1 <= len(models) <= 2 for models in per_tenant.values())
    assert all(len(set(models)) == len(models) for models in per_tenant.values())
    # Several regions per geography.
    geos = [r["geo"] for r in problem["regions"]]
    assert len(set(geos)) >= 2
    assert all(geos.count(g) >= 2 for g in set(geos))


def test_references_are_consistent_and_values_in_range() -> None:
    problem = _small(3, tenants=40, gpu_types=3, models=5)
    regions = {r["name"]: r for r in problem["regions"]}
    zones = {z for r in problem["regions"] for z in r["zones"]}
    accelerators = {a["name"] for a in problem["accelerators"]}
    shapes = {s["name"]: s for s in problem["shapes"]}
    models = {s["model"] for s in shapes.values()}
    for row in problem["inventory"]:
        assert row["zone"] in zones and row["accelerator"] in accelerators and row["gpus"] >= 0
    for shape in shapes.values():
        assert shape["accelerator"] in accelerators
        assert shape["gpus"] in (1, 2, 4, 8)
        assert shape["prefill_tokens_per_s"] > 0 and shape["decode_tokens_per_s"] > 0
        assert 0 < shape.get("target_utilization", 0.7) <= 1
    for row in problem["rtt_ms"]:
        assert row["from"] in regions and row["to"] in regions and row["ms"] > 0
    for demand in problem["demands"]:
        assert demand["model"] in models
        assert demand["home_region"] in regions
        assert demand["home_region"] in demand.get("allowed_regions", regions)
        assert demand["requests_per_s"] > 0 and 1.0 <= demand["burst"] <= 2.0
        assert 0 <= demand.get("prefix_cache_hit_rate", 0.0) <= 1
        assert demand["promise"] in ("none", "n+1", "zone")
        assert demand["priority"] in (0, 1, 2)


def test_rtt_is_low_inside_a_geography_and_high_across() -> None:
    problem = _small(5, regions=6)
    geo = {r["name"]: r["geo"] for r in problem["regions"]}
    inside = [row["ms"] for row in problem["rtt_ms"] if geo[row["from"]] == geo[row["to"]]]
    across = [row["ms"] for row in problem["rtt_ms"] if geo[row["from"]] != geo[row["to"]]]
    assert inside and across
    assert max(inside) < min(across)


def test_resident_tenants_are_confined_to_their_geography() -> None:
    problem = _small(11, tenants=60, regions=6, residency_share=0.5)
    geo = {r["name"]: r["geo"] for r in problem["regions"]}
    resident = [d for d in problem["demands"] if "allowed_regions" in d]
    assert resident
    for demand in resident:
        assert {geo[r] for r in demand["allowed_regions"]} == {geo[demand["home_region"]]}


def test_tenant_sizes_are_heavy_tailed() -> None:
    problem = generate_problem(tenants=400, regions=3, zones_per_region=3, gpu_types=2, seed=2)
    rates: dict[str, float] = {}
    for demand in problem["demands"]:
        rates[demand["tenant"]] = rates.get(demand["tenant"], 0.0) + demand["requests_per_s"]
    ordered = sorted(rates.values(), reverse=True)
    # The largest fifth of tenants sends more than half the traffic.
    assert sum(ordered[: len(ordered) // 5]) > 0.5 * sum(ordered)


def test_scarcity_scales_inventory_below_ample() -> None:
    ample = _small(4)
    scarce = _small(4, scarcity=0.5)
    assert ample["demands"] == scarce["demands"]
    assert sum(r["gpus"] for r in scarce["inventory"]) < sum(r["gpus"] for r in ample["inventory"])
    half = sum(r["gpus"] for r in _small(4, scarcity=0.5)["inventory"])
    double = sum(r["gpus"] for r in _small(4, scarcity=2.0)["inventory"])
    assert half < double


@pytest.mark.parametrize(
    ("argument", "value"),
    [("tenants", 0), ("gpu_types", 6), ("scarcity", -1.0), ("residency_share", 1.5)],
)
def test_generator_rejects_bad_arguments(argument: str, value: Any) -> None:
    with pytest.raises(PlannerInputError) as caught:
        _small(1, **{argument: value})
    assert caught.value.argument == argument


# --- the baseline and the reference formulation on generated problems ------------------

DATA = Path(__file__).resolve().parent.parent / "data" / "placement"


def _tiny(seed: int, scarcity: float | None = None) -> dict[str, Any]:
    """A problem the reference MILP solves in well under a second."""
    return generate_problem(
        tenants=6,
        regions=2,
        zones_per_region=2,
        gpu_types=2,
        models=3,
        seed=seed,
        scarcity=scarcity,
    )


def _unserved_by_priority(problem: dict[str, Any], solution: dict[str, Any]) -> dict[int, float]:
    priority = {d["id"]: d.get("priority", 0) for d in problem["demands"]}
    totals = dict.fromkeys(priority.values(), 0.0)
    for row in solution["unserved"]:
        totals[priority[row["demand"]]] += row["requests_per_s"]
    return totals


@pytest.mark.parametrize(
    ("name", "replicas"),
    [("sizing-base", 12), ("sizing-burst", 18), ("sizing-zonal", 27), ("fragmentation", 33)],
)
def test_reference_reproduces_the_known_answers(name: str, replicas: int) -> None:
    with (DATA / f"{name}.json").open() as f:
        problem = json.load(f)
    plan = reference_plan(problem)
    assert sum(plan.replicas.values()) == replicas == problem["expect_total_replicas"]
    assert plan.cost_per_hour == pytest.approx(2.0 * replicas)
    assert verify(problem, plan.as_solution()) == []


@pytest.mark.parametrize("seed", range(1, 7))
@pytest.mark.parametrize("scarcity", [None, 0.5])
def test_reference_and_greedy_plans_verify_and_greedy_never_beats_the_optimum(
    seed: int, scarcity: float | None
) -> None:
    problem = _tiny(seed, scarcity)
    plan = reference_plan(problem)
    greedy = greedy_plan(problem)
    assert verify(problem, plan.as_solution()) == []
    assert verify(problem, greedy) == []
    # The reference serves the most important priority at least as fully as the baseline...
    greedy_unserved = _unserved_by_priority(problem, greedy)
    first = min(plan.unserved_by_priority)
    assert plan.unserved_by_priority[first] <= greedy_unserved[first] + 1e-6
    # ...and where both serve everything, it is never dearer.
    if greedy["unserved_requests_per_s"] == 0:
        assert all(u <= 1e-6 for u in plan.unserved_by_priority.values())
        assert plan.cost_per_hour <= greedy["cost_per_hour"] * (1 + 1e-9)


@pytest.mark.parametrize("seed", [1, 2])
def test_reference_cost_bound_is_proven_and_below_every_plan(seed: int) -> None:
    problem = _tiny(seed)
    bound = reference_cost_bound(problem, time_limit_s=30.0)
    assert bound.proven
    assert bound.lower == pytest.approx(reference_plan(problem).cost_per_hour, rel=1e-9)
    assert bound.lower <= greedy_plan(problem)["cost_per_hour"] * (1 + 1e-9)


@pytest.mark.parametrize("scarcity", [None, 0.5])
def test_generated_problems_are_valid_for_both_readers(scarcity: float | None) -> None:
    # The solver's parser and the verifier's reader are independent; both must accept.
    problem = generate_problem(
        tenants=200,
        regions=12,
        zones_per_region=3,
        gpu_types=5,
        models=5,
        seed=4,
        scarcity=scarcity,
    )
    parsed = parse_problem(problem)
    spec = read_spec_problem(problem)
    assert len(parsed.demands) == len(spec.demands) == len(problem["demands"])


# --- the solver on generated problems ----------------------------------------------------

SOLVER_LIMIT_S = 20.0


def _solve(problem: dict[str, Any], time_limit_s: float = SOLVER_LIMIT_S) -> dict[str, Any]:
    solution: dict[str, Any] = solve(problem, time_limit_s=time_limit_s, workers=2, seed=0)
    return solution


def _planned_by_priority(problem: dict[str, Any]) -> dict[int, float]:
    totals: dict[int, float] = {}
    for d in problem["demands"]:
        p = d.get("priority", 0)
        totals[p] = totals.get(p, 0.0) + d["requests_per_s"] * d.get("burst", 1.0)
    return totals


@pytest.mark.parametrize("name", ["sizing-base", "sizing-burst", "sizing-zonal", "fragmentation"])
def test_solver_reaches_the_known_answers(name: str) -> None:
    with (DATA / f"{name}.json").open() as f:
        problem = json.load(f)
    solution = _solve(problem)
    assert verify(problem, solution) == []
    assert sum(row["replicas"] for row in solution["replicas"]) == problem["expect_total_replicas"]


@pytest.mark.parametrize("seed", range(1, 6))
@pytest.mark.parametrize("scarcity", [None, 0.5])
def test_solver_is_optimal_and_agrees_with_the_reference(seed: int, scarcity: float | None) -> None:
    problem = _tiny(seed, scarcity)
    solution = _solve(problem)
    assert solution["status"] == "optimal"
    assert verify(problem, solution) == []
    plan = reference_plan(problem)
    # Least unserved, one priority at a time, is what both must reach exactly.
    got = _unserved_by_priority(problem, solution)
    planned = _planned_by_priority(problem)
    for priority, least in plan.unserved_by_priority.items():
        assert got[priority] == pytest.approx(least, abs=1e-6 * max(1.0, planned[priority]))
    # Where everything is served fairness cannot move the cost: the optima must agree.
    if all(u <= 1e-9 for u in plan.unserved_by_priority.values()):
        assert solution["cost_per_hour"] == pytest.approx(plan.cost_per_hour, rel=1e-6)


@pytest.mark.parametrize("scarcity", [None, 0.4])
def test_solver_plans_verify_on_a_multi_region_fleet(scarcity: float | None) -> None:
    problem = generate_problem(
        tenants=30, regions=6, zones_per_region=3, gpu_types=3, seed=21, scarcity=scarcity
    )
    solution = _solve(problem, time_limit_s=4.0)
    assert solution["status"] in ("optimal", "feasible")
    assert verify(problem, solution) == []
    if scarcity is None:
        assert solution["unserved_requests_per_s"] == 0
        assert solution["cost_per_hour"] <= greedy_plan(problem)["cost_per_hour"] * (1 + 1e-9)


@pytest.mark.parametrize("seed", [31, 32])
def test_residency_holds_even_under_shortage(seed: int) -> None:
    # Everyone may spill far, half must stay in their geography, and GPUs are short: the
    # solver is tempted to move resident demand to idle regions abroad.
    problem = generate_problem(
        tenants=24,
        regions=6,
        zones_per_region=2,
        gpu_types=2,
        seed=seed,
        scarcity=0.3,
        residency_share=0.5,
        spill_share=1.0,
    )
    for demand in problem["demands"]:
        demand["max_spill_rtt_ms"] = 1000.0
    solution = _solve(problem, time_limit_s=8.0)
    assert verify(problem, solution) == []
    geo = {r["name"]: r["geo"] for r in problem["regions"]}
    demands = {d["id"]: d for d in problem["demands"]}
    resident = [row for row in solution["routing"] if "allowed_regions" in demands[row["demand"]]]
    assert resident
    for row in resident:
        demand = demands[row["demand"]]
        assert row["region"] in demand["allowed_regions"]
        assert geo[row["region"]] == geo[demand["home_region"]]


def test_priority_zero_is_never_short_while_priority_one_is_served() -> None:
    # Nine replicas carry 6.3 requests/s: all of it goes to the priority-0 demand.
    with (DATA / "sizing-base.json").open() as f:
        problem = json.load(f)
    problem["inventory"] = [
        {"zone": z, "accelerator": "gpu80", "gpus": 3} for z in ("r1-a", "r1-b", "r1-c")
    ]
    base = problem["demands"][0]
    problem["demands"] = [
        dict(base, id="silver", priority=1, requests_per_s=4.0),
        dict(base, id="gold", priority=0, requests_per_s=8.0),
    ]
    solution = _solve(problem)
    assert verify(problem, solution) == []
    unserved = {row["demand"]: row["requests_per_s"] for row in solution["unserved"]}
    assert unserved["gold"] == pytest.approx(8.0 - 6.3)
    assert unserved["silver"] == pytest.approx(4.0)


@pytest.mark.parametrize("seed", range(1, 6))
def test_on_generated_shortage_priority_zero_loses_nothing_to_priority_one(seed: int) -> None:
    # One region, one model: every demand competes for the same replicas, so any
    # priority-0 shortfall while priority 1 is served would be a priority inversion.
    problem = generate_problem(
        tenants=10, regions=1, zones_per_region=3, gpu_types=1, models=1, seed=seed, scarcity=0.4
    )
    for demand in problem["demands"]:
        demand["promise"] = "none"
        demand.pop("residence_s", None)
    solution = _solve(problem)
    assert verify(problem, solution) == []
    priority = {d["id"]: d["priority"] for d in problem["demands"]}
    short = {row["demand"] for row in solution["unserved"] if row["requests_per_s"] > 1e-9}
    served = {row["demand"] for row in solution["routing"] if row["requests_per_s"] > 1e-9}
    worst_short = min((priority[d] for d in short), default=None)
    if worst_short is not None:
        assert all(priority[d] <= worst_short for d in served)
