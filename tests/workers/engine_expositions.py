"""Serving engines' Prometheus expositions, generated with ``prometheus_client`` from each
engine's own metric definitions (names, types, help, bucket boundaries, label names), fed by a
synthetic request stream so that a real Prometheus can scrape them.

Definitions copied from (the project's path and version):

- vLLM V1: ``vllm/v1/metrics/loggers.py``, ``PrometheusStatLogger.__init__`` (vLLM 0.10,
  commit 005a810b): labels ``model_name``, ``engine``; ``finished_reason`` on
  ``vllm:request_success``; token histograms on ``build_1_2_5_buckets(max_model_len)``; the
  deprecated ``vllm:gpu_cache_usage_perc`` and ``vllm:gpu_prefix_cache_*`` beside the new names;
  ``vllm:time_per_output_token_seconds`` (0.10's inter-token latency; later releases add
  ``vllm:inter_token_latency_seconds``), ``vllm:request_queue_time_seconds`` and
  ``vllm:cache_config_info`` (``log_metrics_info``: a gauge at 1 labelled with CacheConfig's
  fields as strings, here a subset of them, and ``engine``).
- vLLM V0: ``vllm/engine/metrics.py``, class ``Metrics`` (commit 00c33e81): label
  ``model_name``; no prefix-cache counters; KV usage ``vllm:gpu_cache_usage_perc``.
- SGLang: ``python/sglang/srt/metrics/collector.py``, ``TokenizerMetricsCollector`` (with
  ``collect_tokens_histogram``) and ``SchedulerMetricsCollector`` (commit 00ae9c15): labels
  ``model_name`` and ``engine_type``; ``sglang:inter_token_latency_seconds``,
  ``sglang:queue_time_seconds`` and ``sglang:max_total_num_tokens``.

Inter-token latency is observed once per request (all of a request's tokens share one
latency), which gives the engines' per-token histograms the same mean.
- TGI: ``router/src/server.rs`` (the ``metrics::counter!``/``histogram!`` calls, the bucket
  matchers before ``PrometheusBuilder``, the ``describe_*`` help texts), ``router/src/
  validation.rs`` (``tgi_request_input_length``), ``backends/v3/src/{queue,backend,lib}.rs``
  (``tgi_queue_size``, ``tgi_batch_current_size``, ``tgi_batch_max_total_tokens``), TGI
  3.3.6-dev0 (commit db931fcf), exposed by ``metrics-exporter-prometheus`` 0.15: no labels at
  all (the scrape adds the model and region), counters without a ``_total`` suffix.
- LiteLLM proxy (a gateway, not an engine): ``litellm/integrations/prometheus.py``
  (``PrometheusLogger.__init__``, commit 002de3dd) and the label lists of
  ``litellm/types/integrations/prometheus.py`` (``PrometheusMetricLabels``, commit 02672640):
  ``litellm_proxy_total_requests_metric``, ``litellm_input_tokens_metric`` and
  ``litellm_output_tokens_metric``; with ``release="before-13271"`` the token counters as
  releases before BerriAI/litellm#13271 (merged 2025-08-04) named them,
  ``litellm_input_tokens`` and ``litellm_output_tokens`` (exposed with ``_total``), same labels.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50 … up to ``max_value``."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


@dataclass
class Request:
    prompt: int
    output: int
    cached: int
    ttft_s: float
    e2e_s: float
    itl_s: float = 0.02
    queue_s: float = 0.1


@dataclass
class Truth:
    """What the engine served, summed as the stream goes (for the test's expectations)."""

    requests: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    itl_s: float = 0.0  # summed over requests
    queue_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Engine:
    """One engine's registry, its serving state, and ``serve`` to observe a request."""

    name = ""
    kv_usage = 0.0
    kv_capacity_tokens: float | None = None  # per engine, as the exposition says it

    def __init__(self, model: str) -> None:
        self.model = model
        self.registry = CollectorRegistry()
        self.truth = Truth()

    @property
    def target_labels(self) -> dict[str, str]:
        """Labels the scrape must add beyond region and zone (an engine without labels)."""
        return {}

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, request: Request) -> None:
        raise NotImplementedError

    def set_state(self, running: int, waiting: int) -> None:
        raise NotImplementedError


