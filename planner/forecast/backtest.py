"""Rolling-origin backtest of the demand forecast: fit on the past, forecast, compare.

At each origin the model is fitted on the history before it and forecasts the next
``horizon_hours``; the forecast is compared with the hours actually observed in that window
(gaps are skipped). Origins start once the training window holds ``min_train_hours`` observed
hours and advance by ``step_hours``, so every forecast is out of sample.

Reported errors, over all compared hours of all origins:

- MAE, in the rate's unit (requests/s), of the forecast mean;
- MAPE, mean |F − A| / A over hours with A > 0 (zero actuals have no percentage error);
- sMAPE, mean 2|F − A| / (|F| + |A|), 0 where both are zero;
- band coverage: the share of actuals inside [quantile(q_lo), quantile(q_hi)]. For a calibrated
  band it is close to q_hi − q_lo (0.8 for the default p10–p90); well below means the band is
  too narrow to size on, well above that it buys capacity for nothing.

Coverage is also reported per forecast day, to show whether the band widens fast enough with
the horizon.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from planner.capacity import _checks
from planner.errors import PlannerInputError
from planner.forecast.demand import (
    HOUR_S,
    HOURS_PER_WEEK,
    MIN_HISTORY_HOURS,
    FloatArray,
    Forecast,
    fit_demand,
    resample_hourly,
)

_HOURS_PER_DAY = 24


class Forecaster(Protocol):
    """A fitted model: ``DemandModel``, or the ``SeasonalNaiveModel`` baseline."""

    def forecast(self, start: float, hours: int) -> Forecast: ...


@dataclass(frozen=True)
class BacktestReport:
    """Out-of-sample accuracy of a demand model over rolling origins.

    ``mape``, ``smape`` and coverages are fractions (0.05 = 5%); ``mae`` is in the rate's unit.
    ``coverage_by_day[d]`` is the coverage over hours d × 24 … d × 24 + 23 after each origin.
    ``band`` is the (q_lo, q_hi) pair whose nominal coverage is q_hi − q_lo.
    """

    origins: int
    points: int
    horizon_hours: int
    mae: float
    mape: float
    smape: float
    band: tuple[float, float]
    coverage: float
    coverage_by_day: tuple[float, ...]

    @property
    def nominal_coverage(self) -> float:
        """q_hi − q_lo: the coverage a calibrated band would have."""
        return self.band[1] - self.band[0]


def backtest(
    timestamps: npt.ArrayLike,
    values: npt.ArrayLike,
    *,
    horizon_hours: int = HOURS_PER_WEEK,
    step_hours: int = HOURS_PER_WEEK,
    min_train_hours: int = MIN_HISTORY_HOURS,
    band: tuple[float, float] = (0.1, 0.9),
    fit: Callable[[FloatArray, FloatArray], Forecaster] = fit_demand,
) -> BacktestReport:
    """Rolling-origin evaluation of ``fit`` over a rate history.

    ``timestamps`` (UTC epoch seconds, strictly increasing) and ``values`` (requests/s) as for
    ``fit_demand``; they are averaged to hours first. ``fit`` maps an hourly history to a model
    (``functools.partial(fit_demand, damping=0.9)`` to test options, ``fit_seasonal_naive``
    for the baseline every figure should be read beside); the default needs
    ``min_train_hours`` to be at least its two weeks. Raises ``PlannerInputError`` when the
    history leaves no origin with a full horizon after the first training window.
    """
    hour_starts, rates = resample_hourly(timestamps, values)
    horizon = _checks.positive_int("horizon_hours", horizon_hours)
    step = _checks.positive_int("step_hours", step_hours)
    min_train = _checks.positive_int("min_train_hours", min_train_hours)
    q_lo = _checks.quantile_level("band", band[0])
    q_hi = _checks.quantile_level("band", band[1])
    if not q_lo < q_hi:
        raise PlannerInputError("band", f"needs q_lo < q_hi, got {band!r}")

    epoch_hours = hour_starts // HOUR_S
    days = -(-horizon // _HOURS_PER_DAY)
    abs_err: list[FloatArray] = []
    pct_err: list[FloatArray] = []
    sym_err: list[FloatArray] = []
    inside: list[FloatArray] = []
    day_hits = np.zeros(days, dtype=np.float64)
    day_points = np.zeros(days, dtype=np.float64)
    origins = 0

    if epoch_hours.size > min_train:
        origin = int(epoch_hours[min_train - 1]) + 1
        last = int(epoch_hours[-1])
        while origin + horizon - 1 <= last:
            train = epoch_hours < origin
            model = fit(hour_starts[train].astype(np.float64), rates[train])
            forecast = model.forecast(float(origin * HOUR_S), horizon)
            window = (epoch_hours >= origin) & (epoch_hours < origin + horizon)
            offsets = epoch_hours[window] - origin
            actual = rates[window]
            mean = forecast.mean[offsets]
            lo = forecast.quantile(q_lo)[offsets]
            hi = forecast.quantile(q_hi)[offsets]

            err = np.abs(mean - actual)
            abs_err.append(err)
            pct_err.append(err[actual > 0] / actual[actual > 0])
            scale = np.abs(mean) + np.abs(actual)
            sym_err.append(np.divide(2.0 * err, scale, out=np.zeros_like(err), where=scale > 0))
            hit = ((actual >= lo) & (actual <= hi)).astype(np.float64)
            inside.append(hit)
            day = offsets // _HOURS_PER_DAY
            day_hits += np.bincount(day, hit, minlength=days)
            day_points += np.bincount(day, minlength=days)
            origins += 1
            origin += step

    if origins == 0 or not any(e.size for e in abs_err):
        raise PlannerInputError(
            "values",
            f"history of {epoch_hours.size} hours leaves no backtest origin with data: it needs "
            f"{min_train} training hours and then a full {horizon}-hour horizon",
        )
    errors = np.concatenate(abs_err)
    pct = np.concatenate(pct_err)
    return BacktestReport(
        origins=origins,
        points=int(errors.size),
        horizon_hours=horizon,
        mae=float(np.mean(errors)),
        mape=float(np.mean(pct)) if pct.size else float("nan"),
        smape=float(np.mean(np.concatenate(sym_err))),
        band=(q_lo, q_hi),
        coverage=float(np.mean(np.concatenate(inside))),
        coverage_by_day=tuple(
            float(h / p) if p > 0 else float("nan")
            for h, p in zip(day_hits, day_points, strict=True)
        ),
    )
