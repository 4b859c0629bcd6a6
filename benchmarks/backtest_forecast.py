"""Backtest: the demand forecast beside Holt-Winters and seasonal-naive, on growth, steps, rises.

Writes the tables of ``docs/forecasting.md`` ("Measured accuracy and calibration") and of
``docs/benchmarks.md`` ("Forecast backtest"). Every series is synthetic and seeded, so a run
reproduces the tables exactly:

- the weekly shape of the tests (a daily wave of ±0.5 in log, a weekend dip of 0.4), 100 req/s
  at the start, lognormal hour-to-hour noise σ = 0.1 (independent, or AR(1) with ρ = 0.9);
- **growth**: +2% a week, 12 weeks;
- **step**: no growth, the level steps up 50% at the start of week 6 (hour 1,008), 12 weeks.

Rows (``--tenants`` seeds each, mean and min–max over them):

- ``all origins``: rolling origins every week from week 2, each forecasting the next week
  (``planner.forecast.backtest`` defaults);
- ``week after the step``: one origin, a week after the step (the model has seen one week at
  the new level) forecasting the next;
- ``4 weeks after``: one origin four weeks after the step, its bias one and four weeks out
  (mean forecast over the noise-free truth's mean, minus 1), and whether exactly one step was
  found within three hours of the true one;
- false alarms: the share of no-step histories (2–12 weeks) in which ``fit_demand`` finds a
  level shift;
- **the 48 h after a rise** (printed first): no growth, the level × 1.6 from hour 1,042 (a
  Tuesday 10:00 UTC in week 6); every hour of the 48 after it is an origin, forecasting 1 h,
  24 h and 168 h ahead; MAPE, 80% band coverage and MAPE over Holt-Winters', median
  (min–max) over ``--rise-tenants`` seeds, for ``fit_demand``, ``fit_demand`` with
  ``follow_rises=False``, ``fit_holt_winters`` and ``fit_seasonal_naive``; and the share of
  no-step histories in which a recent rise is followed.

Models: ``fit_demand`` as the re-planner runs it, the same with the level-shift search off
(``max_level_shifts=0``: the model before level shifts), and ``fit_seasonal_naive``. Each is
read at three bands: p10–p90 (80%), p5–p95 (90%) and p1–p99 (98%).

Run: ``.venv/bin/python benchmarks/backtest_forecast.py`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

# Run as a script from anywhere: make the repository importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.forecast import (
    HOURS_PER_WEEK,
    MAX_LEVEL_SHIFTS,
    Forecaster,
    backtest,
    fit_demand,
    fit_holt_winters,
    fit_seasonal_naive,
    hour_of_week,
)

FloatArray = npt.NDArray[np.float64]
Fit = Callable[[FloatArray, FloatArray], Forecaster]

MONDAY = 1_704_067_200  # 2024-01-01 00:00 UTC, a Monday
HOUR = 3600
LEVEL = 100.0
SIGMA = 0.1
GROWTH = 0.02
STEP = 1.5
STEP_WEEK = 6
WEEKS = 12
BANDS = ((0.1, 0.9), (0.05, 0.95), (0.01, 0.99))
MODELS: tuple[tuple[str, Fit], ...] = (
    ("Headroom", fit_demand),
    ("without level shifts", functools.partial(fit_demand, max_level_shifts=0)),
    ("seasonal-naive", fit_seasonal_naive),
)
# A step found this close to the true one counts as found where it is.
FOUND_WITHIN_HOURS = 3
# The rise: +60% on a Tuesday at 10:00 UTC of week 6, forecast from every hour of the 48
# after it, one hour, one day and one week ahead.
RISE = 1.6
RISE_AT = STEP_WEEK * HOURS_PER_WEEK + 34
RISE_WINDOW_HOURS = 48
RISE_HORIZONS = (1, 24, HOURS_PER_WEEK)
RISE_MODELS: tuple[tuple[str, Fit], ...] = (
    ("Headroom", fit_demand),
    ("Headroom, confirmed steps only", functools.partial(fit_demand, follow_rises=False)),
    ("Holt-Winters", fit_holt_winters),
    ("seasonal-naive", fit_seasonal_naive),
)


def log_season() -> FloatArray:
    slot = np.arange(HOURS_PER_WEEK)
    hour, day = slot % 24, slot // 24
    shape = 0.5 * np.sin(2 * np.pi * (hour - 8) / 24) - 0.4 * (day >= 5)
    return np.asarray(shape - shape.mean(), dtype=np.float64)


def noise(rng: np.random.Generator, size: int, rho: float) -> FloatArray:
    """Normal(0, σ) noise, AR(1) with lag-1 correlation ``rho`` (stationary from the start)."""
    shocks = rng.normal(0.0, SIGMA, size)
    if rho == 0:
        return shocks
    out = np.empty(size)
    out[0] = shocks[0]
    innovation = math.sqrt(1.0 - rho * rho)
    for i in range(1, size):
        out[i] = rho * out[i - 1] + innovation * shocks[i]
    return out


@dataclass(frozen=True)
class Series:
    timestamps: FloatArray
    rates: FloatArray
    truth: FloatArray  # the noise-free mean rate of each hour


def make_series(
    seed: int,
    *,
    weeks: int = WEEKS,
    growth: float = 0.0,
    step: float = 1.0,
    rho: float = 0.0,
    step_at: int = STEP_WEEK * HOURS_PER_WEEK,
) -> Series:
    rng = np.random.default_rng(seed)
    hours = np.arange(weeks * HOURS_PER_WEEK)
    timestamps = (MONDAY + hours * HOUR).astype(np.float64)
    log_mean = (
        math.log(LEVEL)
        + math.log1p(growth) * hours / HOURS_PER_WEEK
        + math.log(step) * (hours >= step_at)
        + log_season()[hour_of_week(timestamps)]
    )
    # The noise-free mean: E[e^ε] = e^(σ²/2) for the lognormal noise.
    truth = np.exp(log_mean + SIGMA**2 / 2)
    return Series(timestamps, np.exp(log_mean + noise(rng, hours.size, rho)), truth)


@dataclass(frozen=True)
class Row:
    mape: list[float]
    coverage: dict[tuple[float, float], list[float]]


def backtest_row(
    fit: Fit, histories: Sequence[Series], *, min_train_hours: int, weeks: int | None = None
) -> Row:
    """MAPE and coverage at each band, one value per history."""
    mape: list[float] = []
    coverage: dict[tuple[float, float], list[float]] = {band: [] for band in BANDS}
    for history in histories:
        end = history.timestamps.size if weeks is None else weeks * HOURS_PER_WEEK
        ts, ys = history.timestamps[:end], history.rates[:end]
        for i, band in enumerate(BANDS):
            report = backtest(ts, ys, min_train_hours=min_train_hours, band=band, fit=fit)
            if i == 0:
                mape.append(report.mape)
            coverage[band].append(report.coverage)
    return Row(mape, coverage)


def spread(values: Sequence[float], percent: bool = False) -> str:
    scale, unit = (100.0, "%") if percent else (1.0, "")
    digits = 1 if percent else 3
    lo, hi, mid = min(values) * scale, max(values) * scale, float(np.mean(values)) * scale
    return f"{mid:.{digits}f}{unit} ({lo:.{digits}f}–{hi:.{digits}f})"


def accuracy_table(tenants: int) -> list[str]:
    seeds = range(tenants)
    cases: list[tuple[str, str, list[Series], int, int | None]] = [
        (
            "growth +2%/wk",
            "all origins",
            [make_series(seed, growth=GROWTH) for seed in seeds],
            2 * HOURS_PER_WEEK,
            None,
        ),
        (
            "growth +2%/wk, AR(1) ρ = 0.9",
            "all origins",
            [make_series(seed, growth=GROWTH, rho=0.9) for seed in seeds],
            2 * HOURS_PER_WEEK,
            None,
        ),
    ]
    steps = [make_series(seed, step=STEP) for seed in seeds]
    cases += [
        ("step +50%", "all origins", steps, 2 * HOURS_PER_WEEK, None),
        (
            "step +50%",
            "week after the step",
            steps,
            (STEP_WEEK + 1) * HOURS_PER_WEEK,
            STEP_WEEK + 2,
        ),
    ]
    lines = [
        "| series | origins | model | MAPE | 80% band | 90% band | 98% band |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, origins, histories, min_train, weeks in cases:
        for model, fit in MODELS:
            row = backtest_row(fit, histories, min_train_hours=min_train, weeks=weeks)
            cells = [spread(row.coverage[band]) for band in BANDS]
            lines.append(
                f"| {name} | {origins} | {model} | {spread(row.mape, percent=True)} | "
                + " | ".join(cells)
                + " |"
            )
    return lines


def four_weeks_after(tenants: int) -> list[str]:
    """Growth read and bias one and four weeks out, from an origin four weeks after the step."""
    lines = [
        "| model | weekly growth read | bias 1 week out | bias 4 weeks out | step found |",
        "| --- | --- | --- | --- | --- |",
    ]
    origin = (STEP_WEEK + 4) * HOURS_PER_WEEK
    step_at = MONDAY + STEP_WEEK * HOURS_PER_WEEK * HOUR
    for label, shifts in (("without level shifts", 0), ("Headroom", MAX_LEVEL_SHIFTS)):
        growth, near, far, factors = [], [], [], []
        for seed in range(tenants):
            history = make_series(seed, weeks=STEP_WEEK + 8, step=STEP)
            model = fit_demand(
                history.timestamps[:origin], history.rates[:origin], max_level_shifts=shifts
            )
            forecast = model.forecast(history.timestamps[origin], 4 * HOURS_PER_WEEK)
            truth = history.truth[origin : origin + 4 * HOURS_PER_WEEK]
            weekly = forecast.mean.reshape(4, -1).mean(axis=1) / truth.reshape(4, -1).mean(axis=1)
            growth.append(model.weekly_growth)
            near.append(float(weekly[0]) - 1.0)
            far.append(float(weekly[3]) - 1.0)
            shifts_at = [shift.at for shift in model.level_shifts]
            if len(shifts_at) == 1 and abs(shifts_at[0] - step_at) <= FOUND_WITHIN_HOURS * HOUR:
                factors.append(model.level_shifts[0].factor)
        found = (
            f"{len(factors)}/{tenants} within {FOUND_WITHIN_HOURS} h of hour "
            f"{STEP_WEEK * HOURS_PER_WEEK:,}"
        )
        if factors:
            found += f", ×{spread(factors)}"
        lines.append(
            f"| {label} | {spread(growth, percent=True)} | {spread(near, percent=True)} | "
            f"{spread(far, percent=True)} | {found} |"
        )
    return lines


def false_alarms(tenants: int) -> list[str]:
    lines = [
        "| noise | 2 weeks | 4 weeks | 8 weeks | 12 weeks |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, rho in (("independent", 0.0), ("AR(1) ρ = 0.9", 0.9)):
        cells = []
        for weeks in (2, 4, 8, 12):
            hits = sum(
                bool(
                    fit_demand(
                        *_history(make_series(10_000 + seed, weeks=weeks, growth=GROWTH, rho=rho))
                    ).level_shifts
                )
                for seed in range(tenants)
            )
            cells.append(f"{hits / tenants:.1%}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def after_a_rise(history: Series, fit: Fit) -> dict[int, tuple[float, float]]:
    """(MAPE, 80% band coverage) of ``fit``'s forecasts from each hour of the
    ``RISE_WINDOW_HOURS`` after the rise, per horizon, over every hour forecast.

    The same figures as ``backtest(..., step_hours=1, min_train_hours=RISE_AT)`` on the series
    cut where the last origin's horizon ends, but each origin is fitted once for all horizons.
    """
    pct: dict[int, list[FloatArray]] = {h: [] for h in RISE_HORIZONS}
    hits: dict[int, list[FloatArray]] = {h: [] for h in RISE_HORIZONS}
    longest = max(RISE_HORIZONS)
    for origin in range(RISE_AT, RISE_AT + RISE_WINDOW_HOURS):
        model = fit(history.timestamps[:origin], history.rates[:origin])
        forecast = model.forecast(history.timestamps[origin], longest)
        actual = history.rates[origin : origin + longest]
        lo, hi = forecast.quantile(0.1), forecast.quantile(0.9)
        for h in RISE_HORIZONS:
            pct[h].append(np.abs(forecast.mean[:h] - actual[:h]) / actual[:h])
            hits[h].append(((actual[:h] >= lo[:h]) & (actual[:h] <= hi[:h])).astype(float))
    return {
        h: (float(np.mean(np.concatenate(pct[h]))), float(np.mean(np.concatenate(hits[h]))))
        for h in RISE_HORIZONS
    }


def median_spread(values: Sequence[float], percent: bool = False) -> str:
    scale, unit = (100.0, "%") if percent else (1.0, "")
    digits = 1 if percent else 2
    lo, hi, mid = min(values) * scale, max(values) * scale, float(np.median(values)) * scale
    return f"{mid:.{digits}f}{unit} ({lo:.{digits}f}–{hi:.{digits}f})"


def rise_table(tenants: int) -> list[str]:
    """The 48 hours after a +60% rise: MAPE, 80% coverage and MAPE over Holt-Winters'."""
    lines = [
        "| noise | horizon | model | MAPE | 80% band | MAPE / Holt-Winters' |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    weeks = -(-(RISE_AT + RISE_WINDOW_HOURS + max(RISE_HORIZONS)) // HOURS_PER_WEEK)
    for label, rho in (("independent", 0.0), ("AR(1) ρ = 0.9", 0.9)):
        histories = [
            make_series(seed, weeks=weeks, step=RISE, step_at=RISE_AT, rho=rho)
            for seed in range(tenants)
        ]
        results = {name: [after_a_rise(h, fit) for h in histories] for name, fit in RISE_MODELS}
        for h in RISE_HORIZONS:
            reference = [r[h][0] for r in results["Holt-Winters"]]
            for name, _ in RISE_MODELS:
                mape = [r[h][0] for r in results[name]]
                coverage = [r[h][1] for r in results[name]]
                ratio = [m / ref for m, ref in zip(mape, reference, strict=True)]
                lines.append(
                    f"| {label} | {h} h | {name} | {median_spread(mape, percent=True)} | "
                    f"{median_spread(coverage)} | {median_spread(ratio)} |"
                )
    return lines


def recent_rise_false_alarms(tenants: int) -> list[str]:
    lines = [
        "| noise | 2 weeks | 4 weeks | 8 weeks | 12 weeks |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, rho in (("independent", 0.0), ("AR(1) ρ = 0.9", 0.9)):
        cells = []
        for weeks in (2, 4, 8, 12):
            hits = sum(
                fit_demand(
                    *_history(make_series(20_000 + seed, weeks=weeks, growth=GROWTH, rho=rho))
                ).recent_rise
                is not None
                for seed in range(tenants)
            )
            cells.append(f"{hits / tenants:.1%}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _history(series: Series) -> tuple[FloatArray, FloatArray]:
    return series.timestamps, series.rates


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tenants", type=int, default=20, help="seeded series per row (default 20)"
    )
    parser.add_argument(
        "--null-tenants",
        type=int,
        default=200,
        help="no-step series per false-alarm cell (default 200)",
    )
    parser.add_argument(
        "--rise-tenants",
        type=int,
        default=10,
        help="seeded series per row of the rise table (default 10)",
    )
    parser.add_argument(
        "--only-rise",
        action="store_true",
        help="print only the rise tables (the 48 h after a +60%% step, and false alarms)",
    )
    args = parser.parse_args(argv)
    if args.tenants < 1 or args.null_tenants < 1 or args.rise_tenants < 1:
        parser.error("--tenants, --null-tenants and --rise-tenants must be at least 1")
    print(
        f"The {RISE_WINDOW_HOURS} h after a +{RISE - 1:.0%} rise (hour {RISE_AT:,}), forecast "
        f"from each of its hours; median (min–max) over {args.rise_tenants} seeded tenants:\n"
    )
    print("\n".join(rise_table(args.rise_tenants)))
    print(
        f"\nHistories without a step in which a recent rise is followed, "
        f"{args.null_tenants} each:\n"
    )
    print("\n".join(recent_rise_false_alarms(args.null_tenants)))
    if args.only_rise:
        return 0
    print()
    print(f"Accuracy and band coverage, {args.tenants} seeded tenants per row:\n")
    print("\n".join(accuracy_table(args.tenants)))
    print(f"\nFour weeks after the step, {args.tenants} seeded tenants:\n")
    print("\n".join(four_weeks_after(args.tenants)))
    print(
        f"\nHistories without a step in which a level shift is found, {args.null_tenants} each:\n"
    )
    print("\n".join(false_alarms(args.null_tenants)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
