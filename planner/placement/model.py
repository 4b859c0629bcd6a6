"""The placement formulation of ``placement-v1`` as a mixed-integer linear model.

Index sets are sorted by name so that the same problem always builds the same model.

Variables, per part of the problem (``Part``: regions × models linked by demands):

- ``f[route]`` in [0, 1]: share of a demand's planned rate ``R_d`` served on a route
  (region, shape); the spec's ``x[d,r,s] = R_d · f``. Shares keep every coefficient in
  replica units and make the max-min fairness of the spec a bound on ``1 − v``.
- ``v[d]`` in [0, 1]: share of ``R_d`` left unserved (``u[d] = R_d · v``).
- Replicas of a shape in a region (a ``Block``), in one of two forms:
  *pooled*: ``N`` whole, plus (for zone promises) ``m`` whole, the largest zone count, and
  continuous zone counts ``n[z] ≤ m`` with ``Σ n[z] = N`` that only witness a split. Whole
  ``N`` and ``m`` with integral zone caps always admit a whole split, so the zones are not
  branched on and their symmetry (zones of a region are interchangeable) costs nothing.
  *zonal*: whole ``n[z]`` per zone, where per-zone counts matter to the objective (a
  previous plan to stay close to) or to a constraint (an inventory row shared by shapes).
- ``y[r,s]`` binary: promised demand is served on (r, s); the N+1 row is ``Lp ≤ N − y``.
  The spec asks for the spare wherever ``N ≥ 1``; with no promised load that row
  (``0 ≤ N − 1``) holds anyway, so "promised load > 0" is the same rule, tied to each
  promised route by ``f ≤ y`` (a facility-location tightening) rather than a big-M on N.

Rows, per region and shape, divided by the target utilisation so that they read in
replicas: capacity ``Σ f·R·c/U ≤ N``; N+1 ``Σ_{promise ≥ n+1} f·R·c/U + y ≤ N``; zone loss
``Σ_{promise = zone} f·R·c/U + m ≤ N`` with ``n[z] ≤ m`` (so every zone's loss is covered);
concurrency ``Σ f·R·residence/max_concurrency ≤ N``; per demand ``Σ f + Σ h + v = 1``.

Hosted overflow: ``h[hosted route]`` in [0, 1] is the share of ``R_d`` a hosted API
(``Problem.hosted``) serves, where the demand is eligible (``Problem.hosted_ineligible_reason``).
Per provider, ``Σ h·R·60·(prompt + output) ≤ tpm_limit`` and, where given,
``Σ h·R·60 ≤ rpm_limit``; its spend ``Σ h·R·3600·(prompt·in + output·out)/1e6`` $/hour is in
the cost objective. A hosted share is on no replica: it enters no capacity, N+1 or zone row.

Inventory per zone and accelerator is added only where shapes compete for it
(``coupled``): a pooled plan is split into zones afterwards (``split_pooled``) and only
where no split fits the inventory does the solver add those rows and solve again. A model
without them is a relaxation, so a plan that splits is optimal for the full problem too.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from planner.capacity._checks import ceil_count
from planner.placement.linear import LinearModel
from planner.placement.problem import Demand, HostedProvider, Problem, Shape

# Relative tolerance for "this row holds": float noise only (planner.capacity's
# ceil_count uses the same). Far below the spec's 1e-6, so a plan never leans on the spec's
# tolerance to save a replica.
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


@dataclass(frozen=True, slots=True)
class HostedRoute:
    """A demand's overflow to a hosted API: per share of its planned rate, the tokens per
    minute and requests per minute it takes of the provider's quotas and its $/hour."""

    demand: int
    provider: str
    region: str
    tokens_per_minute: float
    requests_per_minute: float
    cost_per_hour: float


def hosted_route(demand: Demand, di: int, provider: HostedProvider) -> HostedRoute:
    """The whole of ``demand`` on ``provider``: ``R_d · 60 · (prompt + output)`` tokens per
    minute, ``R_d · 60`` requests per minute, ``R_d · 3600`` × $ per request."""
    rate = demand.planned_requests_per_s
    return HostedRoute(
        demand=di,
        provider=provider.name,
        region=provider.region,
        tokens_per_minute=rate * 60.0 * demand.tokens_per_request,
        requests_per_minute=rate * 60.0,
        cost_per_hour=rate * 3600.0 * provider.cost_per_request(demand),
    )


