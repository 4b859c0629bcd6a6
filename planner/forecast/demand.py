"""Demand forecast: hour-of-week seasonality, a robust log-linear trend and an empirical band.

The re-planner sizes fleets for a quantile of forecast demand, not for its mean, so the model
has to say how wrong it may be as well as what it expects. The model, fitted to the log of the
hourly rate (so seasonality and growth are multiplicative, as traffic is):

    log(y_t + c) = a + b·τ(t) + s[slot(t)] + e_t

- ``slot(t)`` is the hour of the week (0 = Monday 00:00 UTC … 167 = Sunday 23:00 UTC) and
  ``s`` its 168 seasonal terms, centred to sum to zero (factors e^s have geometric mean 1).
  Each slot's term is a ridge estimate W_k·m_k / (W_k + λ) of its mean deviation m_k from
  the level, W_k its (Huber-weighted) count of observed hours: a slot seen few times is shrunk
  toward the overall level. λ is chosen by empirical Bayes (within-slot noise variance over
  the variance of the true slot terms) unless given.
- ``a + b·τ`` is the trend of the log level. The slope b (per week) is a Huber regression
  (robust to incident spikes and outages) on within-slot deviations: each hour is compared
  only with the same hour of other weeks, so the weekly pattern cannot leak into the slope.
  Growth is therefore exponential; we chose this over an additive trend because fleet
  traffic grows by percentages. Beyond the end of the history the growth can be damped by a
  factor φ per week (τ then advances by φ, φ², …), so a long horizon need not extrapolate a
  short burst of growth forever; φ = 1 (undamped) is the default.
- ``e`` are the residuals. Their empirical distribution, not a normal assumption, gives the
  band: quantile q of the forecast at hour t is e^(a + b·τ + s + k(t)·Q_e(q)) − c.
  Residuals are studentised (divided by √(1 − h), h the hour's leverage in the weighted fit)
  because in-sample residuals are smaller than out-of-sample errors, most of all with 168
  slot terms fitted from few weeks. k(t) ≥ 1 widens the band with the uncertainty of the
  fitted terms, as a regression prediction interval does:
  k² = 1 + 1/(W_k + λ) + ρ_f·(τ − t̄_k)²/S, where t̄_k is the mean time the slot was
  observed, S the within-slot Σ w·(t − t̄_k)² that fixes the slope, and ρ_f = (1 + ρ)/(1 − ρ)
  the variance inflation of persistent (lag-1 autocorrelated, ρ) residuals. The band so
  widens with the horizon, slowly at first and then linearly in the weeks ahead.
- c is a small offset (1% of the mean rate) so hours with zero traffic have a logarithm.

With too little history (fewer than ``min_history_hours`` observed hours, two weeks by
default) the model says so (``sufficient_history`` is false) and forecasts the declared rate,
flat, with a lognormal band whose mean is the declared rate and whose ``burst_quantile``
(p99 by default) is ``declared_burst`` × the declared rate: the declared workload profile
stands until telemetry can overrule it.

Units: timestamps are UTC epoch seconds; rates are requests per second (any non-negative rate
works, tokens/s too). Samples finer than an hour (5-minute telemetry) are averaged into the
hour that contains them; gaps are allowed and simply carry no weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Protocol

import numpy as np
import numpy.typing as npt

from planner.capacity import _checks
from planner.errors import PlannerInputError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

HOUR_S = 3600
HOURS_PER_WEEK = 168
# Two weeks: every hour-of-week slot seen at least twice, the least that separates a slot's
# pattern from its noise.
MIN_HISTORY_HOURS = 2 * HOURS_PER_WEEK

# Epoch day 0 (1970-01-01) was a Thursday; slot 0 is Monday 00:00 UTC, so epoch hour 0 is
# slot 3 × 24.
_EPOCH_HOUR_SLOT = 3 * 24
# Offset c as a fraction of the mean rate: large enough that a zero hour has a finite log,
# small enough that it does not flatten the seasonal shape of a busy series.
_OFFSET_FRACTION = 0.01
# Huber's tuning constant: 95% efficiency under normal noise, bounded influence for spikes.
_HUBER_K = 1.345
# Median absolute deviation × 1.4826 estimates σ for normal noise.
_MAD_TO_SIGMA = 1.4826
_IRLS_MAX_ITER = 100
_IRLS_TOL = 1e-10
# Observations whose fit leverage is above this carry almost no information about the noise
# (their own value decided their fitted value); they are left out of the residual sample.
_MAX_LEVERAGE = 0.9
# Cap on the lag-1 residual autocorrelation: at 0.95 the variance inflation is already 39×.
_MAX_RHO = 0.95
# At most this many residuals are kept (as evenly spaced quantiles of the full sample); the
# band and the smearing mean need the shape of the distribution, not every point.
_RESIDUAL_SAMPLE = 2048
# Shrinkage when the data cannot estimate it (no slot observed twice).
_DEFAULT_SHRINKAGE = 1.0
# Forecast hours per block when averaging over the residual sample (bounds memory).
_MEAN_BLOCK_HOURS = 512

_STANDARD_NORMAL = NormalDist()


# -- validation and resampling ------------------------------------------------------------------


def _as_float_vector(name: str, array: npt.ArrayLike) -> FloatArray:
    try:
        vector = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PlannerInputError(name, f"must be an array of numbers ({exc})") from exc
    if vector.ndim != 1:
        raise PlannerInputError(name, f"must be one-dimensional, got shape {vector.shape}")
    if not np.all(np.isfinite(vector)):
        raise PlannerInputError(name, "must hold finite numbers only (no NaN or infinity)")
    return vector


def check_timestamps(name: str, timestamps: npt.ArrayLike) -> FloatArray:
    """``timestamps`` as float epoch seconds: one-dimensional, finite, strictly increasing."""
    ts = _as_float_vector(name, timestamps)
    if ts.size > 1 and not np.all(np.diff(ts) > 0):
        raise PlannerInputError(name, "must be strictly increasing (sorted, no duplicates)")
    return ts


def check_series(timestamps: npt.ArrayLike, values: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """A rate history as (timestamps, values) float arrays, or ``PlannerInputError``.

    Timestamps must be strictly increasing epoch seconds; values finite, non-negative rates of
    the same length.
    """
    ts = check_timestamps("timestamps", timestamps)
    vs = _as_float_vector("values", values)
    if vs.size != ts.size:
        raise PlannerInputError(
            "values", f"must have one value per timestamp ({ts.size}), got {vs.size}"
        )
    if np.any(vs < 0):
        raise PlannerInputError("values", "rates must be zero or more")
    return ts, vs


def hour_of_week(timestamps: npt.ArrayLike) -> IntArray:
    """Hour-of-week slot of each UTC epoch-second timestamp: 0 = Monday 00:00 … 167 = Sunday 23:00."""
    hours = np.floor(check_timestamps("timestamps", timestamps) / HOUR_S).astype(np.int64)
    return _slot_of_hour(hours)


def _slot_of_hour(epoch_hours: IntArray) -> IntArray:
    return np.asarray((epoch_hours + _EPOCH_HOUR_SLOT) % HOURS_PER_WEEK, dtype=np.int64)


def resample_hourly(
    timestamps: npt.ArrayLike, values: npt.ArrayLike
) -> tuple[IntArray, FloatArray]:
    """Average a rate history into whole UTC hours.

    Returns (hour starts in epoch seconds, mean rate in each hour) for the hours that hold at
    least one sample; hours without samples are absent, not zero, because a telemetry gap is
    not an idle hour. An hourly series comes back unchanged (up to flooring to the hour).
    """
    ts, vs = check_series(timestamps, values)
    if ts.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    hours = np.floor(ts / HOUR_S).astype(np.int64)
    # Timestamps are sorted, so each hour's samples are one contiguous run.
    starts = np.flatnonzero(np.concatenate(([True], np.diff(hours) != 0)))
    sums = np.add.reduceat(vs, starts)
    counts = np.diff(np.append(starts, hours.size))
    return hours[starts] * HOUR_S, sums / counts


def _real(value: float) -> float:
    # numpy scalars (a timestamp taken from an array) are numbers too; the checks want Python's.
    return float(value) if isinstance(value, np.integer | np.floating) else value


def _count(value: int) -> int:
    return int(value) if isinstance(value, np.integer) else value


# -- residual distributions ---------------------------------------------------------------------


class _ResidualLaw(Protocol):
    """The distribution of a forecast's log-scale error before the horizon scaling k(t)."""

    def quantile(self, q: float) -> float: ...

    def mean_exp(self, scale: FloatArray) -> FloatArray:
        """E[exp(k·e)] for each k in ``scale`` (the smearing factor for the mean)."""
        ...


