"""One endpoint load test from plain inputs: the sweep for the knee, then the token-rate probes
(``load_test_run``), and what the control plane records about it.

``controlplane.benchmarks.runs`` resolves the plan's defaults from the database (the target
from the tenants' tiers, the first rate from the shape's freshest capacity figure), starts the
run, calls ``load_test_run`` and records the ``LoadTestResult``: one figure, or the run failed
with ``LoadTestResult.failure``. Nothing here knows Django.

Units: requests per second, seconds, tokens.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata

from workers.benchmarks.endpoint import Endpoint, LoadPool
from workers.benchmarks.loadtest.rates import TokenRates, measure_token_rates
from workers.benchmarks.loadtest.report import CacheState, positive
from workers.benchmarks.loadtest.sweep import KneeReport, find_knee
from workers.benchmarks.workload import ClassProfile

__all__ = [
    "LoadTestPlan",
    "LoadTestResult",
    "load_test_run",
    "load_test_software",
    "load_test_workload",
]


@dataclass(frozen=True)
class LoadTestPlan:
    """How an endpoint run is driven.

    ``target_ttft_s`` None: the strictest p95 TTFT SLO among the tiers of the tenants whose
    profiles make the load. ``first_rate`` None: 0.7 × the replica request rate the shape's
    freshest capacity figure predicts for the mix (its knee when it has one), else 1 req/s.
    (Both are resolved by the control plane before ``load_test_run``.) ``probe_users`` None:
    twice ``max_concurrency``.
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


@dataclass(frozen=True)
class LoadTestResult:
    """What ``load_test_run`` measured: the sweep, and the token rates (None when the sweep
    failed, so the probes were not run)."""

    report: KneeReport
    rates: TokenRates | None

    @property
    def failure(self) -> str:
        """Why no figure comes out of this test (empty when one does)."""
        if self.report.failure:
            return self.report.failure
        if self.rates is None:
            return "the token rates were not measured"
        return self.rates.failure

    def results(self) -> dict[str, object]:
        """JSON-ready: the sweep and the probes, as the run stores them."""
        return {
            "load_test": self.report.as_dict(),
            "token_rates": None if self.rates is None else self.rates.as_dict(),
        }


def load_test_software() -> dict[str, str]:
    """Versions of what ran the load test (for the figure's provenance)."""
    versions = {"python": platform.python_version()}
    for package in ("ray", "aiohttp", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def load_test_workload(
    classes: Sequence[ClassProfile],
    *,
    endpoint: Endpoint,
    target_ttft_s: float,
    quantile: float,
    cache: CacheState,
    requests_per_point: int,
    seed: int,
    cv: float,
) -> dict[str, object]:
    """What a load test measures, as its benchmark run records it (``benchmark_run_start``'s
    ``workload``): the class mix, the target and the sweep's settings, and the endpoint."""
    return {
        "classes": [c.as_dict() for c in classes],
        "target_ttft_s": target_ttft_s,
        "quantile": quantile,
        "cache": cache,
        "requests_per_point": requests_per_point,
        "seed": seed,
        "cv": cv,
        "endpoint": {"base_url": endpoint.base_url, "model": endpoint.model, "api": endpoint.api},
    }


def load_test_run(
    pool: LoadPool,
    plan: LoadTestPlan,
    classes: Sequence[ClassProfile],
    *,
    target_ttft_s: float,
    first_rate: float,
) -> LoadTestResult:
    """Find the knee of ``plan.endpoint`` for the class mix at ``target_ttft_s`` starting at
    ``first_rate`` (``find_knee``), then, unless the sweep failed, probe its token rates with
    ``plan.probe_users`` users (``measure_token_rates``). Raises ``PlannerInputError`` for bad
    settings; a failing endpoint is a result with a ``failure``, not an exception."""
    target = positive("target_ttft_s", target_ttft_s)
    report = find_knee(
        pool,
        plan.endpoint,
        classes,
        target,
        first_rate=positive("first_rate", first_rate),
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
    return LoadTestResult(report, rates)
