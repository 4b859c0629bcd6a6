"""Seasonal-naive forecast: next week is this week again, the reference a model must beat.

The point forecast of hour t is the rate observed in the same hour of the latest week the
history holds it (Hyndman & Athanasopoulos, *Forecasting: Principles and Practice*, 3rd ed.,
§5.2, "seasonal naïve method", with a season of 168 hours). The band comes from the
history's own week-over-week errors: e = log(y_t + c) − log(y_{t−168} + c) over every hour
observed both weeks, and quantile q of an hour whose reference lies m weeks back is
e^(log(ref + c) + √m · Q_e(q)) − c, the seasonal random walk's widening (§5.5).

It has no trend, no shrinkage and no notion of a step, which is what makes it the honest
yardstick: a demand model that does worse than it on a history has misread that history.
Used by the backtests (``planner.forecast.backtest``) to put every accuracy figure beside
it; the re-planner forecasts with ``planner.forecast.demand``.

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
