"""Replay verification: does a plan hold each demand's TTFT objective under real arrivals?

A plan's replica counts come from a linear model (load ÷ target utilisation, with burst and
failure floors). Whether they hold the latency objective depends on how the arrivals clump,
which that model does not see. This module replays each demand's requests through the queue
simulator (``planner.capacity.simulation``, first come first served, the replica-seconds
model of ``docs/capacity-math.md``) against the replicas the plan puts where it routes them:

* **traffic**: the demand's own request log where one is given (``Traffic``: arrival times
  and token counts, its busiest hour), time-scaled so that the log's peak rate becomes the
  demand's sized rate (``requests_per_s``, before burst: the burst is headroom, not traffic);
  otherwise arrivals synthesised at that rate with the demand's measured dispersion
  (``arrival_scv``) and lognormal token counts matching its mean and p95
  (``synthesised_traffic``);
* **routing**: each request goes to one of the demand's routes with the route's share of the
  served rate (a low-discrepancy split, as a weighted gateway spreads them); the unserved
  share is not replayed;
* **hosted overflow**: where the solution sends a share of the demand to a hosted API (its
  ``hosted`` rows), that share of the requests goes there by the same split and into no
  replica queue. A hosted request's TTFT is the provider's ``p95_ttft_s`` (the figure the
  plan was made with). Each provider's quotas are checked per minute of the replayed
  arrivals (minute ``⌊t / 60⌋``, all the demands it serves together, in arrival order): a
  request that would take the minute past ``rpm_limit`` requests or ``tpm_limit`` tokens
  (prompt + output) is refused and uses none of the quota. A refused request is not served
  (its TTFT is infinite, as a request with no replica); the report counts them per demand
  and per provider (``HostedVerdict``, ``ProviderReplay``);
* **pools**: the replicas of one shape in one region serve that region's requests for the
  shape as one FCFS queue (the gateway balances across zones). A request's TTFT is its wait,
  plus its prefill (``prompt × (1 − hit rate) / prefill_tokens_per_s``), plus the round trip
  when it is served outside its home region;
* **scenarios**: all replicas up; each zone of a region lost (the pools of that region keep
  ``N − n_zone`` replicas), judged for demands promised ``zone``; one replica lost in every
  pool, judged for demands promised ``n+1`` or ``zone``. In a failure only the traffic its
  floor protects is replayed (promised ``zone``, or ``n+1`` and ``zone``): the rest is shed,
  as the placement's floors assume and a gateway's priorities do. Pools are independent queues under
  fixed routing, so losing one replica everywhere at once gives each pool what losing one of
  its own would.

A **tenant holds** when its p95 TTFT (nearest rank, over all its replayed requests: every
class and origin, as its tier's objective is stated) is within its ``ttft_slo_s`` in every
scenario its promise covers; the plan holds when every tenant does. Per-demand figures are
reported too, to show where a tail comes from. For a pool whose demands miss, the
replay also finds the fewest live replicas that would hold them (bisection on the same
requests): ``PoolShortfall.needed_live``, None where no number of replicas would (the prefill
alone is too slow). ``planner.placement.verified`` re-solves with those figures.

Deterministic: the same problem, solution, traffic and seed give the same report.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from planner.capacity import burstiness, simulation
from planner.errors import PlannerInputError
from planner.placement.problem import Demand, Problem, Shape

FloatArray = npt.NDArray[np.float64]

#: The quantile the TTFT objective is read at.
SLO_QUANTILE = 0.95
#: Span of synthesised arrivals: long enough for a few thousand requests of the demand,
#: between 10 minutes and an hour.
SYNTH_REQUESTS = 4000
SYNTH_MIN_S = 600.0
SYNTH_MAX_S = 3600.0
#: The most live replicas the shortfall search tries, as a multiple of the pool's own.
SEARCH_LIMIT = 16

_Z95 = NormalDist().inv_cdf(0.95)
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0

ALL_UP = "all up"
ONE_REPLICA = "one replica lost"


def zone_scenario(zone: str) -> str:
    return f"zone {zone} lost"


@dataclass(frozen=True)
class Traffic:
    """Requests of one demand to replay: arrival times (seconds, non-decreasing, from 0) and
    token counts, and the rate they stand for (``requests_per_s``: the log's peak rate, the
    figure the demand was sized from), so that a demand sized higher or lower replays them
    compressed or stretched in time."""

    arrival_s: FloatArray
    prompt_tokens: FloatArray
    output_tokens: FloatArray
    requests_per_s: float
    source: str = "request log"

    def __post_init__(self) -> None:
        n = self.arrival_s.shape[0]
        if n == 0 or self.prompt_tokens.shape[0] != n or self.output_tokens.shape[0] != n:
            raise PlannerInputError("traffic", "needs one prompt and output count per arrival")
        if not math.isfinite(self.requests_per_s) or self.requests_per_s <= 0:
            raise PlannerInputError("traffic.requests_per_s", "must be a positive rate")


def traffic_from_log(
    arrival_s: npt.ArrayLike,
    prompt_tokens: npt.ArrayLike,
    output_tokens: npt.ArrayLike,
    *,
    requests_per_s: float,
) -> Traffic:
    """A request log's busiest hour as ``Traffic`` (times from the hour's start)."""
    times = np.asarray(arrival_s, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    times = times[order]
    prompts = np.asarray(prompt_tokens, dtype=np.float64)[order]
    outputs = np.asarray(output_tokens, dtype=np.float64)[order]
    if times.shape[0] >= 2:
        start, end = burstiness.busiest_window(times)
    else:
        start, end = float(times[0]), float(times[0])
    keep = (times >= start) & (times <= end)
    return Traffic(
        arrival_s=times[keep] - start,
        prompt_tokens=prompts[keep],
        output_tokens=outputs[keep],
        requests_per_s=requests_per_s,
    )


def _seed_of(text: str, seed: int) -> int:
    digest = hashlib.sha256(f"{seed}:{text}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _lognormal(mean: float, p95: float | None, n: int, rng: np.random.Generator) -> FloatArray:
    """``n`` lengths with this mean and, where given and above it, this p95 (at least 1)."""
    if mean <= 0:
        return np.zeros(n)
    sigma = 0.0
    if p95 is not None and p95 > mean:
        # ln p95 = μ + z·σ and ln mean = μ + σ²/2: σ² / 2 − z·σ + ln(p95 / mean) = 0.
        disc = _Z95 * _Z95 - 2.0 * math.log(p95 / mean)
        sigma = _Z95 - math.sqrt(disc) if disc > 0 else _Z95
    if sigma <= 0:
        return np.full(n, mean)
    mu = math.log(mean) - sigma * sigma / 2.0
    return np.exp(mu + sigma * rng.standard_normal(n))


def synthesised_traffic(demand: Demand, *, seed: int = 0) -> Traffic:
    """Arrivals at the demand's sized rate with its measured dispersion, and token counts
    lognormal around its mean and p95, over ``SYNTH_REQUESTS`` requests' worth of time
    (between ``SYNTH_MIN_S`` and ``SYNTH_MAX_S``)."""
    rate = demand.requests_per_s
    if rate <= 0:
        raise PlannerInputError(f"demand {demand.id}", "has no requests to replay")
    span = min(SYNTH_MAX_S, max(SYNTH_MIN_S, SYNTH_REQUESTS / rate))
    own = _seed_of(demand.id, seed)
    times = burstiness.synthesised_arrivals(rate, span, scv=demand.arrival_scv, seed=own)
    rng = np.random.default_rng([own, 7])
    n = times.shape[0]
    return Traffic(
        arrival_s=times,
        prompt_tokens=_lognormal(demand.prompt_tokens, demand.prompt_tokens_p95, n, rng),
        output_tokens=_lognormal(demand.output_tokens, demand.output_tokens_p95, n, rng),
        requests_per_s=rate,
        source="synthesised",
    )


@dataclass(frozen=True)
class HostedVerdict:
    """A demand's requests sent to hosted providers: how many, their share of all its
    replayed arrivals (served, hosted and the unserved share), how many a quota refused,
    and the p95 TTFT of those admitted; per provider, its requests and refusals."""

    requests: int
    share: float
    over_quota: int
    p95_ttft_s: float
    providers: Mapping[str, tuple[int, int]]  # provider -> (requests, over quota)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "share": round(self.share, 4),
            "over_quota": self.over_quota,
            "p95_ttft_s": _finite(self.p95_ttft_s),
            "providers": {
                name: {"requests": n, "over_quota": refused}
                for name, (n, refused) in sorted(self.providers.items())
            },
        }


@dataclass(frozen=True)
class ProviderReplay:
    """One hosted provider over the replay: requests offered and refused, the busiest
    minute's offered requests and tokens, against its quotas."""

    provider: str
    requests: int
    over_quota: int
    minutes_over_quota: int
    peak_requests_per_minute: int
    peak_tokens_per_minute: float
    rpm_limit: float | None
    tpm_limit: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "requests": self.requests,
            "over_quota": self.over_quota,
            "minutes_over_quota": self.minutes_over_quota,
            "peak_requests_per_minute": self.peak_requests_per_minute,
            "peak_tokens_per_minute": round(self.peak_tokens_per_minute, 1),
            "rpm_limit": self.rpm_limit,
            "tpm_limit": self.tpm_limit,
        }


