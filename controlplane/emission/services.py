"""Emission services: queue an activated plan's region documents, and deliver them.

``outbox_enqueue_for_plan`` runs inside the plan's activation transaction (``plan_activate``
calls it): the outbox rows commit with the activation or not at all, and a dispatch is kicked
once the transaction has committed. ``outbox_dispatch`` is what the periodic task and that kick
run: it claims due rows one at a time with a conditional UPDATE, delivers each outside any
transaction, and records the outcome only while its claim still holds.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from django.db import OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from controlplane.core.schedule import ScheduledTask
from controlplane.core.tasks import task_send
from controlplane.emission import sinks
from controlplane.emission.conf import emission_settings
from controlplane.emission.models import AllocationSink, DeliveryAttempt, OutboxEntry, ShadowDiff
from controlplane.emission.payload import (
    AllocationRow,
    HostedRouteRow,
    PlanSnapshot,
    RoutingRow,
    ShapeServing,
    region_documents,
)
from controlplane.fleet.models import Region, ReplicaShape
from controlplane.plans.models import Plan
from controlplane.plans.selectors import plan_problem_or_error, plan_solution
from controlplane.policies.models import TenantQuota
from planner.errors import PlannerInputError

logger = logging.getLogger(__name__)

# Errors are kept for people, not for parsing: this many characters of each.
ERROR_CHARS = 2000
# SQLite "locked" answers retried per statement, with waits doubling from 5 ms to 200 ms.
SQLITE_LOCK_RETRIES = 40

T = TypeVar("T")


def _statement(operation: Callable[[], T]) -> T:
    """Run one short autocommit statement, retrying while SQLite answers "locked".

    SQLite admits one writer at a time. Its busy timeout covers most waits, but a shared-cache
    database (the test suite's in-memory one) and a read lock that must become a write lock
    answer "locked" at once instead of waiting. Dispatchers only ever run single statements in
    autocommit, so repeating the statement is safe. PostgreSQL waits on row locks instead and
    never raises this.
    """
    for attempt in range(SQLITE_LOCK_RETRIES):
        try:
            return operation()
        except OperationalError as exc:
            retryable = (
                connection.vendor == "sqlite"
                and "locked" in str(exc)
                and not connection.in_atomic_block
                and attempt < SQLITE_LOCK_RETRIES - 1
            )
            if not retryable:
                raise
            time.sleep(min(0.2, 0.005 * 2**attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def idempotency_key(*, plan: Plan, region: str, sink: AllocationSink) -> str:
    """The key of one plan's document for one region and sink: stable across retries."""
    return f"headroom:plan-v{plan.version}:{region}:sink-{sink.pk}"


def shape_serving(*, names: set[str]) -> dict[str, ShapeServing]:
    """How a cluster starts each named shape, from its records as they are now."""
    shapes = ReplicaShape.objects.filter(name__in=names).select_related("model", "accelerator")
    return {
        shape.name: ShapeServing(
            image=shape.container_image,
            model_path=shape.served_model_path,
            served_model_name=shape.model.name,
            tensor_parallel_size=shape.gpus_per_replica,
            max_model_len=shape.max_model_len,
            extra_args=tuple(str(a) for a in shape.extra_args or ()),
            gpu_product=shape.accelerator.node_label_value,
        )
        for shape in shapes
    }


def plan_snapshot(*, plan: Plan) -> PlanSnapshot:
    """The plan's allocations and routing as plain rows (the payload builder's input), with
    how a cluster starts each of its shapes as the shapes' records say at this moment (the
    activation: the outbox keeps the documents built then)."""
    allocations = list(plan.allocations.all())
    problem, problem_error = plan_problem_or_error(plan)
    hosted: tuple[HostedRouteRow, ...] = ()
    unserved: dict[str, float] = {}
    solution_error = ""
    try:
        solution = plan_solution(plan)
    except PlannerInputError as error:
        solution_error = str(error)
    else:
        hosted = tuple(
            HostedRouteRow(
                demand=h.demand,
                provider=h.provider,
                requests_per_s=h.requests_per_s,
                tokens_per_minute=h.tokens_per_minute,
                cost_per_hour=h.cost_per_hour,
            )
            for h in solution.hosted or ()
        )
        for row in solution.unserved:
            unserved[row.demand] = unserved.get(row.demand, 0.0) + row.requests_per_s
    return PlanSnapshot(
        plan_id=int(plan.pk),
        version=plan.version,
        inputs_hash=plan.inputs_hash,
        created_at=plan.created_at,
        activated_at=plan.activated_at or timezone.now(),
        problem=problem,
        problem_error=problem_error,
        allocations=tuple(
            AllocationRow(
                region=a.region,
                zone=a.zone,
                shape=a.shape,
                accelerator=a.accelerator,
                gpus_per_replica=a.gpus_per_replica,
                replicas=a.replicas,
                cost_per_hour=a.cost_per_hour,
            )
            for a in allocations
        ),
        routing=tuple(
            RoutingRow(
                demand=r.demand,
                tenant=r.tenant,
                region=r.region,
                shape=r.shape,
                requests_per_s=r.requests_per_s,
            )
            for r in plan.routing.all()
        ),
        serving=shape_serving(names={a.shape for a in allocations}),
        quota_replica_s_per_s={
            quota.tenant.name: quota.budget_rate_replica_s_per_s
            for quota in TenantQuota.objects.select_related("tenant")
        },
        hosted=hosted,
        unserved=unserved,
        solution_error=solution_error,
    )


def shadow_regions() -> set[str]:
    """The regions in shadow mode: their plans are diffed, never sent."""
    return set(
        Region.objects.filter(actuation=Region.Actuation.SHADOW).values_list("name", flat=True)
    )


def _allocation_rows(plan: Plan | None, region: str) -> dict[tuple[str, str], Any]:
    if plan is None:
        return {}
    return {(a.zone, a.shape): a for a in plan.allocations.filter(region=region)}


def shadow_diff_record(*, plan: Plan, region: str) -> ShadowDiff | None:
    """Record what ``plan`` would change in ``region`` against the allocation a sink last
    acknowledged there (nothing, when none was ever delivered); None when both are empty.
    Recording it again for the same plan and region keeps the first record."""
    found = ShadowDiff.objects.filter(plan=plan, region=region).first()
    if found is not None:
        return found
    last = (
        OutboxEntry.objects.filter(region=region, status=OutboxEntry.Status.DELIVERED)
        .exclude(plan=plan)
        .select_related("plan")
        .order_by("-delivered_at", "-pk")
        .first()
    )
    delivered_plan = last.plan if last is not None else None
    before = _allocation_rows(delivered_plan, region)
    after = _allocation_rows(plan, region)
    if not before and not after:
        return None
    rows = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        either = new if new is not None else old
        assert either is not None  # the key is in one of them
        rows.append(
            {
                "zone": key[0],
                "shape": key[1],
                "accelerator": either.accelerator,
                "gpus_per_replica": either.gpus_per_replica,
                "delivered": old.replicas if old is not None else 0,
                "planned": new.replicas if new is not None else 0,
                "delivered_cost_per_hour": old.cost_per_hour if old is not None else 0.0,
                "planned_cost_per_hour": new.cost_per_hour if new is not None else 0.0,
            }
        )
    rows.sort(key=lambda r: (r["delivered"] == r["planned"], r["zone"], r["shape"]))
    return ShadowDiff.objects.create(
        plan=plan,
        region=region,
        delivered_plan=delivered_plan,
        rows=rows,
        delivered_replicas=sum(a.replicas for a in before.values()),
        planned_replicas=sum(a.replicas for a in after.values()),
        delivered_gpus=sum(a.replicas * a.gpus_per_replica for a in before.values()),
        planned_gpus=sum(a.replicas * a.gpus_per_replica for a in after.values()),
        delivered_cost_per_hour=sum(a.cost_per_hour for a in before.values()),
        planned_cost_per_hour=sum(a.cost_per_hour for a in after.values()),
    )


def outbox_enqueue_for_plan(*, plan: Plan) -> list[OutboxEntry]:
    """Queue the plan's document for every region and every enabled sink; for a region in
    shadow mode, record what the plan would change there instead (``shadow_diff_record``)
    and send nothing.

    Call it inside the transaction that activates the plan. Calling it again for the same plan
    adds nothing (the idempotency key is unique), but puts that plan's superseded or failed
    rows back in the queue. Rows of older plans still waiting for the same sink and region are
    superseded: only the newest plan's state is worth delivering. Returns the plan's rows.
    """
    shadow = shadow_regions()
    if shadow:
        with transaction.atomic():
            for region in sorted(shadow):
                shadow_diff_record(plan=plan, region=region)
    sinks_enabled = list(AllocationSink.objects.filter(enabled=True).order_by("pk"))
    if not sinks_enabled:
        return []
    documents = {
        region: document
        for region, document in region_documents(plan_snapshot(plan=plan)).items()
        if region not in shadow
    }
    now = timezone.now()
    with transaction.atomic():
        for sink in sinks_enabled:
            for region, document in documents.items():
                OutboxEntry.objects.filter(
                    sink=sink,
                    region=region,
                    status=OutboxEntry.Status.PENDING,
                    plan__version__lt=plan.version,
                ).update(
                    status=OutboxEntry.Status.SUPERSEDED,
                    last_error=f"superseded by plan v{plan.version}",
                    updated_at=now,
                )
                entry, created = OutboxEntry.objects.get_or_create(
                    idempotency_key=idempotency_key(plan=plan, region=region, sink=sink),
                    defaults={
                        "plan": plan,
                        "sink": sink,
                        "region": region,
                        "payload": document,
                        "next_attempt_at": now,
                        "created_at": now,
                        "updated_at": now,
                    },
                )
                if not created and entry.status in (
                    OutboxEntry.Status.SUPERSEDED,
                    OutboxEntry.Status.FAILED,
                ):
                    OutboxEntry.objects.filter(pk=entry.pk, status=entry.status).update(
                        status=OutboxEntry.Status.PENDING, next_attempt_at=now, updated_at=now
                    )
        transaction.on_commit(outbox_kick, robust=True)
    return list(OutboxEntry.objects.filter(plan=plan).order_by("sink_id", "region"))


def outbox_kick() -> None:
    """Ask a worker to dispatch now (after a commit); the periodic run is the safety net."""
    task_send(DISPATCH_TASK)


def retry_delay_s(attempts: int, *, rng: random.Random | None = None) -> float:
    """Seconds before attempt ``attempts + 1``: exponential from the base, capped, jittered.

    The delay doubles per attempt (base, 2·base, 4·base, …, at most the cap) and is then
    scaled by a uniform factor in [0.5, 1], so dispatchers retrying many rows after an outage
    do not all come back in the same second, while each delay still grows.
    """
    conf = emission_settings()
    exponent = min(max(attempts - 1, 0), 62)
    delay = min(conf.backoff_max_s, conf.backoff_base_s * 2.0**exponent)
    return delay * (0.5 + 0.5 * (rng or random).random())


@dataclass
class DispatchReport:
    dispatcher: str
    claimed: int = 0
    delivered: int = 0
    retrying: int = 0
    failed: int = 0
    lost_claims: int = 0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "dispatcher": self.dispatcher,
            "claimed": self.claimed,
            "delivered": self.delivered,
            "retrying": self.retrying,
            "failed": self.failed,
            "lost_claims": self.lost_claims,
        }


