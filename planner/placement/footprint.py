"""What a placement solution holds, pool by pool: replicas, GPUs, $/hour and each demand's load.

A *pool* here is one shape in one region (the zones summed). ``footprint`` reads a solution
of ``placement-v1`` against its problem; ``footprint_change`` sets two side by side (a plan
before and after a change of its inputs), every pool either holds, so a change is read as
"eu-west chat-70b/gpu80x2: 12 → 15 replicas, 24 → 30 GPUs, $108.24/h → $135.30/h".

Units: replicas and GPUs are whole counts, costs $/hour (GPUs × $/GPU-hour × the region's
price multiplier, the solver's own objective), loads replica-seconds per second: a demand's
planned rate (requests/s × burst) × its request's cost (``Problem.request_cost_s``) on the
shapes the solution routes it to, or on its model's cheapest shape where nothing is routed:
the load it asks of the plan, served or not.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.placement.problem import Problem, parse_problem


@dataclass(frozen=True)
class PoolFootprint:
    """One shape in one region of a solution."""

    region: str
    shape: str
    model: str
    replicas: int
    gpus: int
    cost_per_hour: float


@dataclass(frozen=True)
class Footprint:
    """A solution, pool by pool, with the load (replica-s/s) each demand asks of it."""

    pools: tuple[PoolFootprint, ...]
    demand_load: Mapping[str, float]

    @property
    def replicas(self) -> int:
        return sum(p.replicas for p in self.pools)

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    @property
    def cost_per_hour(self) -> float:
        return math.fsum(p.cost_per_hour for p in self.pools)

    def replicas_of(self, *, model: str, region: str) -> int:
        """Replicas of every shape of ``model`` in ``region``."""
        return sum(p.replicas for p in self.pools if p.model == model and p.region == region)


def footprint(problem: Mapping[str, Any] | Problem, solution: Mapping[str, Any]) -> Footprint:
    """The pools of ``solution`` (a ``placement-v1`` solution of ``problem``), sorted by
    region and shape, and the load each demand of the problem asks of them.

    Raises ``ProblemInvalid`` for an invalid problem; rows naming a zone, shape or demand the
    problem lacks raise ``KeyError`` (the solution is not of this problem).
    """
    parsed = problem if isinstance(problem, Problem) else parse_problem(problem)
    replicas: dict[tuple[str, str], int] = defaultdict(int)
    cost: dict[tuple[str, str], float] = defaultdict(float)
    for row in solution.get("replicas", []):
        count = int(row["replicas"])
        if count <= 0:
            continue
        shape = parsed.shape(str(row["shape"]))
        key = (parsed.region_of_zone(str(row["zone"])), shape.name)
        replicas[key] += count
        cost[key] += count * parsed.replica_price_per_hour(str(row["zone"]), shape)
    pools = tuple(
        PoolFootprint(
            region=region,
            shape=name,
            model=parsed.shape(name).model,
            replicas=replicas[(region, name)],
            gpus=replicas[(region, name)] * parsed.shape(name).gpus,
            cost_per_hour=cost[(region, name)],
        )
        for region, name in sorted(replicas)
    )
    demands = {d.id: d for d in parsed.demands}
    routed_rate: dict[str, float] = defaultdict(float)
    routed_load: dict[str, float] = defaultdict(float)
    for row in solution.get("routing", []):
        demand = demands[str(row["demand"])]
        rate = float(row["requests_per_s"])
        routed_rate[demand.id] += rate
        routed_load[demand.id] += rate * parsed.request_cost_s(
            demand, parsed.shape(str(row["shape"]))
        )
    load: dict[str, float] = {}
    for demand in parsed.demands:
        # Per-request cost: as routed; where nothing is routed, the model's cheapest shape.
        if routed_rate[demand.id] > 0:
            per_request = routed_load[demand.id] / routed_rate[demand.id]
        else:
            costs = [
                parsed.request_cost_s(demand, s) for s in parsed.shapes if s.model == demand.model
            ]
            per_request = min(costs, default=0.0)
        load[demand.id] = demand.planned_requests_per_s * per_request
    return Footprint(pools=pools, demand_load=load)


@dataclass(frozen=True)
class PoolChange:
    """One pool before and after; zero on the side that does not hold it."""

    region: str
    shape: str
    model: str
    replicas_before: int
    replicas_after: int
    gpus_before: int
    gpus_after: int
    cost_per_hour_before: float
    cost_per_hour_after: float

    @property
    def replica_delta(self) -> int:
        return self.replicas_after - self.replicas_before


def footprint_change(before: Footprint, after: Footprint) -> tuple[PoolChange, ...]:
    """Every pool either footprint holds, sorted by region and shape."""
    old = {(p.region, p.shape): p for p in before.pools}
    new = {(p.region, p.shape): p for p in after.pools}
    out = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        model = b.model if b is not None else old[key].model
        out.append(
            PoolChange(
                region=key[0],
                shape=key[1],
                model=model,
                replicas_before=a.replicas if a else 0,
                replicas_after=b.replicas if b else 0,
                gpus_before=a.gpus if a else 0,
                gpus_after=b.gpus if b else 0,
                cost_per_hour_before=a.cost_per_hour if a else 0.0,
                cost_per_hour_after=b.cost_per_hour if b else 0.0,
            )
        )
    return tuple(out)
