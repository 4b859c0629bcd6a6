"""The replica's aggregate prefill and decode rates, as the planner's cost model uses them,
measured by two saturating closed-loop probes (``measure_token_rates``).

Units: tokens per second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerInputError
from workers.benchmarks.endpoint import Endpoint, LoadPool, RequestRecord
from workers.benchmarks.loadtest.report import (
    DEFAULT_MAX_ERROR_SHARE,
    RunReport,
    finite_or_none,
)
from workers.benchmarks.loadtest.sweep import closed_run
from workers.benchmarks.workload import RequestSample

__all__ = ["TokenRates", "measure_token_rates", "steady_token_rates"]


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
            "prefill_tokens_per_s": finite_or_none(self.prefill_tokens_per_s),
            "decode_tokens_per_s": finite_or_none(self.decode_tokens_per_s),
            "users": self.users,
            "steady_tokens_per_s": [
                {"prompt": finite_or_none(a), "output": finite_or_none(b)} for a, b in self.steady
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
    pool: LoadPool,
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
        closed_run(
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
