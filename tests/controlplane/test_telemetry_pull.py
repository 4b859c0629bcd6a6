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
from controlplane.policies.models import WorkloadProfile
from controlplane.telemetry.derive import derivation_follows_pull, workload_profiles_derive
from controlplane.telemetry.metrics import (
    ARRIVALS,
    E2E_HIST,
    KV_CAPACITY,
    KV_USAGE,
    METRICS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    REQUESTS,
    VLLM_CACHE_INFO,
)
from controlplane.telemetry.models import (
    PULL_PARTIAL,
    RunStatus,
    TelemetryPull,
    TelemetrySample,
    TelemetrySeries,
)
from controlplane.telemetry.prometheus import (
    PrometheusBadResponse,
    PrometheusQueryError,
    PrometheusTooManySamples,
    PrometheusUnavailable,
)
from controlplane.telemetry.pull import telemetry_pull
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
    for family in METRICS:
        if family.name == ARRIVALS:
            count += 1  # vLLM V1's arrivals: the TTFT histogram's count, stored again
            continue
        if family.name == KV_CAPACITY:
            # vLLM's cache_config_info: two engines with 2,000 blocks of 16 tokens.
            info = {**labels, "num_gpu_blocks": "2000", "block_size": "16", "swap_space": "4"}
            fake.add(VLLM_CACHE_INFO, info, lambda t: 2.0)
            count += 1
            continue
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
    pull = telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert pull.status == RunStatus.SUCCEEDED
    assert pull.queries == len(prom.queries) == 6 * 3 + 11
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
    # vLLM's KV capacity from cache_config_info's labels: 2,000 blocks × 16 tokens per engine.
    # (The info gauge has no model label: it is joined from the target's running gauge.)
    assert (
        "count by (tenant, model_name, region, num_gpu_blocks, block_size) "
        "(max_over_time(vllm:cache_config_info[300s]) * on (instance, job) "
        "group_left (model_name) group by (instance, job, model_name) "
        "(vllm:num_requests_running))" in queries
    )
    capacity = TelemetrySeries.objects.get(metric=KV_CAPACITY)
    assert set(capacity.samples.values_list("value", flat=True)) == {32000.0}
    # Arrivals: the first tokens, the TTFT histogram's count.
    assert (
        "sum by (tenant, model_name, region) (increase(vllm:time_to_first_token_seconds_count[300s]))"
        in queries
    )
    assert TelemetrySeries.objects.get(metric=ARRIVALS).samples.count() == 12


def test_the_same_window_twice_stores_nothing_the_second_time(prom: FakePrometheus) -> None:
    series = _register(prom, LABELS)
    end = T0 + timedelta(hours=1)
    telemetry_pull(window_start=T0, window_end=end)
    again = telemetry_pull(window_start=T0, window_end=end)
    assert again.status == RunStatus.SUCCEEDED
    assert again.samples_fetched == series * 12
    assert again.samples_stored == 0
    assert TelemetrySample.objects.count() == series * 12
    assert TelemetrySeries.objects.count() == series


def test_an_overlapping_window_stores_only_the_new_buckets(prom: FakePrometheus) -> None:
    series = _register(prom, LABELS)
    telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    later = telemetry_pull(
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
    first = telemetry_pull(now=T0 + timedelta(minutes=7))
    # 12:07 − 60 s lag = 12:06, on the grid 12:05; the first pull looks back an hour.
    assert (first.window_start, first.window_end) == (
        T0 + timedelta(minutes=5) - timedelta(hours=1),
        T0 + timedelta(minutes=5),
    )
    second = telemetry_pull(now=T0 + timedelta(minutes=17))
    assert (second.window_start, second.window_end) == (
        T0 + timedelta(minutes=5),
        T0 + timedelta(minutes=15),
    )
    assert second.samples_stored == second.samples_fetched > 0


def test_unknown_label_values_and_unlabelled_series_are_reported_not_fatal(
    prom: FakePrometheus,
) -> None:
    series = _register(prom, LABELS)
    prom.add(REQUESTS, {**LABELS, "tenant": "ghost-tenant"}, lambda t: 5.0)
    # No tenant label: the pool's series (real vLLM's), stored with an empty tenant.
    prom.add(REQUESTS, {"model_name": "chat-70b", "region": "eu-west"}, lambda t: 5.0)
    # No region label: nothing to file it under.
    prom.add(REQUESTS, {"tenant": "acme", "model_name": "chat-70b"}, lambda t: 5.0)
    pull = telemetry_pull(window_start=T0, window_end=T0 + timedelta(minutes=10))
    assert pull.status == RunStatus.SUCCEEDED
    assert pull.unknown_labels == ["tenant: ghost-tenant"]
    assert pull.skipped_series == 1
    assert pull.samples_stored == (series + 2) * 2
    assert TelemetrySeries.objects.filter(tenant="ghost-tenant").exists()
    assert TelemetrySeries.objects.filter(tenant="", metric=REQUESTS).exists()


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
        telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
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
    prom.series[E2E_HIST + "_count"] = []
    prom.add(E2E_HIST + "_count", LABELS, lambda t: -3.0)
    with pytest.raises(PrometheusBadResponse, match="not a finite non-negative"):
        telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
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
        telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
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
        telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
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
        REQUESTS,
        {"customer": "northwind", "model": "chat-70b", "site": "eu-west", "kind": "chat"},
        lambda t: 7.0,
    )
    pull = telemetry_pull(window_start=T0, window_end=T0 + timedelta(minutes=5))
    assert "sum by (customer, model, site, kind) (increase(vllm:request_success_total[300s]))" in {
        q["query"] for q in prom.queries
    }
    assert pull.samples_stored == 1
    stored = TelemetrySeries.objects.get()
    assert (stored.tenant, stored.region, stored.workload_class) == ("northwind", "eu-west", "chat")


