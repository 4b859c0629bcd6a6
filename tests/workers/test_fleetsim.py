"""The simulated vLLM fleet: its /metrics page, its arithmetic and its drift switch."""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from collections.abc import Iterator

import pytest

from workers.simulators.fleet import FleetSimulator, support_assistant_fleet
from workers.simulators.fleet.exposition import LabelNames, render
from workers.simulators.fleet.server import make_server

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    """Samples keyed by (name, label string); every non-comment line must parse."""
    samples: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        samples[(match.group(1), match.group(2) or "")] = float(match.group(3))
    return samples


def _sum(samples: dict[tuple[str, str], float], name: str, **labels: str) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for (n, lab), v in samples.items() if n == name and all(w in lab for w in want))


def test_page_has_every_vllm_series_per_tenant() -> None:
    sim = FleetSimulator(support_assistant_fleet(), seed=3)
    sim.advance_to(600.0)
    samples = parse_metrics(render(sim))
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:num_preemptions_total",
        "vllm:request_prompt_tokens_count",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_sum",
    ):
        assert _sum(samples, name, tenant="contoso-retail") >= 0, name
        assert any(n == name for n, _ in samples), name
    # 8 req/s for 600 s across the fleet: Poisson count within a few standard deviations.
    total = _sum(samples, "vllm:request_success_total")
    assert abs(total - 4800) < 5 * 4800**0.5


def test_histogram_buckets_are_cumulative_and_end_at_count() -> None:
    sim = FleetSimulator(support_assistant_fleet(), seed=5)
    sim.advance_to(120.0)
    text = render(sim)
    labels = 'model_name="llama-70b",tenant="fabrikam-free",region="us-east"'
    buckets = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:time_to_first_token_seconds_bucket{" + labels)
    ]
    assert buckets == sorted(buckets)
    count = parse_metrics(text)[("vllm:time_to_first_token_seconds_count", "{" + labels + "}")]
    assert buckets[-1] == count > 0


def test_prompt_growth_raises_mean_prompt_at_flat_rate() -> None:
    sim = FleetSimulator(support_assistant_fleet(), seed=7)
    sim.advance_to(1800.0)
    before = parse_metrics(render(sim))
    sim.set_extra_prompt_tokens(1200.0)
    sim.advance_to(3600.0)
    after = parse_metrics(render(sim))

    def window(name: str) -> float:
        return _sum(after, name) - _sum(before, name)

    mean_before = _sum(before, "vllm:request_prompt_tokens_sum") / _sum(
        before, "vllm:request_prompt_tokens_count"
    )
    mean_after = window("vllm:request_prompt_tokens_sum") / window(
        "vllm:request_prompt_tokens_count"
    )
    # The 85/14/1 mix of 1,300 / 3,200 / 9,000-token prompts averages 1,643 tokens; top-8
    # retrieval adds 1,200 to every prompt.
    assert 1500 < mean_before < 1800
    assert 1100 < mean_after - mean_before < 1300
    rate_before = _sum(before, "vllm:request_success_total") / 1800
    rate_after = window("vllm:request_success_total") / 1800
    assert abs(rate_after - rate_before) / rate_before < 0.1
    eu = sim.pool_load("llama-70b", "eu-west")
    assert eu.utilization > 0.55


def test_counters_never_decrease_and_time_never_runs_back() -> None:
    sim = FleetSimulator(support_assistant_fleet(), seed=1)
    sim.advance_to(100.0)
    first = parse_metrics(render(sim))
    sim.advance_to(50.0)  # an earlier time is ignored
    sim.advance_to(200.0)
    second = parse_metrics(render(sim))
    for key, value in first.items():
        if key[0].endswith(("_total", "_count", "_sum", "_bucket")):
            assert second[key] >= value, key


def test_label_names_are_configurable() -> None:
    sim = FleetSimulator(support_assistant_fleet(), seed=1)
    sim.advance_to(10.0)
    text = render(sim, LabelNames(tenant="customer", model="model", region="site"))
    assert 'customer="northwind-legal"' in text and 'site="eu-west"' in text


@pytest.fixture
def served() -> Iterator[str]:
    clock = [0.0]
    sim = FleetSimulator(support_assistant_fleet(), seed=2)
    server = make_server(sim, port=0, clock=lambda: clock[0])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    clock[0] = 60.0
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_http_server_serves_metrics_and_takes_drift(served: str) -> None:
    with urllib.request.urlopen(served + "/metrics", timeout=5) as response:
        assert response.status == 200
        assert "text/plain" in response.headers["Content-Type"]
        assert _sum(parse_metrics(response.read().decode()), "vllm:request_success_total") > 0
    request = urllib.request.Request(
        served + "/drift", data=json.dumps({"extra_prompt_tokens": 1200}).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert json.loads(response.read()) == {"extra_prompt_tokens": 1200.0}
    bad = urllib.request.Request(served + "/drift", data=b'{"extra_prompt_tokens": -1}')
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(bad, timeout=5)
    assert excinfo.value.code == 400
