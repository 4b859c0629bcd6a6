"""``solve``: the placement of ``placement-v1``, stage by stage, as the spec orders it.

1. least unserved, one priority level at a time, most important first, each followed by
   max-min fairness of the served fractions within that level (only under shortage);
2. least cost per hour;
3. least change from ``previous`` (when given), then least spill (Σ x · rtt).

Each stage is a MIP over the same model (``model.py``) with the earlier stages' optima
added as rows. The problem is first split into independent parts ((region, model) cells
linked by demands that may use them); parts are solved side by side, each in a forked
process of its own within its share of the time limit, and merged (docs/placement.md).

Every plan the solver accepts is checked with float arithmetic against the real-valued
rows (``plan_violations``); a solver answer that only holds within solver tolerance is
refused and the previous plan kept. The first plan is the constructive start
(``start.py``), so a valid problem always gets a plan, even if the time limit strikes
before any solve finishes.
"""

from __future__ import annotations

import itertools
import logging
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from planner.errors import PlannerInputError, PlannerSolverError
from planner.placement.binding import binding_sentences
from planner.placement.decompose import (
    bound_rows,
    captive_bounds,
    home_plan,
    inventory_repair,
    relaxation,
    relaxed_plan,
    repair_plan,
)
from planner.placement.linear import OPTIMALITY_GAP, Backend, BackendName, Outcome, make_backend
from planner.placement.model import (
    ROW_TOLERANCE,
    Instance,
    Part,
    PlacementModel,
    Plan,
    Site,
    SplitFailed,
    plan_rank,
    plan_violations,
    resplit,
    sites,
)
from planner.placement.problem import SOLUTION_FORMAT, Problem, ProblemInvalid, parse_problem
from planner.placement.start import constructive_plan

_log = logging.getLogger(__name__)

DEFAULT_BACKEND: Final[BackendName] = "highs"
# Where parts side by side are solved: forked processes of this machine, or Ray tasks
# (``remote.py``; a local Ray or a cluster).
Executor = Literal["process", "ray"]
EXECUTORS: Final[tuple[Executor, ...]] = ("process", "ray")

# A stage's optimum is kept for the later stages with a relative slack. A row of whole
# variables only (cost, change) is exact at its optimum, so float noise is all it needs; a
# row with routing shares needs room above the solvers' 1e-9 feasibility tolerance, or a
# pile of such rows at that tolerance reads as infeasible to the solver. Both are far below
# any difference that matters between two plans.
FIX_SLACK: Final = 1e-9
FIX_SLACK_SHARES: Final = 1e-7
# Served fractions closer than this are one fairness level.
FAIRNESS_STEP: Final = 1e-6
# Share of a part's remaining time an unserved or fairness solve may use, and the cost
# stage's share (the tie-break stages get what is left, see TIE_BREAK_MIN_S).
UNSERVED_SHARE: Final = 0.3
COST_SHARE: Final = 0.9
# Share of the time left that the captive-region bounds may take before the cost stage.
CAPTIVE_SHARE: Final = 0.1
# A part with more routes than this is large: it starts from the home plan (HOME_SHARE of
# the time left) and solves its linear relaxation (RELAXATION_SHARE); its full solve gets
# LARGE_COST_SHARE of the time left, and if that stops short of optimal, the MIP on the
# blocks the relaxation opens gets RELAXED_SHARE of what is then left (decompose.py).
LARGE_PART_ROUTES: Final = 3000
# A part with more routes than this is huge: its full MIP is not tried (HiGHS spends such a
# part's time in root cut rounds, which no node count stops: on 1,000 x 24 the parts of
# 14,000-16,000 routes had not left the root after 30 s); after the home start and the
# relaxation, the MIP on the blocks the relaxation opens gets HUGE_RELAXED_SHARE of the time
# left, and that is its plan. Its captive-region bounds are not computed: its relaxation
# bounds it better, sooner. Only the routing LP (seconds) follows the restricted MIP, which
# so may take all but HUGE_RELAXED_SHARE's rest of the time.
HUGE_PART_ROUTES: Final = 10_000
HUGE_RELAXED_SHARE: Final = 0.95
# Its MIPs stop once within this of their own bound, or (the home start's region MIPs)
# after HUGE_HOME_NODES nodes, within HUGE_HOME_SHARE of the time: sooner, and at the same
# plan however loaded the machine is and wherever the part is solved, where the clock would
# stop them at a plan that depends on the load.
HUGE_RELAXED_GAP: Final = 0.002
HUGE_HOME_SHARE: Final = 0.3
HUGE_HOME_NODES: Final = 1000
# A huge part's relaxation is its bound and its guide: it may take this share (not
# RELAXATION_SHARE) of the time left; it stops when solved.
HUGE_RELAXATION_SHARE: Final = 0.5
# A problem with a huge part keeps this share of its time for repairing the merged plan
# where the parts together overfill an inventory (``decompose.inventory_repair``).
HUGE_REPAIR_SHARE: Final = 0.2
HOME_SHARE: Final = 0.1
RELAXATION_SHARE: Final = 0.2
LARGE_COST_SHARE: Final = 0.9
RELAXED_SHARE: Final = 0.9
# A part solved again after a failed split first repairs the uncoupled plans (the MIP with
# the replicas outside the coupled regions held), with this share of its time.
COUPLED_HINT_SHARE: Final = 0.4
# Before the first round, each part's linear relaxation (everyone served) says how many
# GPUs of each (region, accelerator) the uncoupled plans will want; where the parts
# together want more than this share of the region's inventory, the pair is coupled from
# the start rather than after a whole round whose plans do not fit. Only on problems of at
# most COUPLING_CHECK_ROUTES routes (a model per part is built in this process), within
# COUPLING_CHECK_SHARE of the time.
COUPLING_CHECK_SHARE: Final = 0.1
COUPLING_CHECK_ROUTES: Final = 12_000
COUPLING_CHECK_FILL: Final = 0.5
# Work limits. Every MIP stage stops at its gap or after this many branch-and-bound nodes,
# whichever comes first; its share of the clock is only the safety net. Where the clock
# stops a MIP, the plan depends on how loaded the machine is and where the part runs; where
# the node count does, the plan is the same on any machine, in a forked process or on Ray.
# Calibrated so that, on 2 cores at the default 60 s, no stage of the hard family nor of
# 1,000 x 24 reaches the clock (docs/benchmarks.md): on those parts' full MIPs COST_NODES
# took 13-32 s (root included) of the 41-52 s the stage may use; a spill tie-break explored
# 5 nodes/s.
CAPTIVE_NODES: Final = 1000
HOME_NODES: Final = 1000
COST_NODES: Final = 500
RELAXED_NODES: Final = 1000
UNSERVED_NODES: Final = 500
TIE_BREAK_NODES: Final = 50
# The least time a tie-break stage (change, spill) may take, whatever the cost stage took.
TIE_BREAK_MIN_S: Final = 10.0
# Polishing needs this many seconds left per model variable (a fresh model is built).
POLISH_MIN_S_PER_VAR: Final = 1e-4
# Parts solved at once per worker (they share the cores by time; see _solve_parts).
PARTS_PER_WORKER: Final = 4
# Seconds of the time limit kept for merging parts, binding sentences and the solution.
ASSEMBLY_RESERVE_S: Final = 1.0