@dataclass(frozen=True)
class DemandVerdict:
    """One demand's replay: p95 TTFT per scenario it is judged in, against its objective."""

    demand: str
    tenant: str
    source: str
    requests: int
    ttft_slo_s: float | None
    p95_ttft_s: Mapping[str, float]
    worst_scenario: str
    worst_p95_ttft_s: float
    holds: bool | None  # None: no objective to judge
    hosted: HostedVerdict | None = None  # None: the plan sends it to no hosted provider

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "demand": self.demand,
            "tenant": self.tenant,
            "source": self.source,
            "requests": self.requests,
            "ttft_slo_s": self.ttft_slo_s,
            "p95_ttft_s": {k: _finite(v) for k, v in self.p95_ttft_s.items()},
            "worst_scenario": self.worst_scenario,
            "worst_p95_ttft_s": _finite(self.worst_p95_ttft_s),
            "holds": self.holds,
        }
        if self.hosted is not None:
            out["hosted"] = self.hosted.as_dict()
        return out


@dataclass(frozen=True)
class PoolShortfall:
    """A pool (region × shape) whose demands miss their objective in one scenario: the live
    replicas it had there and the fewest that hold them (None: no count does)."""

    region: str
    shape: str
    scenario: str
    live: int
    needed_live: int | None
    demands: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "shape": self.shape,
            "scenario": self.scenario,
            "live": self.live,
            "needed_live": self.needed_live,
            "demands": list(self.demands),
        }


