"""Reads behind the operators' pages: each function gathers one page's figures in a fixed
number of queries (none grows with tenants, regions or plans shown), from the records and the
active plan's stored documents.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
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
from controlplane.plans.selectors import (
    PLAN_DOCUMENTS,
    Solution,
    SolutionInvalid,
    plan_problem,
    plan_problem_or_error,
    plan_solution,
)
from controlplane.plans.whatif import unserved_reasons
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile
from controlplane.telemetry.drift import (
    PricedChange,
    drift_change_text,
    priced_change,
    share_text,
)
from controlplane.telemetry.models import (
    DriftAlert,
    ObservedWorkload,
    PoolDriftAlert,
    PoolSignalAlert,
    ProfileDerivation,
    TelemetryPull,
)
from controlplane.telemetry.pool_signals import duration_text
from controlplane.web.plan_states import StateBanner, plan_state_banner
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
    hosted: HostedSpend | None = None

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


def plan_derived(plan: Plan, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` over ``plan``'s stored documents, kept per process and plan under
    ``name`` (the documents never change once stored)."""
    return _PLAN_DERIVED.get(plan.pk, plan.created_at, compute, name)


@dataclass(frozen=True)
class HostedLine:
    """What a plan sends to one hosted provider: planned requests/s and $/h, summed over the
    demands sent there."""

    provider: str
    region: str
    requests_per_s: float
    cost_per_hour: float


@dataclass(frozen=True)
class HostedSpend:
    """A plan's hosted spend: one line per provider, and the whole."""

    lines: list[HostedLine]

    @property
    def cost_per_hour(self) -> float:
        return sum(line.cost_per_hour for line in self.lines)

    @property
    def requests_per_s(self) -> float:
        return sum(line.requests_per_s for line in self.lines)


def plan_hosted_spend(plan: Plan) -> HostedSpend:
    """What ``plan`` sends to hosted APIs, per provider (no lines: nothing hosted)."""
    spend: HostedSpend = plan_derived(plan, "hosted", lambda: _plan_hosted_spend(plan))
    return spend


def _plan_hosted_spend(plan: Plan) -> HostedSpend:
    if plan.solver_status == Plan.SolverStatus.INVALID:
        return HostedSpend(lines=[])
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in finance.plan_hosted(plan):
        sums[(row.provider, row.region)][0] += row.requests_per_s
        sums[(row.provider, row.region)][1] += row.cost_per_hour
    return HostedSpend(
        lines=[
            HostedLine(provider=p, region=r, requests_per_s=rps, cost_per_hour=cost)
            for (p, r), (rps, cost) in sorted(sums.items())
        ]
    )


def _plan_pools(plan: Plan) -> _PlanPools:
    problem, _ = plan_problem_or_error(plan)
    geographies = {r.name: r.geo or "" for r in (problem.regions if problem else ())}
    error = ""
    pools: list[PoolLoad] = []
    if plan.solver_status != Plan.SolverStatus.INVALID:
        try:
            pools = pool_loads(plan_problem(plan), plan_solution(plan).to_json())
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
        hosted=plan_hosted_spend(active) if active is not None else None,
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
    banner: StateBanner | None = None
    hosted: HostedSpend | None = None

    @property
    def decidable(self) -> bool:
        return bool(
            self.plan.state == Plan.State.AWAITING_APPROVAL
            and self.newest_version == self.plan.version
        )


def _planned(plan: Plan) -> dict[str, tuple[str, float, int]]:
    """Demand id -> (tenant, planned requests/s, priority); empty when the plan's problem
    cannot be read."""
    problem, _ = plan_problem_or_error(plan)
    return {
        d.id: (d.tenant, d.planned_requests_per_s, d.priority)
        for d in (problem.demands if problem else ())
    }


def _solution(plan: Plan) -> Solution | None:
    """The plan's typed solution; None when the stored document cannot be read."""
    try:
        return plan_solution(plan)
    except SolutionInvalid:
        return None


def plan_routing(plan: Plan) -> list[TenantRouting]:
    """Per tenant, where its planned traffic goes, from the stored solution."""
    routing: list[TenantRouting] = _PLAN_DERIVED.get(
        plan.pk, plan.created_at, lambda: _plan_routing(plan), "routing"
    )
    return routing


