"""Reference formulation of placement-v1 for SMALL problems: a plain scipy (HiGHS) MILP.

Tests use it to cross-check the solver's optimum on instances a few dozen integer variables
big. It is written from the contract alone, with the verifier's reader, and shares no model
code with the solver, so an error in either shows up as a disagreement.

Variables: whole replicas ``n[z,s]`` (bounded by the zone's inventory), one indicator
``y[r,s]`` per region and shape (``N[r,s] ≤ M·y``, and the N+1 row subtracts ``U·y``, so the
spare is needed exactly where ``N ≥ 1``), routed rates ``x[d,r,s] ≥ 0`` where the demand may
be served, and unserved ``u[d] ∈ [0, R_d]``. Rows: conservation, capacity, N+1, zone loss per
zone, concurrency, inventory. Stages, in the contract's order: least unserved for each
priority level, most important first (each level's optimum is then held); then least cost.

``reference_cost_bound`` runs the same formulation under a time limit and returns HiGHS's
proven lower bound on the cost, an independent check of the gap a solver reports.

What it does not model: the max-min fairness of served fractions inside a priority (it
changes which demand is short, and so possibly the cost, only when something is unserved),
and the tie-breaks after cost (change from ``previous``, spill). Compare costs on problems
where everything servable is served; compare unserved totals per priority anywhere.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from planner.placement.problem import SOLUTION_FORMAT
from planner.placement.verify import (
    SpecProblem,
    cost_per_request,
    read_spec_problem,
)

# Each priority's least unserved is held to within this share of its planned rate, so the
# next stage is not made infeasible by the MILP's own feasibility tolerance.
_STAGE_SLACK = 1e-7
# Routed rates below this share of the demand's planned rate are solver noise.
_DUST = 1e-9


class ReferenceTooHard(RuntimeError):
    """The reference MILP did not prove optimality within its time limit."""


@dataclass(frozen=True)
class ReferencePlan:
    """The reference optimum: unserved requests/s per priority, $/hour, and the plan."""

    unserved_by_priority: dict[int, float]
    cost_per_hour: float
    replicas: dict[tuple[str, str], int]
    routing: dict[tuple[str, str, str], float]
    unserved: dict[str, float]

    def as_solution(self) -> dict[str, Any]:
        """The plan as a placement-solution/v1 dict (status optimal, gap 0)."""
        return {
            "format": SOLUTION_FORMAT,
            "status": "optimal",
            "cost_per_hour": self.cost_per_hour,
            "unserved_requests_per_s": sum(self.unserved.values()),
            "solve_seconds": 0.0,
            "gap": 0.0,
            "replicas": [
                {"zone": zone, "shape": shape, "replicas": count}
                for (zone, shape), count in self.replicas.items()
                if count > 0
            ],
            "routing": [
                {"demand": d, "region": r, "shape": s, "requests_per_s": rate}
                for (d, r, s), rate in self.routing.items()
                if rate > 0
            ],
            "unserved": [
                {"demand": d, "requests_per_s": u} for d, u in self.unserved.items() if u > 0
            ],
            "binding": [],
        }


class _Model:
    """Column and row bookkeeping for one MILP."""

    def __init__(self) -> None:
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.integer: list[int] = []
        self.rows: list[dict[int, float]] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []

    def column(self, lower: float, upper: float, *, integer: bool) -> int:
        self.lower.append(lower)
        self.upper.append(upper)
        self.integer.append(1 if integer else 0)
        return len(self.lower) - 1

    def row(self, terms: Mapping[int, float], lower: float, upper: float) -> None:
        self.rows.append(dict(terms))
        self.row_lower.append(lower)
        self.row_upper.append(upper)

    def run(self, objective: Mapping[int, float], time_limit_s: float) -> Any:
        """HiGHS's result (scipy ``OptimizeResult``) for minimising ``objective``."""
        size = len(self.lower)
        c = np.zeros(size)
        for column, value in objective.items():
            c[column] += value
        data, row_index, col_index = [], [], []
        for i, terms in enumerate(self.rows):
            for column, value in terms.items():
                row_index.append(i)
                col_index.append(column)
                data.append(value)
        matrix = coo_array((data, (row_index, col_index)), shape=(len(self.rows), size))
        return milp(
            c,
            integrality=np.array(self.integer),
            bounds=Bounds(np.array(self.lower), np.array(self.upper)),
            constraints=LinearConstraint(
                matrix.tocsr(), np.array(self.row_lower), np.array(self.row_upper)
            ),
            options={"time_limit": time_limit_s, "mip_rel_gap": 0.0},
        )

    def solve(self, objective: Mapping[int, float], time_limit_s: float) -> np.ndarray:
        """The optimal column values; ``ReferenceTooHard`` unless optimality is proven."""
        result = self.run(objective, time_limit_s)
        if result.status != 0 or result.x is None:
            raise ReferenceTooHard(f"reference MILP stopped: {result.message}")
        solution: np.ndarray = result.x
        return solution


