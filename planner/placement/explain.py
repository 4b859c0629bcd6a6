"""Explanations of a plan: what binds it, who goes short, and the price of each promise.

The price of a promise is what the same demand costs with the promise relaxed: every
"zone" demand relaxed to "n+1", then every demand relaxed to "none" (the seeds' sizing
example reads 27, 19 and 18 replicas: zone loss, N+1 and burst only). The difference is what
the reliability objective costs, which is how the seeds say a promise should be discussed.

A demand with hosted overflow gets a sentence saying how much goes to the hosted API and
why (``hosted_sentences``): "inventory exhausted" where no region it may use has the spare
GPUs to carry that share on replicas, "cheaper than a replica" where it has them and the
replicas would cost more per hour than the hosted tokens.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.placement.binding import _fmt, _replicas_for, binding_sentences
from planner.placement.model import Instance, Plan, block_loads
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
    hosted: tuple[str, ...] = ()

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
        out.extend(f"hosted: {sentence}" for sentence in self.hosted)
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
            **({"hosted": list(self.hosted)} if self.hosted else {}),
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
    hosted_of = {
        (instance.demands[h.demand].id, h.provider): hi for hi, h in enumerate(instance.hosted)
    }
    hosted: dict[int, float] = {}
    for row in solution.get("hosted") or []:
        hi = hosted_of.get((row["demand"], row["provider"]))
        if hi is None:
            continue
        rate = instance.demands[instance.hosted[hi].demand].planned_requests_per_s
        if rate > 0:
            hosted[hi] = float(row["requests_per_s"]) / rate
    return Plan(replicas=replicas, share=share, hosted=hosted)


def hosted_sentences(instance: Instance, plan: Plan) -> list[str]:
    """One sentence per demand with hosted overflow: how much goes there and why.

    For the demand's hosted share, each of its replica routes is priced as the replicas its
    block would need on top of the plan's (capacity, N+1, zone loss and concurrency floors)
    where the region's zones have the GPUs free. None fits: "inventory exhausted". The
    cheapest that fits costs more per hour than the hosted share: "cheaper than a replica".
    """
    problem = instance.problem
    used: dict[tuple[str, str], int] = defaultdict(int)
    per_block: dict[tuple[str, str], int] = defaultdict(int)
    for (z, s), n in plan.replicas.items():
        shape = problem.shape(s)
        used[(z, shape.accelerator)] += n * shape.gpus
        per_block[(problem.region_of_zone(z), s)] += n
    loads = block_loads(instance, plan, plan.share)
    out: list[str] = []
    for di, demand in enumerate(instance.demands):
        his = instance.hosted_of[di] if instance.hosted_of else ()
        shares = {hi: plan.hosted.get(hi, 0.0) for hi in his if plan.hosted.get(hi, 0.0) > 0}
        if not shares:
            continue
        share = sum(shares.values())
        rate = share * demand.planned_requests_per_s
        spend = sum(s * instance.hosted[hi].cost_per_hour for hi, s in shares.items())
        tokens = sum(s * instance.hosted[hi].tokens_per_minute for hi, s in shares.items())
        providers = ", ".join(sorted(instance.hosted[hi].provider for hi in shares))
        who = (
            f"demand {demand.id} (tenant {demand.tenant}): {_fmt(rate)} of "
            f"{_fmt(demand.planned_requests_per_s)} requests/s ({_fmt(tokens)} tokens/min, "
            f"${spend:,.2f}/hour) go to hosted {providers}"
        )
        best: tuple[float, int, str, str] | None = None
        for ri in instance.routes_of[di]:
            route = instance.routes[ri]
            key = (route.region, route.shape)
            shape = problem.shape(route.shape)
            load, promised, zonal, conc = loads.get(key, (0.0, 0.0, 0.0, 0.0))
            extra = share * route.load
            need = _replicas_for(
                load + extra,
                promised + (extra if route.promise_level >= 1 else 0.0),
                zonal + (extra if route.promise_level >= 2 else 0.0),
                conc + share * route.concurrency,
                len(instance.zones_of[route.region]),
            )
            if need == 0 and extra > 0:
                continue  # a zone promise in a one-zone region: replicas cannot carry it
            more = max(0, need - per_block.get(key, 0))
            free = sum(
                problem.inventory_gpus(z, shape.accelerator) - used.get((z, shape.accelerator), 0)
                for z in instance.zones_of[route.region]
            )
            if more * shape.gpus > free:
                continue
            zone = instance.zones_of[route.region][0]
            cost = more * problem.replica_price_per_hour(zone, shape)
            if best is None or (cost, more, route.region, route.shape) < best:
                best = (cost, more, route.region, route.shape)
        if best is None:
            regions = ", ".join(problem.serving_regions(demand)) or "none"
            out.append(
                f"{who}: inventory exhausted: no region it may serve from ({regions}) has the "
                f"spare GPUs to carry that share on replicas of {demand.model}"
            )
        elif best[0] > spend:
            out.append(
                f"{who}: cheaper than a replica: {best[1]} more replica(s) of {best[3]} in "
                f"{best[2]} would cost ${best[0]:,.2f}/hour"
            )
        else:
            out.append(
                f"{who}: {best[1]} more replica(s) of {best[3]} in {best[2]} would cost "
                f"${best[0]:,.2f}/hour, no more than the hosted share (the solve did not prove "
                "a cheaper plan)"
            )
    return out


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
        hosted=tuple(hosted_sentences(instance, plan)),
    )
