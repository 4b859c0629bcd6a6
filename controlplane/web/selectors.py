"""Reads behind the operators' pages: each function gathers one page's figures in a fixed
number of queries (none grows with tenants, regions or plans shown), from the records and the
active plan's stored documents.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from controlplane.core.memo import RowMemo
from controlplane.finance import services as finance
from controlplane.fleet.models import Region, ReplicaShape
from controlplane.fleet.selectors import planning_figures
from controlplane.plans.models import Plan, PlanDecision, ReplanRun
from controlplane.plans.selectors import PLAN_DOCUMENTS
from controlplane.plans.whatif import unserved_reasons
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile
from controlplane.telemetry.models import (
    DriftAlert,
    ObservedWorkload,
    ProfileDerivation,
    TelemetryPull,
)
from planner.errors import PlannerInputError
from planner.placement.pools import PoolLoad, pool_loads

# -- fleet overview -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ZoneRow:
    zone: str
    shape: str
    accelerator: str
    replicas: int
    gpus: int
    cost_per_hour: float


@dataclass(frozen=True)
class PoolRow:
    """One region × shape of the active plan, with its capacity figure's freshness."""

    load: PoolLoad
    figure_measured_at: datetime | None
    figure_age_days: float | None
    figure_stale: bool
    figure_source: str


@dataclass
class RegionView:
    name: str
    geography: str
    zones: list[ZoneRow] = field(default_factory=list)
    pools: list[PoolRow] = field(default_factory=list)

    @property
    def replicas(self) -> int:
        return sum(z.replicas for z in self.zones)

    @property
    def gpus(self) -> int:
        return sum(z.gpus for z in self.zones)

    @property
    def cost_per_hour(self) -> float:
        return sum(z.cost_per_hour for z in self.zones)


@dataclass(frozen=True)
class JobStatus:
    """The newest run of one pipeline step."""

    label: str
    status: str
    status_label: str
    at: datetime | None
    detail: str
    plan_version: int | None = None


@dataclass(frozen=True)
class FleetOverview:
    active: Plan | None
    awaiting: list[Plan]
    regions: list[RegionView]
    pool_error: str
    open_alerts: int
    recent_alerts: list[DriftAlert]
    jobs: list[JobStatus]
    tenants: int
    max_age_days: int

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.regions)

    @property
    def replicas(self) -> int:
        return sum(r.replicas for r in self.regions)


@dataclass(frozen=True)
class FigureFreshness:
    measured_at: datetime
    age_days: float
    stale: bool
    source: str


def figure_freshness() -> dict[str, FigureFreshness]:
    """Per shape name, the capacity figure planning uses (``fleet.selectors.planning_figures``)
    and how old it is: two queries."""
    names = dict(ReplicaShape.objects.values_list("pk", "name"))
    return {
        names[shape_id]: FigureFreshness(
            measured_at=f.measured_at,
            age_days=f.age.total_seconds() / 86400,
            stale=f.is_stale,
            source=f.get_source_display(),
        )
        for shape_id, f in planning_figures().items()
        if shape_id in names
    }


def _zone_rows(plan: Plan) -> dict[str, list[ZoneRow]]:
    out: dict[str, list[ZoneRow]] = defaultdict(list)
    for row in plan.allocations.all():
        out[row.region].append(
            ZoneRow(
                zone=row.zone,
                shape=row.shape,
                accelerator=row.accelerator,
                replicas=row.replicas,
                gpus=row.replicas * row.gpus_per_replica,
                cost_per_hour=row.cost_per_hour,
            )
        )
    return out


@dataclass(frozen=True)
class _PlanPools:
    geographies: dict[str, str]
    pools: list[PoolLoad]
    error: str


# What the pages derive from a plan's stored documents, which never change once stored: read
# and computed once per process and plan (the pool loads of a large fleet take tens of ms).
_PLAN_DERIVED: RowMemo[Any] = RowMemo(size=32)