@dataclass
class _Formulation:
    """The reference MILP of one problem and its columns."""

    spec: SpecProblem
    model: _Model
    n: dict[tuple[str, str], int]
    x: dict[tuple[str, str, str], int]
    u: dict[str, int]

    def cost_objective(self) -> dict[int, float]:
        """$/hour per replica column."""
        return {
            column: self.spec.gpu_hour_price(
                self.spec.region_of_zone[zone], self.spec.shapes[shape_name]
            )
            for (zone, shape_name), column in self.n.items()
        }

    def hold_least_unserved(self, time_limit_s: float) -> dict[int, float]:
        """Stage 1: minimise unserved per priority, most important first, holding each optimum."""
        spec, model = self.spec, self.model
        least_by_priority: dict[int, float] = {}
        for priority in sorted({d.priority for d in spec.demands.values()}):
            members = [d for d in spec.demands.values() if d.priority == priority]
            objective = {self.u[d.id]: 1.0 for d in members}
            values = model.solve(objective, time_limit_s)
            least = max(0.0, float(sum(values[self.u[d.id]] for d in members)))
            least_by_priority[priority] = least
            planned = sum(d.planned_rate for d in members)
            model.row(objective, -np.inf, least + _STAGE_SLACK * max(1.0, planned))
        return least_by_priority


def _formulate(problem: Mapping[str, Any]) -> _Formulation:
    """Columns and rows of the reference MILP for ``problem`` (objective set per stage)."""
    spec = read_spec_problem(problem)
    model = _Model()
    inf = np.inf

    # Whole replicas per zone and shape, where the zone's inventory holds at least one.
    n: dict[tuple[str, str], int] = {}
    for region_spec in spec.regions.values():
        for shape in spec.shapes.values():
            for zone in region_spec.zones:
                most = spec.inventory_gpus(zone, shape.accelerator) // shape.gpus
                if most > 0:
                    n[(zone, shape.name)] = model.column(0, most, integer=True)
    zones_of: dict[tuple[str, str], list[str]] = defaultdict(list)
    for zone, shape_name in n:
        zones_of[(spec.region_of_zone[zone], shape_name)].append(zone)

    y: dict[tuple[str, str], int] = {key: model.column(0, 1, integer=True) for key in zones_of}

    x: dict[tuple[str, str, str], int] = {}
    u: dict[str, int] = {}
    for demand in spec.demands.values():
        u[demand.id] = model.column(0.0, demand.planned_rate, integer=False)
        for region in spec.regions:
            if not spec.may_serve(demand, region):
                continue
            for shape in spec.shapes_of_model(demand.model):
                if (region, shape.name) in zones_of:
                    x[(demand.id, region, shape.name)] = model.column(0.0, inf, integer=False)

    # Conservation: Σ x + u = R.
    routes_of: dict[str, list[int]] = defaultdict(list)
    for (demand_id, _region, _shape), column in x.items():
        routes_of[demand_id].append(column)
    for demand in spec.demands.values():
        terms = {column: 1.0 for column in routes_of[demand.id]}
        terms[u[demand.id]] = 1.0
        model.row(terms, demand.planned_rate, demand.planned_rate)

    # Per region and shape: capacity, N+1, zone loss, concurrency.
    routed_on: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    for (demand_id, region, shape_name), column in x.items():
        routed_on[(region, shape_name)].append((demand_id, column))
    for (region, shape_name), zones in zones_of.items():
        shape = spec.shapes[shape_name]
        target = shape.target_utilization
        replicas = {n[(zone, shape_name)]: -target for zone in zones}
        work = {
            column: cost_per_request(spec.demands[d], shape)
            for d, column in routed_on[(region, shape_name)]
        }
        level = {
            column: spec.demands[d].promise_level for d, column in routed_on[(region, shape_name)]
        }
        model.row({**work, **replicas}, -inf, 0.0)
        promised = {c: w for c, w in work.items() if level[c] >= 1}
        model.row({**promised, **replicas, y[(region, shape_name)]: target}, -inf, 0.0)
        big_m = sum(model.upper[column] for column in replicas)
        model.row(
            {**{column: 1.0 for column in replicas}, y[(region, shape_name)]: -big_m}, -inf, 0.0
        )
        zonal = {c: w for c, w in work.items() if level[c] >= 2}
        if zonal:
            for zone in spec.regions[region].zones:
                survivors = {n[(z, shape_name)]: -target for z in zones if z != zone}
                model.row({**zonal, **survivors}, -inf, 0.0)
        if shape.max_concurrency is not None:
            in_flight: dict[int, float] = {}
            for d, column in routed_on[(region, shape_name)]:
                residence = spec.demands[d].residence_s
                if residence is not None:
                    in_flight[column] = residence
            if in_flight:
                slots = {n[(zone, shape_name)]: -float(shape.max_concurrency) for zone in zones}
                model.row({**in_flight, **slots}, -inf, 0.0)

    # Inventory per zone and GPU class.
    gpus_in: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for (zone, shape_name), column in n.items():
        shape = spec.shapes[shape_name]
        gpus_in[(zone, shape.accelerator)][column] = float(shape.gpus)
    for (zone, accelerator), terms in gpus_in.items():
        model.row(terms, -inf, float(spec.inventory_gpus(zone, accelerator)))

    return _Formulation(spec=spec, model=model, n=n, x=x, u=u)


