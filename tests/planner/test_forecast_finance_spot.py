"""Reserved, on-demand and spot: the mix ``optimal_mix`` chooses is the brute-force optimum over
every integer mix, and spot never serves a firm (promised) GPU."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlannerInputError
from planner.forecast.finance import mix_hours, optimal_commitment, optimal_mix


def brute_force(
    total: list[int], spare: list[int], r: Fraction, o: Fraction, s: Fraction | None
) -> tuple[Fraction, dict[int, Fraction]]:
    """The least cost over every reservation K and, each hour, every integer split of the
    hour's GPUs into reserved (≤ K), on demand and spot (≤ the interruptible GPUs; none
    without a spot price); and the least cost of each K."""
    by_level: dict[int, Fraction] = {}
    for level in range(max(total, default=0) + 2):
        cost = r * level * len(total)
        for need, free in zip(total, spare, strict=True):
            best: Fraction | None = None
            for on_reserved in range(min(level, need) + 1):
                for on_spot in range((free if s is not None else 0) + 1):
                    on_demand = need - on_reserved - on_spot
                    if on_demand < 0:
                        continue
                    hour = o * on_demand + (s or 0) * on_spot
                    best = hour if best is None or hour < best else best
            assert best is not None
            cost += best
        by_level[level] = cost
    return min(by_level.values()), by_level


def mix_cost(total: list[int], spare: list[int], level: int, r: float, o: float, s: float) -> float:
    mix = mix_hours(total, spare, level)
    assert np.array_equal(mix.reserved_used + mix.on_demand + mix.spot, np.array(total))
    return r * level * len(total) + o * int(mix.on_demand.sum()) + s * int(mix.spot.sum())


# Prices in cents, so the brute force's rationals equal the floats' exactly.
PRICES = st.tuples(st.integers(1, 400), st.integers(1, 400), st.integers(0, 400)).filter(
    lambda p: p[0] <= p[1] and p[2] <= p[1]
)


@settings(max_examples=150, deadline=None)
@given(
    hours=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=8),
    prices=PRICES,
    with_spot=st.booleans(),
)
def test_the_mix_is_the_brute_force_optimum(
    hours: list[tuple[int, int]], prices: tuple[int, int, int], with_spot: bool
) -> None:
    total = [g for g, _ in hours]
    spare = [min(i, g) for g, i in hours]
    r, o, s = (p / 100 for p in prices)
    spot = s if with_spot else None
    level = optimal_mix(total, spare, reserved_price=r, on_demand_price=o, spot_price=spot)
    exact = [Fraction(p, 100) for p in prices]
    best, by_level = brute_force(total, spare, exact[0], exact[1], exact[2] if with_spot else None)
    assert by_level[level] == best
    # A tie stays off the reservation: no smaller level is as cheap.
    assert all(by_level[k] > best for k in range(level))
    # The hourly split ``mix_hours`` gives costs that optimum.
    paid = mix_cost(total, spare if with_spot else [0] * len(total), level, r, o, s)
    assert paid == pytest.approx(float(best), abs=1e-9)
    if not with_spot:
        # No spot price: the reservation rule alone.
        assert level == optimal_commitment(total, r, o)


def test_hand_computed_mix() -> None:
    # Four hours: 10, 10, 6, 6 GPUs, of which 4, 4, 0, 0 interruptible (firm 6 every hour).
    # r = 1.30, o = 2.00, s = 0.60: the 6 firm GPUs save 2.00 × 4 = 8 > 1.30 × 4 = 5.2 each;
    # the 7th saves only 0.60 × 2 = 1.2 (it would serve spot-able GPUs): K = 6.
    total, spare = [10, 10, 6, 6], [4, 4, 0, 0]
    level = optimal_mix(total, spare, reserved_price=1.3, on_demand_price=2.0, spot_price=0.6)
    assert level == 6
    mix = mix_hours(total, spare, level)
    assert mix.spot.tolist() == [4, 4, 0, 0]
    assert mix.on_demand.tolist() == [0, 0, 0, 0]
    assert mix.reserved_idle.tolist() == [0, 0, 0, 0]
    # Without spot the 7th to 10th GPUs run 2 of 4 hours: 2.00 × 2 = 4 < 5.2, still on demand.
    assert optimal_mix(total, spare, reserved_price=1.3, on_demand_price=2.0, spot_price=None) == 6
    assert mix_hours(total, None, 6).on_demand.tolist() == [4, 4, 0, 0]
    # Spot never covers a firm GPU: with all of it firm, nothing runs on spot.
    assert mix_hours(total, [0, 0, 0, 0], 2).spot.tolist() == [0, 0, 0, 0]
    # Spot dearer than reserved but interruptible GPUs needed every hour: reserving wins.
    assert optimal_mix([8, 8], [8, 8], reserved_price=1.0, on_demand_price=2.0, spot_price=1.5) == 8


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(PlannerInputError, match="interruptible"):
        mix_hours([2, 2], [3, 0], 1)
    with pytest.raises(PlannerInputError, match="interruptible"):
        optimal_mix([2, 2], [1], reserved_price=1.0, on_demand_price=2.0, spot_price=0.5)
    with pytest.raises(PlannerInputError, match="spot_price"):
        optimal_mix([2], [1], reserved_price=1.0, on_demand_price=2.0, spot_price=-0.1)