@dataclass(frozen=True, eq=False)
class _EmpiricalLaw:
    """Sorted studentised residuals; quantiles by linear interpolation (monotone in q)."""

    sample: FloatArray

    def quantile(self, q: float) -> float:
        return float(np.quantile(self.sample, q))

    def mean_exp(self, scale: FloatArray) -> FloatArray:
        out = np.empty(scale.size, dtype=np.float64)
        for lo in range(0, scale.size, _MEAN_BLOCK_HOURS):
            block = scale[lo : lo + _MEAN_BLOCK_HOURS]
            out[lo : lo + block.size] = np.mean(np.exp(np.outer(block, self.sample)), axis=1)
        return out


@dataclass(frozen=True)
class _LognormalLaw:
    """Normal log-scale error with standard deviation ``sigma`` (the declared-burst band)."""

    sigma: float

    def quantile(self, q: float) -> float:
        return self.sigma * _STANDARD_NORMAL.inv_cdf(q)

    def mean_exp(self, scale: FloatArray) -> FloatArray:
        return np.asarray(np.exp(0.5 * (scale * self.sigma) ** 2), dtype=np.float64)


# -- the forecast -------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Forecast:
    """Hourly forecast of a rate with its prediction band.

    ``timestamps`` are hour starts (UTC epoch seconds), ``mean`` the expected rate in each hour
    (requests/s). ``quantile(q)`` gives the band: the rate that hour's actual stays at or below
    with probability q, as far as the history's residuals tell.
    """

    timestamps: IntArray
    mean: FloatArray
    _center: FloatArray = field(repr=False)
    _scale: FloatArray = field(repr=False)
    _offset: float = field(repr=False)
    _law: _ResidualLaw = field(repr=False)

    @property
    def hours(self) -> int:
        """Number of forecast hours."""
        return int(self.timestamps.size)

    def quantile(self, q: float) -> FloatArray:
        """Quantile ``q`` in (0, 1) of each hour's rate (requests/s); never below zero.

        Non-decreasing in q hour by hour: a premium tier sized at q = 0.99 never gets less than
        a standard tier at 0.9.
        """
        level = _checks.quantile_level("q", _real(q))
        log_rate = self._center + self._scale * self._law.quantile(level)
        return np.maximum(np.exp(log_rate) - self._offset, 0.0)

    def peak(self, q: float, window: int = HOURS_PER_WEEK, within: float = 0.99) -> FloatArray:
        """Peak rate of each ``window``-hour window of the band at quantile ``q``.

        The peak is the ``within`` percentile (in (0, 1]; 1 is the maximum) of the window's
        hourly values of ``quantile(q)``: the default, the p99 of a week's hours, is the rate a
        weekly re-plan sizes for. Window i starts at ``timestamps[i × window]``; a last,
        shorter window is included. Requests/s.
        """
        band = self.quantile(q)
        size = _checks.positive_int("window", _count(window))
        pct = _checks.utilization("within", _real(within))
        return np.array(
            [np.quantile(band[lo : lo + size], pct) for lo in range(0, band.size, size)],
            dtype=np.float64,
        )


