"""Quantiles of Prometheus histograms and of bucketed rates: plain Python, no Django.

A Prometheus histogram is a set of cumulative bucket counts, one per upper bound ``le``, the
last one ``+Inf`` (= all observations). ``histogram_quantile`` here follows Prometheus' own
function of that name: find the bucket where the rank ``q × count`` falls and interpolate
linearly inside it, from the previous bound (0 for the first bucket) to its own bound; a rank
in the ``+Inf`` bucket answers the highest finite bound. Bucket counts summed from
``increase()`` can dip slightly out of order through extrapolation, so they are made monotonic
first (a running maximum), as Prometheus does.

``bucket_quantile`` answers the bucket with the value: an interpolated quantile is only known
to lie in (lower, upper], and where that bucket is wide (``COARSE_RELATIVE_WIDTH``) the bounds
are what the figure says.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# A percentile read from a bucket wider than this share of its upper bound is **coarse**: the
# interpolated value may be far from the true one (vLLM's 1-2-5 token buckets are 50-60% wide,
# a request log's grid 1%), so it is shown with its bucket ("between 2,000 and 5,000").
COARSE_RELATIVE_WIDTH = 0.10


class HistogramError(ValueError):
    """Bucket data that has no quantile (no ``+Inf`` bucket, no observations, bad bounds)."""


def parse_le(le: str) -> float:
    """A bucket's upper bound from its ``le`` label (``"1000.0"``, ``"1e3"``, ``"+Inf"``)."""
    try:
        bound = float(le)
    except ValueError as exc:
        raise HistogramError(f"bucket bound {le!r} is not a number") from exc
    if math.isnan(bound):
        raise HistogramError("bucket bound is NaN")
    return bound


def cumulative_buckets(counts_by_le: Mapping[str, float]) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) sorted by bound, made monotonic; must end at ``+Inf``."""
    buckets = sorted((parse_le(le), float(count)) for le, count in counts_by_le.items())
    if not buckets or not math.isinf(buckets[-1][0]):
        raise HistogramError("histogram has no +Inf bucket")
    monotonic: list[tuple[float, float]] = []
    running = 0.0
    for bound, count in buckets:
        if not math.isfinite(count) or count < 0:
            raise HistogramError(f"bucket le={bound:g} has count {count!r}")
        running = max(running, count)
        monotonic.append((bound, running))
    return monotonic


@dataclass(frozen=True)
class BucketQuantile:
    """A quantile read from a histogram and the bucket it was read in: the value lies in
    (``lower``, ``upper``], and ``upper`` is None when the rank falls in ``+Inf`` (censored:
    the value is ``lower``, the highest finite bound, and the quantile is at least that)."""

    value: float
    lower: float
    upper: float | None

    @property
    def censored(self) -> bool:
        return self.upper is None

    def coarse(self, *, unit: float = 0.0, relative: float = COARSE_RELATIVE_WIDTH) -> bool:
        """Whether the bucket is too wide for the interpolated value to stand alone: wider
        than ``relative`` × its upper bound and than ``unit`` (the smallest step the quantity
        takes: a bucket no wider than one token holds one whole length, so it is exact). A
        censored quantile is not coarse: it is a lower bound, which says more."""
        if self.upper is None:
            return False
        width = self.upper - self.lower
        return width > max(relative * abs(self.upper), unit)


def bucket_quantile(q: float, counts_by_le: Mapping[str, float]) -> BucketQuantile:
    """The q-quantile (0 ≤ q ≤ 1) of a histogram given as cumulative counts by ``le`` label,
    with the bounds of the bucket it lies in.

    Units are those of the bucket bounds (tokens, seconds). Counts le=500: 10, 1000: 40,
    2000: 80, 5000: 95, +Inf: 100 give p50 = 1000 + 1000 × (50 − 40) / 40 = 1,250 in
    (1,000, 2,000], and p99 = 5,000 in (5,000, +Inf) (the rank falls in +Inf: the highest
    finite bound, censored).
    """
    if not 0.0 <= q <= 1.0:
        raise HistogramError(f"quantile level must be in [0, 1], got {q!r}")
    buckets = cumulative_buckets(counts_by_le)
    if len(buckets) < 2:
        raise HistogramError("histogram needs at least one finite bucket besides +Inf")
    observations = buckets[-1][1]
    if observations <= 0:
        raise HistogramError("histogram has no observations")
    rank = q * observations
    index = next(i for i, (_, cumulative) in enumerate(buckets) if cumulative >= rank)
    if index == len(buckets) - 1:
        top = buckets[-2][0]
        return BucketQuantile(top, top, None)
    upper, cumulative = buckets[index]
    if index == 0:
        if upper <= 0:
            return BucketQuantile(upper, upper, upper)
        lower, below = 0.0, 0.0
    else:
        lower, below = buckets[index - 1]
    in_bucket = cumulative - below
    if in_bucket <= 0:
        return BucketQuantile(upper, lower, upper)
    value = lower + (upper - lower) * (rank - below) / in_bucket
    return BucketQuantile(min(max(value, lower), upper), lower, upper)  # no rounding past a bound


def histogram_quantile(q: float, counts_by_le: Mapping[str, float]) -> float:
    """The q-quantile's value alone (``bucket_quantile``): Prometheus' ``histogram_quantile``."""
    return bucket_quantile(q, counts_by_le).value


def censored_quantile(q: float, counts_by_le: Mapping[str, float]) -> tuple[float, bool]:
    """``histogram_quantile`` and whether the answer is censored: the rank falls beyond the
    highest finite bound, so the quantile is at least that bound (a lower bound, "≥ bound"),
    not the bound itself. vLLM's token buckets end at the context length (``1-2-5`` buckets up
    to ``max_model_len``): a p99 there reads "≥ 5,000", never "5,000"."""
    found = bucket_quantile(q, counts_by_le)
    return found.value, found.censored


def sum_buckets(samples: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Add up per-interval bucket increases by ``le`` (the histogram over a whole window)."""
    totals: dict[str, float] = {}
    for le, value in samples:
        totals[le] = totals.get(le, 0.0) + value
    return totals


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 ≤ q ≤ 1) of values by linear interpolation between order statistics.

    The same definition as numpy's default ("linear"): position q × (n − 1) in the sorted
    values. Used for the peak request rate, the p99 of 5-minute bucket rates.
    """
    if not values:
        raise HistogramError("no values")
    if not 0.0 <= q <= 1.0:
        raise HistogramError(f"quantile level must be in [0, 1], got {q!r}")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    fraction = position - below
    return ordered[below] + (ordered[above] - ordered[below]) * fraction