@dataclass(frozen=True)
class Part:
    """An independent part of the problem: (region, model) pairs and their demands."""

    cells: tuple[tuple[str, str], ...]
    demands: tuple[int, ...]


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
    previous: Mapping[tuple[str, str], int]
    hosted: tuple[HostedRoute, ...] = ()
    hosted_of: tuple[tuple[int, ...], ...] = ()

    def served(self, di: int, plan: Plan) -> float:
        """Share of demand ``di``'s planned rate that ``plan`` serves, replicas and hosted."""
        out = sum(plan.share.get(ri, 0.0) for ri in self.routes_of[di])
        if self.hosted_of:
            out += sum(plan.hosted.get(hi, 0.0) for hi in self.hosted_of[di])
        return out

    def hosted_cost(self, plan: Plan) -> float:
        """$/hour of ``plan``'s hosted overflow."""
        return sum(share * self.hosted[hi].cost_per_hour for hi, share in plan.hosted.items())

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
                        if problem.ineligible_reason(d, s) is not None:
                            continue  # the shape cannot meet the demand's TTFT at any load
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
        previous = {
            (row.zone, row.shape): row.replicas
            for row in problem.previous or ()
            if row.replicas > 0
        }
        hosted: list[HostedRoute] = []
        hosted_of: list[tuple[int, ...]] = []
        providers = sorted(problem.hosted, key=lambda p: p.name)
        for di, d in enumerate(demands):
            mine = []
            if d.planned_requests_per_s > 0:
                for provider in providers:
                    if problem.hosted_ineligible_reason(d, provider) is None:
                        mine.append(len(hosted))
                        hosted.append(hosted_route(d, di, provider))
            hosted_of.append(tuple(mine))
        return Instance(
            problem=problem,
            demands=demands,
            routes=tuple(routes),
            routes_of=tuple(routes_of),
            regions=regions,
            zones_of=zones_of,
            shapes=shapes,
            previous=previous,
            hosted=tuple(hosted),
            hosted_of=tuple(hosted_of) if hosted else (),
        )

    def _cells_of(self, di: int) -> set[tuple[str, str]]:
        """(region, model) cells demand ``di`` may use: its routes' and its hosted routes'."""
        model = self.demands[di].model
        cells = {(self.routes[ri].region, model) for ri in self.routes_of[di]}
        if self.hosted_of:
            cells |= {(self.hosted[hi].region, model) for hi in self.hosted_of[di]}
        return cells

    def parts(self, coupled: Collection[tuple[str, str]] = ()) -> list[Part]:
        """Independent parts: (region, model) cells linked by demands that may use them.

        ``coupled`` (region, accelerator) pairs, whose inventory the models share, link every
        model with a shape on that accelerator there. Cells no demand can reach join a part
        only where a previous plan has replicas (which the plan may keep or drop).
        """
        problem = self.problem
        parent: dict[tuple[str, str], tuple[str, str]] = {}

        def find(c: tuple[str, str]) -> tuple[str, str]:
            parent.setdefault(c, c)
            while parent[c] != c:
                parent[c] = parent[parent[c]]
                c = parent[c]
            return c

        def union(a: tuple[str, str], b: tuple[str, str]) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        # A hosted route is in the cell of its provider's region and the demand's model; all
        # the cells of one provider share its quotas, so they are one part.
        provider_cell: dict[str, tuple[str, str]] = {}
        for di in range(len(self.demands)):
            cells = sorted(self._cells_of(di))
            for c in cells:
                find(c)
            for c in cells[1:]:
                union(cells[0], c)
            for hi in self.hosted_of[di] if self.hosted_of else ():
                h = self.hosted[hi]
                cell = (h.region, self.demands[di].model)
                union(provider_cell.setdefault(h.provider, cell), cell)
        for z, s in self.previous:
            find((problem.region_of_zone(z), problem.shape(s).model))
        for region, accelerator in sorted(coupled):
            cells = sorted(
                c
                for c in list(parent)
                if c[0] == region
                and any(s.accelerator == accelerator and s.model == c[1] for s in self.shapes)
            )
            for c in cells[1:]:
                union(cells[0], c)
        groups: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
        for c in sorted(parent):
            groups[find(c)].append(c)
        demands_of: dict[tuple[str, str], list[int]] = defaultdict(list)
        for di in range(len(self.demands)):
            cells = sorted(self._cells_of(di))
            if cells:
                demands_of[find(cells[0])].append(di)
        return [
            Part(cells=tuple(groups[root]), demands=tuple(demands_of[root]))
            for root in sorted(groups, key=lambda k: groups[k][0])
        ]


