"""planner.forecast: demand forecasts with a prediction band, their backtest, and finance.

- ``demand``: fit hour-of-week seasonality and a robust trend to a rate history and forecast
  hourly demand with quantiles (the re-planner sizes for a quantile, not the mean).
- ``backtest``: rolling-origin accuracy and band coverage of a demand model.
- ``baseline``: the seasonal-naive forecast (last week again) and Holt-Winters (an online
  level, trend and season), the yardsticks of every backtest.
- ``finance``: replica-hours, GPU-hours and cost by month, region and GPU type, with the
  reserved/on-demand split that minimises cost; peak tokens per minute by month for quotas.
"""

from planner.forecast.backtest import BacktestReport, Forecaster, backtest
from planner.forecast.baseline import (
    HOLT_WINTERS_GRID,
    HoltWintersModel,
    SeasonalNaiveModel,
    fit_holt_winters,
    fit_seasonal_naive,
)
from planner.forecast.demand import (
    HOURS_PER_WEEK,
    MAX_LEVEL_SHIFTS,
    MIN_HISTORY_HOURS,
    MIN_RECENT_RISE_HOURS,
    MIN_SHIFT_HOURS,
    RECENT_RISE_Z_SCORE,
    SHIFT_Z_SCORE,
    DemandModel,
    Forecast,
    LevelShift,
    fit_demand,
    hour_of_week,
    resample_hourly,
)
from planner.forecast.finance import (
    Commitment,
    CostLine,
    FinanceProjection,
    GpuPrice,
    MonthlyTpm,
    PoolDemand,
    Spend,
    optimal_commitment,
    project_costs,
    replicas_from_forecast,
    reservation_cost,
    tokens_per_minute_by_month,
)

__all__ = [
    "HOLT_WINTERS_GRID",
    "HOURS_PER_WEEK",
    "MAX_LEVEL_SHIFTS",
    "MIN_HISTORY_HOURS",
    "MIN_RECENT_RISE_HOURS",
    "MIN_SHIFT_HOURS",
    "RECENT_RISE_Z_SCORE",
    "SHIFT_Z_SCORE",
    "BacktestReport",
    "Commitment",
    "CostLine",
    "DemandModel",
    "FinanceProjection",
    "Forecast",
    "Forecaster",
    "GpuPrice",
    "HoltWintersModel",
    "LevelShift",
    "MonthlyTpm",
    "PoolDemand",
    "SeasonalNaiveModel",
    "Spend",
    "backtest",
    "fit_demand",
    "fit_holt_winters",
    "fit_seasonal_naive",
    "hour_of_week",
    "optimal_commitment",
    "project_costs",
    "replicas_from_forecast",
    "resample_hourly",
    "reservation_cost",
    "tokens_per_minute_by_month",
]
