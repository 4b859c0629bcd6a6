"""The forecast in OpenCost's allocation API: its parameters, its allocation fields, its idle.

Checked against OpenCost's own source (github.com/opencost/opencost):

- ``pkg/costmodel/aggregation.go``, ``ComputeAllocationHandler``: the query parameters
  (``window``, ``resolution``, ``step``, ``aggregate``, ``includeIdle``, ``accumulate``,
  ``accumulateBy``, ``idleByNode``, ``sharelb``, ``includeProportionalAssetResourceCosts``,
  ``includeAggregatedMetadata``, ``shareIdle``), their defaults (``step`` the window's length:
  one set; ``includeIdle``, ``shareIdle``, ``accumulate`` false) and the
  ``{"code", "status", "data"}`` envelope;
- ``core/pkg/opencost/window.go``, ``parseWindow``: the window syntax (``today``,
  ``yesterday``, ``week``, ``lastweek``, ``month``, ``lastmonth``, ``45m``/``24h``/``7d``/``2w``
  (the last N units ending with the current one), ``"7d offset 1d"``, a pair of unix seconds
  ``s,e`` or ``s-e``, a pair of RFC 3339 times ``start,end``);
- ``core/pkg/opencost/query.go``: ``accumulateBy`` is one of ``all``, ``hour``, ``day``,
  ``week``, ``month``, ``quarter``;
- ``core/pkg/opencost/allocation_json.go``, ``AllocationJSON``: the 49 fields every allocation
  carries (``ALLOCATION_FIELDS``; the three ``omitempty`` ones are left out) and their rounding
  to 5 decimals (``formatFloat64ForResponse``);
- ``core/pkg/opencost/allocation.go``: ``IdleSuffix = "__idle__"``, and ``GPUEfficiency`` =
  usage ÷ request.

What differs, because this is a forecast of GPUs and not a record of a cluster: a window must
start today (UTC) or later and end by the stored forecast's end, on whole UTC days (the sizing
is daily), so OpenCost's past windows (``yesterday``, ``7d``, ``lastmonth``…) are refused with
a 400 that points to ``/api/finance/history/``; ``step``, ``resolution`` and ``accumulateBy``
are whole days (``hour`` is refused); ``idleByNode`` and
``includeProportionalAssetResourceCosts`` have no nodes or assets to work on and accept
``false`` only; ``aggregate`` takes Headroom's groups (``region``, ``zone``, ``accelerator``,
``shape``, ``model``, ``tenant``, ``tier``). CPU, RAM, storage, network and load-balancer
fields are 0: Headroom prices GPUs. Spend on hosted APIs (hosted overflow) is out-of-cluster
cost, which OpenCost carries as an allocation's ``externalCost`` and counts in its
``totalCost`` (``Allocation.TotalCost`` in ``allocation.go``); it buys no GPU-hours. A hosted
provider has no zone, GPU type or shape: aggregated by those it is ``(hosted) <provider>``.
``docs/finance.md`` maps every field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from django.utils import timezone

from controlplane.finance import services
from controlplane.finance.services import (
    DEFAULT_HORIZON,
    GROUPS,
    IDLE,
    FinanceInputError,
    PeriodSpan,
)
from planner.forecast.finance import check_period, period_end, period_label, period_starts

IDLE_NAME = "__idle__"
DAY_S = 86400
PARAMETERS = (
    "window",
    "step",
    "resolution",
    "aggregate",
    "accumulate",
    "accumulateBy",
    "includeIdle",
    "shareIdle",
    "idleByNode",
    "sharelb",
    "includeProportionalAssetResourceCosts",
    "includeAggregatedMetadata",
    # Headroom's own, for calendar periods without a window (as the forecast endpoint).
    "period",
    "horizon",
)
ACCUMULATE_BY = ("all", "day", "week", "month", "quarter")

# AllocationJSON's fields in its order, less the three ``omitempty`` ones
# (rawAllocationOnly, proportionalAssetResourceCosts, sharedCostBreakdown).
ALLOCATION_FIELDS = (
    "name",
    "properties",
    "window",
    "start",
    "end",
    "minutes",
    "cpuCores",
    "cpuCoreRequestAverage",
    "cpuCoreUsageAverage",
    "cpuCoreHours",
    "cpuCost",
    "cpuCostAdjustment",
    "cpuCostIdle",
    "cpuEfficiency",
    "gpuCount",
    "gpuRequestAverage",
    "gpuUsageAverage",
    "gpuHours",
    "gpuCost",
    "gpuCostAdjustment",
    "gpuCostIdle",
    "gpuEfficiency",
    "networkTransferBytes",
    "networkReceiveBytes",
    "networkCost",
    "networkCrossZoneCost",
    "networkCrossRegionCost",
    "networkInternetCost",
    "networkCostAdjustment",
    "loadBalancerCost",
    "loadBalancerCostAdjustment",
    "pvBytes",
    "pvByteHours",
    "pvCost",
    "pvs",
    "pvCostAdjustment",
    "ramBytes",
    "ramByteRequestAverage",
    "ramByteUsageAverage",
    "ramByteHours",
    "ramCost",
    "ramCostAdjustment",
    "ramCostIdle",
    "ramEfficiency",
    "externalCost",
    "sharedCost",
    "totalCost",
    "totalEfficiency",
    "lbAllocations",
)
_DURATION = re.compile(r"^(\d+)(m|h|d|w)$")
_DURATION_OFFSET = re.compile(r"^(\d+)(m|h|d|w) offset (\d+)(m|h|d|w)$")
_TIMESTAMPS = re.compile(r"^(\d+)[,|-](\d+)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": DAY_S, "w": 7 * DAY_S}
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")
PAST_WINDOWS = ("yesterday", "week", "lastweek", "month", "lastmonth")


def _iso(ts: int) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bool(params: Mapping[str, str], name: str, default: bool) -> bool:
    """A boolean as Go's ``strconv.ParseBool`` reads it (what OpenCost's ``GetBool`` uses)."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise FinanceInputError(name, f"must be true or false, got {raw!r}")


