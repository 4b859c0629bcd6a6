"""The solver back ends' stopping rules: a node count or a gap stops a solve at the same
answer however much time it is given; the clock is only the last resort."""

from __future__ import annotations

import random

import pytest

from planner.placement.linear import BackendName, LinearModel, make_backend


def _knapsacks(
    seed: int = 3, items: int = 120, rows: int = 6
) -> tuple[LinearModel, dict[int, float]]:
    """A multi-dimensional 0/1 knapsack HiGHS needs thousands of nodes to prove."""
    rng = random.Random(seed)
    model = LinearModel()
    xs = [model.add_var(0, 1, integer=True, name=f"x{i}") for i in range(items)]
    for j in range(rows):
        weights = [rng.randint(100, 1000) for _ in xs]
        model.add_row(
            list(zip(xs, weights, strict=True)), -float("inf"), sum(weights) // 3, name=f"w{j}"
        )
    objective = {x: float(rng.randint(100, 1000)) for x in xs}
    return model, objective


@pytest.mark.parametrize("backend", ["highs", "scip"])
def test_a_node_limit_stops_at_the_same_plan_whatever_the_time(backend: BackendName) -> None:
    model, objective = _knapsacks()
    outcomes = []
    for time_limit_s in (30.0, 120.0):
        solver = make_backend(model, backend, workers=1, seed=0)
        outcomes.append(
            solver.solve(
                objective, maximize=True, time_limit_s=time_limit_s, hint=None, node_limit=20
            )
        )
    first, second = outcomes
    assert first.values is not None
    assert not first.proven_optimal  # stopped by the node count: it needs thousands
    assert first.values == second.values
    assert first.objective == second.objective


def test_a_gap_stop_is_a_proof_within_the_gap() -> None:
    model, objective = _knapsacks()
    solver = make_backend(model, "highs", workers=1, seed=0)
    loose = solver.solve(objective, maximize=True, time_limit_s=60.0, hint=None, gap=0.01)
    assert loose.values is not None and loose.objective is not None and loose.bound is not None
    assert loose.bound >= loose.objective
    assert loose.bound - loose.objective <= 0.01 * loose.objective + 1e-6
    again = make_backend(model, "highs", workers=1, seed=0).solve(
        objective, maximize=True, time_limit_s=120.0, hint=None, gap=0.01
    )
    assert again.values == loose.values


def test_cp_sat_takes_a_node_limit_and_stops_by_time_and_gap() -> None:
    # CP-SAT counts no branch-and-bound nodes: the limit is accepted and does not apply.
    model, objective = _knapsacks(items=30, rows=2)
    solver = make_backend(model, "cpsat", workers=1, seed=0)
    outcome = solver.solve(objective, maximize=True, time_limit_s=30.0, hint=None, node_limit=1)
    assert outcome.proven_optimal and outcome.values is not None