@dataclass(frozen=True)
class Formulation:
    """Choices in how the model is written; each was measured (docs/placement.md).

    ``pooled``: N and the largest zone count per block instead of whole counts per zone.
    ``link_routes``: ``f ≤ y`` per promised route (else one aggregated big-M row).
    ``spare_floor``: ``N ≥ 2y``: a block with promised load holds at least two replicas.
    ``zone_link``: ``f ≤ m`` per zone-promised route: serving it needs a replica per zone.
    ``open_indicator``: a binary per block that any route needs, with ``N ≥ open``.
    """

    pooled: bool = True
    link_routes: bool = True
    spare_floor: bool = True
    zone_link: bool = True
    open_indicator: bool = False


@dataclass
class Block:
    """One region and shape: its replica variables, routes and helper variables.

    ``count`` is the variable for N (pooled) or None (zonal, N = Σ n); ``n`` maps a zone to
    its (whole, zonal; continuous, pooled) zone-count variable; ``n_ub`` to the replicas
    the zone's inventory could hold on its own.
    """

    region: str
    shape: Shape
    price: float  # $/hour of one replica here
    zonal: bool
    n: dict[str, int]
    n_ub: dict[str, int]
    count: int | None = None
    routes: list[int] = field(default_factory=list)  # indices into Instance.routes
    max_zone: int | None = None
    promised: int | None = None

    def count_terms(self, coef: float = 1.0) -> list[tuple[int, float]]:
        """N as a linear expression, times ``coef``."""
        if self.count is not None:
            return [(self.count, coef)]
        return [(var, coef) for var in self.n.values()]


@dataclass
class Plan:
    """A placement: replicas per (zone, shape) and the served share of every route."""

    replicas: dict[tuple[str, str], int]
    share: dict[int, float]  # route index -> f
    hosted: dict[int, float] = field(default_factory=dict)  # hosted route index -> h


class SplitFailed(Exception):
    """No whole split of pooled replicas fits these (region, accelerator) inventories."""

    def __init__(self, keys: Collection[tuple[str, str]]) -> None:
        super().__init__(", ".join(f"{r}/{a}" for r, a in sorted(keys)))
        self.keys = frozenset(keys)

    def __reduce__(self) -> tuple[type[SplitFailed], tuple[tuple[tuple[str, str], ...]]]:
        # Raised in a part's own process, it comes back pickled (solver._solve_parts).
        return (SplitFailed, (tuple(sorted(self.keys)),))