# -- the model ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _SeasonalTrend:
    """Fitted terms of the log model; times τ in weeks since ``origin_hour``."""

    origin_hour: int
    intercept: float
    slope: float
    season: FloatArray
    slot_weight: FloatArray
    slot_time: FloatArray
    shrinkage: float
    offset: float
    damping: float
    end_week: float
    sxx: float
    persistence: float
    law: _EmpiricalLaw

    def forecast(self, epoch_hours: IntArray) -> Forecast:
        weeks = (epoch_hours - self.origin_hour) / HOURS_PER_WEEK
        tau = _damped_weeks(weeks, self.end_week, self.damping)
        slots = _slot_of_hour(epoch_hours)
        center = self.intercept + self.slope * tau + self.season[slots]
        # Forecast error variance over the noise variance: the noise itself, the posterior
        # variance of the slot's term (1/λ, the prior, for a slot never seen) and the slope's,
        # which grows with the distance from the times the slot was observed.
        precision = self.slot_weight[slots] + self.shrinkage
        # λ = 0 (no shrinkage, asked for) says nothing of a slot never seen: count it as one.
        precision = np.where(precision > 0, precision, 1.0)
        variance_ratio = (
            1.0 + 1.0 / precision + self.persistence * (tau - self.slot_time[slots]) ** 2 / self.sxx
        )
        scale = np.sqrt(variance_ratio)
        # Smearing (Duan 1983): the mean of e^(x + e) is e^x · E[e^e], not e^x.
        mean = np.maximum(np.exp(center) * self.law.mean_exp(scale) - self.offset, 0.0)
        return Forecast(
            timestamps=epoch_hours * HOUR_S,
            mean=mean,
            _center=center,
            _scale=scale,
            _offset=self.offset,
            _law=self.law,
        )


