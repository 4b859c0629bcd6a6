"""Telemetry's read endpoints: every role reads, nobody writes, filters and the samples view."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.fleet.models import WorkloadClass
from controlplane.plans.assumptions import pool_signal_alerts_check
from controlplane.plans.impact import pool_drift_alerts_price
from controlplane.policies.models import Tenant, WorkloadProfile
from controlplane.telemetry import derive, metrics
from controlplane.telemetry.models import DriftAlert, TelemetryPull, TelemetrySeries
from controlplane.telemetry.storage import SeriesKey
from tests.controlplane.telemetry_fakes import (
    Fleet,
    make_fleet,
    make_plannable,
    steady,
    store,
    traffic_samples,
)

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
W = 300
ENDPOINTS = (
    "pulls",
    "derivations",
    "observations",
    "profiles",
    "series",
    "alerts",
    "pool-alerts",
    "pool-signal-alerts",
)


@pytest.fixture
def data(settings: Any) -> Fleet:
    """Two derivations over stored samples (the second with longer prompts: one alert)."""
    settings.HEADROOM_TELEMETRY_BUCKET_S = W
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 100
    fleet = make_plannable(make_fleet(("northwind", "eu-west")))
    TelemetryPull.objects.create(
        window_start=T0, window_end=T0 + timedelta(hours=2), bucket_s=W, status="succeeded"
    )
    for hour, prompt in ((0, 1500.0), (1, 2700.0)):
        start = T0 + timedelta(hours=hour)
        bucket = steady(requests_per_s=8, bucket_s=W, prompt_mean=prompt, output_mean=100)
        store(traffic_samples("northwind", "chat-70b", "eu-west", start, W, [bucket] * 12), W)
        if hour == 1:
            # The pool's engines queue requests for 2-3 s (p95 2.75 s): a pool signal alert.
            queue = {"1.0": 0.0, "2.0": 0.5, "3.0": 1.0, "+Inf": 1.0}
            store(
                {
                    SeriesKey("", "chat-70b", "eu-west", "", metrics.QUEUE_HIST + suffix, le): {
                        start + timedelta(seconds=i * W): value * 2400 for i in range(12)
                    }
                    for suffix, le, value in [
                        *(("_bucket", le, share) for le, share in queue.items()),
                        ("_count", "", 1.0),
                        ("_sum", "", 2.5),
                    ]
                },
                W,
            )
        run = derive.workload_profiles_derive(
            window_start=start, window_end=start + timedelta(hours=1)
        )
        # As the pipeline does after a derivation: the pool's drift priced by re-solving, its
        # engines' signals checked.
        pool_drift_alerts_price(derivation=run)
        pool_signal_alerts_check(derivation=run)
    # A declared profile, which the telemetry profile list leaves out.
    WorkloadProfile.objects.create(
        tenant=Tenant.objects.get(name="northwind"),
        model=fleet.model,
        workload_class=WorkloadClass.objects.create(name="policy-question"),
        peak_requests_per_s=1,
        prompt_tokens_p50=1100,
        prompt_tokens_mean=1500,
        prompt_tokens_p95=4000,
        prompt_tokens_p99=6900,
        output_tokens_p50=70,
        output_tokens_mean=100,
        output_tokens_p95=280,
        output_tokens_p99=500,
    )
    return fleet


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_every_role_reads_every_list_and_record_and_nobody_writes(
    data: Fleet, api_client_for: Any, endpoint: str
) -> None:
    for role in (POLICY_ADMIN, FINANCE, VIEWER):
        client = api_client_for(role)
        listing = client.get(f"/api/telemetry/{endpoint}/")
        assert listing.status_code == 200, (role, listing.content)
        body = listing.json()
        assert body["count"] >= 1
        first = body["results"][0]
        detail = client.get(f"/api/telemetry/{endpoint}/{first['id']}/")
        assert detail.status_code == 200
        assert detail.json() == first
    for role in ("no-role", "anonymous"):
        assert api_client_for(role).get(f"/api/telemetry/{endpoint}/").status_code in (401, 403)
    admin = api_client_for(POLICY_ADMIN)
    assert admin.post(f"/api/telemetry/{endpoint}/", {}, format="json").status_code == 405
    url = f"/api/telemetry/{endpoint}/{first['id']}/"
    assert admin.patch(url, {}, format="json").status_code == 405
    assert admin.delete(url).status_code == 405
    assert api_client_for(VIEWER).post(f"/api/telemetry/{endpoint}/", {}).status_code == 403


def test_profiles_lists_telemetry_versions_only(data: Fleet, api_client_for: Any) -> None:
    body = api_client_for(VIEWER).get("/api/telemetry/profiles/?tenant__name=northwind").json()
    assert [(p["version"], p["source"]) for p in body["results"]] == [
        (2, "telemetry"),
        (1, "telemetry"),
    ]
    assert body["results"][0]["prompt_tokens_mean"] == pytest.approx(2700)
    assert body["results"][0]["workload_class"] == "observed"
    assert body["results"][0]["region"] == "eu-west"


def test_alerts_filter_and_show_the_replica_impact(data: Fleet, api_client_for: Any) -> None:
    client = api_client_for(FINANCE)
    body = client.get("/api/telemetry/alerts/?status=open&kind=prompt-mean").json()
    assert body["count"] == 1
    alert = body["results"][0]
    assert (alert["tenant"], alert["region"], alert["shape"]) == (
        "northwind",
        "eu-west",
        "chat-70b/gpu80x2",
    )
    assert (alert["replicas_before"], alert["replicas_after"], alert["replica_delta"]) == (
        12,
        15,
        3,
    )
    assert client.get("/api/telemetry/alerts/?status=resolved").json()["count"] == 0
    assert DriftAlert.objects.count() == 1


def test_observations_carry_what_the_profile_does_not(data: Fleet, api_client_for: Any) -> None:
    body = api_client_for(VIEWER).get("/api/telemetry/observations/?tenant=northwind").json()
    assert body["count"] == 2
    latest = body["results"][0]
    assert latest["ttft_p95_s"] is not None and latest["kv_cache_usage_mean"] == pytest.approx(0.2)
    assert latest["requests"] == pytest.approx(8 * W * 12)


def test_samples_of_a_series_between_two_times(data: Fleet, api_client_for: Any) -> None:
    series = TelemetrySeries.objects.get(metric=metrics.REQUESTS)
    client = api_client_for(VIEWER)
    url = f"/api/telemetry/series/{series.pk}/samples/"
    everything = client.get(url).json()
    assert everything["count"] == 24
    start = (T0 + timedelta(minutes=30)).isoformat()
    end = (T0 + timedelta(minutes=45)).isoformat()
    window = client.get(url, {"start": start, "end": end}).json()
    assert [s["bucket_start"] for s in window["results"]] == [
        (T0 + timedelta(minutes=m)).isoformat().replace("+00:00", "Z") for m in (30, 35, 40)
    ]
    assert {s["value"] for s in window["results"]} == {2400.0}
    bad = client.get(url, {"start": "yesterday"})
    assert bad.status_code == 400
    assert "start" in bad.json()["error"]["fields"]


def test_series_filter_by_metric_and_bound(data: Fleet, api_client_for: Any) -> None:
    client = api_client_for(VIEWER)
    body = client.get(
        "/api/telemetry/series/", {"metric": "vllm:request_prompt_tokens_bucket", "le": "+Inf"}
    ).json()
    assert body["count"] == 1
    assert body["results"][0]["tenant"] == "northwind"
