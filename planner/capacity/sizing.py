"""Fleet sizing: replicas for a demand and a promise, regional floors, pipeline bottlenecks.

Demand is divided by derated per-replica capacity: a benchmark's sustained throughput times a
planning utilisation target (0.7 by default, because queueing delay climbs steeply near the
knee). Each further promise has a price: a burst factor, a spare (N+1), surviving the loss of a
zone. Regions each pay a floor. A pipeline's capacity is its slowest stage.

Units: demand and per-replica capacity in any one unit (output tokens/s, requests/s, or
replica-seconds per second); requests/s for stage capacities.

Counts are rounded up with ``ceil_count``: a quotient within a relative 1e-9 of a whole number is
that number (8.4 / 0.7 is 12.000000000000002 in floating point and needs 12 replicas, not 13).

Every public function raises ``PlannerInputError`` naming the argument for negative or
non-finite demand, non-positive capacity, a utilisation target outside (0, 1], a burst factor
below 1, zone, spare or floor counts out of range, and empty stage or region lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from planner.capacity import _checks
from planner.errors import PlannerInputError

# The planning utilisation target: each replica is planned at 70% of its sustained
# throughput. The placement contract's default (``target_utilization``) is this value.
DEFAULT_TARGET_UTILIZATION: Final = 0.7


def replicas_needed(
    demand_tok_s: float,
    per_replica_tok_s: float,
    target_util: float = DEFAULT_TARGET_UTILIZATION,
    burst: float = 1.0,
    zones: int = 1,
) -> int:
    """Replicas to carry ``demand × burst`` at ``target_util`` of each replica's capacity.

    With ``zones`` > 1 the fleet must still carry it after losing any one zone: the survivors,
    (zones − 1)/zones of the fleet, carry it all, and the count is rounded up to equal replicas
    per zone. 800 tokens/s at 100 tokens/s per replica: 12; with a 1.5 burst: 18; and across 3
    zones: 27 (9 per zone). Demand and capacity may be in any one unit: 20 req/s at 1 req/s
    per replica needs 29.
    """
    demand = _checks.non_negative("demand_tok_s", demand_tok_s)
    per_replica = _checks.positive("per_replica_tok_s", per_replica_tok_s)
    util = _checks.utilization("target_util", target_util)
    factor = _checks.at_least_one("burst", burst)
    zone_count = _checks.positive_int("zones", zones)
    effective = per_replica * util
    load = demand * factor
    if zone_count == 1:
        return _checks.ceil_count(load / effective)
    survive = (zone_count - 1) / zone_count
    need = _checks.ceil_count(load / (effective * survive))
    return zone_count * _checks.ceil_count(need / zone_count)


class FailurePromise(StrEnum):
    """Which failure the fleet promises to ride out within its latency target."""

    NONE = "none"
    """Meet the demand while everything is up."""
    N_PLUS_1 = "n+1"
    """Survive the loss of any one replica: one spare on top."""
    ZONE = "zone"
    """Survive the loss of any one zone: the others carry everything."""


def replicas_for_promise(
    demand_tok_s: float,
    per_replica_tok_s: float,
    promise: FailurePromise,
    target_util: float = DEFAULT_TARGET_UTILIZATION,
    burst: float = 1.0,
    zones: int = 3,
) -> int:
    """Replicas for a demand under a failure promise; never fewer for a stronger promise.

    NONE is ``replicas_needed`` in one pool, N_PLUS_1 adds one spare, ZONE is the zonal line of
    ``replicas_needed`` over ``zones`` (≥ 2) zones, which is always at least N+1. Demand must be
    positive: a promise to serve nothing has no price. 800 tokens/s with a 1.5 burst: 18, 19
    and 27 replicas.
    """
    demand = _checks.positive("demand_tok_s", demand_tok_s)
    base = replicas_needed(demand, per_replica_tok_s, target_util, burst)
    if promise is FailurePromise.NONE:
        return base
    if promise is FailurePromise.N_PLUS_1:
        return base + 1
    if promise is FailurePromise.ZONE:
        zone_count = _checks.positive_int("zones", zones)
        if zone_count < 2:
            raise PlannerInputError("zones", "a zone-loss promise needs at least 2 zones")
        return replicas_needed(demand, per_replica_tok_s, target_util, burst, zone_count)
    raise PlannerInputError("promise", f"unknown failure promise {promise!r}")


def gpus_for_concurrency(active_concurrency: float, slots_per_gpu: float) -> int:
    """GPUs to hold a target active concurrency: ceil(active sequences / measured slots per GPU).

    400 active sequences at 32 SLO-meeting slots per GPU: ceil(12.5) = 13, before headroom.
    Valid only when the concurrency is the target *active* concurrency (not Little's law on a
    fleet that is already queueing) and the slots come from a benchmark of the same workload.
    """
    active = _checks.non_negative("active_concurrency", active_concurrency)
    slots = _checks.positive("slots_per_gpu", slots_per_gpu)
    return _checks.ceil_count(active / slots)


# -- regions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegionSizing:
    """One region's replicas: those that carry its load, and the total with spare and floor."""

    name: str
    rate_rps: float
    serving_replicas: int
    replicas: int
    utilization: float


@dataclass(frozen=True)
class RegionalPlan:
    """Per-region sizing and the fleet total."""

    regions: tuple[RegionSizing, ...]
    total: int


