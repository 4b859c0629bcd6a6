"""Request-rate history for the demand forecast (``selectors.request_rate_history``): hourly
rates from the stored request counter, summed over classes, over the seconds each hour was
seen; unknown names, other metrics and other bucket widths left out; and, fed two weeks and
more of samples, a re-plan that sizes a tenant's demand from the forecast."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from controlplane.plans.demand import forecast_anchor
from controlplane.plans.models import ReplanRun
from controlplane.telemetry import metrics
from controlplane.telemetry.models import RunStatus, TelemetryPull
from controlplane.telemetry.selectors import request_rate_history, stored_bucket_s
from controlplane.telemetry.storage import SeriesKey
from tests.controlplane.plans_helpers import load_support_assistant, run_replan
from tests.controlplane.telemetry_fakes import make_fleet, store

pytestmark = pytest.mark.django_db

BUCKET_S = 300


@pytest.fixture(autouse=True)
def _five_minute_buckets(settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_BUCKET_S = BUCKET_S


T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # a Monday, on the hour


def _requests(
    tenant: str,
    per_bucket: dict[datetime, float],
    *,
    region: str = "eu-west",
    workload_class: str = "",
    metric: str = metrics.REQUESTS,
    bucket_s: int = BUCKET_S,
) -> None:
    key = SeriesKey(tenant, "chat-70b", region, workload_class, metric, "")
    store({key: per_bucket}, bucket_s)


def _buckets(start: datetime, count: int, requests: float) -> dict[datetime, float]:
    return {start + timedelta(seconds=i * BUCKET_S): requests for i in range(count)}


def test_an_hours_rate_sums_the_classes_of_a_label_set() -> None:
    make_fleet(("acme", "eu-west"))
    _requests("acme", _buckets(T0, 12, 300.0), workload_class="chat")  # 1 req/s
    _requests("acme", _buckets(T0, 12, 600.0), workload_class="batch")  # 2 req/s

    history = request_rate_history(start=T0, end=T0 + timedelta(hours=1))

    assert history == {("acme", "chat-70b", "eu-west"): ([T0.timestamp()], [3.0])}


def test_a_partly_seen_hour_is_a_rate_over_its_seen_seconds_an_unseen_one_is_absent() -> None:
    make_fleet(("acme", "eu-west"))
    # Hour 0 whole; hour 1 only its first half (6 of 12 buckets), at a steady 2 req/s; hour 2
    # never pulled; hour 3 whole at 4 req/s.
    samples = _buckets(T0, 12, 600.0) | _buckets(T0 + timedelta(hours=1), 6, 600.0)
    samples |= _buckets(T0 + timedelta(hours=3), 12, 1200.0)
    _requests("acme", samples)

    timestamps, rates = request_rate_history(start=T0, end=T0 + timedelta(hours=4))[
        ("acme", "chat-70b", "eu-west")
    ]

    hour = 3600.0
    assert timestamps == [T0.timestamp(), T0.timestamp() + hour, T0.timestamp() + 3 * hour]
    assert rates == [2.0, 2.0, 4.0]


def test_the_window_is_half_open_and_may_start_inside_an_hour() -> None:
    make_fleet(("acme", "eu-west"))
    _requests("acme", _buckets(T0, 24, 300.0) | {T0 + timedelta(hours=2): 9000.0})

    start, end = T0 + timedelta(minutes=30), T0 + timedelta(hours=2)
    timestamps, rates = request_rate_history(start=start, end=end)[("acme", "chat-70b", "eu-west")]

    # Hour 0 from its 6 buckets after 08:30; the bucket at ``end`` is not in the window.
    assert timestamps == [T0.timestamp(), T0.timestamp() + 3600]
    assert rates == [1.0, 1.0]
    assert request_rate_history(start=end, end=end) == {}


def test_unknown_names_other_metrics_and_other_bucket_widths_are_left_out() -> None:
    make_fleet(("acme", "eu-west"))
    _requests("acme", _buckets(T0, 12, 300.0))
    _requests("ghost-co", _buckets(T0, 12, 300.0))  # no such tenant
    _requests("acme", _buckets(T0, 12, 300.0), region="ap-south")  # no such region
    _requests("acme", _buckets(T0, 12, 9e5), metric=metrics.PROMPT_TOKENS)
    _requests("acme", {T0: 60.0}, bucket_s=60)  # another width: not this configuration's

    history = request_rate_history(start=T0, end=T0 + timedelta(hours=1))

    assert history == {("acme", "chat-70b", "eu-west"): ([T0.timestamp()], [1.0])}


def test_the_configured_bucket_width_is_read(settings) -> None:  # type: ignore[no-untyped-def]
    make_fleet(("acme", "eu-west"))
    _requests("acme", {T0 + timedelta(minutes=m): 60.0 for m in range(60)}, bucket_s=60)
    settings.HEADROOM_TELEMETRY_BUCKET_S = 60

    history = request_rate_history(start=T0, end=T0 + timedelta(hours=1))

    assert history == {("acme", "chat-70b", "eu-west"): ([T0.timestamp()], [1.0])}


def test_the_stored_width_is_read_whatever_this_processs_setting(settings) -> None:  # type: ignore[no-untyped-def]
    """The samples were pulled at 5-minute buckets; a process configured for 1-minute ones
    (another shell, another environment) reads them at the width they were stored at."""
    make_fleet(("acme", "eu-west"))
    _requests("acme", _buckets(T0, 12, 300.0))
    TelemetryPull.objects.create(
        window_start=T0,
        window_end=T0 + timedelta(hours=1),
        bucket_s=BUCKET_S,
        status=RunStatus.SUCCEEDED,
    )
    settings.HEADROOM_TELEMETRY_BUCKET_S = 60

    assert stored_bucket_s() == BUCKET_S
    history = request_rate_history(start=T0, end=T0 + timedelta(hours=1))

    assert history == {("acme", "chat-70b", "eu-west"): ([T0.timestamp()], [1.0])}


def test_without_pulls_the_configured_width_is_read_where_stored_else_the_newest(
    settings,  # type: ignore[no-untyped-def]
) -> None:
    make_fleet(("acme", "eu-west"))
    assert stored_bucket_s() == BUCKET_S  # nothing stored: the setting
    _requests("acme", {T0 + timedelta(minutes=m): 60.0 for m in range(60)}, bucket_s=60)
    assert stored_bucket_s() == 60  # only 1-minute series: those
    _requests("acme", _buckets(T0, 12, 300.0))
    assert stored_bucket_s() == BUCKET_S  # the configured width is stored too: it


def test_two_weeks_of_samples_make_a_replan_size_the_demand_from_the_forecast() -> None:
    load_support_assistant()
    end = forecast_anchor(timezone.now())
    days = 16
    first = end - timedelta(days=days)
    # keystone-mutual, us-east: a daily wave around 2 requests/s (peak about 2.9) with 10%
    # noise, 5-minute buckets, plus today's buckets, which the forecast must not see.
    rng = np.random.default_rng(5)
    samples = {}
    for i in range((days + 1) * 288):
        at = first + timedelta(seconds=i * BUCKET_S)
        wave = 1.0 + 0.45 * math.sin(2 * math.pi * (at.hour + at.minute / 60) / 24)
        samples[at] = round(2.0 * wave * BUCKET_S * rng.lognormal(0.0, 0.1))
    key = SeriesKey("keystone-mutual", "chat-70b", "us-east", "", metrics.REQUESTS, "")
    store({key: samples}, BUCKET_S)

    run = run_replan()

    assert run.status == ReplanRun.Status.SUCCEEDED, run.error
    assert run.plan is not None
    sized = [d for d in run.plan.problem["demands"] if "forecast" in d]
    assert {d["tenant"] for d in sized} == {"keystone-mutual"}
    assert len(sized) == 3  # its three workload classes, one series
    for demand in sized:
        info = demand["forecast"]
        assert info["source"] == "telemetry"
        assert info["history_hours"] == days * 24
        assert info["low_requests_per_s"] < demand["requests_per_s"]
    # Declared: 2.0 requests/s at peak. The forecast plans the premium tier's p95 of the
    # wave's peak hours, about 2.9.
    total = sum(d["requests_per_s"] for d in sized)
    assert 2.6 < total < 3.4
    assert run.plan.forecast_band["sources"] == {"declared": 18, "telemetry": 3}


def test_a_replan_in_a_process_configured_for_another_width_still_sizes_from_telemetry(
    settings,  # type: ignore[no-untyped-def]
) -> None:
    load_support_assistant()
    end = forecast_anchor(timezone.now())
    days = 16
    first = end - timedelta(days=days)
    samples = {first + timedelta(seconds=i * BUCKET_S): 2.0 * BUCKET_S for i in range(days * 288)}
    key = SeriesKey("keystone-mutual", "chat-70b", "us-east", "", metrics.REQUESTS, "")
    store({key: samples}, BUCKET_S)
    TelemetryPull.objects.create(
        window_start=first, window_end=end, bucket_s=BUCKET_S, status=RunStatus.SUCCEEDED
    )
    settings.HEADROOM_TELEMETRY_BUCKET_S = 60  # the re-planning process's own setting

    run = run_replan()

    assert run.status == ReplanRun.Status.SUCCEEDED, run.error
    assert run.plan is not None
    assert run.plan.forecast_band["sources"] == {"declared": 18, "telemetry": 3}


def test_arrivals_are_the_rate_where_the_engine_counts_them() -> None:
    """A queue building: 360 requests arrive per bucket and 300 finish. A label set with an
    arrival signal is forecast from its arrivals; one without, from its finished requests."""
    make_fleet(("acme", "eu-west"), ("globex", "eu-west"))
    _requests("acme", _buckets(T0, 12, 300.0))
    _requests("acme", _buckets(T0, 12, 360.0), metric=metrics.ARRIVALS)
    _requests("globex", _buckets(T0, 12, 300.0))

    history = request_rate_history(start=T0, end=T0 + timedelta(hours=1))
    assert history[("acme", "chat-70b", "eu-west")][1] == [pytest.approx(1.2)]
    assert history[("globex", "chat-70b", "eu-west")][1] == [pytest.approx(1.0)]
