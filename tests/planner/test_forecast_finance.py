"""Finance projection: a hand-computed month, the reservation rule against brute force, sums."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.capacity.sizing import replicas_needed
from planner.errors import PlannerInputError
from planner.forecast import fit_demand
from planner.forecast.finance import (
    GpuPrice,
    PoolDemand,
    optimal_commitment,
    project_costs,
    replicas_from_forecast,
    reservation_cost,
    tokens_per_minute_by_month,
)

HOUR = 3600
IntArray = npt.NDArray[np.int64]


def hours_from(year: int, month: int, day: int, count: int) -> IntArray:
    start = int(datetime(year, month, day, tzinfo=UTC).timestamp())
    return start + np.arange(count, dtype=np.int64) * HOUR


def april_2025() -> tuple[IntArray, IntArray]:
    """3 replicas always, plus 2 from 08:00 to 16:00 UTC on weekdays, for April 2025 (30 days)."""
    ts = hours_from(2025, 4, 1, 30 * 24)
    when = ts.astype("datetime64[s]")
    weekday = (when.astype("datetime64[D]").view("int64") + 3) % 7 < 5  # 1970-01-01: Thursday
    hour = (ts // HOUR) % 24
    replicas = 3 + 2 * (weekday & (hour >= 8) & (hour < 16))
    return ts, replicas.astype(np.int64)


# -- the hand-computed month ---------------------------------------------------------------------


def test_april_with_a_daytime_weekday_bump() -> None:
    # April 2025 starts on a Tuesday: 8 weekend days, 22 weekdays, 720 hours.
    # Replica-hours: 3 × 720 + 2 × 8 × 22 = 2,160 + 352 = 2,512; at 2 GPUs each, 5,024 GPU-hours.
    # GPUs needed: 6 for 544 hours, 10 for 176. With r/o = 2.5/4 = 0.625, GPUs 1–6 are needed
    # 100% of hours (reserve), GPUs 7–10 only 176/720 = 24% (on demand): 6 reserved.
    # All on demand: 4 × 5,024 = 20,096. Reserved: 2.5 × 6 × 720 = 10,800; overflow
    # 4 GPUs × 176 h = 704 GPU-hours × 4 = 2,816; total 13,616; saving 6,480.
    ts, replicas = april_2025()
    pools = [PoolDemand("eu-west", "H100", 2, replicas)]
    prices = {("eu-west", "H100"): GpuPrice(on_demand=4.0, reserved=2.5)}
    projection = project_costs(ts, pools, prices)

    assert [c.gpus for c in projection.commitments] == [6]
    assert projection.commitments[0].optimal
    assert projection.commitments[0].break_even == 0.625
    assert projection.months == ("2025-04",)
    (line,) = projection.lines
    assert (line.month, line.region, line.gpu_type, line.hours) == (
        "2025-04",
        "eu-west",
        "H100",
        720,
    )
    spend = line.spend
    assert spend.replica_hours == 2512
    assert spend.gpu_hours == 5024
    assert spend.reserved_gpu_hours == 4320
    assert spend.reserved_used_gpu_hours == 4320
    assert spend.idle_reserved_gpu_hours == 0
    assert spend.on_demand_gpu_hours == 704
    assert spend.cost_all_on_demand == 20096.0
    assert spend.cost_reserved == 10800.0
    assert spend.cost_on_demand == 2816.0
    assert spend.cost_with_reservation == 13616.0
    assert spend.saving == 6480.0
    assert projection.total() == spend


def test_cheap_reservation_covers_the_peak_too() -> None:
    # r/o = 0.8/4 = 0.2 < 176/720: all 10 GPUs are worth reserving. Reserved fee
    # 0.8 × 10 × 720 = 5,760, nothing on demand; 7,200 − 5,024 = 2,176 GPU-hours sit idle.
    ts, replicas = april_2025()
    projection = project_costs(
        ts,
        [PoolDemand("eu-west", "H100", 2, replicas)],
        {("eu-west", "H100"): GpuPrice(on_demand=4.0, reserved=0.8)},
    )
    spend = projection.total()
    assert projection.commitments[0].gpus == 10
    assert spend.cost_with_reservation == 5760.0
    assert spend.on_demand_gpu_hours == 0
    assert spend.idle_reserved_gpu_hours == 2176
    assert spend.saving == 20096.0 - 5760.0


def test_explicit_commitment_is_priced_as_given() -> None:
    # 8 GPUs reserved: 2.5 × 8 × 720 = 14,400, idle 2 × 544 = 1,088 GPU-hours, overflow
    # 2 × 176 = 352 GPU-hours × 4 = 1,408: 15,808, worse than the optimum's 13,616.
    ts, replicas = april_2025()
    key = ("eu-west", "H100")
    projection = project_costs(
        ts,
        [PoolDemand("eu-west", "H100", 2, replicas)],
        {key: GpuPrice(on_demand=4.0, reserved=2.5)},
        commitment={key: 8},
    )
    spend = projection.total()
    assert projection.commitments[0].gpus == 8
    assert not projection.commitments[0].optimal
    assert spend.cost_reserved == 14400.0
    assert spend.cost_on_demand == 1408.0
    assert spend.idle_reserved_gpu_hours == 1088
    assert spend.cost_with_reservation == 15808.0
    assert reservation_cost(replicas * 2, 8, 2.5, 4.0) == 15808.0
    # Zero commitment: everything on demand, no saving.
    none = project_costs(
        ts,
        [PoolDemand("eu-west", "H100", 2, replicas)],
        {key: GpuPrice(on_demand=4.0, reserved=2.5)},
        commitment={key: 0},
    ).total()
    assert none.cost_with_reservation == none.cost_all_on_demand == 20096.0
    assert none.saving == 0.0


# -- the reservation rule against brute force ----------------------------------------------------


def brute_force_level(gpus: list[int], reserved: float, on_demand: float) -> int:
    """Least K by exact cost r·K·T + o·Σ max(0, G − K) over every K from 0 to max G."""
    r, o, hours = Fraction(reserved), Fraction(on_demand), len(gpus)
    costs = [
        r * k * hours + o * sum(max(0, g - k) for g in gpus)
        for k in range(max(gpus, default=0) + 1)
    ]
    return costs.index(min(costs))


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.lists(st.integers(0, 12), min_size=1, max_size=60),
    reserved=st.sampled_from([0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.99, 4.0, 5.0]),
)
def test_optimal_commitment_matches_brute_force(gpus: list[int], reserved: float) -> None:
    on_demand = 4.0
    level = optimal_commitment(gpus, reserved, on_demand)
    assert level == brute_force_level(gpus, reserved, on_demand)
    best = reservation_cost(gpus, level, reserved, on_demand)
    assert all(
        best <= reservation_cost(gpus, k, reserved, on_demand) + 1e-9 for k in range(max(gpus) + 2)
    )


def test_ties_stay_on_demand() -> None:
    # The 1st GPU is needed exactly half the hours and r/o = 0.5: reserving it costs the same,
    # 2 × 1 × 4 = 8 either way, so the rule leaves it on demand.
    assert reservation_cost([1, 1, 0, 0], 0, 2.0, 4.0) == reservation_cost(
        [1, 1, 0, 0], 1, 2.0, 4.0
    )
    assert optimal_commitment([1, 1, 0, 0], 2.0, 4.0) == 0
    assert optimal_commitment([1, 1, 1, 0], 2.0, 4.0) == 1


def test_reserved_dearer_than_on_demand_reserves_nothing() -> None:
    assert optimal_commitment([5, 5, 5], 4.0, 4.0) == 0
    assert optimal_commitment([5, 5, 5], 5.0, 4.0) == 0
    assert optimal_commitment([5, 5, 5], 3.99, 4.0) == 5


# -- breakdown and sums --------------------------------------------------------------------------


def test_breakdown_by_month_region_and_gpu_sums_to_the_total() -> None:
    # Mid-January to early April 2025: four calendar months, two regions, two GPU types, and
    # two shapes sharing the H100s in eu-west.
    ts = hours_from(2025, 1, 15, 80 * 24)
    rng = np.random.default_rng(3)
    pools = [
        PoolDemand("eu-west", "H100", 2, rng.integers(0, 9, ts.size)),
        PoolDemand("eu-west", "H100", 4, rng.integers(0, 3, ts.size)),
        PoolDemand("eu-west", "L40S", 1, rng.integers(2, 6, ts.size)),
        PoolDemand("us-east", "H100", 8, rng.integers(1, 4, ts.size)),
    ]
    prices = {
        ("eu-west", "H100"): GpuPrice(on_demand=4.1, reserved=2.6),
        ("eu-west", "L40S"): GpuPrice(on_demand=1.3, reserved=0.9),
        ("us-east", "H100"): GpuPrice(on_demand=3.9, reserved=2.4),
    }
    projection = project_costs(ts, pools, prices)
    assert projection.months == ("2025-01", "2025-02", "2025-03", "2025-04")
    assert len(projection.lines) == 4 * 3
    # January from the 15th: 17 days; February 28; March 31; April 4 days to reach 80.
    assert [line.hours for line in projection.lines if line.region == "us-east"] == [
        17 * 24,
        28 * 24,
        31 * 24,
        4 * 24,
    ]

    total = projection.total()
    by_month = [projection.total(month=m) for m in projection.months]
    by_region = [projection.total(region=r) for r in ("eu-west", "us-east")]
    by_gpu = [projection.total(gpu_type=g) for g in ("H100", "L40S")]
    for parts in (by_month, by_region, by_gpu):
        assert sum(p.replica_hours for p in parts) == total.replica_hours
        assert sum(p.gpu_hours for p in parts) == total.gpu_hours
        assert sum(p.cost_all_on_demand for p in parts) == pytest.approx(total.cost_all_on_demand)
        assert sum(p.cost_with_reservation for p in parts) == pytest.approx(
            total.cost_with_reservation
        )

    # Each region's GPU type, straight from the arrays.
    eu_h100 = np.asarray(pools[0].replicas) * 2 + np.asarray(pools[1].replicas) * 4
    eu = projection.total(region="eu-west", gpu_type="H100")
    assert eu.replica_hours == int(np.sum(pools[0].replicas) + np.sum(pools[1].replicas))
    assert eu.gpu_hours == int(eu_h100.sum())
    level = optimal_commitment(eu_h100, 2.6, 4.1)
    assert eu.cost_with_reservation == pytest.approx(reservation_cost(eu_h100, level, 2.6, 4.1))
    assert eu.reserved_gpu_hours == level * ts.size
    assert eu.reserved_used_gpu_hours + eu.on_demand_gpu_hours == eu.gpu_hours
    # The least-cost reservation never costs more than buying everything on demand.
    for commitment in projection.commitments:
        part = projection.total(region=commitment.region, gpu_type=commitment.gpu_type)
        assert part.saving >= 0


# -- from a forecast -----------------------------------------------------------------------------


def test_replicas_from_a_forecast_through_a_sizing_function() -> None:
    # 8 req/s declared with the seeds' p99 of 11; 100 output tokens per request; a replica
    # sustains 100 tokens/s at 70% planning utilisation: ceil(800 / 70) = 12 at the mean.
    model = fit_demand([], [], declared_rate=8.0, declared_burst=11.0 / 8.0)
    forecast = model.forecast(float(hours_from(2025, 4, 1, 1)[0]), 30 * 24)

    def size(rate: float) -> int:
        return replicas_needed(rate * 100.0, 100.0)

    p99 = replicas_from_forecast(forecast, 0.99, size)
    assert p99.tolist() == [replicas_needed(1100.0, 100.0)] * (30 * 24)  # ceil(1100 / 70) = 16
    median = replicas_from_forecast(forecast, 0.5, size)
    assert np.all(median <= p99)
    projection = project_costs(
        forecast.timestamps,
        [PoolDemand("eu-west", "H100", 2, p99)],
        {("eu-west", "H100"): GpuPrice(on_demand=4.0, reserved=2.5)},
    )
    assert projection.total().replica_hours == 16 * 720
    assert projection.commitments[0].gpus == 32


def test_tokens_per_minute_by_month_follow_the_seeds_chain() -> None:
    # Seeds: 8 req/s × 1,600 tokens × 60 = 768,000 TPM; the band's p99 of 11 req/s gives
    # 1,056,000. A forecast over the end of April and the start of May has two months.
    model = fit_demand([], [], declared_rate=8.0, declared_burst=11.0 / 8.0)
    forecast = model.forecast(float(hours_from(2025, 4, 29, 1)[0]), 5 * 24)
    monthly = tokens_per_minute_by_month(forecast, 0.99, 1600.0)
    assert [m.month for m in monthly] == ["2025-04", "2025-05"]
    for m in monthly:
        assert m.peak_rps == pytest.approx(11.0)
        assert m.peak_tpm == pytest.approx(1_056_000.0)
    mean_like = tokens_per_minute_by_month(forecast, 0.5, 1600.0, within=0.5)
    assert all(m.peak_tpm < 768_000.0 for m in mean_like)


# -- validation ----------------------------------------------------------------------------------

KEY = ("eu-west", "H100")
PRICES = {KEY: GpuPrice(on_demand=4.0, reserved=2.5)}
TS = hours_from(2025, 4, 1, 4)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: project_costs(TS, [PoolDemand(*KEY, 2, [1, 1, 1])], PRICES), "pools[0].replicas"),
        (
            lambda: project_costs(TS, [PoolDemand(*KEY, 2, [1, -1, 1, 1])], PRICES),
            "pools[0].replicas",
        ),
        (
            lambda: project_costs(TS, [PoolDemand(*KEY, 2, [1, 1.5, 1, 1])], PRICES),
            "pools[0].replicas",
        ),
        (
            lambda: project_costs(TS, [PoolDemand(*KEY, 2, [1, float("nan"), 1, 1])], PRICES),
            "pools[0].replicas",
        ),
        (
            lambda: project_costs(TS, [PoolDemand(*KEY, 0, [1, 1, 1, 1])], PRICES),
            "pools[0].gpus_per_replica",
        ),
        (
            lambda: project_costs(
                TS, [PoolDemand(*KEY, 2, [1, 1, 1, 1]), PoolDemand(*KEY, 2, [1, 1, 1, 1])], PRICES
            ),
            "pools[1]",
        ),
        (lambda: project_costs(TS, [], PRICES), "pools"),
        (
            lambda: project_costs(TS, [PoolDemand("us-east", "H100", 2, [1, 1, 1, 1])], PRICES),
            "prices",
        ),
        (
            lambda: project_costs(
                TS,
                [PoolDemand(*KEY, 2, [1, 1, 1, 1])],
                {KEY: GpuPrice(on_demand=4.0, reserved=0.0)},
            ),
            "prices[eu-west/H100].reserved",
        ),
        (
            lambda: project_costs(
                TS,
                [PoolDemand(*KEY, 2, [1, 1, 1, 1])],
                {KEY: GpuPrice(on_demand=-1.0, reserved=2.0)},
            ),
            "prices[eu-west/H100].on_demand",
        ),
        (
            lambda: project_costs(
                TS, [PoolDemand(*KEY, 2, [1, 1, 1, 1])], PRICES, commitment={KEY: -1}
            ),
            "commitment[eu-west/H100]",
        ),
        (
            lambda: project_costs(
                TS, [PoolDemand(*KEY, 2, [1, 1, 1, 1])], PRICES, commitment={("x", "y"): 1}
            ),
            "commitment",
        ),
        (lambda: project_costs(TS + 60, [PoolDemand(*KEY, 2, [1, 1, 1, 1])], PRICES), "timestamps"),
        (
            lambda: project_costs(TS[[0, 1, 3]], [PoolDemand(*KEY, 2, [1, 1, 1])], PRICES),
            "timestamps",
        ),
        (
            lambda: project_costs(TS[::-1], [PoolDemand(*KEY, 2, [1, 1, 1, 1])], PRICES),
            "timestamps",
        ),
        (lambda: project_costs([], [PoolDemand(*KEY, 2, [])], PRICES), "timestamps"),
        (lambda: optimal_commitment([1, 2], 0.0, 4.0), "reserved_price"),
        (lambda: optimal_commitment([1, 2], 2.0, float("inf")), "on_demand_price"),
        (lambda: optimal_commitment([1, -2], 2.0, 4.0), "gpus_needed"),
        (lambda: optimal_commitment([[1, 2]], 2.0, 4.0), "gpus_needed"),
        (lambda: reservation_cost([1, 2], -1, 2.0, 4.0), "commitment"),
    ],
)
def test_bad_finance_input_names_the_argument(call: Callable[[], object], argument: str) -> None:
    with pytest.raises(PlannerInputError) as err:
        call()
    assert err.value.argument == argument


def test_bad_sizing_and_quantiles_name_the_argument() -> None:
    forecast = fit_demand([], [], declared_rate=8.0).forecast(float(TS[0]), 4)
    for size in (lambda rate: 1.5, lambda rate: -1, lambda rate: True):
        with pytest.raises(PlannerInputError) as err:
            replicas_from_forecast(forecast, 0.9, size)  # type: ignore[arg-type]
        assert err.value.argument == "size"
    for q in (0.0, 1.0):
        with pytest.raises(PlannerInputError) as err:
            replicas_from_forecast(forecast, q, lambda rate: 1)
        assert err.value.argument == "q"
        with pytest.raises(PlannerInputError) as err:
            tokens_per_minute_by_month(forecast, q, 1600.0)
        assert err.value.argument == "q"
    with pytest.raises(PlannerInputError) as err:
        tokens_per_minute_by_month(forecast, 0.9, -1.0)
    assert err.value.argument == "tokens_per_request"