def _dispatcher_name() -> str:
    name = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{uuid.uuid4().hex[:8]}"
    return name[-128:]


def _claim(entry_id: int, *, claim: str, now: datetime, hold_s: float) -> bool:
    """Take one row if it is still claimable: True when this dispatcher got it.

    One conditional UPDATE, checked by its row count: of two dispatchers racing for a row,
    the database lets exactly one match the condition (a row lock on PostgreSQL, the write
    lock on SQLite). Never check-then-act.
    """
    taken = _statement(
        lambda: (
            OutboxEntry.objects.claimable(now)
            .filter(pk=entry_id)
            .update(
                status=OutboxEntry.Status.DELIVERING,
                claimed_by=claim,
                claim_expires_at=now + timedelta(seconds=hold_s),
                attempts=F("attempts") + 1,
                last_attempt_at=now,
                updated_at=now,
            )
        )
    )
    return taken == 1


def outbox_dispatch(
    *, limit: int | None = None, now: datetime | None = None, rng: random.Random | None = None
) -> DispatchReport:
    """Deliver the due outbox rows (at most ``limit``, default ``HEADROOM_EMISSION_BATCH``).

    ``now`` pins the clock for the whole run (tests move time forward with it); by default
    each claim reads the clock afresh. A row that fails for a reason worth retrying goes back
    to pending with its next attempt pushed out by ``retry_delay_s`` (or the receiver's
    Retry-After, if longer); one refused for good is failed and stays visible.
    """
    conf = emission_settings()
    report = DispatchReport(dispatcher=_dispatcher_name())
    clock: Callable[[], datetime] = (lambda: now) if now is not None else timezone.now
    # A region put in shadow mode after its rows were queued: they wait, unsent (a newer
    # plan supersedes them; they go out if the region is actuated again first).
    shadow = _statement(shadow_regions)
    candidates = _statement(
        lambda: list(
            OutboxEntry.objects.claimable(clock())
            .exclude(region__in=sorted(shadow))
            .order_by("next_attempt_at", "pk")
            .values_list("pk", "sink__timeout_s")[: limit or conf.batch]
        )
    )
    for entry_id, timeout_s in candidates:
        started = clock()
        # A claim outlives the slowest attempt the sink allows, with room to record it.
        hold_s = max(conf.claim_s, 2.0 * float(timeout_s) + 30.0)
        if not _claim(entry_id, claim=report.dispatcher, now=started, hold_s=hold_s):
            continue
        report.claimed += 1
        entry = _statement(partial(OutboxEntry.objects.select_related("sink").get, pk=entry_id))
        try:
            result = sinks.deliver(
                entry.sink,
                sinks.Delivery(entry.idempotency_key, entry.region, entry.payload),
            )
        except Exception as exc:  # one bad row must not stop the others
            logger.exception("delivering outbox entry %s failed", entry_id)
            result = sinks.DeliveryResult(sinks.Outcome.RETRY, error=f"internal error: {exc!r}")
        outcome = _finish(
            entry, result, claim=report.dispatcher, started=started, clock=clock, rng=rng
        )
        _count(report, entry, outcome, result)
    return report