@dataclass(frozen=True)
class _Declared:
    """The flat fallback: lognormal with mean ``rate`` and log-scale spread ``sigma``."""

    rate: float
    sigma: float

    def forecast(self, epoch_hours: IntArray) -> Forecast:
        n = epoch_hours.size
        # ln of the median: mean = e^(μ + σ²/2). A declared rate of zero forecasts zero.
        mu = math.log(self.rate) - 0.5 * self.sigma**2 if self.rate > 0 else -math.inf
        law = _LognormalLaw(self.sigma)
        return Forecast(
            timestamps=epoch_hours * HOUR_S,
            mean=np.full(n, self.rate, dtype=np.float64),
            _center=np.full(n, mu, dtype=np.float64),
            _scale=np.ones(n, dtype=np.float64),
            _offset=0.0,
            _law=law,
        )


@dataclass(frozen=True, eq=False)
class DemandModel:
    """A fitted demand model; ``forecast(start, hours)`` projects it.

    ``sufficient_history`` is false when the history was too short to fit and the model is the
    declared rate, flat. ``seasonal_factors`` are the 168 multiplicative hour-of-week factors
    (index 0 = Monday 00:00 UTC, geometric mean 1; all 1 for the flat fallback) and
    ``weekly_growth`` the fitted growth of the level per week before damping (0.02 = +2% a
    week). ``history_hours`` counts the observed hours used, ``history_end`` is the end of the
    last one (epoch seconds), and ``shrinkage`` is the λ the seasonal terms were shrunk with.
    """

    sufficient_history: bool
    history_hours: int
    history_end: int
    seasonal_factors: FloatArray
    weekly_growth: float
    shrinkage: float
    _fit: _SeasonalTrend | _Declared = field(repr=False)

    def forecast(self, start: float, hours: int) -> Forecast:
        """Forecast ``hours`` hourly buckets from the hour containing ``start`` (epoch s)."""
        first = math.floor(_checks.finite("start", _real(start)) / HOUR_S)
        count = _checks.positive_int("hours", _count(hours))
        return self._fit.forecast(np.arange(first, first + count, dtype=np.int64))


