"""Workload profiles derived from stored samples: hand-computed percentiles, versions written
only on change, too little traffic and unknown label values reported rather than fatal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.fleet.models import WorkloadClass
from controlplane.pipeline import tasks
from controlplane.plans.demand import _pool_wide
from controlplane.policies.models import WorkloadProfile
from controlplane.telemetry import derive, metrics
from controlplane.telemetry.api import TelemetryProfileSerializer
from controlplane.telemetry.models import (
    OBSERVED_CLASS,
    ObservedWorkload,
    ProfileDerivation,
    RunStatus,
)
from controlplane.telemetry.selectors import pool_profiles
from controlplane.telemetry.storage import SeriesKey
from tests.controlplane.telemetry_fakes import (
    Fleet,
    Traffic,
    make_fleet,
    steady,
    store,
    traffic_samples,
)

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
W = 300

# Per bucket: cumulative counts 10 ≤ 500, 40 ≤ 1,000, 80 ≤ 2,000, 94 ≤ 5,000, 99 ≤ 10,000, 100.
PROMPT = {"500.0": 10, "1000.0": 40, "2000.0": 80, "5000.0": 94, "10000.0": 99, "+Inf": 100}
# Outputs: 20 ≤ 50, 60 ≤ 100, 90 ≤ 200, 100 ≤ 500, 100 in all.
OUTPUT = {"50.0": 20, "100.0": 60, "200.0": 90, "500.0": 100, "+Inf": 100}
# TTFT: 50 ≤ 0.5 s, 90 ≤ 1 s, 100 ≤ 2.5 s.
TTFT = {"0.5": 50, "1.0": 90, "2.5": 100, "+Inf": 100}


@pytest.fixture
def fleet(settings: Any) -> Fleet:
    settings.HEADROOM_TELEMETRY_BUCKET_S = W
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 100
    return make_fleet(("northwind", "eu-west"), ("contoso", "us-east"))


def _known_buckets(requests: list[float]) -> list[Traffic]:
    """Five buckets with the histograms above (100 observations each) and these request counts."""
    return [
        Traffic(
            requests=n,
            prompt_buckets=PROMPT,
            prompt_sum=150_000.0,  # mean 1,500 tokens
            output_buckets=OUTPUT,
            output_sum=11_000.0,  # mean 110 tokens
            prefix_queries=150_000.0,
            prefix_hits=52_500.0,  # 35% of prompt tokens
            ttft_buckets=TTFT,
            e2e_sum=420.0,  # mean 4.2 s
            kv_usage=0.2 + 0.1 * i,
        )
        for i, n in enumerate(requests)
    ]


def test_profile_from_known_histograms_matches_the_hand_computation(fleet: Fleet) -> None:
    # Request counts per 300 s bucket: rates 1, 2, 3, 4, 8 req/s.
    traffic = _known_buckets([300, 600, 900, 1200, 2400])
    store(traffic_samples("northwind", "chat-70b", "eu-west", T0, W, traffic), W)
    run = derive.workload_profiles_derive(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert run.status == RunStatus.SUCCEEDED
    assert (run.profiles_created, run.profiles_unchanged) == (1, 0)

    profile = WorkloadProfile.objects.get()
    assert profile.source == WorkloadProfile.Source.TELEMETRY
    assert profile.version == 1
    assert profile.workload_class.name == OBSERVED_CLASS
    assert (profile.tenant.name, profile.model.name, profile.region) == (
        "northwind",
        "chat-70b",
        fleet.eu,
    )
    # Rates 1, 2, 3, 4, 8 in 300 s buckets, wider than the 60 s peak window: the peak is the
    # busiest bucket's rate.
    assert profile.peak_requests_per_s == pytest.approx(8.0)
    # Summed over five buckets: 50 ≤ 500, 200 ≤ 1,000, 400 ≤ 2,000, 470 ≤ 5,000, 495 ≤ 10,000.
    # p50 rank 250 in (1000, 2000]: 1000 + 1000 × 50/200 = 1,250.
    assert profile.prompt_tokens_p50 == pytest.approx(1250.0)
    # p95 rank 475 in (5000, 10000]: 5000 + 5000 × 5/25 = 6,000.
    assert profile.prompt_tokens_p95 == pytest.approx(6000.0)
    # p99 rank 495 at the top of (5000, 10000]: 10,000.
    assert profile.prompt_tokens_p99 == pytest.approx(10000.0)
    assert profile.prompt_tokens_mean == pytest.approx(1500.0)
    # Outputs: p50 rank 250 in (50, 100] (100 → 300): 50 + 50 × 150/200 = 87.5;
    # p95 rank 475 in (200, 500] (450 → 500): 200 + 300 × 25/50 = 350; p99 rank 495: 200 + 300
    # × 45/50 = 470.
    assert profile.output_tokens_p50 == pytest.approx(87.5)
    assert profile.output_tokens_p95 == pytest.approx(350.0)
    assert profile.output_tokens_p99 == pytest.approx(470.0)
    assert profile.output_tokens_mean == pytest.approx(110.0)
    assert profile.prefix_cache_hit_rate == pytest.approx(0.35)
    assert profile.residence_s == pytest.approx(4.2)

    observed = ObservedWorkload.objects.get(derivation=run)
    assert observed.profile == profile
    assert observed.requests == 5400
    assert observed.buckets == 5
    assert observed.mean_requests_per_s == pytest.approx(5400 / 1500)
    # TTFT summed: 250 ≤ 0.5, 450 ≤ 1, 500 ≤ 2.5; p95 rank 475 in (1, 2.5]: 1 + 1.5 × 25/50.
    assert observed.ttft_p95_s == pytest.approx(1.75)
    assert observed.kv_cache_usage_mean == pytest.approx(0.4)


def test_the_task_derives_over_the_window_it_is_given(fleet: Fleet) -> None:
    store(traffic_samples("northwind", "chat-70b", "eu-west", T0, W, _known_buckets([600] * 4)), W)
    summary = tasks.derive_profiles.apply(
        kwargs={"window_start": T0.isoformat(), "window_end": (T0 + timedelta(hours=1)).isoformat()}
    ).get()
    assert summary["status"] == "succeeded" and summary["profiles_created"] == 1
    assert WorkloadProfile.objects.get().peak_requests_per_s == pytest.approx(2.0)


def test_a_new_version_only_when_the_figures_moved(fleet: Fleet) -> None:
    week = [steady(requests_per_s=2, bucket_s=W, prompt_mean=1500, output_mean=100)] * 4
    store(traffic_samples("northwind", "chat-70b", "eu-west", T0, W, week), W)
    end = T0 + timedelta(seconds=4 * W)
    derive.workload_profiles_derive(window_start=T0, window_end=end)
    again = derive.workload_profiles_derive(window_start=T0, window_end=end)
    assert (again.profiles_created, again.profiles_unchanged) == (0, 1)
    assert WorkloadProfile.objects.count() == 1
    assert ObservedWorkload.objects.filter(derivation=again).get().profile is not None

    # An hour later output lengths grew 10%: version 2, the first kept as it was.
    later = T0 + timedelta(hours=1)
    grown = [steady(requests_per_s=2, bucket_s=W, prompt_mean=1500, output_mean=110)] * 4
    store(traffic_samples("northwind", "chat-70b", "eu-west", later, W, grown), W)
    run = derive.workload_profiles_derive(
        window_start=later, window_end=later + timedelta(seconds=4 * W)
    )
    assert run.profiles_created == 1
    versions = list(WorkloadProfile.objects.order_by("version"))
    assert [v.version for v in versions] == [1, 2]
    assert versions[0].output_tokens_mean == pytest.approx(100)
    assert versions[1].output_tokens_mean == pytest.approx(110)
    assert {v.source for v in versions} == {WorkloadProfile.Source.TELEMETRY}


def test_unknown_tenants_models_and_regions_are_reported_not_fatal(fleet: Fleet) -> None:
    busy = [steady(requests_per_s=2, bucket_s=W, prompt_mean=1500, output_mean=100)] * 2
    store(traffic_samples("northwind", "chat-70b", "eu-west", T0, W, busy), W)
    store(traffic_samples("ghost", "chat-70b", "eu-west", T0, W, busy), W)
    store(traffic_samples("contoso", "mystery-8b", "ap-south", T0, W, busy), W)
    run = derive.workload_profiles_derive(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert run.status == RunStatus.SUCCEEDED
    assert run.unknown_labels == ["model: mystery-8b", "region: ap-south", "tenant: ghost"]
    assert run.profiles_created == 1
    assert {s["series"] for s in run.skipped} == {
        "ghost/chat-70b/eu-west/observed",
        "contoso/mystery-8b/ap-south/observed",
    }
    # What was measured is kept for every label set, known or not.
    assert ObservedWorkload.objects.filter(derivation=run).count() == 3
    assert ObservedWorkload.objects.get(tenant="ghost").profile is None


def test_too_little_traffic_makes_no_profile(fleet: Fleet) -> None:
    quiet = [steady(requests_per_s=0.1, bucket_s=W, prompt_mean=1500, output_mean=100)] * 2
    store(traffic_samples("northwind", "chat-70b", "eu-west", T0, W, quiet), W)
    run = derive.workload_profiles_derive(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert run.status == RunStatus.SUCCEEDED and run.profiles_created == 0
    assert run.skipped == [
        {
            "series": "northwind/chat-70b/eu-west/observed",
            "reason": "60 requests in the window, fewer than 100",
        }
    ]
    assert not WorkloadProfile.objects.exists()


def test_a_class_label_files_profiles_under_that_class(fleet: Fleet, settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_LABELS = {"class": "request_class"}
    WorkloadClass.objects.create(name="policy-question")
    busy = [steady(requests_per_s=2, bucket_s=W, prompt_mean=1300, output_mean=80)] * 2
    store(traffic_samples("northwind", "chat-70b", "eu-west", T0, W, busy, "policy-question"), W)
    store(traffic_samples("northwind", "chat-70b", "eu-west", T0, W, busy, "karaoke"), W)
    run = derive.workload_profiles_derive(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert WorkloadProfile.objects.get().workload_class.name == "policy-question"
    assert run.unknown_labels == ["workload class: karaoke"]
    assert not WorkloadClass.objects.filter(name=OBSERVED_CLASS).exists()


def test_default_window_ends_at_the_last_pull(fleet: Fleet, settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_PROFILE_WINDOW_S = 1800
    run = derive.workload_profiles_derive(now=T0)
    assert (run.window_start, run.window_end) == (T0 - timedelta(minutes=30), T0)
    assert ProfileDerivation.objects.get().status == RunStatus.SUCCEEDED


def test_a_percentile_beyond_the_top_bucket_is_censored_not_the_bound(fleet: Fleet) -> None:
    # vLLM's token buckets end at the context length: here 5,000, with 3% of prompts above.
    clipped = {"1000.0": 40, "2000.0": 80, "5000.0": 97, "+Inf": 100}
    traffic = [
        Traffic(
            requests=600,
            prompt_buckets=clipped,
            prompt_sum=180_000.0,
            output_buckets=OUTPUT,
            output_sum=11_000.0,
        )
    ] * 3
    store(traffic_samples("northwind", "chat-70b", "eu-west", T0, W, traffic), W)
    derive.workload_profiles_derive(window_start=T0, window_end=T0 + timedelta(hours=1))
    profile = WorkloadProfile.objects.get()
    # p95 (rank 95 of 100 per bucket) lies inside (2,000, 5,000]; p99 lies above 5,000: it is
    # at least 5,000, and the profile says so.
    assert profile.prompt_tokens_p95 == pytest.approx(2000 + 3000 * 15 / 17)
    assert profile.prompt_tokens_p99 == pytest.approx(5000.0)
    assert profile.censored == ["prompt_tokens_p99"]
    observed = ObservedWorkload.objects.get()
    assert observed.censored == ["prompt_tokens_p99"]
    shown = TelemetryProfileSerializer(profile).data
    assert shown["censored"] == ["prompt_tokens_p99"]
    assert shown["lower_bounds"] == {"prompt_tokens_p99": "≥ 5,000"}


def test_absent_prefix_cache_counters_leave_the_hit_rate_unknown_and_raise_no_drift(
    fleet: Fleet,
) -> None:
    # First a day with the counters (35% hits), then an engine without them (vLLM V0).
    hour = timedelta(hours=1)
    with_cache = [
        steady(requests_per_s=2, bucket_s=W, prompt_mean=1500, output_mean=110, hit_rate=0.35)
    ] * 12
    store(traffic_samples("northwind", "chat-70b", "eu-west", T0, W, with_cache), W)
    derive.workload_profiles_derive(window_start=T0, window_end=T0 + hour)
    samples = traffic_samples("northwind", "chat-70b", "eu-west", T0 + hour, W, with_cache)
    without = {k: v for k, v in samples.items() if "prefix_cache" not in k.metric}
    store(without, W)
    run = derive.workload_profiles_derive(window_start=T0 + hour, window_end=T0 + 2 * hour)
    assert run.alerts_raised == 0
    observed = ObservedWorkload.objects.get(derivation=run)
    assert observed.prefix_cache_hit_rate is None
    # The new version carries the measured hit rate, not 0, and says it is not measured now.
    first, second = WorkloadProfile.objects.order_by("version")
    assert first.unmeasured == [] and second.unmeasured == ["prefix_cache_hit_rate"]
    assert second.prefix_cache_hit_rate == pytest.approx(0.35) == first.prefix_cache_hit_rate


def _declared(fleet: Fleet, tenant: str, rate: float) -> WorkloadProfile:
    chat, _ = WorkloadClass.objects.get_or_create(name="chat")
    return WorkloadProfile.objects.create(
        tenant=fleet.tenants[tenant],
        model=fleet.model,
        workload_class=chat,
        peak_requests_per_s=rate,
        prompt_tokens_p50=1000,
        prompt_tokens_mean=1200,
        prompt_tokens_p95=3000,
        prompt_tokens_p99=5000,
        output_tokens_p50=100,
        output_tokens_mean=120,
        output_tokens_p95=300,
        output_tokens_p99=500,
    )


def test_a_pool_whose_tenants_cannot_be_told_apart_is_one_demand(settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_BUCKET_S = W
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 100
    fleet = make_fleet(("northwind", "eu-west"), ("fabrikam", "eu-west"), ("contoso", "us-east"))
    for name in ("northwind", "fabrikam", "contoso"):
        _declared(fleet, name, 1.0)
    # Real vLLM: the pool's series carry no tenant.
    store(traffic_samples("", "chat-70b", "eu-west", T0, W, _known_buckets([600] * 5)), W)
    run = derive.workload_profiles_derive(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert run.status == RunStatus.SUCCEEDED and run.unknown_labels == []
    profile = WorkloadProfile.objects.get(source=WorkloadProfile.Source.TELEMETRY)
    assert profile.tenant.name == "fabrikam"
    assert profile.pool_tenants == ["fabrikam", "northwind"]
    assert profile.peak_requests_per_s == pytest.approx(2.0)
    # The pool is sized from that one demand: northwind's declared profile is in it already.
    assert pool_profiles(model=fleet.model, region=fleet.eu) == [profile]
    demands = [
        {"tenant": t, "model": "chat-70b", "home_region": r}
        for t, r in (("fabrikam", "eu-west"), ("northwind", "eu-west"), ("contoso", "us-east"))
    ]
    kept, notes = _pool_wide(demands)
    assert [d["tenant"] for d in kept] == ["fabrikam", "contoso"]
    assert notes == [
        "pool chat-70b in eu-west: telemetry cannot tell tenants fabrikam, northwind apart; "
        "planned as one demand (fabrikam/chat-70b/observed@eu-west)"
    ]


def test_a_pool_with_no_tenant_anywhere_is_skipped_with_the_reason(fleet: Fleet) -> None:
    store(traffic_samples("", "chat-70b", "eu-west", T0, W, _known_buckets([600] * 5)), W)
    run = derive.workload_profiles_derive(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert run.skipped == [
        {
            "series": "/chat-70b/eu-west/observed",
            "reason": "no tenant label and no tenant has a profile in this pool",
        }
    ]
    assert ObservedWorkload.objects.get().tenant == ""


def test_a_pool_of_one_tenant_is_that_tenants_traffic(settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_BUCKET_S = W
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 100
    fleet = make_fleet(("northwind", "eu-west"), ("contoso", "us-east"))
    _declared(fleet, "northwind", 1.0)
    store(traffic_samples("", "chat-70b", "eu-west", T0, W, _known_buckets([600] * 5)), W)
    derive.workload_profiles_derive(window_start=T0, window_end=T0 + timedelta(hours=1))
    profile = WorkloadProfile.objects.get(source=WorkloadProfile.Source.TELEMETRY)
    assert (profile.tenant.name, profile.pool_tenants) == ("northwind", [])


def test_rates_come_from_arrivals_and_latency_and_capacity_signals_are_observed(
    fleet: Fleet,
) -> None:
    """A queue building up: 1,000 requests arrive per bucket, 600 finish. The rates are the
    arrivals'; inter-token latency and queue time come from their histograms (means from
    _sum / _count, p95 from the buckets); the KV capacity is the engines' mean."""
    traffic = _known_buckets([600, 600, 600, 600, 600])
    samples = traffic_samples("northwind", "chat-70b", "eu-west", T0, W, traffic)

    def put(metric: str, value: float, le: str = "") -> None:
        key = SeriesKey("northwind", "chat-70b", "eu-west", "", metric, le)
        for i in range(5):
            samples.setdefault(key, {})[T0 + timedelta(seconds=i * W)] = value

    put(metrics.ARRIVALS, 1000.0)
    # ITL per bucket: 600 observations, 300 ≤ 20 ms, 570 ≤ 50 ms, all ≤ 100 ms; mean 25 ms.
    for le, count in (("0.02", 300), ("0.05", 570), ("0.1", 600), ("+Inf", 600)):
        put(metrics.ITL_HIST + "_bucket", count, le)
    put(metrics.ITL_HIST + "_sum", 600 * 0.025)
    put(metrics.ITL_HIST + "_count", 600)
    # Queue time: 500 ≤ 1 s, 600 ≤ 5 s; mean 1.5 s.
    for le, count in (("1.0", 500), ("5.0", 600), ("+Inf", 600)):
        put(metrics.QUEUE_HIST + "_bucket", count, le)
    put(metrics.QUEUE_HIST + "_sum", 600 * 1.5)
    put(metrics.QUEUE_HIST + "_count", 600)
    put(metrics.KV_CAPACITY, 32000.0)
    store(samples, W)
    run = derive.workload_profiles_derive(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert run.status == RunStatus.SUCCEEDED, run.error

    observed = ObservedWorkload.objects.get(derivation=run)
    assert observed.rate_source == ObservedWorkload.RateSource.ARRIVALS
    assert observed.requests == 3000  # finished
    assert observed.mean_requests_per_s == pytest.approx(1000 / W)
    assert observed.peak_requests_per_s == pytest.approx(1000 / W)
    assert WorkloadProfile.objects.get().peak_requests_per_s == pytest.approx(1000 / W)
    assert observed.itl_mean_s == pytest.approx(0.025)
    # p95 rank 2,850 of 3,000 at the top of (0.02, 0.05]: 0.05.
    assert observed.itl_p95_s == pytest.approx(0.05)
    assert observed.queue_time_mean_s == pytest.approx(1.5)
    # p95 rank 2,850 in (1, 5] (2,500 → 3,000): 1 + 4 × 350/500 = 3.8.
    assert observed.queue_time_p95_s == pytest.approx(3.8)
    assert observed.kv_cache_capacity_tokens == pytest.approx(32000.0)


def test_without_an_arrival_signal_the_rates_are_the_completions(fleet: Fleet) -> None:
    store(traffic_samples("northwind", "chat-70b", "eu-west", T0, W, _known_buckets([600] * 5)), W)
    run = derive.workload_profiles_derive(window_start=T0, window_end=T0 + timedelta(hours=1))
    observed = ObservedWorkload.objects.get(derivation=run)
    assert observed.rate_source == ObservedWorkload.RateSource.COMPLETIONS
    assert observed.mean_requests_per_s == pytest.approx(600 / W)
    assert (observed.itl_mean_s, observed.queue_time_p95_s, observed.kv_cache_capacity_tokens) == (
        None,
        None,
        None,
    )
