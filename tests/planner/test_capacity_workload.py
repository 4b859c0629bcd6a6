"""Workload: lognormal lengths, class mixes and their cost, token rates and quotas."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.capacity.workload import (
    SECONDS_PER_MONTH,
    RequestClass,
    arrivals_after_exact_cache,
    feature_load,
    fleet_utilization,
    lognormal_from_median_mean,
    mean_request_cost,
    quota_request,
    replica_request_rate,
    request_cost,
    tokens_per_minute,
    tpm_plan,
)
from planner.errors import PlannerInputError

PREFILL = 4000.0  # tokens/s the seeds' replica ingests
DECODE = 160.0  # output tokens/s it generates in aggregate


def _mix(policy: float, order: float, summary: float) -> list[RequestClass]:
    return [
        RequestClass("policy", policy, prompt_tokens=1300, output_tokens=80),
        RequestClass("order_lookup", order, prompt_tokens=3200, output_tokens=150),
        RequestClass("long_summary", summary, prompt_tokens=9000, output_tokens=400),
    ]


# -- lognormal ----------------------------------------------------------------------------------


def test_prompt_lengths_from_median_and_mean() -> None:
    # Seeds: median 1,100, mean 1,500 → σ = 0.79, p95 ≈ 4,000, p99 ≈ 6,900.
    fit = lognormal_from_median_mean(1100, 1500)
    assert fit.sigma == pytest.approx(0.79, abs=0.005)
    assert fit.median == pytest.approx(1100)
    assert fit.mean == pytest.approx(1500)
    assert fit.quantile(0.95) == pytest.approx(4000, rel=0.01)
    assert fit.quantile(0.99) == pytest.approx(6900, rel=0.01)


def test_output_lengths_from_median_and_mean() -> None:
    # Seeds: median 70, mean 100 → σ = 0.84, p95 near 280, p99 near 500.
    fit = lognormal_from_median_mean(70, 100)
    assert fit.sigma == pytest.approx(0.84, abs=0.005)
    assert fit.quantile(0.95) == pytest.approx(280, rel=0.01)
    assert fit.quantile(0.99) == pytest.approx(500, rel=0.01)


def test_mean_equal_to_median_has_no_spread() -> None:
    fit = lognormal_from_median_mean(500, 500)
    assert fit.sigma == 0.0
    assert fit.quantile(0.99) == pytest.approx(500)


@settings(max_examples=60, deadline=None)
@given(
    median=st.floats(min_value=1.0, max_value=1e5),
    ratio=st.floats(min_value=1.0, max_value=10.0),
    q_low=st.floats(min_value=0.01, max_value=0.98),
    gap=st.floats(min_value=1e-3, max_value=0.5),
)
def test_lognormal_quantiles_are_monotone(
    median: float, ratio: float, q_low: float, gap: float
) -> None:
    fit = lognormal_from_median_mean(median, median * ratio)
    q_high = min(q_low + gap, 0.999)
    assert fit.quantile(q_low) <= fit.quantile(q_high)
    assert fit.quantile(0.5) == pytest.approx(median, rel=1e-9)


# -- cost ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "output", "cost"),
    [(1300, 80, 0.825), (3200, 150, 1.7375), (9000, 400, 4.75)],
)
def test_class_costs(prompt: int, output: int, cost: float) -> None:
    assert request_cost(prompt, output, PREFILL, DECODE) == pytest.approx(cost)


def test_mean_cost_and_utilisation_before_and_after_the_new_tenant() -> None:
    before = mean_request_cost(_mix(0.85, 0.14, 0.01), PREFILL, DECODE)
    after = mean_request_cost(_mix(0.80, 0.12, 0.08), PREFILL, DECODE)
    assert before == pytest.approx(0.992)
    assert after == pytest.approx(1.2485)
    assert after / before - 1 == pytest.approx(0.26, abs=0.005)  # 26% more work per request
    # One replica sustains about 1/0.992 = 1.01 req/s; 12 replicas about 12.1.
    assert replica_request_rate(before) == pytest.approx(1.01, abs=0.005)
    assert 12 * replica_request_rate(before) == pytest.approx(12.1, abs=0.05)
    # At 8 req/s: 66% utilised before, 83% after, with the request rate untouched.
    assert fleet_utilization(8, before, 12) == pytest.approx(0.66, abs=0.005)
    assert fleet_utilization(8, after, 12) == pytest.approx(0.83, abs=0.005)


def test_prefix_cache_shortens_prefill_only() -> None:
    # A 35% prefix-cache hit rate removes 35% of prefill, nothing of decode.
    cold = request_cost(1300, 80, PREFILL, DECODE)
    warm = request_cost(1300, 80, PREFILL, DECODE, prefix_cache_hit_rate=0.35)
    assert warm == pytest.approx(0.325 * 0.65 + 0.5)
    assert 1 - warm / cold < 0.35
    assert request_cost(1300, 80, PREFILL, DECODE, prefix_cache_hit_rate=1.0) == 0.5
    mix_warm = mean_request_cost(_mix(0.85, 0.14, 0.01), PREFILL, DECODE, 0.35)
    assert mix_warm == pytest.approx(0.992 - 0.35 * (0.85 * 0.325 + 0.14 * 0.8 + 0.01 * 2.25))


def test_exact_answer_cache_removes_arrivals_of_the_cached_class() -> None:
    # λ becomes λ × (1 − h) for the cached class.
    assert arrivals_after_exact_cache(8 * 0.85, 0.2) == pytest.approx(5.44)
    assert arrivals_after_exact_cache(5.0, 0.0) == 5.0
    assert arrivals_after_exact_cache(5.0, 1.0) == 0.0


# -- tokens per minute --------------------------------------------------------------------------


def test_quota_consumption_in_tokens_per_minute() -> None:
    # 8 req/s × 1,600 tokens × 60 = 768,000 TPM; at the 20 req/s peak, 1,920,000.
    assert tokens_per_minute(8, 1500 + 100) == pytest.approx(768_000)
    assert tokens_per_minute(20, 1600) == pytest.approx(1_920_000)


def test_tpm_table_from_monthly_requests() -> None:
    support = feature_load("Support assistant", 1_000_000, 5, 4000)
    orders = feature_load("Order summaries", 6_000_000, 4, 860)
    assert SECONDS_PER_MONTH == 2_592_000
    assert support.average_rps == pytest.approx(0.39, abs=0.005)
    assert support.peak_rps == pytest.approx(1.9, abs=0.05)
    assert round(support.peak_tpm) == 462_963
    assert orders.average_rps == pytest.approx(2.31, abs=0.005)
    assert orders.peak_rps == pytest.approx(9.3, abs=0.05)
    assert round(orders.peak_tpm) == 477_778

    plan = tpm_plan([support, orders], headroom=1.5)
    assert round(plan.peak_tpm) == 940_741
    assert plan.planned_tpm == pytest.approx(1_411_111, abs=1)
    # "With 1.5× headroom, ask for about 1,500,000 tokens a minute."
    assert quota_request(plan.planned_tpm) == 1_500_000
    assert quota_request(1_500_000) == 1_500_000
    assert quota_request(1_411_111, increment=100_000) == 1_500_000


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: lognormal_from_median_mean(1500, 1100), "mean"),
        (lambda: lognormal_from_median_mean(0, 1100), "median"),
        (lambda: lognormal_from_median_mean(1100, 1500).quantile(1.0), "q"),
        (lambda: request_cost(-1, 80, PREFILL, DECODE), "prompt_tokens"),
        (lambda: request_cost(1300, 80, 0, DECODE), "prefill_rate"),
        (lambda: request_cost(1300, 80, PREFILL, -160), "decode_rate"),
        (lambda: request_cost(1300, 80, PREFILL, DECODE, 1.35), "prefix_cache_hit_rate"),
        (lambda: mean_request_cost(_mix(0.85, 0.14, 0.10), PREFILL, DECODE), "mix"),
        (lambda: mean_request_cost([], PREFILL, DECODE), "mix"),
        (lambda: mean_request_cost(_mix(1.2, -0.2, 0.0), PREFILL, DECODE), "mix[policy].share"),
        (lambda: fleet_utilization(8, 1.0, 0), "replicas"),
        (lambda: fleet_utilization(-8, 1.0, 12), "arrival_rate"),
        (lambda: replica_request_rate(0.0), "mean_cost_s"),
        (lambda: arrivals_after_exact_cache(8, -0.1), "hit_rate"),
        (lambda: tokens_per_minute(math.nan, 1600), "requests_per_s"),
        (lambda: feature_load("x", 1e6, 0.5, 4000), "peak_factor"),
        (lambda: feature_load("x", 1e6, 5, -1), "tokens_per_request"),
        (lambda: tpm_plan([], 1.5), "features"),
        (lambda: tpm_plan([feature_load("x", 1e6, 5, 4000)], 0.9), "headroom"),
        (lambda: quota_request(1e6, 0), "increment"),
    ],
)
def test_invalid_arguments_are_named(call: object, argument: str) -> None:
    assert callable(call)
    with pytest.raises(PlannerInputError) as caught:
        call()
    assert caught.value.argument == argument
