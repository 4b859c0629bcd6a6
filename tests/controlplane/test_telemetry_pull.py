"""Pulling telemetry from a stand-in Prometheus: what is asked, what is stored (once), and what
happens when Prometheus is down, slow, refuses the query or answers garbage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery.exceptions import Retry

from controlplane.pipeline import tasks
from controlplane.telemetry import services
from controlplane.telemetry.models import RunStatus, TelemetryPull, TelemetrySample, TelemetrySeries
from controlplane.telemetry.prometheus import (
    PrometheusBadResponse,
    PrometheusQueryError,
    PrometheusUnavailable,
)
from tests.controlplane.telemetry_fakes import FakePrometheus, fake_prometheus, make_fleet
from workers.celery import app

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 3, 7, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(hours=1)
W = 300
LABELS = {"tenant": "northwind", "model_name": "chat-70b", "region": "eu-west"}
PROMPT_LE = ("500.0", "1000.0", "2000.0", "5000.0", "+Inf")


def _register(fake: FakePrometheus, labels: dict[str, str]) -> int:
    """Every pulled metric for one label set; returns the number of series registered."""
    count = 0
    for family in services.METRICS:
        if family.kind == "histogram":
            for i, le in enumerate(PROMPT_LE):
                fake.add(
                    family.name + "_bucket", {**labels, "le": le}, lambda t, i=i: 600.0 * (i + 1)
                )
                count += 1
            fake.add(family.name + "_sum", labels, lambda t: 4.5e6)
            fake.add(family.name + "_count", labels, lambda t: 3000.0)
            count += 2
        else:
            fake.add(family.name, labels, lambda t: 2400.0 if t < 1e12 else 0.0)
            count += 1
    return count


@pytest.fixture
def prom(settings: Any) -> Iterator[FakePrometheus]:
    with fake_prometheus() as fake:
        settings.HEADROOM_PROMETHEUS_URL = fake.url
        settings.HEADROOM_PROMETHEUS_RETRIES = 0
        settings.HEADROOM_PROMETHEUS_BACKOFF_S = 0
        settings.HEADROOM_PROMETHEUS_TIMEOUT_S = 2
        settings.HEADROOM_TELEMETRY_BUCKET_S = W
        settings.HEADROOM_TELEMETRY_LAG_S = 60
        settings.HEADROOM_TELEMETRY_LOOKBACK_S = 3600
        make_fleet(("northwind", "eu-west"))
        yield fake


def test_pull_asks_one_range_query_per_series_name_on_the_bucket_grid(prom: FakePrometheus) -> None:
    series = _register(prom, LABELS)
    pull = services.telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert pull.status == RunStatus.SUCCEEDED
    assert pull.queries == len(prom.queries) == 4 * 3 + 9
    queries = {q["query"] for q in prom.queries}
    assert (
        "sum by (tenant, model_name, region) (increase(vllm:prompt_tokens_total[300s]))" in queries
    )
    assert (
        "sum by (tenant, model_name, region, le) "
        "(increase(vllm:request_prompt_tokens_bucket[300s]))" in queries
    )
    assert (
        "avg by (tenant, model_name, region) (avg_over_time(vllm:kv_cache_usage_perc[300s]))"
        in queries
    )
    # The point at 12:05 covers 12:00–12:05: the first bucket.
    assert {(q["start"], q["end"], q["step"]) for q in prom.queries} == {
        (f"{(T0 + timedelta(seconds=W)).timestamp():.3f}", f"{T0.timestamp() + 3600:.3f}", "300")
    }
    assert pull.samples_fetched == pull.samples_stored == series * 12
    assert TelemetrySeries.objects.count() == series
    assert TelemetrySample.objects.count() == series * 12
    first = TelemetrySample.objects.order_by("bucket_start").first()
    assert first is not None and first.bucket_start == T0
    bucket = TelemetrySeries.objects.get(metric="vllm:request_prompt_tokens_bucket", le="+Inf")
    assert bucket.tenant == "northwind" and bucket.bucket_s == W
    assert set(bucket.samples.values_list("value", flat=True)) == {3000.0}


def test_the_same_window_twice_stores_nothing_the_second_time(prom: FakePrometheus) -> None:
    series = _register(prom, LABELS)
    end = T0 + timedelta(hours=1)
    services.telemetry_pull(window_start=T0, window_end=end)
    again = services.telemetry_pull(window_start=T0, window_end=end)
    assert again.status == RunStatus.SUCCEEDED
    assert again.samples_fetched == series * 12
    assert again.samples_stored == 0
    assert TelemetrySample.objects.count() == series * 12
    assert TelemetrySeries.objects.count() == series


def test_an_overlapping_window_stores_only_the_new_buckets(prom: FakePrometheus) -> None:
    series = _register(prom, LABELS)
    services.telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    later = services.telemetry_pull(
        window_start=T0 + timedelta(minutes=30), window_end=T0 + timedelta(minutes=90)
    )
    assert later.samples_fetched == series * 12
    assert later.samples_stored == series * 6
    assert TelemetrySample.objects.count() == series * 18
    starts = set(TelemetrySample.objects.values_list("bucket_start", flat=True))
    assert starts == {T0 + timedelta(seconds=W * i) for i in range(18)}


def test_default_window_ends_a_lag_ago_and_continues_from_the_last_success(
    prom: FakePrometheus,
) -> None:
    _register(prom, LABELS)
    first = services.telemetry_pull(now=T0 + timedelta(minutes=7))
    # 12:07 − 60 s lag = 12:06, on the grid 12:05; the first pull looks back an hour.
    assert (first.window_start, first.window_end) == (
        T0 + timedelta(minutes=5) - timedelta(hours=1),
        T0 + timedelta(minutes=5),
    )
    second = services.telemetry_pull(now=T0 + timedelta(minutes=17))
    assert (second.window_start, second.window_end) == (
        T0 + timedelta(minutes=5),
        T0 + timedelta(minutes=15),
    )
    assert second.samples_stored == second.samples_fetched > 0


def test_unknown_label_values_and_unlabelled_series_are_reported_not_fatal(
    prom: FakePrometheus,
) -> None:
    series = _register(prom, LABELS)
    prom.add(services.REQUESTS, {**LABELS, "tenant": "ghost-tenant"}, lambda t: 5.0)
    prom.add(services.REQUESTS, {"model_name": "chat-70b", "region": "eu-west"}, lambda t: 5.0)
    pull = services.telemetry_pull(window_start=T0, window_end=T0 + timedelta(minutes=10))
    assert pull.status == RunStatus.SUCCEEDED
    assert pull.unknown_labels == ["tenant: ghost-tenant"]
    assert pull.skipped_series == 1
    assert pull.samples_stored == (series + 1) * 2
    assert TelemetrySeries.objects.filter(tenant="ghost-tenant").exists()


@pytest.mark.parametrize(
    "answer",
    [
        (200, b"<html>proxy error</html>"),
        (200, b'{"status": "success", "data": {"resultType": "vector", "result": []}}'),
    ],
)
def test_garbage_is_reported_and_nothing_is_stored(
    prom: FakePrometheus, answer: tuple[int, bytes]
) -> None:
    _register(prom, LABELS)
    prom.always = answer
    with pytest.raises(PrometheusBadResponse):
        services.telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    pull = TelemetryPull.objects.get()
    assert pull.status == RunStatus.FAILED
    assert pull.error.startswith("PrometheusBadResponse:")
    assert pull.samples_stored == 0 and pull.finished_at is not None
    assert not TelemetrySample.objects.exists()
    assert not TelemetrySeries.objects.exists()


def test_garbage_in_a_late_query_leaves_nothing_from_the_earlier_ones(
    prom: FakePrometheus,
) -> None:
    _register(prom, LABELS)
    # The last metric asked for answers a negative increase: every earlier query succeeded.
    prom.series[services.E2E_HIST + "_count"] = []
    prom.add(services.E2E_HIST + "_count", LABELS, lambda t: -3.0)
    with pytest.raises(PrometheusBadResponse, match="not a finite non-negative"):
        services.telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert len(prom.queries) == 21
    assert not TelemetrySample.objects.exists()
    assert TelemetryPull.objects.get().status == RunStatus.FAILED


def test_points_off_the_bucket_grid_are_garbage(prom: FakePrometheus) -> None:
    body = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": LABELS, "values": [[T0.timestamp() + 301, "1"]]}],
        },
    }
    prom.always = (200, json.dumps(body).encode())
    with pytest.raises(PrometheusBadResponse, match="off the 300 s grid"):
        services.telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert not TelemetrySample.objects.exists()


@pytest.fixture
def eager_retries() -> Iterator[None]:
    """Run retries in-process as a worker would: without propagating, ``apply`` re-applies a
    retried task at once (no countdown) until it succeeds or runs out of retries."""
    before = app.conf.task_eager_propagates
    app.conf.task_eager_propagates = False
    try:
        yield
    finally:
        app.conf.task_eager_propagates = before


def test_prometheus_down_the_task_schedules_a_retry_with_backoff(prom: FakePrometheus) -> None:
    prom.always = (503, b"busy")
    with pytest.raises(Retry) as excinfo:
        tasks.pull.apply(kwargs={"window_start": T0.isoformat(), "window_end": T1.isoformat()})
    assert isinstance(excinfo.value.exc, PrometheusUnavailable)
    # Exponential backoff from 30 s with full jitter: the first retry waits at most 30 s.
    assert 0 <= float(excinfo.value.when) <= 30
    assert TelemetryPull.objects.get().status == RunStatus.FAILED


@pytest.mark.usefixtures("eager_retries")
def test_prometheus_down_the_task_retries_reports_every_attempt_and_stores_nothing(
    prom: FakePrometheus,
) -> None:
    _register(prom, LABELS)
    prom.always = (503, b"busy")
    result = tasks.pull.apply(kwargs={"window_start": T0.isoformat(), "window_end": T1.isoformat()})
    assert result.failed() and isinstance(result.result, PrometheusUnavailable)
    pulls = list(TelemetryPull.objects.order_by("attempt"))
    assert [p.attempt for p in pulls] == list(range(1, tasks.PULL_MAX_RETRIES + 2))
    assert {p.status for p in pulls} == {RunStatus.FAILED}
    assert all("did not answer" in p.error for p in pulls)
    assert not TelemetrySample.objects.exists()


@pytest.mark.usefixtures("eager_retries")
def test_the_task_recovers_when_prometheus_comes_back(prom: FakePrometheus) -> None:
    series = _register(prom, LABELS)
    prom.script = [(502, b"bad gateway")]  # the first query of the first attempt
    result = tasks.pull.apply(
        kwargs={"window_start": T0.isoformat(), "window_end": T1.isoformat()}
    ).get()
    assert result["status"] == "succeeded" and result["attempt"] == 2
    assert result["samples_stored"] == series * 12
    attempts = list(TelemetryPull.objects.order_by("attempt").values_list("attempt", "status"))
    assert attempts == [(1, RunStatus.FAILED), (2, RunStatus.SUCCEEDED)]
    assert TelemetrySample.objects.count() == series * 12


def test_a_slow_prometheus_times_out_and_is_reported(prom: FakePrometheus, settings: Any) -> None:
    _register(prom, LABELS)
    settings.HEADROOM_PROMETHEUS_TIMEOUT_S = 0.2
    prom.delay_s = 0.6
    with pytest.raises(PrometheusUnavailable):
        services.telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    pull = TelemetryPull.objects.get()
    assert pull.status == RunStatus.FAILED and "did not answer" in pull.error
    assert not TelemetrySample.objects.exists()


def test_a_refused_query_is_reported_once_and_not_retried(prom: FakePrometheus) -> None:
    prom.always = (400, json.dumps({"status": "error", "error": "parse error"}).encode())
    with pytest.raises(PrometheusQueryError):
        tasks.pull.apply(kwargs={"window_start": T0.isoformat(), "window_end": T1.isoformat()})
    pull = TelemetryPull.objects.get()
    assert pull.status == RunStatus.FAILED and "parse error" in pull.error


def test_label_names_come_from_settings(prom: FakePrometheus, settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_LABELS = "tenant=customer,model=model,region=site,class=kind"
    prom.add(
        services.REQUESTS,
        {"customer": "northwind", "model": "chat-70b", "site": "eu-west", "kind": "chat"},
        lambda t: 7.0,
    )
    pull = services.telemetry_pull(window_start=T0, window_end=T0 + timedelta(minutes=5))
    assert "sum by (customer, model, site, kind) (increase(vllm:request_success_total[300s]))" in {
        q["query"] for q in prom.queries
    }
    assert pull.samples_stored == 1
    stored = TelemetrySeries.objects.get()
    assert (stored.tenant, stored.region, stored.workload_class) == ("northwind", "eu-west", "chat")


def test_an_empty_window_is_a_successful_pull_of_nothing(prom: FakePrometheus) -> None:
    pull = services.telemetry_pull(window_start=T0, window_end=T0)
    assert pull.status == RunStatus.SUCCEEDED and pull.queries == 0 and pull.samples_stored == 0
