"""Region-level help for a part's cost stage: a bound, a start, a restricted MIP and repairs.

A part spans many regions only through demands that may spill; most demands can only be
served in one region. Uses of that, each measured (docs/placement.md):

- **Captive bounds.** Those captive demands cost their region at least the optimum of the
  region's own small MIP (rounding, N+1 and zone-loss floors included), so the row
  ``Σ_{blocks of r} price · N ≥ that optimum`` is valid for the whole part once everyone
  is to be served. The part's LP bound then starts from the regions' integer costs.
- **Home start** (large parts). Every demand served in its home region (or its first),
  each region solved alone: a far better hint than the greedy start, in a few seconds.
- **Relaxation and restricted MIP** (large parts). The part's linear relaxation bounds its
  cost and says where flexible demand is cheapest to pool; the MIP on the blocks it opens
  finds a plan near that cost where HiGHS would spend the part's time in root cut rounds.
- **Repairs.** A plan near the uncoupled parts' plans after a failed split
  (``repair_plan``), and a merged plan that overfills a shared inventory repaired in the
  regions around it (``inventory_repair``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence

from planner.placement.linear import OPTIMALITY_GAP, Backend, BackendName, make_backend
from planner.placement.model import (
    Instance,
    Part,
    PlacementModel,
    Plan,
    Site,
    SplitFailed,
    plan_violations,
)
from planner.placement.start import constructive_plan

_log = logging.getLogger(__name__)

# A block the relaxation gives more replicas than this is open in the restricted MIP.
OPEN_IN_RELAXATION = 1e-6
# An inventory repair also re-solves this many regions linked to the failing ones, so load
# can move out of an overfilled region rather than onto its dearer accelerators; its
# relaxation may take this share of its time.
REPAIR_NEIGHBOURS = 4
REPAIR_RELAXATION_SHARE = 0.3
# The inventory repair's MIPs stop at this relative gap or after this many nodes, whichever
# comes first, rather than at the clock: the same merged plan is then repaired to the same
# plan wherever the parts were solved, and sooner (docs/placement.md, "Parts too large to
# join"). The repair after a failed split (``repair_plan``) stops after as many nodes.
REPAIR_GAP = 0.002
REPAIR_NODES = 1000


def _sub_model(
    model: PlacementModel, regions: frozenset[str], demands: Sequence[int]
) -> PlacementModel:
    cells = tuple(c for c in model.part.cells if c[0] in regions)
    return PlacementModel(
        model.instance,
        Part(cells=cells, demands=tuple(demands)),
        coupled=model.coupled,
        places=model.places,
        include_hosted=False,
    )


def _with_hosted(model: PlacementModel) -> frozenset[int]:
    """Demands of ``model`` with a hosted share variable."""
    return frozenset(model.instance.hosted[hi].demand for hi in model.h)


def _solve_served(
    sub: PlacementModel,
    *,
    time_limit_s: float,
    workers: int,
    seed: int,
    backend: BackendName,
    hint: Plan | None = None,
    gap: float = OPTIMALITY_GAP,
    node_limit: int | None = None,
) -> tuple[float | None, Plan | None]:
    """Least cost serving every demand of ``sub``: (proven lower bound, best exact plan)."""
    solver = make_backend(sub.lm, backend, workers=workers, seed=seed)
    for v in sub.v.values():
        solver.set_upper_bound(v, 0.0)
    outcome = solver.solve(
        sub.cost_objective(),
        maximize=False,
        time_limit_s=time_limit_s,
        hint=None if hint is None else sub.values_from_plan(hint),
        gap=gap,
        node_limit=node_limit,
    )
    bound = outcome.objective if outcome.proven_optimal else outcome.bound
    plan: Plan | None = None
    if outcome.values is not None:
        try:
            plan = sub.plan_from_values(outcome.values)
        except SplitFailed:
            plan = None
    return bound, plan


def captive_bounds(
    model: PlacementModel,
    *,
    deadline: float,
    workers: int,
    seed: int,
    backend: BackendName,
    node_limit: int | None = None,
) -> list[tuple[frozenset[str], float]]:
    """(region, least cost of its captive demands) for each region with captive demands.

    Valid only while every demand of the part is to be served in full.
    """
    instance = model.instance
    regions = sorted({c[0] for c in model.part.cells})
    if len(regions) < 2:
        return []
    captive: dict[str, list[int]] = defaultdict(list)
    for di in model.demands:
        if di in _with_hosted(model):
            continue  # hosted overflow may serve it for less than its region's replicas
        where = {instance.routes[ri].region for ri in instance.routes_of[di]}
        if len(where) == 1:
            captive[next(iter(where))].append(di)
    out: list[tuple[frozenset[str], float]] = []
    for i, r in enumerate(regions):
        if not captive[r]:
            continue
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        sub = _sub_model(model, frozenset([r]), captive[r])
        bound, _ = _solve_served(
            sub,
            time_limit_s=left / (len(regions) - i),
            workers=workers,
            seed=seed,
            backend=backend,
            node_limit=node_limit,
        )
        if bound is not None and bound > 0:
            out.append((frozenset([r]), bound))
    return out


def home_plan(
    model: PlacementModel,
    *,
    deadline: float,
    workers: int,
    seed: int,
    backend: BackendName,
    gap: float = OPTIMALITY_GAP,
    node_limit: int | None = None,
) -> Plan | None:
    """Every demand served in one region (home if it may, else its first), region by region.

    Each region's MIP stops at its share of the time, at ``gap`` or after ``node_limit``
    nodes. A region whose MIP finds nothing in its time takes the constructive plan of the
    same demands there. None if some region cannot serve its demands in full.
    """
    instance = model.instance
    if model.h:
        return None  # region by region knows no hosted quota shared across regions
    assigned: dict[str, list[int]] = defaultdict(list)
    for di in model.demands:
        where = sorted({instance.routes[ri].region for ri in instance.routes_of[di]})
        if where:
            home = instance.demands[di].home_region
            assigned[home if home in where else where[0]].append(di)
    merged = Plan(replicas={}, share={})
    # Small regions first: they finish fast and leave their time to the large ones.
    regions = sorted(assigned, key=lambda r: (len(assigned[r]), r))
    for i, r in enumerate(regions):
        left = deadline - time.perf_counter()
        plan: Plan | None = None
        if left > 0:
            _, plan = _solve_served(
                _sub_model(model, frozenset([r]), assigned[r]),
                time_limit_s=left / (len(regions) - i),
                workers=workers,
                seed=seed,
                backend=backend,
                gap=gap,
                node_limit=node_limit,
            )
        if plan is None:
            plan = constructive_plan(
                instance, model.places, demands=assigned[r], regions=frozenset([r])
            )
            if any(
                sum(plan.share.get(ri, 0.0) for ri in instance.routes_of[di]) < 1.0
                for di in assigned[r]
            ):
                return None
        merged.replicas.update(plan.replicas)
        merged.share.update(plan.share)
    return None if plan_violations(instance, merged) else merged


def relaxation(
    model: PlacementModel,
    objective: Mapping[int, float],
    *,
    time_limit_s: float,
    workers: int,
    seed: int,
    backend: BackendName,
) -> tuple[float | None, tuple[float, ...] | None]:
    """The part's linear relaxation with everyone served (every count continuous): (its
    optimum, a lower bound on the part's cost, or None if not proven; its values, or None).

    Without the captive rows: with them it took twice as long (docs/placement.md)."""
    lm = model.lm
    relaxed = make_backend(
        dataclasses.replace(lm, var_integer=[False] * lm.num_vars),
        backend,
        workers=workers,
        seed=seed,
    )
    for v in model.v.values():
        relaxed.set_upper_bound(v, 0.0)
    lp = relaxed.solve(objective, maximize=False, time_limit_s=time_limit_s, hint=None)
    if lp.values is None:
        return None, None
    return (lp.objective if lp.proven_optimal else None), lp.values[: lm.num_vars]


def relaxed_plan(
    model: PlacementModel,
    plan: Plan,
    objective: Mapping[int, float],
    relaxed: Sequence[float],
    *,
    deadline: float,
    workers: int,
    seed: int,
    backend: BackendName,
    gap: float = OPTIMALITY_GAP,
    node_limit: int | None = None,
) -> Plan | None:
    """A plan from the part's linear relaxation (``relaxed``, values of ``relaxation``): the
    MIP on the blocks it opens, and those ``plan`` uses (so ``plan`` stays a feasible hint).

    The relaxation pools flexible demand where it is cheapest; the restricted MIP has a
    fraction of the integer variables and often finds, in seconds, a whole plan near the
    relaxation's cost that the full MIP finds late or not at all. None when it finds
    nothing cheaper than ``plan``.
    """
    restricted = make_backend(model.lm, backend, workers=workers, seed=seed)
    _restrict_to_opened(model, restricted, relaxed, plan)
    outcome = restricted.solve(
        objective,
        maximize=False,
        time_limit_s=deadline - time.perf_counter(),
        hint=model.values_from_plan(plan),
        gap=gap,
        node_limit=node_limit,
    )
    if outcome.values is None:
        return None
    try:
        candidate = model.plan_from_values(outcome.values)
    except SplitFailed:
        return None
    if plan_violations(model.instance, candidate):
        return None
    if model.objective_value(objective, candidate) >= model.objective_value(objective, plan):
        return None
    return candidate


def _restrict_to_opened(
    model: PlacementModel, solver: Backend, relaxed: Sequence[float], plan: Plan
) -> None:
    """Everyone served, and only the blocks the relaxation opens or ``plan`` uses open."""
    for v in model.v.values():
        solver.set_upper_bound(v, 0.0)
    for b in model.blocks.values():
        opened = sum(relaxed[v] for v, _ in b.count_terms()) > OPEN_IN_RELAXATION
        if opened or any(plan.replicas.get((z, b.shape.name), 0) > 0 for z in b.n_ub):
            continue
        for v, _ in b.count_terms():
            solver.set_upper_bound(v, 0.0)
        for v in b.n.values():
            solver.set_upper_bound(v, 0.0)
        for ri in b.routes:
            if ri in model.f:
                solver.set_upper_bound(model.f[ri], 0.0)


def _splice(instance: Instance, plan: Plan, piece: Plan, regions: frozenset[str]) -> Plan:
    """``plan`` with its replicas and routes in ``regions`` replaced by ``piece``'s."""
    problem = instance.problem
    return Plan(
        replicas={
            key: n
            for key, n in plan.replicas.items()
            if problem.region_of_zone(key[0]) not in regions
        }
        | piece.replicas,
        share={ri: x for ri, x in plan.share.items() if instance.routes[ri].region not in regions}
        | piece.share,
        hosted=dict(plan.hosted),
    )