def _plan_pools(plan: Plan) -> _PlanPools:
    geographies = {
        r["name"]: str(r.get("geo", "")) for r in (plan.problem or {}).get("regions", [])
    }
    error = ""
    pools: list[PoolLoad] = []
    if plan.solver_status != Plan.SolverStatus.INVALID:
        try:
            pools = pool_loads(plan.problem, plan.solution)
        except PlannerInputError as exc:
            error = f"Pool loads are not available for this plan: {exc}"
    return _PlanPools(geographies=geographies, pools=pools, error=error)


def plan_regions(
    plan: Plan, freshness: Mapping[str, FigureFreshness]
) -> tuple[list[RegionView], str]:
    """The plan per region: zone × shape rows and pool loads. The second value is a sentence
    when the stored problem cannot be read back for pool loads (the rows still show)."""
    derived: _PlanPools = _PLAN_DERIVED.get(
        plan.pk, plan.created_at, lambda: _plan_pools(plan), "pools"
    )
    geographies, pools, error = derived.geographies, derived.pools, derived.error
    zones = _zone_rows(plan)
    views: dict[str, RegionView] = {}
    for name in sorted(set(zones) | {p.region for p in pools}):
        views[name] = RegionView(name=name, geography=geographies.get(name, ""))
        views[name].zones = sorted(zones.get(name, []), key=lambda z: (z.zone, z.shape))
    for pool in pools:
        fresh = freshness.get(pool.shape)
        views[pool.region].pools.append(
            PoolRow(
                load=pool,
                figure_measured_at=fresh.measured_at if fresh else None,
                figure_age_days=fresh.age_days if fresh else None,
                figure_stale=fresh.stale if fresh else False,
                figure_source=fresh.source if fresh else "",
            )
        )
    return list(views.values()), error


def _jobs() -> list[JobStatus]:
    jobs = []
    pull = TelemetryPull.objects.order_by("-started_at", "-pk").first()
    if pull is None:
        jobs.append(JobStatus("Last telemetry pull", "none", "never run", None, ""))
    else:
        jobs.append(
            JobStatus(
                "Last telemetry pull",
                pull.status,
                pull.get_status_display(),
                pull.finished_at or pull.started_at,
                f"window {window_label(pull.window_start, pull.window_end)}; "
                f"{pull.samples_stored:,} samples stored"
                + (f"; {pull.error}" if pull.error else ""),
            )
        )
    derivation = ProfileDerivation.objects.order_by("-started_at", "-pk").first()
    if derivation is None:
        jobs.append(JobStatus("Last profile derivation", "none", "never run", None, ""))
    else:
        jobs.append(
            JobStatus(
                "Last profile derivation",
                derivation.status,
                derivation.get_status_display(),
                derivation.finished_at or derivation.started_at,
                f"window {window_label(derivation.window_start, derivation.window_end)}; "
                f"{derivation.profiles_created} profiles made, {derivation.alerts_raised} alerts "
                "raised" + (f"; {derivation.error}" if derivation.error else ""),
            )
        )
    run = (
        ReplanRun.objects.select_related("plan")
        .defer(*(f"plan__{name}" for name in PLAN_DOCUMENTS))
        .order_by("-created_at", "-pk")
        .first()
    )
    if run is None:
        jobs.append(JobStatus("Last re-plan", "none", "never run", None, ""))
    else:
        detail = f"trigger {run.get_trigger_display()}"
        if run.error:
            detail += f"; {run.error}"
        jobs.append(
            JobStatus(
                "Last re-plan",
                run.status,
                run.get_status_display(),
                run.finished_at or run.created_at,
                detail,
                plan_version=run.plan.version if run.plan is not None else None,
            )
        )
    return jobs