class PlacementModel:
    """The MIP of one part of the problem."""

    def __init__(
        self,
        instance: Instance,
        part: Part,
        *,
        coupled: Collection[tuple[str, str]] = (),
        places: Mapping[tuple[str, str], Site] | None = None,
        formulation: Formulation = Formulation(),
        served_elsewhere: Mapping[int, float] | None = None,
        include_hosted: bool = True,
    ) -> None:
        self.instance = instance
        problem = instance.problem
        self.part = part
        self.demands = part.demands
        self.coupled = frozenset(coupled)
        self.lm = LinearModel()
        lm = self.lm
        cells = set(part.cells)
        self.previous = {
            key: n
            for key, n in instance.previous.items()
            if (problem.region_of_zone(key[0]), problem.shape(key[1]).model) in cells
        }
        previous_blocks = {(problem.region_of_zone(z), s) for z, s in self.previous}

        # Routes into the part's cells: all of its demands' routes for a whole part; fewer
        # for a sub-part (one region of a part, say) built to bound or start it.
        self.route_ids: list[int] = [
            ri
            for di in self.demands
            for ri in instance.routes_of[di]
            if (instance.routes[ri].region, instance.demands[di].model) in cells
        ]
        wanted = {
            (instance.routes[ri].region, instance.routes[ri].shape) for ri in self.route_ids
        } | previous_blocks
        places = sites(instance) if places is None else places
        self.places = places
        self.blocks: dict[tuple[str, str], Block] = {}
        for key in sorted(wanted):
            site = places.get(key)
            if site is None:
                continue  # previous replicas where the inventory is gone: they must go
            r, s_name = key
            s = site.shape
            zonal = (
                not formulation.pooled
                or key in previous_blocks
                or (r, s.accelerator) in self.coupled
            )
            block = Block(
                region=r, shape=s, price=site.price, zonal=zonal, n={}, n_ub=dict(site.n_ub)
            )
            if zonal:
                block.n = {
                    z: lm.add_var(0, ub, integer=True, name=f"n[{z},{s_name}]")
                    for z, ub in site.n_ub.items()
                }
            else:
                block.count = lm.add_var(
                    0, sum(site.n_ub.values()), integer=True, name=f"N[{r},{s_name}]"
                )
            self.blocks[key] = block

        self.f: dict[int, int] = {}
        for ri in self.route_ids:
            route = instance.routes[ri]
            self.f[ri] = lm.add_var(0.0, 1.0, integer=False, name=f"f[{ri}]")
            self.blocks[(route.region, route.shape)].routes.append(ri)
        # Share of each demand this model routes: all of it, less what the caller of a
        # sub-part (decompose.search) holds fixed on routes outside it.
        elsewhere = served_elsewhere or {}
        self.rhs = {di: max(0.0, 1.0 - elsewhere.get(di, 0.0)) for di in self.demands}
        # Hosted shares (whole parts only: a sub-part built by decompose.py holds the plan's
        # hosted shares fixed in ``served_elsewhere``, so the quotas stay whole-part rows).
        self.h: dict[int, int] = {}
        if include_hosted and instance.hosted_of:
            for di in self.demands:
                for hi in instance.hosted_of[di]:
                    hr = instance.hosted[hi]
                    if (hr.region, instance.demands[di].model) in cells:
                        self.h[hi] = lm.add_var(0.0, 1.0, integer=False, name=f"h[{hi}]")
        self.v: dict[int, int] = {}
        for di in self.demands:
            rhs = self.rhs[di]
            v = lm.add_var(0.0, rhs, integer=False, name=f"v[{instance.demands[di].id}]")
            self.v[di] = v
            terms = [(self.f[ri], 1.0) for ri in instance.routes_of[di] if ri in self.f]
            if instance.hosted_of:
                terms += [(self.h[hi], 1.0) for hi in instance.hosted_of[di] if hi in self.h]
            terms.append((v, 1.0))
            lm.add_row(terms, rhs, rhs, name=f"demand[{instance.demands[di].id}]")

        for key in sorted(self.blocks):
            self._block_rows(self.blocks[key], formulation)
        self._inventory_rows()
        self._quota_rows()

        # |n − previous| for the change objective: per zone where a previous row exists,
        # N itself for a block with none (its previous is 0 everywhere).
        self.change_terms: dict[int, float] = {}
        self.change_aux: dict[tuple[str, str], int] = {}
        if problem.previous is not None:
            for block in self.blocks.values():
                if not block.zonal:
                    self.change_terms.update(dict(block.count_terms()))
                    continue
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

    # ----------------------------------------------------------------------------------
    def _block_rows(self, block: Block, formulation: Formulation) -> None:
        lm = self.lm
        label = f"{block.region},{block.shape.name}"
        routes = [(ri, self.instance.routes[ri]) for ri in block.routes]
        minus_n = block.count_terms(-1.0)
        zonal_routes = [(ri, r) for ri, r in routes if r.promise_level >= 2]
        if not block.zonal and zonal_routes:
            # Continuous zone counts witness a split with every zone at most m.
            for z, ub in block.n_ub.items():
                block.n[z] = lm.add_var(0.0, ub, integer=False, name=f"n[{z},{block.shape.name}]")
            lm.add_row(
                [(var, 1.0) for var in block.n.values()] + minus_n, 0.0, 0.0, name=f"split[{label}]"
            )
        if not routes:
            return
        if formulation.open_indicator:
            y_open = lm.add_var(0, 1, integer=True, name=f"open[{label}]")
            lm.add_row([(y_open, 1.0), *minus_n], -math.inf, 0.0, name="open-floor")
            for ri, _ in routes:
                lm.add_row([(self.f[ri], 1.0), (y_open, -1.0)], -math.inf, 0.0, name="open-any")
        lm.add_row(
            [(self.f[ri], r.load) for ri, r in routes] + minus_n,
            -math.inf,
            0.0,
            name=f"capacity[{label}]",
        )
        promised = [(ri, r) for ri, r in routes if r.promise_level >= 1]
        if promised:
            y = lm.add_var(0, 1, integer=True, name=f"y[{label}]")
            block.promised = y
            lm.add_row(
                [(self.f[ri], r.load) for ri, r in promised] + [(y, 1.0), *minus_n],
                -math.inf,
                0.0,
                name=f"n+1[{label}]",
            )
            if formulation.spare_floor:
                lm.add_row([(y, 2.0), *minus_n], -math.inf, 0.0, name=f"spare[{label}]")
            # A route without load (no tokens) needs no spare: no indicator for it.
            promised = [(ri, r) for ri, r in promised if r.load > 0]
            if formulation.link_routes:
                for ri, _ in promised:
                    lm.add_row([(self.f[ri], 1.0), (y, -1.0)], -math.inf, 0.0, name="open")
            else:
                lm.add_row(
                    [(self.f[ri], 1.0) for ri, _ in promised] + [(y, -float(len(promised)))],
                    -math.inf,
                    0.0,
                    name="open",
                )
        if zonal_routes:
            m = lm.add_var(0, max(block.n_ub.values()), integer=True, name=f"m[{label}]")
            block.max_zone = m
            lm.add_row(
                [(self.f[ri], r.load) for ri, r in zonal_routes] + [(m, 1.0), *minus_n],
                -math.inf,
                0.0,
                name=f"zone[{label}]",
            )
            for var in block.n.values():
                lm.add_row([(var, 1.0), (m, -1.0)], -math.inf, 0.0, name="max-zone")
            if formulation.zone_link:
                # Any zone-promised share needs replicas in two zones, so m ≥ 1.
                for ri, r in zonal_routes:
                    if r.load > 0:
                        lm.add_row([(self.f[ri], 1.0), (m, -1.0)], -math.inf, 0.0, name="zone-open")
        conc = [(ri, r) for ri, r in routes if r.concurrency > 0]
        if conc and any(r.concurrency > r.load for _, r in conc):
            # (Where every route needs more capacity than slots, capacity already binds first.)
            lm.add_row(
                [(self.f[ri], r.concurrency) for ri, r in conc] + minus_n,
                -math.inf,
                0.0,
                name=f"concurrency[{label}]",
            )

    def _quota_rows(self) -> None:
        """Per hosted provider: tokens per minute (and requests per minute) within its quotas.

        Divided by the quota, so the row reads in shares of it; a zero quota closes the
        provider's shares instead."""
        by_provider: dict[str, list[int]] = defaultdict(list)
        for hi in sorted(self.h):
            by_provider[self.instance.hosted[hi].provider].append(hi)
        providers = {p.name: p for p in self.instance.problem.hosted}
        for name, his in sorted(by_provider.items()):
            provider = providers[name]
            quotas: list[tuple[str, float, float]] = [("tpm", provider.tpm_limit, 0.0)]
            if provider.rpm_limit is not None:
                quotas.append(("rpm", provider.rpm_limit, 1.0))
            for label, limit, _ in quotas:
                terms = [
                    (
                        self.h[hi],
                        self.instance.hosted[hi].tokens_per_minute
                        if label == "tpm"
                        else self.instance.hosted[hi].requests_per_minute,
                    )
                    for hi in his
                ]
                if limit <= 0:
                    for var, coef in terms:
                        if coef > 0:
                            self.lm.add_row([(var, 1.0)], -math.inf, 0.0, name=f"{label}[{name}]")
                    continue
                self.lm.add_row(
                    [(var, coef / limit) for var, coef in terms if coef > 0],
                    -math.inf,
                    1.0,
                    name=f"{label}[{name}]",
                )

    def _inventory_rows(self) -> None:
        problem = self.instance.problem
        by_zone: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
        for block in self.blocks.values():
            if not block.zonal or (block.region, block.shape.accelerator) not in self.coupled:
                continue
            for z, var in block.n.items():
                by_zone[(z, block.shape.accelerator)].append((var, block.shape.gpus, block.n_ub[z]))
        for (z, acc), items in sorted(by_zone.items()):
            gpus = problem.inventory_gpus(z, acc)
            if sum(g * ub for _, g, ub in items) <= gpus:
                continue  # each variable's own bound already keeps the zone within it
            self.lm.add_row(
                [(var, float(g)) for var, g, _ in items],
                -math.inf,
                float(gpus),
                name=f"inv[{z},{acc}]",
            )

    # ----------------------------------------------------------------------------------
    # Objectives: variable -> coefficient.

    def unserved_objective(self, demands: Iterable[int]) -> dict[int, float]:
        """Σ u[d] in requests/s over ``demands``."""
        return {self.v[di]: self.instance.demands[di].planned_requests_per_s for di in demands}

    def cost_objective(self) -> dict[int, float]:
        """Σ n · gpus · $/GPU-hour · region multiplier + Σ h · hosted $/hour, in $/hour."""
        out = {var: coef for b in self.blocks.values() for var, coef in b.count_terms(b.price)}
        for hi, var in self.h.items():
            if self.instance.hosted[hi].cost_per_hour > 0:
                out[var] = self.instance.hosted[hi].cost_per_hour
        return out

    def change_objective(self) -> dict[int, float]:
        """Σ |n − previous| in replicas, less previous replicas no variable can keep."""
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
        """Read a plan from solver values: whole zone counts, and shares cleaned of noise.

        A share on a block without replicas, or below 1e-12, is solver noise and dropped; a
        demand whose served shares add up to within ``ROW_TOLERANCE`` of the whole is scaled
        to exactly whole (no 1e-13 unserved rows). Pooled blocks are then split into zones
        (``split_pooled``; raises ``SplitFailed`` where the inventory does not allow it).
        """
        fixed: dict[tuple[str, str], int] = {}
        totals: dict[tuple[str, str], int] = {}
        for key, b in self.blocks.items():
            if b.zonal:
                for z, var in b.n.items():
                    if round(values[var]) > 0:
                        fixed[(z, b.shape.name)] = round(values[var])
                totals[key] = sum(round(values[var]) for var in b.n.values())
            elif b.count is not None:
                totals[key] = round(values[b.count])
        share: dict[int, float] = {}
        hosted: dict[int, float] = {}
        for di in self.demands:
            mine: dict[int, float] = {}
            for ri in self.instance.routes_of[di]:
                if ri not in self.f:
                    continue
                route = self.instance.routes[ri]
                s = max(0.0, values[self.f[ri]])
                # A share where no replica runs is noise, unless the route weighs nothing.
                weighs = route.load > 0 or route.concurrency > 0
                if s > 1e-12 and (totals.get((route.region, route.shape), 0) > 0 or not weighs):
                    mine[ri] = s
            away: dict[int, float] = {}
            for hi in self.instance.hosted_of[di] if self.instance.hosted_of else ():
                if hi in self.h and values[self.h[hi]] > 1e-12:
                    away[hi] = values[self.h[hi]]
            total = sum(mine.values()) + sum(away.values())
            rhs = self.rhs[di]
            if total > rhs:
                mine = {ri: s * rhs / total for ri, s in mine.items()}
                away = {hi: s * rhs / total for hi, s in away.items()}
            elif total > 0 and abs(total - rhs) <= ROW_TOLERANCE and mine:
                # Only the replica shares are scaled up: a hosted share could pass its quota.
                routed = sum(mine.values())
                mine = {ri: s * (rhs - sum(away.values())) / routed for ri, s in mine.items()}
            share.update(mine)
            hosted.update(away)
        plan = Plan(replicas=fixed, share=share, hosted=hosted)
        pooled = {
            key: totals[key] for key, b in self.blocks.items() if not b.zonal and totals[key] > 0
        }
        plan.replicas.update(
            split_pooled(
                self.instance, self.places, pooled_caps(self.instance, plan, pooled), fixed
            )
        )
        return plan

    def values_from_plan(self, plan: Plan) -> dict[int, float]:
        """Every model variable's value for ``plan`` (a complete solver hint)."""
        values: dict[int, float] = {}
        for b in self.blocks.values():
            counts = {z: plan.replicas.get((z, b.shape.name), 0) for z in b.n_ub}
            for z, var in b.n.items():
                values[var] = float(counts[z])
            if b.count is not None:
                values[b.count] = float(sum(counts.values()))
            if b.max_zone is not None:
                values[b.max_zone] = float(max(counts.values(), default=0))
            if b.promised is not None:
                promised = any(
                    plan.share.get(ri, 0.0) > 0
                    and self.instance.routes[ri].promise_level >= 1
                    and self.instance.routes[ri].load > 0
                    for ri in b.routes
                )
                values[b.promised] = 1.0 if promised else 0.0
            for z in b.n:
                aux = self.change_aux.get((z, b.shape.name))
                if aux is not None:
                    values[aux] = float(abs(counts[z] - self.previous[(z, b.shape.name)]))
        for ri, var in self.f.items():
            values[var] = plan.share.get(ri, 0.0)
        for hi, var in self.h.items():
            values[var] = plan.hosted.get(hi, 0.0)
        for di, var in self.v.items():
            served = sum(
                plan.share.get(ri, 0.0) for ri in self.instance.routes_of[di] if ri in self.f
            )
            if self.instance.hosted_of:
                served += sum(
                    plan.hosted.get(hi, 0.0) for hi in self.instance.hosted_of[di] if hi in self.h
                )
            # Shares scaled to whole add up to 1 only within float noise: not unserved.
            left = self.rhs[di] - served
            values[var] = left if left > ROW_TOLERANCE * max(1.0, self.rhs[di]) else 0.0
        return values

    def objective_value(self, objective: Mapping[int, float], plan: Plan) -> float:
        """``objective`` evaluated at ``plan``."""
        values = self.values_from_plan(plan)
        return sum(coef * values[var] for var, coef in objective.items())


