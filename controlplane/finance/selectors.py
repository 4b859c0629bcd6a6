"""Reads for finance: the active plan, the activation timeline, stored results, GPU prices."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from controlplane.finance.models import FinanceReport, FinanceSnapshot, PromisePricing
from controlplane.fleet.models import AcceleratorType
from controlplane.plans.models import Plan
from controlplane.plans.selectors import PLAN_DOCUMENTS
from controlplane.policies.models import Tenant


def tenant_names_except(*, name: str) -> list[str]:
    """Every tenant's name but ``name`` (what a report for one tenant must not mention)."""
    return list(Tenant.objects.exclude(name=name).values_list("name", flat=True))


def plan_active_with_rows() -> Plan | None:
    """The active plan, if any (its allocations and routing are read when a result is first
    computed, not on every request; so are its documents, ``PLAN_DOCUMENTS``, deferred: each
    is read on its first access)."""
    return Plan.objects.filter(state=Plan.State.ACTIVE).defer(*PLAN_DOCUMENTS).first()


@dataclass(frozen=True)
class ActiveSpan:
    """A plan and the time it was the active plan: [start, end), end None while it still is."""

    plan: Plan
    start: datetime
    end: datetime | None


def plan_activation_timeline(*, before: datetime) -> list[ActiveSpan]:
    """Every plan that was active before ``before``, oldest first, each until the next one's
    activation (the active plan until now: ``end`` None)."""
    plans = list(
        Plan.objects.filter(activated_at__isnull=False, activated_at__lt=before)
        .prefetch_related("allocations", "routing")
        .order_by("activated_at", "version")
    )
    spans = []
    for i, plan in enumerate(plans):
        assert plan.activated_at is not None
        following = plans[i + 1].activated_at if i + 1 < len(plans) else None
        spans.append(ActiveSpan(plan=plan, start=plan.activated_at, end=following))
    return spans


# The snapshot's bulk: megabytes on a large fleet. A request whose report is stored needs the
# snapshot's id only, so these are read when a report is first built (one query each, on first
# access), not on every request.
SNAPSHOT_BULK = ("pools", "loads", "gpu_pools", "arrays")


def snapshot_find(*, plan: Plan, start: datetime, hours: int) -> FinanceSnapshot | None:
    """The stored snapshot, its bulk fields (``SNAPSHOT_BULK``) deferred."""
    return (
        FinanceSnapshot.objects.filter(plan=plan, start=start, hours=hours)
        .defer(*SNAPSHOT_BULK)
        .first()
    )


def snapshots_covering(*, start: datetime) -> QuerySet[FinanceSnapshot]:
    """Stored snapshots whose horizon starts at or before ``start``, oldest first."""
    return FinanceSnapshot.objects.filter(start__lte=start).order_by("created_at", "pk")


def report_find(*, snapshot: FinanceSnapshot, endpoint: str, params: str) -> FinanceReport | None:
    """The stored report, its ``rows`` deferred (read on first access: a process that has
    them in memory already does not read them again)."""
    return (
        FinanceReport.objects.filter(snapshot=snapshot, endpoint=endpoint, params=params)
        .defer("rows")
        .first()
    )


def promise_pricing_find(*, plan: Plan) -> PromisePricing | None:
    return PromisePricing.objects.filter(plan=plan).first()


def reserved_prices() -> dict[str, float]:
    """Reserved price per GPU-hour of each accelerator type, by name (before the region's
    multiplier)."""
    return dict(AcceleratorType.objects.values_list("name", "reserved_price_per_gpu_hour"))
