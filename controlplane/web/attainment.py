"""SLO attainment per tenant: what telemetry measured (p95 time to first token, and p95
inter-token latency where the engine exposes it) in the tenant's newest observation window,
and the active plan's replay verdict, against the p95 TTFT objective of the tenant's tier
(and its p95 ITL objective, where the tier sets one).

A breach is a measured p95 TTFT above the tier's objective, a measured p95 ITL above the
tier's ITL objective, a replay that misses the TTFT objective, or demand the active plan
leaves unserved (those requests get no first token at all). The
fleet overview lists breaches first; the tenant page shows its own row. Both read a fixed
number of queries, however many tenants there are.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import OuterRef, Subquery

from controlplane.plans.models import Plan
from controlplane.policies.models import Tenant
from controlplane.telemetry.models import ObservedWorkload
from controlplane.telemetry.pool_signals import duration_text
from controlplane.web.selectors import ReplayRow, plan_replay, plan_routing, window_label


@dataclass(frozen=True)
class Measured:
    """The newest observation window of one tenant: its worst label set's p95 TTFT
    (seconds; None when no label set carries one), where that was, and the worst p95
    inter-token latency (None: not exposed)."""

    window: str
    ttft_p95_s: float | None
    where: str
    itl_p95_s: float | None


@dataclass(frozen=True)
class SloAttainment:
    """One tenant's attainment of its tier's p95 TTFT objective (seconds) and, where the
    tier has one, its p95 ITL objective."""

    tenant: str
    tier: str
    objective_s: float
    measured: Measured | None
    replay: ReplayRow | None
    plan_version: int | None
    # Requests/s (planned units) of the tenant the active plan leaves unserved, and planned.
    unserved_requests_per_s: float = 0.0
    planned_requests_per_s: float = 0.0
    itl_objective_s: float | None = None

    @property
    def unserved_breach(self) -> bool:
        return self.unserved_requests_per_s > 0

    @property
    def measured_breach(self) -> bool:
        m = self.measured
        return m is not None and m.ttft_p95_s is not None and m.ttft_p95_s > self.objective_s

    @property
    def itl_breach(self) -> bool:
        m = self.measured
        return (
            self.itl_objective_s is not None
            and m is not None
            and m.itl_p95_s is not None
            and m.itl_p95_s > self.itl_objective_s
        )

    @property
    def replay_breach(self) -> bool:
        return self.replay is not None and self.replay.holds is False

    @property
    def breach(self) -> bool:
        return self.measured_breach or self.itl_breach or self.replay_breach or self.unserved_breach

    @property
    def verdict(self) -> str:
        """One of breach, met (measured or replayed within the objective) and unknown."""
        if self.breach:
            return "breach"
        measured = self.measured is not None and self.measured.ttft_p95_s is not None
        replayed = self.replay is not None and self.replay.holds is not None
        return "met" if measured or replayed else "unknown"

    @property
    def breaches(self) -> list[str]:
        """Each breach in a sentence."""
        out = []
        objective = duration_text(self.objective_s)
        m = self.measured
        if self.measured_breach and m is not None and m.ttft_p95_s is not None:
            out.append(
                f"measured p95 TTFT {duration_text(m.ttft_p95_s)} against the {objective} "
                f"objective of tier {self.tier} ({m.where}, {m.window})"
            )
        if self.itl_breach and m is not None and m.itl_p95_s is not None:
            assert self.itl_objective_s is not None
            out.append(
                f"measured p95 ITL {duration_text(m.itl_p95_s)} against the "
                f"{duration_text(self.itl_objective_s)} ITL objective of tier {self.tier} "
                f"({m.window})"
            )
        r = self.replay
        if self.replay_breach and r is not None:
            worst = duration_text(r.worst_s) if r.worst_s is not None else "never served"
            out.append(
                f"plan v{self.plan_version} under replay: p95 TTFT {worst} with "
                f"{r.worst_scenario or 'all up'} against the "
                f"{duration_text(r.objective_s) if r.objective_s is not None else objective} "
                "objective"
            )
        if self.unserved_breach:
            out.append(
                f"plan v{self.plan_version} leaves {_rate(self.unserved_requests_per_s)} of "
                f"{_rate(self.planned_requests_per_s)} req/s unserved"
            )
        return out


def _rate(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".") if value >= 0.01 else f"{value:.2g}"


def _measured(tenant_names: list[str] | None) -> dict[str, Measured]:
    """Per tenant, its newest observation window (one query)."""
    newest = (
        ObservedWorkload.objects.filter(tenant=OuterRef("tenant"))
        .order_by("-derivation__window_end", "-derivation_id")
        .values("derivation_id")[:1]
    )
    rows = ObservedWorkload.objects.filter(derivation_id=Subquery(newest)).select_related(
        "derivation"
    )
    if tenant_names is not None:
        rows = rows.filter(tenant__in=tenant_names)
    by_tenant: dict[str, list[ObservedWorkload]] = {}
    for row in rows.order_by("tenant", "model", "region", "workload_class"):
        by_tenant.setdefault(row.tenant, []).append(row)
    out = {}
    for name, found in by_tenant.items():
        timed = [r for r in found if r.ttft_p95_s is not None]
        worst = max(timed, key=lambda r: r.ttft_p95_s or 0.0) if timed else None
        itl = [r.itl_p95_s for r in found if r.itl_p95_s is not None]
        first = found[0].derivation
        out[name] = Measured(
            window=window_label(first.window_start, first.window_end),
            ttft_p95_s=worst.ttft_p95_s if worst is not None else None,
            where=(
                f"{worst.model} @ {worst.region} / {worst.workload_class}"
                if worst is not None
                else ""
            ),
            itl_p95_s=max(itl) if itl else None,
        )
    return out


def slo_attainment(*, active: Plan | None, tenant: Tenant | None = None) -> list[SloAttainment]:
    """Every tenant's attainment (or only ``tenant``'s), breaches first, then by name.
    ``active`` is the active plan, whose replay verdicts are read (memoised per plan)."""
    tenants = Tenant.objects.select_related("tier").order_by("name")
    if tenant is not None:
        tenants = tenants.filter(pk=tenant.pk)
    chosen = list(tenants)
    measured = _measured([tenant.name] if tenant is not None else None)
    replay = {row.tenant: row for row in plan_replay(active)} if active is not None else {}
    routed = {g.tenant: g for g in plan_routing(active)} if active is not None else {}
    rows = [
        SloAttainment(
            tenant=t.name,
            tier=t.tier.name,
            objective_s=t.tier.p95_ttft_slo_s,
            itl_objective_s=t.tier.p95_itl_slo_s,
            measured=measured.get(t.name),
            replay=replay.get(t.name),
            plan_version=active.version if active is not None else None,
            unserved_requests_per_s=routed[t.name].unserved_requests_per_s
            if t.name in routed
            else 0.0,
            planned_requests_per_s=routed[t.name].planned_requests_per_s
            if t.name in routed
            else 0.0,
        )
        for t in chosen
    ]
    return sorted(rows, key=lambda r: (not r.breach, r.tenant))


def tenant_attainment(*, active: Plan | None, tenant: Tenant) -> SloAttainment | None:
    """``tenant``'s attainment row."""
    rows = slo_attainment(active=active, tenant=tenant)
    return rows[0] if rows else None
