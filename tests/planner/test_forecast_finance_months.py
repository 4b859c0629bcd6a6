"""Months ahead: periods, the rolling peak, days sized by re-solving the placement, the showback split
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
    Sizing,
    optimal_commitment,
    period_end,
    period_label,
    period_labels,
    period_starts,
    project_costs,
    promise_ladder,
    promise_weights,
    reservation_cost,
    rolling_peak,
    showback_split,
    size_days_by_solve,
    sizing_from_solution,
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
    # Calendar quarters: 2025-04-02 is in Q2 (April to June); Q4 ends at the new year.
    assert period_starts(ts, "quarter")[0] == at(2025, 4, 1)
    assert list(
        period_starts([at(2025, 1, 1), at(2025, 3, 31, 23), at(2025, 12, 31)], "quarter")
    ) == [
        at(2025, 1, 1),
        at(2025, 1, 1),
        at(2025, 10, 1),
    ]
    assert period_label(at(2025, 4, 1), "quarter") == "2025-Q2"
    assert period_end(at(2025, 10, 1), "quarter") == at(2026, 1, 1)
    assert period_end(at(2025, 1, 1), "quarter") == at(2025, 4, 1)
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


def test_projection_by_quarter_sums_its_months() -> None:
    # 2025-02-01 to 2025-07-31: part of Q1, all of Q2, part of Q3.
    ts = np.arange(at(2025, 2, 1), at(2025, 8, 1), HOUR)
    replicas = np.where((ts // HOUR) % 24 < 12, 3, 5)
    prices = {("r", "g"): GpuPrice(on_demand=4.0, reserved=2.5)}
    pools = [PoolDemand("r", "g", 2, replicas)]
    by_month = project_costs(ts, pools, prices)
    by_quarter = project_costs(ts, pools, prices, period="quarter")
    assert by_quarter.months == ("2025-Q1", "2025-Q2", "2025-Q3")
    months_of = {"2025-Q1": ("2025-02", "2025-03"), "2025-Q2": ("2025-04", "2025-05", "2025-06")}
    for quarter, months in months_of.items():
        summed = by_month.total(month=months[0])
        for month in months[1:]:
            summed = summed + by_month.total(month=month)
        assert by_quarter.total(month=quarter) == summed
    assert by_quarter.total() == by_month.total()


# -- the rolling peak and scaling the plan -------------------------------------------------------


def test_rolling_peak_by_hand() -> None:
    # Rates 0, 1, 2, … per hour; re-plans every 24 h for the maximum of the next 10 hours:
    # hours 0–23 are sized for 9, hours 24–29 for 33.
    peak = rolling_peak(np.arange(48.0), hours=30, window=10, step=24, within=1.0)
    assert peak.shape == (30,)
    assert set(peak[:24]) == {9.0} and set(peak[24:]) == {33.0}
    with pytest.raises(PlannerInputError, match="rates"):
        rolling_peak(np.arange(20.0), hours=30, window=10)


def _solver(problem: dict[str, Any], calls: list[float]) -> Any:
    """``solve(rates)`` for the one-demand seeds example, warm-started from its plan."""
    planned = placement.solve(problem, time_limit_s=30, workers=1)
    previous = [{k: r[k] for k in ("zone", "shape", "replicas")} for r in planned["replicas"]]

    def solve(rates: np.ndarray) -> Sizing:
        calls.append(float(rates[0]))
        at_rates = {**problem, "previous": previous}
        at_rates["demands"] = [{**problem["demands"][0], "requests_per_s": float(rates[0])}]
        return sizing_from_solution(placement.solve(at_rates, time_limit_s=30, workers=1))

    return solve


def test_days_sized_by_solve_equal_a_solve_per_day() -> None:
    # The zonal seeds example (8 requests/s, 9 replicas per zone), over a fortnight of days
    # with a flat week, a step, a slow climb and a drop back.
    problem = example("sizing-zonal")
    rates = np.array([8.0] * 7 + [8.01, 8.02, 9.0, 9.5, 10.0, 12.0, 8.0], dtype=np.float64).reshape(
        -1, 1
    )
    calls: list[float] = []
    sized = size_days_by_solve(rates, _solver(problem, calls), max_solves=100)
    direct: list[float] = []
    solve_one = _solver(problem, direct)
    for d, rate in enumerate(rates[:, 0]):
        alone = solve_one(np.array([rate]))
        assert sized.sizings[sized.day[d]].replicas == alone.replicas, d
        assert sized.sizings[sized.day[d]].cost_per_hour == alone.cost_per_hour
    assert sized.exact
    # Identical days solve once and runs proven equal are not solved day by day.
    assert sized.solves == len(set(calls)) < len(rates)
    assert sized.sizings[sized.day[0]].cost_per_hour == 54.0  # the plan: 27 GPUs at 2.00


def test_out_of_solves_a_run_takes_its_busiest_day() -> None:
    # A fake solver: one replica per request/s, rounded up; exact.
    def solve(rates: np.ndarray) -> Sizing:
        n = int(np.ceil(rates.sum()))
        return Sizing(replicas=(("z", "s", n),), routing=(), cost_per_hour=float(n), exact=True)

    rates = np.arange(1.0, 9.0).reshape(-1, 1)  # 1 … 8: every day its own fleet
    full = size_days_by_solve(rates, solve, max_solves=100)
    assert [full.sizings[i].cost_per_hour for i in full.day] == list(range(1, 9))
    assert full.exact
    short = size_days_by_solve(rates, solve, max_solves=2)
    costs = [short.sizings[i].cost_per_hour for i in short.day]
    assert not short.exact
    # Never below the day's own fleet: an upper bound.
    assert all(c >= d for c, d in zip(costs, range(1, 9), strict=True))
    with pytest.raises(PlannerInputError, match="rates"):
        size_days_by_solve(np.array([1.0, -1.0]), solve, max_solves=5)
    with pytest.raises(PlannerInputError, match="max_solves"):
        size_days_by_solve(rates, solve, max_solves=0)


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
