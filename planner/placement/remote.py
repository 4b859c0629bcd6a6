"""Parts of a placement problem solved as Ray tasks (``solve(..., executor="ray")``).

Ray is imported here only, and only when this executor is chosen: it is an optional
dependency (the ``bench`` extra, the KubeRay cluster's image). Each part is one task on the
Ray the process is connected to: a cluster at an address (``auto`` or ``ray://host:10001``),
or a local Ray started with ``workers`` CPUs and no dashboard when the process has none.
A Ray the process already has (``ray.init`` by the caller) is used as it is.

The job (instance, start, parts) is put into Ray's object store once per round; a task
gets it with a part number and its time, and sends back the part's plan and progress, as a
forked process does (``solver._solve_parts``). Ray's clock on another node is not this
one's, so a task gets its time in seconds, plus the wall-clock deadline as a cap (nodes'
clocks are taken to agree, as NTP keeps them, to well within a second).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from planner.errors import PlannerInputError

_LOCAL_INIT: dict[str, Any] = {
    "include_dashboard": False,
    "log_to_driver": False,
    "configure_logging": True,
    "logging_level": logging.WARNING,
}


def _ray() -> Any:
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is in the dev and bench extras
        raise PlannerInputError(
            "executor", "ray is not installed (pip install 'headroom[bench]')"
        ) from None
    return ray


def connect(address: str | None, *, num_cpus: int) -> None:
    """Connect this process to Ray: the cluster at ``address``, or a local Ray started with
    ``num_cpus`` CPUs; nothing when it is connected already. The local Ray lasts as long as
    the process (Ray shuts it down at exit), so later solves find it started."""
    ray = _ray()
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    else:
        ray.init(num_cpus=num_cpus, **_LOCAL_INIT)


class RayParts:
    """Submit parts of one job as Ray tasks; wait for them; their results or errors."""

    def __init__(
        self,
        job: object,
        task: Callable[[Any, int, float, float], Any],
        *,
        address: str | None,
        num_cpus: int,
        task_cpus: float,
    ) -> None:
        self._ray = _ray()
        connect(address, num_cpus=num_cpus)
        # A part's failure is reported, not retried: a part whose process dies would die
        # again (as a forked part's does, it becomes PlannerSolverError).
        self._task = self._ray.remote(num_cpus=task_cpus, max_retries=0)(task)
        self._job = self._ray.put(job)

    def submit(self, index: int, deadline: float) -> Any:
        """Start part ``index``, to end by ``deadline`` (this process's perf_counter)."""
        budget = max(0.0, deadline - time.perf_counter())
        return self._task.remote(self._job, index, budget, time.time() + budget)

    def wait(self, running: Sequence[Any]) -> list[Any]:
        """Those of ``running`` that have ended (at least one)."""
        done, _ = self._ray.wait(list(running), num_returns=1)
        return list(done)

    def result(self, ref: Any) -> tuple[Any, BaseException | None]:
        """The task's result, or the exception it raised (the part's own, where Ray has it:
        ``SplitFailed`` passes through to the caller as itself)."""
        exceptions = self._ray.exceptions
        try:
            return self._ray.get(ref), None
        except exceptions.RayTaskError as error:
            cause = getattr(error, "cause", None)
            return None, cause if isinstance(cause, BaseException) else error
        except exceptions.RayError as error:  # the worker died, the node was lost, ...
            return None, error

    def cancel(self, refs: Sequence[Any]) -> None:
        for ref in refs:
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # an ended task cannot be cancelled: no matter
                pass

    def close(self) -> None:
        # The job leaves the object store once no reference to it is left.
        self._job = None


def deadline_from(budget_s: float, wall_deadline: float) -> float:
    """In a task: the perf_counter deadline of a part given ``budget_s`` seconds when it was
    submitted and the submitter's wall-clock deadline (a task that waited in Ray's queue
    has less)."""
    return time.perf_counter() + max(0.0, min(budget_s, wall_deadline - time.time()))