class VllmV1(Engine):
    name = "vllm-v1"
    kv_usage = 0.42

    def __init__(self, model: str, max_model_len: int = 4096) -> None:
        super().__init__(model)
        r, labels = self.registry, ["model_name", "engine"]
        self.values = [model, "0"]
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model "
                             "execution batches.", labels, registry=r)  # fmt: skip
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be "
                             "processed.", labels, registry=r)  # fmt: skip
        self.gpu_cache = Gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 "
                               "percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
                               labels, registry=r)  # fmt: skip
        self.kv_cache = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent "
                              "usage.", labels, registry=r)  # fmt: skip
        self.gpu_queries = Counter("vllm:gpu_prefix_cache_queries", "GPU prefix cache queries, "
                                   "in terms of number of queried tokens.", labels, registry=r)  # fmt: skip
        self.gpu_hits = Counter("vllm:gpu_prefix_cache_hits", "GPU prefix cache hits, in terms "
                                "of number of cached tokens.", labels, registry=r)  # fmt: skip
        self.queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of "
                               "number of queried tokens.", labels, registry=r)  # fmt: skip
        self.hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of "
                            "cached tokens.", labels, registry=r)  # fmt: skip
        self.preempted = Counter("vllm:num_preemptions", "Cumulative number of preemption from "
                                 "the engine.", labels, registry=r)  # fmt: skip
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                                     labels, registry=r)  # fmt: skip
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens "
                                         "processed.", labels, registry=r)  # fmt: skip
        self.success = Counter("vllm:request_success", "Count of successfully processed "
                               "requests.", [*labels, "finished_reason"], registry=r)  # fmt: skip
        lengths = build_1_2_5_buckets(max_model_len)
        self.prompt_hist = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens "
                                     "processed.", labels, buckets=lengths, registry=r)  # fmt: skip
        self.output_hist = Histogram("vllm:request_generation_tokens", "Number of generation "
                                     "tokens processed.", labels, buckets=lengths, registry=r)  # fmt: skip
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first "
                              "token in seconds.", labels, buckets=[0.001, 0.005, 0.01, 0.02,
                              0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                              20.0, 40.0, 80.0, 160.0, 640.0, 2560.0], registry=r)  # fmt: skip
        latency_buckets = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request "
                             "latency in seconds.", labels, buckets=latency_buckets,
                             registry=r)  # fmt: skip
        self.tpot = Histogram("vllm:time_per_output_token_seconds", "Histogram of time per "
                              "output token in seconds.", labels, buckets=[0.01, 0.025, 0.05,
                              0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                              10.0, 20.0, 40.0, 80.0], registry=r)  # fmt: skip
        self.queue = Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in "
                               "WAITING phase for request.", labels, buckets=latency_buckets,
                               registry=r)  # fmt: skip
        cache_info = {"block_size": "16", "gpu_memory_utilization": "0.9", "swap_space": "4",
                      "cache_dtype": "auto", "num_gpu_blocks": "1520", "num_cpu_blocks": "2048",
                      "enable_prefix_caching": "True", "engine": "0"}  # fmt: skip
        self.kv_capacity_tokens = 1520 * 16
        Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
              list(cache_info), registry=r).labels(**cache_info).set(1)  # fmt: skip
        for reason in ("stop", "length", "abort"):
            self.success.labels(*self.values, reason)

    def set_state(self, running: int, waiting: int) -> None:
        v = self.values
        self.running.labels(*v).set(running)
        self.waiting.labels(*v).set(waiting)
        self.gpu_cache.labels(*v).set(self.kv_usage)
        self.kv_cache.labels(*v).set(self.kv_usage)

    def serve(self, request: Request) -> None:
        v = self.values
        for counter, value in (
            (self.gpu_queries, request.prompt),
            (self.gpu_hits, request.cached),
            (self.queries, request.prompt),
            (self.hits, request.cached),
            (self.prompt_tokens, request.prompt),
            (self.generation_tokens, request.output),
        ):
            counter.labels(*v).inc(value)
        self.success.labels(*v, "stop" if request.output % 7 else "length").inc()
        self.prompt_hist.labels(*v).observe(request.prompt)
        self.output_hist.labels(*v).observe(request.output)
        self.ttft.labels(*v).observe(request.ttft_s)
        self.e2e.labels(*v).observe(request.e2e_s)
        self.tpot.labels(*v).observe(request.itl_s)
        self.queue.labels(*v).observe(request.queue_s)