@dataclass(frozen=True)
class Site:
    """Where a shape can run in a region: $/hour per replica, replicas each zone can hold."""

    region: str
    shape: Shape
    price: float
    n_ub: Mapping[str, int]


def sites(instance: Instance) -> dict[tuple[str, str], Site]:
    """Every (region, shape) with a zone whose inventory holds at least one replica."""
    problem = instance.problem
    out: dict[tuple[str, str], Site] = {}
    for r in instance.regions:
        multiplier = problem.region(r).price_multiplier
        for s in instance.shapes:
            n_ub = {
                z: problem.inventory_gpus(z, s.accelerator) // s.gpus
                for z in instance.zones_of[r]
                if problem.inventory_gpus(z, s.accelerator) >= s.gpus
            }
            if n_ub:
                price = s.gpus * problem.accelerator(s.accelerator).price_per_gpu_hour * multiplier
                out[(r, s.name)] = Site(region=r, shape=s, price=price, n_ub=n_ub)
    return out


def plan_rank(instance: Instance, plan: Plan, demands: Iterable[int]) -> tuple[float, ...]:
    """The spec's objective for ``plan`` over ``demands``, in its strict order.

    (unserved requests/s per priority, most important first; $/hour; Σ|n − previous|;
    Σ x·rtt). Tuples compare lexicographically, as the objective does.
    """
    problem = instance.problem
    demands = list(demands)
    unserved: dict[int, float] = defaultdict(float)
    spill = 0.0
    for di in demands:
        rate = instance.demands[di].planned_requests_per_s
        for ri in instance.routes_of[di]:
            spill += plan.share.get(ri, 0.0) * rate * instance.routes[ri].rtt_ms
        served = instance.served(di, plan)
        unserved[instance.demands[di].priority] += max(0.0, 1.0 - served) * rate
    cost = sum(
        n * problem.replica_price_per_hour(z, problem.shape(s))
        for (z, s), n in plan.replicas.items()
    ) + instance.hosted_cost(plan)
    keys = set(plan.replicas) | set(instance.previous)
    change = float(sum(abs(plan.replicas.get(k, 0) - instance.previous.get(k, 0)) for k in keys))
    return (*(unserved[p] for p in sorted(unserved)), cost, change, spill)


