"""Solve, replay, and re-solve until the replay holds: sizing by the queue simulator.

The linear model sizes each pool from its load at the target utilisation; the replay
(``planner.placement.replay``) says whether the resulting replicas hold each demand's p95 TTFT
under its real (or measured-burstiness) arrivals, all up and in every failure its promise
covers. Where a pool misses, the replay's bisection gives the live replicas that would hold
it; every demand routed to that pool has its ``burst`` (its effective load) raised by
``needed live ÷ live`` of the worst such miss, and the problem is solved again, from the same
``previous`` plan. Rounds stop when the replay holds, when no raise is possible (a pool no
count of replicas can hold), or after ``max_rounds``; a plan that still misses is returned
with its shortfalls for the caller to flag.

Only demands with a ``ttft_slo_s`` are judged; a problem without any is solved once and not
replayed. The raised bursts are written into the returned problem (``burst``), with the
original kept as ``burst_before_replay``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.placement.linear import BackendName
from planner.placement.problem import Problem, parse_problem
from planner.placement.replay import ONE_REPLICA, ReplayReport, Traffic, replay
from planner.placement.solver import DEFAULT_BACKEND, solve

#: Re-solves after the first, at most.
MAX_ROUNDS = 4
#: A raise is at least this much, so a round always moves the plan.
MIN_RAISE = 1.02
#: A re-solve's share of the first solve's time limit (it starts from the round before).
RESOLVE_SHARE = 1 / 3


@dataclass(frozen=True)
class Round:
    """One solve and its replay."""

    cost_per_hour: float
    holds: bool
    solve_seconds: float
    replay_seconds: float
    raised: Mapping[str, float] = field(default_factory=dict)  # demand -> factor after it
    excluded: Mapping[str, set[str]] = field(default_factory=dict)  # demand -> shapes

    def as_dict(self) -> dict[str, Any]:
        return {
            "cost_per_hour": round(self.cost_per_hour, 4),
            "holds": self.holds,
            "solve_seconds": round(self.solve_seconds, 3),
            "replay_seconds": round(self.replay_seconds, 3),
            "raised": {k: round(v, 4) for k, v in sorted(self.raised.items())},
            "excluded": {k: sorted(v) for k, v in sorted(self.excluded.items())},
        }


@dataclass(frozen=True)
class Verified:
    """The final problem (bursts as raised), its solution, its replay and the rounds."""

    problem: dict[str, Any]
    solution: dict[str, Any]
    report: ReplayReport | None
    rounds: tuple[Round, ...]

    @property
    def holds(self) -> bool:
        return self.report is None or self.report.holds

    def verification(self) -> dict[str, Any]:
        """What a plan stores of it (``Plan.verification``)."""
        if self.report is None:
            return {"replayed": False, "holds": True, "rounds": [r.as_dict() for r in self.rounds]}
        out = self.report.as_dict()
        out["replayed"] = True
        out["rounds"] = [r.as_dict() for r in self.rounds]
        out["raised"] = {
            str(d["id"]): {"burst_before": d["burst_before_replay"], "burst": d["burst"]}
            for d in self.problem.get("demands", [])
            if "burst_before_replay" in d
        }
        return out


def _exclusions(report: ReplayReport, problem: Mapping[str, Any]) -> dict[str, set[str]]:
    """Demand -> shapes to exclude: pools whose missing demands no replica count holds, where
    the demand has another shape of its model left to go to."""
    shapes_of: dict[str, set[str]] = {}
    for shape in problem.get("shapes", []):
        shapes_of.setdefault(str(shape["model"]), set()).add(str(shape["name"]))
    demands = {str(d["id"]): d for d in problem.get("demands", [])}
    out: dict[str, set[str]] = {}
    for short in report.shortfalls:
        if short.needed_live is not None:
            continue
        for did in short.demands:
            demand = demands[did]
            excluded = set(demand.get("excluded_shapes", [])) | out.get(did, set())
            left = shapes_of.get(str(demand["model"]), set()) - excluded - {short.shape}
            if left:
                out.setdefault(did, set()).add(short.shape)
    return out


def _scenario_level(scenario: str) -> int:
    """The promise level a scenario judges: 0 all up, 1 one replica lost, 2 a zone lost."""
    if scenario == ONE_REPLICA:
        return 1
    if scenario.startswith("zone "):
        return 2
    return 0


def _raises(
    report: ReplayReport,
    solution: Mapping[str, Any],
    problem: Problem,
    raised_before: Collection[str] = (),
) -> dict[str, float]:
    """Demand -> factor to raise its burst by, from each pool that misses.

    The pool's floor for the scenario (capacity all up, N+1 with one replica lost, zone
    loss) keeps ``live`` replicas for the load its constraint counts, ``L`` replicas' worth
    at the target utilisation. To keep ``needed_live``, that load must pass
    ``needed_live − 1``: the demands that miss carry the difference, each raised in
    proportion to its own load there. Where the pool's live count was not set by that load
    (``L`` already past the mark), or for a demand raised in an earlier round that still
    misses (the solver moved its load between pools instead), the raise is ``needed ÷ live``.
    The worst pool wins.
    """
    demands = {d.id: d for d in problem.demands}
    loads: dict[tuple[str, str], dict[str, float]] = {}
    for row in solution.get("routing", []):
        demand = demands[str(row["demand"])]
        shape = problem.shape(str(row["shape"]))
        load = (
            float(row["requests_per_s"])
            * problem.request_cost_s(demand, shape)
            / shape.target_utilization
        )
        pool = loads.setdefault((str(row["region"]), shape.name), {})
        pool[demand.id] = pool.get(demand.id, 0.0) + load
    out: dict[str, float] = {}
    for short in report.shortfalls:
        if short.needed_live is None or not short.demands:
            continue
        level = _scenario_level(short.scenario)
        pool = loads.get((short.region, short.shape), {})
        counted = sum(v for did, v in pool.items() if demands[did].promise_level >= level)
        missing = sum(pool.get(did, 0.0) for did in short.demands)
        mark = short.needed_live - 1 + 0.05
        coarse = short.needed_live / max(short.live, 1)
        if short.live <= 0:
            # A zone holding every replica of the pool: only more load spreads it.
            coarse = max(coarse, 2.0)
        precise = coarse
        if short.live > 0 and missing > 0 and short.live - 1 <= counted < mark:
            precise = 1.0 + (mark - counted) / missing
        for did in short.demands:
            factor = max(MIN_RAISE, coarse if did in raised_before else precise)
            out[did] = max(out.get(did, 1.0), factor)
    return out


def solve_verified(
    problem: Mapping[str, Any],
    traffic: Mapping[str, Traffic] | None = None,
    *,
    time_limit_s: float = 60.0,
    workers: int = 2,
    seed: int = 0,
    backend: BackendName = DEFAULT_BACKEND,
    max_rounds: int = MAX_ROUNDS,
    solver: Callable[[Mapping[str, Any], float], dict[str, Any]] | None = None,
    resolve_share: float = RESOLVE_SHARE,
) -> Verified:
    """Solve ``problem`` (the ``placement-problem/v1`` dict), replay, re-solve (module doc).

    A re-solve starts from the round before it (its replicas as ``previous``: the raise is a
    small change of that plan) with ``resolve_share`` of the time limit; the problem returned
    keeps the caller's own ``previous``. ``solver`` replaces ``planner.placement.solve`` (a
    caller's wrapper of it): it takes the problem and a time limit and returns the solution.
    """

    def solve_one(document: Mapping[str, Any], limit_s: float) -> dict[str, Any]:
        if solver is not None:
            return solver(document, limit_s)
        return solve(document, time_limit_s=limit_s, workers=workers, seed=seed, backend=backend)

    current = copy.deepcopy(dict(problem))
    rounds: list[Round] = []
    solution: dict[str, Any] = {}
    judged = any(d.get("ttft_slo_s") is not None for d in current.get("demands", []))
    while True:
        started = time.perf_counter()
        if rounds:
            start = [
                {"zone": r["zone"], "shape": r["shape"], "replicas": r["replicas"]}
                for r in solution.get("replicas", [])
            ]
            solution = solve_one(
                {**current, "previous": start}, max(0.5, time_limit_s * resolve_share)
            )
        else:
            solution = solve_one(current, time_limit_s)
        solved_s = time.perf_counter() - started
        if solution["status"] == "invalid" or not judged:
            rounds.append(Round(float(solution.get("cost_per_hour") or 0.0), True, solved_s, 0.0))
            return Verified(current, solution, None, tuple(rounds))
        parsed = parse_problem(current)  # valid: solve() accepted it
        report = replay(parsed, solution, traffic, seed=seed)
        earlier = {did for r in rounds for did in r.raised}
        raises = {} if report.holds else _raises(report, solution, parsed, earlier)
        excludes = {} if report.holds else _exclusions(report, current)
        rounds.append(
            Round(
                float(solution["cost_per_hour"]),
                report.holds,
                solved_s,
                report.seconds,
                raises,
                excludes,
            )
        )
        if report.holds or not (raises or excludes) or len(rounds) > max_rounds:
            return Verified(current, solution, report, tuple(rounds))
        for demand in current["demands"]:
            shapes = excludes.get(str(demand["id"]))
            if shapes:
                demand["excluded_shapes"] = sorted(set(demand.get("excluded_shapes", [])) | shapes)
            factor = raises.get(str(demand["id"]))
            if factor is None:
                continue
            before = float(demand.get("burst", 1.0))
            demand.setdefault("burst_before_replay", before)
            raised = before * factor
            demand["burst"] = float(f"{raised:.6g}") if math.isfinite(raised) else before
