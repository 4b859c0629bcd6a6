"""Tenant budgets and fairness: a token bucket in replica-seconds, and max-min fair shares.

Inside a region tenants compete for the same replicas. A budget measured in estimated cost
(replica-seconds) rather than requests stops a tenant spending its allowance on 9,000-token
prompts. When capacity is short, a weighted max-min fair share gives every tenant what it asks
for up to an equal (weighted) level, and hands what the small tenants leave to the large ones,
so a runaway batch job cannot crowd out the others.

Units: replica-seconds for costs and budgets, replica-seconds per second for refill rates,
seconds for the clock; fair shares are in whatever unit the capacity is (tokens per minute in
the seeds).

Every public function and constructor raises ``PlannerInputError`` naming the argument for
negative or non-finite rates, costs, capacities and demands, non-positive weights, and weights
that do not match the tenants.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from planner.capacity import _checks
from planner.capacity.workload import request_cost
from planner.errors import PlannerInputError


def estimate_cost(
    prompt_tokens: float,
    max_output_tokens: float,
    prefill_tps: float = 4000.0,
    decode_tps: float = 160.0,
) -> float:
    """Replica-seconds to charge a request before it runs, from its prompt and output cap.

    The request cost model (``workload.request_cost``) with the output cap standing in for the
    unknown output length, so the charge is an upper bound. Defaults are the seeds' benchmark,
    4,000 prefill and 160 decode tokens/s: 9,000 in / 400 out costs 4.75 replica-seconds.
    """
    return request_cost(prompt_tokens, max_output_tokens, prefill_tps, decode_tps)


class TokenBudget:
    """Per-tenant budget of estimated replica-seconds, refilled continuously.

    A token bucket: it holds at most ``burst`` replica-seconds, refills at ``rate_per_s``, and a
    request is admitted only if its whole estimated cost is available. ``clock`` returns seconds
    (monotonic); inject one to test or to replay a trace. With rate 2/s and burst 6, two
    4.75 s requests back to back: True then False (1.25 left); two seconds later True (5.25).
    """

    def __init__(
        self, rate_per_s: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = _checks.non_negative("rate_per_s", rate_per_s)
        self.burst = _checks.positive("burst", burst)
        self.clock = clock
        self.level = self.burst
        self.stamp = _checks.finite("clock", clock())

    def _refill(self) -> None:
        now = _checks.finite("clock", self.clock())
        # A clock that steps backwards refills nothing rather than draining the bucket.
        elapsed = max(0.0, now - self.stamp)
        self.level = min(self.burst, self.level + elapsed * self.rate)
        self.stamp = now

    def available(self) -> float:
        """Replica-seconds the tenant could spend now."""
        self._refill()
        return self.level

    def try_take(self, cost: float) -> bool:
        """Charge ``cost`` replica-seconds if the budget holds them; say whether it did."""
        amount = _checks.non_negative("cost", cost)
        self._refill()
        if self.level >= amount:
            self.level -= amount
            return True
        return False


def fair_share(
    capacity: float,
    demands: Mapping[str, float],
    weights: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Weighted max-min fair shares of ``capacity`` among tenants (water-filling).

    Tenants are satisfied in order of demand per unit weight; each gets its whole demand while
    that is below an equal weighted share of what is left, and the rest split the remainder in
    proportion to their weights. Shares sum to min(capacity, total demand) and never exceed a
    demand. 1,000,000 TPM among 300,000 / 250,000 / 2,000,000: 300,000, 250,000 and the rest,
    450,000, to the batch job. Equal weights when ``weights`` is None.
    """
    total = _checks.non_negative("capacity", capacity)
    _checks.non_empty("demands", demands)
    asked = {name: _checks.non_negative(f"demands[{name}]", d) for name, d in demands.items()}
    if weights is None:
        weight = dict.fromkeys(asked, 1.0)
    else:
        if set(weights) != set(asked):
            raise PlannerInputError("weights", "must name exactly the tenants in demands")
        weight = {name: _checks.positive(f"weights[{name}]", w) for name, w in weights.items()}

    order = sorted(asked, key=lambda name: asked[name] / weight[name])
    share: dict[str, float] = {}
    remaining = total
    for i, name in enumerate(order):
        rest = order[i:]
        rest_weight = math.fsum(weight[n] for n in rest)
        level = remaining / rest_weight  # capacity per unit weight if the rest split it evenly
        if asked[name] <= level * weight[name]:
            share[name] = asked[name]
            remaining = max(0.0, remaining - asked[name])
            continue
        # Everyone left wants more than an even split: they share what remains by weight.
        for n in rest:
            share[n] = min(asked[n], remaining * weight[n] / rest_weight)
        break
    return {name: share[name] for name in asked}