def bound_rows(
    model: PlacementModel, bounds: Sequence[tuple[frozenset[str], float]]
) -> list[tuple[list[tuple[int, float]], float]]:
    """The rows ``Σ_{blocks in group} price · N ≥ bound`` (a hair below, for float noise)."""
    rows: list[tuple[list[tuple[int, float]], float]] = []
    for group, bound in bounds:
        terms = [
            term
            for (r, _s), b in sorted(model.blocks.items())
            if r in group
            for term in b.count_terms(b.price)
        ]
        if terms:
            rows.append((terms, bound * (1 - 1e-9) - 1e-9))
    return rows


def repair_plan(
    model: PlacementModel,
    hint: Plan,
    objective: Mapping[int, float],
    *,
    regions: frozenset[str],
    deadline: float,
    workers: int,
    seed: int,
    backend: BackendName,
) -> Plan | None:
    """A plan near ``hint`` (the part's uncoupled plans, which break inventory only in
    ``regions``): the replicas outside ``regions`` held at the hint's, the blocks of
    ``regions`` and all routing free. A small MIP; None when it finds no exact plan."""
    restricted = make_backend(model.lm, backend, workers=workers, seed=seed)
    for v in model.v.values():
        restricted.set_upper_bound(v, 0.0)
    values = model.values_from_plan(hint)
    for (region, _shape), b in model.blocks.items():
        if region in regions:
            continue
        if b.count is not None:
            restricted.fix(b.count, values[b.count])
        else:
            for v in b.n.values():
                restricted.fix(v, values[v])
    left = deadline - time.perf_counter()
    if left <= 0.05:
        return None
    outcome = restricted.solve(
        objective, maximize=False, time_limit_s=left, hint=None, node_limit=REPAIR_NODES
    )
    if outcome.values is None:
        return None
    try:
        candidate = model.plan_from_values(outcome.values)
    except SplitFailed:
        return None
    if plan_violations(model.instance, candidate):
        return None
    return candidate


