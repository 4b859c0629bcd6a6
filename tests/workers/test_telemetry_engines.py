"""Each engine's name map against its real exposition, through the real Prometheus binary.

Four expositions generated with ``prometheus_client`` from the engines' own metric
definitions (``tests/workers/engine_expositions.py``: vLLM V1, vLLM V0, SGLang, TGI) and two
LiteLLM proxies (before and after its token counters' rename) serve the same request stream; Prometheus scrapes them every second and adds the region and zone as target
labels, as a scrape config does for a pool (the engines themselves label only ``model_name``
and ``engine``). Headroom pulls each with its name map and derives the pools' figures.
Skipped when no ``prometheus`` binary is on PATH (CI installs it).
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controlplane.fleet.models import LlmModel, Region
from controlplane.telemetry.conf import PoolSignalThresholds
from controlplane.telemetry.derive import workload_profiles_derive
from controlplane.telemetry.metrics import KV_USAGE, PREFIX_HITS, REQUESTS
from controlplane.telemetry.models import (
    ObservedWorkload,
    PoolSignalAlert,
    RunStatus,
    TelemetryPull,
    TelemetrySeries,
)
from controlplane.telemetry.pool_signals import (
    SignalReference,
    pool_signal_check,
    pool_signals_measure,
)
from controlplane.telemetry.pull import telemetry_pull
from tests.controlplane.telemetry_fakes import make_fleet
from tests.workers.engine_expositions import (
    Engine,
    LiteLlm,
    Sglang,
    Stream,
    Tgi,
    VllmV0,
    VllmV1,
    serve_exposition,
)
from tests.workers.live_services import PROMETHEUS, free_port, start_prometheus, stop, wait_for_url

BUCKET_S = 5
MEASURE_S = 3 * BUCKET_S

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary on PATH (CI installs it)"),
]


def _wait_for_targets(prom_url: str, targets: int, deadline_s: float) -> None:
    """Until every target has been scraped twice ("ready" comes before the first scrape)."""
    query = urllib.parse.urlencode({"query": "count_over_time(up[1m])"})
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            with urllib.request.urlopen(f"{prom_url}/api/v1/query?{query}", timeout=2) as answer:
                result = json.loads(answer.read())["data"]["result"]
            if len(result) == targets and min(float(r["value"][1]) for r in result) >= 2:
                return
        except (urllib.error.URLError, OSError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"Prometheus at {prom_url} did not scrape {targets} targets in time")


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[str, list[Engine]]]:
    """(Prometheus URL, the engines), all serving, with a request stream running."""
    served: list[Engine] = [
        VllmV1("chat-70b-v1"),
        VllmV0("chat-70b-v0"),
        Sglang("chat-70b-sglang"),
        Tgi("chat-70b-tgi"),
        # LiteLLM in front of the V1 pool, its tenants told apart by API key alias; in front
        # of the V0 pool a LiteLLM of a release before the token counters' rename.
        LiteLlm("chat-70b-v1", {"northwind": 0.6, "fabrikam": 0.4}),
        LiteLlm("chat-70b-v0", {"contoso": 0.7, "northwind": 0.3}, release="before-13271"),
    ]
    ports = [free_port() for _ in served]
    stoppers = [serve_exposition(engine, port) for engine, port in zip(served, ports, strict=True)]
    prom_port = free_port()
    labels = {"region": "eu-west", "zone": "eu-west-1a"}
    prom = start_prometheus(
        port=prom_port,
        workdir=tmp_path,
        targets=[
            (port, {**labels, **engine.target_labels})
            for engine, port in zip(served, ports, strict=True)
        ],
    )
    prom_url = f"http://127.0.0.1:{prom_port}"
    try:
        with Stream(served, per_tick=20):
            wait_for_url(prom_url + "/-/ready", 30, prom)
            _wait_for_targets(prom_url, len(served), 30)
            yield prom_url, served
    finally:
        stop(prom)
        for stopper in stoppers:
            stopper()


def _grid(moment: float) -> datetime:
    return datetime.fromtimestamp(math.floor(moment / BUCKET_S) * BUCKET_S, tz=UTC)


@pytest.mark.django_db
def test_each_engines_exposition_reads_through_prometheus_under_its_name_map(
    engines: tuple[str, list[Engine]], settings: Any
) -> None:
    prom_url, served = engines
    settings.HEADROOM_PROMETHEUS_URL = prom_url
    settings.HEADROOM_TELEMETRY_BUCKET_S = BUCKET_S
    settings.HEADROOM_TELEMETRY_PEAK_S = BUCKET_S
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 50
    settings.HEADROOM_TELEMETRY_GATEWAY = "litellm"
    make_fleet(("northwind", "eu-west"), ("fabrikam", "eu-west"), ("contoso", "eu-west"))
    *served, gateway, old_gateway = served
    assert isinstance(gateway, LiteLlm) and isinstance(old_gateway, LiteLlm)
    for engine in served:
        LlmModel.objects.create(
            name=engine.model, parameters_billions=70, layers=80, kv_heads=8, head_dim=128
        )
    began = time.time()
    time.sleep(max(0.0, _grid(began).timestamp() + BUCKET_S + MEASURE_S + 2 - time.time()))
    start, end = _grid(began + BUCKET_S), _grid(time.time() - 2)

    for engine in served:
        settings.HEADROOM_TELEMETRY_ENGINE = engine.name
        pull = telemetry_pull(window_start=start, window_end=end)
        assert pull.status == RunStatus.SUCCEEDED, pull.error
        assert pull.unknown_labels == [] and pull.skipped_series == 0, engine.name
    run = workload_profiles_derive(window_start=start, window_end=end)
    assert run.status == RunStatus.SUCCEEDED, run.error

    # Every pool's engine series carry the model and the region from the target labels, no
    # tenant; the gateway's carry the tenant.
    for engine in served:
        stored = TelemetrySeries.objects.filter(model=engine.model).exclude(
            metric__startswith="gateway:"
        )
        assert {(s.tenant, s.region) for s in stored} == {("", "eu-west")}, engine.name
        assert stored.filter(metric=REQUESTS).exists()
        assert stored.filter(metric=KV_USAGE).exists() == (engine.name != "tgi")
    assert set(
        TelemetrySeries.objects.filter(metric__startswith="gateway:").values_list(
            "tenant", "model", "region"
        )
    ) == {
        ("northwind", "chat-70b-v1", "eu-west"),
        ("fabrikam", "chat-70b-v1", "eu-west"),
        ("contoso", "chat-70b-v0", "eu-west"),
        ("northwind", "chat-70b-v0", "eu-west"),
    }
    v1, v0, sglang, tgi = (ObservedWorkload.objects.get(model=e.model, tenant="") for e in served)
    pools = (v1, v0, sglang, tgi)

    # The same stream on all four: ~200 requests/s, arriving (vLLM's and SGLang's first
    # tokens, TGI's tgi_request_count) and finishing; the same mean lengths (_sum/_count).
    window_s = (end - start).total_seconds()
    for observed in pools:
        assert observed.rate_source == "arrivals", observed.model
        assert observed.mean_requests_per_s == pytest.approx(200, rel=0.2), observed.model
        assert observed.requests == pytest.approx(200 * window_s, rel=0.2)
    truth = served[0].truth
    true_prompt = truth.prompt_tokens / truth.requests
    true_output = truth.output_tokens / truth.requests
    for observed in pools:
        assert observed.prompt_tokens_mean == pytest.approx(true_prompt, rel=0.1)
        assert observed.output_tokens_mean == pytest.approx(true_output, rel=0.1)
        assert observed.prompt_tokens_mean == pytest.approx(v1.prompt_tokens_mean, rel=0.05)

    # Inter-token latency: V1 0.10's and V0's time_per_output_token_seconds (the fallback of
    # inter_token_latency_seconds), SGLang's inter_token_latency_seconds, TGI's mean time per
    # token; queue time: V1's request_queue_time_seconds, SGLang's queue_time_seconds, TGI's
    # tgi_request_queue_duration.
    true_itl = truth.itl_s / truth.requests
    true_queue = truth.queue_s / truth.requests
    for observed in pools:
        assert observed.itl_mean_s == pytest.approx(true_itl, rel=0.05), observed.model
        assert observed.itl_p95_s is not None and observed.itl_p95_s > observed.itl_mean_s
    for observed in (v1, sglang, tgi):
        assert observed.queue_time_mean_s == pytest.approx(true_queue, rel=0.1), observed.model
        assert observed.queue_time_p95_s is not None
        assert observed.queue_time_p95_s > observed.queue_time_mean_s

    # KV capacity per engine: V1's cache_config_info (1,520 blocks × 16 tokens), SGLang's
    # max_total_num_tokens, TGI's tgi_batch_max_total_tokens.
    for observed, engine in ((v1, served[0]), (sglang, served[2]), (tgi, served[3])):
        assert observed.kv_cache_capacity_tokens == pytest.approx(engine.kv_capacity_tokens)
    assert v1.kv_cache_capacity_tokens == 24_320

    # KV usage: V1's kv_cache_usage_perc, V0's gpu_cache_usage_perc, SGLang's token_usage;
    # TGI exposes none: unknown.
    for observed, engine in zip((v1, v0, sglang), served[:3], strict=True):
        assert observed.kv_cache_usage_mean == pytest.approx(engine.kv_usage), engine.name
    assert tgi.kv_cache_usage_mean is None
    # TGI has no TTFT histogram and no prefix cache counters: unknown, not zero. Its input
    # length buckets end at max_input_tokens (4,095): the tail beyond is censored.
    assert tgi.ttft_p95_s is None and tgi.prefix_cache_hit_rate is None
    assert {"prompt_tokens_p99"} <= set(tgi.censored)
    assert tgi.residence_s == pytest.approx(v1.residence_s, rel=0.1)

    # Prefix-cache hits: V1's counters and SGLang's cached tokens give ~30%; V0 has no
    # counters: unknown, not 0.
    true_hit = truth.cached_tokens / truth.prompt_tokens
    assert v1.prefix_cache_hit_rate == pytest.approx(true_hit, abs=0.02)
    assert sglang.prefix_cache_hit_rate == pytest.approx(true_hit, abs=0.02)
    assert v0.prefix_cache_hit_rate is None
    assert not TelemetrySeries.objects.filter(model=served[1].model, metric=PREFIX_HITS).exists()

    # vLLM's prompt buckets end at 2,000 (1-2-5 up to max_model_len 4,096): p95 and p99 lie
    # beyond, so they are censored, never read as 2,000 tokens. SGLang's buckets reach 1.1M.
    for observed in (v1, v0):
        assert {"prompt_tokens_p95", "prompt_tokens_p99"} <= set(observed.censored)
        assert observed.prompt_tokens_p99 == pytest.approx(2000.0)
    assert sglang.censored == []
    assert sglang.prompt_tokens_p99 > 4000

    # LiteLLM attributes each pool's demand to its tenants: each one's rate and mean lengths
    # are its own (60/40 and 70/30 of the stream), under the current names on the V1 pool and
    # under the names before the rename on the V0 pool; the pools' series are their capacity
    # signals.
    for proxy, pool in ((gateway, v1), (old_gateway, v0)):
        for alias, share in proxy.share.items():
            tenant = ObservedWorkload.objects.get(model=proxy.model, tenant=alias)
            assert tenant.profile is not None and tenant.profile.pool_tenants == []
            assert tenant.mean_requests_per_s == pytest.approx(
                share * pool.mean_requests_per_s, rel=0.1
            )
            own = proxy.tenants[alias]
            assert tenant.prompt_tokens_mean == pytest.approx(
                own.prompt_tokens / own.requests, rel=0.1
            )
            assert tenant.output_tokens_mean == pytest.approx(
                own.output_tokens / own.requests, rel=0.1
            )
            assert tenant.kv_cache_usage_mean is None  # a pool's figure, not a tenant's
        assert {
            "series": f"/{proxy.model}/eu-west/observed",
            "reason": "pool capacity signals only",
        } in (run.skipped)
    assert ObservedWorkload.objects.get(
        model="chat-70b-v1", tenant="northwind"
    ).prefix_cache_hit_rate == pytest.approx(v1.prefix_cache_hit_rate)
    # No gateway in front of the SGLang pool: its demand is nobody's, never its first tenant's.
    assert {
        "series": "/chat-70b-sglang/eu-west/observed",
        "reason": "the gateway (litellm) measured no tenant in this pool",
    } in run.skipped
    assert sglang.profile is None
    # Every name the maps ask for was answered, the gateway's under one name or the other.
    pulls = list(TelemetryPull.objects.all())
    assert all(
        "answered none" not in p.error and "answered no series" not in p.error for p in pulls
    )

    # The pool signal alerts read the same signals per pool (every label set of the pool
    # together): against a figure of 15 ms per token and one needing 12 sequences of 2,560
    # tokens (30,720), V1's engines (p95 ITL of its 15-35 ms, 24,320 tokens of KV cache, an
    # exponential 0.4 s queue: p95 about 1.2 s) raise all three.
    signals = pool_signals_measure(bucket_s=BUCKET_S, start=start, end=end, min_observations=50)
    measured = signals[("chat-70b-v1", "eu-west")]
    assert measured.itl_p95_s == pytest.approx(v1.itl_p95_s)
    assert measured.queue_time_p95_s == pytest.approx(v1.queue_time_p95_s)
    assert measured.kv_capacity_tokens == 24_320
    assert measured.queue_time_p95_s is not None and measured.queue_time_p95_s > 1.0
    raised = pool_signal_check(
        model=LlmModel.objects.get(name="chat-70b-v1"),
        region=Region.objects.get(name="eu-west"),
        measured=measured,
        references={
            PoolSignalAlert.Kind.ITL_P95: SignalReference(0.015),
            PoolSignalAlert.Kind.KV_CAPACITY: SignalReference(30_720.0),
        },
        thresholds=PoolSignalThresholds(),
        now=end,
    )
    assert sorted(a.kind for a in raised) == sorted(PoolSignalAlert.Kind.values)
    # V0's exposition has no queue-time histogram: not measured, no alert either way.
    assert signals[("chat-70b-v0", "eu-west")].queue_time_p95_s is None