def fit_demand(
    timestamps: npt.ArrayLike,
    values: npt.ArrayLike,
    *,
    declared_rate: float | None = None,
    declared_burst: float = 1.0,
    burst_quantile: float = 0.99,
    min_history_hours: int = MIN_HISTORY_HOURS,
    shrinkage: float | None = None,
    damping: float = 1.0,
) -> DemandModel:
    """Fit the demand model to a rate history (see the module docstring for the model).

    ``timestamps`` are UTC epoch seconds, strictly increasing, gaps allowed; ``values`` the
    rate (requests/s) at each, 5-minute or hourly. With fewer than ``min_history_hours``
    observed hours (at least 168) the fit falls back to ``declared_rate``, flat, with a band
    whose ``burst_quantile`` is ``declared_burst`` × the rate (``declared_burst`` ≥ 1, the
    declared peak over mean; 1 gives no band); ``declared_rate`` is then required.
    ``shrinkage`` (λ ≥ 0) overrides the empirical-Bayes seasonal shrinkage; ``damping`` (φ
    in (0, 1]) multiplies the trend's weekly growth each week past the end of the history
    (1 keeps growth undamped).
    """
    hour_starts, rates = resample_hourly(timestamps, values)
    burst = _checks.at_least_one("declared_burst", declared_burst)
    burst_q = _checks.quantile_level("burst_quantile", burst_quantile)
    min_hours = _checks.positive_int("min_history_hours", min_history_hours)
    if min_hours < HOURS_PER_WEEK:
        raise PlannerInputError(
            "min_history_hours", f"must be at least one week ({HOURS_PER_WEEK}), got {min_hours}"
        )
    lam = None if shrinkage is None else _checks.non_negative("shrinkage", shrinkage)
    phi = _checks.utilization("damping", damping)
    rate = None if declared_rate is None else _checks.non_negative("declared_rate", declared_rate)

    epoch_hours = hour_starts // HOUR_S
    history_end = int(hour_starts[-1]) + HOUR_S if hour_starts.size else 0
    if epoch_hours.size < min_hours:
        if rate is None:
            raise PlannerInputError(
                "declared_rate",
                f"history has {epoch_hours.size} hours, fewer than {min_hours}; "
                "a declared rate is needed to forecast",
            )
        return DemandModel(
            sufficient_history=False,
            history_hours=int(epoch_hours.size),
            history_end=history_end,
            seasonal_factors=np.ones(HOURS_PER_WEEK, dtype=np.float64),
            weekly_growth=0.0,
            shrinkage=0.0,
            _fit=_Declared(rate=rate, sigma=_burst_sigma(burst, burst_q)),
        )

    fit = _fit_seasonal_trend(epoch_hours, rates, lam, phi)
    return DemandModel(
        sufficient_history=True,
        history_hours=int(epoch_hours.size),
        history_end=history_end,
        seasonal_factors=np.exp(fit.season),
        weekly_growth=math.expm1(fit.slope),
        shrinkage=fit.shrinkage,
        _fit=fit,
    )


def _burst_sigma(burst: float, burst_quantile: float) -> float:
    """Log-scale σ of the lognormal whose mean is 1 and whose ``burst_quantile`` is ``burst``.

    ln Q(p) = μ + σ·z_p with μ = −σ²/2, so σ² − 2·z_p·σ + 2·ln(burst) = 0; the smaller root is
    the one that tends to 0 as burst → 1.
    """
    z = _STANDARD_NORMAL.inv_cdf(burst_quantile)
    disc = z * z - 2.0 * math.log(burst)
    if z <= 0 or disc < 0:
        limit = math.exp(z * z / 2.0) if z > 0 else 1.0
        raise PlannerInputError(
            "declared_burst",
            f"a lognormal with mean 1 cannot reach {burst!r} at quantile {burst_quantile!r} "
            f"(at most {limit:.4g}; above the median quantile only)",
        )
    return z - math.sqrt(disc)