def pooled_caps(
    instance: Instance, plan: Plan, totals: Mapping[tuple[str, str], int]
) -> dict[tuple[str, str], tuple[int, int | None]]:
    """(N, most replicas one zone may hold) per pooled block, from ``plan``'s routed load.

    Zone loss needs ``N − max zone ≥ zone-promised load``, so a zone may hold up to
    ``N − ⌈Lz⌉`` (float noise ignored, as ``ceil_count``); None where nothing is promised.
    """
    loads = block_loads(instance, plan, plan.share)
    out: dict[tuple[str, str], tuple[int, int | None]] = {}
    for key, total in totals.items():
        zonal = loads.get(key, (0.0, 0.0, 0.0, 0.0))[2]
        out[key] = (total, total - ceil_count(zonal) if zonal > 0 else None)
    return out


def resplit(
    instance: Instance,
    places: Mapping[tuple[str, str], Site],
    plan: Plan,
    zonal_blocks: Collection[tuple[str, str]],
) -> Plan:
    """``plan`` with every pooled block's replicas spread over zones again, all at once.

    Parts are split alone while they are solved; their union must also fit each zone's
    inventory, which this checks (``SplitFailed`` names the pairs that do not fit).
    ``zonal_blocks`` keep their zone counts.
    """
    problem = instance.problem
    fixed: dict[tuple[str, str], int] = {}
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for (z, s), n in plan.replicas.items():
        key = (problem.region_of_zone(z), s)
        if key in zonal_blocks:
            fixed[(z, s)] = n
        else:
            totals[key] += n
    replicas = dict(fixed)
    replicas.update(split_pooled(instance, places, pooled_caps(instance, plan, totals), fixed))
    return Plan(replicas=replicas, share=dict(plan.share), hosted=dict(plan.hosted))