def fleet_overview() -> FleetOverview:
    active = (
        Plan.objects.filter(state=Plan.State.ACTIVE)
        .select_related("approved_by")
        .prefetch_related("allocations")
        .defer(*PLAN_DOCUMENTS)
        .first()
    )
    regions: list[RegionView] = []
    error = ""
    if active is not None:
        regions, error = plan_regions(active, figure_freshness())
    open_alerts = DriftAlert.objects.filter(status=DriftAlert.Status.OPEN)
    return FleetOverview(
        active=active,
        awaiting=list(
            Plan.objects.filter(state=Plan.State.AWAITING_APPROVAL)
            .only("pk", "version", "state", "cost_per_hour", "created_at")
            .order_by("-version")
        ),
        regions=regions,
        pool_error=error,
        open_alerts=open_alerts.count(),
        recent_alerts=list(open_alerts.select_related("tenant", "region", "model")[:5]),
        jobs=_jobs(),
        tenants=Tenant.objects.count(),
        max_age_days=settings.HEADROOM_CAPACITY_MAX_AGE_DAYS,
    )


def window_label(start: datetime, end: datetime) -> str:
    """A time window in words: dates shown when it spans days, so a 24-hour window reads
    "2026-11-30 23:00 – 2026-12-01 23:00 UTC (24 h)", never "23:00–23:00"."""
    start, end = timezone.localtime(start), timezone.localtime(end)
    hours = (end - start).total_seconds() / 3600
    length = f"{hours:.0f} h" if hours >= 1 and float(hours).is_integer() else f"{hours:.2g} h"
    if start.date() == end.date():
        text = f"{start:%Y-%m-%d %H:%M}–{end:%H:%M}"
    else:
        text = f"{start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M}"
    return f"{text} {start.tzname()} ({length})"


# -- plans ------------------------------------------------------------------------------------


def plan_list() -> QuerySet[Plan]:
    return Plan.objects.only(
        "pk",
        "version",
        "state",
        "solver_status",
        "trigger",
        "cost_per_hour",
        "planned_requests_per_s",
        "unserved_requests_per_s",
        "created_at",
        "activated_at",
    ).order_by("-version")


@dataclass(frozen=True)
class RoutingRow:
    demand: str
    region: str
    shape: str
    requests_per_s: float
    share: float


@dataclass(frozen=True)
class TenantRouting:
    tenant: str
    planned_requests_per_s: float
    unserved_requests_per_s: float
    rows: list[RoutingRow]


@dataclass(frozen=True)
class UnservedRow:
    demand: str
    tenant: str
    priority: int
    requests_per_s: float
    planned_requests_per_s: float
    reason: str


@dataclass(frozen=True)
class PlanPage:
    plan: Plan
    regions: list[RegionView]
    pool_error: str
    routing: list[TenantRouting]
    unserved: list[UnservedRow]
    binding: list[str]
    decisions: list[PlanDecision]
    active: Plan | None
    newest_version: int | None
    replay: list[ReplayRow] = field(default_factory=list)

    @property
    def decidable(self) -> bool:
        return bool(
            self.plan.state == Plan.State.AWAITING_APPROVAL
            and self.newest_version == self.plan.version
        )


def _planned(problem: Mapping[str, Any]) -> dict[str, tuple[str, float, int]]:
    return {
        str(d["id"]): (
            str(d.get("tenant", d["id"])),
            float(d["requests_per_s"]) * float(d.get("burst", 1.0)),
            int(d.get("priority", 0)),
        )
        for d in problem.get("demands", [])
    }


def plan_routing(plan: Plan) -> list[TenantRouting]:
    """Per tenant, where its planned traffic goes, from the stored solution."""
    routing: list[TenantRouting] = _PLAN_DERIVED.get(
        plan.pk, plan.created_at, lambda: _plan_routing(plan), "routing"
    )
    return routing


