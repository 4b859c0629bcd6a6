"""The autoscaler's bounds of a plan (``planner.placement.bounds``), on the seeds' sizing
example: 8 requests/s of 1 replica-second each at a 70% target stand on 12 replicas."""

from __future__ import annotations

import copy
from typing import Any

from planner.placement.bounds import (
    AllocationRow,
    RoutingRow,
    ShapeLoad,
    fixed_sizing,
    quota_cap,
    routed_loads,
    shape_sizing,
    standing_floor,
)
from planner.placement.problem import parse_problem

PROBLEM: dict[str, Any] = {
    "regions": [{"name": "r1", "zones": ["r1-a", "r1-b", "r1-c"]}],
    "accelerators": [{"name": "gpu80", "price_per_gpu_hour": 2.0}],
    "inventory": [
        {"zone": z, "accelerator": "gpu80", "gpus": 10} for z in ("r1-a", "r1-b", "r1-c")
    ],
    "shapes": [
        {
            "name": "m/gpu80x1",
            "model": "m",
            "accelerator": "gpu80",
            "gpus": 1,
            "prefill_tokens_per_s": 4000,
            "decode_tokens_per_s": 100,
            "max_concurrency": 32,
        }
    ],
    "demands": [
        {
            "id": "t/chat",
            "tenant": "t",
            "model": "m",
            "home_region": "r1",
            "requests_per_s": 8.0,
            "burst": 1.5,
            "prompt_tokens": 0,
            "output_tokens": 100,
            "residence_s": 5.0,
        }
    ],
}
# The burst-sized plan: 18 replicas over the three zones, 12 requests/s routed.
ALLOCATIONS = [
    AllocationRow("r1", z, "m/gpu80x1", "gpu80", 1, 6, 12.0) for z in ("r1-a", "r1-b", "r1-c")
]
ROUTING = [RoutingRow("t/chat", "t", "r1", "m/gpu80x1", 12.0)]


def test_the_load_is_un_bursted_work() -> None:
    load = routed_loads(parse_problem(PROBLEM), ROUTING)[("r1", "m/gpu80x1")]
    assert load.all == 8.0  # 12 / 1.5 requests/s × 1 replica-second
    assert load.in_flight == 40.0  # 8 requests/s × 5 s in the system
    assert load.n_plus_1 == load.zone == 0.0 and not load.unknown


def test_standing_floor_follows_each_promise() -> None:
    assert standing_floor(ShapeLoad(all=8.0), 0.7, 3, None) == 12
    assert standing_floor(ShapeLoad(all=8.0, n_plus_1=8.0), 0.7, 3, None) == 13
    # Zone loss over three zones: 12 must survive the loss of one, so 18.
    assert standing_floor(ShapeLoad(all=8.0, n_plus_1=8.0, zone=8.0), 0.7, 3, None) == 18
    # 400 requests in flight at 32 per replica: 13.
    assert standing_floor(ShapeLoad(all=8.0, in_flight=400.0), 0.7, 3, 32) == 13
    assert standing_floor(ShapeLoad(), 0.7, 1, None) == 1


def test_quota_cap_needs_every_tenant_to_have_a_quota() -> None:
    assert quota_cap({"a", "b"}, {"a": 3.5, "b": 3.5}, 0.7) == 10
    assert quota_cap({"a", "b"}, {"a": 3.5}, 0.7) is None
    assert quota_cap(set(), {"a": 1.0}, 0.7) is None


def test_shape_sizing_of_the_seeds_plan() -> None:
    sized = shape_sizing(parse_problem(PROBLEM), ALLOCATIONS, ROUTING)[("r1", "m/gpu80x1")]
    assert sized.replicas == 18
    assert sized.standing_floor == 12
    # 30 GPUs in the region, 18 used: 12 more replicas.
    assert sized.max_replicas == 30
    assert sized.inflight_target_per_replica == 0.7 * 5.0
    assert sized.model == "m"
    assert sized.zone_floors == {"r1-a": 4, "r1-b": 4, "r1-c": 4}
    assert sized.zone_max_replicas == {"r1-a": 10, "r1-b": 10, "r1-c": 10}


def test_quotas_cap_the_ceiling_never_below_the_plan() -> None:
    problem = parse_problem(PROBLEM)
    assert (
        shape_sizing(problem, ALLOCATIONS, ROUTING, {"t": 14.0})[("r1", "m/gpu80x1")].max_replicas
        == 20
    )
    assert (
        shape_sizing(problem, ALLOCATIONS, ROUTING, {"t": 1.0})[("r1", "m/gpu80x1")].max_replicas
        == 18
    )


def test_an_unknown_demand_keeps_the_bounds_at_the_plan() -> None:
    routing = [*ROUTING, RoutingRow("ghost", "g", "r1", "m/gpu80x1", 1.0)]
    sized = shape_sizing(parse_problem(PROBLEM), ALLOCATIONS, routing)[("r1", "m/gpu80x1")]
    assert sized == fixed_sizing(ALLOCATIONS)[("r1", "m/gpu80x1")]
    assert (sized.standing_floor, sized.max_replicas) == (18, 18)
    assert sized.zone_floors == {"r1-a": 6, "r1-b": 6, "r1-c": 6}


def test_a_zone_promise_spreads_floors_that_survive_a_zone_loss() -> None:
    problem = copy.deepcopy(PROBLEM)
    problem["demands"][0]["promise"] = "zone"
    allocations = [
        AllocationRow("r1", z, "m/gpu80x1", "gpu80", 1, 9, 18.0) for z in ("r1-a", "r1-b", "r1-c")
    ]
    sized = shape_sizing(parse_problem(problem), allocations, ROUTING)[("r1", "m/gpu80x1")]
    assert sized.standing_floor == 18
    floors = sized.zone_floors
    assert sum(floors.values()) == 18
    # Losing any one zone leaves the 12 the un-bursted load needs.
    assert all(18 - floor >= 12 for floor in floors.values())
