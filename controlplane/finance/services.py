"""Finance reports: forecast, commitments, the price of each promise, showback and history.

Each report is a keyword-only function returning typed rows, for the API, the
``finance_report`` command and the operators' pages alike. The forecast-based reports read the
snapshot of the active plan (``snapshot.py``: computed once per plan version and forecast, then
stored); each report's rows for one set of parameters are stored too (``FinanceReport``), so a
repeated request reads one row.

- Every period is the sum of its days (``plan_days_end``): the days up to the one containing
  ``now`` are the active plan itself, every hour of it (the plan's $/h × 24 a day); later days
  follow the snapshot's sizing (the placement re-solved at the day's forecast). So a period
  has one price whatever the grain it is asked by.
- Tenant and tier rows split each pool's cost by the replica-hours each tenant's load uses
  there, the idle headroom shared in proportion (``planner.forecast.finance.showback_split``);
  a pool that no load uses is the ``(idle headroom)`` tenant's.
- Money is rounded to cents, hours to hundredths (``MONEY_DIGITS``, ``HOURS_DIGITS``).
- ``tenant=<name>`` (a tenant key's request) cuts a report down to that tenant: its own rows
  only (grouped by tenant at least), no idle-headroom, tier or fleet lines, and no note that
  names another tenant (``for_tenant``). The commitments are the fleet's and have no cut.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from controlplane.core.tasks import task_send_on_commit
from controlplane.finance import selectors
from controlplane.finance.conf import FinanceSettings, finance_settings
from controlplane.finance.memo import ByteMemo
from controlplane.finance.models import FinanceReport, FinanceSnapshot, PromisePricing
from controlplane.finance.snapshot import horizon_for, snapshot_arrays, snapshot_compute
from controlplane.plans.conf import replan_settings
from controlplane.plans.models import Plan
from controlplane.plans.selectors import (
    Problem,
    ProblemInvalid,
    Solution,
    SolutionInvalid,
    plan_problem,
    plan_solution,
    read_problem,
    read_solution,
)
from controlplane.plans.signals import plan_activated
from planner import placement
from planner.forecast.finance import (
    HOURS_PER_MONTH,
    PERIODS,
    RUNG_PROMISE,
    Period,
    check_period,
    mix_hours,
    optimal_mix,
    period_end,
    period_label,
    period_starts,
    promise_ladder,
    promise_weights,
    showback_split,
)

GROUPS = ("region", "zone", "accelerator", "shape", "model", "tenant", "tier")
IDLE = "(idle headroom)"


def hosted_label(provider: str) -> str:
    """What a hosted provider's spend is grouped under where a report groups by zone, GPU type
    or shape (it has none of them): ``(hosted) <provider>``."""
    return f"(hosted) {provider}"


MONEY_DIGITS = 2
HOURS_DIGITS = 2
DEFAULT_HORIZON: dict[str, int] = {"day": 31, "week": 13, "month": 12, "quarter": 4}
HOUR_S = 3600


class FinanceInputError(ValueError):
    """A report parameter is out of range; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# Reports read from their stored rows, shared by the requests of this process (callers only
# read them), bounded by the bytes of their JSON (``HEADROOM_FINANCE_REPORT_CACHE_BYTES``).
STORED_REPORTS: ByteMemo[Report] = ByteMemo(lambda: finance_settings().report_cache_bytes)


class NoActivePlan(LookupError):
    """No plan is active: there is nothing to forecast from."""


def money(value: float) -> float:
    return round(float(value), MONEY_DIGITS) + 0.0


def hours(value: float) -> float:
    return round(float(value), HOURS_DIGITS) + 0.0


def _iso(ts: int) -> str:
    return datetime.fromtimestamp(int(ts), tz=UTC).isoformat().replace("+00:00", "Z")


def check_group_by(group_by: Iterable[str]) -> tuple[str, ...]:
    """The grouping in ``GROUPS`` order, duplicates removed; ``FinanceInputError`` for an unknown
    name."""
    names = [g.strip() for g in group_by if g.strip()]
    unknown = sorted(set(names) - set(GROUPS))
    if unknown:
        raise FinanceInputError(
            "group_by", f"unknown {', '.join(unknown)}; choose from {', '.join(GROUPS)}"
        )
    return tuple(g for g in GROUPS if g in names)


def _check_period(period: str) -> Period:
    if period not in PERIODS:
        raise FinanceInputError("period", f"must be one of {', '.join(PERIODS)}, got {period!r}")
    return check_period("period", period)


def check_period_name(period: str) -> Period:
    """``period`` if it is a period name; else ``FinanceInputError`` naming ``period``."""
    return _check_period(period)


def _check_horizon(horizon: int | None, period: Period) -> int:
    value = DEFAULT_HORIZON[period] if horizon is None else horizon
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FinanceInputError("horizon", f"must be a whole number of periods ≥ 1, got {value!r}")
    return value


# -- rows -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PeriodSpan:
    label: str
    start: int
    end: int

    def columns(self) -> dict[str, Any]:
        return {
            "period": self.label,
            "period_start": _iso(self.start),
            "period_end": _iso(self.end),
        }


@dataclass(frozen=True)
class ForecastRow:
    """Replica-hours, GPU-hours and cost of one group in one period, with the band's edges.

    ``quantile`` is the forecast quantile the group was sized at (None when the group mixes
    tiers of different quantiles); ``sized_by`` is ``plan`` for a period of the active plan's
    days only (hour for hour), ``forecast`` for one of forecast days only and
    ``plan+forecast`` for the period holding both.
    """

    period: PeriodSpan
    group: tuple[tuple[str, str], ...]
    quantile: float | None
    band_low_quantile: float
    band_high_quantile: float
    replica_hours: float
    replica_hours_low: float
    replica_hours_high: float
    gpu_hours: float
    gpu_hours_low: float
    gpu_hours_high: float
    cost: float
    cost_low: float
    cost_high: float
    hosted_cost: float
    sized_by: str

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.period.columns(),
            **dict(self.group),
            "quantile": self.quantile,
            "band_low_quantile": self.band_low_quantile,
            "band_high_quantile": self.band_high_quantile,
            "replica_hours": hours(self.replica_hours),
            "replica_hours_low": hours(self.replica_hours_low),
            "replica_hours_high": hours(self.replica_hours_high),
            "gpu_hours": hours(self.gpu_hours),
            "gpu_hours_low": hours(self.gpu_hours_low),
            "gpu_hours_high": hours(self.gpu_hours_high),
            "cost": money(self.cost),
            "cost_low": money(self.cost_low),
            "cost_high": money(self.cost_high),
            "hosted_cost": money(self.hosted_cost),
            "sized_by": self.sized_by,
        }


# The figures a forecast row sums over its group: each with the band's low and high edges.
FORECAST_SUMS = (
    "replica_hours",
    "replica_hours_low",
    "replica_hours_high",
    "gpu_hours",
    "gpu_hours_low",
    "gpu_hours_high",
    "cost",
    "cost_low",
    "cost_high",
    "hosted_cost",
)
FORECAST_COLUMNS = (
    "period",
    "period_start",
    "period_end",
    "quantile",
    "band_low_quantile",
    "band_high_quantile",
    *FORECAST_SUMS,
    "sized_by",
)


def forecast_columns(group_by: Sequence[str]) -> tuple[str, ...]:
    return (*FORECAST_COLUMNS[:3], *group_by, *FORECAST_COLUMNS[3:])


