"""solve: the shared examples, checked by the independent verifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.placement import solve
from planner.placement.verify import verify

DATA = Path(__file__).resolve().parent.parent / "data" / "placement"


def load(name: str) -> dict[str, Any]:
    with (DATA / f"{name}.json").open() as f:
        data: dict[str, Any] = json.load(f)
    return data


def solved(problem: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Solve and insist the plan satisfies every hard constraint."""
    solution = solve(problem, **kwargs)
    assert verify(problem, solution) == []
    return solution


@pytest.mark.parametrize("name", ["sizing-base", "sizing-burst", "sizing-zonal", "fragmentation"])
def test_shared_examples_reach_their_known_replica_counts(name: str) -> None:
    problem = load(name)
    solution = solved(problem)
    assert solution["status"] == "optimal"
    assert sum(r["replicas"] for r in solution["replicas"]) == problem["expect_total_replicas"]
    assert solution["unserved"] == []
