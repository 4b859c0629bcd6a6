"""planner.forecast: demand forecasts with a prediction band, their backtest, and finance.

- ``demand``: fit hour-of-week seasonality and a robust trend to a rate history and forecast
  hourly demand with quantiles (the re-planner sizes for a quantile, not the mean).
- ``backtest``: rolling-origin accuracy and band coverage of a demand model.
- ``finance``: replica-hours, GPU-hours and cost by month, region and GPU type, with the
  reserved/on-demand split that minimises cost; peak tokens per minute by month for quotas.
"""

from planner.forecast.backtest import BacktestReport, backtest
from planner.forecast.demand import (
    HOURS_PER_WEEK,
    MIN_HISTORY_HOURS,
    DemandModel,
    Forecast,
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
    "HOURS_PER_WEEK",
    "MIN_HISTORY_HOURS",
    "BacktestReport",
    "Commitment",
    "CostLine",
    "DemandModel",
    "FinanceProjection",
    "Forecast",
    "GpuPrice",
    "MonthlyTpm",
    "PoolDemand",
    "Spend",
    "backtest",
    "fit_demand",
    "hour_of_week",
    "optimal_commitment",
    "project_costs",
    "replicas_from_forecast",
    "resample_hourly",
    "reservation_cost",
    "tokens_per_minute_by_month",
]
