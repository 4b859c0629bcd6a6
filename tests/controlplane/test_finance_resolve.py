"""Months and weeks ahead are priced as re-solving the placement would price them, and every
grain gives a period one price.

The fleet is the seeds' sizing example (``finance_helpers``) sized from four weeks of telemetry
growing 2% a week around a daily wave. The re-solve is done here independently of the
snapshot: the plan's forecast is fitted again with ``fit_demand`` from the same history, each
day's rate is the rolling p99 of the week starting that day at the plan's quantile, and
``planner.placement.solve`` sizes the plan's problem at that rate, warm-started from the plan.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from controlplane.finance import services
from controlplane.finance import snapshot as snapshot_module
from controlplane.plans import services as plan_services
from controlplane.plans.conf import replan_settings
from controlplane.plans.demand import history_window
from controlplane.plans.models import Plan
from planner import placement
from planner.forecast import fit_demand
from planner.forecast.finance import rolling_peak
from tests.controlplane.api_harness import APITest
from tests.controlplane.finance_helpers import active_plan, seeds_fleet

WEEKLY_GROWTH = 0.02
DAY = 86400


def growing_history(*, start: datetime, end: datetime) -> dict[Any, Any]:
    """Four weeks of hourly rates for the assistant ending at ``end``: a daily wave around
    6 requests/s, growing 2% a week."""
    hours = 4 * 168
    ts = end.timestamp() - 3600 * np.arange(hours, 0, -1)
    weeks = (ts - ts[-1]) / (168 * 3600)
    day = np.exp(0.3 * np.sin(2 * math.pi * (ts / 3600 % 24) / 24))
    noise = np.random.default_rng(11).lognormal(0.0, 0.05, hours)
    rates = 6.0 * (1 + WEEKLY_GROWTH) ** weeks * day * noise
    return {("assistant", "m", "r1"): (ts, rates)}


class ReSolve:
    """Each day's fleet re-solved from the forecast, independently of the finance code."""

    def __init__(self, plan: Plan, start: datetime, hours: int) -> None:
        demand = plan.problem["demands"][0]
        info = demand["forecast"]
        anchor = datetime.fromisoformat(plan.forecast_band["anchor"])
        lo, hi = history_window(now=anchor, settings=replan_settings())
        ts, rates = growing_history(start=lo, end=hi)[("assistant", "m", "r1")]
        window = int(plan.forecast_band.get("horizon_hours") or 168)
        band = fit_demand(ts, rates, declared_rate=info["declared_requests_per_s"])
        forecast = band.forecast(start.timestamp(), hours + window)
        self.start = int(start.timestamp())
        self.rates = rolling_peak(
            forecast.quantile(info["quantile"]), hours=hours, window=window, step=24
        )[::24]
        self.problem = dict(plan.problem)
        self.problem["previous"] = [
            {"zone": r.zone, "shape": r.shape, "replicas": r.replicas}
            for r in plan.allocations.all()
        ]
        self.gpus = {s["name"]: s["gpus"] for s in plan.problem["shapes"]}
        self.solved: dict[float, tuple[float, float]] = {}

    def day(self, day_start: int) -> tuple[float, float]:
        """(GPU-hours, cost) of the day starting at ``day_start``."""
        rate = float(self.rates[(day_start - self.start) // DAY])
        if rate not in self.solved:
            problem = {**self.problem}
            problem["demands"] = [{**self.problem["demands"][0], "requests_per_s": rate}]
            solution = placement.solve(problem, time_limit_s=30, workers=1)
            assert solution["status"] == "optimal" and not solution["unserved"]
            gpus = sum(r["replicas"] * self.gpus[r["shape"]] for r in solution["replicas"])
            self.solved[rate] = (24.0 * gpus, 24.0 * solution["cost_per_hour"])
        return self.solved[rate]

    def period(self, start: str, end: str) -> tuple[float, float]:
        first = int(datetime.fromisoformat(start).timestamp())
        last = int(datetime.fromisoformat(end).timestamp())
        days = [self.day(d) for d in range(first, last, DAY)]
        return sum(g for g, _ in days), sum(c for _, c in days)


class TestForecastEqualsReSolve(APITest):
    @pytest.fixture(autouse=True)
    def _grown(self, _harness: None, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(plan_services, "rate_history", growing_history)
        monkeypatch.setattr(snapshot_module, "rate_history", growing_history)
        seeds_fleet(self.records)
        self.plan = active_plan()
        assert self.plan.problem["demands"][0]["forecast"]["source"] == "telemetry"

    def test_next_12_months_and_8_weeks_within_1_percent(self) -> None:
        now = timezone.now()
        months = services.finance_forecast(period="month", horizon=13, now=now).rows
        snapshot = services.finance_snapshot(now=now)
        resolve = ReSolve(self.plan, snapshot.start, snapshot.hours)
        assert "upper bound" not in " ".join(snapshot.notes)
        worst = 0.0
        for row in months[1:]:
            assert row["sized_by"] == "forecast"
            gpu_hours, cost = resolve.period(row["period_start"], row["period_end"])
            assert row["gpu_hours"] == pytest.approx(gpu_hours, rel=0.01), row["period"]
            assert row["cost"] == pytest.approx(cost, rel=0.01), row["period"]
            worst = max(worst, abs(row["cost"] / cost - 1))
        weeks = services.finance_forecast(period="week", horizon=9, now=now).rows
        for row in weeks[1:]:
            gpu_hours, cost = resolve.period(row["period_start"], row["period_end"])
            assert row["gpu_hours"] == pytest.approx(gpu_hours, rel=0.01), row["period"]
            assert row["cost"] == pytest.approx(cost, rel=0.01), row["period"]
        # 2% a week compounds to about 2.8 times over the year: the fleet grows with it.
        assert months[-1]["cost"] / months[1]["cost"] > 2.0
        # The rule is exact: no month is off by even a cent's rounding.
        assert worst < 1e-6

    def test_a_month_is_its_days_and_its_weeks_shares(self) -> None:
        now = timezone.now()
        months = services.finance_forecast(period="month", horizon=3, now=now).rows
        days = services.finance_forecast(period="day", horizon=100, now=now).rows
        weeks = services.finance_forecast(period="week", horizon=14, now=now).rows
        assert days[0]["sized_by"] == "plan" and days[1]["sized_by"] == "forecast"
        cost = {datetime.fromisoformat(r["period_start"]): r["cost"] for r in days}
        # The days of the current month and week before today ran the plan (the day report
        # starts today).
        today = min(cost)
        earliest = min(today.replace(day=1), today - timedelta(days=today.weekday()))
        for k in range((today - earliest).days):
            cost[earliest + timedelta(days=k)] = 24 * self.plan.cost_per_hour

        def days_of(row: dict[str, Any]) -> list[datetime]:
            first = datetime.fromisoformat(row["period_start"])
            last = datetime.fromisoformat(row["period_end"])
            return [first + timedelta(days=k) for k in range((last - first).days)]

        for month in months:
            assert month["cost"] == pytest.approx(sum(cost[d] for d in days_of(month)), abs=0.2)
        for week in weeks:
            assert week["cost"] == pytest.approx(sum(cost[d] for d in days_of(week)), abs=0.05)
        # A month is the sum of its weeks' shares: each week less its days outside the month.
        # The week report starts with the current week, so a month that began before it also
        # holds the days before that week, which ran the plan.
        first_week = datetime.fromisoformat(weeks[0]["period_start"])
        for month in months[:2]:
            inside = set(days_of(month))
            shares = [
                week["cost"] - sum(cost[d] for d in days_of(week) if d not in inside)
                for week in weeks
                if inside & set(days_of(week))
            ]
            before = sum(cost[d] for d in inside if d < first_week)
            assert month["cost"] == pytest.approx(sum(shares) + before, abs=0.5)
        assert today.tzinfo == UTC

    def test_a_quarter_is_its_months_and_its_days(self) -> None:
        now = timezone.now()
        quarters = services.finance_forecast(period="quarter", horizon=4, now=now).rows
        months = services.finance_forecast(period="month", horizon=13, now=now).rows
        days = services.finance_forecast(period="day", horizon=200, now=now).rows
        assert [q["period"][-2:] for q in quarters] == [
            f"Q{(datetime.fromisoformat(q['period_start']).month - 1) // 3 + 1}" for q in quarters
        ]
        # The current quarter runs the plan today and the forecast from tomorrow, unless today
        # is its last day.
        tomorrow = min(datetime.fromisoformat(r["period_start"]) for r in days) + timedelta(days=1)
        current_end = datetime.fromisoformat(quarters[0]["period_end"])
        assert quarters[0]["sized_by"] == ("plan" if tomorrow == current_end else "plan+forecast")
        assert {q["sized_by"] for q in quarters[1:]} == {"forecast"}
        plan_day = 24 * self.plan.cost_per_hour
        by_month = {datetime.fromisoformat(r["period_start"]): r["cost"] for r in months}
        by_day = {datetime.fromisoformat(r["period_start"]): r["cost"] for r in days}
        today = min(by_day)
        for quarter in quarters:
            first = datetime.fromisoformat(quarter["period_start"])
            last = datetime.fromisoformat(quarter["period_end"])
            # The quarter's months, those before the current one ran the plan, every hour.
            starts = [first.replace(month=first.month + k) for k in range(3)]
            assert last == (starts[-1] + timedelta(days=31)).replace(day=1)
            summed = 0.0
            for month in starts:
                if month in by_month:
                    summed += by_month[month]
                else:
                    assert month < today
                    following = (month + timedelta(days=31)).replace(day=1)
                    summed += plan_day * (following - month).days
            assert quarter["cost"] == pytest.approx(summed, abs=0.5), quarter["period"]
            # And its days: before today the plan's, from today on the day report's.
            if last - timedelta(days=1) > max(by_day):
                continue
            total = sum(
                by_day.get(first + timedelta(days=k), plan_day) for k in range((last - first).days)
            )
            assert quarter["cost"] == pytest.approx(total, abs=0.5), quarter["period"]
        # The first two quarters are within the 200 days: both were checked against days.
        assert datetime.fromisoformat(quarters[1]["period_end"]) <= max(by_day) + timedelta(days=1)
