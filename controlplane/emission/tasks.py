"""Emission task: deliver the due outbox rows to their sinks.

Thin by design: the work is in ``controlplane.emission.services.outbox_dispatch``. It runs on
the beat schedule (every 30 s by default; editable in the admin) and is kicked once after each
plan activation commits. Several may run at once, on one worker or many: each row is claimed
by a conditional UPDATE, so no row is delivered by two of them at the same time. A failed
delivery is not a failed task: the row itself carries its next attempt time.
"""

from __future__ import annotations

from typing import Any

from controlplane.celery import app
from controlplane.emission import services


@app.task(name=services.DISPATCH_TASK, ignore_result=True)
def dispatch(limit: int | None = None) -> dict[str, Any]:
    """Deliver up to ``limit`` due rows (default ``HEADROOM_EMISSION_BATCH``)."""
    return services.outbox_dispatch(limit=limit).summary()