def regional_replicas(
    region_rates: Mapping[str, float],
    per_replica_rps: float = 1.0,
    target_util: float = DEFAULT_TARGET_UTILIZATION,
    spares_per_region: int = 1,
    min_per_region: int = 2,
) -> RegionalPlan:
    """Size each region on its own traffic, plus spares, but never below a floor per region.

    Regions fragment a fleet: each rounds up separately and pays its own spare and floor. 20
    req/s in one pool needs ceil(20 / 0.7) = 29 replicas; split 6 EU / 14 US it needs 9 + 20,
    plus one spare each (10 + 21), and a third region with 0.6 req/s still needs 2 to be
    available at all (30% utilised): 33 against 29.
    """
    _checks.non_empty("region_rates", region_rates)
    spares = _checks.non_negative_int("spares_per_region", spares_per_region)
    floor = _checks.non_negative_int("min_per_region", min_per_region)
    per_replica = _checks.positive("per_replica_rps", per_replica_rps)
    sized = []
    for name, rate in region_rates.items():
        r = _checks.non_negative(f"region_rates[{name}]", rate)
        serving = replicas_needed(r, per_replica, target_util)
        replicas = max(floor, serving + spares)
        sized.append(
            RegionSizing(
                name=name,
                rate_rps=r,
                serving_replicas=serving,
                replicas=replicas,
                utilization=r / (replicas * per_replica) if replicas else 0.0,
            )
        )
    return RegionalPlan(regions=tuple(sized), total=sum(s.replicas for s in sized))


# -- pipeline -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageCapacity:
    """What one stage of the request path sustains, in user requests per second."""

    name: str
    requests_per_s: float


def fleet_request_capacity(
    replicas: int, per_replica_rps: float = 1.0, target_util: float = DEFAULT_TARGET_UTILIZATION
) -> float:
    """User requests/s a model fleet sustains at its planning utilisation.

    12 replicas at 1 req/s and 0.7: 8.4 req/s; 29 replicas: 20.3.
    """
    n = _checks.non_negative_int("replicas", replicas)
    per_replica = _checks.positive("per_replica_rps", per_replica_rps)
    util = _checks.utilization("target_util", target_util)
    return n * per_replica * util


def tool_stage_capacity(
    calls_per_s: float, share_of_requests: float, calls_per_request: float = 1.0
) -> float:
    """User requests/s a rate-limited tool supports when only some requests call it.

    calls/s ÷ (share of requests that call it × calls each makes): a 10 calls/s quota used by
    15% of requests supports 10 / 0.15 = 66.7 requests/s.
    """
    calls = _checks.non_negative("calls_per_s", calls_per_s)
    share = _checks.utilization("share_of_requests", share_of_requests)
    per_request = _checks.positive("calls_per_request", calls_per_request)
    return calls / (share * per_request)


@dataclass(frozen=True)
class PipelineCapacity:
    """End-to-end capacity and the order in which the stages' limits are reached."""

    capacity_rps: float
    bottleneck: str
    limits_in_order: tuple[StageCapacity, ...]


def pipeline_capacity(stages: Sequence[StageCapacity]) -> PipelineCapacity:
    """A pipeline sustains the minimum of its stages; list them in the order demand hits them.

    Gateway 60, retrieval 45, tool quota 66.7 and a 12-replica fleet 8.4 req/s: the fleet is the
    bottleneck by a factor of five. At 29 replicas (20.3) it still is, and the limits are then
    reached in the order fleet 20.3, retrieval 45, gateway 60, tool quota 66.7. Ties keep the
    order given.
    """
    items = tuple(stages)
    _checks.non_empty("stages", items)
    for stage in items:
        _checks.non_negative(f"stages[{stage.name}].requests_per_s", stage.requests_per_s)
    ordered = tuple(sorted(items, key=lambda s: s.requests_per_s))
    return PipelineCapacity(
        capacity_rps=ordered[0].requests_per_s,
        bottleneck=ordered[0].name,
        limits_in_order=ordered,
    )


def zone_floors(*, total: int, survivors: int, zone_replicas: Mapping[str, int]) -> dict[str, int]:
    """The fewest replicas to keep standing in each zone, given region-wide needs.

    ``total`` replicas must stand over the zones together (capacity, the N+1 spare, the
    concurrency cap), and, after losing any one zone, the others must still hold
    ``survivors`` (0 when nothing promised to ride out a zone loss). Each zone keeps at most
    the plan's ``zone_replicas``. Replicas are added one at a time to the zone that holds the
    fewest, so the floors stay as even as the plan allows, which is what keeps the largest
    zone, the one whose loss hurts most, small.

    The seeds' zone promise: 18 standing over 3 zones of 9 each, 12 of which must survive a
    zone loss, gives 6 per zone. A plan that already meets both needs always has room; a
    ``total`` or ``survivors`` beyond the plan is capped at the plan's own replicas.
    """
    _checks.non_negative("total", total)
    _checks.non_negative("survivors", survivors)
    for zone, count in zone_replicas.items():
        _checks.non_negative(f"zone_replicas[{zone}]", count)
    floors = dict.fromkeys(zone_replicas, 0)

    def short() -> bool:
        standing = sum(floors.values())
        if standing < total:
            return True
        return survivors > 0 and any(standing - n < survivors for n in floors.values())

    while short():
        room = [z for z in sorted(floors) if floors[z] < zone_replicas[z]]
        if not room:
            break  # the plan itself is the most that can stand
        # The fullest zone is the one a loss hurts most: grow the emptiest instead.
        zone = min(room, key=lambda z: (floors[z], -zone_replicas[z], z))
        floors[zone] += 1
    return floors