def test_an_empty_window_is_a_successful_pull_of_nothing(prom: FakePrometheus) -> None:
    pull = telemetry_pull(window_start=T0, window_end=T0)
    assert pull.status == RunStatus.SUCCEEDED and pull.queries == 0 and pull.samples_stored == 0


def test_a_pull_answered_with_warnings_is_partial_and_the_next_pull_completes_its_window(
    prom: FakePrometheus,
) -> None:
    # A federated store is down: Prometheus answers with what it has (a third of the
    # requests) and says so in warnings.
    complete = {"value": False}
    prom.add(REQUESTS, LABELS, lambda t: 2400.0 if complete["value"] else 800.0)
    prom.warnings = ["remote store eu-west-2 unavailable"]
    first = telemetry_pull(now=T0 + timedelta(minutes=7))
    assert first.status == PULL_PARTIAL
    assert "eu-west-2 unavailable" in first.error
    assert not derivation_follows_pull(pull=first)
    assert set(TelemetrySample.objects.values_list("value", flat=True)) == {800.0}

    # The store is back. The next scheduled pull starts at the partial window again and
    # overwrites what the partial answer stored; its own new buckets are stored too.
    prom.warnings = []
    complete["value"] = True
    second = telemetry_pull(now=T0 + timedelta(minutes=17))
    assert second.status == RunStatus.SUCCEEDED
    assert second.window_start == first.window_start
    assert second.window_end == T0 + timedelta(minutes=15)
    assert set(TelemetrySample.objects.values_list("value", flat=True)) == {2400.0}
    assert TelemetrySample.objects.count() == 14  # 12 buckets of the first window + 2 new
    assert second.samples_stored == 14  # 12 overwritten, 2 inserted
    assert derivation_follows_pull(pull=second)

    # Completed: the pull after continues from the last success, and stores nothing twice.
    third = telemetry_pull(now=T0 + timedelta(minutes=17))
    assert third.window_start == second.window_end
    assert third.samples_stored == 0


def test_too_many_samples_splits_the_range_and_stores_the_same(prom: FakePrometheus) -> None:
    _register(prom, LABELS)
    whole = telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    asked = len(prom.queries)
    TelemetrySample.objects.all().delete()
    prom.queries.clear()
    prom.max_points = 5  # 12 buckets per query: split into 6 + 6, then 3 + 3 + 3 + 3
    split = telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert split.status == RunStatus.SUCCEEDED
    assert split.samples_stored == whole.samples_stored
    refused = [q for q in prom.queries if (float(q["end"]) - float(q["start"])) / W + 1 > 5]
    assert len(refused) == 3 * asked  # 12 and twice 6 steps, per query
    assert len(prom.queries) == 7 * asked


def test_a_query_still_too_large_at_one_step_fails_the_pull(prom: FakePrometheus) -> None:
    _register(prom, LABELS)
    prom.max_points = 0
    with pytest.raises(PrometheusTooManySamples):
        telemetry_pull(window_start=T0, window_end=T0 + timedelta(minutes=10))
    assert TelemetryPull.objects.get().status == RunStatus.FAILED
    assert not TelemetrySample.objects.exists()


def test_early_v1_prefix_cache_names_are_a_fallback(prom: FakePrometheus) -> None:
    pool = {"model_name": "chat-70b", "region": "eu-west", "engine": "0"}
    prom.add("vllm:gpu_prefix_cache_queries_total", pool, lambda t: 1000.0)
    prom.add("vllm:gpu_prefix_cache_hits_total", pool, lambda t: 250.0)
    telemetry_pull(window_start=T0, window_end=T0 + timedelta(minutes=10))
    stored = dict(TelemetrySeries.objects.values_list("metric", "tenant"))
    assert stored == {PREFIX_QUERIES: "", PREFIX_HITS: ""}
    asked = [q["query"] for q in prom.queries]
    assert any("vllm:gpu_prefix_cache_hits_total" in q for q in asked)


