"""Months ahead: periods, the rolling peak, scaling a plan within its floors, the showback split
and the promise ladder (the seeds' 12 / 18 / 27)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import placement
from planner.errors import PlannerInputError
from planner.forecast.finance import (
    GpuPrice,
    PoolDemand,
    optimal_commitment,
    period_end,
    period_label,
    period_labels,
    period_starts,
    project_costs,
    promise_floor,
    promise_ladder,
    promise_weights,
    reservation_cost,
    rolling_peak,
    scale_replicas,
    showback_split,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "placement"
HOUR = 3600


def at(year: int, month: int, day: int, hour: int = 0) -> int:
    return int(datetime(year, month, day, hour, tzinfo=UTC).timestamp())


def example(name: str) -> dict[str, Any]:
    """The seeds' sizing examples, as the placement tests keep them."""
    data: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return data


# -- periods ------------------------------------------------------------------------------------


def test_periods_day_iso_week_and_month() -> None:
    # 2025-04-02 is a Wednesday; its ISO week (14) starts on Monday 2025-03-31.
    ts = np.array([at(2025, 4, 2, 13)])
    assert period_starts(ts, "day")[0] == at(2025, 4, 2)
    assert period_starts(ts, "week")[0] == at(2025, 3, 31)
    assert period_starts(ts, "month")[0] == at(2025, 4, 1)
    assert period_label(at(2025, 3, 31), "week") == "2025-W14"
    assert period_label(at(2025, 4, 1), "month") == "2025-04"
    assert period_label(at(2025, 4, 2), "day") == "2025-04-02"
    assert period_end(at(2025, 12, 1), "month") == at(2026, 1, 1)
    assert period_end(at(2025, 3, 31), "week") == at(2025, 4, 7)
    # ISO week 1 of 2026 starts on Monday 2025-12-29.
    assert list(period_labels([at(2025, 12, 28), at(2025, 12, 29)], "week")) == [
        "2025-W52",
        "2026-W01",
    ]
    with pytest.raises(PlannerInputError, match="period"):
        period_starts(ts, "year")  # type: ignore[arg-type]