def _held_elsewhere(
    instance: Instance, plan: Plan, demands: Sequence[int], regions: frozenset[str]
) -> dict[int, float]:
    """Each demand's share held outside ``regions``: all but what ``plan`` routes inside,
    so that re-solving ``regions`` serves exactly as much as ``plan`` does (what it routes
    elsewhere, its hosted share and what it leaves unserved stay as they are)."""
    return {
        di: 1.0
        - sum(
            plan.share.get(ri, 0.0)
            for ri in instance.routes_of[di]
            if instance.routes[ri].region in regions
        )
        for di in demands
    }


def inventory_repair(
    instance: Instance,
    places: Mapping[tuple[str, str], Site],
    plan: Plan,
    keys: Collection[tuple[str, str]],
    *,
    deadline: float,
    workers: int,
    seed: int,
    backend: BackendName,
) -> Plan | None:
    """``plan`` (the parts' merged plans, which together overfill the inventory of the
    (region, accelerator) pairs ``keys``) re-solved near those regions, across models.

    One model of the regions of ``keys`` and the ``REPAIR_NEIGHBOURS`` regions most linked
    to them: every model's blocks there, zonal, with every inventory row of those regions;
    the demands that may use them, each with what ``plan`` routes elsewhere held (so it
    serves exactly as much as before); the rest of the plan kept. Load can so move out of
    an overfilled region to a neighbour, or onto another accelerator, without overfilling
    the neighbour. Solved as a large part is: its linear relaxation, then the MIP on the
    blocks the relaxation opens and those ``plan`` uses (``relaxed_plan``'s restriction),
    then, if that finds nothing, the whole MIP; if still nothing, once more with twice as
    many neighbours. Used where joining the parts would make one too large to solve again
    (solver.py): the parts' proven bounds stay valid, since the parts relax only the shared
    inventory. None when no exact plan is found by ``deadline``.
    """
    failing = frozenset(r for r, _a in keys)
    all_cells = {c for part in instance.parts() for c in part.cells}
    neighbours = REPAIR_NEIGHBOURS
    for _attempt in range(2):
        regions = failing | _most_linked(instance, failing, neighbours)
        neighbours *= 2
        demands = [
            di
            for di in range(len(instance.demands))
            if any(instance.routes[ri].region in regions for ri in instance.routes_of[di])
        ]
        sub = PlacementModel(
            instance,
            Part(
                cells=tuple(sorted(c for c in all_cells if c[0] in regions)), demands=tuple(demands)
            ),
            coupled={
                (r, site.shape.accelerator) for (r, _s), site in places.items() if r in regions
            },
            places=places,
            served_elsewhere=_held_elsewhere(instance, plan, demands, regions),
            include_hosted=False,
        )
        piece = _repair_piece(
            sub, plan, deadline=deadline, workers=workers, seed=seed, backend=backend
        )
        if piece is None:
            continue
        candidate = _splice(instance, plan, piece, regions)
        exact = not plan_violations(instance, candidate)
        _log.debug(
            "inventory repair of %s with %d neighbours: %d routes, %s",
            ",".join(sorted(failing)),
            len(regions) - len(failing),
            len(sub.route_ids),
            "exact" if exact else "not exact",
        )
        if exact:
            return candidate
    return None


