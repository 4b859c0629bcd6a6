"""M/M/1 and M/M/c (Erlang C): the seeds' response-time multiples and the closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.capacity.queueing import (
    erlang_c,
    mm1_mean_response,
    mm1_mean_wait,
    mm1_response_quantile,
    mmc_mean_response,
    mmc_mean_wait,
    mmc_response_quantile,
    mmc_wait_quantile,
    offered_load,
)
from planner.errors import PlannerInputError


@pytest.mark.parametrize(
    ("rho", "multiple"),
    [(0.5, 2.0), (0.7, 3.3), (0.8, 5.0), (0.9, 10.0), (0.95, 20.0)],
)
def test_mm1_mean_response_is_s_over_one_minus_rho(rho: float, multiple: float) -> None:
    # Seeds: "At ρ = 0.5 that is 2 S; at 0.7 it is 3.3 S; ... at 0.95 it is 20 S."
    assert mm1_mean_response(1.0, rho) == pytest.approx(multiple, abs=0.05)
    assert mm1_mean_response(2.0, rho) == pytest.approx(2 * 1.0 / (1 - rho))


@pytest.mark.parametrize(
    ("rho", "multiple"),
    [(0.7, 1.05), (0.8, 1.15), (0.9, 1.53), (0.95, 2.35), (0.98, 4.8)],
)
def test_erlang_c_mean_response_with_twelve_servers(rho: float, multiple: float) -> None:
    # Seeds: "With 12 servers ... 1.05 S at ρ = 0.7, 1.15 S at 0.8, 1.53 S at 0.9, 2.35 S at
    # 0.95 and 4.8 S at 0.98."
    service_s = 1.0
    arrival_rate = rho * 12 / service_s
    response = mmc_mean_response(arrival_rate, service_s, 12)
    assert response / service_s == pytest.approx(multiple, abs=0.05 if multiple > 4 else 0.005)


def test_pool_beats_single_server_at_the_same_utilisation() -> None:
    for rho in (0.7, 0.9, 0.95):
        assert mmc_mean_response(rho * 12, 1.0, 12) < mm1_mean_response(1.0, rho)


def test_erlang_c_with_one_server_is_the_utilisation() -> None:
    # An M/M/1 arrival waits exactly when the server is busy: probability ρ.
    for rho in (0.1, 0.5, 0.93):
        assert erlang_c(1, rho) == pytest.approx(rho)
        assert mmc_mean_wait(rho, 1.0, 1) == pytest.approx(mm1_mean_wait(1.0, rho))
        assert mmc_mean_response(rho, 1.0, 1) == pytest.approx(mm1_mean_response(1.0, rho))


def _erlang_c_in_logs(servers: int, load: float) -> float:
    """Reference Erlang C straight from the definition, summed in log space."""
    log_terms = [k * math.log(load) - math.lgamma(k + 1) for k in range(servers)]
    log_last = (
        servers * math.log(load) - math.lgamma(servers + 1) + math.log(servers / (servers - load))
    )
    peak = max([*log_terms, log_last])
    total = sum(math.exp(x - peak) for x in log_terms) + math.exp(log_last - peak)
    return math.exp(log_last - peak) / total


@pytest.mark.parametrize(
    ("servers", "rho"), [(2, 0.5), (12, 0.9), (100, 0.95), (1000, 0.99), (1000, 0.5)]
)
def test_erlang_c_matches_the_definition_for_large_pools(servers: int, rho: float) -> None:
    load = rho * servers
    value = erlang_c(servers, load)
    assert 0.0 <= value < 1.0
    assert value == pytest.approx(_erlang_c_in_logs(servers, load), rel=1e-9)


def test_erlang_c_with_no_load_never_waits() -> None:
    assert erlang_c(5, 0.0) == 0.0
    assert mmc_mean_response(0.0, 2.0, 5) == 2.0


def test_offered_load_is_rate_times_service() -> None:
    # Friday review: 8 req/s at 1.3 replica-seconds each keeps 10.4 replicas busy.
    assert offered_load(8, 1.3) == pytest.approx(10.4)


def test_mm1_response_quantile_is_exponential() -> None:
    # Mean response S/(1−ρ) = 10 s at ρ = 0.9; an exponential's p95 is ln(20) × mean.
    assert mm1_response_quantile(1.0, 0.9, 0.95) == pytest.approx(10 * math.log(20))
    assert mm1_response_quantile(1.0, 0.9, 0.99) == pytest.approx(10 * math.log(100))


def test_mmc_wait_quantile_closed_form() -> None:
    lam, s, c = 10.8, 1.0, 12  # ρ = 0.9
    waits = erlang_c(c, lam * s)
    for q in (0.95, 0.99):
        t = mmc_wait_quantile(lam, s, c, q)
        # The survival function C·exp(−(c − a)t/S) is exactly 1 − q at the quantile.
        assert waits * math.exp(-(c - lam * s) * t / s) == pytest.approx(1 - q)
    # At ρ = 0.7 only 18% of arrivals wait, so the median arrival does not wait at all.
    assert mmc_wait_quantile(8.4, 1.0, 12, 0.5) == 0.0


def test_mmc_response_quantile_reduces_to_mm1_for_one_server() -> None:
    assert mmc_response_quantile(0.8, 1.0, 1, 0.99) == pytest.approx(
        mm1_response_quantile(1.0, 0.8, 0.99)
    )


def test_mmc_response_quantile_matches_sampling() -> None:
    # Draw the response time from its definition (wait with probability C, exponential wait
    # at rate (c − a)/S, plus an exponential service) and compare the empirical quantiles.
    lam, s, c = 10.8, 1.0, 12
    waits = erlang_c(c, lam * s)
    rng = np.random.default_rng(7)
    n = 400_000
    waited = rng.random(n) < waits
    wait = np.where(waited, rng.exponential(s / (c - lam * s), n), 0.0)
    response = wait + rng.exponential(s, n)
    for q in (0.5, 0.95, 0.99):
        assert mmc_response_quantile(lam, s, c, q) == pytest.approx(
            float(np.quantile(response, q)), rel=0.02
        )


def test_mmc_response_quantile_when_wait_and_service_rates_coincide() -> None:
    # c − a = 1 makes the wait rate equal the service rate: the hypoexponential's limit case.
    lam, s, c = 2.0, 1.0, 3
    t = mmc_response_quantile(lam, s, c, 0.95)
    waits = erlang_c(c, lam * s)
    survival = (1 - waits) * math.exp(-t) + waits * (1 + t) * math.exp(-t)
    assert survival == pytest.approx(0.05, rel=1e-9)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: mm1_mean_response(1.0, 1.0), "utilization"),
        (lambda: mm1_mean_response(1.0, 1.2), "utilization"),
        (lambda: mm1_mean_response(0.0, 0.5), "service_s"),
        (lambda: mm1_mean_wait(1.0, -0.1), "utilization"),
        (lambda: mm1_response_quantile(1.0, 0.5, 1.0), "q"),
        (lambda: erlang_c(12, 12.0), "offered_load"),
        (lambda: erlang_c(0, 0.5), "servers"),
        (lambda: erlang_c(12, float("nan")), "offered_load"),
        (lambda: mmc_mean_wait(12.0, 1.0, 12), "arrival_rate"),
        (lambda: mmc_mean_response(-1.0, 1.0, 12), "arrival_rate"),
        (lambda: mmc_mean_response(1.0, 1.0, 0), "servers"),
        (lambda: mmc_mean_response(1.0, float("inf"), 4), "service_s"),
        (lambda: mmc_wait_quantile(1.0, 1.0, 4, 0.0), "q"),
        (lambda: mmc_response_quantile(5.0, 1.0, 4, 0.9), "arrival_rate"),
        (lambda: offered_load(-2.0, 1.0), "arrival_rate"),
    ],
)
def test_invalid_arguments_are_named(call: object, argument: str) -> None:
    assert callable(call)
    with pytest.raises(PlannerInputError) as caught:
        call()
    assert caught.value.argument == argument


@settings(max_examples=60, deadline=None)
@given(
    arrival_rate=st.floats(min_value=0.01, max_value=50.0),
    service_s=st.floats(min_value=0.05, max_value=5.0),
    extra=st.integers(min_value=0, max_value=20),
)
def test_mmc_mean_response_decreases_with_servers(
    arrival_rate: float, service_s: float, extra: int
) -> None:
    smallest = math.floor(arrival_rate * service_s) + 1  # fewest servers that are stable
    servers = smallest + extra
    fewer = mmc_mean_response(arrival_rate, service_s, servers)
    more = mmc_mean_response(arrival_rate, service_s, servers + 1)
    assert more <= fewer * (1 + 1e-12)
    assert more >= service_s


@settings(max_examples=40, deadline=None)
@given(
    rho=st.floats(min_value=0.05, max_value=0.97),
    servers=st.integers(min_value=2, max_value=64),
    q=st.floats(min_value=0.5, max_value=0.999),
)
def test_mmc_quantiles_are_ordered(rho: float, servers: int, q: float) -> None:
    lam = rho * servers
    wait_q = mmc_wait_quantile(lam, 1.0, servers, q)
    response_q = mmc_response_quantile(lam, 1.0, servers, q)
    # Response = wait + service ≥ wait, and its quantile at least the service's own quantile.
    assert response_q >= wait_q
    assert response_q >= -math.log1p(-q) * (1 - 1e-9)
