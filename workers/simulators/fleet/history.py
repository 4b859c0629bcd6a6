"""Simulated history of the fleet: what Prometheus would hold for the last N days.

The live simulator (``fleet.FleetSimulator``) draws every request; weeks of history that way
would take minutes. History is drawn per bucket instead, from the same spec and the same
arithmetic, as aggregates:

- **Rate.** Each stream's rate is its spec rate (the profiles' peak) times an hour-of-week
  pattern (``TrafficPattern``: a daytime peak on weekdays, quiet nights, quieter weekends) and
  an optional weekly growth, so that the peak hour of a weekday now is the spec rate.
- **Counts.** Requests per class and bucket are Poisson; the lengths' histograms are
  multinomial over vLLM's buckets with the lognormal's probability of each (prompt + the
  prompt growth in effect, rounded, at least one token); token sums are the count times the
  mean plus a normal error of the sum's standard deviation.
- **Latency.** Each bucket's pool load (``fleet.pool_load`` at the bucket's rate) gives the
  probability of waiting and the mean wait (Erlang C); TTFT = wait + prefill and end-to-end =
  TTFT + streamed decode, their bucket probabilities computed over a fixed quantile sample of
  the class's lengths, the wait exponential (exactly integrated).
- **Gauges** (running, waiting, KV use) are the pool's Little's-law figures at the bucket's
  rate, split by the stream's share of the pool.
- **Prompt growth** (the seeds' Friday review, +1,200 tokens) applies from given moments on.

Buckets are drawn a UTC day at a time per stream, each quantity from its own random stream
seeded by (seed, stream, day, quantity, class): the same seed gives the same value for the same
bucket whenever the history starts, and a prompt-growth change leaves every bucket before it
as it was. Times are UTC epoch seconds; a bucket is [start, start + bucket_s).
"""

from __future__ import annotations