class VllmV0(Engine):
    name = "vllm-v0"
    kv_usage = 0.61

    def __init__(self, model: str, max_model_len: int = 4096) -> None:
        super().__init__(model)
        r, labels = self.registry, ["model_name"]
        self.values = [model]
        self.running = Gauge("vllm:num_requests_running", "Number of requests currently running "
                             "on GPU.", labels, registry=r)  # fmt: skip
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be "
                             "processed.", labels, registry=r)  # fmt: skip
        self.swapped = Gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.",
                             labels, registry=r)  # fmt: skip
        self.gpu_cache = Gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 "
                               "percent usage.", labels, registry=r)  # fmt: skip
        self.cpu_cache = Gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 "
                               "percent usage.", labels, registry=r)  # fmt: skip
        self.preempted = Counter("vllm:num_preemptions_total", "Cumulative number of preemption "
                                 "from the engine.", labels, registry=r)  # fmt: skip
        self.prompt_tokens = Counter("vllm:prompt_tokens_total", "Number of prefill tokens "
                                     "processed.", labels, registry=r)  # fmt: skip
        self.generation_tokens = Counter("vllm:generation_tokens_total", "Number of generation "
                                         "tokens processed.", labels, registry=r)  # fmt: skip
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first "
                              "token in seconds.", labels, buckets=[0.001, 0.005, 0.01, 0.02,
                              0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0],
                              registry=r)  # fmt: skip
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end "
                             "request latency in seconds.", labels, buckets=[1.0, 2.5, 5.0,
                             10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0], registry=r)  # fmt: skip
        lengths = build_1_2_5_buckets(max_model_len)
        self.prompt_hist = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens "
                                     "processed.", labels, buckets=lengths, registry=r)  # fmt: skip
        self.output_hist = Histogram("vllm:request_generation_tokens", "Number of generation "
                                     "tokens processed.", labels, buckets=lengths, registry=r)  # fmt: skip
        self.success = Counter("vllm:request_success_total", "Count of successfully processed "
                               "requests.", [*labels, "finished_reason"], registry=r)  # fmt: skip
        self.tpot = Histogram("vllm:time_per_output_token_seconds", "Histogram of time per "
                              "output token in seconds.", labels, buckets=[0.01, 0.025, 0.05,
                              0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5],
                              registry=r)  # fmt: skip

    def set_state(self, running: int, waiting: int) -> None:
        v = self.values
        self.running.labels(*v).set(running)
        self.waiting.labels(*v).set(waiting)
        self.swapped.labels(*v).set(0)
        self.gpu_cache.labels(*v).set(self.kv_usage)
        self.cpu_cache.labels(*v).set(0.0)

    def serve(self, request: Request) -> None:
        v = self.values
        self.prompt_tokens.labels(*v).inc(request.prompt)
        self.generation_tokens.labels(*v).inc(request.output)
        self.success.labels(*v, "stop").inc()
        self.prompt_hist.labels(*v).observe(request.prompt)
        self.output_hist.labels(*v).observe(request.output)
        self.ttft.labels(*v).observe(request.ttft_s)
        self.e2e.labels(*v).observe(request.e2e_s)
        self.tpot.labels(*v).observe(request.itl_s)


# SGLang's defaults (``TokenizerMetricsCollector``).
SGLANG_TOKEN_BUCKETS = [100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000,
                        9000, 10000, 12000, 15000, 20000, 22000, 25000, 30000, 35000, 40000,
                        66000, 99000, 132000, 300000, 600000, 900000, 1100000]  # fmt: skip
SGLANG_TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGLANG_E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400,
                      600, 1200, 1800, 2400]  # fmt: skip
