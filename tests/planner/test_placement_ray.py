"""Parts solved as Ray tasks (``solve(..., executor="ray")``) give the plan the forked
processes give: same cost, replicas, routing and verifier verdict, for a fixed seed.

A local Ray of 2 CPUs starts once for this module (about 10 s); a Ray the test run has
started already (tests/controlplane/test_benchmarks_ray.py) is used as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from planner.cli import main
from planner.errors import PlannerInputError
from planner.placement import parse_problem, solve
from planner.placement import solver as solver_module
from planner.placement.generator import generate_problem
from planner.placement.hard import generate_hard_problem
from planner.placement.model import Instance
from planner.placement.verify import verify
from tests.planner.placement_helpers import shared_inventory_problem

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray of 2 CPUs and no GPU, shut down after the module if started here."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def _plan(solution: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in solution.items() if k != "solve_seconds"}


def _solved_both_ways(problem: dict[str, Any], time_limit_s: float) -> dict[str, Any]:
    """The processes' solution, after checking that Ray's is the same and both verify."""
    here = solve(problem, time_limit_s=time_limit_s, workers=2, seed=0)
    on_ray = solve(problem, time_limit_s=time_limit_s, workers=2, seed=0, executor="ray")
    assert _plan(on_ray) == _plan(here)
    assert verify(problem, on_ray) == verify(problem, here) == []
    return here


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2])
def test_parts_on_ray_give_the_plan_of_the_processes(local_ray: None, seed: int) -> None:
    problem = generate_problem(tenants=50, regions=6, zones_per_region=3, gpu_types=4, seed=seed)
    assert len(Instance.build(parse_problem(problem)).parts()) >= 4
    here = solve(problem, time_limit_s=60, workers=2, seed=0)
    on_ray = solve(problem, time_limit_s=60, workers=2, seed=0, executor="ray")
    assert here["status"] == "optimal"  # every solve ended within its time
    assert on_ray["cost_per_hour"] == here["cost_per_hour"]
    assert on_ray["replicas"] == here["replicas"]
    assert _plan(on_ray) == _plan(here)
    assert verify(problem, on_ray) == verify(problem, here) == []


@pytest.mark.slow
def test_huge_parts_and_their_repair_give_the_plan_of_the_processes(
    local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on 10,000 x 50: parts too large for a full solve (home start, relaxation, the MIP
    # on what the relaxation opens, each stopping at a gap or a node count, not the clock),
    # whose merged plan overfills a shared inventory and is repaired. The Ray workers read
    # the part sizes from the job, as patched here.
    monkeypatch.setattr(solver_module, "COUPLING_CHECK_ROUTES", 0)
    monkeypatch.setattr(solver_module, "LARGE_PART_ROUTES", 0)
    monkeypatch.setattr(solver_module, "HUGE_PART_ROUTES", 0)
    repairs: list[int] = []
    real_repair = solver_module.inventory_repair

    def counted_repair(*args: Any, **kwargs: Any) -> Any:
        repairs.append(1)
        return real_repair(*args, **kwargs)

    monkeypatch.setattr(solver_module, "inventory_repair", counted_repair)
    problem = shared_inventory_problem()
    # Loads whose relaxation is fractional: its bound is below the parts' optima, so a
    # worker that solved its part in full would report another gap.
    for row, rate in zip(problem["demands"], (3.4, 2.7), strict=True):
        row["requests_per_s"] = rate
    here = _solved_both_ways(problem, 30)
    assert len(repairs) == 2  # one repair each
    assert here["status"] == "feasible" and here["gap"] > 0  # the parts' relaxation bounds


def test_the_command_line_solves_on_ray(
    local_ray: None, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = generate_problem(tenants=20, regions=3, zones_per_region=2, gpu_types=2, seed=3)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem))
    assert main(["solve", str(path), "--executor", "ray", "--time-limit", "30"]) == 0
    solution = json.loads(capsys.readouterr().out)
    assert verify(problem, solution) == []
    assert solution["cost_per_hour"] == solve(problem, time_limit_s=30)["cost_per_hour"]


def test_an_unknown_executor_or_a_stray_address_is_refused() -> None:
    problem = generate_problem(tenants=5, regions=2, zones_per_region=2, gpu_types=1, seed=1)
    with pytest.raises(PlannerInputError, match="executor"):
        solve(problem, executor="threads")  # type: ignore[arg-type]
    with pytest.raises(PlannerInputError, match="ray_address"):
        solve(problem, ray_address="auto")


@pytest.mark.slow
def test_a_full_solve_stopped_by_its_node_count_gives_the_plan_of_the_processes(
    local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on the hard family: the full MIP of each part stops after its node count, not at
    # the clock, so where it stops does not depend on the load or the executor. The Ray
    # workers read the node counts from the job, as patched here (a worker that read its
    # own import would run 500 nodes and end elsewhere).
    monkeypatch.setattr(solver_module, "COST_NODES", 20)
    monkeypatch.setattr(solver_module, "RELAXED_NODES", 20)
    problem = generate_hard_problem(seed=3)
    here = _solved_both_ways(problem, 60)
    assert here["status"] == "feasible"  # stopped short of a proof