def _plan_routing(plan: Plan) -> list[TenantRouting]:
    planned = _planned(plan.problem or {})
    unserved: dict[str, float] = defaultdict(float)
    for row in (plan.solution or {}).get("unserved", []):
        unserved[str(row["demand"])] += float(row["requests_per_s"])
    rows: dict[str, list[RoutingRow]] = defaultdict(list)
    for row in (plan.solution or {}).get("routing", []):
        demand = str(row["demand"])
        rate = float(row["requests_per_s"])
        total = planned.get(demand, ("", 0.0, 0))[1]
        tenant = planned.get(demand, (demand, 0.0, 0))[0]
        rows[tenant].append(
            RoutingRow(
                demand=demand,
                region=str(row["region"]),
                shape=str(row["shape"]),
                requests_per_s=rate,
                share=rate / total if total > 0 else 0.0,
            )
        )
    tenants: dict[str, list[str]] = defaultdict(list)
    for demand, (tenant, _, _) in planned.items():
        tenants[tenant].append(demand)
    return [
        TenantRouting(
            tenant=tenant,
            planned_requests_per_s=sum(planned[d][1] for d in demands),
            unserved_requests_per_s=sum(unserved.get(d, 0.0) for d in demands),
            rows=sorted(rows.get(tenant, []), key=lambda r: (r.demand, r.region, r.shape)),
        )
        for tenant, demands in sorted(tenants.items())
    ]


def plan_unserved(plan: Plan) -> list[UnservedRow]:
    """Demands left (partly) unserved, with the reason the binding constraints give."""
    unserved: list[UnservedRow] = _PLAN_DERIVED.get(
        plan.pk, plan.created_at, lambda: _plan_unserved(plan), "unserved"
    )
    return unserved


def _plan_unserved(plan: Plan) -> list[UnservedRow]:
    planned = _planned(plan.problem or {})
    reasons = unserved_reasons(plan.binding or [])
    out = []
    for row in (plan.solution or {}).get("unserved", []):
        demand = str(row["demand"])
        tenant, rate, priority = planned.get(demand, (str(row.get("tenant", "")), 0.0, 0))
        out.append(
            UnservedRow(
                demand=demand,
                tenant=tenant,
                priority=int(row.get("priority", priority)),
                requests_per_s=float(row["requests_per_s"]),
                planned_requests_per_s=rate,
                reason=reasons.get(demand, ""),
            )
        )
    return sorted(out, key=lambda r: (r.priority, -r.requests_per_s, r.demand))


@dataclass(frozen=True)
class ReplayRow:
    """One tenant's replayed p95 TTFT (over all its requests) against its tier's objective
    (seconds; None: never served), and where its arrivals came from."""

    tenant: str
    demands: int
    source: str
    requests: int
    objective_s: float | None
    all_up_s: float | None
    worst_s: float | None
    worst_scenario: str
    holds: bool | None


def plan_replay(plan: Plan) -> list[ReplayRow]:
    """The plan's replay verdicts per tenant, those that miss first, then by name."""
    verification = (plan.solution or {}).get("verification") or {}
    sources: dict[str, set[str]] = {}
    for v in verification.get("demands", []):
        sources.setdefault(str(v["tenant"]), set()).add(str(v.get("source", "")))
    rows = [
        ReplayRow(
            tenant=str(v["tenant"]),
            demands=len(v.get("demands", [])),
            source=", ".join(sorted(sources.get(str(v["tenant"]), set()))),
            requests=int(v.get("requests", 0)),
            objective_s=v.get("ttft_slo_s"),
            all_up_s=(v.get("p95_ttft_s") or {}).get("all up"),
            worst_s=v.get("worst_p95_ttft_s"),
            worst_scenario=str(v.get("worst_scenario", "")),
            holds=v.get("holds"),
        )
        for v in verification.get("tenants", [])
    ]
    return sorted(rows, key=lambda r: (r.holds is not False, r.tenant))


def plan_page(plan: Plan) -> PlanPage:
    regions, error = plan_regions(plan, figure_freshness())
    newest = Plan.objects.order_by("-version").values_list("version", flat=True).first()
    return PlanPage(
        plan=plan,
        regions=regions,
        pool_error=error,
        routing=plan_routing(plan),
        unserved=plan_unserved(plan),
        # Sentences about unserved demand show with that demand; the rest say what binds.
        binding=[s for s in (plan.binding or []) if not s.startswith("demand ")],
        decisions=list(plan.decisions.select_related("actor")),
        active=Plan.objects.filter(state=Plan.State.ACTIVE).only("pk", "version").first(),
        newest_version=newest,
        replay=plan_replay(plan),
    )