SGLANG_ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035,
                      0.040, 0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000,
                      4.000, 6.000, 8.000]  # fmt: skip
SGLANG_QUEUE_BUCKETS = [0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90,
                        100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600,
                        1800, 2000, 2500, 3000]  # fmt: skip


class Sglang(Engine):
    name = "sglang"
    kv_usage = 0.27

    def __init__(self, model: str) -> None:
        super().__init__(model)
        r, labels = self.registry, ["model_name", "engine_type"]
        self.values = [model, "unified"]
        self.running = Gauge("sglang:num_running_reqs", "The number of running requests.",
                             labels, registry=r)  # fmt: skip
        self.queued = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting "
                            "queue.", labels, registry=r)  # fmt: skip
        self.token_usage = Gauge("sglang:token_usage", "The token usage.", labels, registry=r)
        self.cache_hit_rate = Gauge("sglang:cache_hit_rate", "The prefix cache hit rate.",
                                    labels, registry=r)  # fmt: skip
        self.prompt_tokens = Counter("sglang:prompt_tokens_total", "Number of prefill tokens "
                                     "processed.", labels, registry=r)  # fmt: skip
        self.generation_tokens = Counter("sglang:generation_tokens_total", "Number of generation "
                                         "tokens processed.", labels, registry=r)  # fmt: skip
        self.prompt_hist = Histogram("sglang:prompt_tokens_histogram", "Histogram of prompt "
                                     "token length.", labels, buckets=SGLANG_TOKEN_BUCKETS,
                                     registry=r)  # fmt: skip
        self.output_hist = Histogram("sglang:generation_tokens_histogram", "Histogram of "
                                     "generation token length.", labels,
                                     buckets=SGLANG_TOKEN_BUCKETS, registry=r)  # fmt: skip
        self.cached_tokens = Counter("sglang:cached_tokens_total", "Number of cached prompt "
                                     "tokens.", labels, registry=r)  # fmt: skip
        self.requests = Counter("sglang:num_requests_total", "Number of requests processed.",
                                labels, registry=r)  # fmt: skip
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first "
                              "token in seconds.", labels, buckets=SGLANG_TTFT_BUCKETS,
                              registry=r)  # fmt: skip
        self.e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end "
                             "request latency in seconds", labels, buckets=SGLANG_E2E_BUCKETS,
                             registry=r)  # fmt: skip
        self.itl = Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token "
                             "latency in seconds.", labels, buckets=SGLANG_ITL_BUCKETS,
                             registry=r)  # fmt: skip
        self.queue = Histogram("sglang:queue_time_seconds", "Histogram of queueing time in "
                               "seconds.", labels, buckets=SGLANG_QUEUE_BUCKETS,
                               registry=r)  # fmt: skip
        self.max_tokens = Gauge("sglang:max_total_num_tokens", "Maximum total number of tokens "
                                "in the KV cache pool.", labels, registry=r)  # fmt: skip
        self.kv_capacity_tokens = 180_000

    def set_state(self, running: int, waiting: int) -> None:
        v = self.values
        self.running.labels(*v).set(running)
        self.queued.labels(*v).set(waiting)
        self.token_usage.labels(*v).set(self.kv_usage)
        self.cache_hit_rate.labels(*v).set(0.3)
        self.max_tokens.labels(*v).set(self.kv_capacity_tokens)

    def serve(self, request: Request) -> None:
        v = self.values
        self.prompt_tokens.labels(*v).inc(request.prompt)
        self.generation_tokens.labels(*v).inc(request.output)
        self.cached_tokens.labels(*v).inc(request.cached)
        self.requests.labels(*v).inc()
        self.prompt_hist.labels(*v).observe(request.prompt)
        self.output_hist.labels(*v).observe(request.output)
        self.ttft.labels(*v).observe(request.ttft_s)
        self.e2e.labels(*v).observe(request.e2e_s)
        self.itl.labels(*v).observe(request.itl_s)
        self.queue.labels(*v).observe(request.queue_s)