@dataclass(frozen=True)
class Report:
    """One report's rows with what they were computed from."""

    plan_version: int
    snapshot: int | None
    period: str
    horizon: int
    group_by: tuple[str, ...]
    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    # True for a stored report as ``STORED_REPORTS`` holds it: the one object every request
    # for it gets in this process, never changed, so its body can be rendered once.
    stored: bool = field(default=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "plan_version": self.plan_version,
            "snapshot": self.snapshot,
            "period": self.period,
            "horizon": self.horizon,
            "group_by": list(self.group_by),
            "columns": list(self.columns),
            "rows": self.rows,
            "notes": self.notes,
        }


def for_tenant(
    report: Report, tenant: str | None, *, keep: Callable[[dict[str, Any]], bool]
) -> Report:
    """``report`` cut down to one tenant: the rows ``keep`` accepts, the notes that name no
    other tenant. ``tenant`` None: the report as it is."""
    if tenant is None:
        return report
    others = selectors.tenant_names_except(name=tenant)
    return replace(
        report,
        rows=[row for row in report.rows if keep(row)],
        notes=[note for note in report.notes if not any(name in note for name in others)],
        stored=False,
    )


def _tenant_groups(groups: tuple[str, ...], tenant: str | None) -> tuple[str, ...]:
    """A tenant's report is grouped by tenant (at least): its rows are its own."""
    if tenant is None or "tenant" in groups:
        return groups
    return (*groups, "tenant")


# -- the active plan's snapshot and its periods ----------------------------------------------


def finance_snapshot(*, now: datetime | None = None) -> FinanceSnapshot:
    """The active plan's snapshot for the horizon of ``now`` (computed and stored the first
    time). ``NoActivePlan`` when no plan is active."""
    moment = now or timezone.now()
    plan = selectors.plan_active_with_rows()
    if plan is None:
        raise NoActivePlan("No plan is active yet: run a re-plan.")
    horizon = horizon_for(moment)
    return snapshot_compute(
        plan=plan, start=horizon.start, hours=horizon.hours, past_end=horizon.past_end
    )


def _current(moment: datetime, kind: Period) -> str:
    """What a stored report depends on besides its parameters: the current period and the day
    the plan's days end with (``plan_days_end``)."""
    stamp = np.array([moment.timestamp()])
    return "@".join(
        period_label(int(period_starts(stamp, grain)[0]), grain) for grain in (kind, "day")
    )


# A stored report's JSON is rendered once per process (``core.renderers``) up to this size;
# the renderer's memo keeps 32 bodies and their reports, so a larger one renders each time.
RENDER_ONCE_MAX_BYTES = 256 * 1024
# A read marks a stored report read at most this often (seconds): the eviction's order, with
# a write per report per interval rather than per request.
READ_MARK_S = 600


def _parsed(stored: FinanceReport) -> Report:
    rows = stored.rows
    return Report(
        **{**rows, "group_by": tuple(rows["group_by"]), "columns": tuple(rows["columns"])}
    )


def _kept(pk: int, created: datetime, weight: int, compute: Callable[[], Report]) -> Report:
    """``compute()``'s report, kept in this process's memo when it fits, and marked ``stored``
    (one shared object whose body is rendered once) when it is small enough for that."""
    report, _ = STORED_REPORTS.get(
        (pk, created.isoformat()),
        weight,
        lambda: replace(compute(), stored=weight <= RENDER_ONCE_MAX_BYTES),
    )
    return report


def _mark_read(stored: FinanceReport, moment: datetime) -> None:
    cutoff = moment - timedelta(seconds=READ_MARK_S)
    if stored.read_at is None or stored.read_at < cutoff:
        FinanceReport.objects.filter(pk=stored.pk).filter(
            Q(read_at__isnull=True) | Q(read_at__lt=cutoff)
        ).update(read_at=moment)


def _evict(limits: FinanceSettings) -> None:
    """Delete the least recently read stored reports beyond the caps (count and bytes)."""
    order = Coalesce("read_at", "created_at")
    rows = FinanceReport.objects.order_by(order.desc(), "-pk").values_list("pk", "size_bytes")
    total, drop = 0, []
    for n, (pk, size) in enumerate(rows):
        total += size
        if n >= limits.max_reports or total > limits.report_store_bytes:
            drop.append(pk)
    if drop:
        FinanceReport.objects.filter(pk__in=drop).delete()


def _cached(
    snapshot: FinanceSnapshot, endpoint: str, params: dict[str, Any], build: Callable[[], Report]
) -> Report:
    """The report for ``params`` (a canonical key: sorted JSON): read from its stored row, or
    built and stored within the caps (``conf``), each process keeping the parsed ones it read
    last within a byte budget (``STORED_REPORTS``)."""
    key = json.dumps(params, sort_keys=True, separators=(",", ":"))
    moment = timezone.now()
    found = selectors.report_find(snapshot=snapshot, endpoint=endpoint, params=key)
    if found is not None:
        stored = found
        _mark_read(stored, moment)
        # A stored report never changes: its rows are read and parsed once per process.
        return _kept(stored.pk, stored.created_at, stored.size_bytes, lambda: _parsed(stored))
    report = build()
    body = report.as_dict()
    size = len(json.dumps(body, separators=(",", ":")).encode())
    limits = finance_settings()
    if size > limits.report_store_bytes // 4:
        return report  # too large to keep: computed for its request
    try:
        with transaction.atomic():
            stored = FinanceReport.objects.create(
                snapshot=snapshot,
                endpoint=endpoint,
                params=key,
                rows=body,
                size_bytes=size,
                read_at=moment,
            )
            _evict(limits)
    except IntegrityError:
        return report  # stored by a concurrent request with the same parameters: the same rows
    return _kept(stored.pk, stored.created_at, size, lambda: report)


def _periods(
    snapshot: FinanceSnapshot, period: Period, now: datetime, horizon: int
) -> tuple[list[PeriodSpan], npt.NDArray[np.float64]]:
    """The ``horizon`` whole periods from the one containing ``now``, and the day × period
    matrix that sums the snapshot's days into them."""
    first = int(snapshot.start.timestamp())
    days = snapshot.hours // 24
    day_starts = first + 86400 * np.arange(days, dtype=np.int64)
    starts = period_starts(day_starts, period)
    current = int(period_starts(np.array([now.timestamp()]), period)[0])
    end = first + snapshot.hours * HOUR_S
    spans: list[PeriodSpan] = []
    for start in sorted({int(s) for s in starts}):
        stop = period_end(start, period)
        if start < current or start < first or stop > end:
            continue
        spans.append(PeriodSpan(period_label(start, period), start, stop))
    if len(spans) < horizon:
        raise FinanceInputError(
            "horizon", f"at most {len(spans)} {period}s ahead are forecast, asked for {horizon}"
        )
    spans = spans[:horizon]
    matrix = np.zeros((days, len(spans)), dtype=np.float64)
    for k, span in enumerate(spans):
        matrix[(day_starts >= span.start) & (day_starts < span.end), k] = 1.0
    return spans, matrix


@dataclass(frozen=True)
class _Cells:
    """Pool × period values of a snapshot over the requested periods."""

    spans: list[PeriodSpan]
    sized_by: list[str]
    rep: npt.NDArray[np.float64]
    rep_low: npt.NDArray[np.float64]
    rep_high: npt.NDArray[np.float64]
    price: npt.NDArray[np.float64]
    gpus: npt.NDArray[np.float64]
    # Loads split over the zones of their region's shape: (load, pool) pairs × period.
    pair_load: npt.NDArray[np.int64]
    pair_pool: npt.NDArray[np.int64]
    used: npt.NDArray[np.float64]
    requests: npt.NDArray[np.float64]
    tokens: npt.NDArray[np.float64]
    # Hosted rows (the snapshot's ``hosted``: demand × provider) × period: the spend at the
    # sizing quantile and the band's edges, and the expected requests and tokens sent.
    hosted: npt.NDArray[np.float64]
    hosted_low: npt.NDArray[np.float64]
    hosted_high: npt.NDArray[np.float64]
    hosted_requests: npt.NDArray[np.float64]
    hosted_tokens: npt.NDArray[np.float64]