def plan_for_page(version: int) -> Plan | None:
    return (
        Plan.objects.select_related("created_by", "approved_by", "rejected_by")
        .prefetch_related("allocations")
        .filter(version=version)
        .first()
    )


# -- tenants ----------------------------------------------------------------------------------


def tenant_list() -> QuerySet[Tenant]:
    return (
        Tenant.objects.select_related("tier", "home_region", "residency_geography")
        .prefetch_related("residency_regions")
        .annotate(
            open_alerts=Count("drift_alerts", filter=Q(drift_alerts__status=DriftAlert.Status.OPEN))
        )
        .order_by("name")
    )


@dataclass(frozen=True)
class ProfilePoint:
    """One point of a tenant's workload over time: an observation window or a profile
    version (declared profiles carry no TTFT and no mean rate)."""

    at: datetime
    label: str
    model: str
    region: str
    workload_class: str
    peak_requests_per_s: float
    mean_requests_per_s: float | None
    prompt_p50: float
    prompt_p95: float
    prompt_p99: float
    output_p50: float
    output_p95: float
    output_p99: float
    cache_hit_rate: float | None
    ttft_p95_s: float | None
    # By the length fields above (``prompt_p99``): how a coarse percentile reads ("between
    # 2,000 and 5,000") and which are censored (beyond the top bucket: "≥ 5,000").
    between: Mapping[str, str] = field(default_factory=dict)
    censored: frozenset[str] = frozenset()


def _point_name(figure: str) -> str:
    """A profile figure's name on a point: ``prompt_tokens_p99`` → ``prompt_p99``."""
    return figure.replace("_tokens_", "_")


def _readings(row: ObservedWorkload | WorkloadProfile) -> dict[str, Any]:
    """The ``between`` and ``censored`` of a point, from an observation or a profile."""
    return {
        "between": {_point_name(name): text for name, text in row.between().items()},
        "censored": frozenset(_point_name(name) for name in row.censored or []),
    }


@dataclass(frozen=True)
class TenantPage:
    tenant: Tenant
    quota: TenantQuota | None
    allowed_regions: list[str]
    active: Plan | None
    served: list[RoutingRow]
    planned_requests_per_s: float
    unserved: list[UnservedRow]
    points: list[ProfilePoint]
    source: str
    profiles: list[WorkloadProfile]
    alerts: list[DriftAlert]

    @property
    def bucket_notes(self) -> bool:
        """Whether any length figure reads "between" or "≥" (the page says what they mean)."""
        return any(p.between or p.censored for p in self.points)


def _observations(tenant: Tenant) -> list[ProfilePoint]:
    rows = (
        ObservedWorkload.objects.filter(tenant=tenant.name)
        .select_related("derivation")
        .order_by("derivation__window_end", "model", "region", "workload_class")
    )
    return [
        ProfilePoint(
            at=row.derivation.window_end,
            label=window_label(row.derivation.window_start, row.derivation.window_end),
            model=row.model,
            region=row.region,
            workload_class=row.workload_class,
            peak_requests_per_s=row.peak_requests_per_s,
            mean_requests_per_s=row.mean_requests_per_s,
            prompt_p50=row.prompt_tokens_p50,
            prompt_p95=row.prompt_tokens_p95,
            prompt_p99=row.prompt_tokens_p99,
            output_p50=row.output_tokens_p50,
            output_p95=row.output_tokens_p95,
            output_p99=row.output_tokens_p99,
            cache_hit_rate=row.prefix_cache_hit_rate,
            ttft_p95_s=row.ttft_p95_s,
            **_readings(row),
        )
        for row in rows
    ]


