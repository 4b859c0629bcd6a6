"""The replica count a shortage sentence quotes: exact, and found without counting up."""

from __future__ import annotations

import math

import pytest

from planner.placement.binding import _replicas_for


def _counted(survive: int, zones: int) -> int:
    n = survive
    while n - math.ceil(n / zones) < survive:
        n += 1
    return n


@pytest.mark.parametrize("zones", [2, 3, 4, 7])
def test_zone_loss_replicas_are_the_fewest_that_survive_a_zone(zones: int) -> None:
    for survive in range(1, 60):
        assert _replicas_for(0.0, 0.0, float(survive), 0.0, zones) == _counted(survive, zones)


def test_a_demand_of_a_trillion_replicas_is_sized_at_once() -> None:
    # Counting up one replica at a time would take a trillion steps here.
    assert _replicas_for(0.0, 0.0, 1e12, 0.0, 3) == 1_500_000_000_000
    assert _replicas_for(0.0, 0.0, 1e12, 0.0, 1) == 0  # one zone cannot survive its loss
