"""Capacity at a latency SLO: the highest open-loop rate whose p95 (or p99) meets a target.

The seeds define capacity this way ("the highest open-loop rate at which p95 (or p99) still
meets the SLO, ... then derated for variability"): peak throughput is not a capacity you can
promise, because the last requests per second before saturation come with latency nobody
accepts. ``capacity_at_slo`` finds that rate with the queue simulator.

Search. Common random numbers: one stream of requests (classes and service times) and one
unit-rate arrival stream are drawn once; the arrivals at rate λ are that stream divided by λ.
Under FIFO every request's wait is then non-decreasing in λ (the multi-server waiting-time
recursion is monotone in the inter-arrival times), so the latency quantile is a monotone step
function of λ and the knee is well defined for the drawn sample. The search is
``planner.capacity.search.search_knee`` (bracketing plus bisection) over (0, saturation), saturation being servers / mean service time of the drawn
requests (utilisation 1; at or above it the queue has no steady state and counts as failing,
so it is the search's ``upper_rate``):

* at rate → 0 nobody waits, so the quantile is that of the service times alone; a target below
  it cannot be met at any rate and raises ``PlannerInputError`` naming ``target_s``;
* the first point is 70% of saturation (the seeds' planning utilisation, usually near the knee);
  while nothing has met the target, the bracket shrinks geometrically toward 0 (halving);
  once bracketed, bisection halves [meets, fails] until it is narrower than ``rel_tol`` × its
  upper end.

Every point lies strictly inside the current bracket, so the search is a binary search tree over
rates; with a monotone predicate the returned knee is monotone in the target (a looser target
never returns a lower knee) for the same seed and sample size. Under the per-class priority
policies a request's wait is not monotone in the rate (an earlier arrival of a favoured class
can overtake it): the search still returns a rate that met the target, but the quantile can
dip slightly between nearby rates near the knee, and neither guarantee holds.

The knee is the highest evaluated rate that met the target; ``derated_rate`` is knee × derate.
``derate`` defaults to 1.0 (no derating) because a knee measured at the SLO already contains
the queueing; the seeds' 70%-style margin for variability is the caller's explicit choice, e.g.
``derate=0.7``.

Units: requests per second and seconds. Bad input raises ``PlannerInputError`` naming the
argument (target ≤ 0, quantile outside (0, 1), derate outside (0, 1], rel_tol outside (0, 1),
servers < 1, too few requests, and those of the simulator).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from planner.capacity import _checks
from planner.capacity.search import search_knee
from planner.capacity.simulation import (
    Engine,
    Policy,
    Requests,
    ServiceClass,
    draw_requests,
    latency_quantile,
    open_loop_times,
    unit_rate_arrivals,
)
from planner.errors import PlannerInputError

#: First rate tried, as a fraction of the saturation rate (the seeds' planning utilisation).
FIRST_POINT_UTILISATION = 0.7

# Fewer requests than this cannot estimate a tail quantile of a queue at all.
_MIN_REQUESTS = 1000
_MAX_POINTS = 200


@dataclass(frozen=True)
class SloPoint:
    """One evaluated rate: the latency quantile there (seconds), whether it met the target,
    and the run's throughput (req/s) and utilisation."""

    rate: float
    latency_s: float
    meets: bool
    throughput_per_s: float
    utilisation: float


@dataclass(frozen=True)
class SloCapacity:
    """Result of ``capacity_at_slo``.

    ``knee_rate``: the highest evaluated open-loop rate (req/s) whose latency quantile met the
    target, within ``rel_tol`` of the knee of the simulated sample. ``derated_rate``:
    knee × ``derate``, the rate to plan with. ``saturation_rate``: servers / mean service, the
    bound no rate reaches. ``points`` in evaluation order.
    """

    knee_rate: float
    derated_rate: float
    derate: float
    target_s: float
    quantile: float
    saturation_rate: float
    points: tuple[SloPoint, ...]


