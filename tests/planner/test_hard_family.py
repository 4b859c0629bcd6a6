"""The hard-fleet generator and the solver's handling of inventory that models share."""

from __future__ import annotations

import time
from typing import Any

import pytest

from planner.placement import parse_problem, solve
from planner.placement import solver as solver_module
from planner.placement.hard import HARD_SEEDS, generate_hard_problem
from planner.placement.model import Instance, sites
from planner.placement.reference import reference_plan
from planner.placement.verify import verify
from tests.planner.placement_helpers import shared_inventory_problem


def test_same_seed_same_problem_and_seeds_differ() -> None:
    assert generate_hard_problem(seed=3) == generate_hard_problem(seed=3)
    assert generate_hard_problem(seed=3) != generate_hard_problem(seed=4)


@pytest.mark.parametrize("seed", HARD_SEEDS)
def test_benchmark_instances_are_valid_and_of_the_issue_size(seed: int) -> None:
    problem = generate_hard_problem(seed=seed)
    parsed = parse_problem(problem)
    assert len(parsed.regions) == 8
    assert len(parsed.accelerators) == 3
    assert len(parsed.shapes) == 24
    assert len({s.model for s in parsed.shapes}) == 4
    assert len({d.tenant for d in parsed.demands}) == 100
    assert 150 <= len(parsed.demands) <= 200
    assert 50 <= len(parsed.inventory) <= 72
    # Every model has shapes on every accelerator: overlapping eligibility.
    for model in {s.model for s in parsed.shapes}:
        assert {s.accelerator for s in parsed.shapes if s.model == model} == {
            a.name for a in parsed.accelerators
        }


def test_a_small_hard_fleet_solves_to_a_verified_plan() -> None:
    problem = generate_hard_problem(seed=1, tenants=8, regions=2)
    solution = solve(problem, time_limit_s=30, workers=1)
    assert solution["status"] in {"optimal", "feasible"}
    assert verify(problem, solution) == []
    assert solution["unserved_requests_per_s"] == 0


def test_relaxations_that_overfill_a_shared_inventory_couple_it_from_the_start() -> None:
    problem = shared_inventory_problem()
    instance = Instance.build(parse_problem(problem))
    coupled = solver_module._likely_coupled(
        instance,
        sites(instance),
        deadline=time.perf_counter() + 30,
        workers=1,
        seed=0,
        backend="highs",
    )
    assert coupled == {("r", "g80")}


def test_ample_inventory_is_not_coupled() -> None:
    problem = shared_inventory_problem()
    for row in problem["inventory"]:
        row["gpus"] = 64
    instance = Instance.build(parse_problem(problem))
    coupled = solver_module._likely_coupled(
        instance,
        sites(instance),
        deadline=time.perf_counter() + 30,
        workers=1,
        seed=0,
        backend="highs",
    )
    assert coupled == set()


@pytest.mark.parametrize("check", [True, False])
def test_shared_inventory_reaches_the_reference_optimum(
    check: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the check, the uncoupled round's plans do not fit and the coupled part is
    # solved again from them (repair, and the uncoupled bounds as floors).
    if not check:
        monkeypatch.setattr(solver_module, "COUPLING_CHECK_ROUTES", 0)
    problem = shared_inventory_problem()
    solution = solve(problem, time_limit_s=30, workers=2)
    assert verify(problem, solution) == []
    assert solution["unserved_requests_per_s"] == 0
    expected = reference_plan(problem).cost_per_hour
    assert solution["cost_per_hour"] == pytest.approx(expected, rel=1e-9)
    assert solution["status"] == "optimal"


def test_parts_too_large_to_join_are_repaired_where_they_overfill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As on a fleet whose parts are too large to solve again joined (10,000 × 50): the
    # uncoupled plans overfill r's g80 GPUs, and the merged plan is re-solved in r across
    # both models with the inventory rows, the rest held.
    monkeypatch.setattr(solver_module, "COUPLING_CHECK_ROUTES", 0)
    monkeypatch.setattr(solver_module, "HUGE_PART_ROUTES", 0)
    problem = shared_inventory_problem()
    instance = Instance.build(parse_problem(problem))
    assert solver_module._too_large_to_join(instance, {("r", "g80")})
    solution = solve(problem, time_limit_s=30, workers=2)
    assert verify(problem, solution) == []
    assert solution["unserved_requests_per_s"] == 0
    g80 = sum(row["replicas"] * 2 for row in solution["replicas"] if row["shape"].endswith("g80x2"))
    assert g80 <= 16
    # Here the repair's region is the whole fleet: it finds the optimum. It proves nothing
    # itself: the status says so, and the gap is against the parts' own bounds.
    reference = reference_plan(problem)
    assert solution["cost_per_hour"] == pytest.approx(reference.cost_per_hour, rel=1e-9)
    assert solution["status"] == "feasible"
    bound = solution["cost_per_hour"] * (1 - solution["gap"])
    assert 0 < bound <= reference.cost_per_hour + 1e-9


def test_an_overfill_the_repair_cannot_fit_returns_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(solver_module, "COUPLING_CHECK_ROUTES", 0)
    monkeypatch.setattr(solver_module, "HUGE_PART_ROUTES", 0)
    monkeypatch.setattr(solver_module, "inventory_repair", lambda *args, **kwargs: None)
    problem = shared_inventory_problem()
    solution = solve(problem, time_limit_s=30, workers=2)
    assert verify(problem, solution) == []
    assert solution["status"] == "feasible"
    assert solution["gap"] == 1.0


@pytest.mark.slow
def test_stages_stopped_by_their_node_counts_give_the_same_plan_at_any_time_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seed 3's joined part needs about 500 nodes to prove its cost optimal; stopped after
    # 20, its full solve and the MIP on the relaxation's blocks end where the node counts
    # put them, whether the solve has 40 s or 400 s.
    monkeypatch.setattr(solver_module, "COST_NODES", 20)
    monkeypatch.setattr(solver_module, "RELAXED_NODES", 20)
    limits: list[int | None] = []
    real_run = solver_module._Stages._run

    def recording_run(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "cost":
            limits.append(kwargs.get("node_limit"))
        return real_run(self, name, *args, **kwargs)

    monkeypatch.setattr(solver_module._Stages, "_run", recording_run)
    problem = generate_hard_problem(seed=3)
    short = solve(problem, time_limit_s=40, workers=2, seed=0)
    long = solve(problem, time_limit_s=400, workers=2, seed=0)
    assert limits and set(limits) == {20}
    assert short["status"] == long["status"] == "feasible"  # stopped short of a proof
    assert {k: v for k, v in short.items() if k != "solve_seconds"} == {
        k: v for k, v in long.items() if k != "solve_seconds"
    }
    assert verify(problem, short) == []