def plan_days_end(snapshot: FinanceSnapshot, moment: datetime) -> int:
    """Epoch seconds where the plan's days end and the forecast's begin: the end of the UTC
    day containing ``moment`` (never before the snapshot's start). Every grain cuts there, so
    a period costs the sum of its days whatever it is asked by."""
    first = int(snapshot.start.timestamp())
    day_end = (int(moment.timestamp()) // 86400 + 1) * 86400
    return max(first, day_end)


def _sized_by(span: PeriodSpan, plan_end: int) -> str:
    if span.end <= plan_end:
        return "plan"
    if span.start >= plan_end:
        return "forecast"
    return "plan+forecast"


def _cells(
    snapshot: FinanceSnapshot,
    period: Period,
    now: datetime,
    horizon: int,
    *,
    plan_until: datetime | None = None,
) -> _Cells:
    """Pool × period values from the period containing ``now``. The days up to the one
    containing ``plan_until`` (default ``now``) are the snapshot's plan, hour for hour; later
    days its forecast sizing (``plan_days_end``)."""
    spans, matrix = _periods(snapshot, period, now, horizon)
    arrays = snapshot_arrays(snapshot)
    pools = snapshot.pools
    plan_end = plan_days_end(snapshot, now if plan_until is None else plan_until)
    plan_days = min((plan_end - int(snapshot.start.timestamp())) // 86400, snapshot.hours // 24)
    planned = np.array([p["replicas"] for p in pools], dtype=np.float64) * 24.0
    daily: dict[str, npt.NDArray[np.float64]] = {}
    for name in ("rep_q", "rep_low", "rep_high"):
        values = np.array(arrays[name], dtype=np.float64)
        # The days the plan runs: the plan, whatever the band says.
        values[:, :plan_days] = planned[:, None]
        daily[name] = values
    for name in ("used", "requests", "tokens"):
        values = np.array(arrays[name], dtype=np.float64)
        values[:, :plan_days] = arrays[f"{name}_plan"][:, :plan_days]
        daily[name] = values
    rep, rep_low, rep_high = (daily[n] @ matrix for n in ("rep_q", "rep_low", "rep_high"))
    zones_of: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, p in enumerate(pools):
        zones_of[(p["region"], p["shape"])].append(i)
    pair_load, pair_pool = [], []
    for j, load in enumerate(snapshot.loads):
        for i in zones_of.get((load["region"], load["shape"]), []):
            pair_load.append(j)
            pair_pool.append(i)
    loads = np.array(pair_load, dtype=np.int64)
    where = np.array(pair_pool, dtype=np.int64)
    # Each zone takes its share of the region's shape's replica-hours in that period.
    region_rep: dict[tuple[str, str], npt.NDArray[np.float64]] = {
        key: rep[members].sum(axis=0) for key, members in zones_of.items()
    }
    zone_share = np.zeros((where.size, len(spans)))
    for n, (j, i) in enumerate(zip(loads.tolist(), where.tolist(), strict=True)):
        load = snapshot.loads[j]
        total = region_rep[(load["region"], load["shape"])]
        zone_share[n] = np.divide(rep[i], total, out=np.zeros(len(spans)), where=total > 0)
    per_load = {n: daily[n] @ matrix for n in ("used", "requests", "tokens")}
    hosted: dict[str, npt.NDArray[np.float64]] = {}
    for name, plan_name in (
        ("hosted_q", "hosted_plan"),
        ("hosted_low", "hosted_plan"),
        ("hosted_high", "hosted_plan"),
        ("hosted_requests", "hosted_requests_plan"),
        ("hosted_tokens", "hosted_tokens_plan"),
    ):
        if name not in arrays:  # nothing hosted (or a snapshot stored before hosted rows)
            hosted[name] = np.zeros((0, len(spans)))
            continue
        values = np.array(arrays[name], dtype=np.float64)
        values[:, :plan_days] = arrays[plan_name][:, :plan_days]
        hosted[name] = values @ matrix
    return _Cells(
        spans=spans,
        sized_by=[_sized_by(span, plan_end) for span in spans],
        rep=rep,
        rep_low=rep_low,
        rep_high=rep_high,
        price=np.array([p["price_per_replica_hour"] for p in pools], dtype=np.float64),
        gpus=np.array([p["gpus_per_replica"] for p in pools], dtype=np.float64),
        pair_load=loads,
        pair_pool=where,
        used=per_load["used"][loads] * zone_share if loads.size else np.zeros((0, len(spans))),
        requests=(
            per_load["requests"][loads] * zone_share if loads.size else np.zeros((0, len(spans)))
        ),
        tokens=per_load["tokens"][loads] * zone_share if loads.size else np.zeros((0, len(spans))),
        hosted=hosted["hosted_q"],
        hosted_low=hosted["hosted_low"],
        hosted_high=hosted["hosted_high"],
        hosted_requests=hosted["hosted_requests"],
        hosted_tokens=hosted["hosted_tokens"],
    )


def day_cells(
    snapshot: FinanceSnapshot, period: Period, first: datetime, count: int, *, plan_until: datetime
) -> _Cells:
    """Pool × period values of ``count`` periods from the one containing ``first``, the days up
    to the one containing ``plan_until`` the plan's (for the OpenCost endpoint's windows)."""
    return _cells(snapshot, period, first, count, plan_until=plan_until)


def cells_split(cells: _Cells) -> tuple[Any, npt.NDArray[np.float64]]:
    """The showback split of every pool × period cell and the cells' cost."""
    return _split(cells)


@dataclass
class _Atoms:
    """Rows before grouping: attributes (strings) and values (floats), one per atom."""

    attributes: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    period: list[int] = field(default_factory=list)
    quantile: list[float] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


def _split(cells: _Cells) -> tuple[Any, npt.NDArray[np.float64]]:
    """Showback split of every pool × period cell over its (load, pool) pairs."""
    periods = len(cells.spans)
    cost = cells.rep * cells.price[:, None]
    cell_of_pair = (cells.pair_pool[:, None] * periods + np.arange(periods)[None, :]).ravel()
    split = showback_split(cost.ravel(), cells.rep.ravel(), cells.used.ravel(), cell_of_pair)
    return split, cost


def _pool_quantiles(snapshot: FinanceSnapshot) -> list[float]:
    by_key: dict[tuple[str, str], set[float]] = defaultdict(set)
    for load in snapshot.loads:
        by_key[(load["region"], load["shape"])].add(float(load["quantile"]))
    out = []
    for p in snapshot.pools:
        qs = by_key.get((p["region"], p["shape"]), set())
        out.append(next(iter(qs)) if len(qs) == 1 else float("nan"))
    return out


def _forecast_atoms(snapshot: FinanceSnapshot, cells: _Cells, by_tenant: bool) -> _Atoms:
    atoms = _Atoms()
    pools = snapshot.pools
    periods = len(cells.spans)
    cost = cells.rep * cells.price[:, None]
    values = {
        "replica_hours": cells.rep,
        "replica_hours_low": cells.rep_low,
        "replica_hours_high": cells.rep_high,
        "cost": cost,
        "cost_low": cells.rep_low * cells.price[:, None],
        "cost_high": cells.rep_high * cells.price[:, None],
        "hosted_cost": np.zeros_like(cost),
    }

    def add(pool: int, k: int, share: float, tenant: str, tier: str, q: float) -> None:
        p = pools[pool]
        for name in ("region", "zone", "accelerator", "shape", "model"):
            atoms.attributes[name].append(str(p[name]))
        atoms.attributes["tenant"].append(tenant)
        atoms.attributes["tier"].append(tier)
        atoms.period.append(k)
        atoms.quantile.append(q)
        for name, matrix in values.items():
            atoms.values[name].append(share * float(matrix[pool, k]))
        for name in ("", "_low", "_high"):
            atoms.values[f"gpu_hours{name}"].append(
                share * float(values[f"replica_hours{name}"][pool, k]) * float(cells.gpus[pool])
            )

    def add_hosted(row: int, k: int) -> None:
        key = snapshot.hosted[row]
        label = hosted_label(str(key["provider"]))
        attrs = {
            "region": str(key["region"]),
            "zone": label,
            "accelerator": label,
            "shape": label,
            "model": str(key["model"]),
            "tenant": str(key["tenant"]) if by_tenant else "",
            "tier": str(key["tier"]) if by_tenant else "",
        }
        for name, text in attrs.items():
            atoms.attributes[name].append(text)
        atoms.period.append(k)
        atoms.quantile.append(float(key["quantile"]))
        spend = {
            "cost": float(cells.hosted[row, k]),
            "cost_low": float(cells.hosted_low[row, k]),
            "cost_high": float(cells.hosted_high[row, k]),
            "hosted_cost": float(cells.hosted[row, k]),
        }
        for name in values:
            atoms.values[name].append(spend.get(name, 0.0))
        for name in ("", "_low", "_high"):
            atoms.values[f"gpu_hours{name}"].append(0.0)

    # Hosted spend is its own atoms: on no pool, paid by the tenant whose traffic it carries.
    for row in range(len(snapshot.hosted)):
        for k in range(periods):
            if cells.hosted[row, k] or cells.hosted_low[row, k] or cells.hosted_high[row, k]:
                add_hosted(row, k)
    pool_q = _pool_quantiles(snapshot)
    if not by_tenant:
        for i in range(len(pools)):
            for k in range(periods):
                add(i, k, 1.0, "", "", pool_q[i])
        return atoms
    split, _ = _split(cells)
    flat_cost = cost.ravel()
    paid = (split.direct + split.shared).reshape(cells.pair_pool.size, periods)
    for n, (j, i) in enumerate(
        zip(cells.pair_load.tolist(), cells.pair_pool.tolist(), strict=True)
    ):
        load = snapshot.loads[j]
        for k in range(periods):
            total = flat_cost[i * periods + k]
            if total > 0:
                add(i, k, float(paid[n, k]) / total, load["tenant"], load["tier"], load["quantile"])
    for i in range(len(pools)):
        for k in range(periods):
            total = flat_cost[i * periods + k]
            left = float(split.unallocated[i * periods + k])
            if total > 0 and left > 0:
                add(i, k, left / total, IDLE, "", float("nan"))
    return atoms


def _group(
    atoms: _Atoms, group_by: Sequence[str], value_names: Sequence[str]
) -> list[tuple[int, tuple[str, ...], float | None, dict[str, float]]]:
    """Sum atoms by (period, group); each group's quantile when its atoms share one."""
    sums: dict[tuple[int, tuple[str, ...]], dict[str, float]] = {}
    # None stands for "no single quantile" (NaN would not compare equal to itself in a set).
    qs: dict[tuple[int, tuple[str, ...]], set[float | None]] = defaultdict(set)
    columns = [atoms.attributes[g] for g in group_by]
    for a, k in enumerate(atoms.period):
        key = (k, tuple(col[a] for col in columns))
        row = sums.setdefault(key, dict.fromkeys(value_names, 0.0))
        for name in value_names:
            row[name] += atoms.values[name][a]
        q = atoms.quantile[a] if atoms.quantile else float("nan")
        qs[key].add(round(q, 6) if q == q else None)
    out = []
    for key in sorted(sums):
        found = qs[key]
        out.append((key[0], key[1], next(iter(found)) if len(found) == 1 else None, sums[key]))
    return out


# -- forecast ---------------------------------------------------------------------------------


def finance_forecast(
    *,
    period: str = "month",
    group_by: Iterable[str] = (),
    horizon: int | None = None,
    now: datetime | None = None,
    tenant: str | None = None,
) -> Report:
    """Replica-hours, GPU-hours and cost per period and group, from the current period on.

    ``period`` day, week or month; ``group_by`` any of ``GROUPS``; ``horizon`` the number of
    periods (defaults: 31 days, 13 weeks, 12 months); ``tenant`` one tenant's rows only (also
    grouped by tenant). Raises ``FinanceInputError`` for a bad parameter and ``NoActivePlan``
    without an active plan.
    """
    kind = _check_period(period)
    groups = _tenant_groups(check_group_by(group_by), tenant)
    count = _check_horizon(horizon, kind)
    moment = now or timezone.now()
    snapshot = finance_snapshot(now=moment)
    current = _current(moment, kind)
    params = {"period": kind, "group_by": list(groups), "horizon": count, "current": current}

    def build() -> Report:
        cells = _cells(snapshot, kind, moment, count)
        by_tenant = "tenant" in groups or "tier" in groups
        atoms = _forecast_atoms(snapshot, cells, by_tenant)
        rows = []
        for k, key, q, sums in _group(atoms, groups, FORECAST_SUMS):
            rows.append(
                ForecastRow(
                    period=cells.spans[k],
                    group=tuple(zip(groups, key, strict=True)),
                    quantile=q,
                    band_low_quantile=float(snapshot.quantiles["low"]),
                    band_high_quantile=float(snapshot.quantiles["high"]),
                    sized_by=cells.sized_by[k],
                    **sums,
                ).as_dict()
            )
        return Report(
            plan_version=snapshot.plan.version,
            snapshot=snapshot.pk,
            period=kind,
            horizon=count,
            group_by=groups,
            columns=forecast_columns(groups),
            rows=rows,
            notes=list(snapshot.notes),
        )

    report = _cached(snapshot, "forecast", params, build)
    return for_tenant(report, tenant, keep=lambda row: row["tenant"] == tenant)


# -- showback ---------------------------------------------------------------------------------

SHOWBACK_COLUMNS = (
    "period",
    "period_start",
    "period_end",
    "line",
    "tenant",
    "tier",
    "requests",
    "tokens",
    "used_replica_hours",
    "usage_cost",
    "idle_share",
    "hosted_cost",
    "cost",
    "cost_per_million_tokens",
    "idle_cost",
    "idle_unallocated",
)


def finance_showback(
    *,
    period: str = "month",
    horizon: int | None = None,
    now: datetime | None = None,
    tenant: str | None = None,
) -> Report:
    """Cost per tenant per period and per million tokens, with the idle headroom as a line.

    Tenant lines: ``usage_cost`` (the replica-hours its load uses, at the pool's price),
    ``idle_share`` (its part of the idle headroom, in proportion to its use), ``hosted_cost``
    (what its traffic sent to hosted APIs costs, as the forecast prices it) and ``cost`` (the
    three). The ``idle-headroom`` line per period: ``idle_cost`` (all replica-hours no load
    used: floors, burst, rounding), of which ``idle_unallocated`` is in pools no load uses.
    Σ tenants' ``usage_cost`` + ``hosted_cost`` + ``idle_cost`` = Σ tenants' ``cost`` +
    ``idle_unallocated`` = the forecast's total for the period. ``tenant``: that tenant's
    lines only.
    """
    kind = _check_period(period)
    count = _check_horizon(horizon, kind)
    moment = now or timezone.now()
    snapshot = finance_snapshot(now=moment)
    current = _current(moment, kind)
    params = {"period": kind, "horizon": count, "current": current}

    def build() -> Report:
        cells = _cells(snapshot, kind, moment, count)
        periods = len(cells.spans)
        split, _ = _split(cells)
        direct = split.direct.reshape(cells.pair_pool.size, periods)
        shared = split.shared.reshape(cells.pair_pool.size, periods)
        idle = split.idle.reshape(len(snapshot.pools), periods)
        unallocated = split.unallocated.reshape(len(snapshot.pools), periods)
        tenants: dict[tuple[int, str, str], dict[str, float]] = {}
        for n, j in enumerate(cells.pair_load.tolist()):
            load = snapshot.loads[j]
            for k in range(periods):
                row = tenants.setdefault(
                    (k, load["tenant"], load["tier"]),
                    dict.fromkeys(("requests", "tokens", "used", "direct", "shared"), 0.0),
                )
                row["requests"] += float(cells.requests[n, k])
                row["tokens"] += float(cells.tokens[n, k])
                row["used"] += float(cells.used[n, k])
                row["direct"] += float(direct[n, k])
                row["shared"] += float(shared[n, k])
        # Hosted spend is the tenant's own: its traffic, at the provider's per-token prices.
        for h, key in enumerate(snapshot.hosted):
            for k in range(periods):
                row = tenants.setdefault(
                    (k, key["tenant"], key["tier"]),
                    dict.fromkeys(("requests", "tokens", "used", "direct", "shared"), 0.0),
                )
                row["requests"] += float(cells.hosted_requests[h, k])
                row["tokens"] += float(cells.hosted_tokens[h, k])
                row["hosted"] = row.get("hosted", 0.0) + float(cells.hosted[h, k])
        rows = []
        for k, span in enumerate(cells.spans):
            for (kk, tenant, tier), v in sorted(tenants.items()):
                if kk != k:
                    continue
                cost = v["direct"] + v["shared"] + v.get("hosted", 0.0)
                rows.append(
                    {
                        **span.columns(),
                        "line": "tenant",
                        "tenant": tenant,
                        "tier": tier,
                        "requests": round(v["requests"]),
                        "tokens": round(v["tokens"]),
                        "used_replica_hours": hours(v["used"]),
                        "usage_cost": money(v["direct"]),
                        "idle_share": money(v["shared"]),
                        "hosted_cost": money(v.get("hosted", 0.0)),
                        "cost": money(cost),
                        "cost_per_million_tokens": (
                            money(cost / v["tokens"] * 1e6) if v["tokens"] > 0 else None
                        ),
                        "idle_cost": 0.0,
                        "idle_unallocated": 0.0,
                    }
                )
            rows.append(
                {
                    **span.columns(),
                    "line": "idle-headroom",
                    "tenant": IDLE,
                    "tier": "",
                    "requests": 0,
                    "tokens": 0,
                    "used_replica_hours": 0.0,
                    "usage_cost": 0.0,
                    "idle_share": 0.0,
                    "hosted_cost": 0.0,
                    "cost": 0.0,
                    "cost_per_million_tokens": None,
                    "idle_cost": money(float(idle[:, k].sum())),
                    "idle_unallocated": money(float(unallocated[:, k].sum())),
                }
            )
        return Report(
            plan_version=snapshot.plan.version,
            snapshot=snapshot.pk,
            period=kind,
            horizon=count,
            group_by=("tenant",),
            columns=SHOWBACK_COLUMNS,
            rows=rows,
            notes=list(snapshot.notes),
        )

    report = _cached(snapshot, "showback", params, build)
    return for_tenant(
        report, tenant, keep=lambda row: row["line"] == "tenant" and row["tenant"] == tenant
    )


# -- commitments ------------------------------------------------------------------------------

COMMITMENT_COLUMNS = (
    "period",
    "period_start",
    "period_end",
    "region",
    "accelerator",
    "reserved_gpus",
    "break_even",
    "on_demand_price",
    "reserved_price",
    "spot_price",
    "gpu_hours",
    "interruptible_gpu_hours",
    "reserved_gpu_hours",
    "reserved_used_gpu_hours",
    "on_demand_gpu_hours",
    "spot_gpu_hours",
    "idle_reserved_gpu_hours",
    "idle_reserved_gpu_hours_low",
    "cost_all_on_demand",
    "cost_reserved",
    "cost_on_demand",
    "cost_spot",
    "cost",
    "saving",
)


def finance_commitments(
    *, period: str = "month", horizon: int | None = None, now: datetime | None = None
) -> Report:
    """Reserved GPUs per region and GPU type for the horizon, the on-demand and spot mix, and
    what they cost and save.

    The level is the least-cost reservation (``optimal_mix``; without a spot price
    ``optimal_commitment``'s rule) for the hourly GPUs needed at the band's low edge, so the
    reservation is used even when demand comes in low. Where the GPU type has a spot price,
    the GPUs that load promising nothing uses (``interruptible``) may run on spot beyond the
    reservation; promised load, spares and headroom never do (spot can be reclaimed). Each
    period is then priced at the planned quantile with that reservation: GPU-hours reserved
    and used, on demand and on spot, cost, saving against all on demand, and the reserved
    GPU-hours left idle (expected, and at the low edge).
    """
    kind = _check_period(period)
    count = _check_horizon(horizon, kind)
    moment = now or timezone.now()
    snapshot = finance_snapshot(now=moment)
    current = _current(moment, kind)
    params = {"period": kind, "horizon": count, "current": current}

    def build() -> Report:
        spans, _ = _periods(snapshot, kind, moment, count)
        arrays = snapshot_arrays(snapshot)
        first = int(snapshot.start.timestamp())
        lo = (spans[0].start - first) // HOUR_S
        hi = (spans[-1].end - first) // HOUR_S
        # The days the plan runs need the plan's GPUs whatever the demand.
        ran = max((plan_days_end(snapshot, moment) - first) // HOUR_S - lo, 0)
        rows = []
        for g, pool in enumerate(snapshot.gpu_pools):
            spot = pool.get("spot_price")
            expected = arrays["gpu_q"][g, lo:hi].astype(np.int64)
            low = arrays["gpu_low"][g, lo:hi].astype(np.int64)
            expected[:ran] = pool["gpus"]
            low[:ran] = pool["gpus"]
            if spot is not None and "spare_q" in arrays:
                spare = arrays["spare_q"][g, lo:hi].astype(np.int64)
                spare_low = arrays["spare_low"][g, lo:hi].astype(np.int64)
                spare[:ran] = arrays["spare_plan"][g, lo : lo + ran]
                spare_low[:ran] = arrays["spare_plan"][g, lo : lo + ran]
            else:
                # No spot price: nothing is bought on spot, every GPU is firm.
                spare = np.zeros_like(expected)
                spare_low = np.zeros_like(low)
            reserved, on_demand = float(pool["reserved_price"]), float(pool["on_demand_price"])
            level = optimal_mix(
                low,
                spare_low,
                reserved_price=reserved,
                on_demand_price=on_demand,
                spot_price=spot,
            )
            mix = mix_hours(expected, spare, level)
            idle_low = mix_hours(low, spare_low, level).reserved_idle
            spot_rate = min(float(spot), on_demand) if spot is not None else on_demand
            for span in spans:
                a, b = (span.start - first) // HOUR_S - lo, (span.end - first) // HOUR_S - lo
                needed = int(expected[a:b].sum())
                used = int(mix.reserved_used[a:b].sum())
                demand_hours = int(mix.on_demand[a:b].sum())
                spot_hours = int(mix.spot[a:b].sum())
                cost_reserved = reserved * level * (b - a)
                cost_on_demand = on_demand * demand_hours
                cost_spot = spot_rate * spot_hours
                cost = cost_reserved + cost_on_demand + cost_spot
                rows.append(
                    {
                        **span.columns(),
                        "region": pool["region"],
                        "accelerator": pool["accelerator"],
                        "reserved_gpus": level,
                        "break_even": round(reserved / on_demand, 4),
                        "on_demand_price": round(on_demand, 4),
                        "reserved_price": round(reserved, 4),
                        "spot_price": round(float(spot), 4) if spot is not None else None,
                        "gpu_hours": hours(needed),
                        "interruptible_gpu_hours": hours(int(spare[a:b].sum())),
                        "reserved_gpu_hours": hours(level * (b - a)),
                        "reserved_used_gpu_hours": hours(used),
                        "on_demand_gpu_hours": hours(demand_hours),
                        "spot_gpu_hours": hours(spot_hours),
                        "idle_reserved_gpu_hours": hours(int(mix.reserved_idle[a:b].sum())),
                        "idle_reserved_gpu_hours_low": hours(int(idle_low[a:b].sum())),
                        "cost_all_on_demand": money(on_demand * needed),
                        "cost_reserved": money(cost_reserved),
                        "cost_on_demand": money(cost_on_demand),
                        "cost_spot": money(cost_spot),
                        "cost": money(cost),
                        "saving": money(on_demand * needed - cost),
                    }
                )
        rows.sort(key=lambda r: (r["period"], r["region"], r["accelerator"]))
        return Report(
            plan_version=snapshot.plan.version,
            snapshot=snapshot.pk,
            period=kind,
            horizon=count,
            group_by=("region", "accelerator"),
            columns=COMMITMENT_COLUMNS,
            rows=rows,
            notes=list(snapshot.notes),
        )

    return _cached(snapshot, "commitments", params, build)


# -- the price of each promise ----------------------------------------------------------------

PROMISE_COLUMNS = (
    "scope",
    "name",
    "tier",
    "promise",
    "promised_load",
    "share",
    "price_per_hour",
    "price_per_month",
    "cost_per_hour_with",
    "cost_per_hour_without",
    "replicas_with",
    "replicas_without",
    "gpus_with",
    "gpus_without",
    "solver_status",
)


def _rung_summary(problem: Problem, solution: Solution) -> dict[str, Any]:
    gpus = {s.name: s.gpus for s in problem.shapes}
    rows = [r for r in solution.replicas if r.replicas > 0]
    return {
        "cost_per_hour": float(solution.cost_per_hour or 0.0),
        "replicas": sum(r.replicas for r in rows),
        "gpus": sum(r.replicas * gpus[r.shape] for r in rows),
        "unserved_requests_per_s": float(solution.unserved_requests_per_s or 0.0),
        "solver_status": solution.status,
        "gap": float(solution.gap or 0.0),
    }


def _ladder(plan: Plan, solve: Callable[[dict[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    """Each rung's summary; a rung no different from the one before is not solved again."""
    out: list[dict[str, Any]] = []
    before: dict[str, Any] | None = None
    for rung, problem in promise_ladder(plan.problem):
        if rung == "planned":
            summary = _rung_summary(plan_problem(plan), plan_solution(plan))
        elif before is not None and problem == before:
            summary = dict(out[-1]["summary"])
        else:
            summary = _rung_summary(read_problem(problem), read_solution(solve(problem)))
        out.append({"rung": rung, "summary": summary})
        before = problem
    return out


def _promise_weights(plan: Plan) -> dict[str, dict[str, Any]]:
    """Per tenant: its tier and its promised load of each promise (``promise_weights`` summed
    over its routed demands), in replicas' worth."""
    problem = plan_problem(plan)
    demands = {d.id: d for d in problem.demands}
    out: dict[str, dict[str, Any]] = {}
    for d in problem.demands:
        out.setdefault(d.tenant, {"tier": d.tier or "", "zone": 0.0, "n+1": 0.0})
        out[d.tenant].setdefault("burst", 0.0)
    for row in plan.routing.all():
        demand = demands.get(row.demand)
        if demand is None:
            continue
        shape = problem.shape(row.shape)
        load = row.requests_per_s * problem.request_cost_s(demand, shape) / shape.target_utilization
        weights = promise_weights(load, burst=demand.burst, promise_level=demand.promise_level)
        for promise, weight in weights.items():
            out[demand.tenant][promise] += weight
    return dict(sorted(out.items()))


def promise_pricing(*, plan: Plan | None = None) -> PromisePricing:
    """The price of each promise for ``plan`` (the active plan by default), computed and stored
    the first time: the plan's problem re-solved one promise lighter at a time
    (``promise_ladder``), and each tenant's promised load to share each price by."""
    if plan is None:
        plan = selectors.plan_active_with_rows()
        if plan is None:
            raise NoActivePlan("No plan is active yet: run a re-plan.")
    found = selectors.promise_pricing_find(plan=plan)
    if found is not None:
        return found
    settings = replan_settings()
    began = time.perf_counter()

    def solve(problem: dict[str, Any]) -> dict[str, Any]:
        return placement.solve(
            problem,
            time_limit_s=settings.time_limit_s,
            workers=settings.solver_workers,
            seed=settings.solver_seed,
        )

    pricing = PromisePricing(
        plan=plan,
        rungs=_ladder(plan, solve),
        weights=_promise_weights(plan),
        solve_seconds=time.perf_counter() - began,
    )
    try:
        with transaction.atomic():
            pricing.save()
    except IntegrityError:
        stored = selectors.promise_pricing_find(plan=plan)
        if stored is None:
            raise
        return stored
    return pricing


def finance_promises(*, tenant: str | None = None) -> Report:
    """What each promise (zone survival, N+1, burst headroom) costs per hour and per month
    (``HOURS_PER_MONTH``): for the fleet (the ladder's steps), and for each tier and tenant its
    share of each step by the load it promised (``promise_weights``), so tenants add up to
    their tier and tiers to the fleet. ``tenant``: that tenant's rows only."""
    plan = selectors.plan_active_with_rows()
    if plan is None:
        raise NoActivePlan("No plan is active yet: run a re-plan.")
    pricing = promise_pricing(plan=plan)
    tiers: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for weights in pricing.weights.values():
        for promise in RUNG_PROMISE.values():
            tiers[weights["tier"]][promise] += weights[promise]
    totals = {p: sum(t[p] for t in tiers.values()) for p in RUNG_PROMISE.values()}
    rows = []
    steps = list(itertools.pairwise(pricing.rungs))
    scopes: list[tuple[str, str, str, dict[str, float]]] = [("fleet", "fleet", "", totals)]
    scopes += [("tier", name, name, dict(w)) for name, w in sorted(tiers.items())]
    # Sorted: the weights come back from a JSON column, whose key order PostgreSQL's jsonb
    # does not keep.
    scopes += [("tenant", name, w["tier"], w) for name, w in sorted(pricing.weights.items())]
    for scope, name, tier, weights in scopes:
        for before, after in steps:
            promise = RUNG_PROMISE[after["rung"]]
            with_, without = before["summary"], after["summary"]
            total = totals[promise]
            share = weights[promise] / total if total > 0 else (1.0 if scope == "fleet" else 0.0)
            price = (with_["cost_per_hour"] - without["cost_per_hour"]) * share
            fleet = scope == "fleet"
            rows.append(
                {
                    "scope": scope,
                    "name": name,
                    "tier": tier,
                    "promise": promise,
                    "promised_load": round(weights[promise], 4),
                    "share": round(share, 6),
                    "price_per_hour": money(price),
                    "price_per_month": money(price * HOURS_PER_MONTH),
                    "cost_per_hour_with": money(with_["cost_per_hour"]) if fleet else None,
                    "cost_per_hour_without": money(without["cost_per_hour"]) if fleet else None,
                    "replicas_with": with_["replicas"] if fleet else None,
                    "replicas_without": without["replicas"] if fleet else None,
                    "gpus_with": with_["gpus"] if fleet else None,
                    "gpus_without": without["gpus"] if fleet else None,
                    "solver_status": without["solver_status"],
                }
            )
    report = Report(
        plan_version=plan.version,
        snapshot=None,
        period="month",
        horizon=1,
        group_by=("scope", "name"),
        columns=PROMISE_COLUMNS,
        rows=rows,
        notes=[
            f"Re-solved in {pricing.solve_seconds:.1f} s when first asked; "
            f"a month is {HOURS_PER_MONTH} hours."
        ],
    )
    return for_tenant(
        report, tenant, keep=lambda row: row["scope"] == "tenant" and row["name"] == tenant
    )


# -- history ----------------------------------------------------------------------------------

HELD_VALUES = ("replica_hours", "gpu_hours", "cost", "hosted_cost")
SOURCE_DELIVERED = "delivered"
SOURCE_PLAN = "plan"


@dataclass(frozen=True)
class HeldSegment:
    """One region's allocation of ``plan`` held over [start, end) (epoch seconds): from the
    sinks' delivered state (``source`` "delivered") or from the plan's activation ("plan")."""

    plan: Plan
    region: str
    start: int
    end: int
    source: str


def held_segments(timeline: Sequence[selectors.ActiveSpan], *, end_ts: int) -> list[HeldSegment]:
    """What each region held, plan by plan, up to ``end_ts``: the rule for actuals.

    A plan's allocation for a region that was sent to a sink (an outbox entry) is held from
    the first time a sink acknowledged it (``delivered_at``, never before the activation);
    one sent and never delivered (failed, still pending, superseded) is never held. A plan's
    allocation for a region no sink was sent (no sink configured then) is held from its
    activation, as planned. Each region holds one allocation at a time: the one that started
    last, until the next one starts (a plan without rows in the region holds none there).
    So a plan whose delivery lands 6 hours after its activation leaves those 6 hours to the
    plan before it.
    """
    if not timeline:
        return []
    plans = [span.plan for span in timeline]
    delivered = selectors.region_deliveries(plan_ids=[p.pk for p in plans])
    regions = sorted(
        {row.region for p in plans for row in p.allocations.all()}
        | {region for _plan, region in delivered}
    )
    out: list[HeldSegment] = []
    for region in regions:
        starts: list[tuple[int, int, Plan, str]] = []
        for span in timeline:
            plan = span.plan
            activated = int(span.start.timestamp())
            state = delivered.get((plan.pk, region))
            if state is None:
                starts.append((activated, plan.version, plan, SOURCE_PLAN))
            elif state.delivered_at is not None:
                at = max(activated, int(state.delivered_at.timestamp()))
                starts.append((at, plan.version, plan, SOURCE_DELIVERED))
        starts.sort(key=lambda item: (item[0], item[1]))
        for n, (at, _version, plan, source) in enumerate(starts):
            until = starts[n + 1][0] if n + 1 < len(starts) else end_ts
            if until > at:
                out.append(HeldSegment(plan, region, at, until, source))
    return out


def history_columns(group_by: Sequence[str]) -> tuple[str, ...]:
    return (
        "period",
        "period_start",
        "period_end",
        *group_by,
        "plan_versions",
        "source",
        "hours_active",
        "replica_hours",
        "gpu_hours",
        "cost",
        "hosted_cost",
        "planned_replica_hours",
        "planned_gpu_hours",
        "planned_cost",
        "variance_replica_hours",
        "variance_gpu_hours",
        "variance_cost",
    )


def finance_history(
    *,
    period: str = "month",
    group_by: Iterable[str] = (),
    horizon: int | None = None,
    now: datetime | None = None,
    tenant: str | None = None,
) -> Report:
    """What was provisioned in each of the last ``horizon`` periods (the current one up to the
    last whole hour before ``now``), from the plans that were active (their activation
    times), by group; beside it what was planned for the period: the forecast of the earliest
    stored snapshot whose horizon began at or before the period (None where there is none),
    and the variance, held less planned, once the period has ended. ``tenant``: that
    tenant's rows only (also grouped by tenant)."""
    kind = _check_period(period)
    groups = _tenant_groups(check_group_by(group_by), tenant)
    count = _check_horizon(horizon, kind)
    moment = now or timezone.now()
    # Whole hours only: the hour under way is counted once it has ended, so a report is the
    # same all hour (and CSV and JSON of it agree).
    end_ts = int(moment.timestamp()) // HOUR_S * HOUR_S
    # The last ``count`` periods ending with the current one.
    starts = [int(period_starts(np.array([end_ts]), kind)[0])]
    while len(starts) < count:
        starts.insert(0, int(period_starts(np.array([starts[0] - 1]), kind)[0]))
    spans = [PeriodSpan(period_label(s, kind), s, period_end(s, kind)) for s in starts]
    atoms = _Atoms()
    versions: dict[tuple[int, tuple[str, ...]], set[int]] = defaultdict(set)
    sources: dict[tuple[int, tuple[str, ...]], set[str]] = defaultdict(set)
    timeline = selectors.plan_activation_timeline(before=moment)
    for held in held_segments(timeline, end_ts=end_ts):
        plan = held.plan
        shares = _plan_tenant_shares(plan)
        model_of = _shape_models(plan)
        for k, period_span in enumerate(spans):
            lo, hi = max(held.start, period_span.start), min(held.end, period_span.end, end_ts)
            if hi <= lo:
                continue
            overlap = (hi - lo) / HOUR_S
            for row in plan.allocations.all():
                if row.region != held.region:
                    continue
                parts = shares.get((row.region, row.shape)) or [(IDLE, "", 1.0)]
                for part_tenant, tier, share in parts:
                    values = {
                        "replica_hours": share * row.replicas * overlap,
                        "gpu_hours": share * row.replicas * row.gpus_per_replica * overlap,
                        "cost": share * row.cost_per_hour * overlap,
                        "hosted_cost": 0.0,
                    }
                    attrs = {
                        "region": row.region,
                        "zone": row.zone,
                        "accelerator": row.accelerator,
                        "shape": row.shape,
                        "model": model_of.get(row.shape, ""),
                        "tenant": part_tenant,
                        "tier": tier,
                    }
                    for name, text in attrs.items():
                        atoms.attributes[name].append(text)
                    atoms.period.append(k)
                    for name, amount in values.items():
                        atoms.values[name].append(amount)
                    cell = (k, tuple(attrs[g] for g in groups))
                    versions[cell].add(plan.version)
                    sources[cell].add(held.source)
    # Hosted spend: what a plan sends to hosted APIs is the gateway's routing. A LiteLLM
    # sink's delivery says a config file was written, not that a gateway loaded it, so the
    # spend is held while the plan is active, at the plan's $/h.
    for span_ in timeline:
        active_from = int(span_.start.timestamp())
        active_to = int(span_.end.timestamp()) if span_.end is not None else end_ts
        for hosted in plan_hosted(span_.plan):
            for k, period_span in enumerate(spans):
                lo = max(active_from, period_span.start)
                hi = min(active_to, period_span.end, end_ts)
                if hi <= lo:
                    continue
                spend = hosted.cost_per_hour * (hi - lo) / HOUR_S
                label = hosted_label(hosted.provider)
                attrs = {
                    "region": hosted.region,
                    "zone": label,
                    "accelerator": label,
                    "shape": label,
                    "model": hosted.model,
                    "tenant": hosted.tenant,
                    "tier": hosted.tier,
                }
                for name, text in attrs.items():
                    atoms.attributes[name].append(text)
                atoms.period.append(k)
                for name, amount in (
                    ("replica_hours", 0.0),
                    ("gpu_hours", 0.0),
                    ("cost", spend),
                    ("hosted_cost", spend),
                ):
                    atoms.values[name].append(amount)
                cell = (k, tuple(attrs[g] for g in groups))
                versions[cell].add(span_.plan.version)
                sources[cell].add(SOURCE_PLAN)
    grouped = _group(atoms, groups, HELD_VALUES)
    hours_by_period: dict[int, float] = defaultdict(float)
    for span_ in timeline:
        active_from = int(span_.start.timestamp())
        active_to = int(span_.end.timestamp()) if span_.end is not None else end_ts
        for k, period_span in enumerate(spans):
            lo, hi = max(active_from, period_span.start), min(active_to, period_span.end, end_ts)
            if hi > lo:
                hours_by_period[k] += (hi - lo) / HOUR_S
    planned = _planned_for(spans, kind, groups)
    rows = []
    for k, key, _q, sums in grouped:
        plan_row = planned.get((spans[k].label, key))
        # Held less planned, for a period that has ended (the current one is still filling).
        ended = plan_row is not None and spans[k].end <= end_ts
        rows.append(
            {
                **spans[k].columns(),
                **dict(zip(groups, key, strict=True)),
                "plan_versions": ";".join(str(v) for v in sorted(versions[(k, key)])),
                "source": "+".join(sorted(sources[(k, key)])),
                "hours_active": hours(hours_by_period[k]),
                "replica_hours": hours(sums["replica_hours"]),
                "gpu_hours": hours(sums["gpu_hours"]),
                "cost": money(sums["cost"]),
                "hosted_cost": money(sums["hosted_cost"]),
                "planned_replica_hours": (
                    hours(plan_row["replica_hours"]) if plan_row is not None else None
                ),
                "planned_gpu_hours": (
                    hours(plan_row["gpu_hours"]) if plan_row is not None else None
                ),
                "planned_cost": money(plan_row["cost"]) if plan_row is not None else None,
                "variance_replica_hours": (
                    hours(sums["replica_hours"] - plan_row["replica_hours"])
                    if ended and plan_row is not None
                    else None
                ),
                "variance_gpu_hours": (
                    hours(sums["gpu_hours"] - plan_row["gpu_hours"])
                    if ended and plan_row is not None
                    else None
                ),
                "variance_cost": (
                    money(sums["cost"] - plan_row["cost"])
                    if ended and plan_row is not None
                    else None
                ),
            }
        )
    active = selectors.plan_active_with_rows()
    report = Report(
        plan_version=active.version if active is not None else 0,
        snapshot=None,
        period=kind,
        horizon=count,
        group_by=groups,
        columns=history_columns(groups),
        rows=rows,
    )
    return for_tenant(report, tenant, keep=lambda row: row["tenant"] == tenant)


@dataclass(frozen=True)
class PlanHosted:
    """One hosted row of a plan, with what finance groups it by: the demand's tenant, tier and
    model, the provider and its region; planned requests/s and $/h."""

    demand: str
    tenant: str
    tier: str
    model: str
    provider: str
    region: str
    requests_per_s: float
    cost_per_hour: float


def plan_hosted(plan: Plan) -> list[PlanHosted]:
    """What ``plan`` sends to hosted APIs (its solution's ``hosted`` rows), by demand and
    provider; empty for a plan without them or whose documents cannot be read."""
    try:
        solution = plan_solution(plan)
        if not solution.hosted:
            return []
        problem = plan_problem(plan)
    except (ProblemInvalid, SolutionInvalid):
        return []
    demands = {d.id: d for d in problem.demands}
    region_of = {p.name: p.region for p in problem.hosted}
    out = []
    for row in solution.hosted:
        demand = demands.get(row.demand)
        if demand is None or row.requests_per_s <= 0:
            continue
        out.append(
            PlanHosted(
                demand=row.demand,
                tenant=demand.tenant,
                tier=demand.tier or "",
                model=demand.model,
                provider=row.provider,
                region=region_of.get(row.provider, ""),
                requests_per_s=row.requests_per_s,
                cost_per_hour=row.cost_per_hour,
            )
        )
    return out


def _shape_models(plan: Plan) -> dict[str, str]:
    """Shape name -> model, as the plan's problem names them (none for an unreadable one)."""
    try:
        return {shape.name: shape.model for shape in plan_problem(plan).shapes}
    except ProblemInvalid:
        return {}


def _plan_tenant_shares(plan: Plan) -> dict[tuple[str, str], list[tuple[str, str, float]]]:
    """Each region's shape's planned load split by tenant (replica-seconds at target)."""
    try:
        problem = plan_problem(plan)
    except ProblemInvalid:  # an invalid plan's problem has no routing to split
        return {}
    demands = {d.id: d for d in problem.demands}
    tier_of = {d.id: d.tier or "" for d in problem.demands}
    weights: dict[tuple[str, str], dict[tuple[str, str], float]] = defaultdict(
        lambda: defaultdict(float)
    )
    for row in plan.routing.all():
        demand = demands.get(row.demand)
        if demand is None:
            continue
        shape = problem.shape(row.shape)
        weight = row.requests_per_s * problem.request_cost_s(demand, shape)
        weights[(row.region, row.shape)][(demand.tenant, tier_of.get(row.demand, ""))] += weight
    out = {}
    for key, parts in weights.items():
        total = sum(parts.values())
        if total > 0:
            out[key] = [(t, tier, w / total) for (t, tier), w in sorted(parts.items())]
    return out


def _planned_for(
    spans: list[PeriodSpan], kind: Period, groups: tuple[str, ...]
) -> dict[tuple[str, tuple[str, ...]], dict[str, float]]:
    """What the earliest snapshot covering each period forecast for it, by group."""
    out: dict[tuple[str, tuple[str, ...]], dict[str, float]] = {}
    for span in spans:
        start = datetime.fromtimestamp(span.start, tz=UTC)
        for snapshot in selectors.snapshots_covering(start=start):
            created = snapshot.created_at.timestamp()
            if (
                span.end > snapshot.start.timestamp() + snapshot.hours * HOUR_S
                or created >= span.end
            ):
                continue
            cells = _cells(snapshot, kind, start, 1, plan_until=snapshot.created_at)
            atoms = _forecast_atoms(snapshot, cells, "tenant" in groups or "tier" in groups)
            planned_sums = ("replica_hours", "gpu_hours", "cost")
            for _k, key, _q, sums in _group(atoms, groups, planned_sums):
                out[(span.label, key)] = sums
            break
    return out


# -- ahead of the first read ------------------------------------------------------------------

FINANCE_WARM_TASK = "headroom.finance.warm"


def finance_warm(*, plan_id: int, now: datetime | None = None) -> FinanceSnapshot | None:
    """Compute and store what finance serves for the active plan ``plan_id`` before anyone
    asks: its snapshot for the horizon of ``now``, the monthly forecast and the monthly
    showback (what the operators' pages and most dashboards read first). Without it the first
    finance read after an activation computes them in a web request (seconds of CPU on a large
    fleet). None, and nothing done, when ``plan_id`` is no longer the active plan."""
    active = selectors.plan_active_with_rows()
    if active is None or active.pk != plan_id:
        return None
    moment = now or timezone.now()
    try:
        snapshot = finance_snapshot(now=moment)
        finance_forecast(period="month", now=moment)
        finance_showback(period="month", now=moment)
    except NoActivePlan:
        return None  # superseded and gone meanwhile: nothing left to warm
    return snapshot


def _on_plan_activated(sender: Any, *, plan: Plan, **kwargs: Any) -> None:
    # Once the activation commits; a broker that cannot be reached only loses the head start
    # (the first read computes what the task would have).
    if settings.HEADROOM_FINANCE_WARM:
        task_send_on_commit(FINANCE_WARM_TASK, plan.pk, robust=True)


def connect() -> None:
    """Warm the finance reports of every plan that becomes active (``FinanceConfig.ready``)."""
    plan_activated.connect(_on_plan_activated, dispatch_uid="finance.warm")