def _days(name: str, raw: str) -> int:
    """A duration (``1d``, ``24h``, ``1440m``, ``86400s``, ``1w``) as a whole number of days."""
    match = re.fullmatch(r"(\d+)(s|m|h|d|w)", raw.strip())
    if match is None:
        raise FinanceInputError(name, f"must be a duration such as 1d, 24h or 1w, got {raw!r}")
    seconds = int(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds <= 0 or seconds % DAY_S:
        raise FinanceInputError(
            name, f"must be a whole number of days (the forecast is daily), got {raw!r}"
        )
    return seconds // DAY_S


def _parse_window(raw: str, now: datetime) -> tuple[int, int]:
    """OpenCost's window syntax (``window.go``'s ``parseWindow``, in UTC) as [start, end)."""
    text = raw.strip()
    moment = int(now.timestamp())
    today = moment // DAY_S * DAY_S
    if text == "today":
        return today, today + DAY_S
    if text in PAST_WINDOWS:
        return (today - DAY_S, today) if text == "yesterday" else (today - 7 * DAY_S, moment)
    match = _DURATION.fullmatch(text)
    if match is not None:
        count, unit = int(match.group(1)), _UNIT_S[match.group(2)]
        if match.group(2) == "w":
            # "The past N weeks" ends with today.
            end = today + DAY_S
            return (moment - count * unit) // DAY_S * DAY_S + DAY_S, end
        end = moment // unit * unit + unit
        return end - count * unit, end
    match = _DURATION_OFFSET.fullmatch(text)
    if match is not None:
        end = moment - int(match.group(3)) * _UNIT_S[match.group(4)]
        return end - int(match.group(1)) * _UNIT_S[match.group(2)], end
    match = _TIMESTAMPS.fullmatch(text)
    if match is not None:
        return int(match.group(1)), int(match.group(2))
    parts = text.split(",")
    if len(parts) == 2:
        try:
            since, until = (datetime.fromisoformat(p.strip()) for p in parts)
        except ValueError:
            pass
        else:
            if since.tzinfo is not None and until.tzinfo is not None:
                return int(since.timestamp()), int(until.timestamp())
    raise FinanceInputError(
        "window",
        f"illegal window {raw!r}: use today, a pair of RFC 3339 times (start,end) or of unix "
        "seconds, or one of OpenCost's durations (7d, 2w, …)",
    )


@dataclass(frozen=True)
class OpenCostQuery:
    """A checked query: the sets ([start, end) spans), the grouping and the idle rule."""

    sets: tuple[PeriodSpan, ...]
    aggregate: tuple[str, ...]
    include_idle: bool
    share_idle: bool


def opencost_query(params: Mapping[str, str], *, now: datetime | None = None) -> OpenCostQuery:
    """Check OpenCost's parameters (see the module docstring); ``FinanceInputError`` names the
    first one that is unknown, malformed or not supported."""
    moment = now or timezone.now()
    for name in params:
        if name not in PARAMETERS:
            raise FinanceInputError(
                name,
                "not a parameter of this endpoint; it takes " + ", ".join(PARAMETERS),
            )
        if not str(params[name]).strip():
            # OpenCost reads an empty value as absent; the schema (and so a client reading
            # it) says a given parameter has a value, so an empty one is refused by name.
            raise FinanceInputError(name, "is empty; leave it out for its default")
    raw_aggregate = params.get("aggregate", "region")
    try:
        aggregate = services.check_group_by(raw_aggregate.split(","))
    except FinanceInputError as exc:
        raise FinanceInputError("aggregate", exc.message) from exc
    if not aggregate:
        raise FinanceInputError("aggregate", f"name at least one of {', '.join(GROUPS)}")
    include_idle = _bool(params, "includeIdle", False)
    share_idle = _bool(params, "shareIdle", False)
    _bool(params, "sharelb", False)  # no load balancers: shared or not, they cost 0
    _bool(params, "includeAggregatedMetadata", False)  # the labels are always there
    for name in ("idleByNode", "includeProportionalAssetResourceCosts"):
        if _bool(params, name, False):
            raise FinanceInputError(
                name, "only false: Headroom has no nodes or assets, its idle is per pool"
            )
    if params.get("resolution"):
        if _days("resolution", params["resolution"]) != 1:
            raise FinanceInputError("resolution", "only 1d: the forecast is sized day by day")
    accumulate = _bool(params, "accumulate", False)
    accumulate_by = params.get("accumulateBy", "")
    if accumulate_by and accumulate_by not in ACCUMULATE_BY:
        raise FinanceInputError(
            "accumulateBy",
            f"must be one of {', '.join(ACCUMULATE_BY)} (hour: the forecast is daily), "
            f"got {accumulate_by!r}",
        )
    if accumulate and not accumulate_by:
        accumulate_by = "all"

    snapshot = services.finance_snapshot(now=moment)
    first = int(snapshot.start.timestamp())
    last = first + snapshot.hours * 3600
    if "window" in params:
        for name in ("period", "horizon"):
            if name in params:
                raise FinanceInputError(name, "give either window (and step) or period")
        start, end = _window(params["window"], moment, last)
        step = _days("step", params["step"]) * DAY_S if params.get("step") else end - start
        if (end - start) % step:
            raise FinanceInputError(
                "step", f"must divide the window ({(end - start) // DAY_S} days) into whole sets"
            )
        spans = [PeriodSpan(_iso(s), s, s + step) for s in range(start, end, step)]
    else:
        if params.get("step"):
            raise FinanceInputError("step", "needs a window; with period, each period is a set")
        kind = services.check_period_name(params.get("period", "month"))
        horizon = _horizon(params.get("horizon"), kind)
        current = int(period_starts(np.array([moment.timestamp()]), kind)[0])
        spans = []
        start = current
        while len(spans) < horizon:
            stop = period_end(start, kind)
            if stop > last:
                raise FinanceInputError(
                    "horizon",
                    f"at most {len(spans)} {kind}s ahead are forecast, asked for {horizon}",
                )
            spans.append(PeriodSpan(period_label(start, kind), start, stop))
            start = stop
        if start < first:
            raise FinanceInputError("period", "starts before the stored forecast")
    sets = _accumulated(spans, accumulate_by)
    return OpenCostQuery(
        sets=tuple(sets),
        aggregate=aggregate,
        include_idle=include_idle,
        share_idle=share_idle,
    )


def _horizon(raw: str | None, kind: str) -> int:
    if raw is None or raw == "":
        return DEFAULT_HORIZON[kind]
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise FinanceInputError("horizon", f"must be a whole number of periods ≥ 1, got {raw!r}")
    return value


def _window(raw: str, now: datetime, last: int) -> tuple[int, int]:
    start, end = _parse_window(raw, now)
    today = int(now.timestamp()) // DAY_S * DAY_S
    if start % DAY_S or end % DAY_S:
        raise FinanceInputError(
            "window", f"{raw!r} must start and end at 00:00 UTC: the forecast is priced by days"
        )
    if end <= start:
        raise FinanceInputError("window", f"{raw!r} ends before it starts")
    if start < today:
        raise FinanceInputError(
            "window",
            f"{raw!r} starts before today ({_iso(today)[:10]}): this endpoint forecasts from "
            "today on; what was held is at /api/finance/history/",
        )
    if end > last:
        raise FinanceInputError(
            "window", f"{raw!r} ends after the stored forecast does ({_iso(last)})"
        )
    return start, end


def _accumulated(spans: list[PeriodSpan], by: str) -> list[PeriodSpan]:
    """``spans`` summed into one (``all``) or by calendar day, ISO week, month or quarter."""
    if not by or not spans:
        return spans
    if by == "all":
        return [PeriodSpan(_iso(spans[0].start), spans[0].start, spans[-1].end)]
    if any(span.end - span.start != DAY_S for span in spans):
        raise FinanceInputError("accumulateBy", f"{by} needs daily sets (step=1d)")
    kind = check_period("accumulateBy", by)
    out: list[PeriodSpan] = []
    for span in spans:
        label = period_label(span.start, kind)
        if out and out[-1].label == label:
            out[-1] = PeriodSpan(label, out[-1].start, span.end)
        else:
            out.append(PeriodSpan(label, span.start, span.end))
    return out


def _round(value: float) -> float:
    """OpenCost's ``formatFloat64ForResponse``: 5 decimals."""
    return round(value * 100000) / 100000.0 + 0.0


def opencost_allocation(
    params: Mapping[str, str], *, now: datetime | None = None, tenant: str | None = None
) -> dict[str, Any]:
    """The forecast as OpenCost's ``/allocation`` response for ``params`` (its query string).

    Each set maps an allocation's name (the aggregate's values joined by "/") to its 49
    fields. An allocation's ``gpuCost`` is what its load uses at the pools' prices (the
    showback's usage cost) and ``gpuHours`` the GPU-hours that cost buys; the idle headroom
    (floors, burst, spares, rounding) is ``__idle__``, its own allocation, with
    ``includeIdle=true``; ``shareIdle=true`` shares it over the allocations by their use
    instead (``gpuCostIdle`` is the part shared in), leaving in ``__idle__`` only what sits in
    pools no load uses. ``tenant``: that tenant's allocations only (aggregated by tenant too),
    no idle."""
    moment = now or timezone.now()
    query = opencost_query(params, now=moment)
    groups = query.aggregate
    if tenant is not None and "tenant" not in groups:
        groups = (*groups, "tenant")
    snapshot = services.finance_snapshot(now=moment)
    first_day, end = query.sets[0].start, query.sets[-1].end
    days = (end - first_day) // DAY_S
    first = datetime.fromtimestamp(first_day, tz=UTC)
    cells = services.day_cells(snapshot, "day", first, days, plan_until=moment)
    split, cost = services.cells_split(cells)
    periods = len(cells.spans)
    pools = snapshot.pools
    held = cells.rep * cells.gpus[:, None]  # GPU-hours held, pool × day
    direct = split.direct.reshape(cells.pair_pool.size, periods)
    shared = split.shared.reshape(cells.pair_pool.size, periods)
    idle = split.idle.reshape(len(pools), periods)
    unallocated = split.unallocated.reshape(len(pools), periods)
    set_of = np.searchsorted([s.end for s in query.sets], [s.start for s in cells.spans], "right")

    sums: dict[tuple[int, tuple[str, ...]], dict[str, float]] = {}
    labels: dict[tuple[str, ...], dict[str, str]] = {}
    names = ("cost", "idle", "gpu_hours", "used_gpu_hours", "external")

    def add(k: int, key: tuple[str, ...], **values: float) -> None:
        row = sums.setdefault((int(set_of[k]), key), dict.fromkeys(names, 0.0))
        for name, value in values.items():
            row[name] += value

    for n, (j, i) in enumerate(
        zip(cells.pair_load.tolist(), cells.pair_pool.tolist(), strict=True)
    ):
        load = snapshot.loads[j]
        attrs = {
            **{g: str(pools[i][g]) for g in GROUPS[:5]},
            "tenant": load["tenant"],
            "tier": load["tier"],
        }
        if tenant is not None and load["tenant"] != tenant:
            continue
        key = tuple(attrs[g] for g in groups)
        labels[key] = {g: attrs[g] for g in groups}
        for k in range(periods):
            total = float(cost[i, k])
            if total <= 0:
                continue
            paid = float(direct[n, k]) + (float(shared[n, k]) if query.share_idle else 0.0)
            add(
                k,
                key,
                cost=paid,
                idle=float(shared[n, k]) if query.share_idle else 0.0,
                gpu_hours=paid / total * float(held[i, k]),
                used_gpu_hours=float(cells.used[n, k]) * float(cells.gpus[i]),
            )
    # Hosted spend is out-of-cluster cost attributed to the tenant's traffic: OpenCost's
    # ``externalCost`` (counted in its ``totalCost``), on no GPU.
    for h, hosted in enumerate(snapshot.hosted):
        if tenant is not None and hosted["tenant"] != tenant:
            continue
        label = services.hosted_label(str(hosted["provider"]))
        attrs = {
            "region": str(hosted["region"]),
            "zone": label,
            "accelerator": label,
            "shape": label,
            "model": str(hosted["model"]),
            "tenant": str(hosted["tenant"]),
            "tier": str(hosted["tier"]),
        }
        key = tuple(attrs[g] for g in groups)
        for k in range(periods):
            spend = float(cells.hosted[h, k])
            if spend > 0:
                labels[key] = {g: attrs[g] for g in groups}
                add(k, key, external=spend)
    if query.include_idle and tenant is None:
        left = unallocated if query.share_idle else idle
        for i in range(len(pools)):
            for k in range(periods):
                total, amount = float(cost[i, k]), float(left[i, k])
                if total > 0 and amount > 0:
                    add(k, (IDLE_NAME,), cost=amount, gpu_hours=amount / total * float(held[i, k]))
        labels[(IDLE_NAME,)] = {}

    data: list[dict[str, Any]] = [{} for _ in query.sets]
    for (s, key), values in sorted(sums.items()):
        span = query.sets[s]
        name = (
            IDLE_NAME
            if key == (IDLE_NAME,)
            else "/".join(IDLE_NAME if part == IDLE else part for part in key)
        )
        data[s][name] = _allocation(name, labels[key], span, values)
    return {"code": 200, "status": "success", "data": data}


def _allocation(
    name: str, labels: dict[str, str], span: PeriodSpan, values: dict[str, float]
) -> dict[str, Any]:
    hours = (span.end - span.start) / 3600
    gpus = values["gpu_hours"] / hours if hours else 0.0
    used = values["used_gpu_hours"] / hours if hours else 0.0
    efficiency = used / gpus if gpus > 0 and used > 0 else 0.0
    start, end = _iso(span.start), _iso(span.end)
    filled = {
        "minutes": hours * 60,
        "gpuCount": gpus,
        "gpuRequestAverage": gpus,
        "gpuUsageAverage": used,
        "gpuHours": values["gpu_hours"],
        "gpuCost": values["cost"],
        "gpuCostIdle": values["idle"],
        "gpuEfficiency": efficiency,
        "externalCost": values["external"],
        "totalCost": values["cost"] + values["external"],
        "totalEfficiency": efficiency,
    }
    out: dict[str, Any] = {}
    for field in ALLOCATION_FIELDS:
        if field == "name":
            out[field] = name
        elif field == "properties":
            out[field] = {"labels": labels}
        elif field == "window":
            out[field] = {"start": start, "end": end}
        elif field == "start":
            out[field] = start
        elif field == "end":
            out[field] = end
        elif field in ("pvs", "lbAllocations"):
            out[field] = None
        else:
            value = filled.get(field, 0.0)
            out[field] = _round(value) if math.isfinite(value) else None
    return out
