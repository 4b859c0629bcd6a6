"""solve under concurrency: parts in processes of their own, callers on threads, failures.

MathOpt and HiGHS are not safe to use from several threads of one process at once, so parts
are solved side by side in forked processes and, in one process, one at a time. These tests
solve from several threads at once and compare with the same solves one after the other,
and make a part fail (an exception, a process that dies) to see the error name the part.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import planner.placement.solver as solver_module
from planner import cli
from planner.errors import PlannerSolverError
from planner.placement import parse_problem, solve
from planner.placement.generator import generate_problem
from planner.placement.model import Instance, SplitFailed, sites
from planner.placement.verify import verify

# Generous: these solve to proven optimality in well under a second each; the limit only
# keeps a busy machine from cutting a stage short (which would make plans differ).
LIMIT_S = 60.0


def small(seed: int) -> dict[str, Any]:
    return generate_problem(tenants=12, regions=3, zones_per_region=2, gpu_types=2, seed=seed)


def plan_of(solution: dict[str, Any]) -> tuple[Any, ...]:
    """What a plan is, without the timing: status, cost, replicas, routing, unserved."""
    return (
        solution["status"],
        round(solution["cost_per_hour"], 9),
        tuple(sorted((r["zone"], r["shape"], r["replicas"]) for r in solution["replicas"])),
        tuple(
            sorted(
                (r["demand"], r["region"], r["shape"], round(r["requests_per_s"], 9))
                for r in solution["routing"]
            )
        ),
        tuple(sorted((r["demand"], round(r["requests_per_s"], 9)) for r in solution["unserved"])),
    )


def test_the_problems_have_several_parts() -> None:
    # Otherwise the tests below would not solve parts side by side at all.
    for seed in (1, 2):
        assert len(Instance.build(parse_problem(small(seed))).parts(set())) >= 2


def test_solves_from_threads_give_the_same_plans_as_one_after_the_other() -> None:
    problems = [small(1), small(2), small(1), small(2)]
    alone = [solve(p, time_limit_s=LIMIT_S, workers=2, seed=0) for p in problems]
    with ThreadPoolExecutor(max_workers=len(problems)) as pool:
        together = list(
            pool.map(lambda p: solve(p, time_limit_s=LIMIT_S, workers=2, seed=0), problems)
        )
    for problem, one, other in zip(problems, alone, together, strict=True):
        assert one["status"] == "optimal"
        assert verify(problem, other) == []
        assert plan_of(other) == plan_of(one)


def test_single_part_solves_from_threads_take_turns_in_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One part is solved in the caller's process; two callers must not be in MathOpt at once.
    problem = generate_problem(
        tenants=8, regions=2, zones_per_region=2, gpu_types=1, models=1, seed=3
    )
    assert len(Instance.build(parse_problem(problem)).parts(set())) == 1
    inside = 0
    most = 0
    count = threading.Lock()
    original = solver_module._solve_one

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        try:
            return original(*args, **kwargs)
        finally:
            with count:
                inside -= 1

    monkeypatch.setattr(solver_module, "_solve_one", counted)
    expected = plan_of(solve(problem, time_limit_s=LIMIT_S, workers=2, seed=0))
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(
            pool.map(lambda _: solve(problem, time_limit_s=LIMIT_S, workers=2, seed=0), range(3))
        )
    assert most == 1
    assert [plan_of(r) for r in results] == [expected] * 3


def test_a_part_that_raises_is_a_planner_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any) -> Any:
        raise TypeError("set_attr(): incompatible function arguments")

    monkeypatch.setattr(solver_module._Stages, "run", broken)
    with pytest.raises(PlannerSolverError, match=r"solving the part of .* failed: TypeError"):
        solve(small(1), time_limit_s=LIMIT_S, workers=2, seed=0)


def test_a_single_part_that_raises_is_a_planner_error_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: Any) -> Any:
        raise ValueError("linear constraint lower bound is NaN")

    monkeypatch.setattr(solver_module._Stages, "run", broken)
    problem = generate_problem(
        tenants=8, regions=2, zones_per_region=2, gpu_types=1, models=1, seed=3
    )
    with pytest.raises(PlannerSolverError, match="lower bound is NaN") as caught:
        solve(problem, time_limit_s=LIMIT_S, workers=2, seed=0)
    assert isinstance(caught.value.__cause__, ValueError)


def test_a_part_whose_process_dies_is_a_planner_error(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = os.getpid()

    def dies(self: Any) -> Any:
        if os.getpid() != parent:
            os._exit(3)  # as a crash in native code would end the process
        raise AssertionError("parts are solved in child processes here")

    monkeypatch.setattr(solver_module._Stages, "run", dies)
    with pytest.raises(PlannerSolverError, match="process"):
        solve(small(2), time_limit_s=LIMIT_S, workers=2, seed=0)
    # The caller's process is unharmed and solves the next problem.
    monkeypatch.undo()
    assert solve(small(2), time_limit_s=LIMIT_S, workers=2, seed=0)["status"] == "optimal"


def test_a_split_that_fails_in_a_part_process_reaches_the_caller_as_such(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The caller couples those inventories and solves again; it must not become an error.
    def no_split(self: Any) -> Any:
        raise SplitFailed({("region-b", "gpu-x"), ("region-a", "gpu-y")})

    monkeypatch.setattr(solver_module._Stages, "run", no_split)
    instance = Instance.build(parse_problem(small(1)))
    parts = instance.parts(set())
    places = sites(instance)
    with pytest.raises(SplitFailed) as caught:
        solver_module._solve_parts(
            instance,
            parts,
            solver_module.start_plan(instance, places),
            places,
            set(),
            deadline=time.perf_counter() + LIMIT_S,
            workers=2,
            seed=0,
            backend="highs",
        )
    assert caught.value.keys == {("region-b", "gpu-x"), ("region-a", "gpu-y")}


def test_the_command_line_reports_a_solver_failure_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(self: Any) -> Any:
        raise RuntimeError("HiGHS gave up")

    monkeypatch.setattr(solver_module._Stages, "run", broken)
    path = tmp_path / "problem.json"
    path.write_text(json.dumps(small(1)))
    assert cli.main(["solve", str(path), "--time-limit", "30"]) == cli.EXIT_SOLVER_FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "solver failed: solving the part of" in err[0]
    assert "RuntimeError: HiGHS gave up" in err[0]
