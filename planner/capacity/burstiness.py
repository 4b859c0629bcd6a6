"""Burstiness of an arrival process: what a mean rate hides, measured and synthesised.

A plan sized from a peak minute's mean rate treats the arrivals inside that minute as Poisson.
Real LLM traffic is clumpier: the public Azure code trace (Patel et al., "Splitwise", ISCA
2024; CC-BY 4.0) holds 67 requests in its busiest second against a busiest-minute mean of
10.5 requests/s. This module measures that clumpiness from what telemetry gives:

* from a request log (one arrival time per request): the busiest 1 s, 10 s and 60 s windows
  as rates, the squared coefficient of variation of the inter-arrival times (``scv``, 1 for
  Poisson), and the index of dispersion of counts ``I(τ) = Var N(τ) / E N(τ)`` (1 for Poisson
  at every τ; it grows with τ for clumped or drifting traffic) at 1 s and 10 s;
* from bucketed counts (a Prometheus pull at the scrape or bucket width ``b``): the busiest
  bucket as a rate and ``I(b)``: the finest the data allow, so the resolution is kept with the
  figures (``resolution_s``).

Both are read over the busiest hour (``BUSY_WINDOW_S``) of the data, so a day's rise and fall
does not count as burstiness.

Two uses. ``allen_cunneen_wait_p`` is the Allen–Cunneen approximation of a G/G/c queue's
waiting time (Erlang C scaled by ``(ca² + cs²) / 2``), the analytic account of why bursty
arrivals wait longer at the same utilisation; ``docs/capacity-math.md`` works it on the public
trace. ``synthesised_arrivals`` draws arrivals with a measured dispersion (gamma renewal gaps
whose scv is the index of dispersion: for a renewal process ``I(∞) = scv``) where no request
log exists, so a plan can be replayed against traffic as bursty as the telemetry says.
Planning itself sizes by replaying arrivals through the queue simulator
(``planner.placement.replay``), which needs no such approximation where a log exists.

Units: seconds, requests, requests per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from planner.capacity import _checks, queueing, simulation
from planner.errors import PlannerInputError

FloatArray = npt.NDArray[np.float64]

#: The span the figures are read over: the busiest hour of the data.
BUSY_WINDOW_S = 3600.0
#: Window lengths of the request-log peaks, seconds.
PEAK_WINDOWS_S = (1.0, 10.0, 60.0)


@dataclass(frozen=True)
class Burstiness:
    """How clumped a stream of arrivals is, read over its busiest hour.

    ``peak_1s``/``peak_10s``/``peak_60s`` are the busiest windows' rates (requests/s; None
    where the data are coarser than the window); ``interarrival_scv`` the squared coefficient
    of variation of the gaps (None from bucketed counts); ``dispersion_1s`` and
    ``dispersion_10s`` the index of dispersion of counts over 1 s and 10 s windows;
    ``dispersion`` the index at the finest window the data allow (``resolution_s``), which
    is what synthesised arrivals use as their scv.
    """

    requests: int
    span_s: float
    mean_requests_per_s: float
    resolution_s: float
    dispersion: float
    peak_1s: float | None = None
    peak_10s: float | None = None
    peak_60s: float | None = None
    interarrival_scv: float | None = None
    dispersion_1s: float | None = None
    dispersion_10s: float | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "requests": self.requests,
            "span_s": self.span_s,
            "mean_requests_per_s": self.mean_requests_per_s,
            "resolution_s": self.resolution_s,
            "dispersion": self.dispersion,
            "peak_1s": self.peak_1s,
            "peak_10s": self.peak_10s,
            "peak_60s": self.peak_60s,
            "interarrival_scv": self.interarrival_scv,
            "dispersion_1s": self.dispersion_1s,
            "dispersion_10s": self.dispersion_10s,
        }


def _arrivals(arrival_s: npt.ArrayLike) -> FloatArray:
    times = np.asarray(arrival_s, dtype=np.float64)
    if times.ndim != 1 or times.shape[0] < 2:
        raise PlannerInputError("arrival_s", "needs at least two arrival times")
    if not np.all(np.isfinite(times)):
        raise PlannerInputError("arrival_s", "arrival times must be finite")
    if np.any(np.diff(times) < 0):
        raise PlannerInputError("arrival_s", "arrival times must be non-decreasing")
    return times


def busiest_window(arrival_s: npt.ArrayLike, span_s: float = BUSY_WINDOW_S) -> tuple[float, float]:
    """Start and end (seconds) of the ``span_s`` window holding the most arrivals.

    The whole stream where it is shorter than ``span_s``; the earliest such window on a tie.
    """
    times = _arrivals(arrival_s)
    span = _checks.positive("span_s", span_s)
    if times[-1] - times[0] <= span:
        return float(times[0]), float(times[-1])
    ends = np.searchsorted(times, times + span, side="left")
    counts = ends - np.arange(times.shape[0])
    best = int(np.argmax(counts))
    return float(times[best]), float(times[best] + span)


def _window_counts(
    times: FloatArray, start: float, width: float, span: float
) -> npt.NDArray[np.int64]:
    """Counts of arrivals in consecutive ``width`` windows covering [start, start + span)."""
    bins = max(1, math.floor(span / width))
    index = np.floor((times - start) / width).astype(np.int64)
    index = index[(index >= 0) & (index < bins)]
    return np.bincount(index, minlength=bins)[:bins]


def _dispersion(counts: npt.NDArray[np.int64] | FloatArray) -> float:
    mean = float(np.mean(counts))
    if mean <= 0:
        return 1.0
    return float(np.var(counts) / mean)


def _peak_in_windows(times: FloatArray, width: float) -> float:
    """The most arrivals in any sliding window of ``width`` seconds, as a rate."""
    ends = np.searchsorted(times, times + width, side="left")
    return float(np.max(ends - np.arange(times.shape[0]))) / width


def from_arrivals(arrival_s: npt.ArrayLike) -> Burstiness:
    """The burstiness of a request log's arrivals (seconds, non-decreasing), over its busiest
    hour. Sliding windows for the peaks; aligned windows for the dispersion indices."""
    times = _arrivals(arrival_s)
    start, end = busiest_window(times)
    inside = times[(times >= start) & (times <= end)]
    span = max(end - start, 1e-9)
    gaps = np.diff(inside)
    scv = None
    if gaps.shape[0] >= 2 and float(np.mean(gaps)) > 0:
        scv = float(np.var(gaps) / np.mean(gaps) ** 2)
    peaks = {w: (_peak_in_windows(inside, w) if span >= w else None) for w in PEAK_WINDOWS_S}
    disp = {
        w: (_dispersion(_window_counts(inside, start, w, span)) if span >= 2 * w else None)
        for w in (1.0, 10.0)
    }
    finest = disp[1.0] if disp[1.0] is not None else 1.0
    return Burstiness(
        requests=int(inside.shape[0]),
        span_s=float(span),
        mean_requests_per_s=float(inside.shape[0] / span),
        resolution_s=1.0,
        dispersion=float(finest),
        peak_1s=peaks[1.0],
        peak_10s=peaks[10.0],
        peak_60s=peaks[60.0],
        interarrival_scv=scv,
        dispersion_1s=disp[1.0],
        dispersion_10s=disp[10.0],
    )


def from_counts(counts: npt.ArrayLike, bucket_s: float) -> Burstiness:
    """The burstiness of bucketed request counts (one per ``bucket_s`` bucket, in time order;
    a bucket without requests is 0), over the busiest hour's buckets. The index of
    dispersion is at the bucket width: the finest rate the data allow."""
    width = _checks.positive("bucket_s", bucket_s)
    values = np.asarray(counts, dtype=np.float64)
    if values.ndim != 1 or values.shape[0] == 0:
        raise PlannerInputError("counts", "needs at least one bucket")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise PlannerInputError("counts", "counts must be finite and >= 0")
    per_hour = max(1, round(BUSY_WINDOW_S / width))
    if values.shape[0] > per_hour:
        sums = np.convolve(values, np.ones(per_hour), mode="valid")
        first = int(np.argmax(sums))
        values = values[first : first + per_hour]
    total = float(values.sum())
    span = values.shape[0] * width
    peak = float(values.max()) / width
    return Burstiness(
        requests=round(total),
        span_s=span,
        mean_requests_per_s=total / span,
        resolution_s=width,
        dispersion=_dispersion(values) if values.shape[0] >= 2 else 1.0,
        peak_1s=peak if width <= 1.0 else None,
        peak_10s=peak if width == 10.0 else None,
        peak_60s=peak if width == 60.0 else None,
    )


def synthesised_arrivals(
    rate: float, span_s: float, *, scv: float = 1.0, seed: int = 0
) -> FloatArray:
    """Arrival times (seconds, from 0) over ``span_s`` at a mean ``rate`` requests/s, with
    gamma gaps of squared coefficient of variation ``scv`` (1: Poisson; the measured index of
    dispersion for a bursty stream). At least one arrival."""
    lam = _checks.positive("rate", rate)
    span = _checks.positive("span_s", span_s)
    variation = math.sqrt(_checks.positive("scv", scv))
    # Enough draws to pass the span with room to spare; cut at the span.
    expected = lam * span
    n = max(1, int(expected + 6.0 * math.sqrt(max(expected, 1.0) * max(scv, 1.0)) + 16))
    times = simulation.open_loop_arrivals(lam, n, seed=seed, cv=variation)
    inside = times[times <= span]
    return inside if inside.shape[0] else times[:1]


def allen_cunneen_wait_p(
    *,
    servers: int,
    rate: float,
    service_s: float,
    arrival_scv: float,
    service_scv: float,
    wait_s: float,
) -> float:
    """P(wait > ``wait_s``) in a G/G/c queue by Allen–Cunneen: the M/M/c tail with its rate
    of decay divided by ``(ca² + cs²) / 2``. 1 where the queue is unstable.

    ``P(W > t) ≈ C(c, a) · exp(−(c·μ − λ) · t · 2 / (ca² + cs²))`` with ``a = λ / μ`` and
    ``C`` Erlang C; Poisson arrivals and exponential service (both scv 1) give M/M/c exactly.
    """
    c = _checks.positive_int("servers", servers)
    lam = _checks.positive("rate", rate)
    s = _checks.positive("service_s", service_s)
    ca2 = _checks.non_negative("arrival_scv", arrival_scv)
    cs2 = _checks.non_negative("service_scv", service_scv)
    t = _checks.non_negative("wait_s", wait_s)
    offered = lam * s
    if offered >= c:
        return 1.0
    waits = queueing.erlang_c(c, offered)
    factor = max((ca2 + cs2) / 2.0, 1e-9)
    return float(waits * math.exp(-(c / s - lam) * t / factor))


def allen_cunneen_servers(
    *,
    rate: float,
    service_s: float,
    arrival_scv: float,
    service_scv: float,
    wait_s: float,
    quantile: float = 0.95,
    limit: int = 100_000,
) -> int:
    """The fewest servers whose Allen–Cunneen P(wait > ``wait_s``) is at most 1 − ``quantile``."""
    q = _checks.quantile_level("quantile", quantile)
    lam = _checks.positive("rate", rate)
    s = _checks.positive("service_s", service_s)
    c = max(1, math.floor(lam * s) + 1)
    while c <= limit:
        tail = allen_cunneen_wait_p(
            servers=c,
            rate=lam,
            service_s=s,
            arrival_scv=arrival_scv,
            service_scv=service_scv,
            wait_s=wait_s,
        )
        if tail <= 1.0 - q:
            return c
        c += 1
    raise PlannerInputError("rate", f"needs more than {limit} servers")
