"""Prometheus text exposition (format 0.0.4) of the simulated fleet, in vLLM's metric names."""

from __future__ import annotations

from dataclasses import dataclass

from workers.simulators.fleet.fleet import FleetSimulator, Histogram, SeriesState


@dataclass(frozen=True)
class LabelNames:
    """Label names on every series; vLLM itself sets ``model_name``."""

    tenant: str = "tenant"
    model: str = "model_name"
    region: str = "region"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value))


def _histogram(lines: list[str], name: str, labels: dict[str, str], hist: Histogram) -> None:
    for bound, count in zip(hist.buckets, hist.counts, strict=True):
        lines.append(f"{name}_bucket{_labels({**labels, 'le': _number(bound)})} {int(count)}")
    lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {hist.observations}")
    lines.append(f"{name}_sum{_labels(labels)} {_number(hist.total)}")
    lines.append(f"{name}_count{_labels(labels)} {hist.observations}")


# (name, help, SeriesState attribute) of every series the fleet exposes, by kind.
GAUGES = (
    ("vllm:num_requests_running", "Number of requests in model execution batches.", "running"),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "waiting"),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "kv_usage"),
)
COUNTERS = (
    ("vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens"),
    ("vllm:generation_tokens", "Number of generation tokens processed.", "generation_tokens"),
    ("vllm:request_success", "Count of successfully processed requests.", "requests_succeeded"),
    ("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", "prefix_queries"),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", "prefix_hits"),
    ("vllm:num_preemptions", "Cumulative number of preemptions.", "preemptions"),
)
HISTOGRAMS = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "prompt_hist"),
    ("vllm:request_generation_tokens", "Number of generation tokens.", "output_hist"),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token.", "ttft_hist"),
    ("vllm:e2e_request_latency_seconds", "Histogram of end to end latency.", "e2e_hist"),
)


def render(simulator: FleetSimulator, names: LabelNames | None = None) -> str:
    """The ``/metrics`` page for the simulator's current state."""
    names = names or LabelNames()
    series: list[tuple[dict[str, str], SeriesState]] = [
        ({names.model: model, names.tenant: tenant, names.region: region}, state)
        for (tenant, model, region), state in sorted(simulator.series().items())
    ]
    lines: list[str] = []
    for name, help_text, attr in GAUGES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines += [f"{name}{_labels(lab)} {_number(getattr(st, attr))}" for lab, st in series]
    for name, help_text, attr in COUNTERS:
        lines += [f"# HELP {name}_total {help_text}", f"# TYPE {name}_total counter"]
        lines += [f"{name}_total{_labels(lab)} {_number(getattr(st, attr))}" for lab, st in series]
    for name, help_text, attr in HISTOGRAMS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        for lab, st in series:
            _histogram(lines, name, lab, getattr(st, attr))
    return "\n".join(lines) + "\n"