def reference_plan(problem: Mapping[str, Any], *, time_limit_s: float = 60.0) -> ReferencePlan:
    """Solve ``problem`` exactly with the reference MILP (see module doc). Small problems only.

    Raises ``PlannerInputError`` for an invalid problem and ``ReferenceTooHard`` when HiGHS
    does not prove a stage optimal within ``time_limit_s`` seconds.
    """
    formulation = _formulate(problem)
    spec, n, x = formulation.spec, formulation.n, formulation.x
    unserved_by_priority = formulation.hold_least_unserved(time_limit_s)
    price = formulation.cost_objective()
    values = formulation.model.solve(price, time_limit_s)
    replicas_plan = {key: round(float(values[column])) for key, column in n.items()}
    cost = sum(price[column] * replicas_plan[key] for key, column in n.items())
    # HiGHS leaves flows of 1e-17 on shapes with no replicas; the contract's tolerance is
    # relative, so such dust would break a row whose right side is 0. Drop it, and let the
    # unserved rate absorb what the rounding moved.
    routing: dict[tuple[str, str, str], float] = {}
    for key, column in x.items():
        rate = float(values[column])
        if rate > _DUST * max(1.0, spec.demands[key[0]].planned_rate):
            routing[key] = rate
    routed: dict[str, float] = defaultdict(float)
    for (demand_id, _region, _shape), rate in routing.items():
        routed[demand_id] += rate
    unserved = {d.id: max(0.0, d.planned_rate - routed[d.id]) for d in spec.demands.values()}
    return ReferencePlan(
        unserved_by_priority=unserved_by_priority,
        cost_per_hour=cost,
        replicas=replicas_plan,
        routing=routing,
        unserved={d: rate for d, rate in unserved.items() if rate > _DUST},
    )


@dataclass(frozen=True)
class CostBound:
    """What the reference MILP proved about the least cost within a time limit, in $/hour.

    ``lower`` is HiGHS's dual bound (no plan with the least unserved costs less); ``best``
    the cheapest plan it found (None if none); ``proven`` whether ``best`` is optimal.
    """

    lower: float
    best: float | None
    proven: bool


def reference_cost_bound(problem: Mapping[str, Any], *, time_limit_s: float) -> CostBound:
    """An independent lower bound on the least cost, for problems too big to solve exactly.

    The unserved stages must still be proven optimal (they are quick when inventory is
    ample); the cost stage then runs for at most ``time_limit_s`` seconds. The benchmark
    uses the bound to check the gap a solver reports.
    """
    formulation = _formulate(problem)
    formulation.hold_least_unserved(time_limit_s)
    price = formulation.cost_objective()
    result = formulation.model.run(price, time_limit_s)
    proven = result.status == 0 and result.x is not None
    best: float | None = None
    if result.x is not None:
        # The cost of the whole replica counts, not HiGHS's objective, which carries the
        # integrality tolerance (474.363174… for a plan that costs 474.3632).
        best = sum(price[c] * round(float(result.x[c])) for c in formulation.n.values())
    dual = getattr(result, "mip_dual_bound", None)
    if proven and best is not None:
        lower = best
    elif dual is not None and np.isfinite(dual):
        lower = float(dual)
    else:
        raise ReferenceTooHard(f"reference MILP proved no cost bound: {result.message}")
    return CostBound(lower=lower, best=best, proven=proven)