def capacity_at_slo(
    classes: Sequence[ServiceClass],
    servers: int,
    target_s: float,
    *,
    quantile: float = 0.95,
    derate: float = 1.0,
    n: int = 200_000,
    seed: int = 0,
    cv: float = 1.0,
    policy: Policy = "fifo",
    rel_tol: float = 1e-3,
    engine: Engine = "auto",
) -> SloCapacity:
    """Highest open-loop rate (req/s) whose latency ``quantile`` is at most ``target_s``.

    ``n`` requests of the class mix are simulated at each rate, arrivals with coefficient of
    variation ``cv`` (1 = Poisson), under ``policy``. Seeds: the 85/14/1 mix on 12 replicas at
    p95 ≤ 3 s has its knee between 10.5 and 11.5 req/s.
    """
    pool = _checks.positive_int("servers", servers)
    count = _checks.positive_int("n", n)
    if count < _MIN_REQUESTS:
        raise PlannerInputError("n", f"must be at least {_MIN_REQUESTS}, got {n!r}")
    requests = draw_requests(classes, count, seed)
    unit_arrivals = unit_rate_arrivals(count, seed, cv)
    return capacity_at_slo_of(
        requests,
        unit_arrivals,
        pool,
        target_s,
        quantile=quantile,
        derate=derate,
        policy=policy,
        rel_tol=rel_tol,
        engine=engine,
    )


def capacity_at_slo_of(
    requests: Requests,
    unit_arrivals_s: npt.ArrayLike,
    servers: int,
    target_s: float,
    *,
    quantile: float = 0.95,
    derate: float = 1.0,
    policy: Policy = "fifo",
    rel_tol: float = 1e-3,
    engine: Engine = "auto",
) -> SloCapacity:
    """``capacity_at_slo`` on given requests and unit-rate arrival times (seconds at 1 req/s).

    The arrivals at rate λ are ``unit_arrivals_s / λ``; the same requests serve every rate.
    """
    pool = _checks.positive_int("servers", servers)
    target = _checks.positive("target_s", target_s)
    level = _checks.quantile_level("quantile", quantile)
    factor = _checks.utilization("derate", derate)
    tolerance = _checks.positive("rel_tol", rel_tol)
    if tolerance >= 1:
        raise PlannerInputError("rel_tol", f"must be in (0, 1), got {rel_tol!r}")
    unit = np.ascontiguousarray(unit_arrivals_s, dtype=np.float64)
    if unit.shape != requests.service_s.shape:
        raise PlannerInputError("unit_arrivals_s", "must hold one arrival time per request")
    if not np.all(np.isfinite(unit)) or unit[0] < 0 or np.any(unit[1:] < unit[:-1]):
        raise PlannerInputError(
            "unit_arrivals_s", "arrival times must be finite, >= 0 and non-decreasing"
        )

    idle_latency = latency_quantile(requests.service_s, level)
    if idle_latency > target:
        raise PlannerInputError(
            "target_s",
            f"p{level * 100:g} of service time alone is {idle_latency:.4g} s, above the "
            f"{target:g} s target: no arrival rate meets it",
        )
    busy_s = float(np.sum(requests.service_s))
    saturation = pool * requests.count / busy_s

    points: list[SloPoint] = []

    def evaluate(rate: float) -> bool:
        arrival = unit / rate
        _, done = open_loop_times(requests, arrival, pool, policy=policy, engine=engine)
        latency = latency_quantile(done - arrival, level)
        met = latency <= target
        horizon = float(done.max())
        points.append(
            SloPoint(
                rate=rate,
                latency_s=latency,
                meets=met,
                throughput_per_s=requests.count / horizon,
                utilisation=busy_s / (pool * horizon),
            )
        )
        return met

    found = search_knee(
        evaluate,
        first_rate=FIRST_POINT_UTILISATION * saturation,
        upper_rate=saturation,
        rel_tol=tolerance,
        max_points=_MAX_POINTS,
    )
    lo = found.knee_rate
    if lo == 0:
        # Met at rate → 0 but at no rate tried down to 2^-200 of saturation: the target sits
        # in the gap between the idle quantile and any queueing at all.
        raise PlannerInputError(
            "target_s", f"{target:g} s is met by no positive rate in this sample"
        )
    return SloCapacity(
        knee_rate=lo,
        derated_rate=lo * factor,
        derate=factor,
        target_s=target,
        quantile=level,
        saturation_rate=saturation,
        points=tuple(points),
    )