import bisect
import math
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from workers.simulators.fleet.fleet import (
    E2E_BUCKETS,
    TOKEN_BUCKETS,
    TTFT_BUCKETS,
    ClassSpec,
    FleetSpec,
    PoolLoad,
    StreamSpec,
    _lognormal_params,
    pool_load,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DAY_S = 86_400
HOUR_S = 3_600
WEEK_S = 7 * DAY_S
# The seeds' Friday review: retrieval top-4 → top-8 adds 1,200 prompt tokens per request.
FRIDAY_REVIEW_EXTRA_TOKENS = 1200.0
# Points of the quantile sample a class's latency distribution is computed over.
_QUANTILE_POINTS = 256
# Pool loads are computed per 1% of the peak rate: a finer step moves no latency bucket.
_LOAD_STEP = 0.01
# Preemptions per request when the KV cache is full (as the live simulator counts them).
_PREEMPTIONS_PER_REQUEST = 0.2
_KV_FULL = 0.95

# The SeriesState attribute names (see ``exposition``) of the quantities drawn per bucket.
COUNTER_ATTRS = (
    "prompt_tokens",
    "generation_tokens",
    "requests_succeeded",
    "prefix_queries",
    "prefix_hits",
    "preemptions",
)
GAUGE_ATTRS = ("running", "waiting", "kv_usage")
HISTOGRAM_BOUNDS: dict[str, tuple[float, ...]] = {
    "prompt_hist": TOKEN_BUCKETS,
    "output_hist": TOKEN_BUCKETS,
    "ttft_hist": TTFT_BUCKETS,
    "e2e_hist": E2E_BUCKETS,
}

StreamKey = tuple[str, str, str]  # tenant, model, region
_NORMAL = NormalDist()


@dataclass(frozen=True)
class TrafficPattern:
    """Each stream's rate as a fraction of its peak, by UTC hour of the week, with growth.

    A weekday's rate runs from ``night_factor`` at the quietest hour to 1 at
    ``peak_hour_utc`` (a smooth daily wave); Saturday and Sunday are ``weekend_factor`` of
    that. ``weekly_growth`` is the fractional growth per week (0.02: 2% a week), compounding,
    with the rate now at the pattern's value: earlier weeks were smaller.
    """

    peak_hour_utc: float = 15.0
    night_factor: float = 0.25
    weekend_factor: float = 0.6
    weekly_growth: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.peak_hour_utc < 24:
            raise ValueError("peak_hour_utc must be in [0, 24)")
        for name in ("night_factor", "weekend_factor"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1]")
        if not (self.weekly_growth > -1 and math.isfinite(self.weekly_growth)):
            raise ValueError("weekly_growth must be a finite number above -1")

    def factor(self, t: FloatArray, now: float) -> FloatArray:
        """The fraction of the peak rate at each time ``t`` (epoch s), growth included."""
        hour = np.mod(t, DAY_S) / HOUR_S
        wave = ((1.0 + np.cos(2 * math.pi * (hour - self.peak_hour_utc) / 24)) / 2) ** 2
        daily = self.night_factor + (1.0 - self.night_factor) * wave
        # 1970-01-01 was a Thursday: day 0 is weekday 3 with Monday as 0.
        weekday = np.mod(np.floor(t / DAY_S) + 3, 7)
        weekly = np.where(weekday >= 5, self.weekend_factor, 1.0)
        growth = (1.0 + self.weekly_growth) ** ((t - now) / WEEK_S)
        return np.asarray(daily * weekly * growth, dtype=np.float64)


@dataclass
class DayBlock:
    """One stream's buckets of one UTC day: per-bucket values by quantity.

    ``values`` holds the counters' increases and the gauges' means, each of shape (buckets,);
    ``histograms`` each histogram's counts per bucket, not cumulative, of shape (buckets,
    bounds + 1) (the last column above the highest bound); ``sums`` each histogram's sum.
    """

    values: dict[str, FloatArray]
    histograms: dict[str, IntArray]
    sums: dict[str, FloatArray]


@dataclass(frozen=True)
class _Latency:
    """A class's TTFT and end-to-end distributions at one pool load: bucket probabilities
    (bounds + 1 cells), means and standard deviations in seconds."""

    ttft_p: FloatArray
    e2e_p: FloatArray
    ttft_mean: float
    ttft_sd: float
    e2e_mean: float
    e2e_sd: float


def _cells(cdf: FloatArray) -> FloatArray:
    """Cell probabilities (bounds + 1) from a CDF at the bounds: monotone, summing to 1."""
    clipped = np.maximum.accumulate(np.clip(cdf, 0.0, 1.0))
    cells = np.diff(np.concatenate(([0.0], clipped, [1.0])))
    return np.asarray(np.clip(cells, 0.0, 1.0), dtype=np.float64)


def _lognormal_cdf(x: FloatArray, mu: float, sigma: float) -> FloatArray:
    """P(L < x) for a lognormal L (0 where x ≤ 0)."""
    out = np.zeros(x.shape, dtype=np.float64)
    positive = x > 0
    logs = np.log(x[positive])
    if sigma == 0:
        out[positive] = (logs > mu).astype(np.float64)
    else:
        out[positive] = [_NORMAL.cdf(z) for z in (logs - mu) / sigma]
    return out


def length_cells(
    median: float, mean: float, extra: float, bounds: Sequence[float]
) -> tuple[FloatArray, float, float]:
    """A length's bucket probabilities, mean and standard deviation (tokens).

    The length is a lognormal (from median and mean) plus ``extra``, rounded, at least 1: it
    is at most a bound ``le`` when the lognormal is below ``le + 0.5 − extra``.
    """
    mu, sigma = _lognormal_params(median, mean)
    edges = np.asarray(bounds, dtype=np.float64) + 0.5 - extra
    cdf = _lognormal_cdf(edges, mu, sigma)
    mean_len = math.exp(mu + sigma**2 / 2) + extra
    sd = math.sqrt(max(math.expm1(sigma**2), 0.0)) * math.exp(mu + sigma**2 / 2)
    return _cells(cdf), mean_len, sd


def _quantile_sample(median: float, mean: float, extra: float, shift: int) -> FloatArray:
    """``_QUANTILE_POINTS`` evenly spaced quantiles of a length (lognormal + extra, rounded,
    at least 1), rotated by ``shift`` places so two samples pair up without correlation."""
    mu, sigma = _lognormal_params(median, mean)
    qs = (np.arange(_QUANTILE_POINTS) + 0.5) / _QUANTILE_POINTS
    z = np.asarray([_NORMAL.inv_cdf(q) for q in qs])
    sample = np.clip(np.rint(np.exp(mu + sigma * z) + extra), 1, None)
    return np.roll(sample, shift)


def _wait_cdf(base: FloatArray, bounds: FloatArray, load: PoolLoad) -> FloatArray:
    """P(base + wait ≤ b) for each bound b, averaged over the sample ``base`` (seconds): the
    wait is 0 with probability 1 − P, else exponential with mean (mean wait) / P."""
    gap = bounds[:, None] - base[None, :]
    reached = gap >= 0
    p = load.wait_probability
    if p <= 0 or load.mean_wait_s <= 0:
        return np.asarray(reached.mean(axis=1), dtype=np.float64)
    theta = load.mean_wait_s / p
    waited = 1.0 - p * np.exp(-np.where(reached, gap, 0.0) / theta)
    return np.asarray(np.where(reached, waited, 0.0).mean(axis=1), dtype=np.float64)


def stream_id(key: StreamKey) -> int:
    """A stable number for a stream (its random streams' seed part)."""
    return zlib.crc32("\0".join(key).encode())


class FleetHistory:
    """Per-bucket history of every stream of ``spec`` from ``days`` before ``now`` on.

    Buckets are drawn lazily, a UTC day per stream at a time, and kept; ``available_until``
    bounds what a query may see (the buckets that have ended). ``bucket_s`` must divide a
    day. Thread-safe.
    """

    def __init__(
        self,
        spec: FleetSpec,
        *,
        now: float,
        days: float,
        bucket_s: int = 300,
        pattern: TrafficPattern | None = None,
        seed: int = 0,
        drift: Iterable[tuple[float, float]] = (),
    ) -> None:
        if bucket_s <= 0 or DAY_S % bucket_s:
            raise ValueError("bucket_s must be a whole number of seconds that divides a day")
        if not (days >= 0 and math.isfinite(days)):
            raise ValueError("days must be zero or more")
        self.spec = spec
        self.now = float(now)
        self.bucket_s = bucket_s
        self.pattern = pattern or TrafficPattern()
        self.seed = seed
        self.start = math.floor((self.now - days * DAY_S) / bucket_s) * bucket_s
        self._lock = threading.Lock()
        # Prompt growth: (moment, extra tokens from then on), in time order.
        self._changes: list[tuple[float, float]] = []
        for at, tokens in drift:
            self._add_change(at, tokens)
        self._blocks: dict[tuple[StreamKey, int], DayBlock] = {}
        self._loads: dict[tuple[str, str, int, float], PoolLoad] = {}
        self._latency: dict[tuple[StreamKey, int, float, int], _Latency] = {}
        self._lengths: dict[tuple[StreamKey, int, str, float], tuple[FloatArray, float, float]] = {}
        self._streams = {(s.tenant, s.model, s.region): s for s in spec.streams}

    # -- prompt growth ------------------------------------------------------------------------

    def _add_change(self, at: float, tokens: float) -> None:
        if tokens < 0 or not math.isfinite(tokens) or not math.isfinite(at):
            raise ValueError("prompt growth must be a finite number of tokens, zero or more")
        index = bisect.bisect_right([t for t, _ in self._changes], at)
        self._changes.insert(index, (float(at), float(tokens)))

    def set_extra_prompt_tokens(self, *, at: float, tokens: float) -> None:
        """Apply (or undo, with 0) prompt growth from ``at`` on; buckets starting before it
        keep their values."""
        with self._lock:
            self._add_change(at, tokens)
            day = math.floor(at / DAY_S)
            for key in [k for k in self._blocks if k[1] >= day]:
                del self._blocks[key]

    def extra_now(self, t: float) -> float:
        """The extra prompt tokens in effect at the moment ``t``."""
        return float(self.extra_at(np.asarray([t], dtype=np.float64))[0])

    def extra_at(self, t: FloatArray) -> FloatArray:
        """The extra prompt tokens in effect at each time ``t``."""
        out = np.full(t.shape, self.spec.extra_prompt_tokens, dtype=np.float64)
        for at, tokens in self._changes:
            out[t >= at] = tokens
        return out

    # -- the streams --------------------------------------------------------------------------

    @property
    def streams(self) -> tuple[StreamKey, ...]:
        return tuple(sorted(self._streams))

    def values(self, stream: StreamKey, quantity: str, first: int, count: int) -> FloatArray:
        """Per-bucket values of buckets ``first`` … ``first + count − 1`` (bucket index =
        start / bucket_s). ``quantity``: a counter or gauge attribute, ``<histogram>:sum`` or
        ``<histogram>:counts`` (counts per cell, shape (count, bounds + 1))."""
        name, _, part = quantity.partition(":")
        if count <= 0:
            if part == "counts":
                return np.zeros((0, len(HISTOGRAM_BOUNDS[name]) + 1), dtype=np.float64)
            return np.zeros(0, dtype=np.float64)
        per_day = DAY_S // self.bucket_s
        parts: list[npt.NDArray[np.float64] | npt.NDArray[np.int64]] = []
        index = first
        end = first + count
        while index < end:
            day = index // per_day
            take = min(end, (day + 1) * per_day) - index
            block = self._block(stream, day)
            offset = index - day * per_day
            if part == "counts":
                parts.append(block.histograms[name][offset : offset + take])
            elif part == "sum":
                parts.append(block.sums[name][offset : offset + take])
            else:
                parts.append(block.values[name][offset : offset + take])
            index += take
        return np.concatenate(parts).astype(np.float64, copy=False)

    def _block(self, stream: StreamKey, day: int) -> DayBlock:
        with self._lock:
            block = self._blocks.get((stream, day))
            if block is None:
                block = self._draw_day(self._streams[stream], day)
                self._blocks[(stream, day)] = block
            return block

    # -- drawing ------------------------------------------------------------------------------

    def _rng(self, stream: StreamKey, day: int, quantity: str, cls: int) -> np.random.Generator:
        return np.random.default_rng(
            [self.seed, stream_id(stream), day, zlib.crc32(quantity.encode()), cls]
        )

    def _load(self, model: str, region: str, step: int, extra: float) -> PoolLoad:
        """The pool's load at ``step`` × 1% of the peak rate with this prompt growth."""
        key = (model, region, step, extra)
        load = self._loads.get(key)
        if load is None:
            spec = FleetSpec(self.spec.streams, self.spec.pools, extra)
            load = pool_load(spec, model, region, rate_factor=step * _LOAD_STEP)
            self._loads[key] = load
        return load

    def _length(
        self, stream: StreamKey, index: int, cls: ClassSpec, which: str, extra: float
    ) -> tuple[FloatArray, float, float]:
        key = (stream, index, which, extra)
        found = self._lengths.get(key)
        if found is None:
            if which == "prompt":
                found = length_cells(cls.prompt_median, cls.prompt_mean, extra, TOKEN_BUCKETS)
            else:
                found = length_cells(cls.output_median, cls.output_mean, 0.0, TOKEN_BUCKETS)
            self._lengths[key] = found
        return found

    def _latency_at(
        self, stream: StreamSpec, index: int, cls: ClassSpec, extra: float, step: int
    ) -> _Latency:
        key = ((stream.tenant, stream.model, stream.region), index, extra, step)
        found = self._latency.get(key)
        if found is not None:
            return found
        load = self._load(stream.model, stream.region, step, extra)
        pool = self.spec.pool(stream.model, stream.region)
        prompt = _quantile_sample(cls.prompt_median, cls.prompt_mean, extra, 0)
        output = _quantile_sample(cls.output_median, cls.output_mean, 0.0, _QUANTILE_POINTS // 3)
        prefill = prompt * (1 - cls.prefix_cache_hit_rate) / pool.prefill_tokens_per_s
        e2e = prefill + output / pool.per_sequence_decode_tokens_per_s
        ttft_bounds = np.asarray(TTFT_BUCKETS)
        e2e_bounds = np.asarray(E2E_BUCKETS)
        # The wait: 0 with probability 1 − P, else exponential of mean W/P; mean W, variance
        # W²(2 − P)/P.
        wait, p = load.mean_wait_s, load.wait_probability
        wait_var = wait**2 * (2 - p) / p if p > 0 else 0.0
        found = _Latency(
            ttft_p=_cells(_wait_cdf(prefill, ttft_bounds, load)),
            e2e_p=_cells(_wait_cdf(e2e, e2e_bounds, load)),
            ttft_mean=float(prefill.mean()) + wait,
            ttft_sd=math.sqrt(float(prefill.var()) + wait_var),
            e2e_mean=float(e2e.mean()) + wait,
            e2e_sd=math.sqrt(float(e2e.var()) + wait_var),
        )
        self._latency[key] = found
        return found

    def _draw_day(self, stream: StreamSpec, day: int) -> DayBlock:
        key = (stream.tenant, stream.model, stream.region)
        width = self.bucket_s
        starts = day * DAY_S + width * np.arange(DAY_S // width, dtype=np.float64)
        n_buckets = starts.size
        factor = self.pattern.factor(starts + width / 2, self.now)
        extra = self.extra_at(starts)
        steps = [int(x) for x in np.rint(factor / _LOAD_STEP)]
        loads = [
            self._load(stream.model, stream.region, step, float(e))
            for step, e in zip(steps, extra, strict=True)
        ]
        pool_rate = math.fsum(
            s.requests_per_s
            for s in self.spec.streams
            if s.model == stream.model and s.region == stream.region
        )
        part = stream.requests_per_s / pool_rate if pool_rate > 0 else 0.0

        zeros = np.zeros(n_buckets, dtype=np.float64)
        values = {name: zeros.copy() for name in (*COUNTER_ATTRS, *GAUGE_ATTRS)}
        histograms = {
            name: np.zeros((n_buckets, len(bounds) + 1), dtype=np.int64)
            for name, bounds in HISTOGRAM_BOUNDS.items()
        }
        sums = {name: zeros.copy() for name in HISTOGRAM_BOUNDS}

        def normal(quantity: str, index: int) -> FloatArray:
            return self._rng(key, day, quantity, index).standard_normal(n_buckets)

        for index, cls in enumerate(stream.classes):
            lam = stream.requests_per_s * cls.share * factor * width
            n = self._rng(key, day, "requests", index).poisson(lam).astype(np.int64)
            values["requests_succeeded"] += n
            root_n = np.sqrt(n)

            prompt = [self._length(key, index, cls, "prompt", float(e)) for e in extra]
            prompt_p = np.stack([cells for cells, _, _ in prompt])
            prompt_mean = np.asarray([m for _, m, _ in prompt])
            prompt_sd = np.asarray([sd for _, _, sd in prompt])
            histograms["prompt_hist"] += self._rng(key, day, "prompt", index).multinomial(
                n, prompt_p
            )
            prompt_sum = np.maximum(
                np.rint(n * prompt_mean + root_n * prompt_sd * normal("prompt_sum", index)), n
            )
            sums["prompt_hist"] += prompt_sum
            values["prompt_tokens"] += prompt_sum
            values["prefix_queries"] += prompt_sum
            values["prefix_hits"] += np.rint(prompt_sum * cls.prefix_cache_hit_rate)

            output_p, output_mean, output_sd = self._length(key, index, cls, "output", 0.0)
            histograms["output_hist"] += self._rng(key, day, "output", index).multinomial(
                n, output_p
            )
            output_sum = np.maximum(
                np.rint(n * output_mean + root_n * output_sd * normal("output_sum", index)), n
            )
            sums["output_hist"] += output_sum
            values["generation_tokens"] += output_sum

            latency = [
                self._latency_at(stream, index, cls, float(e), step)
                for e, step in zip(extra, steps, strict=True)
            ]
            for name, cells, mean, sd in (
                (
                    "ttft_hist",
                    np.stack([x.ttft_p for x in latency]),
                    np.asarray([x.ttft_mean for x in latency]),
                    np.asarray([x.ttft_sd for x in latency]),
                ),
                (
                    "e2e_hist",
                    np.stack([x.e2e_p for x in latency]),
                    np.asarray([x.e2e_mean for x in latency]),
                    np.asarray([x.e2e_sd for x in latency]),
                ),
            ):
                histograms[name] += self._rng(key, day, name, index).multinomial(n, cells)
                sums[name] += np.maximum(n * mean + root_n * sd * normal(name + "_sum", index), 0)

        kv = np.asarray([load.kv_usage for load in loads])
        full = kv >= _KV_FULL
        preempt_lam = np.where(
            full, stream.requests_per_s * factor * width * _PREEMPTIONS_PER_REQUEST, 0.0
        )
        values["preemptions"] = (
            self._rng(key, day, "preemptions", 0).poisson(preempt_lam).astype(np.float64)
        )
        values["running"] = np.asarray([load.running * part for load in loads])
        values["waiting"] = np.asarray([load.waiting * part for load in loads])
        values["kv_usage"] = kv
        return DayBlock(values=values, histograms=histograms, sums=sums)