def _damped_weeks(weeks: FloatArray, end_week: float, damping: float) -> FloatArray:
    """Trend time τ: t up to the end of the history, then ∫ φ^u du of the weeks past it."""
    if damping >= 1.0:
        return weeks
    past = np.maximum(weeks - end_week, 0.0)
    damped = np.expm1(past * math.log(damping)) / math.log(damping)
    return np.where(weeks > end_week, end_week + damped, weeks)


def _slot_sums(slots: IntArray, values: FloatArray) -> FloatArray:
    return np.bincount(slots, values, minlength=HOURS_PER_WEEK).astype(np.float64)


def _huber_weights(resid: FloatArray) -> FloatArray:
    """Huber IRLS weights min(1, k·σ/|r|), σ from the median absolute deviation."""
    sigma = _MAD_TO_SIGMA * float(np.median(np.abs(resid - np.median(resid))))
    if sigma == 0:
        return np.ones_like(resid)
    return np.minimum(1.0, _HUBER_K * sigma / np.maximum(np.abs(resid), 1e-300))


@dataclass(frozen=True, eq=False)
class _TrendFit:
    """Slope from within-slot variation, with the weights and slot means it was fitted with."""

    slope: float
    weights: FloatArray
    slot_weight: FloatArray
    slot_time: FloatArray
    slot_level: FloatArray
    within_sxx: float


def _within_slot_trend(z: FloatArray, t: FloatArray, slots: IntArray, robust: bool) -> _TrendFit:
    """Slope of the log level per week from deviations from each slot's own mean.

    Comparing each hour only with the same hour of other weeks (a fixed-effects regression)
    keeps the weekly pattern, however strong and however shrunk later, out of the slope.
    Huber weights, re-estimated until they settle, bound the pull of spikes and outages.
    """
    weights = np.ones_like(z)
    slope = 0.0
    for _ in range(_IRLS_MAX_ITER):
        slot_weight = _slot_sums(slots, weights)
        seen = slot_weight > 0
        slot_time = np.divide(
            _slot_sums(slots, weights * t), slot_weight, out=np.zeros(HOURS_PER_WEEK), where=seen
        )
        slot_level = np.divide(
            _slot_sums(slots, weights * z), slot_weight, out=np.zeros(HOURS_PER_WEEK), where=seen
        )
        dt = t - slot_time[slots]
        dz = z - slot_level[slots]
        sxx = float(np.sum(weights * dt * dt))
        new_slope = float(np.sum(weights * dt * dz)) / sxx if sxx > 0 else 0.0
        new_weights = _huber_weights(dz - new_slope * dt) if robust else weights
        change = max(abs(new_slope - slope), float(np.max(np.abs(new_weights - weights))))
        slope, weights = new_slope, new_weights
        if change < _IRLS_TOL:
            break
    slot_weight = _slot_sums(slots, weights)
    seen = slot_weight > 0
    slot_time = np.divide(
        _slot_sums(slots, weights * t), slot_weight, out=np.zeros(HOURS_PER_WEEK), where=seen
    )
    slot_level = np.divide(
        _slot_sums(slots, weights * (z - slope * t)),
        slot_weight,
        out=np.zeros(HOURS_PER_WEEK),
        where=seen,
    )
    dt = t - slot_time[slots]
    return _TrendFit(
        slope=slope,
        weights=weights,
        slot_weight=slot_weight,
        slot_time=slot_time,
        slot_level=slot_level,
        within_sxx=float(np.sum(weights * dt * dt)),
    )