def _finish(
    entry: OutboxEntry,
    result: sinks.DeliveryResult,
    *,
    claim: str,
    started: datetime,
    clock: Any,
    rng: random.Random | None,
) -> DeliveryAttempt.Outcome:
    """Record the outcome if the claim still holds, and log the attempt either way."""
    finished: datetime = clock()
    error = result.error[:ERROR_CHARS]
    changes: dict[str, Any] = {
        "claimed_by": "",
        "claim_expires_at": None,
        "updated_at": finished,
        "last_error": error,
    }
    if result.outcome is sinks.Outcome.DELIVERED:
        changes |= {"status": OutboxEntry.Status.DELIVERED, "delivered_at": finished}
    elif result.outcome is sinks.Outcome.FAILED:
        changes["status"] = OutboxEntry.Status.FAILED
    else:
        delay = retry_delay_s(entry.attempts, rng=rng)
        if result.retry_after_s is not None:
            delay = max(delay, min(result.retry_after_s, emission_settings().backoff_max_s))
        changes |= {
            "status": OutboxEntry.Status.PENDING,
            "next_attempt_at": finished + timedelta(seconds=delay),
        }
    kept = _statement(
        lambda: OutboxEntry.objects.filter(pk=entry.pk).held_by(claim).update(**changes)
    )
    outcome = {
        sinks.Outcome.DELIVERED: DeliveryAttempt.Outcome.DELIVERED,
        sinks.Outcome.RETRY: DeliveryAttempt.Outcome.RETRY,
        sinks.Outcome.FAILED: DeliveryAttempt.Outcome.FAILED,
    }[result.outcome]
    if kept != 1:
        # Another dispatcher took the row over after this claim expired; its record stands.
        outcome = DeliveryAttempt.Outcome.LOST_CLAIM
    _statement(
        lambda: DeliveryAttempt.objects.create(
            entry=entry,
            number=entry.attempts,
            dispatcher=claim,
            started_at=started,
            finished_at=finished,
            outcome=outcome,
            status_code=result.status_code,
            error=error or result.detail[:ERROR_CHARS],
        )
    )
    return outcome