@dataclass(frozen=True)
class TenantVerdict:
    """A tenant's replay: the p95 TTFT over all its replayed requests (every class and
    origin) per scenario its promise covers, against its tier's objective. This is what a
    plan holds or misses; the per-demand figures say where the tail comes from."""

    tenant: str
    demands: tuple[str, ...]
    requests: int
    ttft_slo_s: float | None
    p95_ttft_s: Mapping[str, float]
    worst_scenario: str
    worst_p95_ttft_s: float
    holds: bool | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "demands": list(self.demands),
            "requests": self.requests,
            "ttft_slo_s": self.ttft_slo_s,
            "p95_ttft_s": {k: _finite(v) for k, v in self.p95_ttft_s.items()},
            "worst_scenario": self.worst_scenario,
            "worst_p95_ttft_s": _finite(self.worst_p95_ttft_s),
            "holds": self.holds,
        }


@dataclass(frozen=True)
class ReplayReport:
    demands: tuple[DemandVerdict, ...]
    shortfalls: tuple[PoolShortfall, ...]
    seconds: float
    quantile: float = SLO_QUANTILE
    notes: tuple[str, ...] = field(default=())
    tenants: tuple[TenantVerdict, ...] = field(default=())
    providers: tuple[ProviderReplay, ...] = field(default=())

    @property
    def holds(self) -> bool:
        """Every tenant with an objective holds it."""
        return all(v.holds is not False for v in self.tenants)

    def failing(self) -> list[TenantVerdict]:
        return [v for v in self.tenants if v.holds is False]

    @property
    def over_quota(self) -> int:
        """Hosted requests the providers' quotas refused."""
        return sum(p.over_quota for p in self.providers)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "quantile": self.quantile,
            "holds": self.holds,
            "seconds": round(self.seconds, 3),
            "tenants": [v.as_dict() for v in self.tenants],
            "demands": [v.as_dict() for v in self.demands],
            "shortfalls": [s.as_dict() for s in self.shortfalls],
            "notes": list(self.notes),
        }
        if self.providers:
            # Only a plan with hosted overflow has the key: other reports read as before.
            out["hosted"] = [p.as_dict() for p in self.providers]
        return out


def _finite(value: float) -> float | None:
    """JSON has no infinity: a request that is never served reads as null."""
    return round(value, 4) if math.isfinite(value) else None


