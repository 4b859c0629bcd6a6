"""The typed solution: ``parse_solution`` and ``solution_to_json`` round-trip every document
the solver writes on the shared examples, and bad documents name the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.placement.problem import SOLUTION_FORMAT, parse_problem
from planner.placement.solution import (
    ReplicaRow,
    RouteRow,
    Solution,
    SolutionInvalid,
    parse_solution,
    solution_to_json,
)
from planner.placement.solver import solve

ROOT = Path(__file__).resolve().parents[2]
# The shared examples beside the repository (or beside its worktrees), else the copies the
# tests keep.
EXAMPLES = next(
    (
        folder
        for folder in (ROOT.parent / "shared" / "examples", ROOT.parents[1] / "shared" / "examples")
        if folder.is_dir()
    ),
    ROOT / "tests" / "data" / "placement",
)
# The seeds' worked sizing examples: $/hour and replicas (docs/placement-format.md).
EXPECTED = {
    "sizing-base": (24.0, 12),
    "sizing-burst": (36.0, 18),
    "sizing-zonal": (54.0, 27),
    "fragmentation": (66.0, 33),
}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text())
    return data


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_example_round_trips_and_keeps_its_cost(name: str) -> None:
    document = solve(load(name), time_limit_s=30)
    solution = parse_solution(document)
    assert solution_to_json(solution) == document
    assert solution.to_json() == document
    # The same keys in the same order: the stored JSON text is unchanged.
    assert json.dumps(solution.to_json()) == json.dumps(document)
    cost, replicas = EXPECTED[name]
    assert solution.status == "optimal"
    assert solution.cost_per_hour == pytest.approx(cost)
    assert sum(row.replicas for row in solution.replicas) == replicas
    assert solution.served_requests_per_s == pytest.approx(
        sum(d.planned_requests_per_s for d in parse_problem(load(name)).demands)
    )


def test_a_typed_problem_solves_like_its_document() -> None:
    document = load("sizing-zonal")
    assert solve(parse_problem(document))["cost_per_hour"] == solve(document)["cost_per_hour"]


def test_the_invalid_solution_round_trips() -> None:
    problem = load("sizing-base")
    problem["demands"][0]["burst"] = 0.5
    document = solve(problem)
    solution = parse_solution(document)
    assert solution.is_invalid
    assert solution.field == "demands[0].burst"
    assert solution.replicas == () and solution.cost_per_hour is None
    assert solution.to_json() == document


def test_a_stored_solution_keeps_its_verification_and_other_keys() -> None:
    document = solve(load("sizing-burst"))
    document["verification"] = {"replayed": False, "holds": True, "rounds": []}
    document["note"] = {"kept": [1, 2]}
    solution = parse_solution(document)
    assert solution.verification == document["verification"]
    assert solution.extra == {"note": {"kept": [1, 2]}}
    assert solution.to_json() == document


def test_a_solution_built_in_code_gets_the_solvers_keys() -> None:
    solution = Solution(
        status="optimal",
        solve_seconds=0.1,
        cost_per_hour=2.0,
        unserved_requests_per_s=0.0,
        gap=0.0,
        replicas=(ReplicaRow("z", "s", 1),),
        routing=(RouteRow("d", "r", "s", 1.5),),
        excluded_shapes=(),
    )
    out = solution.to_json()
    assert list(out) == [
        "format",
        "status",
        "cost_per_hour",
        "unserved_requests_per_s",
        "solve_seconds",
        "gap",
        "replicas",
        "routing",
        "unserved",
        "binding",
        "excluded_shapes",
    ]
    assert out["format"] == SOLUTION_FORMAT
    assert parse_solution(out) == solution


def test_an_older_solution_without_excluded_shapes_stays_without() -> None:
    document = solve(load("sizing-base"))
    del document["excluded_shapes"]
    solution = parse_solution(document)
    assert solution.excluded_shapes is None
    assert solution.to_json() == document


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("status"), "status"),
        (lambda d: d.update(status="done"), "status"),
        (lambda d: d.update(format="placement-solution/v0"), "format"),
        (lambda d: d["replicas"][0].update(replicas=1.5), "replicas[0].replicas"),
        (lambda d: d["routing"][0].pop("shape"), "routing[0].shape"),
        (lambda d: d["routing"][0].update(requests_per_s="many"), "routing[0].requests_per_s"),
        (lambda d: d.update(binding="one"), "binding"),
        (lambda d: d.update(cost_per_hour=float("nan")), "cost_per_hour"),
    ],
)
def test_a_bad_document_names_the_field(change: Any, field: str) -> None:
    document = solve(load("sizing-base"))
    change(document)
    with pytest.raises(SolutionInvalid) as raised:
        parse_solution(document)
    assert raised.value.argument == field


def test_not_an_object_is_refused() -> None:
    with pytest.raises(SolutionInvalid) as raised:
        parse_solution([])
    assert raised.value.argument == "solution"
