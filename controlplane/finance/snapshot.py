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
   day. Its ratio to the rate the plan was sized for scales the plan.
3. Each region's shape scales by the load-weighted ratio of the demands routed to it (planned
   requests × replica-seconds per request), zone by zone, rounded up and never below the
   floors of its promises (``scale_replicas``). A pool the plan keeps with nothing routed to
   it stays as it is.
4. Tenants' use of each pool is their expected (mean) rate × replica-seconds per request ÷
   target utilisation; the showback splits the cost by it.

The period containing the moment of a request is not taken from this sizing but from the
active plan itself (``services``): the fleet running now is the plan.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db import IntegrityError, transaction

from controlplane.finance import selectors
from controlplane.finance.models import FinanceSnapshot
from controlplane.plans.conf import replan_settings
from controlplane.plans.demand import (
    SOURCE_TELEMETRY,
    forecast_anchor,
    history_window,
    rate_history,
)
from controlplane.plans.models import Plan
from planner.errors import PlannerInputError
from planner.forecast import fit_demand
from planner.forecast.finance import rolling_peak, scale_replicas
from planner.placement.problem import PROMISE_LEVEL, parse_problem

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
    series = _demand_series(plan, start=start, hours=hours + window, history=history, notes=notes)

    peaks: dict[int, FloatArray] = {}

    def peak(values: FloatArray) -> FloatArray:
        # A demand routed to several shapes, or flat (one array for every edge), is sized once.
        found = peaks.get(id(values))
        if found is None:
            if values.size and np.all(values == values[0]):
                found = np.full(hours, float(values[0]))
            else:
                found = rolling_peak(values, hours=hours, window=window, step=24)
            peaks[id(values)] = found
        return found

    # Loads: one per routing row (demand × region × shape).
    loads: list[dict[str, Any]] = []
    load_q: list[FloatArray] = []
    load_low: list[FloatArray] = []
    load_high: list[FloatArray] = []
    used: list[FloatArray] = []
    requests: list[FloatArray] = []
    tokens: list[FloatArray] = []
    promise_of: dict[tuple[str, str], int] = defaultdict(int)
    for row in plan.routing.all():
        demand = demands.get(row.demand)
        if demand is None or row.requests_per_s <= 0:
            continue
        shape = problem.shape(row.shape)
        cost_s = problem.request_cost_s(demand, shape)
        planned = demand.requests_per_s
        s = series[demand.id]
        ratio_q = peak(s.q) / planned if planned > 0 else np.zeros(hours)
        ratio_low = peak(s.low) / planned if planned > 0 else np.zeros(hours)
        ratio_high = peak(s.high) / planned if planned > 0 else np.zeros(hours)
        weight = row.requests_per_s * cost_s
        load_q.append(weight * ratio_q)
        load_low.append(weight * ratio_low)
        load_high.append(weight * ratio_high)
        # Requests/s of this demand actually sent here: the routed share of its expected rate.
        actual = (row.requests_per_s / demand.burst) * (
            s.mean[:hours] / planned if planned > 0 else np.zeros(hours)
        )
        requests.append(_daily(actual * 3600.0))
        tokens.append(_daily(actual * 3600.0 * (demand.prompt_tokens + demand.output_tokens)))
        used.append(_daily(actual * cost_s / shape.target_utilization))
        region_shape = (row.region, row.shape)
        promise_of[region_shape] = max(promise_of[region_shape], PROMISE_LEVEL[demand.promise])
        loads.append(
            {
                "demand": demand.id,
                "tenant": demand.tenant,
                "tier": str(raw.get(demand.id, {}).get("tier", "")),
                "region": row.region,
                "shape": row.shape,
                "quantile": s.quantile,
                "weight": weight,
            }
        )

    # Pools: the plan's zone × shape rows, each scaled by its region's shape ratio.
    allocations = list(plan.allocations.all())
    by_region_shape: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, allocation in enumerate(allocations):
        by_region_shape[(allocation.region, allocation.shape)].append(i)
    ratio_by_key: dict[tuple[str, str], tuple[FloatArray, FloatArray, FloatArray]] = {}
    for region_shape in by_region_shape:
        members = [
            i for i, load in enumerate(loads) if (load["region"], load["shape"]) == region_shape
        ]
        total = sum(loads[i]["weight"] for i in members)
        if total <= 0:
            ones = np.ones(hours)
            ratio_by_key[region_shape] = (ones, ones, ones)
            continue
        ratio_by_key[region_shape] = (
            sum((load_q[i] for i in members), np.zeros(hours)) / total,
            sum((load_low[i] for i in members), np.zeros(hours)) / total,
            sum((load_high[i] for i in members), np.zeros(hours)) / total,
        )
    n = len(allocations)
    replicas = {edge: np.zeros((n, hours), dtype=np.int64) for edge in ("q", "low", "high")}
    for region_shape, members in by_region_shape.items():
        zone_replicas = {allocations[i].zone: allocations[i].replicas for i in members}
        ratios = ratio_by_key[region_shape]
        for edge, ratio in zip(("q", "low", "high"), ratios, strict=True):
            scaled = scale_replicas(zone_replicas, ratio, promise_level=promise_of[region_shape])
            for i in members:
                replicas[edge][i] = scaled[allocations[i].zone]
    multiplier = {r.name: r.price_multiplier for r in problem.regions}
    on_demand = {a.name: a.price_per_gpu_hour for a in problem.accelerators}
    pools: list[dict[str, Any]] = [
        {
            "zone": row.zone,
            "region": row.region,
            "shape": row.shape,
            "accelerator": row.accelerator,
            "model": problem.shape(row.shape).model,
            "gpus_per_replica": row.gpus_per_replica,
            "replicas": row.replicas,
            "price_per_replica_hour": row.cost_per_hour / row.replicas if row.replicas else 0.0,
        }
        for row in allocations
    ]

    # Region × GPU type: hourly GPUs at the planned quantile and the low edge, for commitments.
    reserved = selectors.reserved_prices()
    gpu_keys = sorted({(p["region"], p["accelerator"]) for p in pools})
    gpu_q = np.zeros((len(gpu_keys), hours), dtype=np.int64)
    gpu_low = np.zeros((len(gpu_keys), hours), dtype=np.int64)
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
        rep_q=_daily(replicas["q"]),
        rep_low=_daily(replicas["low"]),
        rep_high=_daily(replicas["high"]),
        used=np.array(used).reshape(len(loads), hours // 24),
        requests=np.array(requests).reshape(len(loads), hours // 24),
        tokens=np.array(tokens).reshape(len(loads), hours // 24),
        gpu_q=gpu_q.astype(np.int32),
        gpu_low=gpu_low.astype(np.int32),
    )
    snapshot = FinanceSnapshot(
        plan=plan,
        start=start,
        hours=hours,
        forecast_key=key,
        pools=pools,
        loads=[{k: v for k, v in load.items() if k != "weight"} for load in loads],
        gpu_pools=gpu_pools,
        arrays=buffer.getvalue(),
        quantiles={
            "tiers": dict((band.get("quantiles") or {}).items()),
            "low": float((band.get("low") or {}).get("quantile", replan_settings().band_low)),
            "high": float((band.get("high") or {}).get("quantile", replan_settings().band_high)),
            "window_hours": window,
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
