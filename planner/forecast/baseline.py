"""Baselines: seasonal-naive and Holt-Winters, the references a demand model must beat.

**Seasonal-naive**: next week is this week again.

The point forecast of hour t is the rate observed in the same hour of the latest week the
history holds it (Hyndman & Athanasopoulos, *Forecasting: Principles and Practice*, 3rd ed.,
§5.2, "seasonal naïve method", with a season of 168 hours). The band comes from the
history's own week-over-week errors: e = log(y_t + c) − log(y_{t−168} + c) over every hour
observed both weeks, and quantile q of an hour whose reference lies m weeks back is
e^(log(ref + c) + √m · Q_e(q)) − c, the seasonal random walk's widening (§5.5).

It has no trend, no shrinkage and no notion of a step, which is what makes it the honest
yardstick: a demand model that does worse than it on a history has misread that history.

**Holt-Winters** (additive, on the log of the rate, so seasonality and trend are
multiplicative; FPP §8.3, and the error-correction form of ETS(A,A,A), §8.5): a level ℓ,
a trend b and 168 hour-of-week terms s, each corrected by every hour's one-step error
e_t = z_t − (ℓ + b + s[slot]):

    ℓ ← ℓ + b + α·e      b ← b + β·e      s[slot] ← s[slot] + γ·e

It is the online yardstick: it has no notion of a step either, but its level follows one
within a few hours (α of the error each hour), which a fit over weeks of history does not
do by itself. The smoothing constants are the grid point with the least one-step squared
error over the history (``HOLT_WINTERS_GRID``), the plain way to fit them. Initial level and
trend from the means of the first two weeks, initial seasonal terms from the first two weeks'
deviations from that line. A telemetry gap is skipped: the state advances by the trend and
nothing is corrected. The band comes from the one-step errors (after the first week, whose
errors still carry the initialisation), quantile q at h hours ahead being
e^(ℓ + h·b + s + k_h·Q_e(q)) − c with k_h² = 1 + Σ_{j<h} (α + j·β + γ·1[168 | j])², the
model's own h-step variance (FPP §8.7, Table 8.8, class 1).

Used by the backtests (``planner.forecast.backtest``) to put every accuracy figure beside
them; the re-planner forecasts with ``planner.forecast.demand``.

Units as in ``planner.forecast.demand``: UTC epoch seconds, rates in requests/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from planner.capacity import _checks
from planner.errors import PlannerInputError
from planner.forecast.demand import (
    _OFFSET_FRACTION,
    HOUR_S,
    HOURS_PER_WEEK,
    MIN_HISTORY_HOURS,
    FloatArray,
    Forecast,
    IntArray,
    _EmpiricalLaw,
    _slot_of_hour,
    resample_hourly,
)


@dataclass(frozen=True, eq=False)
class SeasonalNaiveModel:
    """Last week's rates, repeated; ``forecast(start, hours)`` as for ``DemandModel``.

    ``history_hours`` counts the observed hours, ``history_end`` is the end of the last one
    (epoch seconds).
    """

    history_hours: int
    history_end: int
    _hours: IntArray = field(repr=False)
    _rates: FloatArray = field(repr=False)
    _offset: float = field(repr=False)
    _law: _EmpiricalLaw = field(repr=False)

    def forecast(self, start: float, hours: int) -> Forecast:
        """Forecast ``hours`` hourly buckets from the hour containing ``start`` (epoch s).

        The mean is the reference hour's rate itself, the method's point forecast; an hour
        whose slot the history never saw takes the history's median rate, a full week of
        error wide.
        """
        first = math.floor(_checks.finite("start", float(start)) / HOUR_S)
        count = _checks.positive_int("hours", int(hours))
        wanted = np.arange(first, first + count, dtype=np.int64)
        last = int(self._hours[-1])
        # The latest hour of the same slot no later than the history's end, then further back
        # until one was observed.
        weeks_back = np.maximum(-(-(wanted - last) // HOURS_PER_WEEK), 1)
        reference = np.full(count, np.nan)
        back = np.zeros(count, dtype=np.int64)
        pending = np.ones(count, dtype=bool)
        oldest = int(self._hours[0])
        while np.any(pending):
            ref_hour = wanted - weeks_back * HOURS_PER_WEEK
            pending &= ref_hour >= oldest
            at = np.searchsorted(self._hours, ref_hour)
            found = pending & (at < self._hours.size)
            found[found] = self._hours[at[found]] == ref_hour[found]
            reference[found] = self._rates[at[found]]
            back[found] = weeks_back[found]
            pending &= ~found
            weeks_back = weeks_back + 1
        unseen = np.isnan(reference)
        reference[unseen] = float(np.median(self._rates))
        back[unseen] = 1
        center = np.log(reference + self._offset)
        return Forecast(
            timestamps=wanted * HOUR_S,
            mean=reference,
            _center=center,
            _scale=np.sqrt(back.astype(np.float64)),
            _offset=self._offset,
            _law=self._law,
        )


def fit_seasonal_naive(timestamps: npt.ArrayLike, values: npt.ArrayLike) -> SeasonalNaiveModel:
    """The seasonal-naive model of a rate history (epoch seconds, requests/s).

    Needs ``MIN_HISTORY_HOURS`` observed hours and at least one hour observed in two
    consecutive weeks, from which the band is taken; ``PlannerInputError`` otherwise.
    """
    hour_starts, rates = resample_hourly(timestamps, values)
    epoch_hours = hour_starts // HOUR_S
    if epoch_hours.size < MIN_HISTORY_HOURS:
        raise PlannerInputError(
            "values",
            f"history has {epoch_hours.size} hours; the seasonal-naive band needs "
            f"{MIN_HISTORY_HOURS}",
        )
    mean_rate = float(np.mean(rates))
    offset = _OFFSET_FRACTION * mean_rate if mean_rate > 0 else 1.0
    logs = np.log(rates + offset)
    previous = np.searchsorted(epoch_hours, epoch_hours - HOURS_PER_WEEK)
    paired = (previous < epoch_hours.size) & (
        epoch_hours[np.minimum(previous, epoch_hours.size - 1)] == epoch_hours - HOURS_PER_WEEK
    )
    if not np.any(paired):
        raise PlannerInputError("values", "no hour is observed in two consecutive weeks")
    errors = np.sort(logs[paired] - logs[previous[paired]])
    return SeasonalNaiveModel(
        history_hours=int(epoch_hours.size),
        history_end=int(hour_starts[-1]) + HOUR_S,
        _hours=epoch_hours,
        _rates=rates,
        _offset=offset,
        _law=_EmpiricalLaw(np.asarray(errors, dtype=np.float64)),
    )


# -- Holt-Winters -------------------------------------------------------------------------------

# The (α, β, γ) candidates: β and γ on the error scale (ETS form), so β ≤ α and γ ≤ 1 − α are
# the admissible ones (the classic form's β/α and γ/(1 − α) in [0, 1]).
_HW_ALPHAS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
_HW_BETAS = (0.0, 0.001, 0.01)
_HW_GAMMAS = (0.0, 0.05, 0.1, 0.2, 0.3)
HOLT_WINTERS_GRID: tuple[tuple[float, float, float], ...] = tuple(
    (a, b, g) for a in _HW_ALPHAS for b in _HW_BETAS for g in _HW_GAMMAS if b <= a and g <= 1 - a
)


@dataclass(frozen=True, eq=False)
class HoltWintersModel:
    """Holt-Winters state at the end of a history; ``forecast(start, hours)`` as for
    ``DemandModel``.

    ``alpha``, ``beta`` and ``gamma`` are the smoothing constants fitted (error-correction
    form), ``history_hours`` counts the observed hours and ``history_end`` is the end of the
    last one (epoch seconds).
    """

    alpha: float
    beta: float
    gamma: float
    history_hours: int
    history_end: int
    _last_hour: int = field(repr=False)
    _level: float = field(repr=False)
    _trend: float = field(repr=False)
    _season: FloatArray = field(repr=False)
    _offset: float = field(repr=False)
    _law: _EmpiricalLaw = field(repr=False)

    def forecast(self, start: float, hours: int) -> Forecast:
        """Forecast ``hours`` hourly buckets from the hour containing ``start`` (epoch s).

        Hour h after the history's last hour is ℓ + h·b + s[slot]; an hour at or before the
        last one is forecast as the next (h = 1).
        """
        first = math.floor(_checks.finite("start", float(start)) / HOUR_S)
        count = _checks.positive_int("hours", int(hours))
        wanted = np.arange(first, first + count, dtype=np.int64)
        ahead = np.maximum(wanted - self._last_hour, 1)
        center = self._level + ahead * self._trend + self._season[_slot_of_hour(wanted)]
        scale = np.sqrt(_holt_winters_variance(ahead, self.alpha, self.beta, self.gamma))
        mean = np.maximum(np.exp(center) * self._law.mean_exp(scale) - self._offset, 0.0)
        return Forecast(
            timestamps=wanted * HOUR_S,
            mean=mean,
            _center=center,
            _scale=scale,
            _offset=self._offset,
            _law=self._law,
        )


def _holt_winters_variance(ahead: IntArray, alpha: float, beta: float, gamma: float) -> FloatArray:
    """k_h² = 1 + Σ_{j=1}^{h−1} (α + j·β + γ·1[j a multiple of 168])² for each h in ``ahead``."""
    longest = int(np.max(ahead))
    j = np.arange(1, longest, dtype=np.float64)
    c = alpha + j * beta + gamma * (j % HOURS_PER_WEEK == 0)
    cumulative = np.concatenate(([0.0], np.cumsum(c**2)))
    return np.asarray(1.0 + cumulative[ahead - 1], dtype=np.float64)


def fit_holt_winters(timestamps: npt.ArrayLike, values: npt.ArrayLike) -> HoltWintersModel:
    """The Holt-Winters model of a rate history (epoch seconds, requests/s).

    Needs ``MIN_HISTORY_HOURS`` observed hours (two weeks start the level, trend and seasonal
    terms); ``PlannerInputError`` otherwise. The smoothing constants are the point of
    ``HOLT_WINTERS_GRID`` with the least one-step squared error after the first week.
    """
    hour_starts, rates = resample_hourly(timestamps, values)
    epoch_hours = hour_starts // HOUR_S
    if epoch_hours.size < MIN_HISTORY_HOURS:
        raise PlannerInputError(
            "values",
            f"history has {epoch_hours.size} hours; Holt-Winters needs {MIN_HISTORY_HOURS}",
        )
    mean_rate = float(np.mean(rates))
    offset = _OFFSET_FRACTION * mean_rate if mean_rate > 0 else 1.0
    first, last = int(epoch_hours[0]), int(epoch_hours[-1])
    # The series on the full hour grid, NaN in the gaps.
    z = np.full(last - first + 1, np.nan)
    z[epoch_hours - first] = np.log(rates + offset)
    slots = _slot_of_hour(np.arange(first, last + 1, dtype=np.int64))

    # Initial state from the first two weeks of the grid (observed hours only).
    weeks = [z[w * HOURS_PER_WEEK : (w + 1) * HOURS_PER_WEEK] for w in range(2)]
    means = [float(np.nanmean(w)) if np.any(np.isfinite(w)) else math.nan for w in weeks]
    overall = float(np.nanmean(z))
    means = [m if math.isfinite(m) else overall for m in means]
    trend0 = (means[1] - means[0]) / HOURS_PER_WEEK
    # The line through the two weeks' means, at each of the first two weeks' hours.
    hours = np.arange(min(2 * HOURS_PER_WEEK, z.size), dtype=np.float64)
    line = means[0] + (hours - (HOURS_PER_WEEK - 1) / 2) * trend0
    deviation = z[: hours.size] - line
    season0 = np.zeros(HOURS_PER_WEEK)
    seen = np.isfinite(deviation)
    sums = np.bincount(slots[: hours.size][seen], deviation[seen], minlength=HOURS_PER_WEEK)
    counts = np.bincount(slots[: hours.size][seen], minlength=HOURS_PER_WEEK)
    np.divide(sums, counts, out=season0, where=counts > 0)
    season0 -= np.mean(season0[counts > 0]) if np.any(counts > 0) else 0.0
    level0 = means[0] - (HOURS_PER_WEEK - 1) / 2 * trend0 - trend0  # one hour before the grid

    grid = np.array(HOLT_WINTERS_GRID, dtype=np.float64)
    alpha, beta, gamma = grid[:, 0], grid[:, 1], grid[:, 2]
    level = np.full(grid.shape[0], level0)
    trend = np.full(grid.shape[0], trend0)
    season = np.tile(season0, (grid.shape[0], 1))
    sse = np.zeros(grid.shape[0])
    errors = np.full((grid.shape[0], z.size), np.nan)
    for i in range(z.size):
        k = int(slots[i])
        predicted = level + trend + season[:, k]
        if math.isnan(z[i]):
            level = level + trend
            continue
        err = z[i] - predicted
        errors[:, i] = err
        if i >= HOURS_PER_WEEK:
            sse += err * err
        level = predicted - season[:, k] + alpha * err
        trend = trend + beta * err
        season[:, k] += gamma * err
    best = int(np.argmin(sse))
    tail = errors[best, HOURS_PER_WEEK:]
    sample = np.sort(tail[np.isfinite(tail)])
    return HoltWintersModel(
        alpha=float(alpha[best]),
        beta=float(beta[best]),
        gamma=float(gamma[best]),
        history_hours=int(epoch_hours.size),
        history_end=int(hour_starts[-1]) + HOUR_S,
        _last_hour=last,
        _level=float(level[best]),
        _trend=float(trend[best]),
        _season=np.asarray(season[best], dtype=np.float64),
        _offset=offset,
        _law=_EmpiricalLaw(np.asarray(sample, dtype=np.float64)),
    )
