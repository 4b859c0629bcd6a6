"""``solve``: the placement of ``placement-v1``, stage by stage, as the spec orders it.

1. least unserved, one priority level at a time, most important first, each followed by
   max-min fairness of the served fractions within that level (only under shortage);
2. least cost per hour;
3. least change from ``previous`` (when given), then least spill (Σ x · rtt).

Each stage is a MIP over the same model (``model.py``) with the earlier stages' optima
added as rows. The problem is first split into independent components (regions linked by
demands that may use them); each is solved alone within its share of the time limit.

Every plan the solver accepts is checked with float arithmetic against the real-valued
rows (``plan_violations``); a solver answer that only holds within solver tolerance is
refused and the previous plan kept. The first plan is the constructive start
(``start.py``), so a valid problem always gets a plan, even if the time limit strikes
before any solve finishes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from planner.placement.binding import binding_sentences
from planner.placement.linear import Backend, BackendName, Outcome, make_backend
from planner.placement.model import Instance, PlacementModel, Plan, plan_violations
from planner.placement.problem import Problem, ProblemInvalid, parse_problem
from planner.placement.start import constructive_plan

SOLUTION_FORMAT: Final = "placement-solution/v1"
DEFAULT_BACKEND: Final[BackendName] = "highs"

# A stage's optimum is fixed for the later stages with this relative slack: float noise,
# far below any difference between two real plans.
FIX_SLACK: Final = 1e-9
# Served fractions closer than this are one fairness level.
FAIRNESS_STEP: Final = 1e-6
# Share of a component's remaining time a stage may use before the cost stage runs (the
# cost stage gets the bulk; the tie-break stages what is left).
UNSERVED_SHARE: Final = 0.3
COST_SHARE: Final = 0.8


@dataclass
class _Progress:
    """What a component's stages proved, for the solution's status and gap."""

    proven: bool = True
    cost: float = 0.0
    cost_bound: float = 0.0
    unserved_gap: float | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)


class _Stages:
    """The lexicographic stages on one component's model."""

    def __init__(
        self,
        model: PlacementModel,
        *,
        deadline: float,
        workers: int,
        seed: int,
        backend: BackendName,
    ) -> None:
        self.model = model
        self.deadline = deadline
        self.progress = _Progress()
        self._workers = workers
        self._seed = seed
        self._backend_name = backend
        self._backend: Backend | None = None
        self.plan = self._start()

    # --- helpers ------------------------------------------------------------------------
    def _start(self) -> Plan:
        m = self.model
        fresh = constructive_plan(m)
        if not m.previous:
            return fresh
        kept = constructive_plan(m, keep=m.previous)
        return min((fresh, kept), key=self._rank)

    def _rank(self, plan: Plan) -> tuple[float, ...]:
        """Lexicographic key of a plan: unserved per priority, cost, change, spill."""
        m = self.model
        priorities = sorted({m.instance.demands[di].priority for di in m.demands})
        key = [
            m.objective_value(m.unserved_objective(self._demands_at(p)), plan) for p in priorities
        ]
        key.append(m.objective_value(m.cost_objective(), plan))
        key.append(m.objective_value(m.change_objective(), plan))
        key.append(m.objective_value(m.spill_objective(), plan))
        return tuple(key)

    def _demands_at(self, priority: int) -> list[int]:
        return [
            di for di in self.model.demands if self.model.instance.demands[di].priority == priority
        ]

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = make_backend(
                self.model.lm, self._backend_name, workers=self._workers, seed=self._seed
            )
        return self._backend

    def _time_left(self) -> float:
        return self.deadline - time.perf_counter()

    def _run(
        self, name: str, objective: Mapping[int, float], *, maximize: bool, share: float
    ) -> Outcome | None:
        """Solve one stage with ``share`` of the time left; None when no time is left."""
        left = self._time_left()
        if left <= 0.01:
            self.progress.proven = False
            return None
        hint = self.model.values_from_plan(self.plan)
        outcome = self.backend.solve(
            objective, maximize=maximize, time_limit_s=left * share, hint=hint
        )
        self.progress.stage_seconds[name] = (
            self.progress.stage_seconds.get(name, 0.0) + outcome.seconds
        )
        if not outcome.proven_optimal:
            self.progress.proven = False
        return outcome

    def _accept(
        self, outcome: Outcome | None, objective: Mapping[int, float], maximize: bool
    ) -> float:
        """Take the solver's plan if it is exact and better; return the kept plan's value."""
        m = self.model
        current = m.objective_value(objective, self.plan)
        if outcome is None or outcome.values is None:
            return current
        candidate = m.plan_from_values(outcome.values)
        if plan_violations(m.instance, candidate):
            # Only within solver tolerance: keep the exact plan we have.
            self.progress.proven = False
            return current
        value = m.objective_value(objective, candidate)
        better = value > current if maximize else value < current
        if better or value == current:
            self.plan = candidate
            return value
        return current

    def _fix(self, objective: Mapping[int, float], value: float) -> None:
        """Keep later stages at this stage's value (``Σ coef·var ≤ value``, with slack)."""
        if not objective:
            return
        slack = FIX_SLACK * max(1.0, abs(value), sum(abs(c) for c in objective.values()) * 1e-3)
        self.backend.add_row(list(objective.items()), -math.inf, value + slack)

    # --- stages -------------------------------------------------------------------------
    def run(self) -> Plan:
        m = self.model
        if not m.route_ids and not m.blocks:
            return self.plan
        self._unserved_stages()
        cost = m.cost_objective()
        outcome = self._run("cost", cost, maximize=False, share=COST_SHARE)
        best = self._accept(outcome, cost, maximize=False)
        self.progress.cost = best
        bound = best
        if outcome is not None and outcome.bound is not None and not outcome.proven_optimal:
            bound = min(best, outcome.bound)
        self.progress.cost_bound = bound
        self._fix(cost, best)
        change = m.change_objective()
        if change:
            outcome = self._run("change", change, maximize=False, share=0.5)
            self._fix(change, self._accept(outcome, change, maximize=False))
        spill = m.spill_objective()
        if spill:
            outcome = self._run("spill", spill, maximize=False, share=1.0)
            self._accept(outcome, spill, maximize=False)
        return self.plan

    def _unserved_stages(self) -> None:
        m = self.model
        priorities = sorted({m.instance.demands[di].priority for di in m.demands})
        for p in priorities:
            demands = self._demands_at(p)
            objective = m.unserved_objective(demands)
            current = m.objective_value(objective, self.plan)
            if current > 0:
                outcome = self._run("unserved", objective, maximize=False, share=UNSERVED_SHARE)
                current = self._accept(outcome, objective, maximize=False)
                if outcome is not None and not outcome.proven_optimal and current > 0:
                    bound = outcome.bound if outcome.bound is not None else 0.0
                    gap = (current - max(0.0, bound)) / current
                    self.progress.unserved_gap = max(self.progress.unserved_gap or 0.0, gap)
            if current <= 0:
                for di in demands:
                    self.backend.set_upper_bound(m.v[di], 0.0)
                continue
            self._fix(objective, current)
            self._fair_shares(demands)

    def _fair_shares(self, demands: Sequence[int]) -> None:
        """Max-min fair served fractions within one priority (leximin by water-filling).

        Raise the smallest served fraction ``t`` as far as it goes; then find the demands
        that can still get more than ``t`` while no one drops below it (one solve that
        maximises each one's excess, capped); the rest stay at ``t``; repeat with the rest.
        """
        m = self.model
        backend = self.backend
        open_ = [di for di in demands if m.instance.routes_of[di]]
        while open_ and self._time_left() > 0.01:
            t = backend.add_var(0.0, 1.0, integer=False, name="fair-level")
            for di in open_:
                # served = 1 − v ≥ t
                backend.add_row([(m.v[di], -1.0), (t, -1.0)], -1.0, math.inf)
            outcome = self._run("fairness", {t: 1.0}, maximize=True, share=UNSERVED_SHARE)
            level = self._served_min(open_)
            if outcome is not None and outcome.values is not None:
                candidate = m.plan_from_values(outcome.values[: m.lm.num_vars])
                if not plan_violations(m.instance, candidate) and (
                    self._served_min(open_, candidate) > level and self._keeps_earlier(candidate)
                ):
                    self.plan = candidate
                    level = self._served_min(open_)
            # Nobody in this priority drops below the level from here on.
            backend.add_row([(t, 1.0)], level - FIX_SLACK, math.inf)
            if level >= 1.0 - FAIRNESS_STEP:
                return
            # Which demands can rise above the level?
            excess = {}
            for di in open_:
                w = backend.add_var(0.0, FAIRNESS_STEP * 100, integer=False, name="excess")
                # w ≤ served − level = 1 − v − level
                backend.add_row([(w, 1.0), (m.v[di], 1.0)], -math.inf, 1.0 - level)
                excess[di] = w
            outcome = self._run(
                "fairness", {w: 1.0 for w in excess.values()}, maximize=True, share=UNSERVED_SHARE
            )
            free: set[int] = set()
            if outcome is not None and outcome.values is not None:
                free = {di for di, w in excess.items() if outcome.values[w] > FAIRNESS_STEP}
            for w in excess.values():
                backend.set_upper_bound(w, 0.0)
            stuck = [di for di in open_ if di not in free]
            if not stuck:  # numerically everyone can rise: freeze the lowest to progress
                stuck = [min(open_, key=lambda di: (self._served(di), di))]
            for di in stuck:
                backend.add_row([(m.v[di], -1.0)], level - 1.0 - FIX_SLACK, math.inf)
            open_ = [di for di in open_ if di not in stuck]

    def _served(self, di: int, plan: Plan | None = None) -> float:
        p = plan or self.plan
        return sum(p.share.get(ri, 0.0) for ri in self.model.instance.routes_of[di])

    def _served_min(self, demands: Sequence[int], plan: Plan | None = None) -> float:
        return min((self._served(di, plan) for di in demands), default=1.0)

    def _keeps_earlier(self, candidate: Plan) -> bool:
        """A fairness move must not serve less in total at any priority already settled."""
        m = self.model
        for p in sorted({m.instance.demands[di].priority for di in m.demands}):
            objective = m.unserved_objective(self._demands_at(p))
            if (
                m.objective_value(objective, candidate)
                > m.objective_value(objective, self.plan) * (1 + FIX_SLACK) + FIX_SLACK
            ):
                return False
        return True


