"""The serving metrics telemetry reads, each engine's names for them, and the range queries.

Headroom stores every series under one canonical name (vLLM V1's exposition names, below) and
reads them from the engine the fleet runs through a **name map**: the canonical name → the
names that engine exposes, tried in order (the first that answers is used; an engine without
the metric has none, and the figure stays unknown, never zero). Every map was checked against
the engine's own source:

- ``vllm-v1``: ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``), vLLM 0.10 (commit
  005a810b). Labels ``model_name`` and ``engine`` on every series, ``finished_reason`` on
  ``vllm:request_success``. The prefix-cache counters were called
  ``vllm:gpu_prefix_cache_{queries,hits}`` before 0.9 (still exposed, deprecated, in 0.9–0.10)
  and the KV gauge ``vllm:gpu_cache_usage_perc``: both are fallbacks. Token histograms use
  ``build_1_2_5_buckets(max_model_len)``: their top finite bound is at most the context length.
- ``vllm-v0``: ``vllm/engine/metrics.py`` (class ``Metrics``), the V0 engine (commit 00c33e81).
  Label ``model_name``; KV usage is ``vllm:gpu_cache_usage_perc``; there are no prefix-cache
  counters (the hit rate stays unknown); the TTFT buckets end at 10 s and the end-to-end ones
  at 60 s.
- ``sglang``: ``python/sglang/srt/metrics/collector.py`` (``TokenizerMetricsCollector`` and
  ``SchedulerMetricsCollector``, commit 00ae9c15). Labels ``model_name`` (and ``engine_type``,
  ``tp_rank`` …). Requests ``sglang:num_requests_total``; prefix-cache hits are
  ``sglang:cached_tokens_total`` over ``sglang:prompt_tokens_total``; KV usage
  ``sglang:token_usage``; the length histograms ``sglang:prompt_tokens_histogram`` and
  ``sglang:generation_tokens_histogram`` exist only with ``--collect-tokens-histogram``.
  Inter-token latency ``sglang:inter_token_latency_seconds``, queue time
  ``sglang:queue_time_seconds``, KV pool size ``sglang:max_total_num_tokens``.
- ``tgi``: Text Generation Inference 3.3.6-dev0 (commit db931fcf): ``router/src/server.rs``
  (the counters and histograms, their bucket matchers), ``router/src/validation.rs``
  (``tgi_request_input_length``), ``backends/v3/src/queue.rs`` (``tgi_queue_size``),
  ``backends/v3/src/backend.rs`` (``tgi_batch_current_size``), ``backends/v3/src/lib.rs``
  (``tgi_batch_max_total_tokens``), exposed by ``metrics-exporter-prometheus`` 0.15: **no
  labels** (the scrape adds model and region as target labels) and counters without
  ``_total``. Arrivals ``tgi_request_count`` (counted on receipt), completions
  ``tgi_request_success``; token counts are the length histograms' ``_sum``; running is the
  batch size, waiting the queue size; ITL is ``tgi_request_mean_time_per_token_duration`` (each
  request's mean); no KV usage, TTFT or prefix-cache metric (unknown, never zero). Length
  buckets are hundredths of ``max_input_tokens`` / ``max_total_tokens``.

The latency and capacity signals (vLLM names in V1, fallbacks in order):

- **Arrivals** (``ARRIVALS``, Headroom's name): vLLM has no arrivals counter
  (``vllm:request_success`` counts requests as they finish, as do the histograms' counts of
  lengths and end-to-end latency). The earliest per-request event it counts is the first
  token, ``vllm:time_to_first_token_seconds_count``: requests admitted, later than their
  arrival by their TTFT (queue + prefill, seconds) rather than by their whole end-to-end time,
  and not counting requests aborted before a first token. SGLang the same; TGI counts arrivals
  (``tgi_request_count``). Profiles' rates come from arrivals where present.
- **Inter-token latency** (``ITL_HIST``): ``vllm:inter_token_latency_seconds`` (vLLM ≥ 0.11,
  vllm-project/vllm#24015), else ``vllm:time_per_output_token_seconds`` (0.10 and V0, the same
  per-token observations; deprecated in 0.11, hidden in 0.12, then removed, vllm#32661).
- **Queue time** (``QUEUE_HIST``): ``vllm:request_queue_time_seconds`` (the WAITING phase of
  each finished request).
- **KV-cache capacity** (``KV_CAPACITY``, tokens per engine): vLLM's ``vllm:cache_config_info``
  (``log_metrics_info``), a gauge at 1 labelled with CacheConfig's fields as strings:
  ``num_gpu_blocks`` × ``block_size``. It carries no model label, so the query joins the model
  from the same target's running gauge; an engine still profiling ("None" blocks) is left out.

Tenant demand comes from a **gateway** in front of the pools where one is configured
(``GATEWAYS``): per tenant, model and region, requests and prompt/output tokens, stored as
``gateway:requests_total``, ``gateway:prompt_tokens_total``, ``gateway:output_tokens_total``.

- ``litellm``: the LiteLLM proxy's Prometheus callback, ``litellm/integrations/prometheus.py``
  with its labels in ``litellm/types/integrations/prometheus.py`` (``PrometheusMetricLabels``),
  commits 002de3dd / 02672640: ``litellm_proxy_total_requests_metric`` (labels ``end_user``,
  ``hashed_api_key``, ``api_key_alias``, ``requested_model``, ``team``, ``team_alias``, ``user``,
  ``status_code``; counted here for 2xx only), ``litellm_input_tokens_metric`` and
  ``litellm_output_tokens_metric`` (the same identity labels, ``model`` and
  ``requested_model``). ``requested_model`` is the model name clients send (the pool's).
  Releases before BerriAI/litellm#13271 (merged 2025-08-04) named the token counters
  ``litellm_input_tokens`` and ``litellm_output_tokens`` (exposed as
  ``litellm_input_tokens_total`` and ``litellm_output_tokens_total``), with the same labels:
  a gateway's names are read together (``or``), so proxies of both releases count. LiteLLM
  writes no region label: the scrape config of each
  region's proxy adds one as a target label.

A name map entry no series answers under any of its names is reported by the pull
(``TelemetryPull.missing_metrics``); an engine or gateway that answers none of its names at
all is named in the pull's ``error``, and with a gateway configured no pool's demand is filed
under a tenant the gateway did not measure.

Prometheus' client appends ``_total`` to a counter's name in the exposition (vLLM V1 defines
``vllm:prompt_tokens`` and exposes ``vllm:prompt_tokens_total``): the names here are the
exposed ones.

Every canonical metric is asked for with one range query per stored series name, aggregated by
the tenant, model and region labels (and ``le`` for histogram buckets), one point per bucket:
a counter's ``increase`` over the bucket, a gauge's ``avg_over_time``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from controlplane.telemetry.conf import LabelConfig

MetricKind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class MetricFamily:
    """A serving metric by its canonical (stored) name. ``combine`` joins a gauge's instances
    (sum, or avg for ratios)."""

    name: str
    kind: MetricKind
    combine: Literal["sum", "avg"] = "sum"


RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
REQUESTS = "vllm:request_success_total"
PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PROMPT_HIST = "vllm:request_prompt_tokens"
OUTPUT_HIST = "vllm:request_generation_tokens"
TTFT_HIST = "vllm:time_to_first_token_seconds"
E2E_HIST = "vllm:e2e_request_latency_seconds"
ITL_HIST = "vllm:inter_token_latency_seconds"
QUEUE_HIST = "vllm:request_queue_time_seconds"
# Headroom's own names where no engine has one name for the figure (see the module notes).
ARRIVALS = "engine:request_arrivals_total"
KV_CAPACITY = "engine:kv_cache_capacity_tokens"
# vLLM's cache configuration, an info gauge (value 1) whose labels are CacheConfig's fields:
# its KV capacity per engine is num_gpu_blocks × block_size tokens.
VLLM_CACHE_INFO = "vllm:cache_config_info"
CACHE_INFO_FACTORS = ("num_gpu_blocks", "block_size")

METRICS: tuple[MetricFamily, ...] = (
    MetricFamily(RUNNING, "gauge"),
    MetricFamily(WAITING, "gauge"),
    MetricFamily(KV_USAGE, "gauge", combine="avg"),
    MetricFamily(PROMPT_TOKENS, "counter"),
    MetricFamily(GENERATION_TOKENS, "counter"),
    MetricFamily(REQUESTS, "counter"),
    MetricFamily(PREEMPTIONS, "counter"),
    MetricFamily(PREFIX_QUERIES, "counter"),
    MetricFamily(PREFIX_HITS, "counter"),
    MetricFamily(PROMPT_HIST, "histogram"),
    MetricFamily(OUTPUT_HIST, "histogram"),
    MetricFamily(TTFT_HIST, "histogram"),
    MetricFamily(E2E_HIST, "histogram"),
    MetricFamily(ITL_HIST, "histogram"),
    MetricFamily(QUEUE_HIST, "histogram"),
    MetricFamily(ARRIVALS, "counter"),
    MetricFamily(KV_CAPACITY, "gauge", combine="avg"),
)

# Canonical name → the engine's exposed names, tried in order. A canonical name missing from
# a map is a metric the engine does not have.
NameMap = Mapping[str, tuple[str, ...]]

VLLM_V1: NameMap = {
    RUNNING: (RUNNING,),
    WAITING: (WAITING,),
    KV_USAGE: (KV_USAGE, "vllm:gpu_cache_usage_perc"),
    PROMPT_TOKENS: (PROMPT_TOKENS,),
    GENERATION_TOKENS: (GENERATION_TOKENS,),
    REQUESTS: (REQUESTS,),
    PREEMPTIONS: (PREEMPTIONS,),
    PREFIX_QUERIES: (PREFIX_QUERIES, "vllm:gpu_prefix_cache_queries_total"),
    PREFIX_HITS: (PREFIX_HITS, "vllm:gpu_prefix_cache_hits_total"),
    PROMPT_HIST: (PROMPT_HIST,),
    OUTPUT_HIST: (OUTPUT_HIST,),
    TTFT_HIST: (TTFT_HIST,),
    E2E_HIST: (E2E_HIST,),
    ITL_HIST: (ITL_HIST, "vllm:time_per_output_token_seconds"),
    QUEUE_HIST: (QUEUE_HIST,),
    ARRIVALS: (TTFT_HIST + "_count",),
    KV_CAPACITY: (VLLM_CACHE_INFO,),
}

VLLM_V0: NameMap = {
    RUNNING: (RUNNING,),
    WAITING: (WAITING,),
    KV_USAGE: ("vllm:gpu_cache_usage_perc",),
    PROMPT_TOKENS: (PROMPT_TOKENS,),
    GENERATION_TOKENS: (GENERATION_TOKENS,),
    REQUESTS: (REQUESTS,),
    PREEMPTIONS: (PREEMPTIONS,),
    PROMPT_HIST: (PROMPT_HIST,),
    OUTPUT_HIST: (OUTPUT_HIST,),
    TTFT_HIST: (TTFT_HIST,),
    E2E_HIST: (E2E_HIST,),
    ITL_HIST: ("vllm:time_per_output_token_seconds",),
    QUEUE_HIST: (QUEUE_HIST,),
    ARRIVALS: (TTFT_HIST + "_count",),
    KV_CAPACITY: (VLLM_CACHE_INFO,),
}

SGLANG: NameMap = {
    RUNNING: ("sglang:num_running_reqs",),
    WAITING: ("sglang:num_queue_reqs",),
    KV_USAGE: ("sglang:token_usage",),
    PROMPT_TOKENS: ("sglang:prompt_tokens_total",),
    GENERATION_TOKENS: ("sglang:generation_tokens_total",),
    REQUESTS: ("sglang:num_requests_total",),
    PREFIX_QUERIES: ("sglang:prompt_tokens_total",),
    PREFIX_HITS: ("sglang:cached_tokens_total",),
    PROMPT_HIST: ("sglang:prompt_tokens_histogram",),
    OUTPUT_HIST: ("sglang:generation_tokens_histogram",),
    TTFT_HIST: ("sglang:time_to_first_token_seconds",),
    E2E_HIST: ("sglang:e2e_request_latency_seconds",),
    ITL_HIST: ("sglang:inter_token_latency_seconds",),
    QUEUE_HIST: ("sglang:queue_time_seconds",),
    ARRIVALS: ("sglang:time_to_first_token_seconds_count",),
    KV_CAPACITY: ("sglang:max_total_num_tokens",),
}

TGI: NameMap = {
    RUNNING: ("tgi_batch_current_size",),
    WAITING: ("tgi_queue_size",),
    PROMPT_TOKENS: ("tgi_request_input_length_sum",),
    GENERATION_TOKENS: ("tgi_request_generated_tokens_sum",),
    REQUESTS: ("tgi_request_success",),
    PROMPT_HIST: ("tgi_request_input_length",),
    OUTPUT_HIST: ("tgi_request_generated_tokens",),
    E2E_HIST: ("tgi_request_duration",),
    ITL_HIST: ("tgi_request_mean_time_per_token_duration",),
    QUEUE_HIST: ("tgi_request_queue_duration",),
    ARRIVALS: ("tgi_request_count",),
    KV_CAPACITY: ("tgi_batch_max_total_tokens",),
}

ENGINES: dict[str, NameMap] = {
    "vllm-v1": VLLM_V1,
    "vllm-v0": VLLM_V0,
    "sglang": SGLANG,
    "tgi": TGI,
}

GATEWAY_REQUESTS = "gateway:requests_total"
GATEWAY_PROMPT_TOKENS = "gateway:prompt_tokens_total"
GATEWAY_OUTPUT_TOKENS = "gateway:output_tokens_total"
GATEWAY_METRICS = (GATEWAY_REQUESTS, GATEWAY_PROMPT_TOKENS, GATEWAY_OUTPUT_TOKENS)

# Gateway → stored name → the counter selectors it reads, tried in order.
GATEWAYS: dict[str, dict[str, tuple[str, ...]]] = {
    "litellm": {
        GATEWAY_REQUESTS: ('litellm_proxy_total_requests_metric_total{status_code=~"2.."}',),
        GATEWAY_PROMPT_TOKENS: ("litellm_input_tokens_metric_total", "litellm_input_tokens_total"),
        GATEWAY_OUTPUT_TOKENS: (
            "litellm_output_tokens_metric_total",
            "litellm_output_tokens_total",
        ),
    }
}


@dataclass(frozen=True)
class Query:
    """One range query: the series name it stores and its PromQL, with the PromQL of each
    fallback name to try, in order, when it answers no series at all."""

    metric: str
    promql: str
    by_le: bool = False
    fallbacks: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # the exposed names asked for, in order (for reports)
    # An info gauge read from its labels: each answered series counts engines, and its value
    # is the product of these labels' values per engine (vLLM's cache_config_info).
    label_factors: tuple[str, ...] = ()


def gateway_queries(labels: LabelConfig, bucket_s: int, gateway: str) -> list[Query]:
    """The range queries of a gateway's tenant demand (none without a gateway)."""
    if not gateway:
        return []
    by = ", ".join(labels.names)
    queries = []
    for stored, selectors in GATEWAYS[gateway].items():
        # One query over every name, joined with ``or``: a fleet whose proxies run releases
        # from before and after a rename has series under both, one name per label set (a
        # label set the first name answers is taken from it alone).
        promql = " or ".join(
            f"sum by ({by}) (increase({selector}[{bucket_s}s]))" for selector in selectors
        )
        names = tuple(selector.partition("{")[0] for selector in selectors)
        queries.append(Query(stored, promql, names=names))
    return queries