@dataclass(frozen=True)
class _Limits:
    """The part sizes (routes) and node limits a part is solved with, as the caller read
    them: a Ray worker solves the part as the caller would, whatever its own import says."""

    large_routes: int
    huge_routes: int
    captive_nodes: int
    home_nodes: int
    cost_nodes: int
    relaxed_nodes: int
    unserved_nodes: int
    tie_break_nodes: int

    @classmethod
    def read(cls) -> _Limits:
        return cls(
            large_routes=LARGE_PART_ROUTES,
            huge_routes=HUGE_PART_ROUTES,
            captive_nodes=CAPTIVE_NODES,
            home_nodes=HOME_NODES,
            cost_nodes=COST_NODES,
            relaxed_nodes=RELAXED_NODES,
            unserved_nodes=UNSERVED_NODES,
            tie_break_nodes=TIE_BREAK_NODES,
        )


@dataclass
class _Progress:
    """What a part's stages proved, for the solution's status and gap ($/hour)."""

    proven: bool = True
    cost: float = 0.0
    cost_bound: float = 0.0
    unserved_gap: float | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)


class _Stages:
    """The lexicographic stages on one part's model; ``plan`` is always exact."""

    def __init__(
        self,
        model: PlacementModel,
        start: Plan,
        *,
        deadline: float,
        workers: int,
        seed: int,
        backend: BackendName,
        hint: Plan | None = None,
        floors: Sequence[tuple[frozenset[tuple[str, str]], float]] = (),
        limits: _Limits,
    ) -> None:
        self.model = model
        self._limits = limits
        self.deadline = deadline
        # Solved again after coupling: the uncoupled plan of its cells (not inventory-exact)
        # and the cost bounds the uncoupled parts it joins proved (solve_instance).
        self._hint = hint
        self._floors = tuple(floors)
        self.progress = _Progress()
        self._workers = workers
        self._seed = seed
        self._backend_name = backend
        self._backend: Backend | None = None
        self.plan = start
        # Served fraction each demand of a short priority was settled at by fairness.
        self.levels: dict[int, float] = {}
        # While polishing: a model with the replicas fixed, where the stages are LPs.
        self._polished: Backend | None = None
        # A large part's linear relaxation: its optimum (a cost bound) and its values.
        self._relaxed_bound: float | None = None
        self._relaxed: tuple[float, ...] | None = None

    # --- helpers ------------------------------------------------------------------------
    def _demands_at(self, priority: int) -> list[int]:
        return [
            di for di in self.model.demands if self.model.instance.demands[di].priority == priority
        ]

    @property
    def backend(self) -> Backend:
        if self._polished is not None:
            return self._polished
        if self._backend is None:
            self._backend = make_backend(
                self.model.lm, self._backend_name, workers=self._workers, seed=self._seed
            )
        return self._backend

    def _log_stage(self, name: str, cost: Mapping[int, float]) -> None:
        if not _log.isEnabledFor(logging.DEBUG):
            return  # the plan's cost is a sum over the whole part: not for nothing
        _log.debug(
            "part of %d routes: %s stage in %.2f s, plan cost %.4f, bound %s",
            len(self.model.route_ids),
            name,
            self.progress.stage_seconds.get(name, 0.0),
            self.model.objective_value(cost, self.plan),
            self._relaxed_bound,
        )

    def _time_left(self) -> float:
        return self.deadline - time.perf_counter()

    def _run(
        self,
        name: str,
        objective: Mapping[int, float],
        *,
        maximize: bool,
        share: float,
        cap_s: float = math.inf,
        node_limit: int | None = None,
    ) -> Outcome | None:
        """Solve one stage with ``share`` of the time left (at most ``cap_s``) and at most
        ``node_limit`` nodes; None when no time is left."""
        left = self._time_left()
        if left <= 0.01:
            self.progress.proven = False
            return None
        hint = self.model.values_from_plan(self.plan)
        outcome = self.backend.solve(
            objective,
            maximize=maximize,
            time_limit_s=min(left * share, cap_s),
            hint=hint,
            node_limit=node_limit,
        )
        self.progress.stage_seconds[name] = (
            self.progress.stage_seconds.get(name, 0.0) + outcome.seconds
        )
        if not outcome.proven_optimal and self._polished is None:
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
        candidate = m.plan_from_values(outcome.values[: m.lm.num_vars])
        if plan_violations(m.instance, candidate):
            # Only within solver tolerance: keep the exact plan we have.
            if self._polished is None:
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
        whole = all(self.model.lm.var_integer[var] for var in objective)
        relative = FIX_SLACK if whole else self._share_slack
        slack = relative * max(1.0, abs(value), sum(abs(c) for c in objective.values()) * 1e-3)
        self.backend.add_row(list(objective.items()), -math.inf, value + slack)

    # --- stages -------------------------------------------------------------------------
    def run(self) -> Plan:
        m = self.model
        if not m.route_ids and not m.h and not m.change_objective():
            self.plan = Plan(replicas={}, share={})  # nothing to serve, nothing to keep
            return self.plan
        all_served = self._unserved_stages()
        cost = m.cost_objective()
        limits = self._limits
        large = all_served and len(m.route_ids) > limits.large_routes
        huge = large and len(m.route_ids) > limits.huge_routes
        captive = self._prepare_cost() if all_served and not huge else 0.0
        if all_served and self._floors:
            captive = max(captive, self._add_floors())
        if all_served and self._hint is not None:
            self._hinted_start(cost)
        if huge:
            self._home_start(
                cost, share=HUGE_HOME_SHARE, gap=HUGE_RELAXED_GAP, node_limit=HUGE_HOME_NODES
            )
            self._relax(cost, share=HUGE_RELAXATION_SHARE)
        elif large:
            self._home_start(cost, node_limit=limits.home_nodes)
            self._relax(cost, share=RELAXATION_SHARE)
        outcome: Outcome | None = None
        if huge:
            self.progress.proven = False
            self._relaxed_start(
                cost, share=HUGE_RELAXED_SHARE, gap=HUGE_RELAXED_GAP, node_limit=None
            )
            best = m.objective_value(cost, self.plan)
        else:
            outcome = self._run(
                "cost",
                cost,
                maximize=False,
                share=LARGE_COST_SHARE if large else COST_SHARE,
                node_limit=limits.cost_nodes,
            )
            best = self._accept(outcome, cost, maximize=False)
            if large and not self.progress.proven:
                self._relaxed_start(cost, node_limit=limits.relaxed_nodes)
                best = m.objective_value(cost, self.plan)
        self.progress.cost = best
        # The proven lower bound on cost: the captive bounds or the relaxation's optimum,
        # whichever is higher, where no solve proved more.
        bound = min(best, max(captive, self._relaxed_bound or 0.0))
        if outcome is not None and outcome.bound is not None:
            bound = min(best, max(bound, outcome.bound))
            if outcome.proven_optimal and outcome.objective is not None:
                bound = min(best, outcome.objective)
        self.progress.cost_bound = bound
        self._fix(cost, best)
        self._hold_hosted()
        spill = m.spill_objective()
        if not self.progress.proven:
            # Time ran out in the cost stage: the tie-breaks get what a linear program with
            # the replicas fixed can do (routing, spill) rather than a MIP with no time.
            self._polish(spill)
            return self.plan
        # A tie-break may take about as long as the cost stage did: a part that holds a
        # worker on its spill stage keeps other parts from their cost stages.
        cap = max(TIE_BREAK_MIN_S, self.progress.stage_seconds.get("cost", 0.0))
        change = m.change_objective()
        if change:
            outcome = self._run(
                "change",
                change,
                maximize=False,
                share=0.5,
                cap_s=cap,
                node_limit=limits.tie_break_nodes,
            )
            self._fix(change, self._accept(outcome, change, maximize=False))
        if spill:
            # The best routing for these replicas first (a linear program), so the spill MIP
            # starts from it; only a different set of replicas can then do better.
            self._polish(spill, keep_proven=True)
            outcome = self._run(
                "spill",
                spill,
                maximize=False,
                share=1.0,
                cap_s=cap,
                node_limit=limits.tie_break_nodes,
            )
            self._accept(outcome, spill, maximize=False)
        if self.levels:
            self._polish(spill, keep_proven=True)
        return self.plan

    def _hold_hosted(self) -> None:
        """Hold the hosted shares where the cost stage put them, for the stages after it.

        The cost row keeps its optimum within ``FIX_SLACK_SHARES`` (it has routing shares
        when hosted overflow is priced in), and a hosted API has no spill: a spill (or
        change) stage free to move load would take that slack to shift a sliver of 1e-6
        to 1e-5 requests/s onto a hosted provider, a row that then reaches finance and the
        gateway's routing weights. The cost stage decides what goes hosted; the tie-breaks
        only re-route among replicas.
        """
        m = self.model
        if not m.h:
            return
        for hi, var in m.h.items():
            self.backend.fix(var, self.plan.hosted.get(hi, 0.0))

    def _prepare_cost(self) -> float:
        """Captive-region cuts before the cost solve; returns their sum, a cost bound.

        Only while everyone is to be served (``decompose.captive_bounds``).
        """
        m = self.model
        t0 = time.perf_counter()
        bounds = captive_bounds(
            m,
            deadline=t0 + self._time_left() * CAPTIVE_SHARE,
            workers=self._workers,
            seed=self._seed,
            backend=self._backend_name,
            node_limit=self._limits.captive_nodes,
        )
        for terms, lo in bound_rows(m, bounds):
            self.backend.add_row(terms, lo, math.inf)
        self.progress.stage_seconds["captive"] = time.perf_counter() - t0
        return sum(b for _, b in bounds)

    def _add_floors(self) -> float:
        """Rows ``Σ_{blocks of cells} price · N ≥ bound`` for each uncoupled part's proven
        cost bound; returns their sum, a cost bound of this part.

        Coupling only adds inventory rows, and the demands of an uncoupled part may use its
        cells only, so its bound holds for those cells here too.
        """
        m = self.model
        total = 0.0
        for cells, bound in self._floors:
            terms = [
                term
                for (r, _s), b in sorted(m.blocks.items())
                if (r, b.shape.model) in cells
                for term in b.count_terms(b.price)
            ]
            if terms and bound > 0:
                self.backend.add_row(terms, bound * (1 - 1e-9) - 1e-9, math.inf)
                total += bound
        return total

    def _hinted_start(self, cost: Mapping[int, float]) -> None:
        """After a failed split: the uncoupled plan repaired in the coupled regions
        (``decompose.repair_plan``), when cheaper than the start."""
        m = self.model
        assert self._hint is not None
        t0 = time.perf_counter()
        candidate = repair_plan(
            m,
            self._hint,
            cost,
            regions=frozenset(r for r, _a in m.coupled),
            deadline=t0 + self._time_left() * COUPLED_HINT_SHARE,
            workers=self._workers,
            seed=self._seed,
            backend=self._backend_name,
        )
        if (
            candidate is not None
            and m.objective_value(cost, candidate) < m.objective_value(cost, self.plan)
            and self._keeps_earlier(candidate)
        ):
            self.plan = candidate
        self.progress.stage_seconds["coupled-hint"] = time.perf_counter() - t0

    def _home_start(
        self,
        cost: Mapping[int, float],
        *,
        share: float = HOME_SHARE,
        gap: float = OPTIMALITY_GAP,
        node_limit: int | None = None,
    ) -> None:
        """A large part starts from the home plan when that is cheaper (decompose.py)."""
        m = self.model
        t0 = time.perf_counter()
        home = home_plan(
            m,
            deadline=t0 + self._time_left() * share,
            workers=self._workers,
            seed=self._seed,
            backend=self._backend_name,
            gap=gap,
            node_limit=node_limit,
        )
        if home is not None and m.objective_value(cost, home) < m.objective_value(cost, self.plan):
            self.plan = home
        self.progress.stage_seconds["home"] = time.perf_counter() - t0
        self._log_stage("home", cost)

    def _relax(self, cost: Mapping[int, float], *, share: float) -> None:
        """A large part's linear relaxation: a cost bound, and where to look later."""
        t0 = time.perf_counter()
        self._relaxed_bound, self._relaxed = relaxation(
            self.model,
            cost,
            time_limit_s=self._time_left() * share,
            workers=self._workers,
            seed=self._seed,
            backend=self._backend_name,
        )
        self.progress.stage_seconds["relaxation"] = time.perf_counter() - t0
        self._log_stage("relaxation", cost)

    def _relaxed_start(
        self,
        cost: Mapping[int, float],
        *,
        share: float = RELAXED_SHARE,
        gap: float = OPTIMALITY_GAP,
        node_limit: int | None = None,
    ) -> None:
        """After an unfinished full solve (or instead of it, for a huge part): the MIP on
        the blocks the relaxation opens (``decompose.relaxed_plan``), when cheaper."""
        if self._relaxed is None:
            return
        t0 = time.perf_counter()
        relaxed = relaxed_plan(
            self.model,
            self.plan,
            cost,
            self._relaxed,
            deadline=t0 + self._time_left() * share,
            gap=gap,
            workers=self._workers,
            seed=self._seed,
            backend=self._backend_name,
            node_limit=node_limit,
        )
        if relaxed is not None and self._keeps_earlier(relaxed):
            self.plan = relaxed
        self.progress.stage_seconds["relaxed"] = time.perf_counter() - t0
        self._log_stage("relaxed", cost)

    def _polish(self, spill: Mapping[int, float], *, keep_proven: bool = False) -> None:
        """Route the short priorities again with every replica count fixed.

        The MIP stages after fairness keep its levels only within ``FIX_SLACK_SHARES`` (a
        pile of tighter rows reads as infeasible to a MIP solver), so their routing can
        drift by 1e-7: 0.9999998 served where fairness gave 1. With the replicas fixed,
        unserved per priority, fairness and spill are linear programs, solved here again
        on a fresh model with float-noise slack only; their vertex answers are clean. A
        polished plan is kept only if it is exact and serves every priority as well.
        """
        m = self.model
        # Building a second model of a large part takes a while; not in the last moments.
        if self._time_left() < POLISH_MIN_S_PER_VAR * m.lm.num_vars:
            return
        polished = make_backend(m.lm, self._backend_name, workers=self._workers, seed=self._seed)
        values = m.values_from_plan(self.plan)
        for var, integer in enumerate(m.lm.var_integer):
            if integer:
                polished.fix(var, values[var])
        # The hosted shares are held too: fixed replicas fix their cost but not the
        # hosted overflow's, and a re-route free to move load to a hosted API (which has no
        # spill) would undo the cost stage.
        for var in m.h.values():
            polished.fix(var, values[var])
        before = self.plan
        proven = self.progress.proven
        # The unserved stages proper reported their gap; a re-route cut short by the clock
        # (with the replicas fixed) says nothing about it.
        unserved_gap = self.progress.unserved_gap
        self._polished = polished
        self.levels = {}
        try:
            self._unserved_stages()
            if spill:
                outcome = self._run("polish", spill, maximize=False, share=1.0)
                self._accept(outcome, spill, maximize=False)
        finally:
            self._polished = None
            self.progress.unserved_gap = unserved_gap
            if keep_proven:
                self.progress.proven = proven
        if not self._keeps_earlier(self.plan, before) or plan_violations(m.instance, self.plan):
            self.plan = before

    def _unserved_stages(self) -> bool:
        """Least unserved per priority, each with fairness; True if everyone is served."""
        m = self.model
        priorities = sorted({m.instance.demands[di].priority for di in m.demands})
        all_served = True
        for p in priorities:
            demands = self._demands_at(p)
            objective = m.unserved_objective(demands)
            current = m.objective_value(objective, self.plan)
            if current > 0:
                outcome = self._run(
                    "unserved",
                    objective,
                    maximize=False,
                    share=UNSERVED_SHARE,
                    node_limit=self._limits.unserved_nodes,
                )
                current = self._accept(outcome, objective, maximize=False)
                if outcome is not None and not outcome.proven_optimal and current > 0:
                    bound = outcome.bound if outcome.bound is not None else 0.0
                    gap = (current - max(0.0, bound)) / current
                    self.progress.unserved_gap = max(self.progress.unserved_gap or 0.0, gap)
            if current <= 0:
                for di in demands:
                    self.backend.set_upper_bound(m.v[di], 0.0)
                continue
            all_served = False
            self._fix(objective, current)
            self._fair_shares(demands)
        return all_served

    def _fair_shares(self, demands: Sequence[int]) -> None:
        """Max-min fair served fractions within one priority (leximin by water-filling).

        Raise the smallest served fraction ``t`` as far as it goes; then find the demands
        that can still get more than ``t`` while no one drops below it (one solve that
        maximises each one's excess, capped); the rest stay at ``t``; repeat with the rest.
        """
        m = self.model
        backend = self.backend
        open_ = [
            di
            for di in demands
            if m.instance.routes_of[di] or (m.instance.hosted_of and m.instance.hosted_of[di])
        ]
        while open_ and self._time_left() > 0.01:
            t = backend.add_var(0.0, 1.0, integer=False, name="fair-level")
            for di in open_:
                # served = 1 − v ≥ t
                backend.add_row([(m.v[di], -1.0), (t, -1.0)], -1.0, math.inf)
            outcome = self._run(
                "fairness",
                {t: 1.0},
                maximize=True,
                share=UNSERVED_SHARE,
                node_limit=self._limits.unserved_nodes,
            )
            level = self._served_min(open_)
            if outcome is not None and outcome.values is not None:
                candidate = m.plan_from_values(outcome.values[: m.lm.num_vars])
                if not plan_violations(m.instance, candidate) and (
                    self._served_min(open_, candidate) > level and self._keeps_earlier(candidate)
                ):
                    self.plan = candidate
                    level = self._served_min(open_)
            # Nobody in this priority drops below the level from here on.
            backend.add_row([(t, 1.0)], level - self._share_slack, math.inf)
            if level >= 1.0 - FAIRNESS_STEP:
                self.levels.update(dict.fromkeys(open_, 1.0))
                return
            # Which demands can rise above the level?
            excess = {}
            for di in open_:
                w = backend.add_var(0.0, FAIRNESS_STEP * 100, integer=False, name="excess")
                # w ≤ served − level = 1 − v − level (with slack: w ≥ 0 makes it a floor)
                backend.add_row(
                    [(w, 1.0), (m.v[di], 1.0)], -math.inf, 1.0 - level + self._share_slack
                )
                excess[di] = w
            outcome = self._run(
                "fairness",
                {w: 1.0 for w in excess.values()},
                maximize=True,
                share=UNSERVED_SHARE,
                node_limit=self._limits.unserved_nodes,
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
                backend.add_row([(m.v[di], -1.0)], level - 1.0 - self._share_slack, math.inf)
                self.levels[di] = level
            open_ = [di for di in open_ if di not in stuck]

    @property
    def _share_slack(self) -> float:
        # A linear program holds an optimum it found itself without slack, and any slack
        # would be taken by the next stage (1e-9 of gold's traffic handed to bronze).
        return 0.0 if self._polished is not None else FIX_SLACK_SHARES

    def _served(self, di: int, plan: Plan | None = None) -> float:
        return self.model.instance.served(di, plan or self.plan)

    def _served_min(self, demands: Sequence[int], plan: Plan | None = None) -> float:
        return min((self._served(di, plan) for di in demands), default=1.0)

    def _keeps_earlier(self, candidate: Plan, than: Plan | None = None) -> bool:
        """``candidate`` serves no priority less in total than ``than`` (the plan held)."""
        m = self.model
        held = than or self.plan
        for p in sorted({m.instance.demands[di].priority for di in m.demands}):
            objective = m.unserved_objective(self._demands_at(p))
            if (
                m.objective_value(objective, candidate)
                > m.objective_value(objective, held) * (1 + FIX_SLACK_SHARES) + FIX_SLACK_SHARES
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


def _size(part: Part, instance: Instance) -> int:
    return 1 + len(part.cells) + sum(len(instance.routes_of[di]) for di in part.demands)


def _restrict(instance: Instance, plan: Plan, part: Part) -> Plan:
    """The piece of a whole-problem ``plan`` that falls in ``part``."""
    problem = instance.problem
    cells = set(part.cells)
    replicas = {
        (z, s): n
        for (z, s), n in plan.replicas.items()
        if (problem.region_of_zone(z), problem.shape(s).model) in cells
    }
    share = {
        ri: plan.share[ri]
        for di in part.demands
        for ri in instance.routes_of[di]
        if ri in plan.share
    }
    hosted = {
        hi: plan.hosted[hi]
        for di in part.demands
        for hi in (instance.hosted_of[di] if instance.hosted_of else ())
        if hi in plan.hosted
    }
    return Plan(replicas=replicas, share=share, hosted=hosted)


def start_plan(instance: Instance, places: Mapping[tuple[str, str], Site]) -> Plan:
    """The constructive start; with a previous plan, the better of fresh and kept."""
    fresh = constructive_plan(instance, places)
    if not instance.previous:
        return fresh
    kept = constructive_plan(instance, places, keep=instance.previous)
    everyone = range(len(instance.demands))
    return min((fresh, kept), key=lambda p: plan_rank(instance, p, everyone))


@dataclass(frozen=True)
class _PartsJob:
    """What every part of one ``_solve_parts`` call is solved from."""

    instance: Instance
    parts: tuple[Part, ...]
    start: Plan
    places: Mapping[tuple[str, str], Site]
    coupled: frozenset[tuple[str, str]]
    workers: int
    seed: int
    backend: BackendName
    limits: _Limits
    # After coupling: the uncoupled parts' merged plan and their proven cost bounds.
    hint: Plan | None = None
    floors: tuple[tuple[frozenset[tuple[str, str]], float], ...] = ()


def _solve_one(job: _PartsJob, index: int, deadline: float) -> tuple[Plan, _Progress]:
    """Solve part ``index`` of ``job`` by ``deadline``: its stages on a fresh model."""
    part = job.parts[index]
    model = PlacementModel(job.instance, part, coupled=set(job.coupled), places=job.places)
    cells = set(part.cells)
    stages = _Stages(
        model,
        _restrict(job.instance, job.start, part),
        deadline=deadline,
        workers=job.workers,
        seed=job.seed,
        backend=job.backend,
        hint=None if job.hint is None else _restrict(job.instance, job.hint, part),
        floors=[(c, b) for c, b in job.floors if c <= cells],
        limits=job.limits,
    )
    return stages.run(), stages.progress


# MathOpt and HiGHS are not safe to use from several threads of one process at once (see
# docs/placement.md, "Concurrency"): in this process parts are solved one at a time, under
# this lock, whoever calls; parts solved side by side each get a process of their own.
_IN_PROCESS = threading.Lock()
# The jobs of the ``_solve_parts`` calls under way, by key; a forked child finds its job
# here (a copy made at the fork), so nothing but the key, a part number and a deadline is
# sent to it, and only the part's plan and progress come back.
_FORKED_JOBS: dict[int, _PartsJob] = {}
_FORKED_KEYS = itertools.count()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held the lock at the fork; it does not exist here.
    global _IN_PROCESS
    _IN_PROCESS = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _solve_forked(key: int, index: int, deadline: float) -> tuple[Plan, _Progress]:
    """In a child process: solve part ``index`` of the job registered under ``key``."""
    with _IN_PROCESS:
        return _solve_one(_FORKED_JOBS[key], index, deadline)


def _solve_on_ray(
    job: _PartsJob, index: int, budget_s: float, wall_deadline: float
) -> tuple[Plan, _Progress]:
    """In a Ray task: solve part ``index`` of ``job`` within its time (``remote.py``)."""
    from planner.placement.remote import deadline_from

    with _IN_PROCESS:
        return _solve_one(job, index, deadline_from(budget_s, wall_deadline))


def _describe(part: Part) -> str:
    models = sorted({model for _region, model in part.cells})
    regions = sorted({region for region, _model in part.cells})
    return f"the part of {', '.join(models)} in {len(regions)} region(s) ({', '.join(regions)})"


def _can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def _solve_parts(
    instance: Instance,
    parts: Sequence[Part],
    start: Plan,
    places: Mapping[tuple[str, str], Site],
    coupled: set[tuple[str, str]],
    *,
    deadline: float,
    workers: int,
    seed: int,
    backend: BackendName,
    hint: Plan | None = None,
    floors: Mapping[frozenset[tuple[str, str]], float] | None = None,
    executor: Executor = "process",
    ray_address: str | None = None,
) -> dict[tuple[tuple[str, str], ...], tuple[Plan, _Progress]]:
    """Solve ``parts``: side by side in child processes, or one at a time in this one.

    Up to ``PARTS_PER_WORKER × workers`` parts run at once, each in a forked process of its
    own, and share the cores by time, so no part waits while another holds a worker on a
    hard solve, and a part that finishes early leaves the cores to the rest (measured
    against one part per worker in docs/placement.md). Parts beyond that wait, and take
    their share (by size) of the time left when they start. A single part, CP-SAT (which
    uses the workers itself) and platforms without ``fork`` solve in this process, one part
    at a time. A part whose solve raises, or whose process dies, raises
    ``PlannerSolverError`` naming the part; ``SplitFailed`` (a part's pooled replicas
    cannot be split over its zones) passes through to the caller, which couples them.

    With ``executor="ray"`` every part is a Ray task instead (``remote.py``), scheduled the
    same way: as many at once, each asking Ray for its share of a CPU, so a local Ray of
    ``workers`` CPUs runs them as the forked processes run. The parts' plans are merged by
    the caller in the parts' order, whichever ends first, so where every part's solve ends
    within its time the plan is the one the processes give.
    """
    on_ray = executor == "ray"
    side_by_side = on_ray or (backend != "cpsat" and len(parts) > 1 and _can_fork())
    lanes = min(len(parts), PARTS_PER_WORKER * max(1, workers)) if side_by_side else 1
    if on_ray and backend == "cpsat":
        lanes = 1  # CP-SAT runs ``workers`` threads of its own: one part at a time
    # Smallest first: when parts must wait, small ones often finish (proven) well inside
    # their share and leave the rest to the large ones.
    order = tuple(sorted(parts, key=lambda p: (_size(p, instance), p.cells)))
    job = _PartsJob(
        instance=instance,
        parts=order,
        start=start,
        places=places,
        coupled=frozenset(coupled),
        workers=workers,
        seed=seed,
        backend=backend,
        hint=hint,
        floors=tuple(sorted((floors or {}).items(), key=lambda kv: sorted(kv[0]))),
        limits=_Limits.read(),
    )
    unfinished = {p.cells: _size(p, instance) for p in order}
    waiting = {p.cells for p in order}

    def part_deadline(part: Part) -> float:
        # A part's share of the time left is set when it starts: its size against every
        # part not yet finished, over as many lanes as they can use; parts that finish
        # early leave their time to the later ones, and the last wave to start (one part
        # per lane, the largest) may use all that is left.
        waiting.discard(part.cells)
        now = time.perf_counter()
        left = max(0.0, deadline - now)
        busy = min(lanes, len(unfinished))
        budget = left * busy * unfinished[part.cells] / sum(unfinished.values())
        if len(waiting) < lanes:
            budget = left
        return min(deadline, now + budget)

    def failed(part: Part, error: BaseException) -> PlannerSolverError:
        return PlannerSolverError(
            f"solving {_describe(part)} failed: {type(error).__name__}: {error}"
        )

    solved: dict[tuple[tuple[str, str], ...], tuple[Plan, _Progress]] = {}
    if not side_by_side:
        for index, part in enumerate(order):
            with _IN_PROCESS:
                try:
                    solved[part.cells] = _solve_one(job, index, part_deadline(part))
                except SplitFailed:
                    raise  # the caller couples the inventories and solves again
                except Exception as error:
                    raise failed(part, error) from error
            del unfinished[part.cells]
        return solved

    if on_ray:
        from planner.placement.remote import RayParts

        ray_parts = RayParts(
            job,
            _solve_on_ray,
            address=ray_address,
            num_cpus=workers,
            task_cpus=1.0 if backend == "cpsat" else 1.0 / PARTS_PER_WORKER,
        )
        try:
            queue = list(enumerate(order))
            tasks: dict[Any, Part] = {}
            while queue or tasks:
                while queue and len(tasks) < lanes:
                    index, part = queue.pop(0)
                    tasks[ray_parts.submit(index, part_deadline(part))] = part
                for ref in ray_parts.wait(list(tasks)):
                    part = tasks.pop(ref)
                    value, raised = ray_parts.result(ref)
                    if raised is not None:
                        ray_parts.cancel(list(tasks))
                        if isinstance(raised, SplitFailed):
                            raise raised
                        raise failed(part, raised) from raised
                    solved[part.cells] = value
                    del unfinished[part.cells]
        finally:
            ray_parts.close()
        return solved

    key = next(_FORKED_KEYS)
    _FORKED_JOBS[key] = job
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=lanes, mp_context=context) as pool:
            queue = list(enumerate(order))
            running: dict[Future[tuple[Plan, _Progress]], Part] = {}
            while queue or running:
                while queue and len(running) < lanes:
                    index, part = queue.pop(0)
                    future = pool.submit(_solve_forked, key, index, part_deadline(part))
                    running[future] = part
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    part = running.pop(future)
                    raised = future.exception()
                    if raised is not None:
                        pool.shutdown(wait=False, cancel_futures=True)
                        if isinstance(raised, SplitFailed):
                            raise raised
                        raise failed(part, raised) from raised
                    solved[part.cells] = future.result()
                    del unfinished[part.cells]
    finally:
        del _FORKED_JOBS[key]
    return solved


def _likely_coupled(
    instance: Instance,
    places: Mapping[tuple[str, str], Site],
    *,
    deadline: float,
    workers: int,
    seed: int,
    backend: BackendName,
) -> set[tuple[str, str]]:
    """(region, accelerator) pairs whose inventory the parts' relaxations overfill.

    Each part's linear relaxation with everyone served (``decompose.relaxation``) pools
    flexible demand where it is cheapest, as the MIP does; its replica counts, rounded up,
    in GPUs, summed over the parts, against ``COUPLING_CHECK_FILL`` of the region's GPUs of
    that accelerator. A part whose relaxation has no answer in time adds nothing.
    """
    if len(instance.routes) > COUPLING_CHECK_ROUTES or not instance.routes:
        return set()
    problem = instance.problem
    inventory: dict[tuple[str, str], int] = {}
    for row in problem.inventory:
        key = (problem.region_of_zone(row.zone), row.accelerator)
        inventory[key] = inventory.get(key, 0) + row.gpus
    wanted: dict[tuple[str, str], float] = {}
    parts = instance.parts()
    with _IN_PROCESS:
        for index, part in enumerate(parts):
            left = deadline - time.perf_counter()
            if left <= 0.05:
                break
            model = PlacementModel(instance, part, places=places)
            _bound, values = relaxation(
                model,
                model.cost_objective(),
                time_limit_s=left / (len(parts) - index),
                workers=workers,
                seed=seed,
                backend=backend,
            )
            if values is None:
                continue
            for (region, _shape), b in model.blocks.items():
                count = sum(values[v] for v, _ in b.count_terms())
                if count > 1e-6:
                    key = (region, b.shape.accelerator)
                    wanted[key] = wanted.get(key, 0.0) + math.ceil(count - 1e-6) * b.shape.gpus
    return {
        key for key, gpus in wanted.items() if gpus > COUPLING_CHECK_FILL * inventory.get(key, 0)
    }


def _too_large_to_join(instance: Instance, coupled: set[tuple[str, str]]) -> bool:
    """Whether coupling ``coupled`` would join parts into one too large to solve again in
    the time (over ``HUGE_PART_ROUTES`` routes); then the merged plan is repaired instead."""
    return any(_size(part, instance) > HUGE_PART_ROUTES for part in instance.parts(coupled))


def _repair(
    instance: Instance,
    places: Mapping[tuple[str, str], Site],
    merged: Plan,
    coupled: set[tuple[str, str]],
    *,
    deadline: float,
    workers: int,
    seed: int,
    backend: BackendName,
) -> Plan | None:
    """The merged plan re-solved where it overfills the inventory (``inventory_repair``),
    again as the re-split finds more pairs that do not fit; None if that does not succeed."""
    keys = set(coupled)
    plan = merged
    with _IN_PROCESS:
        while time.perf_counter() < deadline:
            candidate = inventory_repair(
                instance,
                places,
                plan,
                keys,
                deadline=deadline,
                workers=workers,
                seed=seed,
                backend=backend,
            )
            if candidate is None:
                return None
            zonal_blocks = {
                (r, s) for (r, s) in places if (r, places[(r, s)].shape.accelerator) in keys
            }
            zonal_blocks |= {(instance.problem.region_of_zone(z), s) for z, s in instance.previous}
            try:
                return resplit(instance, places, candidate, zonal_blocks)
            except SplitFailed as failure:
                if failure.keys <= keys:
                    return None
                keys |= failure.keys
                plan = candidate
    return None


def _fallback(instance: Instance, start: Plan) -> _Progress:
    """Progress for returning the constructive start: nothing proven, no bound known."""
    cost = plan_rank(instance, start, range(len(instance.demands)))[-3]
    return _Progress(proven=False, cost=cost, cost_bound=0.0)


def solve_instance(
    instance: Instance,
    *,
    time_limit_s: float,
    workers: int,
    seed: int,
    backend: BackendName = DEFAULT_BACKEND,
    started: float | None = None,
    executor: Executor = "process",
    ray_address: str | None = None,
) -> tuple[Plan, _Progress]:
    """Solve every part of ``instance``; returns the merged plan and what was proven.

    Parts share zone inventory only through pooled splits; where the union of the parts'
    plans does not fit a zone's inventory, the (region, accelerator) is coupled (its
    inventory rows enter the model, joining the parts that use it) and those parts are
    solved again. Should time run out before a consistent plan exists, the constructive
    start (always consistent) is returned.
    """
    t0 = time.perf_counter() if started is None else started
    # Keep a little of the limit for merging the parts and writing the solution.
    deadline = t0 + time_limit_s - min(ASSEMBLY_RESERVE_S, 0.05 * time_limit_s)
    places = sites(instance)
    start = start_plan(instance, places)
    coupled: set[tuple[str, str]] = set()
    if backend == "highs":
        coupled = _likely_coupled(
            instance,
            places,
            deadline=time.perf_counter() + COUPLING_CHECK_SHARE * (deadline - time.perf_counter()),
            workers=workers,
            seed=seed,
            backend=backend,
        )
    solved: dict[tuple[tuple[str, str], ...], tuple[Plan, _Progress]] = {}
    # After a failed split: the uncoupled plans (a hint for the parts solved again) and the
    # cost bounds their parts proved (floors for the parts they join).
    hint: Plan | None = None
    floors: dict[frozenset[tuple[str, str]], float] = {}
    repaired = False
    # Parts too large to join again leave time for repairing their merged plan.
    parts_deadline = deadline
    if _too_large_to_join(instance, coupled):
        parts_deadline -= HUGE_REPAIR_SHARE * (deadline - time.perf_counter())
    while True:
        parts = instance.parts(coupled)
        todo = [p for p in parts if p.cells not in solved]
        merged: Plan | None = None
        try:
            solved.update(
                _solve_parts(
                    instance,
                    todo,
                    start,
                    places,
                    coupled,
                    deadline=parts_deadline,
                    workers=workers,
                    seed=seed,
                    backend=backend,
                    hint=hint,
                    floors=floors,
                    executor=executor,
                    ray_address=ray_address,
                )
            )
            merged = Plan(replicas={}, share={})
            for part in parts:
                plan = solved[part.cells][0]
                merged.replicas.update(plan.replicas)
                merged.share.update(plan.share)
                merged.hosted.update(plan.hosted)
            zonal_blocks = {
                (r, s)
                for (r, s) in places
                if (r, places[(r, s)].shape.accelerator) in coupled
                or any(
                    instance.problem.region_of_zone(z) == r and ps == s
                    for z, ps in instance.previous
                )
            }
            final = resplit(instance, places, merged, zonal_blocks)
            break
        except SplitFailed as failure:
            if failure.keys <= coupled or time.perf_counter() >= deadline:
                return start, _fallback(instance, start)
            if merged is not None and _too_large_to_join(instance, coupled | failure.keys):
                fixed = _repair(
                    instance,
                    places,
                    merged,
                    coupled | failure.keys,
                    deadline=deadline,
                    workers=workers,
                    seed=seed,
                    backend=backend,
                )
                if fixed is None:
                    return start, _fallback(instance, start)
                final, repaired = fixed, True
                break
            coupled |= failure.keys
            if merged is not None:
                hint = merged
            by_cells = {p.cells: p for p in parts}
            for cells in list(solved):
                if any(r == region for r, _m in cells for region, _a in failure.keys):
                    plan, progress = solved.pop(cells)
                    old = by_cells.get(cells)
                    served = old is not None and all(
                        instance.served(di, plan) >= 1.0 - 1e-9 for di in old.demands
                    )
                    if served and progress.cost_bound > 0:
                        # Parts only merge: an earlier floor is inside this part or apart
                        # from it. Those inside are replaced, so the floors stay disjoint
                        # and their sum is a bound.
                        key = frozenset(cells)
                        inside = [k for k in floors if k <= key]
                        bound = max(progress.cost_bound, sum(floors.pop(k) for k in inside))
                        floors[key] = bound
    if plan_violations(instance, final):  # a defect, not an input problem: stay safe
        return start, _fallback(instance, start)
    total = _Progress()
    if repaired:
        # The repair changes the cost and proves nothing; the parts' bounds stay bounds.
        everyone = range(len(instance.demands))
        total.proven = False
        total.cost = (
            plan_rank(instance, final, everyone)[-3] - plan_rank(instance, merged, everyone)[-3]
        )
    for part in parts:
        p = solved[part.cells][1]
        total.proven = total.proven and p.proven
        total.cost += p.cost
        total.cost_bound += p.cost_bound
        if p.unserved_gap is not None:
            total.unserved_gap = max(total.unserved_gap or 0.0, p.unserved_gap)
        for k, v in p.stage_seconds.items():
            total.stage_seconds[k] = total.stage_seconds.get(k, 0.0) + v
    return final, total


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
    hosted_cost = instance.hosted_cost(plan)
    cost = (
        sum(
            n * problem.replica_price_per_hour(z, problem.shape(s))
            for (z, s), n in plan.replicas.items()
        )
        + hosted_cost
    )
    routing: list[dict[str, Any]] = []
    unserved: list[dict[str, Any]] = []
    hosted: list[dict[str, Any]] = []
    for di, demand in enumerate(instance.demands):
        rate = demand.planned_requests_per_s
        served = 0.0
        for hi in instance.hosted_of[di] if instance.hosted_of else ():
            share = plan.hosted.get(hi, 0.0)
            if share > 0:
                overflow = instance.hosted[hi]
                hosted.append(
                    {
                        "demand": demand.id,
                        "provider": overflow.provider,
                        "requests_per_s": share * rate,
                        "tokens_per_minute": share * overflow.tokens_per_minute,
                        "cost_per_hour": share * overflow.cost_per_hour,
                    }
                )
                served += share
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
        # Shares scaled to whole add up to 1 only within float noise: that is served.
        left = (1.0 - served) * rate if 1.0 - served > ROW_TOLERANCE else 0.0
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
    out: dict[str, Any] = {
        "format": SOLUTION_FORMAT,
        "status": status,
        "cost_per_hour": cost,
        "unserved_requests_per_s": float(sum(row["requests_per_s"] for row in unserved)),
        "solve_seconds": round(seconds, 3),
        "gap": gap,
        "replicas": replicas,
        "routing": routing,
        "unserved": unserved,
        "binding": binding_sentences(instance, plan),
        "excluded_shapes": excluded_shapes(problem),
    }
    if problem.hosted:
        # Only a problem with hosted providers has these keys: older documents read the same.
        out["hosted_cost_per_hour"] = float(hosted_cost)
        out["hosted"] = hosted
    return out


def excluded_shapes(problem: Problem) -> list[dict[str, str]]:
    """Each demand's shapes that cannot meet its TTFT objective at any load, with the reason
    (``Problem.ineligible_reason``); sorted by demand and shape."""
    out = []
    for demand in sorted(problem.demands, key=lambda d: d.id):
        for shape in sorted(problem.shapes, key=lambda s: s.name):
            if shape.model != demand.model:
                continue
            reason = problem.ineligible_reason(demand, shape)
            if reason is not None:
                out.append({"demand": demand.id, "shape": shape.name, "reason": reason})
    return out


def solve(
    problem: Mapping[str, Any] | Problem,
    *,
    time_limit_s: float = 60.0,
    workers: int = 2,
    seed: int = 0,
    backend: BackendName = DEFAULT_BACKEND,
    executor: Executor = "process",
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Place replicas and route every demand per ``placement-v1``; the spec's solution dict.

    ``time_limit_s`` bounds the whole solve in seconds; on expiry the best plan found is
    returned with status ``feasible`` and its ``gap``. Independent parts of the problem are
    solved side by side, each in a forked process of its own, up to four per worker, sharing
    ``workers`` cores; ``seed`` goes to the MIP solver. Safe to call from several threads at
    once (in one process, parts are solved one at a time). A fixed ``workers`` and ``seed`` give the same plan for the same problem
    whenever the solve finishes within the limit. An invalid problem gives status
    ``invalid`` (never raises); a time limit or worker count out of range raises
    ``PlannerInputError``; a solver failure on a valid problem (a part's solve raised, or
    its process died) raises ``PlannerSolverError`` naming the part.

    ``executor="ray"`` solves the parts as Ray tasks instead: on the Ray this process is
    connected to, else on the cluster at ``ray_address`` (``auto``, ``ray://host:10001``),
    else on a local Ray started with ``workers`` CPUs (kept for later solves until the
    process exits). Ray must be installed (the ``bench`` extra) and, on a cluster, the
    planner too; for the same problem, ``workers`` and ``seed`` the plan is the one the
    processes give, whenever every part's solve ends within its time.
    """
    started = time.perf_counter()
    if not (isinstance(time_limit_s, int | float) and 0 < time_limit_s < math.inf):
        raise PlannerInputError("time_limit_s", f"must be a positive number, got {time_limit_s!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise PlannerInputError("workers", f"must be a whole number of at least 1, got {workers!r}")
    if executor not in EXECUTORS:
        raise PlannerInputError(
            "executor", f"must be one of {', '.join(EXECUTORS)}, got {executor!r}"
        )
    if ray_address is not None and executor != "ray":
        raise PlannerInputError("ray_address", "is for executor='ray' only")
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
        executor=executor,
        ray_address=ray_address,
    )
    return solution_dict(instance, plan, progress, seconds=time.perf_counter() - started)
