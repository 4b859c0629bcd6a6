"""Re-planning tasks: thin wrappers that take ids and call the plans services.

``headroom.plans.replan`` runs one ``ReplanRun``; it is acknowledged late (after it returns)
and requeued if its worker dies, so a killed re-plan runs again. It is declared isolated:
without a broker it runs in a child process (``controlplane.core.isolated``), never in the web
request (the API's or the admin's "re-plan now") that asked for it, and a child that ends
without finishing fails its run with the reason. That is harmless: the run's
status guard, the planner lock and the inputs hash make a second run store no second plan.
``headroom.plans.replan_scheduled`` is what Celery beat sends: it requests a re-plan, whose
run is then enqueued like any other. Drift re-plans (trigger ``drift``) are requested by the
pipeline after a derivation that raised new drift alerts (``controlplane.pipeline``).
``headroom.plans.whatif`` drains the queue of what-if previews (``plans.whatif_jobs``): sent
when one is queued; without a broker it runs in a bounded pool of child processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controlplane.celery import app
from controlplane.core.jobs import ACTIVE, job_fail
from controlplane.core.schedule import beat_tick_claim
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.services import REPLAN_TASK, replan_execute, replan_request
from controlplane.plans.whatif_jobs import WHATIF_TASK, Lease, whatif_drain


def _replan_process_ended(args: Sequence[Any], reason: str) -> None:
    """An isolated re-plan's process ended before its run did: the run fails with the reason
    (a planner lock it held is taken over once its claim expires)."""
    job_fail(
        ReplanRun,
        int(args[0]),
        f"The re-plan's process ended before it finished: {reason}.",
        statuses=ACTIVE,
    )


# isolated: a re-plan solves for seconds; without a broker it must not hold a web worker.
@app.task(
    name=REPLAN_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    isolated=True,
    isolated_exit=staticmethod(_replan_process_ended),
)
def replan(run_id: int) -> str | None:
    """Run the re-plan ``run_id``; returns its final status (None: no such run)."""
    run = replan_execute(run_id=run_id)
    return run.status if run is not None else None


@app.task(bind=True, name="headroom.plans.replan_scheduled")
def replan_scheduled(self: Any) -> int | None:
    """Request a scheduled re-plan; returns the new run's id (None: this delivery repeats a
    beat tick already taken, and no run is requested)."""
    if not beat_tick_claim(self.request):
        return None
    run = replan_request(trigger=Plan.Trigger.SCHEDULE)
    return int(run.pk)


@app.task(name=WHATIF_TASK, acks_late=True, reject_on_worker_lost=True)
def whatif(
    job_id: int | None = None,
    isolated: bool = False,
    lease_name: str | None = None,
    lease_holder: str | None = None,
) -> int:
    """Solve queued what-if previews while fewer than the bound run (``job_id`` is the one
    whose submit sent this; any queued one may be taken first); returns how many it solved.
    ``isolated``: this is the web server's child process (``controlplane.core.isolated``),
    holding the drainer lease ``lease_name`` for ``lease_holder``."""
    lease = None
    if lease_name and lease_holder:
        lease = Lease(name=lease_name, holder=lease_holder)
    return whatif_drain(isolated=isolated, lease=lease)
