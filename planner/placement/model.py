"""The placement formulation of ``placement-v1`` as a mixed-integer linear model.

Index sets are sorted by name so that the same problem always builds the same model.

Variables (one ``LinearModel`` per independent component of the problem):

- ``f[route]`` in [0, 1]: share of a demand's planned rate ``R_d`` served on a route
  (region, shape); the spec's ``x[d,r,s] = R_d · f``. Shares keep every coefficient in
  replica units and make the max-min fairness of the spec a bound on ``1 − v``.
- ``v[d]`` in [0, 1]: share of ``R_d`` left unserved (``u[d] = R_d · v``).
- ``n[z,s]`` whole replicas, bounded by the zone's inventory.
- ``m[r,s]`` whole: the largest zone count of the shape in the region, when zone-promised
  demand can land there; zone loss for every zone is then one row, ``Lz ≤ N − m``.
- ``y[r,s]`` binary: promised demand is served on (r, s); the N+1 row is ``Lp ≤ N − y``.
  The spec asks for the spare wherever ``N ≥ 1``; with no promised load that row
  (``0 ≤ N − 1``) holds anyway, so "promised load > 0" is the same rule, and it can be tied
  to each promised route by ``f ≤ y`` (a facility-location tightening) instead of a big-M
  on ``N``.

Rows, per region and shape, all divided by the target utilisation so that they read in
replicas: capacity ``Σ f·R·c/U ≤ N``; N+1 ``Σ_{promise ≥ n+1} f·R·c/U + y ≤ N``; zone loss
``Σ_{promise = zone} f·R·c/U + m ≤ N`` and ``n[z] ≤ m``; concurrency
``Σ f·R·residence/max_concurrency ≤ N``; per zone and accelerator, inventory
``Σ n·gpus ≤ GPUs``; per demand ``Σ f + v = 1``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from planner.placement.linear import LinearModel
from planner.placement.problem import Demand, Problem, Shape

# Relative tolerance for "this row holds": float noise only (see planner.capacity's
# ceil_count). Far below the spec's 1e-6, so a plan never leans on the spec's tolerance.
ROW_TOLERANCE = 1e-9


@dataclass(frozen=True, slots=True)
class Route:
    """One way to serve a demand: a region that may serve it and a shape of its model.

    ``load`` is the replicas of target capacity the whole demand takes there
    (``R_d · c[d,s] / U_s``); ``concurrency`` the replicas of concurrency it takes
    (``R_d · residence_s / max_concurrency``, 0 where not checked).
    """

    demand: int
    region: str
    shape: str
    load: float
    concurrency: float
    promise_level: int
    rtt_ms: float


@dataclass(frozen=True)
class Instance:
    """The problem with its index sets built: sorted demands and the routes of each.

    A demand with a zero planned rate needs nothing and gets no routes; a demand with a
    positive rate and no route (no region it may use holds GPUs for its model) is unserved
    whatever the plan does.
    """

    problem: Problem
    demands: tuple[Demand, ...]
    routes: tuple[Route, ...]
    routes_of: tuple[tuple[int, ...], ...]
    regions: tuple[str, ...]
    zones_of: Mapping[str, tuple[str, ...]]
    shapes: tuple[Shape, ...]

    @staticmethod
    def build(problem: Problem) -> Instance:
        """Index ``problem``: a route wherever a region may serve a demand on a shape."""
        demands = tuple(sorted(problem.demands, key=lambda d: d.id))
        shapes = tuple(sorted(problem.shapes, key=lambda s: s.name))
        regions = tuple(sorted(r.name for r in problem.regions))
        zones_of = {r.name: tuple(sorted(r.zones)) for r in problem.regions}
        hostable = {
            (r, s.name)
            for r in regions
            for s in shapes
            if any(problem.inventory_gpus(z, s.accelerator) >= s.gpus for z in zones_of[r])
        }
        shapes_of_model: dict[str, list[Shape]] = defaultdict(list)
        for s in shapes:
            shapes_of_model[s.model].append(s)
        routes: list[Route] = []
        routes_of: list[tuple[int, ...]] = []
        for di, d in enumerate(demands):
            mine: list[int] = []
            rate = d.planned_requests_per_s
            if rate > 0:
                for r in sorted(problem.serving_regions(d)):
                    rtt = problem.rtt(d.home_region, r)
                    for s in shapes_of_model[d.model]:
                        if (r, s.name) not in hostable:
                            continue
                        load = rate * problem.request_cost_s(d, s) / s.target_utilization
                        conc = 0.0
                        if d.residence_s is not None and s.max_concurrency is not None:
                            if s.max_concurrency == 0:
                                if d.residence_s > 0:
                                    continue  # no request may be in flight on this shape
                            else:
                                conc = rate * d.residence_s / s.max_concurrency
                        mine.append(len(routes))
                        routes.append(
                            Route(
                                demand=di,
                                region=r,
                                shape=s.name,
                                load=load,
                                concurrency=conc,
                                promise_level=d.promise_level,
                                rtt_ms=0.0 if rtt is None else rtt,
                            )
                        )
            routes_of.append(tuple(mine))
        return Instance(
            problem=problem,
            demands=demands,
            routes=tuple(routes),
            routes_of=tuple(routes_of),
            regions=regions,
            zones_of=zones_of,
            shapes=shapes,
        )

    def components(self) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
        """Independent parts: (regions, demands) linked by demands that may use them.

        Regions no demand can reach join no part unless a previous plan has replicas there
        (which the plan may keep or drop). Parts come sorted by their first region.
        """
        parent = {r: r for r in self.regions}

        def find(r: str) -> str:
            while parent[r] != r:
                parent[r] = parent[parent[r]]
                r = parent[r]
            return r

        for di in range(len(self.demands)):
            regions = sorted({self.routes[i].region for i in self.routes_of[di]})
            for other in regions[1:]:
                a, b = find(regions[0]), find(other)
                if a != b:
                    parent[max(a, b)] = min(a, b)
        used = {self.routes[i].region for i in range(len(self.routes))}
        if self.problem.previous:
            used |= {
                self.problem.region_of_zone(row.zone)
                for row in self.problem.previous
                if row.replicas > 0
            }
        groups: dict[str, list[str]] = defaultdict(list)
        for r in self.regions:
            if r in used:
                groups[find(r)].append(r)
        demands_of: dict[str, list[int]] = defaultdict(list)
        for di in range(len(self.demands)):
            if self.routes_of[di]:
                demands_of[find(self.routes[self.routes_of[di][0]].region)].append(di)
        return [
            (tuple(groups[root]), tuple(demands_of[root]))
            for root in sorted(groups, key=lambda k: groups[k][0])
        ]


@dataclass
class Block:
    """One region and shape: its zone replica variables, routes and helper variables."""

    region: str
    shape: Shape
    price: float  # $/hour of one replica here
    n: dict[str, int]  # zone -> variable
    n_ub: dict[str, int]  # zone -> most replicas the zone's inventory allows
    routes: list[int] = field(default_factory=list)  # indices into Instance.routes
    max_zone: int | None = None
    promised: int | None = None


@dataclass
class Plan:
    """A placement: replicas per (zone, shape) and the served share of every route."""

    replicas: dict[tuple[str, str], int]
    share: dict[int, float]  # route index -> f


class PlacementModel:
    """The MIP of one component (regions and the demands that may use them)."""

    def __init__(
        self,
        instance: Instance,
        regions: Sequence[str],
        demands: Sequence[int],
        *,
        link_promised_routes: bool = True,
    ) -> None:
        self.instance = instance
        problem = instance.problem
        self.regions = tuple(regions)
        self.demands = tuple(demands)
        self.lm = LinearModel()
        lm = self.lm
        self.previous: dict[tuple[str, str], int] = {}
        region_set = set(regions)
        if problem.previous:
            for row in problem.previous:
                if problem.region_of_zone(row.zone) in region_set and row.replicas > 0:
                    self.previous[(row.zone, row.shape)] = row.replicas

        # Routes and the blocks they land in.
        self.route_ids: list[int] = [ri for di in self.demands for ri in instance.routes_of[di]]
        self.blocks: dict[tuple[str, str], Block] = {}
        wanted: set[tuple[str, str]] = {
            (instance.routes[ri].region, instance.routes[ri].shape) for ri in self.route_ids
        }
        wanted |= {(problem.region_of_zone(z), s) for z, s in self.previous}
        for r in self.regions:
            multiplier = problem.region(r).price_multiplier
            for s in instance.shapes:
                if (r, s.name) not in wanted:
                    continue
                price = s.gpus * problem.accelerator(s.accelerator).price_per_gpu_hour * multiplier
                n: dict[str, int] = {}
                n_ub: dict[str, int] = {}
                for z in instance.zones_of[r]:
                    cap = problem.inventory_gpus(z, s.accelerator) // s.gpus
                    if cap > 0:
                        n[z] = lm.add_var(0, cap, integer=True, name=f"n[{z},{s.name}]")
                        n_ub[z] = cap
                if n:
                    self.blocks[(r, s.name)] = Block(region=r, shape=s, price=price, n=n, n_ub=n_ub)

        # Route shares and unserved shares.
        self.f: dict[int, int] = {}
        for ri in self.route_ids:
            route = instance.routes[ri]
            self.f[ri] = lm.add_var(0.0, 1.0, integer=False, name=f"f[{ri}]")
            self.blocks[(route.region, route.shape)].routes.append(ri)
        self.v: dict[int, int] = {}
        for di in self.demands:
            v = lm.add_var(0.0, 1.0, integer=False, name=f"v[{instance.demands[di].id}]")
            self.v[di] = v
            terms = [(self.f[ri], 1.0) for ri in instance.routes_of[di]] + [(v, 1.0)]
            lm.add_row(terms, 1.0, 1.0, name=f"demand[{instance.demands[di].id}]")

        for key in sorted(self.blocks):
            self._block_rows(self.blocks[key], link_promised_routes)
        self._inventory_rows()

        # |n − previous| for the change objective, where a previous row exists.
        self.change_terms: dict[int, float] = {}
        self.change_constant = 0.0
        self.change_aux: dict[tuple[str, str], int] = {}
        if problem.previous is not None:
            for block in self.blocks.values():
                for z, var in block.n.items():
                    prev = self.previous.get((z, block.shape.name), 0)
                    if prev == 0:
                        self.change_terms[var] = 1.0
                        continue
                    aux = lm.add_var(0, math.inf, integer=False, name=f"dn[{z},{block.shape.name}]")
                    lm.add_row([(aux, 1.0), (var, -1.0)], -prev, math.inf, name="dn+")
                    lm.add_row([(aux, 1.0), (var, 1.0)], prev, math.inf, name="dn-")
                    self.change_aux[(z, block.shape.name)] = aux
                    self.change_terms[aux] = 1.0
            modelled = {(z, b.shape.name) for b in self.blocks.values() for z in b.n}
            # Previous replicas where no variable exists (the zone lost its GPUs) must go.
            self.change_constant = float(
                sum(p for key, p in self.previous.items() if key not in modelled)
            )

    # ----------------------------------------------------------------------------------
    def _block_rows(self, block: Block, link_promised_routes: bool) -> None:
        lm = self.lm
        routes = [self.instance.routes[ri] for ri in block.routes]
        minus_n = [(var, -1.0) for var in block.n.values()]
        label = f"{block.region},{block.shape.name}"
        if not routes:
            return
        lm.add_row(
            [(self.f[ri], r.load) for ri, r in zip(block.routes, routes, strict=True)] + minus_n,
            -math.inf,
            0.0,
            name=f"capacity[{label}]",
        )
        promised = [
            (ri, r) for ri, r in zip(block.routes, routes, strict=True) if r.promise_level >= 1
        ]
        if promised:
            y = lm.add_var(0, 1, integer=True, name=f"y[{label}]")
            block.promised = y
            lm.add_row(
                [(self.f[ri], r.load) for ri, r in promised] + [(y, 1.0), *minus_n],
                -math.inf,
                0.0,
                name=f"n+1[{label}]",
            )
            if link_promised_routes:
                for ri, _ in promised:
                    lm.add_row([(self.f[ri], 1.0), (y, -1.0)], -math.inf, 0.0, name="open")
            else:
                total = sum(1.0 for _ in promised)
                lm.add_row(
                    [(self.f[ri], 1.0) for ri, _ in promised] + [(y, -total)],
                    -math.inf,
                    0.0,
                    name="open",
                )
        zonal = [
            (ri, r) for ri, r in zip(block.routes, routes, strict=True) if r.promise_level >= 2
        ]
        if zonal:
            m = lm.add_var(0, max(block.n_ub.values()), integer=True, name=f"m[{label}]")
            block.max_zone = m
            lm.add_row(
                [(self.f[ri], r.load) for ri, r in zonal] + [(m, 1.0), *minus_n],
                -math.inf,
                0.0,
                name=f"zone[{label}]",
            )
            for var in block.n.values():
                lm.add_row([(var, 1.0), (m, -1.0)], -math.inf, 0.0, name="max-zone")
        conc = [(ri, r) for ri, r in zip(block.routes, routes, strict=True) if r.concurrency > 0]
        if conc:
            lm.add_row(
                [(self.f[ri], r.concurrency) for ri, r in conc] + minus_n,
                -math.inf,
                0.0,
                name=f"concurrency[{label}]",
            )

    def _inventory_rows(self) -> None:
        problem = self.instance.problem
        by_zone: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
        for block in self.blocks.values():
            for z, var in block.n.items():
                by_zone[(z, block.shape.accelerator)].append((var, block.shape.gpus, block.n_ub[z]))
        self.inventory_keys: list[tuple[str, str]] = []
        for (z, acc), items in sorted(by_zone.items()):
            gpus = problem.inventory_gpus(z, acc)
            # One shape alone is already bounded by its variable's upper bound.
            if sum(g * ub for _, g, ub in items) <= gpus:
                continue
            self.lm.add_row(
                [(var, float(g)) for var, g, _ in items],
                -math.inf,
                float(gpus),
                name=f"inv[{z},{acc}]",
            )
            self.inventory_keys.append((z, acc))

    # ----------------------------------------------------------------------------------
    # Objectives: variable -> coefficient.

    def unserved_objective(self, demands: Iterable[int]) -> dict[int, float]:
        """Σ u[d] in requests/s over ``demands``."""
        return {self.v[di]: self.instance.demands[di].planned_requests_per_s for di in demands}

    def cost_objective(self) -> dict[int, float]:
        """Σ n · gpus · $/GPU-hour · region multiplier, in $/hour."""
        return {var: b.price for b in self.blocks.values() for var in b.n.values()}

    def change_objective(self) -> dict[int, float]:
        """Σ |n − previous| in replicas (less ``change_constant``, which no plan avoids)."""
        return dict(self.change_terms)

    def spill_objective(self) -> dict[int, float]:
        """Σ x · rtt in requests/s × ms."""
        out: dict[int, float] = {}
        for ri in self.route_ids:
            route = self.instance.routes[ri]
            if route.rtt_ms > 0:
                rate = self.instance.demands[route.demand].planned_requests_per_s
                out[self.f[ri]] = rate * route.rtt_ms
        return out

    # ----------------------------------------------------------------------------------
    # Plans and variable values.

    def plan_from_values(self, values: Sequence[float]) -> Plan:
        """Read a plan from solver values, cleaning float noise off the shares.

        Shares below 1e-12 are dropped; a demand whose served shares add up to within
        ``ROW_TOLERANCE`` of the whole is scaled to be exactly whole (so no unserved row of
        1e-13 requests/s appears), which moves a load by at most that relative noise.
        """
        replicas = {
            (z, b.shape.name): round(values[var])
            for b in self.blocks.values()
            for z, var in b.n.items()
            if round(values[var]) > 0
        }
        share: dict[int, float] = {}
        for di in self.demands:
            mine = {ri: max(0.0, values[self.f[ri]]) for ri in self.instance.routes_of[di]}
            mine = {ri: s for ri, s in mine.items() if s > 1e-12}
            total = sum(mine.values())
            if total > 1.0 or abs(total - 1.0) <= ROW_TOLERANCE:
                mine = {ri: s / total for ri, s in mine.items()}
            share.update(mine)
        return Plan(replicas=replicas, share=share)

    def values_from_plan(self, plan: Plan) -> dict[int, float]:
        """Every model variable's value for ``plan`` (a complete solver hint)."""
        values: dict[int, float] = {}
        for b in self.blocks.values():
            counts = {z: plan.replicas.get((z, b.shape.name), 0) for z in b.n}
            for z, var in b.n.items():
                values[var] = float(counts[z])
            if b.max_zone is not None:
                values[b.max_zone] = float(max(counts.values(), default=0))
            if b.promised is not None:
                promised = any(
                    plan.share.get(ri, 0.0) > 0 and self.instance.routes[ri].promise_level >= 1
                    for ri in b.routes
                )
                values[b.promised] = 1.0 if promised else 0.0
            for z in b.n:
                aux = self.change_aux.get((z, b.shape.name))
                if aux is not None:
                    values[aux] = float(abs(counts[z] - self.previous[(z, b.shape.name)]))
        for ri, var in self.f.items():
            values[var] = plan.share.get(ri, 0.0)
        for di, var in self.v.items():
            served = sum(plan.share.get(ri, 0.0) for ri in self.instance.routes_of[di])
            values[var] = max(0.0, 1.0 - served)
        return values

    def objective_value(self, objective: Mapping[int, float], plan: Plan) -> float:
        """``objective`` evaluated at ``plan``."""
        values = self.values_from_plan(plan)
        return sum(coef * values[var] for var, coef in objective.items())


