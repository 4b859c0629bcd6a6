"""Benchmark tasks: run one engine benchmark, and the periodic pass that queues benchmarks for
shapes whose capacity figures are stale.

Thin by design: the work is in ``controlplane.benchmarks.services``. Beat sends
``headroom.benchmarks.schedule`` on the schedule ``manage.py install_benchmark_schedule``
creates (editable in the admin). ``headroom.benchmarks.engine`` is acknowledged late and
requeued if its worker dies; a second delivery of a run that already started does nothing (the
run's status guard), and the schedule fails a run left running for over twice the benchmark
timeout.
"""

from __future__ import annotations

from typing import Any

from controlplane.benchmarks import services
from workers.celery import app


@app.task(bind=True, name=services.ENGINE_TASK, acks_late=True, reject_on_worker_lost=True)
def engine(self: Any, run_id: int) -> str | None:
    """Run the engine benchmark ``run_id``; returns its final status (None: no such run)."""
    run = services.benchmark_run_execute(run_id=run_id, task_id=str(self.request.id or ""))
    return run.status if run is not None else None


@app.task(name=services.SCHEDULE_TASK)
def schedule() -> dict[str, Any]:
    """Queue engine benchmarks for shapes whose figures need measuring again."""
    return services.benchmarks_schedule().summary()