def _invalid(error: ProblemInvalid, started: float) -> dict[str, Any]:
    return {
        "format": SOLUTION_FORMAT,
        "status": "invalid",
        "field": error.argument,
        "message": f"{error.argument}: {error.message}",
        "solve_seconds": round(time.perf_counter() - started, 3),
    }


def _size(model_size: tuple[tuple[str, ...], tuple[int, ...]], instance: Instance) -> int:
    regions, demands = model_size
    return 1 + len(regions) + sum(len(instance.routes_of[di]) for di in demands)


def solve_instance(
    instance: Instance,
    *,
    time_limit_s: float,
    workers: int,
    seed: int,
    backend: BackendName = DEFAULT_BACKEND,
    started: float | None = None,
) -> tuple[Plan, _Progress]:
    """Solve every component of ``instance``; returns the merged plan and what was proven."""
    t0 = time.perf_counter() if started is None else started
    deadline = t0 + time_limit_s
    parts = instance.components()
    sizes = [_size(part, instance) for part in parts]
    merged = Plan(replicas={}, share={})
    total = _Progress(unserved_gap=None)
    for i, (regions, demands) in enumerate(parts):
        left = max(0.0, deadline - time.perf_counter())
        budget = left * sizes[i] / sum(sizes[i:])
        model = PlacementModel(instance, regions, demands)
        stages = _Stages(
            model,
            deadline=time.perf_counter() + budget,
            workers=workers,
            seed=seed,
            backend=backend,
        )
        plan = stages.run()
        merged.replicas.update(plan.replicas)
        merged.share.update(plan.share)
        p = stages.progress
        total.proven = total.proven and p.proven
        total.cost += p.cost
        total.cost_bound += p.cost_bound
        if p.unserved_gap is not None:
            total.unserved_gap = max(total.unserved_gap or 0.0, p.unserved_gap)
        for k, v in p.stage_seconds.items():
            total.stage_seconds[k] = total.stage_seconds.get(k, 0.0) + v
    return merged, total