def _profile_points(profiles: Iterable[WorkloadProfile], tenant: Tenant) -> list[ProfilePoint]:
    return sorted(
        (
            ProfilePoint(
                at=p.created_at,
                label=f"v{p.version} ({p.get_source_display()}) {p.created_at:%Y-%m-%d %H:%M}",
                model=p.model.name,
                region=p.region.name if p.region else tenant.home_region.name,
                workload_class=p.workload_class.name,
                peak_requests_per_s=p.peak_requests_per_s,
                mean_requests_per_s=None,
                prompt_p50=p.prompt_tokens_p50,
                prompt_p95=p.prompt_tokens_p95,
                prompt_p99=p.prompt_tokens_p99,
                output_p50=p.output_tokens_p50,
                output_p95=p.output_tokens_p95,
                output_p99=p.output_tokens_p99,
                cache_hit_rate=p.prefix_cache_hit_rate,
                ttft_p95_s=None,
                **_readings(p),
            )
            for p in profiles
        ),
        key=lambda point: (point.at, point.model, point.region),
    )


def tenant_page(tenant: Tenant) -> TenantPage:
    active = Plan.objects.filter(state=Plan.State.ACTIVE).defer(*PLAN_DOCUMENTS).first()
    served: list[RoutingRow] = []
    unserved: list[UnservedRow] = []
    planned = 0.0
    if active is not None:
        for group in plan_routing(active):
            if group.tenant == tenant.name:
                served = group.rows
                planned = group.planned_requests_per_s
        unserved = [row for row in plan_unserved(active) if row.tenant == tenant.name]
    profiles = list(
        WorkloadProfile.objects.filter(tenant=tenant)
        .select_related("model", "workload_class", "region")
        .order_by("created_at", "pk")
    )
    points = _observations(tenant)
    source = "telemetry observation windows"
    if not points:
        points = _profile_points(profiles, tenant)
        source = "workload profile versions"
    return TenantPage(
        tenant=tenant,
        quota=TenantQuota.objects.filter(tenant=tenant).first(),
        allowed_regions=[r.name for r in tenant.allowed_regions()],
        active=active,
        served=served,
        planned_requests_per_s=planned,
        unserved=unserved,
        points=points,
        source=source,
        profiles=list(reversed(profiles)),
        alerts=list(
            DriftAlert.objects.filter(tenant=tenant, status__in=DriftAlert.ACTIVE).select_related(
                "region", "model", "workload_class"
            )
        ),
    )


def tenant_for_page(name: str) -> Tenant | None:
    return (
        Tenant.objects.select_related("tier", "home_region", "residency_geography")
        .prefetch_related("residency_regions")
        .filter(name=name)
        .first()
    )


def whatif_choices() -> tuple[list[Tenant], list[Region], list[Tier]]:
    return (
        list(Tenant.objects.select_related("tier").order_by("name")),
        list(Region.objects.select_related("geography").order_by("name")),
        list(Tier.objects.order_by("priority", "name")),
    )


# -- drift alerts ------------------------------------------------------------------------------

_REASON_IDS = re.compile(r"#(\d+)")


@dataclass(frozen=True)
class AlertRow:
    alert: DriftAlert
    replica_change: int | None
    cost_change_per_hour: float | None
    run: ReplanRun | None


def _runs_by_alert(alerts: Sequence[DriftAlert]) -> dict[int, ReplanRun]:
    """The drift re-plan each alert caused: the first drift run whose reason names it (the
    reason reads "Drift alerts #3, #4: ..."; ``plans.services.drift_reason``)."""
    if not alerts:
        return {}
    since = min(a.first_seen_at for a in alerts)
    out: dict[int, ReplanRun] = {}
    runs = (
        ReplanRun.objects.filter(trigger=Plan.Trigger.DRIFT, created_at__gte=since)
        .select_related("plan")
        .order_by("created_at", "pk")
    )
    wanted = {a.pk for a in alerts}
    for run in runs:
        head = run.reason.split(":", 1)[0]
        for match in _REASON_IDS.finditer(head):
            pk = int(match.group(1))
            if pk in wanted:
                out.setdefault(pk, run)
    return out


