"""Endpoint load test: what one replica sustains at the tier's p95 TTFT target, measured over HTTP.

The planner sizes fleets from per-replica capacity figures; this module measures one against a
live OpenAI-compatible streaming endpoint (vLLM and most runtimes, or the simulated replica in
``replica_server``), the way the seeds' load-test plan asks:

* requests follow the tenant classes' workload profiles (``workload.sample_requests``: sampled
  prompt and output lengths, ``max_tokens`` = the sampled output with ``ignore_eos``), never one
  canned prompt;
* arrivals are open loop: Poisson (``cv`` = 1) or bursty gamma gaps with coefficient of
  variation ``cv`` > 1, sent on schedule whatever the endpoint does (``loadgen``: Ray actors,
  each with a share of the schedule, so the load can exceed one machine);
* the cache state is controlled: a cold run shares no prefix (every prompt's text is unique to
  the run and request); a warm run first caches each class's common prefix, then the profile's
  hit rate of requests reuse it;
* TTFT, inter-token latency (per request: the mean gap between output tokens after the first)
  and end-to-end latency are reported at p50/p95/p99, overall and per class, with errors,
  timeouts and goodput (requests whose TTFT met the target, per second).

Capacity is the knee (``find_knee``): the highest open-loop rate whose TTFT ``quantile`` meets
the target. The search is ``planner.capacity.slo``'s: common random numbers (one request sample
and one unit-rate arrival stream, the arrivals at rate λ being that stream divided by λ, so
every rate sends the same requests in the same pattern) and bracketing plus bisection
(``planner.capacity.search.search_knee``, the one knee search). Each rate's run has its own run key, so cold runs stay cold across the sweep.
A closed-loop figure (``run_closed_loop``: N users, each sending its next request when the
previous completes) can be measured beside it: its throughput is what the replica does flat
out, with latency nobody accepts, which is why it is not the capacity.

The quantile of a run counts every request that never produced a first token (error or
timeout) as missing the target; percentiles of TTFT, ITL and end-to-end latency are over the
requests that completed. A run fails when more than ``max_error_share`` of its requests
errored (refused connections, HTTP errors, broken streams): that is a broken endpoint, not an
overloaded one, and a sweep stops at its first failed run without a knee, so nothing is stored.
Timeouts are the endpoint being slow and count as missed targets, not errors.

``cost_model_knee`` predicts the knee of a sample from the planner's queue simulator for a
replica of known costs; against the simulated replica configured with
``ReplicaConfig.fifo_slots`` the two describe the same queue (see ``docs/loadtesting.md``).

From the command line, ``python -m workers.benchmarks.loadtest --help`` runs a sweep against
any endpoint and prints the report as JSON.

Units: requests per second, seconds, tokens.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from planner.capacity.search import KneeSearch, search_knee
from planner.capacity.simulation import Requests, latency_quantile, open_loop_times
from planner.capacity.slo import FIRST_POINT_UTILISATION
from planner.capacity.workload import request_cost
from planner.errors import PlannerInputError
from workers.benchmarks.loadgen import Endpoint, LoadGeneratorPool, RequestRecord
from workers.benchmarks.workload import (
    DEFAULT_CLIP_MULTIPLE,
    ClassProfile,
    RequestSample,
    sample_requests,
    unit_rate_arrivals,
)

if TYPE_CHECKING:  # Django is needed only to record results, never to run a test.
    from controlplane.benchmarks.models import BenchmarkRun
    from controlplane.fleet.models import CapacityFigure, ReplicaShape, WorkloadClass

__all__ = [
    "FIRST_POINT_UTILISATION",
    "KneeReport",
    "LatencyPercentiles",
    "LoadTestFailed",
    "LoadTestPlan",
    "RunReport",
    "StageLatencies",
    "SweepPoint",
    "TokenRates",
    "cost_model_knee",
    "endpoint_load_test_execute",
    "find_knee",
    "load_test_software",
    "load_test_workload",
    "main",
    "measure_token_rates",
    "record_load_test",
    "run_closed_loop",
    "run_open_loop",
    "steady_token_rates",
    "summarize_run",
]

#: Errors (not timeouts) beyond this share of a run's requests fail the run.
DEFAULT_MAX_ERROR_SHARE = 0.01

CacheState = Literal["cold", "warm"]
FloatArray = npt.NDArray[np.float64]


class LoadTestFailed(RuntimeError):
    """The endpoint failed the load test (errors, not slowness); ``report`` says how."""

    def __init__(self, report: RunReport) -> None:
        super().__init__(report.failure)
        self.report = report


# -- statistics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyPercentiles:
    """Count, mean and nearest-rank p50/p95/p99 of a latency (seconds); NaN when count is 0."""

    count: int
    mean_s: float
    p50_s: float
    p95_s: float
    p99_s: float

    @classmethod
    def of(cls, values: Sequence[float] | FloatArray) -> LatencyPercentiles:
        """Percentiles of the finite values (NaN entries, for requests without one, are left
        out)."""
        data = np.asarray(values, dtype=np.float64)
        data = data[np.isfinite(data)]
        if data.shape[0] == 0:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        p50, p95, p99 = (latency_quantile(data, q) for q in (0.50, 0.95, 0.99))
        return cls(int(data.shape[0]), float(np.mean(data)), p50, p95, p99)

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON-ready (NaN as None)."""
        return {
            "count": self.count,
            "mean_s": _finite_or_none(self.mean_s),
            "p50_s": _finite_or_none(self.p50_s),
            "p95_s": _finite_or_none(self.p95_s),
            "p99_s": _finite_or_none(self.p99_s),
        }


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class StageLatencies:
    """One group of requests (overall or one class): counts and TTFT, ITL, end-to-end."""

    requests: int
    completed: int
    errors: int
    timeouts: int
    ttft: LatencyPercentiles
    itl: LatencyPercentiles
    e2e: LatencyPercentiles

    @classmethod
    def of(cls, records: Sequence[RequestRecord]) -> StageLatencies:
        ok = [r for r in records if r.outcome == "ok"]
        return cls(
            requests=len(records),
            completed=len(ok),
            errors=sum(r.outcome == "error" for r in records),
            timeouts=sum(r.outcome == "timeout" for r in records),
            ttft=LatencyPercentiles.of([r.ttft_s for r in ok]),
            itl=LatencyPercentiles.of([r.itl_s for r in ok]),
            e2e=LatencyPercentiles.of([r.e2e_s for r in ok]),
        )

    def as_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return {
            "requests": self.requests,
            "completed": self.completed,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "ttft": self.ttft.as_dict(),
            "itl": self.itl.as_dict(),
            "e2e": self.e2e.as_dict(),
        }