def solution_dict(
    instance: Instance, plan: Plan, progress: _Progress, *, seconds: float
) -> dict[str, Any]:
    """The spec's solution dict for ``plan``."""
    problem = instance.problem
    replicas = [
        {"zone": z, "shape": s, "replicas": n}
        for (z, s), n in sorted(plan.replicas.items())
        if n > 0
    ]
    cost = sum(
        n * problem.replica_price_per_hour(z, problem.shape(s))
        for (z, s), n in plan.replicas.items()
    )
    routing: list[dict[str, Any]] = []
    unserved: list[dict[str, Any]] = []
    for di, demand in enumerate(instance.demands):
        rate = demand.planned_requests_per_s
        served = 0.0
        for ri in instance.routes_of[di]:
            share = plan.share.get(ri, 0.0)
            if share > 0:
                route = instance.routes[ri]
                routing.append(
                    {
                        "demand": demand.id,
                        "region": route.region,
                        "shape": route.shape,
                        "requests_per_s": share * rate,
                    }
                )
                served += share
        left = max(0.0, 1.0 - served) * rate
        if left > 0:
            unserved.append(
                {
                    "demand": demand.id,
                    "tenant": demand.tenant,
                    "priority": demand.priority,
                    "requests_per_s": left,
                }
            )
    status = "optimal" if progress.proven else "feasible"
    if progress.unserved_gap is not None and progress.unserved_gap > 0:
        gap = progress.unserved_gap
    elif progress.proven or progress.cost <= 0:
        gap = 0.0
    else:
        gap = max(0.0, (progress.cost - progress.cost_bound) / progress.cost)
    return {
        "format": SOLUTION_FORMAT,
        "status": status,
        "cost_per_hour": cost,
        "unserved_requests_per_s": sum(row["requests_per_s"] for row in unserved),
        "solve_seconds": round(seconds, 3),
        "gap": gap,
        "replicas": replicas,
        "routing": routing,
        "unserved": unserved,
        "binding": binding_sentences(instance, plan),
    }


def solve(
    problem: Mapping[str, Any] | Problem,
    *,
    time_limit_s: float = 60.0,
    workers: int = 2,
    seed: int = 0,
    backend: BackendName = DEFAULT_BACKEND,
) -> dict[str, Any]:
    """Place replicas and route every demand per ``placement-v1``; the spec's solution dict.

    ``time_limit_s`` bounds the whole solve in seconds; on expiry the best plan found is
    returned with status ``feasible`` and its ``gap``. ``workers`` and ``seed`` are passed to
    the MIP solver; a fixed pair gives the same plan for the same problem whenever the solve
    finishes within the limit. An invalid problem gives status ``invalid`` (never raises).
    """
    started = time.perf_counter()
    try:
        parsed = problem if isinstance(problem, Problem) else parse_problem(problem)
    except ProblemInvalid as error:
        return _invalid(error, started)
    instance = Instance.build(parsed)
    plan, progress = solve_instance(
        instance,
        time_limit_s=time_limit_s,
        workers=workers,
        seed=seed,
        backend=backend,
        started=started,
    )
    return solution_dict(instance, plan, progress, seconds=time.perf_counter() - started)
