"""Budgets and fairness: the replica-second token bucket and weighted max-min fair shares."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.capacity.budgets import TokenBudget, estimate_cost, fair_share
from planner.errors import PlannerInputError


class FakeClock:
    """A clock the test moves by hand, in seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_token_budget_from_the_seeds() -> None:
    clock = FakeClock()
    budget = TokenBudget(rate_per_s=2.0, burst=6.0, clock=clock)
    cost = estimate_cost(9000, 400)
    assert cost == pytest.approx(4.75)
    assert budget.try_take(cost) is True
    assert budget.try_take(cost) is False  # 6 → 1.25 left
    assert budget.available() == pytest.approx(1.25)
    clock.now += 2.0
    assert budget.try_take(cost) is True  # 1.25 + 2.0 × 2.0 = 5.25 ≥ 4.75
    assert budget.available() == pytest.approx(0.5)


def test_token_budget_never_exceeds_its_burst() -> None:
    clock = FakeClock()
    budget = TokenBudget(rate_per_s=2.0, burst=6.0, clock=clock)
    clock.now += 3600
    assert budget.available() == 6.0
    # A clock stepping backwards refills nothing and takes nothing away.
    budget.try_take(1.0)
    clock.now -= 10
    assert budget.available() == pytest.approx(5.0)


def test_fair_share_from_the_seeds() -> None:
    shares = fair_share(1_000_000, {"support": 300_000, "summaries": 250_000, "batch": 2_000_000})
    assert shares == pytest.approx({"support": 300_000, "summaries": 250_000, "batch": 450_000})
    assert list(shares) == ["support", "summaries", "batch"]


def test_fair_share_with_weights_and_plenty() -> None:
    # Everyone over-asks: split by weight. Room for all: everyone gets its demand.
    assert fair_share(90, {"a": 100, "b": 100}, {"a": 2, "b": 1}) == pytest.approx(
        {"a": 60, "b": 30}
    )
    assert fair_share(1000, {"a": 100, "b": 200}) == {"a": 100, "b": 200}
    # The weight-2 tenant's even level is 60; it asks for 50, so the rest goes to b.
    assert fair_share(90, {"a": 50, "b": 100}, {"a": 2, "b": 1}) == pytest.approx(
        {"a": 50, "b": 40}
    )


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: TokenBudget(rate_per_s=-1, burst=6), "rate_per_s"),
        (lambda: TokenBudget(rate_per_s=2, burst=0), "burst"),
        (lambda: TokenBudget(2, 6, clock=FakeClock()).try_take(-1), "cost"),
        (lambda: TokenBudget(2, 6, clock=lambda: math.nan), "clock"),
        (lambda: estimate_cost(-9000, 400), "prompt_tokens"),
        (lambda: estimate_cost(9000, 400, prefill_tps=0), "prefill_rate"),
        (lambda: fair_share(-1, {"a": 1}), "capacity"),
        (lambda: fair_share(10, {}), "demands"),
        (lambda: fair_share(10, {"a": -1}), "demands[a]"),
        (lambda: fair_share(10, {"a": 1}, {"b": 1}), "weights"),
        (lambda: fair_share(10, {"a": 1}, {"a": 0}), "weights[a]"),
    ],
)
def test_invalid_arguments_are_named(call: object, argument: str) -> None:
    assert callable(call)
    with pytest.raises(PlannerInputError) as caught:
        call()
    assert caught.value.argument == argument


@settings(max_examples=100, deadline=None)
@given(
    capacity=st.floats(min_value=0, max_value=1e7),
    tenants=st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=1e7),
            st.floats(min_value=0.1, max_value=10),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_fair_shares_fill_up_to_capacity_and_never_exceed_a_demand(
    capacity: float, tenants: list[tuple[float, float]]
) -> None:
    demands = {f"t{i}": d for i, (d, _) in enumerate(tenants)}
    weights = {f"t{i}": w for i, (_, w) in enumerate(tenants)}
    shares = fair_share(capacity, demands, weights)
    assert set(shares) == set(demands)
    expected = min(capacity, math.fsum(demands.values()))
    assert math.fsum(shares.values()) == pytest.approx(expected, rel=1e-9, abs=1e-6)
    for name, share in shares.items():
        assert 0 <= share <= demands[name]
    # Max-min: a tenant left short gets at least its weighted share of anyone else's share.
    for a in shares:
        if shares[a] < demands[a] * (1 - 1e-9):
            for b in shares:
                assert shares[a] / weights[a] >= shares[b] / weights[b] * (1 - 1e-9) - 1e-9
