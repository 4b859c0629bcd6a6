"""Benchmark tasks: run one engine benchmark, run one endpoint load test, and the periodic pass
that queues benchmarks for shapes whose capacity figures are stale.

Thin by design: the work is in ``controlplane.benchmarks.services``. Beat sends
``headroom.benchmarks.schedule`` on the schedule ``manage.py install_schedule``
creates (editable in the admin). ``headroom.benchmarks.engine`` and
``headroom.benchmarks.endpoint`` are acknowledged late and requeued if their worker dies; a
second delivery of a run that already started does nothing (the run's status guard), and the
schedule fails a run left running for over twice the benchmark timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controlplane.benchmarks import services
from controlplane.celery import app
from controlplane.core.schedule import beat_tick_claim


def _process_ended(args: Sequence[Any], reason: str) -> None:
    """An isolated run's process ended before the run did (Ray ending it, a crash): the run
    fails with the reason, and the shape keeps its previous figures."""
    services.benchmark_run_abandon(run_id=int(args[0]), reason=reason)


# isolated: they start Ray, which ends the process it runs in when it cannot reach its
# cluster; without a broker they run in a child process (controlplane.core.isolated).
@app.task(
    bind=True,
    name=services.ENGINE_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    isolated=True,
    isolated_exit=staticmethod(_process_ended),
)
def engine(self: Any, run_id: int) -> str | None:
    """Run the engine benchmark ``run_id``; returns its final status (None: no such run)."""
    run = services.benchmark_run_execute(run_id=run_id, task_id=str(self.request.id or ""))
    return run.status if run is not None else None


@app.task(
    bind=True,
    name=services.ENDPOINT_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    isolated=True,
    isolated_exit=staticmethod(_process_ended),
)
def endpoint(self: Any, run_id: int) -> str | None:
    """Run the endpoint load test ``run_id`` against its shape's benchmark endpoint; returns
    its final status (None: no such run)."""
    run = services.endpoint_run_execute(run_id=run_id, task_id=str(self.request.id or ""))
    return run.status if run is not None else None


@app.task(bind=True, name=services.SCHEDULE_TASK)
def schedule(self: Any) -> dict[str, Any]:
    """Queue benchmarks (endpoint load tests where a shape has an endpoint, else engine
    benchmarks) for shapes whose figures need measuring again; nothing for a repeat of a beat
    tick already taken."""
    if not beat_tick_claim(self.request):
        return {"status": "duplicate tick"}
    return services.benchmarks_schedule().summary()
