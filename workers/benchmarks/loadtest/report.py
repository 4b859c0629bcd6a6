"""One load-test run's report: TTFT, inter-token and end-to-end latency at p50/p95/p99, overall
and per class, errors, timeouts, goodput, token rates and how late the generators sent.

The quantile of a run counts every request that never produced a first token (error or
timeout) as missing the target; percentiles of TTFT, ITL and end-to-end latency are over the
requests that completed. A run fails when more than ``max_error_share`` of its requests
errored (refused connections, HTTP errors, broken streams): that is a broken endpoint, not an
overloaded one. Timeouts are the endpoint being slow and count as missed targets, not errors.

Units: requests per second, seconds, tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from planner.capacity.simulation import latency_quantile
from planner.errors import PlannerInputError
from workers.benchmarks.endpoint import RequestRecord
from workers.benchmarks.workload import RequestSample

__all__ = [
    "DEFAULT_MAX_ERROR_SHARE",
    "CacheState",
    "LatencyPercentiles",
    "LoadTestFailed",
    "RunReport",
    "StageLatencies",
    "summarize_run",
]

DEFAULT_MAX_ERROR_SHARE = 0.01

CacheState = Literal["cold", "warm"]
FloatArray = npt.NDArray[np.float64]


class LoadTestFailed(RuntimeError):
    """The endpoint failed the load test (errors, not slowness); ``report`` says how."""

    def __init__(self, report: RunReport) -> None:
        super().__init__(report.failure)
        self.report = report


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
            "mean_s": finite_or_none(self.mean_s),
            "p50_s": finite_or_none(self.p50_s),
            "p95_s": finite_or_none(self.p95_s),
            "p99_s": finite_or_none(self.p99_s),
        }


def finite_or_none(value: float) -> float | None:
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
            "goodput_per_s": finite_or_none(self.goodput_per_s),
            "ttft_quantile_s": finite_or_none(self.ttft_quantile_s),
            "overall": self.overall.as_dict(),
            "per_class": {name: s.as_dict() for name, s in self.per_class.items()},
            "prompt_tokens_per_s": self.prompt_tokens_per_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "cached_prompt_share": finite_or_none(self.cached_prompt_share),
            "send_lag_p99_s": finite_or_none(self.send_lag_p99_s),
            "send_lag_max_s": finite_or_none(self.send_lag_max_s),
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
    level = quantile_level(quantile)
    target = positive("target_ttft_s", target_ttft_s)
    share = fraction("max_error_share", max_error_share)
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


# -- argument checks ----------------------------------------------------------------------------


def positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlannerInputError(name, f"must be a finite number, got {value!r}")
    if value <= 0:
        raise PlannerInputError(name, f"must be > 0, got {value!r}")
    return float(value)


def fraction(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise PlannerInputError(name, f"must be in [0, 1], got {value!r}")
    return float(value)


def quantile_level(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise PlannerInputError("quantile", f"must be in (0, 1), got {value!r}")
    return float(value)


def cache_state(cache: str) -> CacheState:
    if cache not in ("cold", "warm"):
        raise PlannerInputError("cache", f"must be cold or warm, got {cache!r}")
    return "warm" if cache == "warm" else "cold"
