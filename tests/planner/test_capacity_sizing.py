"""Fleet sizing: the three promise lines, regional floors, GPUs for concurrency, pipelines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.capacity.sizing import (
    FailurePromise,
    StageCapacity,
    fleet_request_capacity,
    gpus_for_concurrency,
    pipeline_capacity,
    regional_replicas,
    replicas_for_promise,
    replicas_needed,
    tool_stage_capacity,
    zone_floors,
)
from planner.errors import PlannerInputError


def test_the_three_sizing_lines() -> None:
    # 800 output tokens/s against 100 tokens/s per replica at 70%: 12; a 1.5 burst: 18;
    # surviving a zone out of 3: ceil(25.71) = 26 → 27, 9 per zone.
    assert replicas_needed(800, 100) == 12
    assert replicas_needed(800, 100, burst=1.5) == 18
    assert replicas_needed(800, 100, burst=1.5, zones=3) == 27
    assert replicas_needed(800, 100, burst=1.5, zones=3) % 3 == 0


def test_whole_quotients_do_not_buy_a_replica_for_float_noise() -> None:
    # 8.4 / 0.7 is 12.000000000000002 in floating point; 8.4 req/s at 70% needs 12 replicas.
    assert 8.4 / 0.7 > 12
    assert replicas_needed(8.4, 1.0) == 12
    assert 21 / 0.7 > 30
    assert replicas_needed(21, 1.0) == 30
    # Just over a whole number still rounds up.
    assert replicas_needed(8.4001, 1.0) == 13
    # A tiny positive demand still needs a replica.
    assert replicas_needed(1e-12, 1.0) == 1
    assert replicas_needed(0.0, 1.0) == 0


def test_failure_promises() -> None:
    # The burst line under each promise: 18 while all is up, 19 with a spare, 27 across zones.
    lines = [
        replicas_for_promise(800, 100, promise, burst=1.5)
        for promise in (FailurePromise.NONE, FailurePromise.N_PLUS_1, FailurePromise.ZONE)
    ]
    assert lines == [18, 19, 27]


def test_request_rate_sizing_and_the_friday_review() -> None:
    # 20 req/s at 1 req/s per replica and 70%: ceil(28.6) = 29.
    assert replicas_needed(20, 1.0) == 29
    # Friday review: 8 req/s × 1.3 replica-seconds / 0.7 = 14.9 → 15 replicas (+3 on 12).
    assert 8 * 1.3 / 0.7 == pytest.approx(14.9, abs=0.05)
    assert replicas_needed(8 * 1.3, 1.0) == 15


def test_gpus_for_active_concurrency() -> None:
    # Seed 004: ceil(400 / 32) = 13 before headroom.
    assert gpus_for_concurrency(400, 32) == 13
    assert gpus_for_concurrency(384, 32) == 12


def test_region_fragmentation_29_against_33() -> None:
    single = replicas_needed(20, 1.0)
    assert single == 29
    # Two regions without spares still add to 29 ...
    bare = regional_replicas({"eu": 20 * 0.3, "us": 20 * 0.7}, spares_per_region=0)
    assert [r.replicas for r in bare.regions] == [9, 20]
    assert bare.total == 29
    # ... one spare each makes 31, and a third region with 3% of traffic still needs two.
    plan = regional_replicas({"eu": 20 * 0.3, "us": 20 * 0.7, "third": 20 * 0.03})
    by_name = {r.name: r for r in plan.regions}
    assert [by_name[n].replicas for n in ("eu", "us", "third")] == [10, 21, 2]
    assert by_name["third"].serving_replicas == 1
    assert by_name["third"].utilization == pytest.approx(0.30)
    assert plan.total == 33
    assert plan.total - single == 4


def test_pipeline_bottleneck_and_the_order_limits_are_reached() -> None:
    tool = tool_stage_capacity(10, 0.15)
    assert tool == pytest.approx(66.7, abs=0.05)
    fleet_12 = fleet_request_capacity(12)
    assert fleet_12 == pytest.approx(8.4)
    stages = [
        StageCapacity("gateway", 60),
        StageCapacity("retrieval", 45),
        StageCapacity("tool quota", tool),
    ]
    now = pipeline_capacity([*stages, StageCapacity("model fleet", fleet_12)])
    assert now.bottleneck == "model fleet"
    assert now.capacity_rps == pytest.approx(8.4)
    assert 45 / now.capacity_rps > 5  # the fleet is the bottleneck by a factor of five

    # Scale the fleet to 29 replicas for the 20 req/s peak: 29 × 0.7 = 20.3.
    replicas = replicas_needed(20, 1.0)
    scaled = pipeline_capacity([*stages, StageCapacity("model fleet", fleet_request_capacity(29))])
    assert replicas == 29
    assert scaled.capacity_rps == pytest.approx(20.3)
    assert [s.name for s in scaled.limits_in_order] == [
        "model fleet",
        "retrieval",
        "gateway",
        "tool quota",
    ]
    assert [round(s.requests_per_s, 1) for s in scaled.limits_in_order] == [20.3, 45, 60, 66.7]


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: replicas_needed(-800, 100), "demand_tok_s"),
        (lambda: replicas_needed(800, 0), "per_replica_tok_s"),
        (lambda: replicas_needed(800, 100, target_util=0.0), "target_util"),
        (lambda: replicas_needed(800, 100, target_util=1.2), "target_util"),
        (lambda: replicas_needed(800, 100, burst=0.5), "burst"),
        (lambda: replicas_needed(800, 100, zones=0), "zones"),
        (lambda: replicas_for_promise(0, 100, FailurePromise.NONE), "demand_tok_s"),
        (lambda: replicas_for_promise(800, 100, FailurePromise.ZONE, zones=1), "zones"),
        (lambda: gpus_for_concurrency(400, 0), "slots_per_gpu"),
        (lambda: regional_replicas({}), "region_rates"),
        (lambda: regional_replicas({"eu": -6}), "region_rates[eu]"),
        (lambda: regional_replicas({"eu": 6}, spares_per_region=-1), "spares_per_region"),
        (lambda: tool_stage_capacity(10, 0), "share_of_requests"),
        (lambda: fleet_request_capacity(12, target_util=2), "target_util"),
        (lambda: pipeline_capacity([]), "stages"),
        (lambda: pipeline_capacity([StageCapacity("x", -1)]), "stages[x].requests_per_s"),
    ],
)
def test_invalid_arguments_are_named(call: object, argument: str) -> None:
    assert callable(call)
    with pytest.raises(PlannerInputError) as caught:
        call()
    assert caught.value.argument == argument


_demand = st.floats(min_value=0.001, max_value=1e6)
_per_replica = st.floats(min_value=0.01, max_value=1e4)
_util = st.floats(min_value=0.05, max_value=1.0)
_burst = st.floats(min_value=1.0, max_value=5.0)


@settings(max_examples=80, deadline=None)
@given(
    demand=_demand,
    extra=st.floats(min_value=0.0, max_value=1e6),
    per_replica=_per_replica,
    util=_util,
    burst=_burst,
    zones=st.integers(min_value=1, max_value=6),
)
def test_sizing_is_monotone_in_demand(
    demand: float, extra: float, per_replica: float, util: float, burst: float, zones: int
) -> None:
    smaller = replicas_needed(demand, per_replica, util, burst, zones)
    larger = replicas_needed(demand + extra, per_replica, util, burst, zones)
    assert smaller <= larger
    # And the plan carries the demand at the target utilisation (within the rounding rule).
    assert smaller * per_replica * util >= demand * burst * (1 - 1e-9)


@settings(max_examples=80, deadline=None)
@given(
    demand=_demand,
    per_replica=_per_replica,
    util=_util,
    burst=_burst,
    zones=st.integers(min_value=2, max_value=6),
)
def test_sizing_is_monotone_in_promise(
    demand: float, per_replica: float, util: float, burst: float, zones: int
) -> None:
    none, n_plus_1, zone = (
        replicas_for_promise(demand, per_replica, promise, util, burst, zones)
        for promise in (FailurePromise.NONE, FailurePromise.N_PLUS_1, FailurePromise.ZONE)
    )
    assert none <= n_plus_1 <= zone
    assert zone % zones == 0


def test_zone_floors_keep_the_seeds_zone_promise_evenly() -> None:
    # 18 standing over 3 zones of 9; losing any zone must leave ceil(8 / 0.7) = 12: 6 each.
    assert zone_floors(total=18, survivors=12, zone_replicas={"a": 9, "b": 9, "c": 9}) == {
        "a": 6,
        "b": 6,
        "c": 6,
    }
    # No zone promise: the region's floor is split, still evenly.
    assert zone_floors(total=12, survivors=0, zone_replicas={"a": 9, "b": 9}) == {"a": 6, "b": 6}


def test_zone_floors_respect_an_uneven_plan_and_still_survive_a_zone_loss() -> None:
    plan = {"a": 1, "b": 5, "c": 5}
    floors = zone_floors(total=5, survivors=4, zone_replicas=plan)
    assert all(floors[z] <= plan[z] for z in plan)
    assert sum(floors.values()) >= 5
    assert all(sum(floors.values()) - n >= 4 for n in floors.values())
    # Beyond what the plan holds, the plan itself is the floor.
    assert zone_floors(total=50, survivors=0, zone_replicas=plan) == plan


def test_zone_floors_refuse_negative_counts() -> None:
    with pytest.raises(PlannerInputError):
        zone_floors(total=-1, survivors=0, zone_replicas={"a": 1})
    with pytest.raises(PlannerInputError):
        zone_floors(total=1, survivors=0, zone_replicas={"a": -1})