@dataclass(frozen=True)
class RunReport:
    """What one run measured.

    ``mode`` ``"open"`` (at ``offered_rate`` req/s) or ``"closed"`` (``users`` clients).
    ``duration_s``: from the first send to the last answer; ``throughput_per_s``: completed
    requests per second over it; ``goodput_per_s``: completed requests whose TTFT met
    ``target_ttft_s``, per second (NaN without a target). ``ttft_quantile_s``: the TTFT at
    ``quantile`` counting requests without a first token as infinite. Token rates are the
    endpoint's reported prompt and output tokens per second over the duration;
    ``cached_prompt_share`` the share of prompt tokens it served from its prefix cache (NaN if it
    did not say). ``send_lag_p99_s``/``send_lag_max_s``: how late the generators sent (open
    loop): a large lag means the generators, not the endpoint, limited the run.
    """

    mode: Literal["open", "closed"]
    cache: CacheState
    offered_rate: float
    users: int
    target_ttft_s: float
    quantile: float
    duration_s: float
    throughput_per_s: float
    goodput_per_s: float
    ttft_quantile_s: float
    overall: StageLatencies
    per_class: Mapping[str, StageLatencies]
    prompt_tokens_per_s: float
    output_tokens_per_s: float
    cached_prompt_share: float
    send_lag_p99_s: float
    send_lag_max_s: float
    error_samples: tuple[str, ...]
    failure: str
    records: tuple[RequestRecord, ...] = field(repr=False, compare=False)

    @property
    def failed(self) -> bool:
        """Whether the run failed (``failure`` says why)."""
        return bool(self.failure)

    @property
    def meets_target(self) -> bool:
        """Whether the TTFT quantile met the target (a failed run never does)."""
        return not self.failed and self.ttft_quantile_s <= self.target_ttft_s

    def as_dict(self) -> dict[str, object]:
        """JSON-ready summary (no per-request records)."""
        return {
            "mode": self.mode,
            "cache": self.cache,
            "offered_rate_per_s": self.offered_rate if self.mode == "open" else None,
            "users": self.users if self.mode == "closed" else None,
            "target_ttft_s": self.target_ttft_s,
            "quantile": self.quantile,
            "duration_s": self.duration_s,
            "throughput_per_s": self.throughput_per_s,
            "goodput_per_s": _finite_or_none(self.goodput_per_s),
            "ttft_quantile_s": _finite_or_none(self.ttft_quantile_s),
            "overall": self.overall.as_dict(),
            "per_class": {name: s.as_dict() for name, s in self.per_class.items()},
            "prompt_tokens_per_s": self.prompt_tokens_per_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "cached_prompt_share": _finite_or_none(self.cached_prompt_share),
            "send_lag_p99_s": _finite_or_none(self.send_lag_p99_s),
            "send_lag_max_s": _finite_or_none(self.send_lag_max_s),
            "error_samples": list(self.error_samples),
            "failure": self.failure,
        }