def test_projection_by_week_sums_to_the_month() -> None:
    ts = at(2025, 4, 1) + HOUR * np.arange(30 * 24)
    replicas = np.where((ts // HOUR) % 24 < 12, 3, 5)
    prices = {("r", "g"): GpuPrice(on_demand=4.0, reserved=2.5)}
    pools = [PoolDemand("r", "g", 2, replicas)]
    by_month = project_costs(ts, pools, prices)
    by_week = project_costs(ts, pools, prices, period="week")
    assert by_week.months == ("2025-W14", "2025-W15", "2025-W16", "2025-W17", "2025-W18")
    assert by_week.total() == by_month.total()


# -- the rolling peak and scaling the plan -------------------------------------------------------


def test_rolling_peak_by_hand() -> None:
    # Rates 0, 1, 2, … per hour; re-plans every 24 h for the maximum of the next 10 hours:
    # hours 0–23 are sized for 9, hours 24–29 for 33.
    peak = rolling_peak(np.arange(48.0), hours=30, window=10, step=24, within=1.0)
    assert peak.shape == (30,)
    assert set(peak[:24]) == {9.0} and set(peak[24:]) == {33.0}
    with pytest.raises(PlannerInputError, match="rates"):
        rolling_peak(np.arange(20.0), hours=30, window=10)


def test_scale_replicas_keeps_the_plan_spread_and_floors() -> None:
    plan = {"a": 9, "b": 9, "c": 9}
    ratio = np.array([1.0, 0.5, 0.01, 0.0, 1.2])
    scaled = scale_replicas(plan, ratio, promise_level=2)
    # Ratio 1 is the plan; 0.5 rounds up per zone; a zone promise keeps one per zone.
    assert [int(scaled[z][0]) for z in "abc"] == [9, 9, 9]
    assert [int(scaled[z][1]) for z in "abc"] == [5, 5, 5]
    assert [int(scaled[z][3]) for z in "abc"] == [1, 1, 1]
    assert [int(scaled[z][4]) for z in "abc"] == [11, 11, 11]
    # N+1 in one zone: never below two replicas, however low the load.
    single = scale_replicas({"a": 4}, np.array([0.0, 0.1]), promise_level=1)
    assert list(single["a"]) == [2, 2]
    assert scale_replicas({"a": 4}, np.array([0.0]), promise_level=0)["a"][0] == 1
    assert promise_floor(1, 2) == 1 and promise_floor(0, 0) == 0


# -- showback ------------------------------------------------------------------------------------


def test_showback_by_hand() -> None:
    # A pool of 10 replica-hours costing 100: loads use 3 and 1 replica-hours. Direct 30 and
    # 10; the idle 60 shared 3:1, 45 and 15.
    split = showback_split([100.0, 20.0], [10.0, 2.0], [3.0, 1.0], [0, 0])
    assert list(split.direct) == [30.0, 10.0]
    assert list(split.shared) == [45.0, 15.0]
    assert list(split.idle) == [60.0, 20.0]
    # The second pool serves nobody: all of it idle and unallocated.
    assert list(split.unallocated) == [0.0, 20.0]


@settings(max_examples=100, deadline=None)
@given(
    pools=st.lists(
        st.tuples(st.floats(0, 1e4), st.floats(0, 100), st.lists(st.floats(0, 200), max_size=4)),
        min_size=1,
        max_size=6,
    )
)
def test_showback_adds_up(pools: list[tuple[float, float, list[float]]]) -> None:
    costs = [c for c, _, _ in pools]
    held = [h for _, h, _ in pools]
    used = [u for _, _, loads in pools for u in loads]
    where = [i for i, (_, _, loads) in enumerate(pools) for _ in loads]
    split = showback_split(costs, held, used, where)
    for i, cost in enumerate(costs):
        mine = [n for n, p in enumerate(where) if p == i]
        total = sum(split.direct[n] + split.shared[n] for n in mine) + split.unallocated[i]
        assert total == pytest.approx(cost, rel=1e-9, abs=1e-6)
        assert sum(split.shared[n] for n in mine) + split.unallocated[i] == pytest.approx(
            split.idle[i], rel=1e-9, abs=1e-6
        )


# -- commitments from the low edge ---------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    low=st.lists(st.integers(0, 10), min_size=1, max_size=80),
    extra=st.lists(st.integers(0, 4), min_size=80, max_size=80),
    reserved=st.sampled_from([0.5, 1.3, 2.0, 2.6, 3.9]),
)
def test_commitment_from_the_low_edge_is_the_brute_force_minimum(
    low: list[int], extra: list[int], reserved: float
) -> None:
    on_demand = 4.0
    level = optimal_commitment(low, reserved, on_demand)
    r, o = Fraction(reserved), Fraction(on_demand)
    exact = [r * k * len(low) + o * sum(max(0, g - k) for g in low) for k in range(max(low) + 2)]
    assert level == exact.index(min(exact))
    # Priced at the planned quantile (at or above the low edge), the reservation is used.
    planned = np.array(low) + np.array(extra[: len(low)])
    ts = at(2025, 4, 1) + HOUR * np.arange(len(low))
    projection = project_costs(
        ts,
        [PoolDemand("r", "g", 1, planned)],
        {("r", "g"): GpuPrice(on_demand=on_demand, reserved=reserved)},
        commitment={("r", "g"): level},
    )
    spend = projection.total()
    assert spend.cost_with_reservation == pytest.approx(
        reservation_cost(planned, level, reserved, on_demand)
    )
    assert spend.idle_reserved_gpu_hours <= sum(max(0, level - g) for g in low)


# -- the price of each promise ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("sizing-zonal", [27, 19, 18, 12]),
        ("sizing-burst", [18, 18, 18, 12]),
        ("sizing-base", [12, 12, 12, 12]),
    ],
)
def test_promise_ladder_reproduces_the_seeds(name: str, expected: list[int]) -> None:
    ladder = promise_ladder(example(name))
    assert [rung for rung, _ in ladder] == [
        "planned",
        "without-zone-survival",
        "without-n+1",
        "without-burst",
    ]
    replicas = []
    for _, problem in ladder:
        solution = placement.solve(problem, time_limit_s=10)
        assert solution["status"] == "optimal"
        replicas.append(sum(int(r["replicas"]) for r in solution["replicas"]))
    assert replicas == expected


def test_ladder_relaxes_only_the_named_demands() -> None:
    problem = example("sizing-zonal")
    demands = list(problem["demands"])
    other = {**demands[0], "id": "other"}
    ladder = promise_ladder({**problem, "demands": [*demands, other]}, demands={"other"})
    last = ladder[-1][1]["demands"]
    assert last[0]["promise"] == "zone" and last[0]["burst"] == 1.5
    assert last[1]["promise"] == "none" and last[1]["burst"] == 1.0


def test_promise_weights_by_hand() -> None:
    # 18 replicas' worth of planned load at burst 1.5: 12 of it the peak, 6 the burst's part.
    assert promise_weights(18.0, burst=1.5, promise_level=2) == {
        "zone": 18.0,
        "n+1": 18.0,
        "burst": pytest.approx(6.0),
    }
    assert promise_weights(18.0, burst=1.0, promise_level=1) == {
        "zone": 0.0,
        "n+1": 18.0,
        "burst": 0.0,
    }