def tgi_duration_buckets() -> list[float]:
    """TGI's buckets for every ``*duration`` histogram: 35 steps of × 1.5 from 0.0001 s."""
    buckets, value = [], 0.0001
    for _ in range(35):
        value *= 1.5
        buckets.append(value)
    return buckets


class Tgi(Engine):
    """Text Generation Inference's router. Its series carry no label at all: the model comes
    from the scrape (``target_labels``). Counters are written as ``metrics-exporter-prometheus``
    writes them, without ``_total``."""

    name = "tgi"
    kv_usage = 0.0  # TGI exposes no KV usage

    def __init__(
        self,
        model: str,
        max_input_tokens: int = 4095,
        max_total_tokens: int = 4096,
        max_batch_total_tokens: int = 262_144,
    ) -> None:
        super().__init__(model)
        r = self.registry
        self.counters = {"tgi_request_count": 0, "tgi_request_success": 0}
        self.help = {
            "tgi_request_count": "Total number of requests",
            "tgi_request_success": "Number of successful requests",
        }
        durations = tgi_duration_buckets()
        inputs = [max_input_tokens / 100 * (x + 1) for x in range(100)]
        totals = [max_total_tokens / 100 * (x + 1) for x in range(100)]
        self.batch_size = Gauge("tgi_batch_current_size", "Current batch size", registry=r)
        self.queue_size = Gauge("tgi_queue_size", "Current queue size", registry=r)
        self.max_batch_total = Gauge("tgi_batch_max_total_tokens", "", registry=r)
        self.max_batch_total.set(max_batch_total_tokens)
        self.kv_capacity_tokens = max_batch_total_tokens
        self.input_length = Histogram("tgi_request_input_length", "Input token length per "
                                      "request", buckets=inputs, registry=r)  # fmt: skip
        self.generated = Histogram("tgi_request_generated_tokens", "Generated tokens per "
                                   "request", buckets=totals, registry=r)  # fmt: skip
        self.duration = Histogram("tgi_request_duration", "Total time spent processing the "
                                  "request", buckets=durations, registry=r)  # fmt: skip
        self.queue = Histogram("tgi_request_queue_duration", "Time spent in the queue per "
                               "request", buckets=durations, registry=r)  # fmt: skip
        self.per_token = Histogram("tgi_request_mean_time_per_token_duration", "Mean time per "
                                   "token per request", buckets=durations, registry=r)  # fmt: skip

    @property
    def target_labels(self) -> dict[str, str]:
        return {"model_name": self.model}

    def exposition(self) -> bytes:
        lines = [
            f"# HELP {name} {self.help[name]}\n# TYPE {name} counter\n{name} {value}\n"
            for name, value in self.counters.items()
        ]
        return "".join(lines).encode() + generate_latest(self.registry)

    def set_state(self, running: int, waiting: int) -> None:
        self.batch_size.set(running)
        self.queue_size.set(waiting)

    def serve(self, request: Request) -> None:
        self.counters["tgi_request_count"] += 1
        self.counters["tgi_request_success"] += 1
        self.input_length.observe(request.prompt)
        self.generated.observe(request.output)
        self.duration.observe(request.e2e_s)
        self.queue.observe(request.queue_s)
        self.per_token.observe(request.itl_s)


_LITELLM_IDENTITY = ["end_user", "hashed_api_key", "api_key_alias", "team", "team_alias", "user"]


