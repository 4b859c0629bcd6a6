"""planner.capacity.slo: capacity at a latency SLO by bracketing and bisection with common
random numbers."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.capacity.simulation import (
    SUPPORT_MIX,
    ServiceClass,
    compiled_kernels_available,
    draw_requests,
    simulate_open_loop,
    unit_rate_arrivals,
)
from planner.capacity.slo import SloCapacity, capacity_at_slo, capacity_at_slo_of
from planner.errors import PlannerInputError

# A smaller sample than the acceptance run keeps the property tests quick; the seeds' knee is
# checked at full size below.
SMALL_N = 20_000
SMALL_REQUESTS = draw_requests(SUPPORT_MIX, SMALL_N, seed=2)
SMALL_ARRIVALS = unit_rate_arrivals(SMALL_N, seed=2)


def small_search(target_s: float, **kwargs: object) -> SloCapacity:
    return capacity_at_slo_of(SMALL_REQUESTS, SMALL_ARRIVALS, 12, target_s, **kwargs)  # type: ignore[arg-type]


def test_seeds_knee_at_p95_three_seconds_is_between_10_5_and_11_5() -> None:
    # Seeds' table: p95 2.29 s at 10.5 req/s and 5.38 s at 11.5, so a 3 s SLO sits in between.
    result = capacity_at_slo(SUPPORT_MIX, 12, 3.0, n=200_000, seed=0)
    assert 10.5 < result.knee_rate < 11.5
    assert result.derated_rate == result.knee_rate
    assert result.saturation_rate == pytest.approx(12 / 0.992, rel=0.01)
    # The knee is the highest evaluated rate that met, and a failing rate lies just above it.
    meets = [p.rate for p in result.points if p.meets]
    fails = [p.rate for p in result.points if not p.meets]
    assert result.knee_rate == max(meets)
    assert min(fails) - result.knee_rate <= 1e-3 * min(fails)
    # Re-simulating at the knee with the same seed reproduces the search's point exactly.
    again = simulate_open_loop(SUPPORT_MIX, result.knee_rate, 12, 200_000, seed=0)
    knee_point = next(p for p in result.points if p.rate == result.knee_rate)
    assert again.quantile(0.95) == knee_point.latency_s <= 3.0


def test_derating_and_p99() -> None:
    result = capacity_at_slo(SUPPORT_MIX, 12, 8.0, quantile=0.99, derate=0.7, n=50_000, seed=1)
    assert result.quantile == 0.99
    assert result.derated_rate == pytest.approx(0.7 * result.knee_rate)
    p95 = capacity_at_slo(SUPPORT_MIX, 12, 8.0, quantile=0.95, n=50_000, seed=1)
    # The same target on a higher quantile is harder to meet.
    assert result.knee_rate < p95.knee_rate


def test_common_random_numbers_make_latency_monotone_in_rate() -> None:
    result = small_search(3.0)
    by_rate = sorted(result.points, key=lambda p: p.rate)
    latencies = [p.latency_s for p in by_rate]
    assert latencies == sorted(latencies)
    assert [p.meets for p in by_rate] == sorted((p.meets for p in by_rate), reverse=True)
    for point in result.points:
        assert point.throughput_per_s <= result.saturation_rate * 1.01
        assert 0 < point.utilisation <= 1


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(1.8, 30.0), min_size=2, max_size=4))
def test_knee_is_monotone_in_the_target(targets: list[float]) -> None:
    knees = [small_search(t).knee_rate for t in sorted(targets)]
    assert knees == sorted(knees)


def test_looser_targets_move_toward_saturation_but_never_reach_it() -> None:
    tight, loose = small_search(2.0), small_search(60.0)
    assert tight.knee_rate < loose.knee_rate < loose.saturation_rate


def test_unreachable_target_is_refused() -> None:
    # A 1 s p95 is below the p95 of service time alone (1.7375 s order lookups): no load meets it.
    with pytest.raises(PlannerInputError) as raised:
        small_search(1.0)
    assert raised.value.argument == "target_s"


def test_single_server_exponential_knee_matches_mm1() -> None:
    # M/M/1 response is exponential with rate μ − λ: p95 = ln 20 / (μ − λ). For S = 1 s and a
    # 10 s target, λ = 1 − ln 20 / 10 ≈ 0.70 req/s.
    exponential = [ServiceClass("any", 1.0, 1.0, "exponential")]
    result = capacity_at_slo(exponential, 1, 10.0, n=200_000, seed=3)
    assert result.knee_rate == pytest.approx(1 - np.log(20) / 10, rel=0.05)


@pytest.mark.skipif(not compiled_kernels_available(), reason="numba is not installed")
def test_engines_give_the_same_search() -> None:
    compiled = small_search(2.5, engine="compiled")
    python = small_search(2.5, engine="python")
    assert compiled == python


BAD_CALLS: list[tuple[str, Callable[[], object]]] = [
    ("target_s", lambda: small_search(0.0)),
    ("target_s", lambda: small_search(-3.0)),
    ("quantile", lambda: small_search(3.0, quantile=1.0)),
    ("quantile", lambda: small_search(3.0, quantile=0.0)),
    ("derate", lambda: small_search(3.0, derate=0.0)),
    ("derate", lambda: small_search(3.0, derate=1.2)),
    ("rel_tol", lambda: small_search(3.0, rel_tol=0.0)),
    ("rel_tol", lambda: small_search(3.0, rel_tol=1.0)),
    ("servers", lambda: capacity_at_slo(SUPPORT_MIX, 0, 3.0)),
    ("n", lambda: capacity_at_slo(SUPPORT_MIX, 12, 3.0, n=10)),
    ("cv", lambda: capacity_at_slo(SUPPORT_MIX, 12, 3.0, n=5_000, cv=0.0)),
    ("classes", lambda: capacity_at_slo([ServiceClass("a", 0.9, 1.0)], 12, 3.0, n=5_000)),
    (
        "unit_arrivals_s",
        lambda: capacity_at_slo_of(SMALL_REQUESTS, SMALL_ARRIVALS[:-1], 12, 3.0),
    ),
    (
        "unit_arrivals_s",
        lambda: capacity_at_slo_of(SMALL_REQUESTS, SMALL_ARRIVALS[::-1], 12, 3.0),
    ),
]


@pytest.mark.parametrize(("argument", "call"), BAD_CALLS)
def test_bad_input_raises_naming_the_argument(argument: str, call: Callable[[], object]) -> None:
    with pytest.raises(PlannerInputError) as raised:
        call()
    assert raised.value.argument == argument
