"""The simulated fleet: traffic streams served by replica pools, advanced in wall-clock time.

Each stream (tenant × model × region × class) sends Poisson arrivals whose prompt and output
lengths are lognormal (fitted from median and mean, as the seeds do). Each pool (model ×
region) has replicas with a prefill and a decode rate. A request's queue wait comes from the
pool's M/M/c state (Erlang C), its time to first token adds its prefill time (prefix-cache hits
remove prefill only), and its end-to-end latency adds the streamed decode at a per-sequence
speed. Gauges follow Little's law per pool. The ``extra_prompt_tokens`` switch reproduces the
seeds' Friday review (retrieval top-4 → top-8 adds 1,200 prompt tokens at a flat request rate).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from planner.capacity import queueing

# vLLM's histogram buckets (vllm/engine/metrics.py, V1 loggers).
TOKEN_BUCKETS: tuple[float, ...] = tuple(
    float(m * 10**e) for e in range(0, 6) for m in (1, 2, 5) if m * 10**e <= 200_000
)
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
E2E_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

# Above this utilisation a pool is treated as saturated: the queue grows with the overload.
_SATURATED = 0.995


@dataclass(frozen=True)
class ClassSpec:
    """A request class: lengths as median and mean (lognormal), prefix-cache hit rate."""

    name: str
    share: float
    prompt_median: float
    prompt_mean: float
    output_median: float
    output_mean: float
    prefix_cache_hit_rate: float = 0.0


@dataclass(frozen=True)
class StreamSpec:
    tenant: str
    model: str
    region: str
    requests_per_s: float
    classes: tuple[ClassSpec, ...]


@dataclass(frozen=True)
class PoolSpec:
    """Replicas of one model in one region."""

    model: str
    region: str
    replicas: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    per_sequence_decode_tokens_per_s: float = 25.0
    kv_pool_tokens: float = 30_500.0


@dataclass(frozen=True)
class FleetSpec:
    streams: tuple[StreamSpec, ...]
    pools: tuple[PoolSpec, ...]
    extra_prompt_tokens: float = 0.0

    def pool(self, model: str, region: str) -> PoolSpec:
        for pool in self.pools:
            if pool.model == model and pool.region == region:
                return pool
        raise KeyError(f"no pool for model {model!r} in region {region!r}")


def support_assistant_fleet(*, extra_prompt_tokens: float = 0.0) -> FleetSpec:
    """The seeds' enterprise support assistant: 8 req/s at peak, 30% EU / 70% US, 85/14/1 mix.

    Prompt lengths give the whole mix a 1,500-token mean; 22% of traffic is EU-resident.
    """
    classes = (
        ClassSpec("policy", 0.85, 950.0, 1300.0, 56.0, 80.0, 0.35),
        ClassSpec("order-lookup", 0.14, 2300.0, 3200.0, 105.0, 150.0, 0.35),
        ClassSpec("long-summary", 0.01, 6500.0, 9000.0, 280.0, 400.0, 0.35),
    )
    model = "llama-70b"
    streams = (
        StreamSpec("northwind-legal", model, "eu-west", 8.0 * 0.22, classes),
        StreamSpec("contoso-retail", model, "eu-west", 8.0 * 0.08, classes),
        StreamSpec("contoso-retail", model, "us-east", 8.0 * 0.50, classes),
        StreamSpec("fabrikam-free", model, "us-east", 8.0 * 0.20, classes),
    )
    pools = (
        PoolSpec(model, "eu-west", 4, 4000.0, 160.0),
        PoolSpec(model, "us-east", 8, 4000.0, 160.0),
    )
    return FleetSpec(streams, pools, extra_prompt_tokens)


def scaled_fleet(spec: FleetSpec, factor: float) -> FleetSpec:
    """The same fleet ``factor`` times larger: every stream's rate and every pool's replicas.

    Load per replica (utilisation, queueing, KV fill) stays about the same while the request
    count per second grows, which makes short measurements precise.
    """
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError("the scale factor must be a positive number")
    streams = tuple(replace(s, requests_per_s=s.requests_per_s * factor) for s in spec.streams)
    pools = tuple(replace(p, replicas=max(1, math.ceil(p.replicas * factor))) for p in spec.pools)
    return replace(spec, streams=streams, pools=pools)


def _lognormal_params(median: float, mean: float) -> tuple[float, float]:
    """μ and σ of a lognormal with this median and mean (σ = √(2·ln(mean/median)))."""
    ratio = max(mean / median, 1.0)
    return math.log(median), math.sqrt(2.0 * math.log(ratio))


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: np.ndarray = field(init=False)
    total: float = 0.0
    observations: int = 0

    def __post_init__(self) -> None:
        self.counts = np.zeros(len(self.buckets), dtype=np.int64)

    def observe(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        # Cumulative counts per upper bound, as Prometheus exposes them.
        self.counts += np.searchsorted(np.sort(values), self.buckets, side="right")
        self.total += float(values.sum())
        self.observations += int(values.size)


@dataclass
class SeriesState:
    """Counters and histograms of one (tenant, model, region) label set."""

    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    requests_succeeded: int = 0
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    preemptions: int = 0
    prompt_hist: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    output_hist: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    ttft_hist: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e_hist: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0


@dataclass(frozen=True)
class PoolLoad:
    utilization: float
    mean_wait_s: float
    wait_probability: float
    running: float
    waiting: float
    kv_usage: float


def pool_load(spec: FleetSpec, model: str, region: str, rate_factor: float = 1.0) -> PoolLoad:
    """Utilisation, wait and Little's-law gauges of a pool under ``spec``, with every stream's
    rate multiplied by ``rate_factor`` (the hour's share of the peak, in simulated history)."""
    pool = spec.pool(model, region)
    extra = spec.extra_prompt_tokens
    rate = 0.0
    work = 0.0  # replica-seconds per second
    wall = 0.0  # sequence-seconds per second (in service)
    context = 0.0  # token-seconds of KV per second
    for stream in spec.streams:
        if stream.model != model or stream.region != region:
            continue
        for cls in stream.classes:
            lam = stream.requests_per_s * rate_factor * cls.share
            prompt = cls.prompt_mean + extra
            prefill = prompt * (1 - cls.prefix_cache_hit_rate) / pool.prefill_tokens_per_s
            cost = prefill + cls.output_mean / pool.decode_tokens_per_s
            stream_s = prefill + cls.output_mean / pool.per_sequence_decode_tokens_per_s
            rate += lam
            work += lam * cost
            wall += lam * stream_s
            context += lam * stream_s * (prompt + cls.output_mean / 2)
    utilization = work / pool.replicas
    if rate == 0:
        return PoolLoad(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    mean_cost = work / rate
    if utilization >= _SATURATED:
        # An overloaded pool: every arrival waits, and the wait grows with the overload.
        wait = mean_cost * 50.0 * utilization
        probability = 1.0
    else:
        probability = queueing.erlang_c(pool.replicas, work)
        wait = queueing.mmc_mean_wait(rate, mean_cost, pool.replicas)
    running_per_replica = wall / pool.replicas
    kv = min(1.0, context / pool.replicas / pool.kv_pool_tokens)
    return PoolLoad(
        utilization=utilization,
        mean_wait_s=wait,
        wait_probability=probability,
        running=running_per_replica * pool.replicas,
        waiting=rate * wait,
        kv_usage=kv,
    )


class FleetSimulator:
    """Advances the fleet's counters in time; thread-safe."""

    def __init__(self, spec: FleetSpec, *, seed: int = 0, start_time: float = 0.0) -> None:
        self._spec = spec
        self._rng = np.random.default_rng(seed)
        self._clock = start_time
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str, str], SeriesState] = {
            (s.tenant, s.model, s.region): SeriesState() for s in spec.streams
        }

    @property
    def spec(self) -> FleetSpec:
        return self._spec

    @property
    def clock(self) -> float:
        return self._clock

    def set_extra_prompt_tokens(self, tokens: float) -> None:
        """Apply (or undo, with 0) the Friday-review prompt growth from now on."""
        if tokens < 0 or not math.isfinite(tokens):
            raise ValueError("extra prompt tokens must be zero or more")
        with self._lock:
            self._spec = replace(self._spec, extra_prompt_tokens=tokens)

    def series(self) -> dict[tuple[str, str, str], SeriesState]:
        return self._series

    def pool_load(self, model: str, region: str) -> PoolLoad:
        """Utilisation, wait and Little's-law gauges of a pool under the current spec."""
        return pool_load(self._spec, model, region)

    def _streams_of(self, model: str, region: str) -> Iterable[StreamSpec]:
        return (s for s in self._spec.streams if s.model == model and s.region == region)

    def advance_to(self, now: float) -> None:
        """Generate the traffic between the last call and ``now`` (seconds)."""
        with self._lock:
            dt = now - self._clock
            if dt <= 0:
                return
            self._clock = now
            loads = {
                (p.model, p.region): self.pool_load(p.model, p.region) for p in self._spec.pools
            }
            for stream in self._spec.streams:
                self._advance_stream(stream, dt, loads[(stream.model, stream.region)])

    def _advance_stream(self, stream: StreamSpec, dt: float, load: PoolLoad) -> None:
        pool = self._spec.pool(stream.model, stream.region)
        state = self._series[(stream.tenant, stream.model, stream.region)]
        rng = self._rng
        extra = self._spec.extra_prompt_tokens
        share = 0.0
        for cls in stream.classes:
            n = int(rng.poisson(stream.requests_per_s * cls.share * dt))
            if n == 0:
                continue
            mu_p, sigma_p = _lognormal_params(cls.prompt_median, cls.prompt_mean)
            mu_o, sigma_o = _lognormal_params(cls.output_median, cls.output_mean)
            prompt = np.rint(rng.lognormal(mu_p, sigma_p, n) + extra).clip(1, None)
            output = np.rint(rng.lognormal(mu_o, sigma_o, n)).clip(1, None)
            waits = np.where(
                rng.random(n) < load.wait_probability,
                rng.exponential(load.mean_wait_s / max(load.wait_probability, 1e-9), n),
                0.0,
            )
            prefill_s = prompt * (1 - cls.prefix_cache_hit_rate) / pool.prefill_tokens_per_s
            ttft = waits + prefill_s
            e2e = ttft + output / pool.per_sequence_decode_tokens_per_s
            state.prompt_tokens += float(prompt.sum())
            state.generation_tokens += float(output.sum())
            state.requests_succeeded += n
            state.prefix_queries += float(prompt.sum())
            state.prefix_hits += float((prompt * cls.prefix_cache_hit_rate).round().sum())
            state.prompt_hist.observe(prompt)
            state.output_hist.observe(output)
            state.ttft_hist.observe(ttft)
            state.e2e_hist.observe(e2e)
            share += cls.share
        # A full KV pool evicts sequences: preemptions grow with the overflow.
        if load.kv_usage >= 0.95:
            state.preemptions += int(rng.poisson(stream.requests_per_s * dt * 0.2))
        # Gauges: this stream's part of the pool's in-flight and queued requests.
        total_rate = sum(s.requests_per_s for s in self._streams_of(stream.model, stream.region))
        part = stream.requests_per_s / total_rate if total_rate else 0.0
        state.running = load.running * part
        state.waiting = load.waiting * part
        state.kv_usage = load.kv_usage