class LiteLlm(Engine):
    """The LiteLLM proxy in front of one pool: each request is a tenant's (an API key alias),
    counted as LiteLLM counts it. ``share`` maps alias → the fraction of requests it sends."""

    name = "litellm"
    # The token counters' names by release: BerriAI/litellm#13271 appended ``_metric``.
    TOKEN_COUNTERS = {
        "current": ("litellm_input_tokens_metric", "litellm_output_tokens_metric"),
        "before-13271": ("litellm_input_tokens", "litellm_output_tokens"),
    }

    def __init__(self, model: str, share: dict[str, float], release: str = "current") -> None:
        super().__init__(model)
        r = self.registry
        input_name, output_name = self.TOKEN_COUNTERS[release]
        self.share = share
        self.tenants: dict[str, Truth] = {alias: Truth() for alias in share}
        self.total_requests = Counter(
            "litellm_proxy_total_requests_metric",
            "Total number of requests made to the proxy server - track number of client side "
            "requests",
            [*_LITELLM_IDENTITY[:3], "requested_model", *_LITELLM_IDENTITY[3:], "status_code"],
            registry=r,
        )
        token_labels = [*_LITELLM_IDENTITY[:3], "model", *_LITELLM_IDENTITY[3:], "requested_model"]
        self.input_tokens = Counter(input_name, "Total number of input tokens from LLM "
                                    "requests", token_labels, registry=r)  # fmt: skip
        self.output_tokens = Counter(output_name, "Total number of output tokens from LLM "
                                     "requests", token_labels, registry=r)  # fmt: skip
        self.counted = 0

    def set_state(self, running: int, waiting: int) -> None:
        return

    def serve(self, request: Request) -> None:
        self.counted += 1
        mark, alias = (self.counted % 100) / 100, next(iter(self.share))
        acc = 0.0
        for name, fraction in self.share.items():
            acc += fraction
            if mark < acc:
                alias = name
                break
        truth = self.tenants[alias]
        truth.requests += 1
        truth.prompt_tokens += request.prompt
        truth.output_tokens += request.output
        key = f"hashed-{alias}"
        self.total_requests.labels("", key, alias, self.model, "", "", "", "200").inc()
        deployment = f"hosted_vllm/{self.model}"
        self.input_tokens.labels("", key, alias, deployment, "", "", "", self.model).inc(
            request.prompt
        )
        self.output_tokens.labels("", key, alias, deployment, "", "", "", self.model).inc(
            request.output
        )


def lognormal_request(rng: random.Random) -> Request:
    """A request with heavy-tailed lengths (mean prompt ≈ 1,900 tokens, a few beyond 4,096)."""
    prompt = max(1, round(rng.lognormvariate(7.2, 0.7)))
    output = max(1, round(rng.lognormvariate(5.0, 0.6)))
    queue = rng.expovariate(1 / 0.4)  # a loaded pool: 0.4 s in the queue on average
    itl = 0.015 + rng.random() * 0.02  # 15–35 ms per token
    return Request(
        prompt,
        output,
        int(prompt * 0.3),
        queue + 0.05 + prompt / 8000,
        queue + 1.0 + output * itl,
        itl_s=itl,
        queue_s=queue,
    )


class Stream:
    """Serves ``per_tick`` requests on every engine each ``tick_s`` until stopped; the same
    requests on each, so that their truths agree."""

    def __init__(
        self,
        engines: list[Engine],
        *,
        per_tick: int,
        tick_s: float = 0.1,
        make: Callable[[random.Random], Request] = lognormal_request,
    ) -> None:
        self.engines, self.per_tick, self.tick_s, self.make = engines, per_tick, tick_s, make
        self.rng = random.Random(13)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.wait(self.tick_s):
            batch = [self.make(self.rng) for _ in range(self.per_tick)]
            for engine in self.engines:
                with engine.truth.lock:
                    for request in batch:
                        engine.serve(request)
                        engine.truth.requests += 1
                        engine.truth.prompt_tokens += request.prompt
                        engine.truth.output_tokens += request.output
                        engine.truth.cached_tokens += request.cached
                        engine.truth.itl_s += request.itl_s
                        engine.truth.queue_s += request.queue_s
                    engine.set_state(running=len(batch), waiting=1)

    def __enter__(self) -> Stream:
        for engine in self.engines:
            engine.set_state(running=0, waiting=0)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)


def serve_exposition(engine: Engine, port: int) -> Callable[[], None]:
    """Serve the engine's registry on 127.0.0.1:``port`` ``/metrics`` in the text format
    (0.0.4); returns the stopper.

    Always the text format, as the engines' own servers send it to a Prometheus of this age:
    ``prometheus_client`` 0.26 answers a scraper asking for OpenMetrics with names escaped
    (``vllm:x`` becomes ``vllm_x``), which no vLLM release pinned.
    """

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with engine.truth.lock:
                body = engine.exposition()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.daemon = True
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
