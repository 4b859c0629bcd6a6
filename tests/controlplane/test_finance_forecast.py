"""The forecast months ahead from telemetry, and ``manage.py finance_report``."""

from __future__ import annotations

import csv
import io
import itertools
import math
from datetime import datetime
from typing import Any

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from controlplane.core.roles import FINANCE
from controlplane.finance import services
from controlplane.finance import snapshot as snapshot_module
from controlplane.plans import services as plan_services
from controlplane.plans.models import Plan
from tests.controlplane.api_harness import APITest
from tests.controlplane.finance_helpers import active_plan, seeds_fleet

WEEKLY_GROWTH = 0.05


def growing_history(*, start: datetime, end: datetime) -> dict[Any, Any]:
    """Four weeks of hourly rates for the assistant: a daily wave around 8 requests/s, growing
    5% a week, ending at ``end``."""
    hours = 4 * 168
    ts = end.timestamp() - 3600 * np.arange(hours, 0, -1)
    weeks = (ts - ts[-1]) / (168 * 3600)
    day = np.exp(0.3 * np.sin(2 * math.pi * (ts / 3600 % 24) / 24))
    noise = np.random.default_rng(7).lognormal(0.0, 0.05, hours)
    rates = 6.0 * (1 + WEEKLY_GROWTH) ** weeks * day * noise
    return {("assistant", "m", "r1"): (ts, rates)}


class TestForecastFromTelemetry(APITest):
    def test_growth_raises_later_months_and_today_is_the_plan(
        self, api_client_for: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
    ) -> None:
        # A year of 5% a week makes a new fleet almost every day: a small solve budget keeps
        # the test short, and the days it leaves unproven take a busier day's fleet.
        settings.HEADROOM_FINANCE_MAX_SOLVES = 60
        monkeypatch.setattr(plan_services, "rate_history", growing_history)
        monkeypatch.setattr(snapshot_module, "rate_history", growing_history)
        seeds_fleet(self.records)
        plan = active_plan()
        demand = plan.problem["demands"][0]
        assert demand["forecast"]["source"] == "telemetry"
        rows = api_client_for(FINANCE).get("/api/finance/forecast/", {"horizon": 6}).json()
        rows = rows["rows"]
        span = [
            (
                datetime.fromisoformat(r["period_end"]) - datetime.fromisoformat(r["period_start"])
            ).total_seconds()
            / 3600
            for r in rows
        ]
        per_hour = [r["cost"] / h for r, h in zip(rows, span, strict=True)]
        today = services.finance_forecast(period="day", horizon=1).rows[0]
        assert today["sized_by"] == "plan"
        assert today["cost"] == pytest.approx(plan.cost_per_hour * 24, abs=0.01)
        assert rows[0]["sized_by"] in ("plan", "plan+forecast")
        assert rows[0]["cost"] >= plan.cost_per_hour * span[0] - 0.01
        assert any("upper bound" in note for note in services.finance_snapshot().notes)
        # 5% a week compounds to about 1.23 a month: each later month needs more per hour.
        assert all(b > a for a, b in itertools.pairwise(per_hour[1:])), per_hour
        assert per_hour[-1] > 1.5 * per_hour[1]
        for row in rows[1:]:
            assert row["quantile"] == demand["forecast"]["quantile"]
            assert row["cost_low"] <= row["cost"] <= row["cost_high"]
            assert row["cost_low"] < row["cost_high"]
        commitments = services.finance_commitments(horizon=6).rows
        # Growth: demand comes in above the low edge, so some of it goes on demand.
        assert sum(r["on_demand_gpu_hours"] for r in commitments) > 0
        assert {r["reserved_gpus"] for r in commitments} == {commitments[0]["reserved_gpus"]}


class TestFinanceReportCommand(APITest):
    def test_prints_the_api_rows(self, api_client_for: Any) -> None:
        seeds_fleet(self.records, with_second_tenant=True)
        active_plan()
        out = io.StringIO()
        call_command(
            "finance_report", "forecast", "--group-by", "tenant", "--format", "csv", stdout=out
        )
        api = api_client_for(FINANCE).get(
            "/api/finance/forecast/", {"group_by": "tenant", "format": "csv"}
        )
        assert out.getvalue().encode() == api.content
        table = io.StringIO()
        call_command("finance_report", "showback", "--horizon", "2", stdout=table)
        text = table.getvalue()
        assert text.startswith("Plan v1, by month") and "(idle headroom)" in text
        promises = io.StringIO()
        call_command("finance_report", "promises", "--format", "json", stdout=promises)
        assert '"promise": "zone"' in promises.getvalue()
        rows = list(csv.DictReader(io.StringIO(out.getvalue())))
        assert {r["tenant"] for r in rows} >= {"assistant", "helper"}

    def test_bad_options_exit_2_no_plan_exit_1(self) -> None:
        with pytest.raises(CommandError) as bad:
            call_command("finance_report", "forecast", "--group-by", "colour")
        assert bad.value.returncode == 2 and "--group-by" in str(bad.value)
        with pytest.raises(CommandError) as negative:
            call_command("finance_report", "showback", "--horizon", "-2")
        assert negative.value.returncode == 2 and "--horizon" in str(negative.value)
        assert not Plan.objects.exists()
        with pytest.raises(CommandError) as missing:
            call_command("finance_report", "forecast")
        assert missing.value.returncode == 1
