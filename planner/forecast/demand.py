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
- Level shifts: a lasting step of the level (a workload moved onto the fleet, a longer prompt
  for everyone) would otherwise tilt the slope, so the trend also carries a term
  δ_j·1[t ≥ t_j] per step found. Steps are found by forward selection: the score test of a
  step at every hour at once (suffix sums of Huber-clipped residuals, so a spike is no step),
  the best candidate kept when its z-score reaches ``SHIFT_Z_SCORE``, it lasts
  ``min_shift_hours`` and its new level is even (its two halves agree); a backward pass drops
  steps the others make redundant. The forecast starts from the level after the last step.
- Recent rises: a step younger than ``min_shift_hours`` is invisible to that search, and the
  forecast would run at the old level for two days. So the last ``min_shift_hours`` − 1 hours
  are also compared with what the model fitted to the history before them forecasts for
  them: a CUSUM from the end of their errors (each clipped at 3 standard deviations, so a
  spike is no rise; the variance inflated for AR(1) residuals). When the sum over the last m
  ≥ ``MIN_RECENT_RISE_HOURS`` hours reaches ``RECENT_RISE_Z_SCORE`` standard errors, a step
  from the m-th last hour on joins the fit (``DemandModel.recent_rise``): the forecast starts
  from the new level within hours, and the band carries the new level's uncertainty through
  the step terms of k(t) below (1/m of the noise variance). Rises only: a fall at the end of
  the history waits for the step search, since an outage must not shrink the fleet.
