"""Explanations of a plan: what binds it, who goes short, and the price of each promise.

The price of a promise is what the same demand costs with the promise relaxed: every
"zone" demand relaxed to "n+1", then every demand relaxed to "none" (the seeds' sizing
example reads 27, 19 and 18 replicas: zone loss, N+1 and burst only). The difference is what
the reliability objective costs, which is how the seeds say a promise should be discussed.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.placement.binding import binding_sentences
from planner.placement.model import Instance, Plan
from planner.placement.problem import Demand, Problem, Promise, parse_problem
from planner.placement.solver import solve


@dataclass(frozen=True)
class PromisePrice:
    """The plan's cost with promises relaxed to at most ``promise`` ("as planned": none)."""

    promise: str
    status: str
    cost_per_hour: float
    replicas: int
    unserved_requests_per_s: float


@dataclass(frozen=True)
class Explanation:
    """Why a plan looks as it does: binding rows, shortfalls per tenant, promise prices."""

    status: str
    cost_per_hour: float
    replicas: int
    unserved_requests_per_s: float
    binding: tuple[str, ...]
    unserved_by_tenant: Mapping[str, float]
    promise_prices: tuple[PromisePrice, ...]

    def lines(self) -> list[str]:
        """A human summary, one line each."""
        out = [
            f"plan: {self.status}, {self.replicas} replicas, ${self.cost_per_hour:,.2f}/hour, "
            f"{self.unserved_requests_per_s:.3g} requests/s unserved"
        ]
        for tenant, rate in sorted(self.unserved_by_tenant.items()):
            out.append(f"short: tenant {tenant} has {rate:.3g} requests/s unserved")
        if self.promise_prices:
            base = self.promise_prices[0]
            for price in self.promise_prices[1:]:
                saving = base.cost_per_hour - price.cost_per_hour
                out.append(
                    f"promises relaxed to {price.promise}: {price.replicas} replicas, "
                    f"${price.cost_per_hour:,.2f}/hour; the promises as planned cost "
                    f"${saving:,.2f}/hour more"
                )
        out.extend(f"binding: {sentence}" for sentence in self.binding)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "status": self.status,
            "cost_per_hour": self.cost_per_hour,
            "replicas": self.replicas,
            "unserved_requests_per_s": self.unserved_requests_per_s,
            "binding": list(self.binding),
            "unserved_by_tenant": dict(self.unserved_by_tenant),
            "promise_prices": [dataclasses.asdict(p) for p in self.promise_prices],
        }


def plan_from_solution(instance: Instance, solution: Mapping[str, Any]) -> Plan:
    """The ``Plan`` a solution dict describes (routing rates back to route shares)."""
    route_of = {
        (instance.demands[r.demand].id, r.region, r.shape): ri
        for ri, r in enumerate(instance.routes)
    }
    share: dict[int, float] = {}
    for row in solution.get("routing", []):
        ri = route_of.get((row["demand"], row["region"], row["shape"]))
        if ri is None:
            continue
        rate = instance.demands[instance.routes[ri].demand].planned_requests_per_s
        if rate > 0:
            share[ri] = float(row["requests_per_s"]) / rate
    replicas = {
        (row["zone"], row["shape"]): int(row["replicas"]) for row in solution.get("replicas", [])
    }
    return Plan(replicas=replicas, share=share)


def _relaxed(problem: Problem, ceiling: Promise) -> Problem:
    """``problem`` with every promise stronger than ``ceiling`` lowered to it."""
    order = {"none": 0, "n+1": 1, "zone": 2}

    def lower(d: Demand) -> Demand:
        if order[d.promise] > order[ceiling]:
            return dataclasses.replace(d, promise=ceiling)
        return d

    return dataclasses.replace(problem, demands=tuple(lower(d) for d in problem.demands))


def _replicas(solution: Mapping[str, Any]) -> int:
    return sum(int(row["replicas"]) for row in solution.get("replicas", []))


def explain(
    problem: Mapping[str, Any] | Problem,
    solution: Mapping[str, Any],
    *,
    time_limit_s: float = 60.0,
    workers: int = 2,
    seed: int = 0,
    promise_prices: bool = True,
) -> Explanation:
    """Explain ``solution`` for ``problem``: binding rows, shortfalls, price of promises.

    ``promise_prices`` re-solves the problem with promises relaxed to "n+1" and to "none",
    each within ``time_limit_s``. Raises ``ProblemInvalid`` for an invalid problem.
    """
    parsed = problem if isinstance(problem, Problem) else parse_problem(problem)
    instance = Instance.build(parsed)
    plan = plan_from_solution(instance, solution)
    unserved: dict[str, float] = defaultdict(float)
    for row in solution.get("unserved", []):
        demand = next((d for d in parsed.demands if d.id == row["demand"]), None)
        tenant = demand.tenant if demand is not None else str(row["demand"])
        unserved[tenant] += float(row["requests_per_s"])
    prices: list[PromisePrice] = []
    if promise_prices:
        prices.append(
            PromisePrice(
                promise="as planned",
                status=str(solution.get("status")),
                cost_per_hour=float(solution.get("cost_per_hour", 0.0)),
                replicas=_replicas(solution),
                unserved_requests_per_s=float(solution.get("unserved_requests_per_s", 0.0)),
            )
        )
        for ceiling in ("n+1", "none"):
            relaxed: Promise = "n+1" if ceiling == "n+1" else "none"
            other = solve(
                _relaxed(parsed, relaxed), time_limit_s=time_limit_s, workers=workers, seed=seed
            )
            prices.append(
                PromisePrice(
                    promise=ceiling,
                    status=str(other["status"]),
                    cost_per_hour=float(other["cost_per_hour"]),
                    replicas=_replicas(other),
                    unserved_requests_per_s=float(other["unserved_requests_per_s"]),
                )
            )
    return Explanation(
        status=str(solution.get("status")),
        cost_per_hour=float(solution.get("cost_per_hour", 0.0)),
        replicas=_replicas(solution),
        unserved_requests_per_s=float(solution.get("unserved_requests_per_s", 0.0)),
        binding=tuple(binding_sentences(instance, plan)),
        unserved_by_tenant=dict(unserved),
        promise_prices=tuple(prices),
    )