def summarize_run(
    records: Sequence[RequestRecord],
    sample: RequestSample,
    *,
    mode: Literal["open", "closed"],
    cache: CacheState,
    target_ttft_s: float,
    quantile: float = 0.95,
    offered_rate: float = math.nan,
    users: int = 0,
    max_error_share: float = DEFAULT_MAX_ERROR_SHARE,
) -> RunReport:
    """The report of one run from its records (one per request of ``sample``)."""
    if len(records) != sample.count:
        raise PlannerInputError("records", f"expected {sample.count} records, got {len(records)}")
    level = _quantile_level(quantile)
    target = _positive("target_ttft_s", target_ttft_s)
    share = _fraction("max_error_share", max_error_share)
    ok = [r for r in records if r.outcome == "ok"]
    sent = np.array([r.sent_s for r in records])
    done = np.array([r.done_s for r in ok])
    start = float(sent.min())
    end = float(done.max()) if ok else start
    duration = max(end - start, 1e-9)
    # A request without a first token (error, timeout) missed any target.
    ttft = np.array([r.ttft_s if r.outcome == "ok" else math.inf for r in records])
    ttft[~np.isfinite(ttft)] = math.inf
    goodput = float(np.sum(ttft <= target)) / duration

    per_class: dict[str, StageLatencies] = {}
    for k, name in enumerate(sample.class_names):
        members = [r for r in records if int(sample.class_index[r.index]) == k]
        if members:
            per_class[name] = StageLatencies.of(members)
    overall = StageLatencies.of(records)

    reported = [r for r in ok if r.prompt_tokens >= 0]
    prompt_tokens = sum(r.prompt_tokens for r in reported)
    cached = [r for r in reported if r.cached_tokens >= 0]
    cached_share = (
        sum(r.cached_tokens for r in cached) / sum(r.prompt_tokens for r in cached)
        if cached and sum(r.prompt_tokens for r in cached) > 0
        else math.nan
    )
    lag = sent - np.array([r.scheduled_s for r in records])
    errors = [r.detail for r in records if r.outcome == "error"]
    failure = ""
    if len(errors) > share * len(records):
        failure = (
            f"{len(errors)} of {len(records)} requests failed (more than "
            f"{share:.1%}); first: {errors[0]}"
        )
    return RunReport(
        mode=mode,
        cache=cache,
        offered_rate=offered_rate,
        users=users,
        target_ttft_s=target,
        quantile=level,
        duration_s=duration,
        throughput_per_s=len(ok) / duration,
        goodput_per_s=goodput,
        ttft_quantile_s=latency_quantile(ttft, level),
        overall=overall,
        per_class=per_class,
        prompt_tokens_per_s=prompt_tokens / duration,
        output_tokens_per_s=sum(r.output_tokens for r in ok) / duration,
        cached_prompt_share=cached_share,
        send_lag_p99_s=latency_quantile(lag, 0.99) if mode == "open" else math.nan,
        send_lag_max_s=float(lag.max()) if mode == "open" else math.nan,
        error_samples=tuple(dict.fromkeys(errors))[:5],
        failure=failure,
        records=tuple(records),
    )


# -- single runs --------------------------------------------------------------------------------


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlannerInputError(name, f"must be a finite number, got {value!r}")
    if value <= 0:
        raise PlannerInputError(name, f"must be > 0, got {value!r}")
    return float(value)


