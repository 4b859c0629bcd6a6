"""How full each pool (region × shape) of a plan is: the load the plan routes to it, the
utilisation that load makes of its replicas, the headroom left, and the promise it keeps.

Pure functions over ``placement-problem/v1`` and ``placement-solution/v1`` dicts, using the
model's own load rows (``model.block_loads``), so the numbers match what the solver sized.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.placement.explain import plan_from_solution
from planner.placement.model import Instance, block_loads
from planner.placement.problem import PROMISES, Problem, parse_problem


@dataclass(frozen=True)
class PoolLoad:
    """One region × shape of a plan.

    ``load_replicas`` is the replicas of target capacity the routed demand takes
    (``Σ x·c / U``); ``utilization`` the share of the replicas' full capacity it fills
    (``Σ x·c / N``, 0 with no replicas); ``headroom_replicas`` the replicas beyond that load
    (``N − load``: spares kept for the promise and whole-replica rounding); ``promise`` the
    strongest promise among the demands routed here ("none" when nothing is routed).
    """

    region: str
    shape: str
    replicas: int
    target_utilization: float
    load_replicas: float
    utilization: float
    headroom_replicas: float
    promise: str


def pool_loads(problem: Mapping[str, Any] | Problem, solution: Mapping[str, Any]) -> list[PoolLoad]:
    """Every pool the solution gives replicas or routes traffic to, sorted by region, shape.

    Raises ``ProblemInvalid`` for a problem that is not valid ``placement-problem/v1``.
    """
    parsed = problem if isinstance(problem, Problem) else parse_problem(problem)
    instance = Instance.build(parsed)
    plan = plan_from_solution(instance, solution)
    loads = block_loads(instance, plan, range(len(instance.routes)))
    replicas: dict[tuple[str, str], int] = defaultdict(int)
    for (zone, shape_name), count in plan.replicas.items():
        replicas[(parsed.region_of_zone(zone), shape_name)] += count
    strongest: dict[tuple[str, str], int] = defaultdict(int)
    for ri, share in plan.share.items():
        if share <= 0:
            continue
        route = instance.routes[ri]
        key = (route.region, route.shape)
        strongest[key] = max(strongest[key], route.promise_level)
    out = []
    for key in sorted(set(replicas) | set(loads)):
        region, name = key
        shape = parsed.shape(name)
        n = replicas.get(key, 0)
        load = loads.get(key, (0.0, 0.0, 0.0, 0.0))[0]
        out.append(
            PoolLoad(
                region=region,
                shape=name,
                replicas=n,
                target_utilization=shape.target_utilization,
                load_replicas=load,
                utilization=(load * shape.target_utilization / n) if n > 0 else 0.0,
                headroom_replicas=n - load,
                promise=PROMISES[strongest.get(key, 0)],
            )
        )
    return out