def _count(
    report: DispatchReport,
    entry: OutboxEntry,
    outcome: DeliveryAttempt.Outcome,
    result: sinks.DeliveryResult,
) -> None:
    if outcome == DeliveryAttempt.Outcome.DELIVERED:
        report.delivered += 1
        return
    if outcome == DeliveryAttempt.Outcome.LOST_CLAIM:
        report.lost_claims += 1
    elif outcome == DeliveryAttempt.Outcome.FAILED:
        report.failed += 1
    else:
        report.retrying += 1
    report.errors.append(f"{entry.idempotency_key}: {result.error}")


def outbox_entry_retry(*, entry: OutboxEntry) -> bool:
    """Put a failed row back in the queue now; False if it was not failed.

    For an operator who fixed what the destination refused (a wrong URL, a secret the
    receiver did not know). The attempt count is kept, so the backoff continues from it.
    Superseded rows are not offered: delivering them would roll the region back.
    """
    now = timezone.now()
    requeued = OutboxEntry.objects.filter(pk=entry.pk, status=OutboxEntry.Status.FAILED).update(
        status=OutboxEntry.Status.PENDING, next_attempt_at=now, updated_at=now
    )
    if requeued:
        transaction.on_commit(outbox_kick, robust=True)
    entry.refresh_from_db()
    return requeued == 1


# -- schedule -------------------------------------------------------------------------------------

DISPATCH_SCHEDULE_NAME = "emission: dispatch the outbox"
DISPATCH_TASK = "headroom.emission.dispatch"
DISPATCH_EVERY_S = 30


def emission_schedule() -> tuple[ScheduledTask, ...]:
    """The outbox dispatch every 30 s (also created by migration ``emission.0003``)."""
    return (
        ScheduledTask(
            DISPATCH_SCHEDULE_NAME,
            DISPATCH_TASK,
            DISPATCH_EVERY_S,
            "Deliver due allocation outbox rows to their sinks (retries included).",
        ),
    )