def cache_info_promql(labels: LabelConfig, window: str) -> str:
    """Engines per (label set, cache configuration), from vLLM's ``cache_config_info``.

    The info gauge is labelled with CacheConfig's fields and ``engine`` only, not with the
    model: the model label is taken from the same target's ``vllm:num_requests_running``
    (joined on ``instance`` and ``job``, the labels Prometheus gives every target)."""
    by = ", ".join(labels.names)
    factors = ", ".join(CACHE_INFO_FACTORS)
    model = labels.model
    return (
        f"count by ({by}, {factors}) (max_over_time({VLLM_CACHE_INFO}{window}) "
        f"* on (instance, job) group_left ({model}) "
        f"group by (instance, job, {model}) ({RUNNING}))"
    )


def _promql(family: MetricFamily, exposed: str, suffix: str, by: str, window: str) -> str:
    if family.kind == "gauge":
        return f"{family.combine} by ({by}) (avg_over_time({exposed}{window}))"
    if suffix == "_bucket":
        return f"sum by ({by}, le) (increase({exposed}{suffix}{window}))"
    return f"sum by ({by}) (increase({exposed}{suffix}{window}))"


def pull_queries(labels: LabelConfig, bucket_s: int, engine: str = "vllm-v1") -> list[Query]:
    """The range queries of one pull, one per stored series name (histograms give three);
    metrics the engine does not have are not asked for."""
    names = ENGINES[engine]
    by = ", ".join(labels.names)
    window = f"[{bucket_s}s]"
    queries: list[Query] = []
    for family in METRICS:
        exposed = names.get(family.name, ())
        if not exposed:
            continue
        suffixes = ("",) if family.kind != "histogram" else ("_bucket", "_sum", "_count")
        for suffix in suffixes:
            promqls = [
                cache_info_promql(labels, window)
                if name == VLLM_CACHE_INFO
                else _promql(family, name, suffix, by, window)
                for name in exposed
            ]
            queries.append(
                Query(
                    family.name + suffix,
                    promqls[0],
                    by_le=suffix == "_bucket",
                    fallbacks=tuple(promqls[1:]),
                    names=tuple(name + suffix for name in exposed),
                    label_factors=CACHE_INFO_FACTORS if exposed[0] == VLLM_CACHE_INFO else (),
                )
            )
    return queries
