"""planner.capacity.search: the one knee search, used by the SLO search over the queue simulator
and by the endpoint load test over HTTP runs."""

from __future__ import annotations

import numpy as np
import pytest

from planner.capacity.search import search_knee
from planner.capacity.simulation import (
    ServiceClass,
    draw_requests,
    latency_quantile,
    open_loop_times,
    unit_rate_arrivals,
)
from planner.capacity.slo import FIRST_POINT_UTILISATION, capacity_at_slo_of
from planner.errors import PlannerInputError

MIX = [ServiceClass("short", 0.8, 0.04), ServiceClass("long", 0.2, 0.12)]
SERVERS = 8


def test_the_slo_search_is_this_search_from_seventy_percent_of_saturation() -> None:
    # Same predicate (the simulated p95 end-to-end latency of one sample), started at 0.7 of
    # saturation and bounded by it: the same rates in the same order and the same knee.
    requests = draw_requests(MIX, 4000, 2)
    unit = unit_rate_arrivals(4000, 2, 1.0)
    saturation = SERVERS * requests.count / float(np.sum(requests.service_s))

    def meets(rate: float) -> bool:
        arrival = unit / rate
        _, done = open_loop_times(requests, arrival, SERVERS, engine="python")
        return latency_quantile(done - arrival, 0.95) <= 0.2

    ours = search_knee(
        meets,
        first_rate=FIRST_POINT_UTILISATION * saturation,
        upper_rate=saturation,
        rel_tol=1e-3,
        max_points=200,
    )
    slo = capacity_at_slo_of(requests, unit, SERVERS, 0.2, rel_tol=1e-3, engine="python")
    assert ours.knee_rate == slo.knee_rate > 0 and ours.bracketed
    assert ours.rates == tuple(p.rate for p in slo.points)
    assert ours.meets == tuple(p.meets for p in slo.points)
    # Bisection: the bracket ends narrower than rel_tol × its upper end.
    failing = min(r for r, m in zip(ours.rates, ours.meets, strict=True) if not m)
    assert failing - ours.knee_rate <= 1e-3 * failing


def test_without_an_upper_bound_the_search_doubles_until_a_rate_fails() -> None:
    def meets(rate: float) -> bool:
        return rate <= 37.3

    found = search_knee(meets, first_rate=5.0, rel_tol=0.01)
    assert found.rates[:4] == (5.0, 10.0, 20.0, 40.0)
    assert found.bracketed and 37.3 * 0.99 <= found.knee_rate <= 37.3
    capped = search_knee(meets, first_rate=5.0, max_rate=12.0)
    assert capped.rates == (5.0, 10.0, 12.0) and not capped.bracketed
    assert capped.knee_rate == 12.0
    nothing = search_knee(lambda rate: False, first_rate=8.0, upper_rate=10.0, max_points=5)
    assert nothing.knee_rate == 0 and nothing.rates == (8.0, 4.0, 2.0, 1.0, 0.5)
    # Over HTTP each halving doubles a run's length: the search stops at a floor.
    floored = search_knee(lambda rate: False, first_rate=8.0, min_rate=1.5)
    assert floored.knee_rate == 0 and floored.rates == (8.0, 4.0, 2.0)


def test_the_knee_is_monotone_in_the_threshold() -> None:
    knees = [
        search_knee(lambda rate, t=t: rate <= t, first_rate=7.0, upper_rate=10.0).knee_rate
        for t in (1.0, 2.5, 4.0, 6.5, 9.0)
    ]
    assert knees == sorted(knees) and knees[0] > 0


@pytest.mark.parametrize(
    ("argument", "kwargs"),
    [
        ("first_rate", {"first_rate": 10.0, "upper_rate": 5.0}),
        ("first_rate", {"first_rate": -1.0}),
        ("rel_tol", {"first_rate": 1.0, "rel_tol": 1.0}),
        ("max_points", {"first_rate": 1.0, "max_points": 0}),
        ("max_rate", {"first_rate": 1.0, "max_rate": float("nan")}),
        ("min_rate", {"first_rate": 1.0, "min_rate": 0.0}),
    ],
)
def test_search_arguments_are_checked(argument: str, kwargs: dict[str, float]) -> None:
    with pytest.raises(PlannerInputError) as info:
        search_knee(lambda rate: True, **kwargs)  # type: ignore[arg-type]
    assert info.value.argument == argument