@dataclass
class _Pool:
    region: str
    shape: Shape
    replicas: int
    arrival: list[FloatArray] = field(default_factory=list)
    service: list[FloatArray] = field(default_factory=list)
    fixed: list[FloatArray] = field(default_factory=list)  # prefill + round trip, seconds
    owner: list[npt.NDArray[np.int64]] = field(default_factory=list)


@dataclass
class _Merged:
    arrival: FloatArray
    service: FloatArray
    fixed: FloatArray
    owner: npt.NDArray[np.int64]  # the request's demand
    judge: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _merge(pool: _Pool) -> _Merged:
    arrival = np.concatenate(pool.arrival)
    order = np.argsort(arrival, kind="stable")
    return _Merged(
        arrival=arrival[order],
        service=np.concatenate(pool.service)[order],
        fixed=np.concatenate(pool.fixed)[order],
        owner=np.concatenate(pool.owner)[order],
    )


def _subset(merged: _Merged, keep: npt.NDArray[np.bool_]) -> _Merged:
    return _Merged(
        arrival=merged.arrival[keep],
        service=merged.service[keep],
        fixed=merged.fixed[keep],
        owner=merged.owner[keep],
        judge=merged.judge[keep],
    )


def _ttft(merged: _Merged, live: int) -> FloatArray:
    """Each request's TTFT with ``live`` replicas (infinite with none)."""
    if live <= 0:
        return np.full(merged.arrival.shape[0], math.inf)
    requests = simulation.Requests.from_arrays(np.maximum(merged.service, 1e-9))
    start, _ = simulation.open_loop_times(requests, merged.arrival, live)
    return start - merged.arrival + merged.fixed


def _p95(values: FloatArray, quantile: float) -> float:
    if values.shape[0] == 0:
        return 0.0
    if not np.all(np.isfinite(values)):
        # Nearest rank over values some of which are infinite (never served).
        ordered = np.sort(values)
        rank = max(1, math.ceil(quantile * ordered.shape[0]))
        return float(ordered[rank - 1])
    return simulation.latency_quantile(values, quantile)


def _pool_holds(
    merged: _Merged, live: int, judged: Mapping[int, float], quantile: float
) -> tuple[bool, FloatArray]:
    """Whether each judged tenant's requests in the pool keep its objective at ``live``
    replicas (a tenant's p95 over all its requests is within the worst of its pools')."""
    ttft = _ttft(merged, live)
    for tenant, slo in judged.items():
        mine = ttft[merged.judge == tenant]
        if mine.shape[0] and _p95(mine, quantile) > slo:
            return False, ttft
    return True, ttft


def _needed_live(
    merged: _Merged, live: int, judged: Mapping[int, float], quantile: float
) -> int | None:
    """The fewest live replicas (above ``live``) whose replay holds every judged tenant."""
    high = max(2 * live, live + 1)
    limit = max(SEARCH_LIMIT * max(live, 1), 4)
    while not _pool_holds(merged, high, judged, quantile)[0]:
        if high >= limit:
            return None
        high = min(limit, 2 * high)
    low = live  # fails
    while high - low > 1:
        mid = (low + high) // 2
        if _pool_holds(merged, mid, judged, quantile)[0]:
            high = mid
        else:
            low = mid
    return high


@dataclass
class _HostedQueue:
    """Requests sent to one hosted provider: arrival (s), tokens (prompt + output), demand."""

    arrival: list[FloatArray] = field(default_factory=list)
    tokens: list[FloatArray] = field(default_factory=list)
    owner: list[npt.NDArray[np.int64]] = field(default_factory=list)


def admitted_within_quota(
    arrival: FloatArray, tokens: FloatArray, *, tpm_limit: float, rpm_limit: float | None
) -> npt.NDArray[np.bool_]:
    """Which requests (in arrival order) a provider admits, minute by minute.

    Minute ``⌊t / 60⌋``: a request is admitted while the minute's admitted requests stay
    within ``rpm_limit`` (None: no request quota) and their tokens within ``tpm_limit``;
    a refused request uses none of the quota, so a smaller one after it may still fit.
    """
    admitted = np.zeros(arrival.shape[0], dtype=np.bool_)
    minute, used_requests, used_tokens = None, 0, 0.0
    for i, (t, size) in enumerate(zip(arrival.tolist(), tokens.tolist(), strict=True)):
        now = math.floor(t / 60.0)
        if now != minute:
            minute, used_requests, used_tokens = now, 0, 0.0
        if rpm_limit is not None and used_requests + 1 > rpm_limit + 1e-9:
            continue
        if used_tokens + size > tpm_limit + 1e-9:
            continue
        admitted[i] = True
        used_requests += 1
        used_tokens += size
    return admitted


