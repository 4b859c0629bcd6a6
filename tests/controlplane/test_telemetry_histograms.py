"""Histogram quantiles as Prometheus computes them, checked against hand computations."""

from __future__ import annotations

import pytest

from controlplane.telemetry.histograms import (
    COARSE_RELATIVE_WIDTH,
    BucketQuantile,
    HistogramError,
    bucket_quantile,
    cumulative_buckets,
    histogram_quantile,
    percentile,
    sum_buckets,
)

# Cumulative counts: 20 ≤ 500, 80 ≤ 1,000, 160 ≤ 2,000, 188 ≤ 5,000, 198 ≤ 10,000, 200 in all.
BUCKETS = {"500.0": 20, "1000.0": 80, "2000.0": 160, "5000.0": 188, "10000.0": 198, "+Inf": 200}


def test_quantiles_interpolate_inside_the_bucket() -> None:
    # p50: rank 100 lies in (1000, 2000] holding 80, 20 past its start: 1000 + 1000 × 20/80.
    assert histogram_quantile(0.5, BUCKETS) == pytest.approx(1250.0)
    # p95: rank 190 lies in (5000, 10000] holding 10, 2 past its start: 5000 + 5000 × 2/10.
    assert histogram_quantile(0.95, BUCKETS) == pytest.approx(6000.0)
    # p99: rank 198 is the top of (5000, 10000]: 10,000.
    assert histogram_quantile(0.99, BUCKETS) == pytest.approx(10000.0)
    # p5: rank 10 lies in the first bucket, interpolated from 0: 500 × 10/20.
    assert histogram_quantile(0.05, BUCKETS) == pytest.approx(250.0)


def test_rank_in_the_inf_bucket_answers_the_highest_finite_bound() -> None:
    assert histogram_quantile(0.999, BUCKETS) == pytest.approx(10000.0)


def test_a_quantile_carries_the_bucket_it_was_read_in() -> None:
    assert bucket_quantile(0.5, BUCKETS) == BucketQuantile(1250.0, 1000.0, 2000.0)
    assert bucket_quantile(0.05, BUCKETS) == BucketQuantile(250.0, 0.0, 500.0)
    # Rank 198 is the top of (5,000, 10,000]: the value is the bound, the bucket the one below.
    assert bucket_quantile(0.99, BUCKETS) == BucketQuantile(10000.0, 5000.0, 10000.0)
    # Beyond the top finite bound: censored, no upper bound.
    beyond = bucket_quantile(0.999, BUCKETS)
    assert beyond == BucketQuantile(10000.0, 10000.0, None) and beyond.censored


def test_a_bucket_is_coarse_when_wider_than_a_tenth_of_its_upper_bound() -> None:
    assert COARSE_RELATIVE_WIDTH == 0.10
    # vLLM's 1-2-5 buckets: (2,000, 5,000] is 60% of its upper bound.
    assert BucketQuantile(4700.0, 2000.0, 5000.0).coarse(unit=1.0)
    # A request log's 1% grid.
    assert not BucketQuantile(1005.0, 1000.0, 1010.0).coarse(unit=1.0)
    # Exactly a tenth is not above it.
    assert not BucketQuantile(950.0, 900.0, 1000.0).coarse()
    assert BucketQuantile(950.0, 899.0, 1000.0).coarse()
    # (4, 5] is 20% wide but holds one whole token count: exact for lengths, not for seconds.
    assert not BucketQuantile(4.5, 4.0, 5.0).coarse(unit=1.0)
    assert BucketQuantile(4.5, 4.0, 5.0).coarse()
    # A censored quantile is a lower bound, not a coarse figure.
    assert not BucketQuantile(5000.0, 5000.0, None).coarse(unit=1.0)


def test_counts_summed_from_increase_are_made_monotonic() -> None:
    wobbly = {"1.0": 10.0, "2.0": 9.7, "4.0": 20.0, "+Inf": 20.0}
    assert [c for _, c in cumulative_buckets(wobbly)] == [10.0, 10.0, 20.0, 20.0]
    # rank 15 in (2, 4] holding 10, 5 past its start.
    assert histogram_quantile(0.75, wobbly) == pytest.approx(3.0)


def test_sum_buckets_adds_per_interval_increases_by_bound() -> None:
    assert sum_buckets([("1", 2.0), ("+Inf", 3.0), ("1", 1.0)]) == {"1": 3.0, "+Inf": 3.0}


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        ({"1.0": 3.0}, "no \\+Inf"),
        ({"+Inf": 3.0}, "at least one finite"),
        ({"1.0": 0.0, "+Inf": 0.0}, "no observations"),
        ({"x": 1.0, "+Inf": 1.0}, "not a number"),
        ({"1.0": -1.0, "+Inf": 1.0}, "count"),
    ],
)
def test_histograms_without_a_quantile_are_refused(buckets: dict[str, float], message: str) -> None:
    with pytest.raises(HistogramError, match=message):
        histogram_quantile(0.5, buckets)


def test_percentile_of_bucket_rates_is_linear_between_order_statistics() -> None:
    rates = [4.0, 1.0, 8.0, 2.0, 3.0]
    # Position 0.99 × 4 = 3.96 between 4 and 8: 4 + 4 × 0.96.
    assert percentile(rates, 0.99) == pytest.approx(7.84)
    assert percentile(rates, 0.5) == 3.0
    assert percentile([5.0], 0.99) == 5.0
    with pytest.raises(HistogramError):
        percentile([], 0.5)