def _plan_routing(plan: Plan) -> list[TenantRouting]:
    planned = _planned(plan)
    solution = _solution(plan)
    unserved: dict[str, float] = defaultdict(float)
    for missed in solution.unserved if solution else ():
        unserved[missed.demand] += missed.requests_per_s
    rows: dict[str, list[RoutingRow]] = defaultdict(list)
    for route in solution.routing if solution else ():
        demand = route.demand
        rate = route.requests_per_s
        total = planned.get(demand, ("", 0.0, 0))[1]
        tenant = planned.get(demand, (demand, 0.0, 0))[0]
        rows[tenant].append(
            RoutingRow(
                demand=demand,
                region=route.region,
                shape=route.shape,
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
    planned = _planned(plan)
    reasons = unserved_reasons(plan.binding or [])
    solution = _solution(plan)
    out = []
    for row in solution.unserved if solution else ():
        demand = row.demand
        tenant, rate, _priority = planned.get(demand, (row.tenant, 0.0, 0))
        out.append(
            UnservedRow(
                demand=demand,
                tenant=tenant,
                priority=row.priority,
                requests_per_s=row.requests_per_s,
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
    rows: list[ReplayRow] = _PLAN_DERIVED.get(
        plan.pk, plan.created_at, lambda: _plan_replay(plan), "replay"
    )
    return rows


def _plan_replay(plan: Plan) -> list[ReplayRow]:
    solution = _solution(plan)
    verification = (solution.verification if solution else None) or {}
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
    decisions = list(plan.decisions.select_related("actor"))
    active = Plan.objects.filter(state=Plan.State.ACTIVE).only("pk", "version").first()
    return PlanPage(
        plan=plan,
        regions=regions,
        pool_error=error,
        routing=plan_routing(plan),
        unserved=plan_unserved(plan),
        # Sentences about unserved demand show with that demand; the rest say what binds.
        binding=[s for s in (plan.binding or []) if not s.startswith("demand ")],
        decisions=decisions,
        active=active,
        newest_version=newest,
        replay=plan_replay(plan),
        hosted=plan_hosted_spend(plan),
        banner=plan_state_banner(
            plan,
            decisions=decisions,
            active_version=active.version if active is not None else None,
            newest_version=newest,
        ),
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
    # An observation window's length (a chart joins two windows only if they are about that
    # far apart); None for a profile version, which holds until the next one.
    span: timedelta | None = None


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
            span=row.derivation.window_end - row.derivation.window_start,
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
class TenantAlertRow:
    """One tenant's drift alert: what changed (as its message opens), its share of its pool's
    drift (empty until the pool is priced) and the re-plan it asked for."""

    alert: DriftAlert
    change: str
    share: str
    run: ReplanRun | None


@dataclass(frozen=True)
class PoolAlertRow:
    """A pool's drift with its priced change (``drift.priced_change``: the figures its
    message states; None while pending or when pricing failed), each drifting tenant's
    share as priced, its tenant alerts and the re-plan they asked for."""

    alert: PoolDriftAlert
    change: PricedChange | None
    shares: list[tuple[str, str]]
    tenants: list[TenantAlertRow]
    run: ReplanRun | None


@dataclass(frozen=True)
class SignalAlertRow:
    """A pool's engine signal against its plan, as people read it ("175 ms", "15,000
    tokens"), and how far it may go ("at most 94 ms")."""

    alert: PoolSignalAlert
    measured: str
    reference: str
    limit: str


@dataclass(frozen=True)
class DriftPage:
    pools: list[PoolAlertRow]
    signals: list[SignalAlertRow]
    unpooled: list[TenantAlertRow]


_SHOWN = 500


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


def _signal_row(alert: PoolSignalAlert) -> SignalAlertRow:
    kind, ref, threshold = alert.kind, alert.reference_value, alert.threshold
    if kind == PoolSignalAlert.Kind.KV_CAPACITY:
        return SignalAlertRow(
            alert,
            measured=f"{alert.measured_value:,.0f} tokens",
            reference=f"{ref:,.0f} tokens",
            limit=f"at least {ref * (1 - threshold):,.0f} tokens",
        )
    if kind == PoolSignalAlert.Kind.QUEUE_TIME_P95:
        return SignalAlertRow(
            alert,
            measured=duration_text(alert.measured_value),
            reference="—",
            limit=f"at most {duration_text(threshold)}",
        )
    return SignalAlertRow(
        alert,
        measured=duration_text(alert.measured_value),
        reference=duration_text(ref),
        limit=f"at most {duration_text(ref * (1 + threshold))}",
    )


def drift_page(*, status: str | None) -> DriftPage:
    """The drift page: pool drifts (of ``status``; None: every status) with their priced
    change and their tenant alerts under them, the pools' engine signal alerts, and tenant
    alerts no pool drift holds yet."""
    pools = PoolDriftAlert.objects.select_related("model", "region").order_by(
        "-last_seen_at", "-pk"
    )
    signals = PoolSignalAlert.objects.select_related("model", "region", "shape").order_by(
        "-last_seen_at", "-pk"
    )
    loose = DriftAlert.objects.filter(pool_alert__isnull=True)
    if status:
        pools, signals, loose = (
            pools.filter(status=status),
            signals.filter(status=status),
            loose.filter(status=status),
        )
    shown = list(pools[:_SHOWN])
    members = DriftAlert.objects.filter(pool_alert__in=shown)
    related = ("tenant", "model", "region", "workload_class")
    tenant_alerts = list(
        members.select_related(*related).order_by("tenant__name", "kind", "-pk")
    ) + list(loose.select_related(*related).order_by("-last_seen_at", "-pk")[:_SHOWN])
    runs = _runs_by_alert(tenant_alerts)
    by_pool: dict[int, list[TenantAlertRow]] = defaultdict(list)
    unpooled: list[TenantAlertRow] = []
    by_pk = {pool.pk: pool for pool in shown}
    for alert in tenant_alerts:
        pool = by_pk.get(alert.pool_alert_id) if alert.pool_alert_id is not None else None
        if pool is not None and pool.status in PoolDriftAlert.ACTIVE and not alert.is_active:
            continue  # resolved before its pool's drift: no longer part of it
        priced = pool is not None and pool.pricing == PoolDriftAlert.Pricing.PRICED
        row = TenantAlertRow(
            alert=alert,
            change=drift_change_text(alert),
            share=share_text(alert.pool_share) if priced else "",
            run=runs.get(alert.pk),
        )
        if pool is None:
            unpooled.append(row)
        else:
            by_pool[pool.pk].append(row)
    rows = []
    for pool in shown:
        members_rows = by_pool.get(pool.pk, [])
        rows.append(
            PoolAlertRow(
                alert=pool,
                change=priced_change(pool),
                shares=[(t["tenant"], share_text(t["share"])) for t in pool.tenants]
                if pool.pricing == PoolDriftAlert.Pricing.PRICED
                else [],
                tenants=members_rows,
                run=next((r.run for r in members_rows if r.run is not None), None),
            )
        )
    return DriftPage(
        pools=rows,
        signals=[_signal_row(a) for a in signals[:_SHOWN]],
        unpooled=unpooled,
    )


def shapes_count() -> int:
    return ReplicaShape.objects.count()


# -- finance ------------------------------------------------------------------------------------

FINANCE_GROUPS = ("region", "accelerator")
# The page's choices: what to group by and which period (week is there for the short view).
FINANCE_GROUP_CHOICES = (("region", "Region"), ("accelerator", "GPU type"), ("tenant", "Tenant"))
FINANCE_PERIOD_CHOICES = (("month", "Month"), ("quarter", "Quarter"), ("week", "Week"))
# How many past periods the actuals table shows, per period.
FINANCE_ACTUALS_HORIZON = {"month": 6, "quarter": 4, "week": 8}


class FinanceQueryError(ValueError):
    """A page parameter outside its choices; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


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
class FinanceTotal:
    """One period's (or the whole horizon's) total: the forecast's sums over every group."""

    label: str
    start: datetime | None
    cost: float
    cost_low: float
    cost_high: float
    gpu_hours: float
    sized_by: str
    hosted_cost: float = 0.0

    @property
    def replica_cost(self) -> float:
        """The replicas' part of ``cost`` (the rest is hosted spend)."""
        return round(self.cost - self.hosted_cost, 2)


@dataclass(frozen=True)
class FinanceGroupTotal:
    """One group's total over the horizon, and its share of the whole."""

    name: str
    cost: float
    gpu_hours: float
    share: float
    hosted_cost: float = 0.0


@dataclass(frozen=True)
class FinanceActual:
    """Held against planned for one past period and group (the history report's row)."""

    period: str
    group: str
    source: str
    cost: float
    planned_cost: float | None
    variance_cost: float | None
    gpu_hours: float
    hosted_cost: float
    planned_gpu_hours: float | None
    variance_gpu_hours: float | None


@dataclass(frozen=True)
class FinancePage:
    error: str
    plan_version: int | None
    totals: list[tuple[datetime, float, float, float]]
    by_accelerator: dict[str, list[tuple[datetime, float]]]
    tables: list[FinanceTable]
    group_by: str = "region"
    period: str = "month"
    group_label: str = "Region"
    period_label: str = "Month"
    horizon: FinanceTotal | None = None
    period_totals: list[FinanceTotal] = field(default_factory=list)
    group_totals: list[FinanceGroupTotal] = field(default_factory=list)
    actuals: list[FinanceActual] = field(default_factory=list)
    api_query: str = ""
    actuals_csv_url: str = ""

    @property
    def has_hosted(self) -> bool:
        """Whether any figure on the page includes hosted spend (then it has its own column)."""
        return bool(
            (self.horizon is not None and self.horizon.hosted_cost)
            or any(a.hosted_cost for a in self.actuals)
        )


def _period_start(row: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(str(row["period_start"]).replace("Z", "+00:00"))


def _table(key: str, title: str, report: finance.Report, url_name: str, query: str) -> FinanceTable:
    # Hosted spend is a column of its own where the plan sends traffic to a hosted API; a
    # report without any shows as before (its CSV, the API's, keeps the column at 0).
    hosted = any(row.get("hosted_cost") for row in report.rows)
    return FinanceTable(
        key=key,
        title=title,
        columns=tuple(c for c in report.columns if hosted or c != "hosted_cost"),
        rows=list(report.rows),
        csv_url=f"{reverse(url_name)}?format=csv{query}",
        notes=list(report.notes),
    )


def finance_query(params: Mapping[str, str]) -> tuple[str, str]:
    """The page's (group_by, period) from its query string; ``FinanceQueryError`` naming the
    parameter for a value outside the choices."""
    group_by = params.get("group_by") or "region"
    period = params.get("period") or "month"
    groups = [g for g, _ in FINANCE_GROUP_CHOICES]
    periods = [p for p, _ in FINANCE_PERIOD_CHOICES]
    if group_by not in groups:
        raise FinanceQueryError("group_by", f"must be one of {', '.join(groups)}")
    if period not in periods:
        raise FinanceQueryError("period", f"must be one of {', '.join(periods)}")
    return group_by, period


def _sums(rows: list[dict[str, Any]], label: str, start: datetime | None) -> FinanceTotal:
    kinds = sorted({str(r["sized_by"]) for r in rows})
    return FinanceTotal(
        label=label,
        start=start,
        # Summed from the API's rounded figures, so the page shows what a client adding up
        # the API's rows gets.
        cost=round(sum(float(r["cost"] or 0.0) for r in rows), 2),
        cost_low=round(sum(float(r["cost_low"] or 0.0) for r in rows), 2),
        cost_high=round(sum(float(r["cost_high"] or 0.0) for r in rows), 2),
        gpu_hours=round(sum(float(r["gpu_hours"] or 0.0) for r in rows), 2),
        hosted_cost=round(sum(float(r.get("hosted_cost") or 0.0) for r in rows), 2),
        sized_by="+".join(kinds) if len(kinds) > 1 else (kinds[0] if kinds else ""),
    )


def finance_page(*, group_by: str = "region", period: str = "month") -> FinancePage:
    """The finance page for one grouping and period: totals over the horizon and per period,
    each group's total, actuals against forecast for past periods, cost by region and GPU
    type, commitments and the price of each promise. Every figure comes from the finance
    services' reports, as ``GET /api/finance/forecast/?period=…&group_by=…`` and
    ``/api/finance/history/`` serve them (totals are sums of their rows)."""
    group_label = dict(FINANCE_GROUP_CHOICES)[group_by]
    period_label = dict(FINANCE_PERIOD_CHOICES)[period]
    try:
        chosen = finance.finance_forecast(period=period, group_by=[group_by])
        forecast = finance.finance_forecast(period="month", group_by=FINANCE_GROUPS)
        commitments = finance.finance_commitments(period="month")
        promises = finance.finance_promises()
    except finance.NoActivePlan as exc:
        return FinancePage(str(exc), None, [], {}, [], group_by, period, group_label, period_label)
    history = finance.finance_history(
        period=period, group_by=[group_by], horizon=FINANCE_ACTUALS_HORIZON[period]
    )
    totals: dict[datetime, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    by_acc: dict[str, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    for row in forecast.rows:
        start = _period_start(row)
        totals[start][0] += float(row["cost"] or 0.0)
        totals[start][1] += float(row["cost_low"] or 0.0)
        totals[start][2] += float(row["cost_high"] or 0.0)
        by_acc[str(row["accelerator"])][start] += float(row["cost"] or 0.0)
    by_period: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in chosen.rows:
        by_period[str(row["period"])].append(row)
        by_group[str(row[group_by])].append(row)
    whole = _sums(list(chosen.rows), "Whole horizon", None)
    group_totals = [
        FinanceGroupTotal(
            name=name,
            cost=total.cost,
            gpu_hours=total.gpu_hours,
            share=total.cost / whole.cost if whole.cost > 0 else 0.0,
            hosted_cost=total.hosted_cost,
        )
        for name, rows in sorted(by_group.items())
        for total in [_sums(rows, name, None)]
    ]
    group_totals.sort(key=lambda g: (-g.cost, g.name))
    actuals = [
        FinanceActual(
            period=str(row["period"]),
            group=str(row[group_by]),
            source=str(row["source"]),
            cost=float(row["cost"]),
            hosted_cost=float(row.get("hosted_cost") or 0.0),
            planned_cost=row["planned_cost"],
            variance_cost=row["variance_cost"],
            gpu_hours=float(row["gpu_hours"]),
            planned_gpu_hours=row["planned_gpu_hours"],
            variance_gpu_hours=row["variance_gpu_hours"],
        )
        for row in history.rows
    ]
    group_query = "&period=month&group_by=" + ",".join(FINANCE_GROUPS)
    chosen_query = f"&period={period}&group_by={group_by}"
    return FinancePage(
        error="",
        plan_version=forecast.plan_version,
        totals=[(t, v[0], v[1], v[2]) for t, v in sorted(totals.items())],
        by_accelerator={a: sorted(points.items()) for a, points in sorted(by_acc.items())},
        group_by=group_by,
        period=period,
        group_label=group_label,
        period_label=period_label,
        horizon=whole,
        period_totals=[
            _sums(rows, label, _period_start(rows[0])) for label, rows in by_period.items()
        ],
        group_totals=group_totals,
        actuals=actuals,
        api_query=chosen_query.lstrip("&"),
        actuals_csv_url=(
            f"{reverse('finance-history')}?format=csv{chosen_query}"
            f"&horizon={FINANCE_ACTUALS_HORIZON[period]}"
        ),
        tables=[
            _table(
                "grouped",
                f"Cost by {period_label.lower()} and {group_label.lower()}",
                chosen,
                "finance-forecast",
                chosen_query,
            ),
            _table(
                "forecast",
                "Cost by month, region and GPU type",
                forecast,
                "finance-forecast",
                group_query,
            ),
            _table(
                "commitments",
                "Commitments: reserved, on-demand and spot GPUs per region and GPU type",
                commitments,
                "finance-commitments",
                "&period=month",
            ),
            _table("promises", "The price of each promise", promises, "finance-promises", ""),
        ],
    )


def tenant_cost(tenant: Tenant) -> tuple[list[dict[str, Any]], str, bool]:
    """The tenant's showback lines by month (usage, idle share, hosted spend, cost, per million
    tokens), or an empty list with the reason; and whether any line has hosted spend (the
    page shows that column only then)."""
    try:
        report = finance.finance_showback(period="month")
    except finance.NoActivePlan as exc:
        return [], str(exc), False
    rows = [row for row in report.rows if row.get("tenant") == tenant.name]
    return rows, "", any(row.get("hosted_cost") for row in rows)