def drift_alert_rows(*, status: str | None) -> list[AlertRow]:
    alerts = DriftAlert.objects.select_related(
        "tenant", "model", "region", "workload_class", "shape__accelerator"
    ).order_by("-last_seen_at", "-pk")
    if status:
        alerts = alerts.filter(status=status)
    shown = list(alerts[:500])
    runs = _runs_by_alert(shown)
    rows = []
    for alert in shown:
        delta = alert.replica_delta
        cost = None
        if delta is not None and alert.shape is not None:
            cost = (
                delta
                * alert.shape.gpus_per_replica
                * alert.shape.accelerator.on_demand_price_per_gpu_hour
                * alert.region.price_multiplier
            )
        rows.append(
            AlertRow(
                alert=alert, replica_change=delta, cost_change_per_hour=cost, run=runs.get(alert.pk)
            )
        )
    return rows


def shapes_count() -> int:
    return ReplicaShape.objects.count()


# -- finance ------------------------------------------------------------------------------------

FINANCE_GROUPS = ("region", "accelerator")


@dataclass(frozen=True)
class FinanceTable:
    """One finance report as a table, with the API address its CSV downloads from."""

    key: str
    title: str
    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    csv_url: str
    notes: list[str]


@dataclass(frozen=True)
class FinancePage:
    error: str
    plan_version: int | None
    totals: list[tuple[datetime, float, float, float]]
    by_accelerator: dict[str, list[tuple[datetime, float]]]
    tables: list[FinanceTable]


def _period_start(row: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(str(row["period_start"]).replace("Z", "+00:00"))


def _table(key: str, title: str, report: finance.Report, url_name: str, query: str) -> FinanceTable:
    return FinanceTable(
        key=key,
        title=title,
        columns=tuple(report.columns),
        rows=list(report.rows),
        csv_url=f"{reverse(url_name)}?format=csv{query}",
        notes=list(report.notes),
    )


def finance_page() -> FinancePage:
    """Cost by month by region and GPU type (with the band's edges), commitments and the price
    of each promise: the finance services' reports, as the API serves them."""
    try:
        forecast = finance.finance_forecast(period="month", group_by=FINANCE_GROUPS)
        commitments = finance.finance_commitments(period="month")
        promises = finance.finance_promises()
    except finance.NoActivePlan as exc:
        return FinancePage(str(exc), None, [], {}, [])
    totals: dict[datetime, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    by_acc: dict[str, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    for row in forecast.rows:
        start = _period_start(row)
        totals[start][0] += float(row["cost"] or 0.0)
        totals[start][1] += float(row["cost_low"] or 0.0)
        totals[start][2] += float(row["cost_high"] or 0.0)
        by_acc[str(row["accelerator"])][start] += float(row["cost"] or 0.0)
    group_query = "&period=month&group_by=" + ",".join(FINANCE_GROUPS)
    return FinancePage(
        error="",
        plan_version=forecast.plan_version,
        totals=[(t, v[0], v[1], v[2]) for t, v in sorted(totals.items())],
        by_accelerator={a: sorted(points.items()) for a, points in sorted(by_acc.items())},
        tables=[
            _table(
                "forecast",
                "Cost by month, region and GPU type",
                forecast,
                "finance-forecast",
                group_query,
            ),
            _table(
                "commitments",
                "Commitments: reserved GPUs per region and GPU type",
                commitments,
                "finance-commitments",
                "&period=month",
            ),
            _table("promises", "The price of each promise", promises, "finance-promises", ""),
        ],
    )


def tenant_cost(tenant: Tenant) -> tuple[list[dict[str, Any]], str]:
    """The tenant's showback lines by month (usage, idle share, cost, per million tokens), or
    an empty list with the reason."""
    try:
        report = finance.finance_showback(period="month")
    except finance.NoActivePlan as exc:
        return [], str(exc)
    return [row for row in report.rows if row.get("tenant") == tenant.name], ""
