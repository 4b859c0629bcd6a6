"""An autoscaler's bounds for a plan: per region and shape, the standing floor, the ceiling,
the in-flight target per replica and the per-zone floors and ceilings.

Pure functions over the typed problem (``planner.placement.problem.Problem``) and the plan's
plain rows, so the arithmetic reads and tests like the seeds' worked examples:

- the **standing floor**: the fewest replicas that still meet every hard constraint of the
  placement contract for the region's routed load *before* the burst factor (capacity at the
  shape's target utilisation, one spare where N+1 was promised, surviving the loss of any zone
  in use where a zone promise was made, the concurrency cap). The seeds' sizing exercise:
  8 requests/s of 1 replica-second each at a 70% target stand on 12 replicas; the 1.5 burst
  makes the plan 18.
- the **ceiling**: the plan's replicas plus as many more as the region's unallocated GPUs of
  the shape's accelerator hold (inventory from the problem, minus every allocation on that
  accelerator in the region), and, when every tenant the shape serves there has a quota, no
  more than those quotas can keep busy: Σ budget refill rates (replica-seconds per second) at
  the shape's target utilisation. Never below the plan.
- the **in-flight target per replica**: the shape's target utilisation times the requests in
  flight per replica at saturation, Σ rate·residence / Σ rate·cost over the routed demands
  that give a residence time (Little's law); the seeds' 70% of 5 = 3.5. ``None`` when no
  routed demand gives a residence time.
- **per zone**, the floor each zone keeps standing (``planner.capacity.sizing.zone_floors``;
  at least 1 in a zone the plan uses) and the zone's ceiling (its plan replicas plus what the
  zone's free GPUs hold).

Units: requests/s for rates, replica-seconds for request costs, seconds for residence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from planner.capacity.sizing import replicas_needed, zone_floors
from planner.capacity.workload import request_cost
from planner.placement.problem import Problem


@dataclass(frozen=True)
class AllocationRow:
    """Whole replicas of one shape in one zone, as the plan stores them."""

    region: str
    zone: str
    shape: str
    accelerator: str
    gpus_per_replica: int
    replicas: int
    cost_per_hour: float


@dataclass(frozen=True)
class RoutingRow:
    """Requests/s of one demand served by one shape in one region, planned units (× burst)."""

    demand: str
    tenant: str
    region: str
    shape: str
    requests_per_s: float


@dataclass(frozen=True)
class ShapeSizing:
    """One shape in one region: the plan's replicas and the autoscaler's bounds and target."""

    replicas: int
    standing_floor: int
    max_replicas: int
    inflight_target_per_replica: float | None
    model: str
    zone_floors: Mapping[str, int] = field(default_factory=dict)
    zone_max_replicas: Mapping[str, int] = field(default_factory=dict)


@dataclass
class ShapeLoad:
    """Un-bursted load routed to one region and shape, replica-seconds per second.

    ``n_plus_1`` and ``zone`` are the parts promised N+1 (or zone) and zone loss;
    ``in_flight`` the requests in the system (rate × residence) of the demands that give a
    residence time, and ``costed_with_residence`` their work; ``unknown`` is set when a row
    routes a demand or shape the problem does not describe.
    """

    all: float = 0.0
    n_plus_1: float = 0.0
    zone: float = 0.0
    in_flight: float = 0.0
    costed_with_residence: float = 0.0
    unknown: bool = False


def routed_loads(
    problem: Problem, routing: Iterable[RoutingRow]
) -> dict[tuple[str, str], ShapeLoad]:
    """The un-bursted load of every (region, shape) the routing uses."""
    demands = {d.id: d for d in problem.demands}
    shapes = {s.name: s for s in problem.shapes}
    loads: dict[tuple[str, str], ShapeLoad] = defaultdict(ShapeLoad)
    for row in routing:
        load = loads[(row.region, row.shape)]
        demand = demands.get(row.demand)
        shape = shapes.get(row.shape)
        if demand is None or shape is None:
            # The plan routes to something its own problem does not describe: size nothing
            # below the plan for this shape.
            load.unknown = True
            continue
        rate = row.requests_per_s / demand.burst
        cost = request_cost(
            demand.prompt_tokens,
            demand.output_tokens,
            shape.prefill_tokens_per_s,
            shape.decode_tokens_per_s,
            demand.prefix_cache_hit_rate,
        )
        work = rate * cost
        load.all += work
        if demand.promise_level >= 1:
            load.n_plus_1 += work
        if demand.promise_level >= 2:
            load.zone += work
        if demand.residence_s is not None:
            load.in_flight += rate * demand.residence_s
            load.costed_with_residence += work
    return loads


def standing_floor(
    load: ShapeLoad, utilization: float, zones_in_use: int, max_concurrency: float | None
) -> int:
    """The fewest replicas meeting the contract's hard constraints for the un-bursted load."""
    floors = [1, replicas_needed(load.all, 1.0, utilization)]
    if load.n_plus_1 > 0:
        floors.append(replicas_needed(load.n_plus_1, 1.0, utilization) + 1)
    if load.zone > 0 and zones_in_use >= 2:
        floors.append(replicas_needed(load.zone, 1.0, utilization, zones=zones_in_use))
    if max_concurrency and load.in_flight > 0:
        floors.append(replicas_needed(load.in_flight, float(max_concurrency), 1.0))
    return max(floors)