def _empirical_bayes_shrinkage(z: FloatArray, t: FloatArray, slots: IntArray) -> float:
    """λ = σ² / τ²: within-slot noise variance over the variance of the true slot terms.

    With this λ the ridge estimate W·m / (W + λ) of a slot term is its posterior mean under a
    normal prior of variance τ²: little shrinkage for a strong weekly pattern, much for a weak
    one or for a slot seen once.
    """
    trend = _within_slot_trend(z, t, slots, robust=False)
    counts = trend.slot_weight
    seen = counts > 0
    resid = z - trend.slope * t - trend.slot_level[slots]
    # Degrees of freedom: one slot mean per seen slot and the slope.
    dof = int(z.size) - int(np.sum(seen)) - 1
    if dof <= 0:
        return _DEFAULT_SHRINKAGE
    noise_var = float(np.sum(resid**2)) / dof
    if noise_var == 0:
        return 0.0
    signal_var = float(np.var(trend.slot_level[seen])) - float(np.mean(noise_var / counts[seen]))
    # A pattern indistinguishable from noise: shrink hard but keep λ finite.
    signal_var = max(signal_var, noise_var * 1e-6)
    return noise_var / signal_var


def _fit_seasonal_trend(
    epoch_hours: IntArray, rates: FloatArray, shrinkage: float | None, damping: float
) -> _SeasonalTrend:
    mean_rate = float(np.mean(rates))
    offset = _OFFSET_FRACTION * mean_rate if mean_rate > 0 else 1.0
    z = np.log(rates + offset)
    slots = _slot_of_hour(epoch_hours)
    origin = int(epoch_hours[0])
    t = (epoch_hours - origin) / HOURS_PER_WEEK
    lam = _empirical_bayes_shrinkage(z, t, slots) if shrinkage is None else shrinkage

    trend = _within_slot_trend(z, t, slots, robust=True)
    seen = trend.slot_weight > 0
    # Shrink each slot's level toward the mean level of all seen slots (each slot counted
    # once, so a gap in the history does not tilt the level toward the hours that remain).
    level = float(np.mean(trend.slot_level[seen]))
    raw = np.where(seen, trend.slot_level - level, 0.0)
    season = trend.slot_weight * raw / (trend.slot_weight + lam) if lam > 0 else raw
    level += float(np.mean(season))
    season = season - np.mean(season)
    resid = z - level - trend.slope * t - season[slots]

    # Leverage of each hour in the weighted fit: its share of its slot's estimate and of the
    # slope. Dividing by √(1 − h) turns in-sample residuals into out-of-sample-sized errors.
    weights = trend.weights
    dt = t - trend.slot_time[slots]
    sxx = trend.within_sxx if trend.within_sxx > 0 else 1.0
    leverage = weights / (trend.slot_weight[slots] + lam) + weights * dt * dt / sxx
    informative = leverage < _MAX_LEVERAGE
    studentised = (
        resid[informative] / np.sqrt(1.0 - leverage[informative])
        if np.any(informative)
        else resid  # every hour decided its own fit (one week, λ = 0): nothing better to use
    )

    # Lag-1 autocorrelation over pairs of consecutive observed hours.
    consecutive = np.diff(epoch_hours) == 1
    denom = float(np.sum(resid**2))
    rho = float(np.sum(resid[:-1][consecutive] * resid[1:][consecutive])) / denom if denom else 0.0
    rho = min(max(rho, 0.0), _MAX_RHO)

    sample = np.sort(studentised)
    if sample.size > _RESIDUAL_SAMPLE:
        probs = (np.arange(_RESIDUAL_SAMPLE) + 0.5) / _RESIDUAL_SAMPLE
        sample = np.quantile(sample, probs)
    t_mean = float(np.mean(t))
    return _SeasonalTrend(
        origin_hour=origin,
        intercept=level,
        slope=trend.slope,
        season=season,
        slot_weight=trend.slot_weight,
        slot_time=np.where(seen, trend.slot_time, t_mean),
        shrinkage=lam,
        offset=offset,
        damping=damping,
        end_week=float(t[-1]) + 1.0 / HOURS_PER_WEEK,
        sxx=sxx,
        persistence=(1.0 + rho) / (1.0 - rho),
        law=_EmpiricalLaw(np.asarray(sample, dtype=np.float64)),
    )
