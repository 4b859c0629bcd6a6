"""Computing a finance snapshot: the active plan sized hour by hour over months ahead.

How future hours are sized (``docs/finance.md`` says the same for readers):

1. Every demand of the plan has an hourly rate over the horizon. A demand the plan sized from
   telemetry (its ``forecast`` field) is forecast again from the same history the plan's
   forecast was fitted to (the window ending at the plan's anchor), with
   ``planner.forecast.fit_demand``, and split over its group's classes by the declared mix,
   as the re-plan does; a declared demand stays at its declared rate, flat.
2. The fleet re-plans every day for the peak of the re-plan horizon ahead, so each day is
   sized for ``planner.forecast.finance.rolling_peak`` of the band at the demand's tier
   quantile (and at the band's low and high edges): the p99 hour of the week starting that
   day.
3. Each day's fleet is the placement re-solved at those rates (``planner.placement.solve``,
   the plan's problem with its demands at the day's rates, warm-started from the plan: its
   replicas as ``previous``), with fewer solves by ``size_days_by_solve``'s proven rule (a run
   of days whose least and greatest demand solve to the same fleet shares it; identical days
   and edges solve once). The solves are made once per plan version and horizon, when the
   snapshot is stored (on activation, by the warm-up task).
4. Tenants' use of each pool is their expected (mean) rate, split by the day's routing, ×
   replica-seconds per request ÷ target utilisation; the showback splits the cost by it. The
   plan's own routing gives the same for the days the plan runs (``*_plan`` arrays).
5. Hosted overflow (``hosted_days``): a day sends its solve's hosted rows scaled to the day's
   rate (the solve's routes scaled down, as the bracketing rule's proof serves the day); the
   plan's days send the plan's. The traffic sent hosted runs on no replica, so step 4 counts
   the rest. A plan without hosted rows stores no hosted series.

Days up to the one containing the moment of a request are not taken from this sizing but from
the active plan itself (``services``): the fleet running now is the plan. Every period is the
sum of its days, so a month costs what its days and its weeks' shares cost.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from django.db import IntegrityError, transaction

from controlplane.finance import selectors
from controlplane.finance.conf import finance_settings
from controlplane.finance.models import FinanceSnapshot
from controlplane.plans.conf import replan_settings
from controlplane.plans.demand import (
    SOURCE_TELEMETRY,
    forecast_anchor,
    history_window,
    rate_history,
)
from controlplane.plans.models import Plan
from controlplane.plans.selectors import Demand, plan_problem, plan_solution
from planner import placement
from planner.errors import PlannerInputError
from planner.forecast import fit_demand
from planner.forecast.finance import (
    Sizing,
    SolveCache,
    rolling_peak,
    size_days_by_solve,
    sizing_from_solution,
)

FloatArray = npt.NDArray[np.float64]

# Months of forecast kept after the current one.
HORIZON_MONTHS = 12
# The re-plan's own window when the plan's band does not say: a week ahead.
DEFAULT_WINDOW_HOURS = 168


@dataclass(frozen=True)
class Horizon:
    """A snapshot's horizon: its first hour, its length in hours, and where the past ends.

    The days before ``past_end`` (the start of the month the horizon was asked in) are past
    for every read of the snapshot (the horizon fixes that month: it ends 12 months after
    it), so every read takes them from the active plan and they are sized as the plan, with
    no solve.
    """

    start: datetime
    hours: int
    past_end: datetime


def horizon_for(now: datetime) -> Horizon:
    """The horizon of the snapshot a request at ``now`` reads: from the start of the current
    quarter (or of the current ISO week, when that is earlier) to the end of the
    ``HORIZON_MONTHS``-th month after the current one. Beginning with the quarter lets a
    quarter be priced whole as the sum of its days; ending 12 months on leaves at least the
    current quarter and the next three whole."""
    moment = now.astimezone(UTC)
    month = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    quarter = month.replace(month=month.month - (month.month - 1) % 3)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    week = day - timedelta(days=day.weekday())
    start = min(quarter, week)
    year, index = month.year, month.month - 1 + HORIZON_MONTHS + 1
    end = month.replace(year=year + index // 12, month=index % 12 + 1)
    return Horizon(
        start=start, hours=int((end - start).total_seconds() // 3600), past_end=min(month, week)
    )


@dataclass(frozen=True)
class DemandSeries:
    """Hourly rates of one demand over the horizon plus a window (requests/s)."""

    mean: FloatArray
    q: FloatArray
    low: FloatArray
    high: FloatArray
    quantile: float


def _flat(rate: float, hours: int, quantile: float) -> DemandSeries:
    series = np.full(hours, rate, dtype=np.float64)
    return DemandSeries(mean=series, q=series, low=series, high=series, quantile=quantile)


def _history_digest(history: Any) -> str:
    digest = hashlib.sha256()
    for key in sorted(history or {}):
        ts, rates = history[key]
        digest.update("/".join(key).encode())
        digest.update(np.asarray(ts, dtype=np.float64).tobytes())
        digest.update(np.asarray(rates, dtype=np.float64).tobytes())
    return digest.hexdigest()


def _plan_anchor(plan: Plan) -> datetime:
    text = (plan.forecast_band or {}).get("anchor")
    if text:
        return datetime.fromisoformat(text)
    return forecast_anchor(plan.created_at)


def _telemetry_history(plan: Plan) -> Any:
    """The rate history the plan's forecast was fitted to, or None when no demand of the plan
    came from telemetry (then nothing is read)."""
    if not any(
        (d.forecast or {}).get("source") == SOURCE_TELEMETRY for d in plan_problem(plan).demands
    ):
        return None
    start, end = history_window(now=_plan_anchor(plan), settings=replan_settings())
    return rate_history(start=start, end=end)


def forecast_key(plan: Plan, history: Any) -> str:
    """What a snapshot's forecast rests on: the plan, its anchor and band, the history."""
    band = plan.forecast_band or {}
    body = json.dumps(
        {
            "plan": plan.pk,
            "inputs": plan.inputs_hash,
            "anchor": band.get("anchor"),
            "quantiles": band.get("quantiles"),
            "low": (band.get("low") or {}).get("quantile"),
            "high": (band.get("high") or {}).get("quantile"),
            "history": _history_digest(history),
        },
        sort_keys=True,
    )
    return hashlib.sha256(body.encode()).hexdigest()


