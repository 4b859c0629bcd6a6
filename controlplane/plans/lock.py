"""The planner lock: one re-plan at a time, across processes and machines.

The lock is one ``PlannerLock`` row, claimed by a conditional UPDATE whose row count says who
won: there is no read-then-write window for two workers to both see it free. A claim carries
an expiry; the holder renews it between steps, and a claim past its expiry belongs to a worker
that died (SIGKILL, lost machine) and may be taken over. Holders are named after the re-plan
run (``run:<id>``), so a redelivered task of the same run gets its own claim back at once.

The lock works the same on PostgreSQL and SQLite: a single UPDATE is atomic on both (SQLite
serialises writers on the whole database). Where PostgreSQL makes a second writer wait, SQLite
may refuse it at once ("database is locked": a shared-cache database, or a deferred
transaction that cannot wait); the planner's own short writes outside a transaction are then
retried for a few seconds (:func:`retry_when_locked`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from django.db import OperationalError, connection
from django.db.models import Q
from django.utils import timezone

from controlplane.plans.models import PlannerLock

REPLAN_LOCK = "replan"
# How long a write refused by SQLite's "database is locked" is retried, and how often, seconds.
LOCKED_RETRY_S = 5.0
LOCKED_RETRY_PAUSE_S = 0.02

T = TypeVar("T")


def retry_when_locked(write: Callable[[], T]) -> T:
    """Run ``write`` (one short statement in autocommit), retrying while SQLite refuses it
    because another connection is writing. Other databases and errors, and writes inside a
    transaction (which the error has broken), are not retried."""
    deadline = time.monotonic() + LOCKED_RETRY_S
    while True:
        try:
            return write()
        except OperationalError as exc:
            if (
                connection.vendor != "sqlite"
                or "locked" not in str(exc)
                or connection.in_atomic_block
                or time.monotonic() >= deadline
            ):
                raise
            time.sleep(LOCKED_RETRY_PAUSE_S)


@dataclass(frozen=True)
class Claim:
    """The outcome of a claim attempt.

    ``claimed`` says whether ``holder`` now holds the lock. ``taken_over_from`` names the
    previous holder whose claim had expired (None when the lock was free or already ours);
    when not claimed, ``held_by`` and ``expires_at`` describe the current claim.
    """

    claimed: bool
    holder: str
    taken_over_from: str | None = None
    held_by: str = ""
    expires_at: datetime | None = None


def lock_holder_for_run(run_id: int) -> str:
    """The holder name of a re-plan run's claim."""
    return f"run:{run_id}"


def lock_claim(*, holder: str, ttl_s: float, name: str = REPLAN_LOCK) -> Claim:
    """Claim the lock for ``holder`` for ``ttl_s`` seconds.

    Succeeds when the lock is free, already held by ``holder``, or held by a claim that has
    expired (a takeover, reported in ``taken_over_from``).
    """
    return retry_when_locked(lambda: _claim(holder=holder, ttl_s=ttl_s, name=name))


def _claim(*, holder: str, ttl_s: float, name: str) -> Claim:
    # The row is created on first use (a flushed test database, a fresh install); a racing
    # creator makes get_or_create fall back to reading the row the other one made.
    PlannerLock.objects.get_or_create(name=name)
    now = timezone.now()
    expires = now + timedelta(seconds=ttl_s)
    rows = PlannerLock.objects.filter(Q(holder="") | Q(holder=holder), name=name).update(
        holder=holder, expires_at=expires
    )
    if rows:
        return Claim(claimed=True, holder=holder)
    current = PlannerLock.objects.filter(name=name).values("holder", "expires_at").first()
    if current is None:  # pragma: no cover - the row was created above and is never deleted
        return Claim(claimed=False, holder=holder)
    previous, previous_expiry = current["holder"], current["expires_at"]
    if previous and previous_expiry is not None and previous_expiry < now:
        # Compare-and-set on the claim we saw: of two workers taking over at once, one wins.
        rows = PlannerLock.objects.filter(
            name=name, holder=previous, expires_at=previous_expiry
        ).update(holder=holder, expires_at=expires)
        if rows:
            return Claim(claimed=True, holder=holder, taken_over_from=previous)
        current = PlannerLock.objects.filter(name=name).values("holder", "expires_at").first()
        if current is None:  # pragma: no cover
            return Claim(claimed=False, holder=holder)
    return Claim(
        claimed=False,
        holder=holder,
        held_by=current["holder"],
        expires_at=current["expires_at"],
    )


def lock_renew(*, holder: str, ttl_s: float, name: str = REPLAN_LOCK) -> bool:
    """Extend ``holder``'s claim by ``ttl_s`` from now; False when it no longer holds it."""
    expires = timezone.now() + timedelta(seconds=ttl_s)
    return bool(PlannerLock.objects.filter(name=name, holder=holder).update(expires_at=expires))


def lock_release(*, holder: str, name: str = REPLAN_LOCK) -> bool:
    """Release ``holder``'s claim; False when it did not hold the lock (any more)."""
    rows = PlannerLock.objects.filter(name=name, holder=holder)
    return bool(retry_when_locked(lambda: rows.update(holder="", expires_at=None)))


def lock_held_by(*, holder: str, name: str = REPLAN_LOCK, for_update: bool = False) -> bool:
    """Whether ``holder`` holds the lock now. ``for_update`` locks the row until the end of
    the surrounding transaction (PostgreSQL), so the claim cannot be taken over meanwhile."""
    rows = PlannerLock.objects.filter(name=name)
    if for_update:
        rows = rows.select_for_update()
    current = rows.values_list("holder", flat=True).first()
    return current == holder
