"""Runs and the sweep of the endpoint load test: open-loop and closed-loop runs of sampled
requests, and the knee (``find_knee``), the highest open-loop rate whose TTFT ``quantile``
meets the target.

Requests follow the tenant classes' workload profiles (``workload.sample_requests``); arrivals
are open loop, Poisson (``cv`` = 1) or bursty gamma gaps (``cv`` > 1), sent on schedule
whatever the endpoint does. The cache state is controlled: a cold run shares no prefix; a warm
run first caches each class's common prefix (``LoadPool.warm_up``), then the profile's hit rate
of requests reuse it.

The sweep is ``planner.capacity.search.search_knee`` (the one knee search) over runs with
common random numbers: one request sample and one unit-rate arrival stream, the arrivals at
rate λ being that stream divided by λ, so every rate sends the same requests in the same
pattern. Each rate's run has its own run key, so cold runs stay cold across the sweep. A sweep
stops at its first failed run (errors, not slowness) without a knee, and such a sweep is never
recorded. A closed-loop run (N users, each sending its next request when the previous
completes) can be measured beside it: its throughput is what the replica does flat out, with
latency nobody accepts, which is why it is not the capacity.

Units: requests per second, seconds, tokens.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from planner.capacity.search import search_knee
from workers.benchmarks.endpoint import Endpoint, LoadPool, RequestRecord
from workers.benchmarks.loadtest.report import (
    DEFAULT_MAX_ERROR_SHARE,
    CacheState,
    FloatArray,
    LoadTestFailed,
    RunReport,
    cache_state,
    finite_or_none,
    positive,
    quantile_level,
    summarize_run,
)
from workers.benchmarks.workload import (
    DEFAULT_CLIP_MULTIPLE,
    ClassProfile,
    RequestSample,
    sample_requests,
    unit_rate_arrivals,
)

__all__ = [
    "KneeReport",
    "SweepPoint",
    "closed_run",
    "find_knee",
    "run_closed_loop",
    "run_open_loop",
]


def _new_run_key() -> int:
    return secrets.randbits(48)


def _warm_up(
    pool: LoadPool, endpoint: Endpoint, sample: RequestSample, run_key: int
) -> list[RequestRecord] | None:
    """Cache the run's common prefixes; None when that worked, else the run's records.

    A warm run without its warm-up would measure a colder replica than it claims: then
    nothing is sent, and every request counts as failed with the warm-up's reason.
    """
    broken = [r.detail for r in pool.warm_up(endpoint, sample, run_key) if r.outcome != "ok"]
    if not broken:
        return None
    reason = f"not sent, the warm-up failed: {broken[0]}"
    return [
        RequestRecord(i, 0.0, 0.0, math.nan, math.nan, 0, -1, -1, "error", reason)
        for i in range(sample.count)
    ]


def _open_run(
    pool: LoadPool,
    endpoint: Endpoint,
    sample: RequestSample,
    unit_arrivals: FloatArray,
    rate: float,
    *,
    cache: CacheState,
    target_ttft_s: float,
    quantile: float,
    max_error_share: float,
    run_key: int,
) -> RunReport:
    records = _warm_up(pool, endpoint, sample, run_key) if cache == "warm" else None
    if records is None:
        records = pool.run_open(endpoint, sample, unit_arrivals / rate, run_key=run_key)
    return summarize_run(
        records,
        sample,
        mode="open",
        cache=cache,
        target_ttft_s=target_ttft_s,
        quantile=quantile,
        offered_rate=rate,
        max_error_share=max_error_share,
    )


def run_open_loop(
    pool: LoadPool,
    endpoint: Endpoint,
    classes: Sequence[ClassProfile],
    rate: float,
    *,
    target_ttft_s: float,
    n: int = 1000,
    seed: int = 0,
    cv: float = 1.0,
    cache: CacheState = "cold",
    quantile: float = 0.95,
    clip_multiple: float = DEFAULT_CLIP_MULTIPLE,
    max_error_share: float = DEFAULT_MAX_ERROR_SHARE,
) -> RunReport:
    """One open-loop run: ``n`` requests of the class mix at ``rate`` req/s (arrival gaps with
    coefficient of variation ``cv``, 1 = Poisson), cold or warm."""
    lam = positive("rate", rate)
    sample = sample_requests(
        classes, n, seed=seed, warm=cache_state(cache) == "warm", clip_multiple=clip_multiple
    )
    return _open_run(
        pool,
        endpoint,
        sample,
        unit_rate_arrivals(n, seed, positive("cv", cv)),
        lam,
        cache=cache,
        target_ttft_s=target_ttft_s,
        quantile=quantile,
        max_error_share=max_error_share,
        run_key=_new_run_key(),
    )


def run_closed_loop(
    pool: LoadPool,
    endpoint: Endpoint,
    classes: Sequence[ClassProfile],
    users: int,
    *,
    target_ttft_s: float,
    n: int = 1000,
    seed: int = 0,
    cache: CacheState = "cold",
    quantile: float = 0.95,
    clip_multiple: float = DEFAULT_CLIP_MULTIPLE,
    max_error_share: float = DEFAULT_MAX_ERROR_SHARE,
) -> RunReport:
    """One closed-loop run: ``users`` clients, each sending its next request when the
    previous one completes, until ``n`` requests are done."""
    sample = sample_requests(
        classes, n, seed=seed, warm=cache_state(cache) == "warm", clip_multiple=clip_multiple
    )
    return closed_run(
        pool,
        endpoint,
        sample,
        users,
        cache=cache,
        target_ttft_s=target_ttft_s,
        quantile=quantile,
        max_error_share=max_error_share,
    )


def closed_run(
    pool: LoadPool,
    endpoint: Endpoint,
    sample: RequestSample,
    users: int,
    *,
    cache: CacheState,
    target_ttft_s: float,
    quantile: float,
    max_error_share: float,
) -> RunReport:
    run_key = _new_run_key()
    records = _warm_up(pool, endpoint, sample, run_key) if cache == "warm" else None
    if records is None:
        records = pool.run_closed(endpoint, sample, users, run_key=run_key)
    return summarize_run(
        records,
        sample,
        mode="closed",
        cache=cache,
        target_ttft_s=target_ttft_s,
        quantile=quantile,
        users=users,
        max_error_share=max_error_share,
    )


@dataclass(frozen=True)
class SweepPoint:
    """One rate of a sweep: the run there and whether its TTFT quantile met the target."""

    rate: float
    meets: bool
    report: RunReport


@dataclass(frozen=True)
class KneeReport:
    """Result of ``find_knee``.

    ``knee_rate``: the highest open-loop rate (req/s) whose TTFT ``quantile`` met
    ``target_ttft_s`` (0 when none did or the sweep failed); ``knee`` its run. ``bracketed``:
    a rate above the knee failed (false: the knee is only a lower bound, every rate tried met).
    ``closed_loop``: the closed-loop run beside it, if asked for. ``failure``: why the sweep
    failed (empty when it did not); a failed sweep is never recorded.
    """

    knee_rate: float
    target_ttft_s: float
    quantile: float
    cache: CacheState
    requests_per_point: int
    seed: int
    cv: float
    bracketed: bool
    points: tuple[SweepPoint, ...]
    closed_loop: RunReport | None
    failure: str

    @property
    def failed(self) -> bool:
        """Whether the sweep failed."""
        return bool(self.failure)

    @property
    def knee(self) -> RunReport | None:
        """The run at the knee rate (None when no rate met)."""
        for point in self.points:
            if point.meets and point.rate == self.knee_rate:
                return point.report
        return None

    def as_dict(self) -> dict[str, object]:
        """JSON-ready summary (no per-request records), for provenance."""
        return {
            "knee_rate_per_s": self.knee_rate,
            "target_ttft_s": self.target_ttft_s,
            "quantile": self.quantile,
            "cache": self.cache,
            "requests_per_point": self.requests_per_point,
            "seed": self.seed,
            "cv": self.cv,
            "bracketed": self.bracketed,
            "points": [
                {
                    "rate_per_s": p.rate,
                    "meets": p.meets,
                    "ttft_quantile_s": finite_or_none(p.report.ttft_quantile_s),
                    "throughput_per_s": p.report.throughput_per_s,
                    "goodput_per_s": p.report.goodput_per_s,
                    "errors": p.report.overall.errors,
                    "timeouts": p.report.overall.timeouts,
                }
                for p in self.points
            ],
            "knee": None if self.knee is None else self.knee.as_dict(),
            "closed_loop": None if self.closed_loop is None else self.closed_loop.as_dict(),
            "failure": self.failure,
        }


def find_knee(
    pool: LoadPool,
    endpoint: Endpoint,
    classes: Sequence[ClassProfile],
    target_ttft_s: float,
    *,
    first_rate: float,
    upper_rate: float | None = None,
    max_rate: float | None = None,
    min_rate: float | None = None,
    quantile: float = 0.95,
    n: int = 1000,
    seed: int = 0,
    cv: float = 1.0,
    cache: CacheState = "cold",
    rel_tol: float = 0.02,
    max_points: int = 12,
    closed_loop_users: int | None = None,
    clip_multiple: float = DEFAULT_CLIP_MULTIPLE,
    max_error_share: float = DEFAULT_MAX_ERROR_SHARE,
) -> KneeReport:
    """The highest open-loop rate whose TTFT ``quantile`` meets ``target_ttft_s`` (the tier's
    p95 TTFT SLO), by ``search_knee`` over runs of the same ``n`` requests.

    ``first_rate``, ``upper_rate``, ``max_rate`` and ``min_rate`` steer the search (see
    ``search_knee``); a previous capacity figure's knee is a good first rate. ``min_rate``
    defaults to ``first_rate`` / 8: three halvings, after which the sweep fails (the target is
    out of reach, or the first rate was far off). With ``closed_loop_users`` the same
    requests are also sent by that many closed-loop users after the sweep.
    """
    target = positive("target_ttft_s", target_ttft_s)
    first = positive("first_rate", first_rate)
    level = quantile_level(quantile)
    state = cache_state(cache)
    sample = sample_requests(
        classes, n, seed=seed, warm=state == "warm", clip_multiple=clip_multiple
    )
    unit = unit_rate_arrivals(n, seed, positive("cv", cv))
    base_key = _new_run_key()
    points: list[SweepPoint] = []

    def evaluate(rate: float) -> bool:
        report = _open_run(
            pool,
            endpoint,
            sample,
            unit,
            rate,
            cache=state,
            target_ttft_s=target,
            quantile=level,
            max_error_share=max_error_share,
            run_key=base_key + len(points),
        )
        points.append(SweepPoint(rate, report.meets_target, report))
        if report.failed:
            raise LoadTestFailed(report)
        return report.meets_target

    failure = ""
    try:
        search = search_knee(
            evaluate,
            first_rate=first,
            upper_rate=upper_rate,
            max_rate=max_rate,
            min_rate=first / 8.0 if min_rate is None else min_rate,
            rel_tol=rel_tol,
            max_points=max_points,
        )
        knee, bracketed = search.knee_rate, search.bracketed
        if knee == 0:
            failure = (
                f"no rate tried met p{level * 100:g} TTFT <= {target:g} s (lowest tried "
                f"{min(p.rate for p in points):.4g} req/s)"
            )
    except LoadTestFailed as exc:
        knee, bracketed = 0.0, False
        failure = f"at {points[-1].rate:.4g} req/s: {exc.report.failure}"
    closed = None
    if closed_loop_users is not None and not failure:
        closed = closed_run(
            pool,
            endpoint,
            sample,
            closed_loop_users,
            cache=state,
            target_ttft_s=target,
            quantile=level,
            max_error_share=max_error_share,
        )
    return KneeReport(
        knee_rate=knee,
        target_ttft_s=target,
        quantile=level,
        cache=state,
        requests_per_point=n,
        seed=seed,
        cv=cv,
        bracketed=bracketed,
        points=tuple(points),
        closed_loop=closed,
        failure=failure,
    )
