"""The knee search: the highest rate at which a run still meets its latency target.

The seeds define capacity as "the highest open-loop rate at which p95 (or p99) still meets the
SLO". Whether a rate meets is a measurement (a queue simulation in ``planner.capacity.slo``, a
run of HTTP requests against an endpoint in the load test); finding the highest one is this
search, written once for both.

Bracketing plus bisection. Rates at or below ``lo`` met (``lo`` = 0 at first), rates at or
above ``hi`` failed; ``upper_rate`` is a rate known to fail without trying it (the saturation
rate, when known) and is ``hi`` at first:

* while nothing has met, the next rate halves ``hi``;
* once bracketed, bisection halves [lo, hi] until ``hi − lo ≤ rel_tol × hi``;
* without an upper bound (an endpoint of unknown capacity) the rate doubles from the last one
  that met until one fails, or until ``max_rate`` (the most the load generators may send) met.

Every point lies strictly inside the current bracket, so the search is a binary search tree
over rates: with a monotone predicate the knee returned is monotone in the target. At most
``max_points`` rates are tried, and while nothing has met, none below ``min_rate``: a run of
the same requests at half the rate takes twice as long, so halving toward 0 as a simulator can
would take hours over HTTP.

Units: whatever rate the predicate takes (requests per second throughout the project).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from planner.capacity import _checks
from planner.errors import PlannerInputError

__all__ = ["KneeSearch", "search_knee"]


@dataclass(frozen=True)
class KneeSearch:
    """Result of ``search_knee``: the highest rate that met (0 if none did), whether a failing
    rate bounds it from above (false: every rate tried met, up to ``max_rate`` or the point
    budget), and the rates tried with their outcomes, in order."""

    knee_rate: float
    bracketed: bool
    rates: tuple[float, ...]
    meets: tuple[bool, ...]


def search_knee(
    meets: Callable[[float], bool],
    *,
    first_rate: float,
    upper_rate: float | None = None,
    max_rate: float | None = None,
    min_rate: float | None = None,
    rel_tol: float = 0.02,
    max_points: int = 16,
) -> KneeSearch:
    """Bracketing plus bisection for the highest rate where ``meets(rate)`` holds.

    ``first_rate`` is tried first (below ``upper_rate`` when that is given); see the module
    docstring for the rest. ``meets`` may raise to stop the search: the exception propagates.
    """
    lo = 0.0
    hi = math.inf if upper_rate is None else _checks.positive("upper_rate", upper_rate)
    rate = _checks.positive("first_rate", first_rate)
    cap = math.inf if max_rate is None else _checks.positive("max_rate", max_rate)
    floor = 0.0 if min_rate is None else _checks.positive("min_rate", min_rate)
    tolerance = _checks.positive("rel_tol", rel_tol)
    if tolerance >= 1:
        raise PlannerInputError("rel_tol", f"must be in (0, 1), got {rel_tol!r}")
    points = _checks.positive_int("max_points", max_points)
    if rate >= hi:
        raise PlannerInputError("first_rate", f"must be below upper_rate {hi!r}, got {rate!r}")
    rate = min(rate, cap)
    rates: list[float] = []
    outcomes: list[bool] = []
    while len(rates) < points:
        met = meets(rate)
        rates.append(rate)
        outcomes.append(met)
        if met:
            lo = rate
        else:
            hi = rate
        if lo > 0 and math.isfinite(hi) and hi - lo <= tolerance * hi:
            break
        if math.isinf(hi):
            if lo >= cap:
                break
            rate = min(2.0 * lo, cap)
        elif lo == 0:
            if hi / 2.0 < floor:
                break
            rate = hi / 2.0
        else:
            rate = (lo + hi) / 2.0
    return KneeSearch(
        knee_rate=lo, bracketed=math.isfinite(hi), rates=tuple(rates), meets=tuple(outcomes)
    )
