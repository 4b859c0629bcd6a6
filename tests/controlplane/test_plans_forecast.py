"""From forecast to demand: declared profiles stand without history; with history a tenant's
demands are sized for its tier's quantile of the band; each plan prices the band's edges;
telemetry profiles replace the declared ones of the same pool; the tier's quantile is
validated."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from django.core.exceptions import ValidationError

from controlplane.plans import demand, services
from controlplane.plans.conf import replan_settings
from controlplane.plans.demand import RateHistory, demand_forecast, forecast_anchor
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.problem import problem_export
from controlplane.policies.models import Tier, WorkloadProfile
from planner.placement.verify import verify
from tests.controlplane.plans_helpers import load_support_assistant, run_replan

pytestmark = pytest.mark.django_db

KEYSTONE = ("keystone-mutual", "chat-70b", "us-east")
NOW = datetime(2026, 3, 4, 15, 30, tzinfo=UTC)


def hourly_history(*, end: datetime, weeks: int, mean: float, seed: int = 3) -> tuple[Any, Any]:
    """Hourly request rates for ``weeks`` weeks before ``end``: a daily wave around ``mean``
    with 10% lognormal noise."""
    rng = np.random.default_rng(seed)
    hours = weeks * 168
    start = end.timestamp() - hours * 3600
    ts = start + 3600 * np.arange(hours)
    wave = np.exp(0.4 * np.sin(2 * math.pi * (ts / 3600 % 24) / 24))
    rates = mean * wave / wave.mean() * rng.lognormal(0.0, 0.1, hours)
    return ts, rates


def _history(weeks: int = 3, mean: float = 2.0) -> RateHistory:
    return {KEYSTONE: hourly_history(end=forecast_anchor(NOW), weeks=weeks, mean=mean)}


@pytest.fixture
def scenario() -> None:
    load_support_assistant()


def _keystone(problem: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["id"]: d for d in problem["demands"] if d["tenant"] == "keystone-mutual"}


def test_without_history_the_declared_profiles_stand(scenario: None) -> None:
    exported = problem_export()
    for history in (None, {}):
        forecast = demand_forecast(
            problem=exported, now=NOW, settings=replan_settings(), history=history
        )
        assert forecast.problem == exported
        assert forecast.low is None and forecast.high is None
        assert forecast.sources == {"declared": 21, "telemetry": 0}
    assert exported == problem_export(), "the input problem is not changed"


def test_history_sizes_a_tenant_for_its_tiers_quantile_keeping_the_class_mix(
    scenario: None,
) -> None:
    exported = problem_export()
    forecast = demand_forecast(
        problem=exported, now=NOW, settings=replan_settings(), history=_history()
    )

    before, after = _keystone(exported), _keystone(forecast.problem)
    assert forecast.sources == {"declared": 18, "telemetry": 3}
    ratios = {i: after[i]["requests_per_s"] / before[i]["requests_per_s"] for i in after}
    # One factor for the group: the profiles' class mix splits the forecast.
    assert max(ratios.values()) == pytest.approx(min(ratios.values()), rel=1e-5)
    # keystone-mutual is premium, planned at the p95 of the band (the scenario's tier
    # quantile): the peak hour of a ±0.4 log daily wave around 2 req/s is well above 2.
    total = sum(d["requests_per_s"] for d in after.values())
    assert 2.6 < total < 4.5
    for demand_id, row in after.items():
        info = row["forecast"]
        assert info["source"] == "telemetry" and info["quantile"] == 0.95
        assert info["declared_requests_per_s"] == before[demand_id]["requests_per_s"]
        assert info["low_requests_per_s"] < row["requests_per_s"] < info["high_requests_per_s"]
        assert info["history_hours"] == 3 * 168
    # Other tenants are untouched.
    others = [d for d in forecast.problem["demands"] if d["tenant"] != "keystone-mutual"]
    assert others == [d for d in exported["demands"] if d["tenant"] != "keystone-mutual"]
    assert forecast.low is not None and forecast.high is not None
    low, high = _keystone(forecast.low), _keystone(forecast.high)
    for demand_id, row in after.items():
        assert low[demand_id]["requests_per_s"] == row["forecast"]["low_requests_per_s"]
        assert high[demand_id]["requests_per_s"] == row["forecast"]["high_requests_per_s"]


def test_a_higher_tier_quantile_plans_more(scenario: None) -> None:
    exported, history = problem_export(), _history()

    def total_at(q: float) -> float:
        Tier.objects.filter(name="premium").update(forecast_quantile=q)
        problem = demand_forecast(
            problem=exported, now=NOW, settings=replan_settings(), history=history
        ).problem
        return sum(d["requests_per_s"] for d in _keystone(problem).values())

    assert total_at(0.5) < total_at(0.9) < total_at(0.99)


def test_too_little_history_leaves_the_declared_profile(scenario: None) -> None:
    exported = problem_export()
    short = {KEYSTONE: hourly_history(end=forecast_anchor(NOW), weeks=1, mean=9.0)}

    forecast = demand_forecast(problem=exported, now=NOW, settings=replan_settings(), history=short)

    assert forecast.problem == exported
    assert forecast.sources == {"declared": 21, "telemetry": 0}


def test_history_the_forecast_refuses_is_reported_and_the_profile_stands(scenario: None) -> None:
    exported = problem_export()
    ts, rates = hourly_history(end=forecast_anchor(NOW), weeks=3, mean=2.0)
    rates[5] = -1.0

    forecast = demand_forecast(
        problem=exported, now=NOW, settings=replan_settings(), history={KEYSTONE: (ts, rates)}
    )

    assert forecast.problem == exported
    assert any("keystone-mutual/chat-70b/us-east: history refused" in n for n in forecast.notes)


def test_history_without_a_profile_is_reported(scenario: None) -> None:
    history = {("unknown-co", "chat-70b", "us-east"): hourly_history(end=NOW, weeks=3, mean=1)}

    forecast = demand_forecast(
        problem=problem_export(), now=NOW, settings=replan_settings(), history=history
    )

    assert any("unknown-co/chat-70b/us-east" in note for note in forecast.notes)


def test_telemetry_profiles_replace_the_declared_ones_of_their_pool(scenario: None) -> None:
    declared = WorkloadProfile.objects.filter(tenant__name="keystone-mutual").first()
    assert declared is not None
    observed_class = declared.workload_class.__class__.objects.create(name="observed")
    observed = WorkloadProfile.objects.get(pk=declared.pk)
    observed.pk = None
    observed._state.adding = True
    observed.workload_class = observed_class
    observed.source = WorkloadProfile.Source.TELEMETRY
    observed.peak_requests_per_s = 2.5
    observed.save()

    forecast = demand_forecast(
        problem=problem_export(), now=NOW, settings=replan_settings(), history=None
    )

    assert sorted(_keystone(forecast.problem)) == ["keystone-mutual/chat-70b/observed"]
    assert any("3 declared demands left out" in note for note in forecast.notes)


def test_a_plan_prices_the_bands_edges_and_says_how_demand_was_sized(
    scenario: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[datetime, datetime]] = []

    def history(*, start: datetime, end: datetime) -> RateHistory:
        calls.append((start, end))
        return {KEYSTONE: hourly_history(end=end, weeks=3, mean=6.0)}

    monkeypatch.setattr(services, "rate_history", history)
    run = run_replan()

    assert run.status == ReplanRun.Status.SUCCEEDED, run.error
    plan = run.plan
    assert plan is not None
    start, end = calls[0]
    assert end - start == timedelta(days=56) and end.hour == 0 and end.minute == 0
    assert verify(plan.problem, plan.solution) == []
    band = plan.forecast_band
    assert band["sources"] == {"declared": 18, "telemetry": 3}
    assert band["low"]["quantile"] == 0.1 and band["high"]["quantile"] == 0.99
    assert band["low"]["cost_per_hour"] <= plan.cost_per_hour <= band["high"]["cost_per_hour"]
    assert band["low"]["planned_requests_per_s"] < plan.planned_requests_per_s
    assert plan.planned_requests_per_s < band["high"]["planned_requests_per_s"]
    assert band["high"]["solver_status"] in ("optimal", "feasible") and band["high"]["solved"]
    assert plan.explanation["demand"][0].startswith("3 demands sized from the request-rate")

    # The same history within the same day gives the same inputs: no new plan.
    again = run_replan()
    assert again.status == ReplanRun.Status.UNCHANGED
    assert Plan.objects.count() == 1


@pytest.mark.parametrize("value", [0.0, 1.0, -0.1, 1.5, float("nan"), float("inf")])
def test_a_tiers_forecast_quantile_must_lie_strictly_between_0_and_1(value: float) -> None:
    tier = Tier(name="gold", p95_ttft_slo_s=1.0, forecast_quantile=value)
    with pytest.raises(ValidationError) as error:
        tier.full_clean()
    assert "forecast_quantile" in error.value.message_dict


def test_a_tiers_forecast_quantile_defaults_to_0_9() -> None:
    tier = Tier(name="gold", p95_ttft_slo_s=1.0)
    tier.full_clean()
    assert tier.forecast_quantile == 0.9
    tier.forecast_quantile = 0.99
    tier.full_clean()


def test_a_groups_fit_is_reused_while_its_history_is_the_same(
    scenario: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fits: list[int] = []
    real_fit = demand.fit_demand

    def counting_fit(*args: Any, **kwargs: Any) -> Any:
        fits.append(1)
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(demand, "fit_demand", counting_fit)
    monkeypatch.setattr(demand, "_FORECASTS", type(demand._FORECASTS)())
    exported, history = problem_export(), _history()

    first = demand_forecast(problem=exported, now=NOW, settings=replan_settings(), history=history)
    later = demand_forecast(
        problem=exported, now=NOW + timedelta(hours=5), settings=replan_settings(), history=history
    )
    assert len(fits) == 1
    assert later.problem == first.problem

    changed = _history(mean=3.0)
    demand_forecast(problem=exported, now=NOW, settings=replan_settings(), history=changed)
    assert len(fits) == 2


def test_a_step_in_the_history_is_re_levelled_and_the_demand_says_so(scenario: None) -> None:
    # Three weeks at 2 req/s, then two at 3: a +50% step, not growth.
    ts, rates = hourly_history(end=forecast_anchor(NOW), weeks=5, mean=2.0)
    step_at = ts[3 * 168]
    rates = np.where(ts >= step_at, rates * 1.5, rates)
    forecast = demand_forecast(
        problem=problem_export(),
        now=NOW,
        settings=replan_settings(),
        history={KEYSTONE: (ts, rates)},
    )
    for row in _keystone(forecast.problem).values():
        info = row["forecast"]
        (shift,) = info["level_shifts"]
        assert shift["at"] == datetime.fromtimestamp(step_at, tz=UTC).isoformat()
        assert shift["factor"] == pytest.approx(1.5, rel=0.03)
        assert abs(info["weekly_growth"]) < 0.01
    # Sized from the new level: the group's peak is the one a history at 3 req/s throughout
    # gives, within the noise of two fits.
    level = {KEYSTONE: hourly_history(end=forecast_anchor(NOW), weeks=5, mean=3.0)}
    flat = demand_forecast(
        problem=problem_export(), now=NOW, settings=replan_settings(), history=level
    )
    total = sum(d["requests_per_s"] for d in _keystone(forecast.problem).values())
    expected = sum(d["requests_per_s"] for d in _keystone(flat.problem).values())
    assert total == pytest.approx(expected, rel=0.05)
    # A history without a step carries no level_shifts field.
    plain = demand_forecast(
        problem=problem_export(), now=NOW, settings=replan_settings(), history=_history()
    )
    assert all("level_shifts" not in d["forecast"] for d in _keystone(plain.problem).values())