@pytest.mark.parametrize(
    ("engine", "kv_name", "requests_name", "absent"),
    [
        # V0 has no prefix-cache counters, SGLang no preemption counter: neither is asked for.
        ("vllm-v0", "vllm:gpu_cache_usage_perc", "vllm:request_success_total", "prefix_cache"),
        ("sglang", "sglang:token_usage", "sglang:num_requests_total", "preempt"),
    ],
)
def test_each_engine_is_read_under_its_own_names(
    prom: FakePrometheus, settings: Any, engine: str, kv_name: str, requests_name: str, absent: str
) -> None:
    settings.HEADROOM_TELEMETRY_ENGINE = engine
    pool = {"model_name": "chat-70b", "region": "eu-west"}
    prom.add(kv_name, pool, lambda t: 0.5)
    prom.add(requests_name, pool, lambda t: 300.0)
    telemetry_pull(window_start=T0, window_end=T0 + timedelta(minutes=10))
    stored = set(TelemetrySeries.objects.values_list("metric", flat=True))
    assert stored == {KV_USAGE, REQUESTS}
    asked = {q["query"].split("(")[-1].split("[")[0] for q in prom.queries}
    assert kv_name in asked and requests_name in asked
    assert not any(absent in q for q in asked)


def test_a_gateway_that_answers_none_of_its_names_is_named_on_the_pull(
    prom: FakePrometheus, settings: Any
) -> None:
    """LiteLLM's counters under names the map does not list (here: none at all) leave every
    gateway query empty: the pull says which names it asked for, and the pool's demand is not
    filed under the pool's tenant, who may have sent nothing."""
    settings.HEADROOM_TELEMETRY_GATEWAY = "litellm"
    pool = {"model_name": "chat-70b", "region": "eu-west"}
    _register(prom, pool)
    prom.add("litellm_input_tokens_metric_tokens", {**pool, "api_key_alias": "x"}, lambda t: 1.0)
    end = T0 + timedelta(hours=1)
    pull = telemetry_pull(window_start=T0, window_end=end)
    assert pull.status == RunStatus.SUCCEEDED
    assert (
        "gateway:prompt_tokens_total: litellm_input_tokens_metric_total | "
        "litellm_input_tokens_total" in pull.missing_metrics
    )
    assert "gateway:requests_total: litellm_proxy_total_requests_metric_total" in (
        pull.missing_metrics
    )
    assert "the gateway (litellm) answered none of its metrics" in pull.error
    assert "litellm_output_tokens_total" in pull.error
    assert pull.summary()["missing_metrics"] == pull.missing_metrics
    assert not TelemetrySeries.objects.filter(metric__startswith="gateway:").exists()

    run = workload_profiles_derive(window_start=T0, window_end=end)
    assert run.status == RunStatus.SUCCEEDED
    assert run.profiles_created == 0
    assert not WorkloadProfile.objects.filter(tenant__name="northwind").exists()
    assert {
        "series": "/chat-70b/eu-west/observed",
        "reason": "the gateway (litellm) measured no tenant in this pool",
    } in run.skipped


def test_an_engine_that_answers_none_of_its_names_is_named_on_the_pull(
    prom: FakePrometheus, settings: Any
) -> None:
    settings.HEADROOM_TELEMETRY_ENGINE = "sglang"
    _register(prom, LABELS)  # vLLM V1's names: SGLang's map finds none of them
    pull = telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert pull.status == RunStatus.SUCCEEDED and pull.samples_stored == 0
    assert "the engine's metrics (sglang) answered no series" in pull.error
    assert "vllm:request_success_total: sglang:num_requests_total" in pull.missing_metrics


def test_a_complete_pull_names_no_missing_metric(prom: FakePrometheus) -> None:
    _register(prom, LABELS)
    pull = telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert pull.missing_metrics == [] and pull.error == ""


def test_kv_capacity_is_the_engines_mean_of_blocks_times_block_size(
    prom: FakePrometheus,
) -> None:
    """Two cache configurations in one pool (3 engines of 1,000 × 16, 1 of 4,000 × 16) give
    the mean per engine; an engine that has not profiled yet ("None" blocks) is left out."""
    pool = {**LABELS}
    prom.add(VLLM_CACHE_INFO, {**pool, "num_gpu_blocks": "1000", "block_size": "16"}, lambda t: 3.0)
    prom.add(VLLM_CACHE_INFO, {**pool, "num_gpu_blocks": "4000", "block_size": "16"}, lambda t: 1.0)
    prom.add(VLLM_CACHE_INFO, {**pool, "num_gpu_blocks": "None", "block_size": "16"}, lambda t: 5.0)
    pull = telemetry_pull(window_start=T0, window_end=T0 + timedelta(hours=1))
    assert pull.status == RunStatus.SUCCEEDED
    capacity = TelemetrySeries.objects.get(metric=KV_CAPACITY)
    assert set(capacity.samples.values_list("value", flat=True)) == {(3 * 16000 + 64000) / 4}
