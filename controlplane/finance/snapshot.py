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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

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
from planner.placement.problem import parse_problem

FloatArray = npt.NDArray[np.float64]

# Months of forecast kept after the current one.
HORIZON_MONTHS = 12
# The re-plan's own window when the plan's band does not say: a week ahead.
DEFAULT_WINDOW_HOURS = 168


def horizon_for(now: datetime) -> tuple[datetime, int]:
    """First hour and length of the snapshot a request at ``now`` reads: from the start of the
    current month (or of the current ISO week, when that is earlier) to the end of the
    ``HORIZON_MONTHS``-th month after the current one."""
    moment = now.astimezone(UTC)
    month = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    week = day - timedelta(days=day.weekday())
    start = min(month, week)
    year, index = month.year, month.month - 1 + HORIZON_MONTHS + 1
    end = month.replace(year=year + index // 12, month=index % 12 + 1)
    return start, int((end - start).total_seconds() // 3600)


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
        (d.get("forecast") or {}).get("source") == SOURCE_TELEMETRY
        for d in plan.problem.get("demands", [])
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
    demands = plan.problem.get("demands", [])
    out: dict[str, DemandSeries] = {}
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for demand in demands:
        info = demand.get("forecast") or {}
        q = float(info.get("quantile", tier_q.get(str(demand.get("tier", "")), 0.9)))
        if info.get("source") == SOURCE_TELEMETRY and history:
            groups[(demand["tenant"], demand["model"], demand["home_region"])].append(demand)
        else:
            out[demand["id"]] = _flat(float(demand["requests_per_s"]), hours, q)
    for key, members in sorted(groups.items()):
        series = history.get(key)
        declared = [float(d["forecast"]["declared_requests_per_s"]) for d in members]
        total = sum(declared)
        if series is None:
            notes.append(f"{'/'.join(key)}: its rate history is gone; sized as planned, flat")
            for d in members:
                out[d["id"]] = _flat(float(d["requests_per_s"]), hours, d["forecast"]["quantile"])
            continue
        try:
            model = fit_demand(series[0], series[1], declared_rate=total)
            forecast = model.forecast(start.timestamp(), hours)
        except PlannerInputError as exc:
            notes.append(f"{'/'.join(key)}: history refused by the forecast ({exc}); flat")
            for d in members:
                out[d["id"]] = _flat(float(d["requests_per_s"]), hours, d["forecast"]["quantile"])
            continue
        for d, rate in zip(members, declared, strict=True):
            share = rate / total if total > 0 else 1.0 / len(members)
            q = float(d["forecast"]["quantile"])
            out[d["id"]] = DemandSeries(
                mean=forecast.mean * share,
                q=forecast.quantile(q) * share,
                low=forecast.quantile(low_q) * share,
                high=forecast.quantile(high_q) * share,
                quantile=q,
            )
    return out


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


def _solver(plan: Plan, demand_ids: list[str]) -> Callable[[FloatArray], Sizing]:
    """``solve(rates)``: the plan's problem re-solved with its demands at ``rates`` (requests/s,
    in ``demand_ids`` order), warm-started from the plan (its replicas as ``previous``)."""
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
        return sizing_from_solution(solution)

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


def snapshot_compute(*, plan: Plan, start: datetime, hours: int) -> FinanceSnapshot:
    """The stored snapshot of ``plan`` over ``hours`` from ``start``, computed and stored if
    it is not there yet (see the module docstring). ``start`` is a UTC day start."""
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
    problem = parse_problem(plan.problem)
    demands = {d.id: d for d in problem.demands}
    raw = {d["id"]: d for d in plan.problem.get("demands", [])}
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
    solve = _solver(plan, demand_ids)
    in_force = _plan_sizing(plan)
    # The edges share solves: a vector sized once is not solved again. A day at the plan's own
    # rates is the plan (what the re-plan solved, within its longer time limit).
    plan_rates = np.array([demands[d].requests_per_s for d in demand_ids], dtype=np.float64)
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
        out = {n: np.zeros((len(load_keys), days)) for n in ("requests", "tokens", "used")}
        for i, (dm, _rg, sh) in enumerate(load_keys):
            demand = demands[dm]
            shape = problem.shape(sh)
            count = share[i] * mean_daily[dm]
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
            "tier": str(raw.get(dm, {}).get("tier", "")),
            "region": rg,
            "shape": sh,
            "quantile": series[dm].quantile,
        }
        for dm, rg, sh in load_keys
    ]

    # Region × GPU type: hourly GPUs at the planned quantile and the low edge, for commitments.
    reserved = selectors.reserved_prices()
    gpu_keys = sorted({(p["region"], p["accelerator"]) for p in pools})
    gpu_q = np.zeros((len(gpu_keys), days), dtype=np.int64)
    gpu_low = np.zeros((len(gpu_keys), days), dtype=np.int64)
    gpu_pools = []
    for g, (region, accelerator) in enumerate(gpu_keys):
        members = [
            i
            for i, p in enumerate(pools)
            if (p["region"], p["accelerator"]) == (region, accelerator)
        ]
        for i in members:
            gpu_q[g] += replicas["q"][i] * pools[i]["gpus_per_replica"]
            gpu_low[g] += replicas["low"][i] * pools[i]["gpus_per_replica"]
        scale = multiplier.get(region, 1.0)
        od = on_demand[accelerator] * scale
        rv = reserved.get(accelerator)
        if rv is None:
            notes.append(f"{accelerator}: no reserved price recorded; priced on demand only")
        gpu_pools.append(
            {
                "region": region,
                "accelerator": accelerator,
                "gpus": sum(pools[i]["replicas"] * pools[i]["gpus_per_replica"] for i in members),
                "on_demand_price": od,
                "reserved_price": (rv * scale) if rv is not None else od,
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
    )
    snapshot = FinanceSnapshot(
        plan=plan,
        start=start,
        hours=hours,
        forecast_key=key,
        pools=pools,
        loads=loads,
        gpu_pools=gpu_pools,
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