def replay(
    problem: Problem,
    solution: Mapping[str, Any],
    traffic: Mapping[str, Traffic] | None = None,
    *,
    seed: int = 0,
    quantile: float = SLO_QUANTILE,
    shortfalls: bool = True,
) -> ReplayReport:
    """Replay every routed demand through the plan's pools (see the module docstring)."""
    started = time.perf_counter()
    given = dict(traffic or {})
    demands = {d.id: d for d in problem.demands}
    replicas: dict[tuple[str, str], int] = defaultdict(int)
    zone_replicas: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for row in solution.get("replicas", []):
        zone, shape_name = str(row["zone"]), str(row["shape"])
        region = problem.region_of_zone(zone)
        replicas[(region, shape_name)] += int(row["replicas"])
        zone_replicas[(region, shape_name)][zone] = int(row["replicas"])
    routes: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    for row in solution.get("routing", []):
        if float(row["requests_per_s"]) > 0:
            routes[str(row["demand"])].append(
                (str(row["region"]), str(row["shape"]), float(row["requests_per_s"]))
            )

    hosted_routes: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for row in solution.get("hosted") or []:
        if float(row["requests_per_s"]) > 0:
            hosted_routes[str(row["demand"])].append(
                (str(row["provider"]), float(row["requests_per_s"]))
            )
    providers = {p.name: p for p in problem.hosted}

    replayed = sorted(set(routes) | set(hosted_routes))
    index = {did: k for k, did in enumerate(replayed)}
    pools: dict[tuple[str, str], _Pool] = {}
    queues: dict[str, _HostedQueue] = {}
    offered: dict[str, int] = {}  # demand -> all its replayed arrivals (the unserved too)
    sources: dict[str, tuple[str, int]] = {}
    notes: list[str] = []
    for did in replayed:
        demand = demands[did]
        if demand.requests_per_s <= 0:
            continue
        own = given.get(did)
        if own is None:
            own = synthesised_traffic(demand, seed=seed)
        # Compress or stretch the log so its peak becomes the demand's sized rate.
        scale = own.requests_per_s / demand.requests_per_s
        arrival = own.arrival_s * scale
        planned = demand.planned_requests_per_s
        rates = [rate for _, _, rate in routes[did]] + [rate for _, rate in hosted_routes[did]]
        served = sum(rates)
        served_share = min(1.0, served / planned) if planned > 0 else 0.0
        # A low-discrepancy split: request i goes by (i·φ) mod 1 against the cumulative
        # shares of the routes, then of the hosted providers; a share of 1 − served is the
        # unserved part, not replayed.
        n = arrival.shape[0]
        u = np.mod(np.arange(n) * _GOLDEN + (_seed_of(did, seed) % 1000) / 1000.0, 1.0)
        bounds: FloatArray = (
            np.cumsum([rate / planned for rate in rates]) if planned else np.zeros(0)
        )
        pick = np.searchsorted(bounds, u, side="right")
        offered[did] = n
        sources[did] = (own.source, int(np.sum(pick < len(rates))))
        for j, (name, _rate) in enumerate(hosted_routes[did]):
            chosen = pick == len(routes[did]) + j
            if not np.any(chosen):
                continue
            queue = queues.setdefault(name, _HostedQueue())
            queue.arrival.append(arrival[chosen])
            queue.tokens.append(own.prompt_tokens[chosen] + own.output_tokens[chosen])
            queue.owner.append(np.full(int(np.sum(chosen)), index[did], dtype=np.int64))
        if served_share < 1.0 - 1e-9:
            notes.append(
                f"{did}: {100 * (1 - served_share):.1f}% of its requests are unserved by the "
                "plan and not replayed"
            )
        for k, (region, shape_name, _rate) in enumerate(routes[did]):
            chosen = pick == k
            if not np.any(chosen):
                continue
            shape = problem.shape(shape_name)
            key = (region, shape_name)
            pool = pools.get(key)
            if pool is None:
                pool = pools[key] = _Pool(region, shape, replicas.get(key, 0))
            prompts = own.prompt_tokens[chosen] * (1.0 - demand.prefix_cache_hit_rate)
            prefill = prompts / shape.prefill_tokens_per_s
            decode = own.output_tokens[chosen] / shape.decode_tokens_per_s
            rtt = problem.rtt(demand.home_region, region) or 0.0
            pool.arrival.append(arrival[chosen])
            pool.service.append(prefill + decode)
            pool.fixed.append(prefill + rtt / 1000.0)
            pool.owner.append(np.full(int(np.sum(chosen)), index[did], dtype=np.int64))

    # TTFT of every replayed request: per demand, per pool, per scenario judged there. The
    # objective is the tenant's: its p95 over all its requests (of every class and origin).
    by_demand: dict[int, dict[tuple[str, str], dict[str, FloatArray]]] = defaultdict(dict)
    found: list[PoolShortfall] = []
    zones_of = {r.name: r.zones for r in problem.regions}
    dids = {k: did for did, k in index.items()}

    # Judged per tenant and objective: a tenant's demands share its tier's objective in the
    # control plane; a problem that gives one tenant several is judged on each apart.
    def group_key(k: int) -> tuple[str, float]:
        demand = demands[dids[k]]
        return (demand.tenant, math.inf if demand.ttft_slo_s is None else demand.ttft_slo_s)

    groups = sorted({group_key(k) for k in range(len(dids))})
    gindex = {g: i for i, g in enumerate(groups)}
    tenant_of = np.array([gindex[group_key(k)] for k in range(len(dids))], dtype=np.int64)
    level_of = np.array([demands[dids[k]].promise_level for k in range(len(dids))], dtype=np.int64)
    for key, pool in sorted(pools.items()):
        everyone = _merge(pool)
        everyone.judge = tenant_of[everyone.owner]
        owners = sorted(set(everyone.owner.tolist()))
        scenarios: list[tuple[str, int, int]] = [(ALL_UP, pool.replicas, 0)]
        if pool.replicas >= 1:
            scenarios.append((ONE_REPLICA, pool.replicas - 1, 1))
        for zone in zones_of[pool.region]:
            lost = zone_replicas[key].get(zone, 0)
            scenarios.append((zone_scenario(zone), pool.replicas - lost, 2))
        for name, live, level in scenarios:
            judged = [k for k in owners if demands[dids[k]].promise_level >= level]
            if not judged:
                continue
            # In a failure the floors protect promised load only: the rest is shed, as the
            # gateway's priorities would, so it is not replayed there.
            merged = (
                everyone if level == 0 else _subset(everyone, level_of[everyone.owner] >= level)
            )
            slos: dict[int, float] = {}
            for k in judged:
                slo = demands[dids[k]].ttft_slo_s
                if slo is not None:
                    t = int(tenant_of[k])
                    slos[t] = min(slos.get(t, math.inf), float(slo))
            ok, ttft = _pool_holds(merged, live, slos, quantile)
            for k in judged:
                by_demand[k].setdefault(key, {})[name] = ttft[merged.owner == k]
            if not ok and shortfalls:
                missing_tenants = {
                    t for t, slo in slos.items() if _p95(ttft[merged.judge == t], quantile) > slo
                }
                missing = tuple(sorted(dids[k] for k in judged if tenant_of[k] in missing_tenants))
                found.append(
                    PoolShortfall(
                        region=pool.region,
                        shape=pool.shape.name,
                        scenario=name,
                        live=live,
                        needed_live=_needed_live(merged, live, slos, quantile),
                        demands=missing,
                    )
                )

    # Hosted requests: each provider's quotas per minute, over every demand it serves.
    hosted_ttft: dict[int, dict[str, FloatArray]] = defaultdict(dict)  # demand -> provider
    hosted_refused: dict[int, dict[str, int]] = defaultdict(dict)
    provider_rows: list[ProviderReplay] = []
    for name, queue in sorted(queues.items()):
        provider = providers[name]
        arrival = np.concatenate(queue.arrival)
        order = np.argsort(arrival, kind="stable")
        arrival = arrival[order]
        tokens = np.concatenate(queue.tokens)[order]
        owner = np.concatenate(queue.owner)[order]
        admitted = admitted_within_quota(
            arrival, tokens, tpm_limit=provider.tpm_limit, rpm_limit=provider.rpm_limit
        )
        ttft = np.where(admitted, provider.p95_ttft_s, math.inf)
        for k in sorted(set(owner.tolist())):
            mine = owner == k
            hosted_ttft[k][name] = ttft[mine]
            hosted_refused[k][name] = int(np.sum(mine & ~admitted))
            # A hosted request is on no replica: the same in every scenario.
            by_demand[k][("", name)] = {ALL_UP: ttft[mine]}
        minutes = np.floor(arrival / 60.0).astype(np.int64)
        _, first = np.unique(minutes, return_index=True)
        per_minute = np.diff(np.append(first, arrival.shape[0]))
        tokens_per_minute = np.add.reduceat(tokens, first)
        refused_per_minute = np.add.reduceat((~admitted).astype(np.int64), first)
        provider_rows.append(
            ProviderReplay(
                provider=name,
                requests=int(arrival.shape[0]),
                over_quota=int(np.sum(~admitted)),
                minutes_over_quota=int(np.sum(refused_per_minute > 0)),
                peak_requests_per_minute=int(per_minute.max()),
                peak_tokens_per_minute=float(tokens_per_minute.max()),
                rpm_limit=provider.rpm_limit,
                tpm_limit=provider.tpm_limit,
            )
        )
        if not np.all(admitted):
            notes.append(
                f"hosted {name}: {int(np.sum(~admitted))} of {arrival.shape[0]} requests over "
                f"its quota in {int(np.sum(refused_per_minute > 0))} of "
                f"{per_minute.shape[0]} minutes"
            )

    def hosted_verdict(k: int) -> HostedVerdict | None:
        if k not in hosted_ttft:
            return None
        ttft = np.concatenate(list(hosted_ttft[k].values()))
        served_ttft = ttft[np.isfinite(ttft)]
        did = dids[k]
        return HostedVerdict(
            requests=int(ttft.shape[0]),
            share=ttft.shape[0] / offered[did] if offered[did] else 0.0,
            over_quota=sum(hosted_refused[k].values()),
            p95_ttft_s=_p95(served_ttft, quantile) if served_ttft.shape[0] else math.inf,
            providers={
                name: (int(values.shape[0]), hosted_refused[k][name])
                for name, values in hosted_ttft[k].items()
            },
        )

    def scenarios_of(ks: list[int]) -> dict[str, float]:
        """p95 per scenario over the requests of demands ``ks`` (a scenario of one region
        leaves their pools elsewhere all up)."""
        names = sorted({n for k in ks for runs in by_demand[k].values() for n in runs})
        out: dict[str, float] = {}
        for name in names:
            values = [runs.get(name, runs[ALL_UP]) for k in ks for runs in by_demand[k].values()]
            out[name] = _p95(np.concatenate(values), quantile)
        return out

    verdicts: list[DemandVerdict] = []
    for did, k in sorted(index.items()):
        demand = demands[did]
        if k not in by_demand:
            continue
        per = scenarios_of([k])
        worst = max(per, key=lambda s: per[s])
        slo = demand.ttft_slo_s
        verdicts.append(
            DemandVerdict(
                demand=did,
                tenant=demand.tenant,
                source=sources[did][0],
                requests=sources[did][1],
                ttft_slo_s=slo,
                p95_ttft_s=per,
                worst_scenario=worst,
                worst_p95_ttft_s=per[worst],
                holds=None if slo is None else per[worst] <= slo,
                hosted=hosted_verdict(k),
            )
        )
    tenant_verdicts: list[TenantVerdict] = []
    for tenant, _objective in groups:
        ks = [k for k in by_demand if group_key(k) == (tenant, _objective)]
        if not ks:
            continue
        per = scenarios_of(ks)
        worst = max(per, key=lambda s: per[s])
        objectives = [demands[dids[k]].ttft_slo_s for k in ks]
        known = [float(o) for o in objectives if o is not None]
        slo_t = min(known) if known else None
        tenant_verdicts.append(
            TenantVerdict(
                tenant=tenant,
                demands=tuple(sorted(dids[k] for k in ks)),
                requests=sum(sources[dids[k]][1] for k in ks),
                ttft_slo_s=slo_t,
                p95_ttft_s=per,
                worst_scenario=worst,
                worst_p95_ttft_s=per[worst],
                holds=None if slo_t is None else per[worst] <= slo_t,
            )
        )
    return ReplayReport(
        demands=tuple(verdicts),
        tenants=tuple(tenant_verdicts),
        shortfalls=tuple(found),
        seconds=time.perf_counter() - started,
        quantile=quantile,
        notes=tuple(notes),
        providers=tuple(provider_rows),
    )
