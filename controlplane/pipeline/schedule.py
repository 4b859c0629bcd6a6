"""Headroom's periodic tasks: the registry of every part's beat entries.

Each app names the entries it needs (its ``*_schedule()``); ``schedule_install`` creates them,
once, by name (``controlplane.core.schedule``). The plans and emission entries are also
created by their apps' migrations, so a fresh database has the re-plan and the outbox dispatch
scheduled before anyone runs ``manage.py install_schedule``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from controlplane.benchmarks.services import benchmark_schedule
from controlplane.core.schedule import ScheduledTask, periodic_tasks_install
from controlplane.emission.services import emission_schedule
from controlplane.pipeline.recovery import recovery_schedule
from controlplane.plans.services import replan_schedule
from controlplane.telemetry.pull import telemetry_schedule

PARTS: dict[str, Callable[[], tuple[ScheduledTask, ...]]] = {
    "telemetry": telemetry_schedule,
    "plans": replan_schedule,
    "emission": emission_schedule,
    "benchmarks": benchmark_schedule,
    # The sweep that re-sends or fails jobs whose task was lost (a broker or database outage).
    "recovery": recovery_schedule,
}


def headroom_schedule(parts: Iterable[str] = tuple(PARTS)) -> tuple[ScheduledTask, ...]:
    """The beat entries of the named parts of the pipeline (all by default)."""
    return tuple(task for part in parts for task in PARTS[part]())


def schedule_install(*, parts: Iterable[str] = tuple(PARTS), reset: bool = False) -> list[str]:
    """Create the beat entries of ``parts`` (all by default); an entry an admin edited is
    kept unless ``reset``."""
    return periodic_tasks_install(headroom_schedule(parts), reset=reset)
