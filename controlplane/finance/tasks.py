"""Finance tasks: thin wrappers that take ids and call the finance services.

``headroom.finance.warm`` is sent when a plan becomes active (once the activation commits):
it stores the plan's finance snapshot and monthly reports before the first read asks for them.
Without a broker it runs in a child process, not in the request or re-plan that activated the
plan (``controlplane/core/isolated.py``). A second delivery finds everything stored and reads
it; a plan superseded meanwhile is skipped.
"""

from __future__ import annotations

from controlplane.celery import app
from controlplane.finance import services


@app.task(
    name=services.FINANCE_WARM_TASK, acks_late=True, reject_on_worker_lost=True, isolated=True
)
def warm(plan_id: int) -> int | None:
    """Store the finance snapshot and reports of the active plan ``plan_id``; returns the
    snapshot's id (None: that plan is no longer active)."""
    snapshot = services.finance_warm(plan_id=plan_id)
    return None if snapshot is None else int(snapshot.pk)