- ``e`` are the residuals. Their empirical distribution, not a normal assumption, gives the
  band: quantile q of the forecast at hour t is e^(a + b·τ + s + k(t)·Q_e(q)) − c.
  Residuals are studentised (divided by √(1 − h), h the hour's leverage in the weighted fit)
  because in-sample residuals are smaller than out-of-sample errors, most of all with 168
  slot terms fitted from few weeks. k(t) ≥ 1 widens the band with the uncertainty of the
  fitted terms, as a regression prediction interval does:
  k² = 1 + 1/(W_k + λ) + ρ_f·(x − x̄_k)'M⁻¹(x − x̄_k), where x = (τ, step indicators) is the
  trend's design, x̄_k its mean over the hours slot k was observed, M the within-slot
  Σ w·(x − x̄_k)(x − x̄_k)' that fixes the slope and steps (without steps: (τ − t̄_k)²/S),
  and ρ_f = (1 + ρ)/(1 − ρ) the variance inflation of persistent (lag-1 autocorrelated, ρ)
  residuals. The band so
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
# Level shifts: at most this many steps are looked for, each lasting at least this many hours
# (two days: an incident or a one-day campaign is not a new level), and one is kept when its
# estimate is this many standard errors from zero. The bar is the search's: the largest of
# hundreds of candidate z-scores on a history with no step (docs/forecasting.md, "Level
# shifts", gives its measured false-alarm rate).
MAX_LEVEL_SHIFTS = 3
MIN_SHIFT_HOURS = 48
SHIFT_Z_SCORE = 4.0
# A step whose later half differs from its earlier half by this many standard errors is not
# a new level (one test at a fixed split, so a lower bar than the search's).
_UNEVEN_Z_SCORE = 3.0
# Candidates examined per step looked for: an uneven one is set aside and the search goes on.
_SHIFT_SEARCHES_PER_STEP = 4
# Recent rises: a rise of the level younger than ``min_shift_hours`` is followed at once when
# the last hours (at least this many) read this many standard errors above what the history
# before them forecasts (docs/forecasting.md, "Recent rises", gives the measured false-alarm
# rate). Each hour's error is clipped at ``_RISE_CLIP`` standard deviations first, so one
# spike cannot pass alone.
MIN_RECENT_RISE_HOURS = 2
RECENT_RISE_Z_SCORE = 4.0
_RISE_CLIP = 3.0
# A candidate step whose column the slot terms and the trend all but explain carries no
# information of its own.
_MIN_STEP_SPREAD = 1e-6

_STANDARD_NORMAL = NormalDist()
# E[min(Z², c²)] for a standard normal Z and c = _RISE_CLIP: the variance of a clipped unit.
_RISE_CLIP_VARIANCE = (
    2.0 * _STANDARD_NORMAL.cdf(_RISE_CLIP)
    - 1.0
    - 2.0 * _RISE_CLIP * _STANDARD_NORMAL.pdf(_RISE_CLIP)
    + 2.0 * _RISE_CLIP**2 * (1.0 - _STANDARD_NORMAL.cdf(_RISE_CLIP))
)


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


@dataclass(frozen=True)
class LevelShift:
    """A lasting step in the demand level, found in the history and fitted as a step.

    ``at`` is the start (UTC epoch seconds) of the first hour at the new level, ``factor`` the
    new level over the old (1.5 is a +50% step), ``z_score`` the step's estimate over its
    standard error (the evidence it passed; see ``SHIFT_Z_SCORE``).
    """

    at: int
    factor: float
    z_score: float


@dataclass(frozen=True, eq=False)
class _SeasonalTrend:
    """Fitted terms of the log model; times τ in weeks since ``origin_hour``.

    ``coef`` holds the slope per week and then one log step per level shift (in force from the
    epoch hour in ``shift_hours`` on); ``slot_x`` the weighted mean of each regressor over each
    slot's observed hours and ``inverse_cross`` the inverse of their within-slot weighted
    cross-product, which together give the fitted terms' share of the forecast variance.
    """

    origin_hour: int
    intercept: float
    coef: FloatArray
    shift_hours: IntArray
    season: FloatArray
    slot_weight: FloatArray
    slot_x: FloatArray
    inverse_cross: FloatArray
    shrinkage: float
    offset: float
    damping: float
    end_week: float
    persistence: float
    law: _EmpiricalLaw

    @property
    def slope(self) -> float:
        return float(self.coef[0])

    def forecast(self, epoch_hours: IntArray) -> Forecast:
        weeks = (epoch_hours - self.origin_hour) / HOURS_PER_WEEK
        tau = _damped_weeks(weeks, self.end_week, self.damping)
        slots = _slot_of_hour(epoch_hours)
        x = _regressors(tau, epoch_hours, self.shift_hours)
        center = self.intercept + x @ self.coef + self.season[slots]
        # Forecast error variance over the noise variance: the noise itself, the posterior
        # variance of the slot's term (1/λ, the prior, for a slot never seen) and the fitted
        # slope's and steps', which grows with the distance from the times (and levels) the
        # slot was observed at: (x − x̄_k)' M⁻¹ (x − x̄_k), inflated by persistent residuals.
        precision = self.slot_weight[slots] + self.shrinkage
        # λ = 0 (no shrinkage, asked for) says nothing of a slot never seen: count it as one.
        precision = np.where(precision > 0, precision, 1.0)
        dx = x - self.slot_x[slots]
        terms = np.einsum("ij,jk,ik->i", dx, self.inverse_cross, dx)
        variance_ratio = 1.0 + 1.0 / precision + self.persistence * terms
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
    week), net of any ``level_shifts`` (the lasting steps the history showed, oldest first;
    the forecast starts from the level after the last). ``recent_rise`` is a rise of the level
    in the last ``min_shift_hours`` hours, too young for ``level_shifts`` but already
    followed by the forecast (None when there is none; ``at`` its first hour, ``factor`` the
    new level over the old as fitted, ``z_score`` the evidence it passed, see
    ``RECENT_RISE_Z_SCORE``). ``history_hours`` counts the observed hours used,
    ``history_end`` is the end of the last one (epoch seconds), and ``shrinkage`` is the λ the
    seasonal terms were shrunk with.
    """

    sufficient_history: bool
    history_hours: int
    history_end: int
    seasonal_factors: FloatArray
    weekly_growth: float
    shrinkage: float
    level_shifts: tuple[LevelShift, ...]
    recent_rise: LevelShift | None
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
    max_level_shifts: int = MAX_LEVEL_SHIFTS,
    min_shift_hours: int = MIN_SHIFT_HOURS,
    follow_rises: bool = True,
) -> DemandModel:
    """Fit the demand model to a rate history (see the module docstring for the model).

    ``timestamps`` are UTC epoch seconds, strictly increasing, gaps allowed; ``values`` the
    rate (requests/s) at each, 5-minute or hourly. With fewer than ``min_history_hours``
    observed hours (at least 168) the fit falls back to ``declared_rate``, flat, with a band
    whose ``burst_quantile`` is ``declared_burst`` × the rate (``declared_burst`` ≥ 1, the
    declared peak over mean; 1 gives no band); ``declared_rate`` is then required.
    ``shrinkage`` (λ ≥ 0) overrides the empirical-Bayes seasonal shrinkage; ``damping`` (φ
    in (0, 1]) multiplies the trend's weekly growth each week past the end of the history
    (1 keeps growth undamped). Up to ``max_level_shifts`` lasting steps of the level (0: none)
    are detected and fitted as steps rather than as growth; each must hold for at least
    ``min_shift_hours`` hours, and lie as far from the history's start and from another step.
    With ``follow_rises`` (the default) a rise younger than that is followed at once
    (``recent_rise``); ``max_level_shifts=0`` turns both off.
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
    shifts = _checks.non_negative_int("max_level_shifts", _count(max_level_shifts))
    shift_hours = _checks.positive_int("min_shift_hours", _count(min_shift_hours))

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
            level_shifts=(),
            recent_rise=None,
            _fit=_Declared(rate=rate, sigma=_burst_sigma(burst, burst_q)),
        )

    fit, found, recent = _fit_seasonal_trend(
        epoch_hours, rates, lam, phi, shifts, shift_hours, bool(follow_rises) and shifts > 0
    )
    return DemandModel(
        sufficient_history=True,
        history_hours=int(epoch_hours.size),
        history_end=history_end,
        seasonal_factors=np.exp(fit.season),
        weekly_growth=math.expm1(fit.slope),
        shrinkage=fit.shrinkage,
        level_shifts=found,
        recent_rise=recent,
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


def _regressors(tau: FloatArray, epoch_hours: IntArray, shift_hours: IntArray) -> FloatArray:
    """The trend's design: τ (weeks), then one 0/1 step column per level shift."""
    columns = [tau, *((epoch_hours >= hour).astype(np.float64) for hour in shift_hours)]
    return np.column_stack(columns).astype(np.float64)


def _slot_sums(slots: IntArray, values: FloatArray) -> FloatArray:
    return np.bincount(slots, values, minlength=HOURS_PER_WEEK).astype(np.float64)


def _slot_means(slots: IntArray, weights: FloatArray, values: FloatArray) -> FloatArray:
    """Weighted mean of each column of ``values`` over each slot's hours (0 for a slot unseen).

    ``values`` is one-dimensional (one mean per slot) or (hours × columns).
    """
    slot_weight = _slot_sums(slots, weights)
    seen = slot_weight > 0
    if values.ndim == 1:
        return np.divide(
            _slot_sums(slots, weights * values),
            slot_weight,
            out=np.zeros(HOURS_PER_WEEK),
            where=seen,
        )
    return np.column_stack(
        [_slot_means(slots, weights, values[:, j]) for j in range(values.shape[1])]
    )


def _huber_weights(resid: FloatArray) -> FloatArray:
    """Huber IRLS weights min(1, k·σ/|r|), σ from the median absolute deviation."""
    sigma = _MAD_TO_SIGMA * float(np.median(np.abs(resid - np.median(resid))))
    if sigma == 0:
        return np.ones_like(resid)
    return np.minimum(1.0, _HUBER_K * sigma / np.maximum(np.abs(resid), 1e-300))


def _lag1_autocorrelation(resid: FloatArray, epoch_hours: IntArray) -> float:
    """Lag-1 autocorrelation over pairs of consecutive observed hours, in [0, _MAX_RHO]."""
    consecutive = np.diff(epoch_hours) == 1
    denom = float(np.sum(resid**2))
    rho = float(np.sum(resid[:-1][consecutive] * resid[1:][consecutive])) / denom if denom else 0.0
    return min(max(rho, 0.0), _MAX_RHO)


@dataclass(frozen=True, eq=False)
class _SlotRegression:
    """Trend coefficients from within-slot variation, with what they were fitted with.

    ``coef`` has one entry per regressor column (the slope, then the steps); ``slot_x`` is
    each slot's weighted mean of the regressors, ``slot_level`` of z − x·coef; ``cross`` the
    within-slot weighted cross-product Σ w·(x − x̄_k)(x − x̄_k)'.
    """

    coef: FloatArray
    weights: FloatArray
    slot_weight: FloatArray
    slot_x: FloatArray
    slot_level: FloatArray
    cross: FloatArray

    def residuals(self, z: FloatArray, x: FloatArray, slots: IntArray) -> FloatArray:
        return np.asarray(z - x @ self.coef - self.slot_level[slots], dtype=np.float64)


def _within_slot_fit(
    z: FloatArray, x: FloatArray, slots: IntArray, robust: bool
) -> _SlotRegression:
    """Trend coefficients of the log level from deviations from each slot's own mean.

    Comparing each hour only with the same hour of other weeks (a fixed-effects regression)
    keeps the weekly pattern, however strong and however shrunk later, out of the slope and the
    steps. Huber weights, re-estimated until they settle, bound the pull of spikes and outages.
    A coefficient the data cannot identify (one week of history says nothing of a slope) is 0.
    """
    weights = np.ones_like(z)
    coef = np.zeros(x.shape[1], dtype=np.float64)
    for _ in range(_IRLS_MAX_ITER):
        dx = x - _slot_means(slots, weights, x)[slots]
        dz = z - _slot_means(slots, weights, z)[slots]
        weighted = dx * weights[:, None]
        new_coef = np.asarray(
            np.linalg.lstsq(weighted.T @ dx, weighted.T @ dz, rcond=None)[0], dtype=np.float64
        )
        new_weights = _huber_weights(dz - dx @ new_coef) if robust else weights
        change = max(
            float(np.max(np.abs(new_coef - coef))), float(np.max(np.abs(new_weights - weights)))
        )
        coef, weights = new_coef, new_weights
        if change < _IRLS_TOL:
            break
    slot_x = _slot_means(slots, weights, x)
    dx = x - slot_x[slots]
    return _SlotRegression(
        coef=np.asarray(coef, dtype=np.float64),
        weights=weights,
        slot_weight=_slot_sums(slots, weights),
        slot_x=slot_x,
        slot_level=_slot_means(slots, weights, z - x @ coef),
        cross=(dx * weights[:, None]).T @ dx,
    )


def _z_scores(
    fit: _SlotRegression,
    z: FloatArray,
    x: FloatArray,
    slots: IntArray,
    epoch_hours: IntArray,
) -> FloatArray:
    """Each coefficient of a robust fit over its standard error (0 where it has none).

    Huber's sandwich, Var(β) = E[ψ²] / E[ψ']² · (X̃'X̃)⁻¹ with X̃ the within-slot centred
    design and E[ψ²] per residual degree of freedom, inflated by (1 + ρ)/(1 − ρ) for
    residuals persistent at lag one, as the band is: a slow wander of autocorrelated noise is
    not taken for a step.
    """
    none = np.zeros(x.shape[1], dtype=np.float64)
    resid = fit.residuals(z, x, slots)
    psi = fit.weights * resid  # w·r is Huber's ψ(r) at the fit's scale
    derivative = 1.0 - float(np.mean(fit.weights < 1.0))
    # Degrees of freedom: each seen slot's mean and each regressor took one (with two weeks
    # of history, half the hours).
    dof = int(z.size) - int(np.sum(fit.slot_weight > 0)) - int(x.shape[1])
    if derivative <= 0 or dof <= 0:
        return none
    centred = x - _slot_means(slots, np.ones_like(z), x)[slots]
    rho = _lag1_autocorrelation(resid, epoch_hours)
    noise = float(np.sum(psi**2)) / dof / derivative**2 * (1 + rho) / (1 - rho)
    variance = noise * np.diag(np.linalg.pinv(centred.T @ centred))
    positive = variance > 0
    return np.divide(fit.coef, np.sqrt(np.where(positive, variance, 1.0)), out=none, where=positive)


def _step_z_scores(
    z: FloatArray, t: FloatArray, epoch_hours: IntArray, slots: IntArray, starts: list[int]
) -> FloatArray:
    """The z-score of each step in ``starts``, all fitted together with the slope."""
    x = _regressors(t, epoch_hours, np.array(starts, dtype=np.int64))
    return _z_scores(_within_slot_fit(z, x, slots, robust=True), z, x, slots, epoch_hours)[1:]


def _later_in_slot(slots: IntArray) -> FloatArray:
    """For each hour, how many later observed hours share its slot."""
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    counts = np.bincount(slots, minlength=HOURS_PER_WEEK)
    first = np.cumsum(counts) - counts  # position of each slot's first hour in ``order``
    rank = np.arange(slots.size) - first[sorted_slots]  # 0 for the slot's earliest hour
    later = np.empty(slots.size, dtype=np.float64)
    later[order] = counts[sorted_slots] - 1 - rank
    return later


def _suffix_sums(values: FloatArray) -> FloatArray:
    """Σ_{j ≥ i} values[j] for each i (along the first axis)."""
    return np.asarray(np.cumsum(values[::-1], axis=0)[::-1], dtype=np.float64)


def _best_shift(
    fit: _SlotRegression,
    z: FloatArray,
    x: FloatArray,
    slots: IntArray,
    allowed: npt.NDArray[np.bool_],
) -> int | None:
    """Index of the observed hour where a step would explain most of a fit's residuals.

    The score test of a step starting at hour c: U_c = Σ_{i ≥ c} ψ(r_i), Huber's clipped
    residuals (so a spike cannot pose as a step), over the spread of the step's column once
    the slot terms and the regressors already fitted are projected out,
    V_c = ‖D_c − P·D_c‖². ψ is orthogonal to those columns at the fit, which makes U_c a
    suffix sum; V_c is one too: centring D_c within slots leaves Σ_k n⁺(1 − n⁺/n_k), n⁺ the
    slot's hours from c on, and projecting out the centred regressors X̃ subtracts
    g'(X̃'X̃)⁻¹g with g = Σ_{i ≥ c} X̃_i. O(hours) for all c at once.
    """
    psi = fit.weights * fit.residuals(z, x, slots)
    counts = np.bincount(slots, minlength=HOURS_PER_WEEK).astype(np.float64)
    # Adding hour i (slot k, with n⁺ later hours) to the suffix raises n⁺(1 − n⁺/n_k) by
    # 1 − (2n⁺ + 1)/n_k.
    increments = 1.0 - (2.0 * _later_in_slot(slots) + 1.0) / counts[slots]
    centred = x - _slot_means(slots, np.ones_like(z), x)[slots]
    g = _suffix_sums(centred)
    spread = _suffix_sums(increments) - np.einsum(
        "ij,jk,ik->i", g, np.linalg.pinv(centred.T @ centred), g
    )
    usable = allowed & (spread > _MIN_STEP_SPREAD)
    if not np.any(usable):
        return None
    score = _suffix_sums(psi) ** 2 / np.where(usable, spread, 1.0)
    return int(np.argmax(np.where(usable, score, -1.0)))


def _level_shifts(
    z: FloatArray,
    t: FloatArray,
    epoch_hours: IntArray,
    slots: IntArray,
    max_shifts: int,
    min_hours: int,
) -> tuple[list[int], list[float]]:
    """Epoch hours where the level stepped, oldest first, and each step's z-score.

    Forward selection: the step that best explains the current fit's residuals (score test)
    is fitted, and kept if its z-score passes ``SHIFT_Z_SCORE`` and the new level is even
    (``_is_even``); then the next, up to ``max_shifts``; then the steps that no longer pass
    together are dropped, weakest first. The z-scores returned are from the joint fit. Each step holds for ``min_hours``
    or more, and starts as far from the history's start and from every other step. An uneven
    candidate (a one-day outage inside its two days, or a second step not yet fitted) is set
    aside with its neighbourhood until another step is kept.
    """
    starts: list[int] = []
    first, end = int(epoch_hours[0]), int(epoch_hours[-1]) + 1
    in_range = (epoch_hours - first >= min_hours) & (end - epoch_hours >= min_hours)
    set_aside = np.zeros(epoch_hours.size, dtype=bool)
    for _ in range(_SHIFT_SEARCHES_PER_STEP * max_shifts):
        if len(starts) == max_shifts:
            break
        shift_hours = np.array(starts, dtype=np.int64)
        x = _regressors(t, epoch_hours, shift_hours)
        fit = _within_slot_fit(z, x, slots, robust=True)
        allowed = in_range & ~set_aside
        for hour in starts:
            allowed &= np.abs(epoch_hours - hour) >= min_hours
        best = _best_shift(fit, z, x, slots, allowed)
        if best is None:
            break
        hour = int(epoch_hours[best])
        if abs(_step_z_scores(z, t, epoch_hours, slots, [*starts, hour])[-1]) < SHIFT_Z_SCORE:
            break
        if not _is_even(z, t, epoch_hours, slots, starts, hour, end):
            set_aside |= np.abs(epoch_hours - hour) < min_hours
            continue
        starts.append(hour)
        set_aside[:] = False
    # Backward pass: a step kept early can be made redundant by the later ones (the first
    # search saw a level the other steps explain). Drop the weakest below the bar until all
    # pass together.
    starts.sort()
    while starts:
        scores = _step_z_scores(z, t, epoch_hours, slots, starts)
        weakest = int(np.argmin(np.abs(scores)))
        if abs(scores[weakest]) >= SHIFT_Z_SCORE:
            return starts, [float(score) for score in scores]
        del starts[weakest]
    return [], []


def _is_even(
    z: FloatArray,
    t: FloatArray,
    epoch_hours: IntArray,
    slots: IntArray,
    starts: list[int],
    hour: int,
    end: int,
) -> bool:
    """Whether a step at ``hour`` holds the same level through its segment.

    The segment runs to the next step kept (or the end of the history); a second step column
    from its middle on measures how much its later half differs from its earlier half. A new
    level is even when that difference is within ``_UNEVEN_Z_SCORE`` standard errors: a
    one-day outage at the end of a two-day "step" is not.
    """
    later = [s for s in starts if s > hour]
    middle = hour + ((min(later) if later else end) - hour) // 2
    x = _regressors(t, epoch_hours, np.array([*starts, hour, middle], dtype=np.int64))
    fit = _within_slot_fit(z, x, slots, robust=True)
    return bool(abs(_z_scores(fit, z, x, slots, epoch_hours)[-1]) < _UNEVEN_Z_SCORE)


def _empirical_bayes_shrinkage(z: FloatArray, x: FloatArray, slots: IntArray) -> float:
    """λ = σ² / τ²: within-slot noise variance over the variance of the true slot terms.

    With this λ the ridge estimate W·m / (W + λ) of a slot term is its posterior mean under a
    normal prior of variance τ²: little shrinkage for a strong weekly pattern, much for a weak
    one or for a slot seen once.
    """
    trend = _within_slot_fit(z, x, slots, robust=False)
    counts = trend.slot_weight
    seen = counts > 0
    resid = trend.residuals(z, x, slots)
    # Degrees of freedom: one slot mean per seen slot, the slope and the steps.
    dof = int(z.size) - int(np.sum(seen)) - int(x.shape[1])
    if dof <= 0:
        return _DEFAULT_SHRINKAGE
    noise_var = float(np.sum(resid**2)) / dof
    if noise_var == 0:
        return 0.0
    signal_var = float(np.var(trend.slot_level[seen])) - float(np.mean(noise_var / counts[seen]))
    # A pattern indistinguishable from noise: shrink hard but keep λ finite.
    signal_var = max(signal_var, noise_var * 1e-6)
    return noise_var / signal_var


@dataclass(frozen=True, eq=False)
class _Terms:
    """The fitted terms of the log model for one set of step hours, before the band."""

    x: FloatArray
    shrinkage: float
    trend: _SlotRegression
    level: float
    season: FloatArray
    resid: FloatArray
    inverse_cross: FloatArray
    leverage: FloatArray


def _fit_terms(
    z: FloatArray,
    t: FloatArray,
    epoch_hours: IntArray,
    slots: IntArray,
    shift_hours: IntArray,
    shrinkage: float | None,
) -> _Terms:
    x = _regressors(t, epoch_hours, shift_hours)
    lam = _empirical_bayes_shrinkage(z, x, slots) if shrinkage is None else shrinkage

    trend = _within_slot_fit(z, x, slots, robust=True)
    seen = trend.slot_weight > 0
    # Shrink each slot's level toward the mean level of all seen slots (each slot counted
    # once, so a gap in the history does not tilt the level toward the hours that remain).
    level = float(np.mean(trend.slot_level[seen]))
    raw = np.where(seen, trend.slot_level - level, 0.0)
    season = trend.slot_weight * raw / (trend.slot_weight + lam) if lam > 0 else raw
    level += float(np.mean(season))
    season = season - np.mean(season)
    resid = z - level - x @ trend.coef - season[slots]

    # The fitted terms' variance, relative to the noise: M⁻¹ of the within-slot cross-product.
    # A regressor with no within-slot spread (one week says nothing of a slope) counts as if
    # its spread were 1, so the band still widens with the distance from the history.
    cross = trend.cross.copy()
    idle = np.diag(cross) <= 0
    cross[idle, :] = 0.0
    cross[:, idle] = 0.0
    cross[idle, idle] = 1.0
    inverse_cross = np.asarray(np.linalg.pinv(cross), dtype=np.float64)

    # Leverage of each hour in the weighted fit: its share of its slot's estimate and of the
    # trend terms. Dividing by √(1 − h) turns in-sample residuals into out-of-sample-sized
    # errors.
    weights = trend.weights
    dx = x - trend.slot_x[slots]
    leverage = weights / (trend.slot_weight[slots] + lam) + weights * np.einsum(
        "ij,jk,ik->i", dx, inverse_cross, dx
    )
    return _Terms(
        x=x,
        shrinkage=lam,
        trend=trend,
        level=level,
        season=season,
        resid=np.asarray(resid, dtype=np.float64),
        inverse_cross=inverse_cross,
        leverage=np.asarray(leverage, dtype=np.float64),
    )


def _ar1_mean_variance(rho: float, lengths: IntArray) -> FloatArray:
    """m·Var(mean of m consecutive AR(1) values)/σ²: 1 + 2·Σ_{j<m} (1 − j/m)·ρ^j per m."""
    longest = int(np.max(lengths))
    j = np.arange(1, longest, dtype=np.float64)
    powers = rho**j
    # Σ_{j<m} ρ^j and Σ_{j<m} j·ρ^j for every m at once.
    plain = np.concatenate(([0.0], np.cumsum(powers)))[lengths - 1]
    weighted = np.concatenate(([0.0], np.cumsum(j * powers)))[lengths - 1]
    return np.asarray(1.0 + 2.0 * (plain - weighted / lengths), dtype=np.float64)


def _tail_scores(units: FloatArray, rho: float) -> FloatArray:
    """The recent-rise score of the newest m hours for each m, newest first (−∞ below the
    ``MIN_RECENT_RISE_HOURS``): Σ clip(u) / √(m·f(m)·v), ``units`` oldest first."""
    lengths = np.arange(1, units.size + 1, dtype=np.int64)
    sums = np.cumsum(np.clip(units[::-1], -_RISE_CLIP, _RISE_CLIP))
    score = sums / np.sqrt(lengths * _ar1_mean_variance(rho, lengths) * _RISE_CLIP_VARIANCE)
    score[: MIN_RECENT_RISE_HOURS - 1] = -np.inf
    return np.asarray(score, dtype=np.float64)


def _tail_reads_high(terms: _Terms, epoch_hours: IntArray, window: int) -> bool:
    """Whether the fit's own residuals hint at a recent rise: the cheap screen before the
    test, which fits the history before the tail again.

    The same score on the in-sample residuals of the whole history, against half the bar.
    A rise's hours, down-weighted by the Huber fit, stay high in it (a +60% step reads about
    4.5σ an hour); under no rise the in-sample residuals are smaller than the test's
    out-of-sample errors, so what passes the test passes this too.
    """
    end = int(epoch_hours[-1]) + 1
    in_tail = end - epoch_hours < window
    before = ~in_tail
    if int(np.sum(in_tail)) < MIN_RECENT_RISE_HOURS or not np.any(before):
        return False
    resid = terms.resid[before]
    sigma = _MAD_TO_SIGMA * float(np.median(np.abs(resid - np.median(resid))))
    if sigma == 0:
        return True
    rho = _lag1_autocorrelation(resid, epoch_hours[before])
    score = _tail_scores(terms.resid[in_tail] / sigma, rho)
    return bool(np.max(score) >= RECENT_RISE_Z_SCORE / 2)


def _recent_rise(
    z: FloatArray,
    t: FloatArray,
    epoch_hours: IntArray,
    slots: IntArray,
    shift_hours: IntArray,
    shrinkage: float | None,
    window: int,
) -> tuple[int, float] | None:
    """Start (epoch hour) and z-score of a rise of the level in the last ``window`` − 1 hours.

    The step search cannot see a step younger than ``min_shift_hours`` (``window``); this test
    can. The model is fitted to the history before the tail, and the tail's hours are compared
    with what it forecasts for them: residuals in units of their out-of-sample spread
    σ·√(1 + 1/(W_k + λ)), σ from the fit's studentised residuals, clipped at ±3. For each
    tail of m = ``MIN_RECENT_RISE_HOURS`` … ``window`` − 1 hours (the newest m observed), the
    score is the sum of the clipped units over √(m·f(m)·v), where f(m) = 1 + 2Σ_{j<m}(1 −
    j/m)ρ^j is the variance inflation of a sum of m AR(1) hours (ρ from the fit's residuals)
    and v = E[clip(N(0, 1))²] ≈ 0.995: a CUSUM from the end, whose largest value marks where
    the new level starts. The tail with the largest score is the rise when the score reaches
    ``RECENT_RISE_Z_SCORE``. One outlying hour adds at most 3 to a sum, so a spike alone is
    no rise: the other hours of the tail would have to read high too.

    Falls are not followed: a drop at the end of the history (an outage, a telemetry fault)
    waits for the step search's ``min_shift_hours``, because under-sizing breaks SLOs while
    over-sizing only costs. Nor is a rise looked for when a step in ``shift_hours`` lies
    less than 2 × ``window`` hours from the end: that step's new level is not yet pinned by
    the history before the tail (the caller leaves out a step it suspects is this rise).
    """
    end = int(epoch_hours[-1]) + 1
    in_tail = end - epoch_hours < window
    before = ~in_tail
    tail_hours = int(np.sum(in_tail))
    if tail_hours < MIN_RECENT_RISE_HOURS or int(np.sum(before)) < HOURS_PER_WEEK:
        return None
    if shift_hours.size and end - int(np.max(shift_hours)) < 2 * window:
        return None
    terms = _fit_terms(
        z[before], t[before], epoch_hours[before], slots[before], shift_hours, shrinkage
    )
    usable = terms.leverage < _MAX_LEVERAGE
    if not np.any(usable):
        return None
    studentised = terms.resid[usable] / np.sqrt(1.0 - terms.leverage[usable])
    sigma = _MAD_TO_SIGMA * float(np.median(np.abs(studentised - np.median(studentised))))
    if sigma == 0:
        return None
    rho = _lag1_autocorrelation(terms.resid, epoch_hours[before])
    tail_slots = slots[in_tail]
    x_tail = _regressors(t[in_tail], epoch_hours[in_tail], shift_hours)
    expected = terms.level + x_tail @ terms.trend.coef + terms.season[tail_slots]
    precision = terms.trend.slot_weight[tail_slots] + terms.shrinkage
    precision = np.where(precision > 0, precision, 1.0)
    units = (z[in_tail] - expected) / (sigma * np.sqrt(1.0 + 1.0 / precision))
    score = _tail_scores(units, rho)
    best = int(np.argmax(score))
    if score[best] < RECENT_RISE_Z_SCORE:
        return None
    return int(epoch_hours[in_tail][::-1][best]), float(score[best])


def _fit_seasonal_trend(
    epoch_hours: IntArray,
    rates: FloatArray,
    shrinkage: float | None,
    damping: float,
    max_shifts: int,
    min_shift_hours: int,
    follow_rises: bool,
) -> tuple[_SeasonalTrend, tuple[LevelShift, ...], LevelShift | None]:
    mean_rate = float(np.mean(rates))
    offset = _OFFSET_FRACTION * mean_rate if mean_rate > 0 else 1.0
    z = np.log(rates + offset)
    slots = _slot_of_hour(epoch_hours)
    origin = int(epoch_hours[0])
    t = (epoch_hours - origin) / HOURS_PER_WEEK
    shift_starts, shift_scores = _level_shifts(
        z, t, epoch_hours, slots, max_shifts, min_shift_hours
    )
    shift_hours = np.array(shift_starts, dtype=np.int64)
    terms = _fit_terms(z, t, epoch_hours, slots, shift_hours, shrinkage)
    rise = None
    if follow_rises:
        # A step found near the bound of the search (fewer than 2 × min_shift_hours from the
        # end) can be a younger rise pressed against it: its first hours then count as the
        # old level and the new level reads low. The rise test is run without it, and a rise
        # found inside the tail replaces it; one at the tail's first hour only says the
        # level was already up before the tail, i.e. the step was where it was found.
        end = int(epoch_hours[-1]) + 1
        pressed = bool(shift_starts) and end - shift_starts[-1] < 2 * min_shift_hours
        kept = shift_starts[:-1] if pressed else shift_starts
        if pressed or _tail_reads_high(terms, epoch_hours, min_shift_hours):
            rise = _recent_rise(
                z, t, epoch_hours, slots, np.array(kept, dtype=np.int64), shrinkage, min_shift_hours
            )
        tail_start = int(epoch_hours[np.argmax(end - epoch_hours < min_shift_hours)])
        if pressed and rise is not None and rise[0] <= tail_start:
            rise = None
        if rise is not None:
            shift_starts, shift_scores = kept, shift_scores[: len(kept)]
            shift_hours = np.array([*shift_starts, rise[0]], dtype=np.int64)
            terms = _fit_terms(z, t, epoch_hours, slots, shift_hours, shrinkage)
    x, trend, lam, resid, leverage = (
        terms.x,
        terms.trend,
        terms.shrinkage,
        terms.resid,
        terms.leverage,
    )
    seen = trend.slot_weight > 0
    informative = leverage < _MAX_LEVERAGE
    studentised = (
        resid[informative] / np.sqrt(1.0 - leverage[informative])
        if np.any(informative)
        else resid  # every hour decided its own fit (one week, λ = 0): nothing better to use
    )
    rho = _lag1_autocorrelation(resid, epoch_hours)

    sample = np.sort(studentised)
    if sample.size > _RESIDUAL_SAMPLE:
        probs = (np.arange(_RESIDUAL_SAMPLE) + 0.5) / _RESIDUAL_SAMPLE
        sample = np.quantile(sample, probs)
    mean_x = np.mean(x, axis=0)
    model = _SeasonalTrend(
        origin_hour=origin,
        intercept=terms.level,
        coef=trend.coef,
        shift_hours=shift_hours,
        season=terms.season,
        slot_weight=trend.slot_weight,
        slot_x=np.where(seen[:, None], trend.slot_x, mean_x[None, :]),
        inverse_cross=terms.inverse_cross,
        shrinkage=lam,
        offset=offset,
        damping=damping,
        end_week=float(t[-1]) + 1.0 / HOURS_PER_WEEK,
        persistence=(1.0 + rho) / (1.0 - rho),
        law=_EmpiricalLaw(np.asarray(sample, dtype=np.float64)),
    )
    confirmed = len(shift_starts)
    found = tuple(
        LevelShift(at=int(hour) * HOUR_S, factor=math.exp(float(step)), z_score=score)
        for hour, step, score in zip(
            shift_hours[:confirmed], trend.coef[1 : 1 + confirmed], shift_scores, strict=True
        )
    )
    recent = (
        LevelShift(at=rise[0] * HOUR_S, factor=math.exp(float(trend.coef[-1])), z_score=rise[1])
        if rise is not None
        else None
    )
    return model, found, recent
