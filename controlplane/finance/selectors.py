"""Reads for finance: the active plan, the activation timeline, stored results, GPU prices."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Min, Q, QuerySet

from controlplane.emission.models import OutboxEntry, ShadowDiff
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


@dataclass(frozen=True)
class RegionDelivery:
    """What the sinks acknowledged of one plan's allocation for one region: ``delivered_at``
    the first acknowledgement by any sink, None when it was sent and never delivered
    (pending, failed, or superseded by a newer plan)."""

    delivered_at: datetime | None


def region_deliveries(*, plan_ids: list[int]) -> dict[tuple[int, str], RegionDelivery]:
    """By (plan id, region): the delivery state of every region allocation the outbox holds
    for those plans, and of every one a region in shadow mode kept unsent (never delivered).
    A (plan, region) absent from the answer was never sent to a sink."""
    rows = (
        OutboxEntry.objects.filter(plan_id__in=plan_ids)
        .values("plan_id", "region")
        .annotate(first=Min("delivered_at", filter=Q(status=OutboxEntry.Status.DELIVERED)))
    )
    found = {(row["plan_id"], row["region"]): RegionDelivery(row["first"]) for row in rows}
    for plan_id, region in ShadowDiff.objects.filter(plan_id__in=plan_ids).values_list(
        "plan_id", "region"
    ):
        found.setdefault((plan_id, region), RegionDelivery(None))
    return found


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


def spot_prices() -> dict[str, float | None]:
    """Spot price per GPU-hour of each accelerator type, by name (before the region's
    multiplier); None where no spot price is stored."""
    return dict(AcceleratorType.objects.values_list("name", "spot_price_per_gpu_hour"))
