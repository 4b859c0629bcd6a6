"""Which demands a plan sized from declared profiles and which from telemetry (the plan API's
``profile_sources``), and ``HEADROOM_REPLAN_REQUIRE_TELEMETRY``: once telemetry has been
pulled, a re-plan that would size demands from declared profiles fails its run naming them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.core.roles import VIEWER
from controlplane.plans.conf import replan_settings
from controlplane.plans.demand import forecast_anchor
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.services import TELEMETRY_MISSING
from controlplane.telemetry import metrics
from controlplane.telemetry.models import RunStatus, TelemetryPull
from controlplane.telemetry.storage import SeriesKey
from tests.controlplane.conftest import make_user
from tests.controlplane.plans_helpers import load_support_assistant, run_replan
from tests.controlplane.telemetry_fakes import store

pytestmark = pytest.mark.django_db

BUCKET_S = 300
KEYSTONE = "keystone-mutual/chat-70b/"


@pytest.fixture(autouse=True)
def _five_minute_buckets(settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_BUCKET_S = BUCKET_S


def _keystone_history() -> None:
    """Sixteen days of keystone-mutual's requests in us-east: its three demands are sized
    from telemetry, every other tenant's from its declared profile."""
    end = forecast_anchor(timezone.now())
    first = end - timedelta(days=16)
    samples = {first + timedelta(seconds=i * BUCKET_S): 2.0 * BUCKET_S for i in range(16 * 288)}
    store(
        {SeriesKey("keystone-mutual", "chat-70b", "us-east", "", metrics.REQUESTS, ""): samples},
        BUCKET_S,
    )


def _pull() -> TelemetryPull:
    now = timezone.now()
    return TelemetryPull.objects.create(
        status=RunStatus.SUCCEEDED,
        window_start=now - timedelta(hours=1),
        window_end=now,
        bucket_s=BUCKET_S,
        samples_stored=1440,
        started_at=now - timedelta(minutes=1),
        finished_at=now,
    )


def _plan_api(plan: Plan) -> dict[str, Any]:
    client = APIClient()
    viewer = User.objects.filter(username="viewer").first() or make_user("viewer", VIEWER)
    client.force_authenticate(viewer)
    response = client.get(f"/api/plans/{plan.pk}/")
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def test_the_plan_api_lists_the_demands_by_where_their_rate_came_from() -> None:
    load_support_assistant()
    _keystone_history()
    run = run_replan()
    assert run.status == ReplanRun.Status.SUCCEEDED and run.plan is not None, run.error
    sources = _plan_api(run.plan)["profile_sources"]
    assert sources["telemetry"] == sorted(sources["telemetry"])
    assert len(sources["telemetry"]) == 3
    assert all(d.startswith(KEYSTONE) for d in sources["telemetry"])
    assert len(sources["declared"]) == 18 and sources["declared"] == sorted(sources["declared"])
    assert not any(d.startswith(KEYSTONE) for d in sources["declared"])
    planned = {d["id"] for d in run.plan.problem["demands"]}
    assert set(sources["declared"]) | set(sources["telemetry"]) == planned
    # A plan stored before its band listed them: read from its problem, the same lists.
    band = {k: v for k, v in run.plan.forecast_band.items() if k != "demand_sources"}
    Plan.objects.filter(pk=run.plan.pk).update(forecast_band=band)
    assert _plan_api(run.plan)["profile_sources"] == sources


def test_a_plan_of_declared_profiles_only_lists_every_demand_as_declared() -> None:
    load_support_assistant()
    run = run_replan()
    assert run.plan is not None
    sources = _plan_api(run.plan)["profile_sources"]
    assert sources["telemetry"] == []
    assert len(sources["declared"]) == run.plan.forecast_band["sources"]["declared"] > 0


def test_required_telemetry_fails_the_run_naming_the_demands_without_it(settings: Any) -> None:
    settings.HEADROOM_REPLAN_REQUIRE_TELEMETRY = True
    load_support_assistant()
    _keystone_history()
    _pull()
    run = run_replan()
    assert run.status == ReplanRun.Status.FAILED
    assert run.plan is None and not Plan.objects.exists()
    assert run.error.startswith(f"{TELEMETRY_MISSING} 18 of 21 demands")
    assert "HEADROOM_REPLAN_REQUIRE_TELEMETRY is on" in run.error
    assert "harborline-retail/chat-70b/order-lookup@eu-west" in run.error
    assert KEYSTONE not in run.error
    assert "300 s buckets" in run.error


def test_a_scheduled_replan_fails_the_same_way(settings: Any) -> None:
    settings.HEADROOM_REPLAN_REQUIRE_TELEMETRY = True
    load_support_assistant()
    _pull()
    run = run_replan(trigger=Plan.Trigger.SCHEDULE)
    assert run.status == ReplanRun.Status.FAILED
    assert run.error.startswith(f"{TELEMETRY_MISSING} 21 of 21 demands")


def test_without_any_pull_declared_profiles_still_plan_with_the_setting_on(settings: Any) -> None:
    settings.HEADROOM_REPLAN_REQUIRE_TELEMETRY = True
    load_support_assistant()
    run = run_replan()
    assert run.status == ReplanRun.Status.SUCCEEDED, run.error


def test_off_by_default_a_fallback_after_a_pull_still_plans() -> None:
    load_support_assistant()
    _pull()
    assert replan_settings().require_telemetry is False
    run = run_replan()
    assert run.status == ReplanRun.Status.SUCCEEDED, run.error
    assert run.plan is not None and run.plan.forecast_band["sources"]["telemetry"] == 0


def test_the_setting_is_parsed_as_a_boolean(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Read from the environment where the Django settings do not set it.
    del settings.HEADROOM_REPLAN_REQUIRE_TELEMETRY
    monkeypatch.setenv("HEADROOM_REPLAN_REQUIRE_TELEMETRY", "true")
    assert replan_settings().require_telemetry is True
    monkeypatch.setenv("HEADROOM_REPLAN_REQUIRE_TELEMETRY", "sometimes")
    with pytest.raises(ImproperlyConfigured, match="HEADROOM_REPLAN_REQUIRE_TELEMETRY"):
        replan_settings()
