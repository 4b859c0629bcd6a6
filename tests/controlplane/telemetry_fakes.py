"""Helpers for the telemetry tests: a stand-in Prometheus that answers range queries from
functions of time, a small fleet in the database, and synthetic samples written directly.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from controlplane.fleet.models import (
    AcceleratorType,
    CapacityFigure,
    Geography,
    LlmModel,
    Region,
    ReplicaShape,
    Zone,
    ZoneInventory,
)
from controlplane.policies.models import Tenant, Tier
from controlplane.telemetry import metrics, storage
from controlplane.telemetry.storage import SeriesKey

ValueAt = Callable[[float], float]
_METRIC = re.compile(r"(?:increase|avg_over_time|max_over_time)\(([^\[]+)\[")


@dataclass
class FakeSeries:
    labels: dict[str, str]
    value: ValueAt


@dataclass
class FakePrometheus:
    """Answers ``/api/v1/query_range`` from registered series; ``script`` overrides answers.

    ``script`` holds (status, body) answers used one per request, in order, before the
    registered series take over; ``always`` (when set) answers every request. ``warnings``
    are sent with every series answer (a partial answer, as Prometheus marks one); a range of
    more than ``max_points`` steps is refused as Prometheus refuses too many samples (422).
    """

    url: str = ""
    series: dict[str, list[FakeSeries]] = field(default_factory=dict)
    script: list[tuple[int, bytes]] = field(default_factory=list)
    always: tuple[int, bytes] | None = None
    delay_s: float = 0.0
    queries: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    max_points: int | None = None

    def add(self, metric: str, labels: Mapping[str, str], value: ValueAt) -> None:
        self.series.setdefault(metric, []).append(FakeSeries(dict(labels), value))

    def answer(self, params: Mapping[str, str]) -> tuple[int, bytes]:
        self.queries.append(dict(params))
        if self.always is not None:
            return self.always
        if self.script:
            return self.script.pop(0)
        match = _METRIC.search(params["query"])
        assert match, params["query"]
        start, end, step = (float(params[k]) for k in ("start", "end", "step"))
        if self.max_points is not None and (end - start) / step + 1 > self.max_points:
            error = {
                "status": "error",
                "errorType": "execution",
                "error": "query processing would load too many samples into memory in query "
                "execution",
            }
            return 422, json.dumps(error).encode()
        result = []
        for item in self.series.get(match.group(1), []):
            stamps = []
            t = start
            while t <= end + 1e-9:
                stamps.append(t)
                t += step
            values = [[t, repr(item.value(t))] for t in stamps]
            result.append({"metric": item.labels, "values": values})
        body: dict[str, Any] = {
            "status": "success",
            "data": {"resultType": "matrix", "result": result},
        }
        if self.warnings:
            body["warnings"] = list(self.warnings)
        return 200, json.dumps(body).encode()


@contextmanager
def fake_prometheus() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = urllib.parse.urlparse(self.path).query
            params = dict(urllib.parse.parse_qsl(query))
            status, body = fake.answer(params)
            if fake.delay_s:
                time.sleep(fake.delay_s)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


# -- the database side ------------------------------------------------------------------------------


@dataclass
class Fleet:
    eu: Region
    us: Region
    model: LlmModel
    shape: ReplicaShape
    tier: Tier
    tenants: dict[str, Tenant]


def make_fleet(*tenants: tuple[str, str]) -> Fleet:
    """Two regions, the seeds' 70B model on 2 × 80 GB (4,000 / 160 tokens/s per replica), and
    the given (tenant, home region) pairs."""
    eu_geo = Geography.objects.create(name="eu")
    us_geo = Geography.objects.create(name="us")
    eu = Region.objects.create(name="eu-west", geography=eu_geo)
    us = Region.objects.create(name="us-east", geography=us_geo)
    gpu = AcceleratorType.objects.create(
        name="gpu80",
        memory_gb=80,
        peak_bf16_tflops=990,
        memory_tbps=3.35,
        on_demand_price_per_gpu_hour=4.1,
        reserved_price_per_gpu_hour=2.7,
    )
    model = LlmModel.objects.create(
        name="chat-70b", parameters_billions=70, layers=80, kv_heads=8, head_dim=128
    )
    shape = ReplicaShape.objects.create(
        name="chat-70b/gpu80x2", model=model, accelerator=gpu, gpus_per_replica=2
    )
    big = ReplicaShape.objects.create(
        name="chat-70b/gpu80x4", model=model, accelerator=gpu, gpus_per_replica=4
    )
    CapacityFigure.objects.create(
        shape=shape, prefill_tokens_per_s=4000, decode_tokens_per_s=160, max_concurrency=12
    )
    CapacityFigure.objects.create(
        shape=big, prefill_tokens_per_s=7600, decode_tokens_per_s=380, max_concurrency=48
    )
    tier = Tier.objects.create(name="standard", p95_ttft_slo_s=2.5)
    regions = {"eu-west": eu, "us-east": us}
    made = {
        name: Tenant.objects.create(name=name, tier=tier, home_region=regions[home])
        for name, home in tenants
    }
    return Fleet(eu, us, model, shape, tier, made)


def make_plannable(fleet: Fleet, *, gpus_per_zone: int = 64) -> Fleet:
    """Give the fleet what a placement needs to price a drift: three zones in each region
    with ``gpus_per_zone`` GPUs each, and the seeds' 2-GPU replica as the only shape with a
    capacity figure (so sizing reads as the seeds' worked numbers)."""
    for region in (fleet.eu, fleet.us):
        for letter in "abc":
            zone = Zone.objects.create(name=f"{region.name}-{letter}", region=region)
            ZoneInventory.objects.create(
                zone=zone, accelerator=fleet.shape.accelerator, gpus_available=gpus_per_zone
            )
    CapacityFigure.objects.exclude(shape=fleet.shape).delete()
    return fleet


@dataclass(frozen=True)
class Traffic:
    """One bucket of one label set's traffic, as a pull would have stored it.

    ``prompt_buckets`` / ``output_buckets``: cumulative counts by ``le`` (with ``+Inf``).
    """

    requests: float
    prompt_buckets: Mapping[str, float]
    prompt_sum: float
    output_buckets: Mapping[str, float]
    output_sum: float
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    ttft_buckets: Mapping[str, float] | None = None
    e2e_sum: float | None = None
    kv_usage: float = 0.2


def steady(
    *,
    requests_per_s: float,
    bucket_s: int,
    prompt_mean: float,
    output_mean: float,
    hit_rate: float = 0.0,
) -> Traffic:
    """A bucket at a steady rate whose lengths have the given means (the histograms' shape is
    fixed: quartiles around the mean)."""
    n = requests_per_s * bucket_s

    def buckets(mean: float) -> dict[str, float]:
        return {
            repr(mean / 2): 0.25 * n,
            repr(mean): 0.6 * n,
            repr(mean * 2): 0.9 * n,
            repr(mean * 4): n,
            "+Inf": n,
        }

    return Traffic(
        requests=n,
        prompt_buckets=buckets(prompt_mean),
        prompt_sum=prompt_mean * n,
        output_buckets=buckets(output_mean),
        output_sum=output_mean * n,
        prefix_queries=prompt_mean * n,
        prefix_hits=prompt_mean * n * hit_rate,
        ttft_buckets={"0.5": 0.5 * n, "1.0": 0.9 * n, "2.5": n, "+Inf": n},
        e2e_sum=5.0 * n,
    )


def traffic_samples(
    tenant: str,
    model: str,
    region: str,
    start: datetime,
    bucket_s: int,
    buckets: list[Traffic],
    workload_class: str = "",
) -> dict[SeriesKey, dict[datetime, float]]:
    """The samples a pull of these buckets (one ``Traffic`` per bucket) would store."""
    out: dict[SeriesKey, dict[datetime, float]] = {}

    def put(metric: str, at: datetime, value: float, le: str = "") -> None:
        key = SeriesKey(tenant, model, region, workload_class, metric, le)
        out.setdefault(key, {})[at] = value

    for i, t in enumerate(buckets):
        at = start + timedelta(seconds=i * bucket_s)
        put(metrics.REQUESTS, at, t.requests)
        put(metrics.PREFIX_QUERIES, at, t.prefix_queries)
        put(metrics.PREFIX_HITS, at, t.prefix_hits)
        put(metrics.KV_USAGE, at, t.kv_usage)
        for family, hist, total in (
            (metrics.PROMPT_HIST, t.prompt_buckets, t.prompt_sum),
            (metrics.OUTPUT_HIST, t.output_buckets, t.output_sum),
        ):
            for le, count in hist.items():
                put(family + "_bucket", at, count, le)
            put(family + "_sum", at, total)
            put(family + "_count", at, hist["+Inf"])
        if t.ttft_buckets is not None:
            for le, count in t.ttft_buckets.items():
                put(metrics.TTFT_HIST + "_bucket", at, count, le)
            put(metrics.TTFT_HIST + "_count", at, t.ttft_buckets["+Inf"])
        if t.e2e_sum is not None:
            put(metrics.E2E_HIST + "_sum", at, t.e2e_sum)
            put(metrics.E2E_HIST + "_count", at, t.prompt_buckets["+Inf"])
    return out


def store(samples: Mapping[SeriesKey, Mapping[datetime, float]], bucket_s: int) -> int:
    """Write samples as a pull would; returns the rows inserted."""
    ids = storage.series_ids(keys=samples, bucket_s=bucket_s)
    rows = [(ids[k], at, v) for k, points in samples.items() for at, v in points.items()]
    return storage.samples_store(rows=rows)
