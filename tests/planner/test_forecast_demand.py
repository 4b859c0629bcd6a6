"""Demand forecast and backtest on synthetic series with a known weekly shape, trend and noise.

The series are y_t = 100 · 1.02^(weeks) · S[slot] · e^ε with ε ~ Normal(0, σ = 0.1) (seeded),
S a daily wave of ±0.5 in log plus a weekend dip of 0.4, so every tolerance below is stated
against the known truth and the standard error the noise implies.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlannerInputError
from planner.forecast import (
    HOURS_PER_WEEK,
    backtest,
    fit_demand,
    hour_of_week,
    resample_hourly,
)

FloatArray = npt.NDArray[np.float64]

MONDAY = 1_704_067_200  # 2024-01-01 00:00 UTC, a Monday
HOUR = 3600
GROWTH = 0.02  # per week
SIGMA = 0.1


def true_log_season() -> FloatArray:
    slot = np.arange(HOURS_PER_WEEK)
    hour, day = slot % 24, slot // 24
    shape = 0.5 * np.sin(2 * np.pi * (hour - 8) / 24) - 0.4 * (day >= 5)
    return np.asarray(shape - shape.mean(), dtype=np.float64)


def series(
    seed: int, weeks: int, sigma: float = SIGMA, start: int = MONDAY
) -> tuple[FloatArray, FloatArray]:
    """Hourly timestamps and rates: 100 req/s level, +2% a week, weekly shape, noise."""
    rng = np.random.default_rng(seed)
    hours = np.arange(weeks * HOURS_PER_WEEK)
    slots = hour_of_week(start + hours * HOUR)
    log_rate = (
        math.log(100.0)
        + math.log1p(GROWTH) * hours / HOURS_PER_WEEK
        + true_log_season()[slots]
        + rng.normal(0.0, sigma, hours.size)
    )
    return (start + hours * HOUR).astype(np.float64), np.exp(log_rate)


# -- calendar and resampling -------------------------------------------------------------------


def test_hour_of_week_starts_on_monday_utc() -> None:
    # 1970-01-01 was a Thursday: epoch 0 is slot 3 × 24.
    assert hour_of_week([0.0])[0] == 72
    assert hour_of_week([MONDAY, MONDAY + 3599, MONDAY + 3600])[0:3].tolist() == [0, 0, 1]
    sunday_last_hour = MONDAY + (HOURS_PER_WEEK - 1) * HOUR
    assert hour_of_week([sunday_last_hour, sunday_last_hour + HOUR]).tolist() == [167, 0]


def test_resample_hourly_averages_five_minute_samples_and_keeps_gaps() -> None:
    five_min = np.arange(24) * 300 + MONDAY  # two whole hours of 5-minute samples
    rates = np.concatenate([np.full(12, 2.0), np.arange(12, dtype=float)])
    # A third hour, after a gap of one hour, with a single sample.
    ts = np.append(five_min, MONDAY + 3 * HOUR + 600)
    vs = np.append(rates, 7.0)
    hours, means = resample_hourly(ts, vs)
    assert hours.tolist() == [MONDAY, MONDAY + HOUR, MONDAY + 3 * HOUR]
    assert means.tolist() == [2.0, 5.5, 7.0]


def test_five_minute_history_fits_like_its_hourly_means() -> None:
    ts, ys = series(seed=6, weeks=4)
    fine_ts = (MONDAY + np.arange(ts.size * 12) * 300).astype(np.float64)
    # Each hour's twelve samples average exactly to the hourly value.
    wiggle = np.tile(np.array([-1.0, 1.0] * 6), ts.size) * 0.05
    fine = np.repeat(ys, 12) * (1.0 + wiggle)
    hourly = fit_demand(ts, ys)
    fine_fit = fit_demand(fine_ts, fine)
    assert fine_fit.history_hours == hourly.history_hours == ts.size
    np.testing.assert_allclose(fine_fit.seasonal_factors, hourly.seasonal_factors, rtol=1e-9)
    assert fine_fit.weekly_growth == pytest.approx(hourly.weekly_growth, rel=1e-9)


# -- recovering the shape, the trend and the mean ----------------------------------------------


def test_recovers_weekly_shape_and_trend() -> None:
    ts, ys = series(seed=1, weeks=8)
    model = fit_demand(ts, ys)
    assert model.sufficient_history
    assert model.history_hours == 8 * HOURS_PER_WEEK
    # Factors have geometric mean 1, like the truth after centring.
    assert float(np.mean(np.log(model.seasonal_factors))) == pytest.approx(0.0, abs=1e-12)
    error = np.log(model.seasonal_factors) - true_log_season()
    # Each slot is a mean of 8 hours with σ = 0.1: standard error 0.035 in log. RMS within
    # 1.5 standard errors, the worst of 168 slots within 5.
    assert float(np.sqrt(np.mean(error**2))) < 0.055
    assert float(np.max(np.abs(error))) < 0.18
    # Slope standard error ≈ σ / √(within-slot Σ(t − t̄)²) ≈ 0.0012 a week: within 4 of them.
    assert model.weekly_growth == pytest.approx(GROWTH, abs=0.005)


def test_forecast_mean_tracks_the_noise_free_truth() -> None:
    ts, ys = series(seed=2, weeks=8)
    model = fit_demand(ts, ys)
    ahead = 4 * HOURS_PER_WEEK
    forecast = model.forecast(ts[-1] + HOUR, ahead)
    hours = np.arange(8 * HOURS_PER_WEEK, 8 * HOURS_PER_WEEK + ahead)
    assert forecast.timestamps.tolist() == (MONDAY + hours * HOUR).tolist()
    # E[e^ε] = e^(σ²/2) for the lognormal noise.
    truth = (
        100.0
        * (1 + GROWTH) ** (hours / HOURS_PER_WEEK)
        * np.exp(true_log_season()[hours % HOURS_PER_WEEK])
        * math.exp(SIGMA**2 / 2)
    )
    mape = float(np.mean(np.abs(forecast.mean - truth) / truth))
    assert mape < 0.05
    # The mean lies inside the central band, and the band brackets the truth almost always.
    assert np.all(forecast.quantile(0.05) < forecast.mean)
    assert np.all(forecast.mean < forecast.quantile(0.95))


def test_gappy_history_still_recovers_the_trend() -> None:
    ts, ys = series(seed=4, weeks=10)
    keep = np.random.default_rng(40).random(ts.size) > 0.3
    model = fit_demand(ts[keep], ys[keep])
    assert model.history_hours == int(keep.sum())
    assert model.weekly_growth == pytest.approx(GROWTH, abs=0.006)
    error = np.log(model.seasonal_factors) - true_log_season()
    assert float(np.sqrt(np.mean(error**2))) < 0.07


def test_incident_spikes_barely_move_the_fit() -> None:
    ts, ys = series(seed=7, weeks=8)
    spiked = ys.copy()
    spiked[np.random.default_rng(70).choice(ys.size, 20, replace=False)] *= 10.0
    clean, noisy = fit_demand(ts, ys), fit_demand(ts, spiked)
    # A 10× hour in a slot seen 8 times would lift a plain mean's factor by e^(ln 10 / 8) − 1,
    # about 33%; Huber weights keep it to a few percent.
    ratio = noisy.seasonal_factors / clean.seasonal_factors
    assert float(np.max(np.abs(ratio - 1.0))) < 0.12
    assert noisy.weekly_growth == pytest.approx(clean.weekly_growth, abs=0.003)


def test_idle_hours_forecast_near_zero_and_never_negative() -> None:
    ts, ys = series(seed=8, weeks=6)
    idle = hour_of_week(ts) % 24 < 4
    ys[idle] = 0.0
    forecast = fit_demand(ts, ys).forecast(ts[-1] + HOUR, 2 * 24)
    night = hour_of_week(forecast.timestamps) % 24 < 4
    assert np.all(forecast.quantile(0.01) >= 0.0)
    assert float(np.max(forecast.quantile(0.9)[night])) < 1.0
    assert float(np.min(forecast.mean[~night])) > 30.0


def test_all_zero_history_forecasts_zero() -> None:
    ts = (MONDAY + np.arange(3 * HOURS_PER_WEEK) * HOUR).astype(np.float64)
    forecast = fit_demand(ts, np.zeros(ts.size)).forecast(ts[-1] + HOUR, 24)
    assert np.all(forecast.mean == 0.0)
    assert np.all(forecast.quantile(0.99) == 0.0)


# -- the band ------------------------------------------------------------------------------------


def test_backtest_band_coverage_is_close_to_nominal() -> None:
    coverages = []
    for seed in range(3):
        ts, ys = series(seed=seed, weeks=12)
        report = backtest(ts, ys, band=(0.1, 0.9))
        # Origins at the end of weeks 2 … 11, each forecasting the following week.
        assert report.origins == 10
        assert report.points == 10 * HOURS_PER_WEEK
        assert report.nominal_coverage == pytest.approx(0.8)
        assert 0.70 <= report.coverage <= 0.90
        assert len(report.coverage_by_day) == 7
        assert all(0.55 <= c <= 0.95 for c in report.coverage_by_day)
        # Lognormal noise with σ = 0.1 has a mean absolute percentage error near 8%.
        assert 0.05 < report.mape < 0.12
        assert 0.05 < report.smape < 0.12
        assert 3.0 < report.mae < 15.0
        coverages.append(report.coverage)
    assert 0.74 <= float(np.mean(coverages)) <= 0.86


def test_backtest_wide_band_covers_more() -> None:
    ts, ys = series(seed=5, weeks=10)
    narrow = backtest(ts, ys, band=(0.25, 0.75))
    wide = backtest(ts, ys, band=(0.02, 0.98))
    assert 0.40 <= narrow.coverage <= 0.60
    assert 0.92 <= wide.coverage <= 1.0


def test_backtest_takes_a_configured_fit_and_steps() -> None:
    ts, ys = series(seed=9, weeks=8)
    report = backtest(
        ts,
        ys,
        horizon_hours=48,
        step_hours=24,
        min_train_hours=3 * HOURS_PER_WEEK,
        fit=functools.partial(fit_demand, damping=0.8),
    )
    # Origins every day from the end of week 3 while two days remain: 5 weeks × 7 − 1.
    assert report.origins == 5 * 7 - 1
    assert report.horizon_hours == 48
    assert len(report.coverage_by_day) == 2


def test_band_widens_with_the_horizon() -> None:
    ts, ys = series(seed=3, weeks=6)
    model = fit_demand(ts, ys)
    forecast = model.forecast(ts[-1] + HOUR, 52 * HOURS_PER_WEEK)
    relative = (forecast.quantile(0.9) - forecast.quantile(0.1)) / forecast.mean
    weekly = relative.reshape(52, HOURS_PER_WEEK).mean(axis=1)
    # The slope's uncertainty grows with the distance from the history, week after week.
    assert np.all(np.diff(weekly) > 0)
    # Six weeks of σ = 0.1 pin the slope to about ±0.002 a week: a year out that adds
    # roughly as much spread as the noise itself.
    assert weekly[-1] > 1.25 * weekly[0]


def test_damping_limits_long_range_growth() -> None:
    ts, ys = series(seed=3, weeks=6)
    undamped = fit_demand(ts, ys)
    damped = fit_demand(ts, ys, damping=0.8)
    # Damping changes nothing inside the history or at its end.
    inside = undamped.forecast(ts[0], 10)
    np.testing.assert_allclose(damped.forecast(ts[0], 10).mean, inside.mean)
    far = ts[-1] + HOUR + 52 * HOURS_PER_WEEK * HOUR
    # Undamped: 52 more weeks of growth. Damped: at most 1 / −ln 0.8 ≈ 4.5 weeks more.
    ratio = undamped.forecast(far, 1).mean[0] / damped.forecast(far, 1).mean[0]
    g = math.log1p(undamped.weekly_growth)
    # (The wider undamped band lifts its mean by a further ~1% through the smearing factor.)
    assert ratio == pytest.approx(math.exp(g * (52 - 1 / -math.log(0.8))), rel=0.02)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    q_low=st.floats(0.001, 0.999),
    q_high=st.floats(0.001, 0.999),
    ahead=st.integers(0, 2000),
    sigma=st.sampled_from([0.0, 0.05, 0.3]),
)
def test_higher_quantiles_are_never_below_lower_ones(
    seed: int, q_low: float, q_high: float, ahead: int, sigma: float
) -> None:
    q_low, q_high = sorted((q_low, q_high))
    ts, ys = series(seed=seed, weeks=3, sigma=sigma)
    forecast = fit_demand(ts, ys).forecast(ts[-1] + ahead * HOUR, 48)
    low, high = forecast.quantile(q_low), forecast.quantile(q_high)
    assert np.all(low <= high)
    assert np.all(low >= 0.0)


@settings(max_examples=30, deadline=None)
@given(
    q_low=st.floats(0.001, 0.999),
    q_high=st.floats(0.001, 0.999),
    burst=st.floats(1.0, 5.0),
)
def test_declared_band_quantiles_are_ordered(q_low: float, q_high: float, burst: float) -> None:
    q_low, q_high = sorted((q_low, q_high))
    forecast = fit_demand([], [], declared_rate=8.0, declared_burst=burst).forecast(MONDAY, 3)
    assert np.all(forecast.quantile(q_low) <= forecast.quantile(q_high))


def test_peak_is_a_percentile_of_each_window_of_the_band() -> None:
    ts, ys = series(seed=11, weeks=4)
    forecast = fit_demand(ts, ys).forecast(ts[-1] + HOUR, 2 * HOURS_PER_WEEK + 24)
    band = forecast.quantile(0.9)
    weekly = forecast.peak(0.9)
    assert weekly.shape == (3,)  # two whole weeks and a last day
    assert weekly[0] == pytest.approx(float(np.quantile(band[:168], 0.99)))
    assert weekly[2] == pytest.approx(float(np.quantile(band[336:], 0.99)))
    daily_max = forecast.peak(0.9, window=24, within=1.0)
    assert daily_max.shape == (15,)
    assert daily_max[3] == pytest.approx(float(np.max(band[72:96])))
    # A premium tier's quantile never peaks lower.
    assert np.all(forecast.peak(0.99) >= weekly)


# -- short history -------------------------------------------------------------------------------


def test_short_history_falls_back_to_the_declared_rate_flagged() -> None:
    ts, ys = series(seed=12, weeks=2)
    model = fit_demand(ts[:200], ys[:200], declared_rate=8.0, declared_burst=11.0 / 8.0)
    assert not model.sufficient_history
    assert model.history_hours == 200
    assert model.history_end == int(ts[199]) + HOUR
    assert np.all(model.seasonal_factors == 1.0)
    assert model.weekly_growth == 0.0
    forecast = model.forecast(ts[-1], 500)
    # Flat at the declared mean; the declared burst (the seeds' p99 of 11 over a mean of 8) is
    # the band's p99.
    np.testing.assert_allclose(forecast.mean, 8.0)
    np.testing.assert_allclose(forecast.quantile(0.99), 11.0)
    assert np.all(forecast.quantile(0.5) < 8.0)  # lognormal: median below mean
    np.testing.assert_allclose(forecast.peak(0.99), 11.0)


def test_declared_burst_at_another_quantile() -> None:
    model = fit_demand([], [], declared_rate=10.0, declared_burst=1.5, burst_quantile=0.95)
    forecast = model.forecast(MONDAY, 24)
    np.testing.assert_allclose(forecast.quantile(0.95), 15.0)
    np.testing.assert_allclose(forecast.mean, 10.0)


def test_no_burst_declared_means_no_band() -> None:
    model = fit_demand([], [], declared_rate=5.0)
    forecast = model.forecast(MONDAY, 24)
    np.testing.assert_allclose(forecast.quantile(0.01), 5.0)
    np.testing.assert_allclose(forecast.quantile(0.99), 5.0)


def test_declared_zero_rate_forecasts_zero() -> None:
    forecast = fit_demand([], [], declared_rate=0.0, declared_burst=2.0).forecast(MONDAY, 5)
    assert np.all(forecast.mean == 0.0)
    assert np.all(forecast.quantile(0.99) == 0.0)


def test_history_threshold_is_configurable() -> None:
    ts, ys = series(seed=13, weeks=2)
    assert fit_demand(ts, ys).sufficient_history
    assert not fit_demand(ts[:-1], ys[:-1], declared_rate=1.0).sufficient_history
    assert not fit_demand(
        ts, ys, min_history_hours=3 * HOURS_PER_WEEK, declared_rate=1.0
    ).sufficient_history
    assert fit_demand(ts[:200], ys[:200], min_history_hours=HOURS_PER_WEEK).sufficient_history


def test_short_history_without_a_declared_rate_is_refused() -> None:
    ts, ys = series(seed=14, weeks=1)
    with pytest.raises(PlannerInputError) as err:
        fit_demand(ts, ys)
    assert err.value.argument == "declared_rate"


# -- validation ----------------------------------------------------------------------------------

GOOD_TS = [MONDAY, MONDAY + HOUR, MONDAY + 2 * HOUR]


@pytest.mark.parametrize(
    ("timestamps", "values", "argument"),
    [
        (GOOD_TS, [1.0, 2.0], "values"),
        (GOOD_TS[:2], [1.0, 2.0, 3.0], "values"),
        (GOOD_TS, [1.0, float("nan"), 3.0], "values"),
        (GOOD_TS, [1.0, float("inf"), 3.0], "values"),
        (GOOD_TS, [1.0, -0.5, 3.0], "values"),
        ([MONDAY, float("nan"), MONDAY + HOUR], [1.0, 2.0, 3.0], "timestamps"),
        ([MONDAY + HOUR, MONDAY, MONDAY + 2 * HOUR], [1.0, 2.0, 3.0], "timestamps"),
        ([MONDAY, MONDAY, MONDAY + HOUR], [1.0, 2.0, 3.0], "timestamps"),
        ([[MONDAY, MONDAY + HOUR]], [[1.0, 2.0]], "timestamps"),
        (["a", "b", "c"], [1.0, 2.0, 3.0], "timestamps"),
    ],
)
def test_bad_series_name_the_argument(
    timestamps: list[object], values: list[object], argument: str
) -> None:
    with pytest.raises(PlannerInputError) as err:
        fit_demand(timestamps, values, declared_rate=1.0)  # type: ignore[arg-type]
    assert err.value.argument == argument
    with pytest.raises(PlannerInputError) as err:
        backtest(timestamps, values)  # type: ignore[arg-type]
    assert err.value.argument == argument


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"declared_rate": -1.0}, "declared_rate"),
        ({"declared_rate": float("nan")}, "declared_rate"),
        ({"declared_rate": 1.0, "declared_burst": 0.9}, "declared_burst"),
        ({"declared_rate": 1.0, "declared_burst": 100.0}, "declared_burst"),
        ({"declared_rate": 1.0, "declared_burst": 2.0, "burst_quantile": 0.3}, "declared_burst"),
        ({"declared_rate": 1.0, "burst_quantile": 1.0}, "burst_quantile"),
        ({"declared_rate": 1.0, "min_history_hours": 100}, "min_history_hours"),
        ({"declared_rate": 1.0, "shrinkage": -1.0}, "shrinkage"),
        ({"declared_rate": 1.0, "damping": 0.0}, "damping"),
        ({"declared_rate": 1.0, "damping": 1.5}, "damping"),
    ],
)
def test_bad_options_name_the_argument(options: dict[str, float], argument: str) -> None:
    with pytest.raises(PlannerInputError) as err:
        fit_demand(GOOD_TS, [1.0, 2.0, 3.0], **options)  # type: ignore[arg-type]
    assert err.value.argument == argument


@pytest.mark.parametrize("q", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_quantile_outside_the_open_unit_interval_is_refused(q: float) -> None:
    ts, ys = series(seed=15, weeks=2)
    forecast = fit_demand(ts, ys).forecast(ts[-1], 24)
    with pytest.raises(PlannerInputError) as err:
        forecast.quantile(q)
    assert err.value.argument == "q"
    with pytest.raises(PlannerInputError) as err:
        forecast.peak(q)
    assert err.value.argument == "q"


def test_bad_forecast_and_peak_arguments_name_the_argument() -> None:
    model = fit_demand([], [], declared_rate=1.0)
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: model.forecast(MONDAY, 0), "hours"),
        (lambda: model.forecast(float("inf"), 5), "start"),
        (lambda: model.forecast(MONDAY, 5).peak(0.5, window=0), "window"),
        (lambda: model.forecast(MONDAY, 5).peak(0.5, within=0.0), "within"),
    ]
    for call, argument in calls:
        with pytest.raises(PlannerInputError) as err:
            call()
        assert err.value.argument == argument


def test_backtest_refuses_bad_bands_and_short_histories() -> None:
    ts, ys = series(seed=16, weeks=3)
    for band in [(0.9, 0.1), (0.0, 0.9), (0.5, 0.5)]:
        with pytest.raises(PlannerInputError) as err:
            backtest(ts, ys, band=band)
        assert err.value.argument == "band"
    with pytest.raises(PlannerInputError) as err:
        backtest(ts, ys, horizon_hours=2 * HOURS_PER_WEEK)
    assert err.value.argument == "values"
    with pytest.raises(PlannerInputError) as err:
        backtest(ts, ys, step_hours=0)
    assert err.value.argument == "step_hours"