def split_pooled(
    instance: Instance,
    places: Mapping[tuple[str, str], Site],
    pooled: Mapping[tuple[str, str], tuple[int, int | None]],
    fixed: Mapping[tuple[str, str], int],
) -> dict[tuple[str, str], int]:
    """Whole replicas per zone for pooled (region, shape) -> (N, most replicas per zone).

    Per region and accelerator, shapes are placed largest first, each replica into the zone
    with the fewest of that shape (then the most GPUs left, then by name): an even spread,
    so a zone loss takes as little as it can, within what ``fixed`` counts leave of the
    inventory. Raises ``SplitFailed`` naming the (region, accelerator) pairs that do not fit.
    """
    problem = instance.problem
    left: dict[tuple[str, str], int] = {}

    def gpus_left(z: str, acc: str) -> int:
        if (z, acc) not in left:
            used = sum(
                n * problem.shape(s).gpus
                for (zz, s), n in fixed.items()
                if zz == z and problem.shape(s).accelerator == acc
            )
            left[(z, acc)] = problem.inventory_gpus(z, acc) - used
        return left[(z, acc)]

    out: dict[tuple[str, str], int] = {}
    failed: set[tuple[str, str]] = set()
    # Whole zone counts of zonal blocks from different parts can already overfill a zone.
    for z, s in fixed:
        acc = problem.shape(s).accelerator
        if gpus_left(z, acc) < 0:
            failed.add((problem.region_of_zone(z), acc))
    order = sorted(
        pooled,
        key=lambda k: (
            k[0],
            places[k].shape.accelerator,
            -places[k].shape.gpus * pooled[k][0],
            k[1],
        ),
    )
    for key in order:
        site = places[key]
        shape = site.shape
        total, cap = pooled[key]
        here = dict.fromkeys(site.n_ub, 0)
        for _ in range(total):
            room = [
                z
                for z in here
                if (cap is None or here[z] < cap) and gpus_left(z, shape.accelerator) >= shape.gpus
            ]
            if not room:
                failed.add((site.region, shape.accelerator))
                break
            z = min(room, key=lambda k: (here[k], -gpus_left(k, shape.accelerator), k))
            here[z] += 1
            left[(z, shape.accelerator)] -= shape.gpus
        for z, n in here.items():
            if n > 0:
                out[(z, shape.name)] = n
    if failed:
        raise SplitFailed(failed)
    return out


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
    for di in range(len(instance.routes_of)):
        served = instance.served(di, plan)
        if served > 1.0 + ROW_TOLERANCE:
            out.append(f"demand {instance.demands[di].id}: serves {served} of its rate")
    out.extend(quota_violations(instance, plan))
    return out


def hosted_usage(instance: Instance, plan: Plan) -> dict[str, tuple[float, float, float]]:
    """Per hosted provider: (tokens per minute, requests per minute, $/hour) ``plan`` sends."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for hi, share in plan.hosted.items():
        if share <= 0:
            continue
        h = instance.hosted[hi]
        acc = out[h.provider]
        acc[0] += share * h.tokens_per_minute
        acc[1] += share * h.requests_per_minute
        acc[2] += share * h.cost_per_hour
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def quota_violations(instance: Instance, plan: Plan) -> list[str]:
    """Hosted quotas ``plan`` breaks beyond float noise, in words."""
    out: list[str] = []
    providers = {p.name: p for p in instance.problem.hosted}
    for name, (tpm, rpm, _cost) in sorted(hosted_usage(instance, plan).items()):
        provider = providers[name]
        if not holds(tpm, provider.tpm_limit):
            out.append(f"tpm {name}: {tpm} > {provider.tpm_limit}")
        if provider.rpm_limit is not None and not holds(rpm, provider.rpm_limit):
            out.append(f"rpm {name}: {rpm} > {provider.rpm_limit}")
    return out