def _repair_piece(
    sub: PlacementModel,
    plan: Plan,
    *,
    deadline: float,
    workers: int,
    seed: int,
    backend: BackendName,
) -> Plan | None:
    """The repair model's plan: relaxation, restricted MIP, whole MIP (``inventory_repair``)."""
    cost = sub.cost_objective()
    left = deadline - time.perf_counter()
    if left <= 0.05:
        return None
    _, relaxed = relaxation(
        sub,
        cost,
        time_limit_s=left * REPAIR_RELAXATION_SHARE,
        workers=workers,
        seed=seed,
        backend=backend,
    )
    hint = sub.values_from_plan(plan)
    if relaxed is not None:
        restricted = make_backend(sub.lm, backend, workers=workers, seed=seed)
        _restrict_to_opened(sub, restricted, relaxed, plan)
        outcome = restricted.solve(
            cost,
            maximize=False,
            time_limit_s=(deadline - time.perf_counter()) / 2,
            hint=hint,
            gap=REPAIR_GAP,
            node_limit=REPAIR_NODES,
        )
        piece = _exact(sub, outcome.values)
        if piece is not None:
            return piece
    _, piece = _solve_served(
        sub,
        time_limit_s=deadline - time.perf_counter(),
        workers=workers,
        seed=seed,
        backend=backend,
        hint=plan,
        gap=REPAIR_GAP,
        node_limit=REPAIR_NODES,
    )
    return piece


def _exact(model: PlacementModel, values: Sequence[float] | None) -> Plan | None:
    """The plan of a solver's ``values``, if it splits over zones and is exact."""
    if values is None:
        return None
    try:
        plan = model.plan_from_values(values)
    except SplitFailed:
        return None
    return None if plan_violations(model.instance, plan) else plan


def _most_linked(instance: Instance, regions: frozenset[str], count: int) -> frozenset[str]:
    """The ``count`` regions outside ``regions`` that most demands able to use ``regions``
    may also use."""
    links: dict[str, int] = defaultdict(int)
    for di in range(len(instance.demands)):
        where = {instance.routes[ri].region for ri in instance.routes_of[di]}
        if where & regions:
            for r in where - regions:
                links[r] += 1
    ranked = sorted(links.items(), key=lambda kv: (-kv[1], kv[0]))
    return frozenset(r for r, _n in ranked[:count])
