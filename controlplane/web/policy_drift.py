"""Where the active plan and current policy disagree: the active plan was built from each
tenant's policy as it stood then (its stored problem keeps, per demand, the tier, the p95
TTFT objective, the failure promise, the priority, the regions it may be served in, its home
region and its spill round trip); policy may have changed since, e.g. after the plan that
would have applied the change was rejected. Each difference is named, with what the active
plan does that the current policy no longer allows, until a re-plan applies it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controlplane.fleet.models import Region
from controlplane.plans.models import Plan
from controlplane.plans.selectors import Demand, plan_problem_or_error
from controlplane.policies.models import Tenant
from controlplane.web.selectors import TenantRouting, plan_derived, plan_routing


@dataclass(frozen=True)
class PlannedPolicy:
    """One tenant's policy as its demands in a plan's problem carry it."""

    tier: str
    ttft_slo_s: float | None
    promise: str
    priority: int
    allowed_regions: tuple[str, ...]
    home_region: str | None  # of its demands without a region of their own
    max_spill_rtt_ms: float | None  # None: no spill
    homes: Mapping[str, str] = field(default_factory=dict)  # demand id -> its home region


@dataclass(frozen=True)
class PolicyDifference:
    """One policy field, as the plan was built from it and as it is now."""

    field: str
    planned: str
    now: str


@dataclass(frozen=True)
class PolicyNotice:
    tenant: str
    plan_version: int
    differences: list[PolicyDifference]
    # What the active plan does that the current policy does not allow, in sentences.
    conflicts: list[str]

    @property
    def summary(self) -> str:
        changed = "; ".join(f"{d.field} {d.planned} → {d.now}" for d in self.differences)
        return f"policy changed since plan v{self.plan_version} was built: {changed}"


def _planned_policies(plan: Plan) -> dict[str, PlannedPolicy]:
    problem, _ = plan_problem_or_error(plan)
    by_tenant: dict[str, list[Demand]] = defaultdict(list)
    for demand in problem.demands if problem else ():
        by_tenant[demand.tenant].append(demand)
    out = {}
    for tenant, demands in by_tenant.items():
        # A demand with "@region" in its id is a profile of its own region; the others carry
        # the tenant's home region.
        plain = [d for d in demands if "@" not in d.id]
        first = (plain or demands)[0]
        out[tenant] = PlannedPolicy(
            tier=first.tier or "",
            ttft_slo_s=first.ttft_slo_s,
            promise=first.promise,
            priority=first.priority,
            allowed_regions=tuple(sorted(first.allowed_regions)),
            home_region=plain[0].home_region if plain else None,
            max_spill_rtt_ms=first.max_spill_rtt_ms,
            homes={d.id: d.home_region for d in demands},
        )
    return out


def planned_policies(plan: Plan) -> dict[str, PlannedPolicy]:
    """Per tenant, the policy ``plan`` was built from (memoised per plan)."""
    policies: dict[str, PlannedPolicy] = plan_derived(
        plan, "policies", lambda: _planned_policies(plan)
    )
    return policies


def _spill(rtt: float | None) -> str:
    return "not allowed" if rtt is None else f"allowed up to {rtt:g} ms"


def _seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:g} s"


def _rate(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _differences(
    planned: PlannedPolicy, tenant: Tenant, allowed: Sequence[str]
) -> list[PolicyDifference]:
    tier = tenant.tier
    rtt = tenant.max_spill_rtt_ms if tenant.spill_allowed else None
    pairs = [
        ("tier", planned.tier, tier.name),
        ("p95 TTFT objective", _seconds(planned.ttft_slo_s), _seconds(tier.p95_ttft_slo_s)),
        ("failure promise", planned.promise, tier.failure_promise),
        ("priority", str(planned.priority), str(tier.priority)),
        (
            "regions it may be served in",
            ", ".join(planned.allowed_regions) or "none",
            ", ".join(allowed) or "none",
        ),
        ("spill", _spill(planned.max_spill_rtt_ms), _spill(rtt)),
    ]
    if planned.home_region is not None:
        pairs.append(("home region", planned.home_region, tenant.home_region.name))
    return [PolicyDifference(name, was, now) for name, was, now in pairs if was != now]


def _conflicts(
    planned: PlannedPolicy, tenant: Tenant, allowed: Sequence[str], routing: TenantRouting | None
) -> list[str]:
    """What the plan routes that current policy forbids: outside the allowed regions, or
    away from home when spill is no longer allowed."""
    if routing is None:
        return []
    outside: dict[str, float] = defaultdict(float)
    spilled: dict[str, float] = defaultdict(float)
    for row in routing.rows:
        home = planned.homes.get(row.demand, tenant.home_region.name)
        if row.region not in allowed:
            outside[row.region] += row.requests_per_s
        elif row.region != home and not tenant.spill_allowed:
            spilled[row.region] += row.requests_per_s
    out = []
    if spilled:
        where = ", ".join(f"{_rate(v)} req/s to {r}" for r, v in sorted(spilled.items()))
        out.append(
            f"the active plan routes {where} by spill (away from its home region), which its "
            "policy no longer allows"
        )
    if outside:
        where = ", ".join(f"{_rate(v)} req/s to {r}" for r, v in sorted(outside.items()))
        out.append(f"the active plan routes {where}, outside the regions its policy now allows")
    return out


def policy_notices(*, active: Plan | None, tenant: Tenant | None = None) -> list[PolicyNotice]:
    """Each tenant (or only ``tenant``) whose current policy differs from the one the active
    plan was built from, by name. Four queries, however many tenants."""
    if active is None:
        return []
    planned = planned_policies(active)
    tenants = (
        Tenant.objects.select_related("tier", "home_region")
        .prefetch_related("residency_regions")
        .filter(name__in=list(planned))
        .order_by("name")
    )
    if tenant is not None:
        tenants = tenants.filter(pk=tenant.pk)
    every_region = list(Region.objects.all())
    routing = {group.tenant: group for group in plan_routing(active)}
    notices = []
    for t in tenants:
        allowed = [r.name for r in t.allowed_regions(every_region)]
        was = planned[t.name]
        differences = _differences(was, t, allowed)
        if differences:
            notices.append(
                PolicyNotice(
                    tenant=t.name,
                    plan_version=active.version,
                    differences=differences,
                    conflicts=_conflicts(was, t, allowed, routing.get(t.name)),
                )
            )
    return notices