def _demand_series(
    plan: Plan, *, start: datetime, hours: int, history: Any, notes: list[str]
) -> dict[str, DemandSeries]:
    settings = replan_settings()
    band = plan.forecast_band or {}
    low_q = float((band.get("low") or {}).get("quantile", settings.band_low))
    high_q = float((band.get("high") or {}).get("quantile", settings.band_high))
    tier_q = {str(k): float(v) for k, v in (band.get("quantiles") or {}).items()}
    out: dict[str, DemandSeries] = {}
    groups: dict[tuple[str, str, str], list[Demand]] = defaultdict(list)
    for demand in plan_problem(plan).demands:
        info = demand.forecast or {}
        q = _float(info.get("quantile", tier_q.get(demand.tier or "", 0.9)))
        if info.get("source") == SOURCE_TELEMETRY and history:
            groups[(demand.tenant, demand.model, demand.home_region)].append(demand)
        else:
            out[demand.id] = _flat(demand.requests_per_s, hours, q)
    for key, members in sorted(groups.items()):
        series = history.get(key)
        declared = [_float(_forecast(d)["declared_requests_per_s"]) for d in members]
        total = sum(declared)
        if series is None:
            notes.append(f"{'/'.join(key)}: its rate history is gone; sized as planned, flat")
            for d in members:
                out[d.id] = _flat(d.requests_per_s, hours, _float(_forecast(d)["quantile"]))
            continue
        try:
            model = fit_demand(series[0], series[1], declared_rate=total)
            forecast = model.forecast(start.timestamp(), hours)
        except PlannerInputError as exc:
            notes.append(f"{'/'.join(key)}: history refused by the forecast ({exc}); flat")
            for d in members:
                out[d.id] = _flat(d.requests_per_s, hours, _float(_forecast(d)["quantile"]))
            continue
        for d, rate in zip(members, declared, strict=True):
            share = rate / total if total > 0 else 1.0 / len(members)
            q = _float(_forecast(d)["quantile"])
            out[d.id] = DemandSeries(
                mean=forecast.mean * share,
                q=forecast.quantile(q) * share,
                low=forecast.quantile(low_q) * share,
                high=forecast.quantile(high_q) * share,
                quantile=q,
            )
    return out