def quota_cap(tenants: set[str], quotas: Mapping[str, float], utilization: float) -> int | None:
    """Replicas the tenants' quotas (replica-seconds per second) can keep busy at
    ``utilization``; None when a tenant has no quota (nothing bounds its traffic but
    inventory)."""
    if not tenants or any(t not in quotas for t in tenants):
        return None
    return replicas_needed(sum(quotas[t] for t in tenants), 1.0, utilization)


def fixed_sizing(allocations: Iterable[AllocationRow]) -> dict[tuple[str, str], ShapeSizing]:
    """Bounds at the plan itself, per (region, shape): every zone keeps what the plan gave it
    (for a plan whose problem cannot be read)."""
    zones = _zone_replicas(allocations)
    return {
        key: ShapeSizing(
            n,
            n,
            n,
            None,
            model="",
            zone_floors=dict(zones[key]),
            zone_max_replicas=dict(zones[key]),
        )
        for key, n in sorted(_replicas(zones).items())
    }


def _zone_replicas(allocations: Iterable[AllocationRow]) -> dict[tuple[str, str], dict[str, int]]:
    zones: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for row in allocations:
        if row.replicas > 0:
            key = (row.region, row.shape)
            zones[key][row.zone] = zones[key].get(row.zone, 0) + row.replicas
    return zones


def _replicas(zones: Mapping[tuple[str, str], Mapping[str, int]]) -> dict[tuple[str, str], int]:
    return {key: sum(per_zone.values()) for key, per_zone in zones.items()}


def shape_sizing(
    problem: Problem,
    allocations: Iterable[AllocationRow],
    routing: Iterable[RoutingRow],
    quotas: Mapping[str, float] | None = None,
) -> dict[tuple[str, str], ShapeSizing]:
    """The autoscaler's bounds of every (region, shape) the plan allocates replicas to.

    ``quotas`` maps a tenant to its quota's budget refill rate in replica-seconds per second
    (no entry: no quota). A shape the problem does not describe, or whose routing names a
    demand or shape the problem lacks, keeps its bounds at the plan.
    """
    allocations = [row for row in allocations if row.replicas > 0]
    routing = list(routing)
    quotas = quotas or {}
    zones = _zone_replicas(allocations)
    fixed = fixed_sizing(allocations)
    used_gpus: dict[tuple[str, str], int] = defaultdict(int)
    used_zone_gpus: dict[tuple[str, str], int] = defaultdict(int)
    accelerator_of: dict[str, str] = {}
    gpus_of: dict[str, int] = {}
    for row in allocations:
        used_gpus[(row.region, row.accelerator)] += row.replicas * row.gpus_per_replica
        used_zone_gpus[(row.zone, row.accelerator)] += row.replicas * row.gpus_per_replica
        accelerator_of[row.shape] = row.accelerator
        gpus_of[row.shape] = row.gpus_per_replica
    shapes = {s.name: s for s in problem.shapes}
    regions = {r.name: r for r in problem.regions}
    loads = routed_loads(problem, routing)
    served: dict[tuple[str, str], set[str]] = defaultdict(set)
    for route in routing:
        if route.requests_per_s > 0:
            served[(route.region, route.shape)].add(route.tenant)
    sizing: dict[tuple[str, str], ShapeSizing] = {}
    for (region, shape_name), n in sorted(_replicas(zones).items()):
        shape = shapes.get(shape_name)
        load = loads.get((region, shape_name), ShapeLoad())
        if shape is None or load.unknown:
            sizing[(region, shape_name)] = fixed[(region, shape_name)]
            continue
        in_zones = zones[(region, shape_name)]
        floor = standing_floor(load, shape.target_utilization, len(in_zones), shape.max_concurrency)
        accelerator = accelerator_of[shape_name]
        region_row = regions.get(region)
        inventory = sum(
            problem.inventory_gpus(zone, accelerator)
            for zone in (region_row.zones if region_row else ())
        )
        free = max(0, inventory - used_gpus[(region, accelerator)])
        target = (
            shape.target_utilization * load.in_flight / load.costed_with_residence
            if load.costed_with_residence > 0
            else None
        )
        survivors = (
            replicas_needed(load.zone, 1.0, shape.target_utilization)
            if load.zone > 0 and len(in_zones) >= 2
            else 0
        )
        per_zone = zone_floors(total=min(floor, n), survivors=survivors, zone_replicas=in_zones)
        gpus = gpus_of[shape_name]
        cap = quota_cap(served[(region, shape_name)], quotas, shape.target_utilization)

        def capped(plan: int, inventory_max: int, cap: int | None = cap) -> int:
            return max(plan, inventory_max if cap is None else min(inventory_max, cap))

        sizing[(region, shape_name)] = ShapeSizing(
            replicas=n,
            standing_floor=min(floor, n),
            max_replicas=capped(n, n + free // gpus),
            inflight_target_per_replica=target,
            model=shape.model,
            zone_floors={zone: max(1, f) for zone, f in per_zone.items()},
            # A zone takes more than its share while another is down: each zone's ceiling is
            # bounded by the whole quota, not by a split of it.
            zone_max_replicas={
                zone: capped(
                    count,
                    count
                    + max(
                        0,
                        problem.inventory_gpus(zone, accelerator)
                        - used_zone_gpus[(zone, accelerator)],
                    )
                    // gpus,
                )
                for zone, count in in_zones.items()
            },
        )
    return sizing
