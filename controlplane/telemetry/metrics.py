"""The serving metrics telemetry reads and the range queries that read them.

Every metric of ``METRICS`` is asked for with one range query per stored series name,
aggregated by the tenant, model and region labels (and ``le`` for histogram buckets), one point
per bucket: a counter's ``increase`` over the bucket, a gauge's ``avg_over_time``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from controlplane.telemetry.conf import LabelConfig

MetricKind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class MetricFamily:
    """A vLLM serving metric. ``combine`` joins a gauge's instances (sum, or avg for ratios)."""

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
)


@dataclass(frozen=True)
class Query:
    """One range query: the series name it stores and its PromQL."""

    metric: str
    promql: str
    by_le: bool = False


def pull_queries(labels: LabelConfig, bucket_s: int) -> list[Query]:
    """The range queries of one pull, one per stored series name (histograms give three)."""
    by = ", ".join(labels.names)
    window = f"[{bucket_s}s]"
    queries: list[Query] = []
    for family in METRICS:
        if family.kind == "gauge":
            inner = f"avg_over_time({family.name}{window})"
            queries.append(Query(family.name, f"{family.combine} by ({by}) ({inner})"))
        elif family.kind == "counter":
            inner = f"increase({family.name}{window})"
            queries.append(Query(family.name, f"sum by ({by}) ({inner})"))
        else:
            bucket = f"{family.name}_bucket"
            queries.append(
                Query(bucket, f"sum by ({by}, le) (increase({bucket}{window}))", by_le=True)
            )
            for part in ("_sum", "_count"):
                name = family.name + part
                queries.append(Query(name, f"sum by ({by}) (increase({name}{window}))"))
    return queries