def _forecast(demand: Demand) -> Mapping[str, object]:
    """The demand's forecast record (a telemetry-sized demand always has one)."""
    return demand.forecast or {}


def _float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def _daily(values: npt.NDArray[Any]) -> FloatArray:
    """Hourly series (…, hours) summed into days (…, hours / 24)."""
    shape = (*values.shape[:-1], values.shape[-1] // 24, 24)
    return np.asarray(values.reshape(shape).sum(axis=-1), dtype=np.float64)


EDGES = ("q", "low", "high")


def _previous(plan: Plan) -> list[dict[str, Any]]:
    return [
        {"zone": row.zone, "shape": row.shape, "replicas": int(row.replicas)}
        for row in plan.allocations.all()
        if row.replicas > 0
    ]


@dataclass(frozen=True)
class Served:
    """What one solve (or the plan) sends where, beyond its replicas: per demand the planned
    requests/s routed to replicas, and its hosted rows (provider, planned requests/s, $/h)."""

    routed: Mapping[str, float]
    hosted: Mapping[str, tuple[tuple[str, float, float], ...]]

    def hosted_fraction(self, demand: str) -> float:
        """The share of ``demand``'s served planned rate sent to hosted APIs."""
        sent = sum(rps for _p, rps, _c in self.hosted.get(demand, ()))
        total = self.routed.get(demand, 0.0) + sent
        return sent / total if total > 0 else 0.0


NOTHING_HOSTED = Served(routed={}, hosted={})


def _served(solution: Mapping[str, Any]) -> Served:
    """A solution document's routed and hosted requests/s per demand."""
    routed: dict[str, float] = defaultdict(float)
    for row in solution.get("routing") or []:
        routed[str(row["demand"])] += float(row["requests_per_s"])
    hosted: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for row in solution.get("hosted") or []:
        if float(row["requests_per_s"]) > 0:
            hosted[str(row["demand"])].append(
                (str(row["provider"]), float(row["requests_per_s"]), float(row["cost_per_hour"]))
            )
    if not hosted:
        return NOTHING_HOSTED
    return Served(routed=dict(routed), hosted={d: tuple(rows) for d, rows in hosted.items()})


def _plan_served(plan: Plan) -> Served:
    """The active plan's routed and hosted requests/s per demand (its solution's rows)."""
    solution = plan_solution(plan)
    if not solution.hosted:
        return NOTHING_HOSTED
    return _served(
        {
            "routing": [
                {"demand": r.demand, "requests_per_s": r.requests_per_s} for r in solution.routing
            ],
            "hosted": [
                {
                    "demand": h.demand,
                    "provider": h.provider,
                    "requests_per_s": h.requests_per_s,
                    "cost_per_hour": h.cost_per_hour,
                }
                for h in solution.hosted
            ],
        }
    )


def _solver(
    plan: Plan, demand_ids: list[str], served: dict[int, Served]
) -> Callable[[FloatArray], Sizing]:
    """``solve(rates)``: the plan's problem re-solved with its demands at ``rates`` (requests/s,
    in ``demand_ids`` order), warm-started from the plan (its replicas as ``previous``). What
    each solve sends to hosted APIs is kept in ``served`` by the ``Sizing``'s id (the sizings
    live in the solve cache for as long as the snapshot is computed)."""
    base = {k: v for k, v in plan.problem.items() if k != "previous"}
    base["previous"] = _previous(plan)
    index = {demand_id: j for j, demand_id in enumerate(demand_ids)}
    replan = replan_settings()
    limit = finance_settings().solve_time_limit_s

    def solve(rates: FloatArray) -> Sizing:
        problem = copy.deepcopy(base)
        for demand in problem.get("demands", []):
            demand["requests_per_s"] = float(rates[index[demand["id"]]])
        solution = placement.solve(
            problem, time_limit_s=limit, workers=replan.solver_workers, seed=replan.solver_seed
        )
        sizing = sizing_from_solution(solution)
        served[id(sizing)] = _served(solution)
        return sizing

    return solve


def _plan_sizing(plan: Plan) -> Sizing:
    """The plan in force as a ``Sizing`` (what the days before the forecast run)."""
    routed: dict[str, float] = defaultdict(float)
    rows = [r for r in plan.routing.all() if r.requests_per_s > 0]
    for row in rows:
        routed[row.demand] += row.requests_per_s
    return Sizing(
        replicas=tuple(sorted((r["zone"], r["shape"], r["replicas"]) for r in _previous(plan))),
        routing=tuple(
            sorted(
                (row.demand, row.region, row.shape, row.requests_per_s / routed[row.demand])
                for row in rows
            )
        ),
        cost_per_hour=float(plan.cost_per_hour or 0.0),
        exact=True,
    )


def _past(deadline: float) -> Callable[[], bool]:
    """Whether the monotonic clock has passed ``deadline``."""
    return lambda: time.monotonic() > deadline


def snapshot_compute(
    *, plan: Plan, start: datetime, hours: int, past_end: datetime | None = None
) -> FinanceSnapshot:
    """The stored snapshot of ``plan`` over ``hours`` from ``start``, computed and stored if
    it is not there yet (see the module docstring). ``start`` is a UTC day start; the days
    before ``past_end`` (a UTC day start; ``Horizon.past_end``) are sized as the plan, unsolved:
    no read takes them from the forecast."""
    # The forecast a plan rests on is fixed by the plan: its history ends at the plan's
    # anchor. So a stored snapshot of the plan and horizon is reused without reading the
    # history again; ``forecast_key`` records what it was computed from.
    found = selectors.snapshot_find(plan=plan, start=start, hours=hours)
    if found is not None:
        return found
    history = _telemetry_history(plan)
    key = forecast_key(plan, history)
    began = time.perf_counter()
    notes: list[str] = []
    band = plan.forecast_band or {}
    window = int(band.get("horizon_hours") or DEFAULT_WINDOW_HOURS)
    problem = plan_problem(plan)
    demands = {d.id: d for d in problem.demands}
    demand_ids = [d.id for d in problem.demands]
    days = hours // 24
    series = _demand_series(plan, start=start, hours=hours + window, history=history, notes=notes)

    def daily_peak(values: FloatArray) -> FloatArray:
        # Each day is sized for the peak of the re-plan window starting that day.
        if values.size and np.all(values == values[0]):
            return np.full(days, float(values[0]))
        return rolling_peak(values, hours=hours, window=window, step=24)[::24]

    # Days × demands: the rate each day is sized for, at the sizing quantile and the edges.
    rates = {
        edge: np.array(
            [daily_peak(getattr(series[d], edge)) for d in demand_ids], dtype=np.float64
        ).T.reshape(days, len(demand_ids))
        for edge in EDGES
    }
    settings = finance_settings()
    served: dict[int, Served] = {}
    solve = _solver(plan, demand_ids, served)
    in_force = _plan_sizing(plan)
    served[id(in_force)] = _plan_served(plan)
    # The edges share solves: a vector sized once is not solved again. A day at the plan's own
    # rates is the plan (what the re-plan solved, within its longer time limit).
    plan_rates = np.array([demands[d].requests_per_s for d in demand_ids], dtype=np.float64)
    if past_end is not None:
        past = min(max(int((past_end - start).total_seconds()) // 86400, 0), days)
        for edge in EDGES:
            rates[edge][:past] = plan_rates
    solved: SolveCache = {plan_rates.tobytes(): (plan_rates, in_force)}
    by_edge: dict[str, list[Sizing]] = {}
    left = settings.max_solves
    ends = time.monotonic() + settings.solve_budget_s
    exact = True
    for n, edge in enumerate(EDGES):
        # The sizing quantile gets half the budget (solves and seconds), the low edge half of
        # the rest, the high edge what is left (what one leaves unused passes on).
        last = n == len(EDGES) - 1
        share = left if last else max(left // 2, 1)
        remaining = max(ends - time.monotonic(), 0.0)
        deadline = time.monotonic() + (remaining if last else remaining / 2)
        sized = size_days_by_solve(
            rates[edge], solve, max_solves=share, cache=solved, stop=_past(deadline)
        )
        left = max(left - sized.solves, 1)
        exact = exact and sized.exact
        by_edge[edge] = [sized.sizings[i] for i in sized.day]
    if not exact:
        notes.append(
            "some days' fleets are not proven least-cost: a solve stopped at its time limit "
            "(HEADROOM_FINANCE_SOLVE_TIME_LIMIT_S), or the solve budget "
            f"(HEADROOM_FINANCE_MAX_SOLVES, {settings.max_solves}, or "
            f"HEADROOM_FINANCE_SOLVE_BUDGET_S, {settings.solve_budget_s:g} s) ran out and a "
            "busier day's fleet serves them (an upper bound)"
        )

    # Pools: every zone × shape the plan or a day's fleet uses.
    zone_region = {zone: r.name for r in problem.regions for zone in r.zones}
    multiplier = {r.name: r.price_multiplier for r in problem.regions}
    on_demand = {a.name: a.price_per_gpu_hour for a in problem.accelerators}
    pool_keys = sorted(
        {(zone, shape) for zone, shape, _n in in_force.replicas}
        | {
            (z, s)
            for sizings in by_edge.values()
            for sz in set(sizings)
            for z, s, _n in sz.replicas
        }
    )
    pool_index = {k: i for i, k in enumerate(pool_keys)}
    planned = {(zone, shape): n for zone, shape, n in in_force.replicas}
    pools: list[dict[str, Any]] = []
    for zone, shape_name in pool_keys:
        shape = problem.shape(shape_name)
        region = zone_region[zone]
        pools.append(
            {
                "zone": zone,
                "region": region,
                "shape": shape_name,
                "accelerator": shape.accelerator,
                "model": shape.model,
                "gpus_per_replica": shape.gpus,
                "replicas": planned.get((zone, shape_name), 0),
                "price_per_replica_hour": shape.gpus
                * on_demand[shape.accelerator]
                * multiplier.get(region, 1.0),
            }
        )

    def replica_days(sizings: list[Sizing]) -> npt.NDArray[np.int64]:
        out = np.zeros((len(pools), days), dtype=np.int64)
        for d, sz in enumerate(sizings):
            for zone, shape_name, n in sz.replicas:
                out[pool_index[(zone, shape_name)], d] = n
        return out

    replicas = {edge: replica_days(by_edge[edge]) for edge in EDGES}

    # Loads: every demand × region × shape the plan or a day's fleet routes to.
    load_keys = sorted(
        {(dm, rg, sh) for dm, rg, sh, _s in in_force.routing}
        | {(dm, rg, sh) for sz in set(by_edge["q"]) for dm, rg, sh, _s in sz.routing}
    )
    load_index = {k: i for i, k in enumerate(load_keys)}
    mean_daily = {d: _daily(series[d].mean[:hours]) * 3600.0 for d in demand_ids}

    def use(sizings: list[Sizing]) -> dict[str, FloatArray]:
        """Per load and day: requests, tokens and replica-hours used at target utilisation."""
        share = np.zeros((len(load_keys), days))
        for d, sz in enumerate(sizings):
            for dm, rg, sh, part in sz.routing:
                share[load_index[(dm, rg, sh)], d] = part
        # The part of each demand's traffic its day's solve sends to hosted APIs runs on no
        # replica (only demands some solve sends there; none for a plan without hosted rows).
        # By identity: equal sizings may be distinct solves (``served`` is keyed by id).
        sent = {
            dm
            for key in {id(sz) for sz in sizings}
            for dm in served.get(key, NOTHING_HOSTED).hosted
        }
        on_replicas = {
            dm: np.array(
                [1.0 - served.get(id(sz), NOTHING_HOSTED).hosted_fraction(dm) for sz in sizings]
            )
            for dm in sorted(sent)
        }
        out = {n: np.zeros((len(load_keys), days)) for n in ("requests", "tokens", "used")}
        for i, (dm, _rg, sh) in enumerate(load_keys):
            demand = demands[dm]
            shape = problem.shape(sh)
            count = share[i] * mean_daily[dm]
            if dm in on_replicas:
                count = count * on_replicas[dm]
            out["requests"][i] = count
            out["tokens"][i] = count * (demand.prompt_tokens + demand.output_tokens)
            out["used"][i] = (
                count * problem.request_cost_s(demand, shape) / shape.target_utilization / 3600.0
            )
        return out

    forecast_use = use(by_edge["q"])
    plan_use = use([in_force] * days)
    loads: list[dict[str, Any]] = [
        {
            "demand": dm,
            "tenant": demands[dm].tenant,
            "tier": demands[dm].tier or "",
            "region": rg,
            "shape": sh,
            "quantile": series[dm].quantile,
            "promise": demands[dm].promise,
        }
        for dm, rg, sh in load_keys
    ]

    # Hosted spend: every demand × provider the plan or a day's solve sends traffic to.
    hosted, hosted_arrays = hosted_days(
        problem=problem,
        demand_ids=demand_ids,
        by_edge=by_edge,
        in_force=in_force,
        rates=rates,
        served=served,
        vectors={id(sz): vector for vector, sz in solved.values()},
        mean_daily=mean_daily,
        quantiles={d: series[d].quantile for d in demand_ids},
    )

    # Region × GPU type: hourly GPUs at the planned quantile and the low edge, for commitments.
    reserved = selectors.reserved_prices()
    spot_prices = selectors.spot_prices()
    gpu_keys = sorted({(p["region"], p["accelerator"]) for p in pools})
    gpu_q = np.zeros((len(gpu_keys), days), dtype=np.int64)
    gpu_low = np.zeros((len(gpu_keys), days), dtype=np.int64)
    unpromised = _unpromised_shares(pools, loads, forecast_use["used"], replicas["q"])
    unpromised_plan = _unpromised_shares(
        pools, loads, plan_use["used"], np.array([[p["replicas"]] * days for p in pools])
    )
    spare_q = np.zeros((len(gpu_keys), days), dtype=np.int64)
    spare_low = np.zeros((len(gpu_keys), days), dtype=np.int64)
    spare_plan = np.zeros((len(gpu_keys), days), dtype=np.int64)
    gpu_pools = []
    for g, (region, accelerator) in enumerate(gpu_keys):
        members = [
            i
            for i, p in enumerate(pools)
            if (p["region"], p["accelerator"]) == (region, accelerator)
        ]
        held_plan = np.zeros(days)
        for i in members:
            gpu_q[g] += replicas["q"][i] * pools[i]["gpus_per_replica"]
            gpu_low[g] += replicas["low"][i] * pools[i]["gpus_per_replica"]
            held_plan += pools[i]["replicas"] * pools[i]["gpus_per_replica"]
        spare_q[g] = _whole(
            sum(replicas["q"][i] * pools[i]["gpus_per_replica"] * unpromised[i] for i in members),
            gpu_q[g],
        )
        spare_low[g] = _whole(
            sum(replicas["low"][i] * pools[i]["gpus_per_replica"] * unpromised[i] for i in members),
            gpu_low[g],
        )
        spare_plan[g] = _whole(
            sum(
                pools[i]["replicas"] * pools[i]["gpus_per_replica"] * unpromised_plan[i]
                for i in members
            ),
            held_plan,
        )
        scale = multiplier.get(region, 1.0)
        od = on_demand[accelerator] * scale
        rv = reserved.get(accelerator)
        sp = spot_prices.get(accelerator)
        if rv is None:
            notes.append(f"{accelerator}: no reserved price recorded; priced on demand only")
        gpu_pools.append(
            {
                "region": region,
                "accelerator": accelerator,
                "gpus": sum(pools[i]["replicas"] * pools[i]["gpus_per_replica"] for i in members),
                "on_demand_price": od,
                "reserved_price": (rv * scale) if rv is not None else od,
                "spot_price": (sp * scale) if sp is not None else None,
            }
        )

    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        rep_q=replicas["q"] * 24.0,
        rep_low=replicas["low"] * 24.0,
        rep_high=replicas["high"] * 24.0,
        used=forecast_use["used"],
        requests=forecast_use["requests"],
        tokens=forecast_use["tokens"],
        used_plan=plan_use["used"],
        requests_plan=plan_use["requests"],
        tokens_plan=plan_use["tokens"],
        gpu_q=np.repeat(gpu_q, 24, axis=1).astype(np.int32),
        gpu_low=np.repeat(gpu_low, 24, axis=1).astype(np.int32),
        spare_q=np.repeat(spare_q, 24, axis=1).astype(np.int32),
        spare_low=np.repeat(spare_low, 24, axis=1).astype(np.int32),
        spare_plan=np.repeat(spare_plan, 24, axis=1).astype(np.int32),
        **cast(dict[str, Any], hosted_arrays),
    )
    snapshot = FinanceSnapshot(
        plan=plan,
        start=start,
        hours=hours,
        forecast_key=key,
        pools=pools,
        loads=loads,
        gpu_pools=gpu_pools,
        hosted=hosted,
        arrays=buffer.getvalue(),
        quantiles={
            "tiers": dict((band.get("quantiles") or {}).items()),
            "low": float((band.get("low") or {}).get("quantile", replan_settings().band_low)),
            "high": float((band.get("high") or {}).get("quantile", replan_settings().band_high)),
            "window_hours": window,
            "solves": len(solved),
        },
        notes=notes,
        compute_seconds=time.perf_counter() - began,
    )
    try:
        with transaction.atomic():
            snapshot.save()
            _prune(snapshot)
    except IntegrityError:
        # Another request stored the same snapshot meanwhile: read theirs.
        found = selectors.snapshot_find(plan=plan, start=start, hours=hours)
        if found is None:
            raise
        return found
    return snapshot


HOSTED_ARRAYS = (
    "hosted_q",
    "hosted_low",
    "hosted_high",
    "hosted_plan",
    "hosted_requests",
    "hosted_tokens",
    "hosted_requests_plan",
    "hosted_tokens_plan",
)


def hosted_days(
    *,
    problem: Any,
    demand_ids: list[str],
    by_edge: dict[str, list[Sizing]],
    in_force: Sizing,
    rates: dict[str, FloatArray],
    served: dict[int, Served],
    vectors: dict[int, FloatArray],
    mean_daily: dict[str, FloatArray],
    quantiles: dict[str, float],
) -> tuple[list[dict[str, Any]], dict[str, FloatArray]]:
    """The hosted rows (demand × provider) and their daily series: the spend (currency a day)
    at the sizing quantile and the band's edges, and the plan's; the expected requests and
    tokens sent there, forecast and plan.

    A day's spend is its solve's hosted rows scaled to the day's rate: a day given the fleet
    solved for a demand vector v (its own, or, for a day inside a run the bracketing rule
    settles, the run's greatest) sends each demand's hosted rows × rate(day) ÷ v, the solve's
    routes scaled down to the day, as that rule's proof serves the day. For a day solved at
    its own rate that is the solve's hosted rows; for the plan's days the plan's, × 24.
    Expected requests split the demand's mean rate in the solve's proportion of hosted to
    served planned requests/s.
    """
    days = len(by_edge["q"])
    index = {d: j for j, d in enumerate(demand_ids)}
    demands = {d.id: d for d in problem.demands}
    region_of = {p.name: p.region for p in problem.hosted}
    # By identity: equal sizings may be distinct solves (``served`` is keyed by id).
    ids = {id(in_force)} | {id(sz) for sizings in by_edge.values() for sz in sizings}
    keys = sorted(
        {
            (dm, provider)
            for key in ids
            for dm, rows in served.get(key, NOTHING_HOSTED).hosted.items()
            for provider, _rps, _cost in rows
        }
    )
    if not keys:
        return [], {}
    key_index = {k: i for i, k in enumerate(keys)}
    out = {name: np.zeros((len(keys), days)) for name in HOSTED_ARRAYS}

    def fill(
        sizings: list[Sizing], day_rates: FloatArray | None, cost: str, use: str | None
    ) -> None:
        # ``use``: the suffix of the requests and tokens arrays to fill ("" forecast, "_plan"),
        # or None for a band edge (sized, not expected).
        for d, sz in enumerate(sizings):
            sv = served.get(id(sz), NOTHING_HOSTED)
            vector = vectors.get(id(sz))
            for dm, rows in sv.hosted.items():
                j = index[dm]
                scale = 1.0
                if day_rates is not None and vector is not None:
                    scale = float(day_rates[d, j] / vector[j]) if vector[j] > 0 else 0.0
                total = sv.routed.get(dm, 0.0) + sum(rps for _p, rps, _c in rows)
                demand = demands[dm]
                for provider, rps, per_hour in rows:
                    i = key_index[(dm, provider)]
                    out[cost][i, d] = per_hour * scale * 24.0
                    if use is not None:
                        count = mean_daily[dm][d] * (rps / total if total > 0 else 0.0)
                        out[f"hosted_requests{use}"][i, d] = count
                        out[f"hosted_tokens{use}"][i, d] = count * (
                            demand.prompt_tokens + demand.output_tokens
                        )

    fill(by_edge["q"], rates["q"], "hosted_q", "")
    fill(by_edge["low"], rates["low"], "hosted_low", None)
    fill(by_edge["high"], rates["high"], "hosted_high", None)
    fill([in_force] * days, None, "hosted_plan", "_plan")
    rows = [
        {
            "demand": dm,
            "tenant": demands[dm].tenant,
            "tier": demands[dm].tier or "",
            "model": demands[dm].model,
            "provider": provider,
            "region": region_of.get(provider, ""),
            "quantile": quantiles[dm],
        }
        for dm, provider in keys
    ]
    return rows, out


def _unpromised_shares(
    pools: list[dict[str, Any]],
    loads: list[dict[str, Any]],
    used: FloatArray,
    replicas: npt.NDArray[Any],
) -> FloatArray:
    """Per pool and day: the share of its replicas that load promising nothing (no N+1, no
    zone survival) uses, at its expected rate and the shape's target utilisation: the part of
    the pool that may run on spot. The rest (promised load, and every spare, floor, burst
    headroom and rounding up) is firm. ``used`` is load × day replica-hours, ``replicas`` pool
    × day; the pools of a region's shape share its loads in proportion to their replicas."""
    days = replicas.shape[1] if replicas.ndim == 2 else 0
    by_shape: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, p in enumerate(pools):
        by_shape[(p["region"], p["shape"])].append(i)
    free: dict[tuple[str, str], FloatArray] = defaultdict(lambda: np.zeros(days))
    total: dict[tuple[str, str], FloatArray] = defaultdict(lambda: np.zeros(days))
    for j, load in enumerate(loads):
        key = (load["region"], load["shape"])
        total[key] = total[key] + used[j]
        if load.get("promise") == "none":
            free[key] = free[key] + used[j]
    out = np.zeros((len(pools), days))
    for key, members in by_shape.items():
        held = sum(replicas[i] for i in members) * 24.0
        base = np.maximum(held, total[key]) if key in total else held
        share = np.divide(free[key], base, out=np.zeros(days), where=base > 0)
        for i in members:
            out[i] = share
    return out


def _whole(gpus: Any, ceiling: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """Whole interruptible GPUs: rounded down (a fraction of a GPU is firm), at most those
    held."""
    values = np.floor(np.asarray(gpus, dtype=np.float64) + 1e-9).astype(np.int64)
    return np.minimum(np.maximum(values, 0), np.asarray(ceiling, dtype=np.int64))


def _prune(kept: FinanceSnapshot) -> None:
    """Delete the snapshots of the same horizon start that nothing reads any more: every one
    but the first (history's "planned" is the earliest forecast of a period) and ``kept``
    (the active plan's). Their stored reports go with them."""
    same_start = FinanceSnapshot.objects.filter(start=kept.start).order_by("created_at", "pk")
    first = same_start.values_list("pk", flat=True).first()
    same_start.exclude(pk__in=[kept.pk, first]).delete()


def snapshot_arrays(snapshot: FinanceSnapshot) -> dict[str, npt.NDArray[Any]]:
    """The snapshot's series by name (see ``snapshot_compute``)."""
    with np.load(io.BytesIO(bytes(snapshot.arrays))) as archive:
        return {name: archive[name] for name in archive.files}