def block_loads(
    instance: Instance, plan: Plan, routes: Iterable[int]
) -> dict[tuple[str, str], tuple[float, float, float, float]]:
    """Per (region, shape): (load, promised load, zone-promised load, concurrency), replicas."""
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for ri in routes:
        share = plan.share.get(ri, 0.0)
        if share <= 0:
            continue
        r = instance.routes[ri]
        acc = out[(r.region, r.shape)]
        acc[0] += share * r.load
        if r.promise_level >= 1:
            acc[1] += share * r.load
        if r.promise_level >= 2:
            acc[2] += share * r.load
        acc[3] += share * r.concurrency
    return {k: (v[0], v[1], v[2], v[3]) for k, v in out.items()}


def holds(lhs: float, rhs: float) -> bool:
    """``lhs ≤ rhs`` up to float noise (``ROW_TOLERANCE`` relative)."""
    return lhs <= rhs + ROW_TOLERANCE * max(1.0, abs(lhs), abs(rhs))


def plan_violations(instance: Instance, plan: Plan) -> list[str]:
    """Rows ``plan`` breaks beyond float noise, in words (empty: the plan is exact)."""
    problem = instance.problem
    out: list[str] = []
    per_block: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    used: dict[tuple[str, str], int] = defaultdict(int)
    for (z, s), count in plan.replicas.items():
        shape = problem.shape(s)
        per_block[(problem.region_of_zone(z), s)][z] = count
        used[(z, shape.accelerator)] += count * shape.gpus
    for (z, acc), gpus in used.items():
        if gpus > problem.inventory_gpus(z, acc):
            out.append(f"inventory {z} {acc}: {gpus} > {problem.inventory_gpus(z, acc)}")
    loads = block_loads(instance, plan, plan.share)
    for key, (load, promised, zonal, conc) in loads.items():
        zones = per_block.get(key, {})
        total = sum(zones.values())
        if not holds(load, total):
            out.append(f"capacity {key}: {load} > {total}")
        if promised > 0 and not holds(promised, total - 1):
            out.append(f"n+1 {key}: {promised} > {total} - 1")
        if zonal > 0:
            biggest = max([zones.get(z, 0) for z in instance.zones_of[key[0]]], default=0)
            if not holds(zonal, total - biggest):
                out.append(f"zone {key}: {zonal} > {total} - {biggest}")
        if not holds(conc, total):
            out.append(f"concurrency {key}: {conc} > {total}")
    for di, ris in enumerate(instance.routes_of):
        served = sum(plan.share.get(ri, 0.0) for ri in ris)
        if served > 1.0 + ROW_TOLERANCE:
            out.append(f"demand {instance.demands[di].id}: serves {served} of its rate")
    return out