def _fraction(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise PlannerInputError(name, f"must be in [0, 1], got {value!r}")
    return float(value)


def _quantile_level(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise PlannerInputError("quantile", f"must be in (0, 1), got {value!r}")
    return float(value)


def _new_run_key() -> int:
    return secrets.randbits(48)


def _warm_up(
    pool: LoadGeneratorPool, endpoint: Endpoint, sample: RequestSample, run_key: int
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
    pool: LoadGeneratorPool,
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
    pool: LoadGeneratorPool,
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
    lam = _positive("rate", rate)
    sample = sample_requests(
        classes, n, seed=seed, warm=_cache_state(cache) == "warm", clip_multiple=clip_multiple
    )
    return _open_run(
        pool,
        endpoint,
        sample,
        unit_rate_arrivals(n, seed, _positive("cv", cv)),
        lam,
        cache=cache,
        target_ttft_s=target_ttft_s,
        quantile=quantile,
        max_error_share=max_error_share,
        run_key=_new_run_key(),
    )


def _cache_state(cache: str) -> CacheState:
    if cache not in ("cold", "warm"):
        raise PlannerInputError("cache", f"must be cold or warm, got {cache!r}")
    return "warm" if cache == "warm" else "cold"


def run_closed_loop(
    pool: LoadGeneratorPool,
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
        classes, n, seed=seed, warm=_cache_state(cache) == "warm", clip_multiple=clip_multiple
    )
    return _closed_run(
        pool,
        endpoint,
        sample,
        users,
        cache=cache,
        target_ttft_s=target_ttft_s,
        quantile=quantile,
        max_error_share=max_error_share,
    )


def _closed_run(
    pool: LoadGeneratorPool,
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


# -- the knee -----------------------------------------------------------------------------------


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
                    "ttft_quantile_s": _finite_or_none(p.report.ttft_quantile_s),
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
    pool: LoadGeneratorPool,
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
    target = _positive("target_ttft_s", target_ttft_s)
    first = _positive("first_rate", first_rate)
    level = _quantile_level(quantile)
    state = _cache_state(cache)
    sample = sample_requests(
        classes, n, seed=seed, warm=state == "warm", clip_multiple=clip_multiple
    )
    unit = unit_rate_arrivals(n, seed, _positive("cv", cv))
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
        closed = _closed_run(
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


# -- what the planner predicts ------------------------------------------------------------------


def cost_model_knee(
    sample: RequestSample,
    unit_arrivals_s: npt.ArrayLike,
    *,
    servers: int,
    prefill_tokens_per_s: float,
    decode_tokens_per_s: float,
    target_ttft_s: float,
    quantile: float = 0.95,
    first_rate: float | None = None,
    upper_rate: float | None = None,
    rel_tol: float = 0.02,
    max_points: int = 64,
) -> KneeSearch:
    """The TTFT knee the planner's queue simulator predicts for ``sample`` on a pool of
    ``servers`` FIFO servers with per-server rates ``prefill_tokens_per_s`` and
    ``decode_tokens_per_s`` (no prefix cache: a cold run).

    A request's service time is ``request_cost(prompt, output, prefill, decode)``; it waits
    for a server as ``planner.capacity.simulation.open_loop_times`` says, and its first token
    comes after its prefill and one decode token: TTFT = wait + prompt/prefill + 1/decode.
    Arrivals at rate λ are ``unit_arrivals_s / λ``. By default the search starts at 0.7 × the
    sample's saturation rate (servers / mean service), as ``find_knee`` on the simulated
    replica does.
    """
    pool = servers
    if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
        raise PlannerInputError("servers", f"must be a whole number >= 1, got {servers!r}")
    prefill = _positive("prefill_tokens_per_s", prefill_tokens_per_s)
    decode = _positive("decode_tokens_per_s", decode_tokens_per_s)
    target = _positive("target_ttft_s", target_ttft_s)
    level = _quantile_level(quantile)
    unit = np.ascontiguousarray(unit_arrivals_s, dtype=np.float64)
    if unit.shape != (sample.count,):
        raise PlannerInputError("unit_arrivals_s", "must hold one arrival time per request")
    prompt = sample.prompt_tokens.astype(np.float64)
    output = sample.output_tokens.astype(np.float64)
    service = np.array(
        [request_cost(p, o, prefill, decode) for p, o in zip(prompt, output, strict=True)]
    )
    requests = Requests.from_arrays(service)
    first_token_after_start = prompt / prefill + 1.0 / decode
    saturation = pool * sample.count / float(np.sum(service))

    def meets(rate: float) -> bool:
        arrival = unit / rate
        start, _ = open_loop_times(requests, arrival, pool)
        ttft = start - arrival + first_token_after_start
        return latency_quantile(ttft, level) <= target

    return search_knee(
        meets,
        first_rate=FIRST_POINT_UTILISATION * saturation if first_rate is None else first_rate,
        upper_rate=saturation if upper_rate is None else upper_rate,
        rel_tol=rel_tol,
        max_points=max_points,
    )


# -- the replica's token rates ------------------------------------------------------------------


@dataclass(frozen=True)
class TokenRates:
    """The replica's aggregate prefill and decode rates (tokens/s) as the planner's cost model
    uses them, measured by two saturating closed-loop probes (``measure_token_rates``).

    ``prefill_probe`` and ``decode_probe`` are the two runs; ``steady`` their steady-state
    (prompt tokens/s, output tokens/s) pairs. ``failure`` says why no rates came out (empty
    when they did).
    """

    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    users: int
    steady: tuple[tuple[float, float], tuple[float, float]]
    prefill_probe: RunReport
    decode_probe: RunReport
    failure: str

    @property
    def failed(self) -> bool:
        """Whether the probes failed."""
        return bool(self.failure)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready summary, for the run's results."""
        return {
            "prefill_tokens_per_s": _finite_or_none(self.prefill_tokens_per_s),
            "decode_tokens_per_s": _finite_or_none(self.decode_tokens_per_s),
            "users": self.users,
            "steady_tokens_per_s": [
                {"prompt": _finite_or_none(a), "output": _finite_or_none(b)} for a, b in self.steady
            ],
            "prefill_probe": self.prefill_probe.as_dict(),
            "decode_probe": self.decode_probe.as_dict(),
            "failure": self.failure,
        }


def _fixed_sample(name: str, n: int, prompt_tokens: int, output_tokens: int) -> RequestSample:
    return RequestSample(
        (name,),
        np.zeros(n, dtype=np.int64),
        np.full(n, prompt_tokens, dtype=np.int64),
        np.full(n, output_tokens, dtype=np.int64),
        np.zeros(n, dtype=np.bool_),
    )


def steady_token_rates(records: Sequence[RequestRecord], users: int) -> tuple[float, float]:
    """Prompt and output tokens/s of a saturating closed-loop run of ``users`` clients.

    The interactive response time law: ``users`` clients, each cycling through a response
    time R (send to end of stream) and a turnaround Z (end of stream to its next send),
    complete users / (R + Z) requests per second, so tokens/s is users × Σ tokens / Σ (R + Z).
    Only the steady requests count: the first ``users`` sent (all at once, into an empty
    replica) and the last ``users`` sent (while other clients run out of work) are left out.
    Counting completions over a window would be off by part of a wave: equal requests on a
    saturated replica finish in waves, one per slot cycle.
    """
    ok = sorted((r for r in records if r.outcome == "ok" and r.user >= 0), key=lambda r: r.sent_s)
    if len(ok) < 2 * users + 2:
        return math.nan, math.nan
    previous_done: dict[int, float] = {}
    turnaround: dict[int, float] = {}
    for r in ok:
        if r.user in previous_done:
            turnaround[r.index] = max(0.0, r.sent_s - previous_done[r.user])
        previous_done[r.user] = r.done_s
    steady = ok[users : len(ok) - users]
    busy = math.fsum(r.done_s - r.sent_s + turnaround.get(r.index, 0.0) for r in steady)
    if busy <= 0:
        return math.nan, math.nan
    prompt = math.fsum(r.prompt_tokens for r in steady)
    output = math.fsum(r.output_tokens for r in steady)
    return users * prompt / busy, users * output / busy


def measure_token_rates(
    pool: LoadGeneratorPool,
    endpoint: Endpoint,
    *,
    users: int,
    prompt_tokens: int = 2048,
    output_tokens: int = 256,
    requests_per_user: int = 8,
    target_ttft_s: float = 1.0,
    max_error_share: float = DEFAULT_MAX_ERROR_SHARE,
) -> TokenRates:
    """The replica's aggregate prefill and decode rates in the cost model's terms.

    Two closed-loop probes keep the replica saturated with ``users`` clients (at least its
    maximum concurrency): one prefill-heavy (``prompt_tokens`` in, 1 out), one decode-heavy
    (16 in, ``output_tokens`` out), cold. Saturated, the replica spends every second on the
    work in flight, so each probe's steady prompt and output token rates (a, b) satisfy the
    cost model a/P + b/D = 1; the two probes are two such equations, solved for the prefill
    rate P and the decode rate D. Against the simulated replica this recovers its configured
    rates; against a real runtime it gives the effective rates at full batch, the rates
    ``planner.capacity.workload.request_cost`` needs.
    """
    if isinstance(users, bool) or not isinstance(users, int) or users < 1:
        raise PlannerInputError("users", f"must be a whole number >= 1, got {users!r}")
    for name, value, least in (
        ("prompt_tokens", prompt_tokens, 32),
        ("output_tokens", output_tokens, 2),
        ("requests_per_user", requests_per_user, 4),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise PlannerInputError(name, f"must be a whole number >= {least}, got {value!r}")
    n = users * requests_per_user
    probes = (
        _fixed_sample("prefill-probe", n, prompt_tokens, 1),
        _fixed_sample("decode-probe", n, 16, output_tokens),
    )
    reports = tuple(
        _closed_run(
            pool,
            endpoint,
            sample,
            users,
            cache="cold",
            target_ttft_s=target_ttft_s,
            quantile=0.95,
            max_error_share=max_error_share,
        )
        for sample in probes
    )
    steady = tuple(steady_token_rates(report.records, users) for report in reports)
    (a1, b1), (a2, b2) = steady
    failure = next(
        (
            f"{name} probe: {r.failure}"
            for name, r in zip(("prefill", "decode"), reports, strict=True)
            if r.failed
        ),
        "",
    )
    prefill = decode = math.nan
    if not failure:
        det = a1 * b2 - a2 * b1
        inv_prefill = (b2 - b1) / det if det else math.nan
        inv_decode = (a1 - a2) / det if det else math.nan
        if not (inv_prefill > 0 and inv_decode > 0):
            failure = (
                "the probes' token rates do not fit the cost model (was the endpoint saturated? "
                f"prompt/output tokens/s {a1:.4g}/{b1:.4g} and {a2:.4g}/{b2:.4g})"
            )
        else:
            prefill, decode = 1.0 / inv_prefill, 1.0 / inv_decode
    return TokenRates(
        prefill_tokens_per_s=prefill,
        decode_tokens_per_s=decode,
        users=users,
        steady=(steady[0], steady[1]),
        prefill_probe=reports[0],
        decode_probe=reports[1],
        failure=failure,
    )


# -- recording ----------------------------------------------------------------------------------


def load_test_software() -> dict[str, str]:
    """Versions of what ran the load test (for the figure's provenance)."""
    import platform
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for package in ("ray", "aiohttp", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def _workload_record(
    classes: Sequence[ClassProfile], settings: Mapping[str, object], endpoint: Endpoint
) -> dict[str, object]:
    return {
        "classes": [c.as_dict() for c in classes],
        **settings,
        "endpoint": {"base_url": endpoint.base_url, "model": endpoint.model, "api": endpoint.api},
    }


def load_test_workload(
    classes: Sequence[ClassProfile], report: KneeReport, endpoint: Endpoint
) -> dict[str, object]:
    """What a sweep measured, as the benchmark run records it (``benchmark_run_start``'s
    ``workload``): the class mix, the target and the sweep's settings, and the endpoint."""
    settings = {
        "target_ttft_s": report.target_ttft_s,
        "quantile": report.quantile,
        "cache": report.cache,
        "requests_per_point": report.requests_per_point,
        "seed": report.seed,
        "cv": report.cv,
    }
    return _workload_record(classes, settings, endpoint)


def record_load_test(
    *,
    run: BenchmarkRun,
    report: KneeReport,
    rates: TokenRates | None,
    max_concurrency: int,
    hardware: Mapping[str, object],
    software: Mapping[str, object],
    workload_class: WorkloadClass | None = None,
) -> list[CapacityFigure]:
    """Store a finished endpoint load test on its running ``BenchmarkRun``.

    A sweep with a knee and probes with rates become one ``CapacityFigure`` through
    ``controlplane.benchmarks.services.benchmark_results_record`` (source
    ``endpoint-load-test``, provenance from the run): the measured prefill and decode rates,
    ``max_concurrency`` (the runtime's batch limit the test ran against) and the knee; the
    sweep and the probes are the run's results. A failed sweep or probe (or none: ``rates``
    None, as after a sweep that failed) fails the run with its reason through
    ``benchmark_run_fail`` and stores nothing (the shape's previous figures stay); the list
    returned is then empty.
    """
    from controlplane.benchmarks import services

    results = {
        "load_test": report.as_dict(),
        "token_rates": None if rates is None else rates.as_dict(),
    }
    failure = report.failure
    if not failure:
        failure = "the token rates were not measured" if rates is None else rates.failure
    if failure or rates is None:
        services.benchmark_run_fail(
            run=run,
            error=f"endpoint load test failed: {failure}",
            hardware=hardware,
            software=software,
            results=results,
        )
        return []
    figure = services.MeasuredFigure(
        prefill_tokens_per_s=rates.prefill_tokens_per_s,
        decode_tokens_per_s=rates.decode_tokens_per_s,
        max_concurrency=max_concurrency,
        knee_requests_per_s=report.knee_rate,
        workload_class=workload_class,
    )
    return services.benchmark_results_record(
        run=run, figures=[figure], results=results, hardware=hardware, software=software
    )


@dataclass(frozen=True)
class LoadTestPlan:
    """How an endpoint run is driven (``endpoint_load_test_execute``).

    ``target_ttft_s`` None: the strictest p95 TTFT SLO among the tiers of the tenants whose
    profiles make the load. ``first_rate`` None: 0.7 × the replica request rate the shape's
    freshest capacity figure predicts for the mix (its knee when it has one), else 1 req/s.
    ``probe_users`` None: twice ``max_concurrency``.
    """

    endpoint: Endpoint
    max_concurrency: int
    target_ttft_s: float | None = None
    quantile: float = 0.95
    first_rate: float | None = None
    max_rate: float | None = None
    requests_per_point: int = 1000
    seed: int = 0
    cv: float = 1.0
    cache: CacheState = "cold"
    rel_tol: float = 0.02
    max_points: int = 12
    closed_loop_users: int | None = None
    probe_users: int | None = None
    generators: int = 2


def _first_rate(shape: ReplicaShape, classes: Sequence[ClassProfile]) -> float:
    from controlplane.benchmarks import selectors
    from planner.capacity.workload import (
        RequestClass,
        mean_request_cost,
        replica_request_rate,
    )

    figure = selectors.freshest_figure(shape)
    if figure is None:
        return 1.0
    if figure.knee_requests_per_s:
        return float(figure.knee_requests_per_s)
    mix = [RequestClass(c.name, c.share, c.prompt.mean, c.output.mean) for c in classes]
    cost = mean_request_cost(mix, figure.prefill_tokens_per_s, figure.decode_tokens_per_s)
    return FIRST_POINT_UTILISATION * replica_request_rate(cost)


def endpoint_load_test_execute(
    *,
    run_id: int,
    plan: LoadTestPlan,
    task_id: str = "",
    pool: LoadGeneratorPool | None = None,
) -> BenchmarkRun | None:
    """Run the queued endpoint load test ``run_id`` against ``plan.endpoint``, a replica of
    the run's shape, and record it; returns the run as it ended (None: no such run).

    The load is the shape's model's current workload profiles (``classes_from_profiles``).
    The run is started (``benchmark_run_start``, recording the load and the sweep settings),
    the knee is found and the token rates probed, and ``record_load_test`` stores the figure
    or fails the run. Never raises for a failed test: an unreachable endpoint, a model without
    profiles or Ray failing marks the run failed with the reason. Load generators come from
    ``pool``, else ``plan.generators`` new ones on the Ray the benchmark settings name.
    """
    from controlplane.benchmarks import selectors, services
    from controlplane.benchmarks.conf import benchmark_settings
    from controlplane.benchmarks.models import BenchmarkRun
    from workers.benchmarks.ray_runner import ray_init
    from workers.benchmarks.workload import classes_from_profiles

    found = BenchmarkRun.objects.select_related("shape__model").filter(pk=run_id).first()
    if found is None:
        return None
    if found.kind != BenchmarkRun.Kind.ENDPOINT:
        raise services.RunStateError(f"benchmark run {run_id} is an {found.kind} run")
    profiles = selectors.current_profiles(found.shape.model)
    try:
        classes = classes_from_profiles(profiles)
        target = plan.target_ttft_s or min(p.tenant.tier.p95_ttft_slo_s for p in profiles)
    except PlannerInputError as exc:
        services.benchmark_run_fail(run=found, error=f"no load to send: {exc}")
        return BenchmarkRun.objects.get(pk=run_id)
    settings = {
        "target_ttft_s": target,
        "quantile": plan.quantile,
        "cache": plan.cache,
        "requests_per_point": plan.requests_per_point,
        "seed": plan.seed,
        "cv": plan.cv,
    }
    try:
        started = services.benchmark_run_start(
            run=found,
            task_id=task_id,
            workload=_workload_record(classes, settings, plan.endpoint),
        )
    except services.RunStateError:
        return BenchmarkRun.objects.get(pk=run_id)
    software = load_test_software()
    hardware: dict[str, object] = {}
    own_pool = pool is None
    try:
        if pool is None:
            conf = benchmark_settings()
            ray_init(conf.ray_address or None, num_cpus=conf.ray_num_cpus)
            pool = LoadGeneratorPool(plan.generators)
        hardware = {"load_generators": list(pool.hosts)}
        report = find_knee(
            pool,
            plan.endpoint,
            classes,
            target,
            first_rate=plan.first_rate or _first_rate(started.shape, classes),
            max_rate=plan.max_rate,
            quantile=plan.quantile,
            n=plan.requests_per_point,
            seed=plan.seed,
            cv=plan.cv,
            cache=plan.cache,
            rel_tol=plan.rel_tol,
            max_points=plan.max_points,
            closed_loop_users=plan.closed_loop_users,
        )
        rates = None
        if not report.failed:
            rates = measure_token_rates(
                pool,
                plan.endpoint,
                users=plan.probe_users or 2 * plan.max_concurrency,
                target_ttft_s=target,
            )
        record_load_test(
            run=started,
            report=report,
            rates=rates,
            max_concurrency=plan.max_concurrency,
            hardware=hardware,
            software=software,
        )
    except Exception as exc:  # every failure is recorded on the run, none escapes
        message = str(exc) if isinstance(exc, PlannerInputError) else f"{type(exc).__name__}: {exc}"
        services.benchmark_run_fail(
            run=started, error=message[:2000], hardware=hardware, software=software
        )
    finally:
        if own_pool and pool is not None:
            pool.close()
    return BenchmarkRun.objects.get(pk=run_id)


# -- command line -------------------------------------------------------------------------------


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m workers.benchmarks.loadtest",
        description="Find the highest open-loop rate at which an OpenAI-compatible streaming "
        "endpoint meets a TTFT target, on Ray load generators; prints the report as JSON.",
    )
    target = parser.add_argument_group("endpoint")
    target.add_argument("--base-url", required=True, help="http://host:port, without /v1")
    target.add_argument("--model", required=True)
    target.add_argument("--api", choices=("completions", "chat"), default="completions")
    target.add_argument("--api-key-env", help="environment variable holding a bearer key")
    target.add_argument("--timeout-s", type=float, default=60.0, help="per request")
    target.add_argument(
        "--no-ignore-eos", action="store_true", help="for servers that refuse ignore_eos"
    )
    load = parser.add_argument_group("load")
    load.add_argument(
        "--classes",
        required=True,
        help="JSON file: a list of {name, share, prompt_tokens: {p50, mean, p99}, "
        "output_tokens: {p50, mean, p99}, prefix_cache_hit_rate}",
    )
    load.add_argument("--requests", type=int, default=1000, help="per rate")
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--cv", type=float, default=1.0, help="arrival gaps' variation (1: Poisson)")
    load.add_argument("--cache", choices=("cold", "warm"), default="cold")
    sweep = parser.add_argument_group("sweep")
    sweep.add_argument("--target-ttft-s", type=float, required=True)
    sweep.add_argument("--quantile", type=float, default=0.95)
    sweep.add_argument("--first-rate", type=float, required=True, help="requests/s")
    sweep.add_argument("--upper-rate", type=float, help="a rate known to fail")
    sweep.add_argument("--max-rate", type=float, help="the most the generators may send")
    sweep.add_argument("--rel-tol", type=float, default=0.02)
    sweep.add_argument("--max-points", type=int, default=12)
    sweep.add_argument("--closed-loop-users", type=int)
    sweep.add_argument(
        "--probe-users", type=int, help="also measure the token rates with this many users"
    )
    ray_group = parser.add_argument_group("Ray")
    ray_group.add_argument("--generators", type=int, default=2)
    ray_group.add_argument("--ray-address", help="join this cluster (default: a local Ray)")
    ray_group.add_argument("--num-cpus", type=int, default=2, help="of a local Ray")
    parser.add_argument("--output", help="write the JSON report here instead of stdout")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a sweep from the command line; returns 0, or 1 when the sweep failed."""
    from workers.benchmarks.ray_runner import ray_init

    args = _parse_args(argv)
    try:
        with open(args.classes, encoding="utf-8") as handle:
            data = json.load(handle)
        if not isinstance(data, list):
            raise PlannerInputError("classes", "the file must hold a list of classes")
        classes = tuple(ClassProfile.from_dict(item) for item in data)
        endpoint = Endpoint(
            args.base_url,
            args.model,
            api=args.api,
            api_key=os.environ.get(args.api_key_env) if args.api_key_env else None,
            timeout_s=args.timeout_s,
            ignore_eos=not args.no_ignore_eos,
        )
        sample_requests(classes, 1)  # checks the mix before Ray starts
    except (OSError, ValueError) as exc:  # PlannerInputError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ray_init(args.ray_address, num_cpus=args.num_cpus)
    with LoadGeneratorPool(args.generators) as pool:
        report = find_knee(
            pool,
            endpoint,
            classes,
            args.target_ttft_s,
            first_rate=args.first_rate,
            upper_rate=args.upper_rate,
            max_rate=args.max_rate,
            quantile=args.quantile,
            n=args.requests,
            seed=args.seed,
            cv=args.cv,
            cache=args.cache,
            rel_tol=args.rel_tol,
            max_points=args.max_points,
            closed_loop_users=args.closed_loop_users,
        )
        rates = None
        if args.probe_users and not report.failed:
            rates = measure_token_rates(
                pool, endpoint, users=args.probe_users, target_ttft_s=args.target_ttft_s
            )
        hosts = list(pool.hosts)
    output = {
        "load_test": report.as_dict(),
        "token_rates": None if rates is None else rates.as_dict(),
        "workload": load_test_workload(classes, report, endpoint),
        "load_generators": hosts,
        "software": load_test_software(),
    }
    text = json.dumps(output, indent=2)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    else:
        print(text)
    verdict = report.failure or (
        f"knee {report.knee_rate:.4g} req/s at p{report.quantile * 100:g} TTFT <= "
        f"{report.target_ttft_s:g} s" + ("" if report.bracketed else " (not bracketed)")
    )
    print(verdict, file=sys.stderr)
    return 1 if report.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
