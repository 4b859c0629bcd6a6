"""Headroom's periodic tasks on Celery beat's database schedule (django-celery-beat).

Each part of the pipeline names the tasks it needs; ``schedule_install`` creates them, once,
by name. An entry an admin has edited (another interval, disabled) is left as it is unless
``reset``, which puts back the task, the interval and the enabled flag. The plans and emission
entries are also created by their apps' migrations, so a fresh database has the re-plan and the
outbox dispatch scheduled before anyone runs ``manage.py install_schedule``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db import transaction
from django_celery_beat.models import IntervalSchedule, PeriodicTask


@dataclass(frozen=True)
class ScheduledTask:
    """One beat entry: its name (unique), the Celery task, how often and what it does."""

    name: str
    task: str
    every_s: int
    description: str


def periodic_tasks_install(tasks: Iterable[ScheduledTask], *, reset: bool = False) -> list[str]:
    """Create each of ``tasks`` that beat's schedule lacks; returns one line per task."""
    lines = []
    with transaction.atomic():
        for wanted in tasks:
            interval, _ = IntervalSchedule.objects.get_or_create(
                every=wanted.every_s, period=IntervalSchedule.SECONDS
            )
            existing = PeriodicTask.objects.filter(name=wanted.name).first()
            if existing is None:
                PeriodicTask.objects.create(
                    name=wanted.name,
                    task=wanted.task,
                    interval=interval,
                    description=wanted.description,
                    enabled=True,
                )
                lines.append(f"created {wanted.name!r}: {wanted.task} every {wanted.every_s} s")
            elif reset:
                existing.task = wanted.task
                existing.interval = interval
                existing.crontab = existing.solar = existing.clocked = None
                existing.enabled = True
                existing.description = wanted.description
                existing.save()
                lines.append(f"reset {wanted.name!r}: {wanted.task} every {wanted.every_s} s")
            else:
                lines.append(f"kept {wanted.name!r} as it is")
    return lines


def _parts() -> dict[str, Callable[[], tuple[ScheduledTask, ...]]]:
    # Imported here: each app's services import this module for ScheduledTask.
    from controlplane.benchmarks.services import benchmark_schedule
    from controlplane.emission.services import emission_schedule
    from controlplane.plans.services import replan_schedule
    from controlplane.telemetry.pull import telemetry_schedule

    return {
        "telemetry": telemetry_schedule,
        "plans": replan_schedule,
        "emission": emission_schedule,
        "benchmarks": benchmark_schedule,
    }


PARTS = ("telemetry", "plans", "emission", "benchmarks")


def headroom_schedule(parts: Iterable[str] = PARTS) -> tuple[ScheduledTask, ...]:
    """The beat entries of the named parts of the pipeline (all by default)."""
    known = _parts()
    return tuple(task for part in parts for task in known[part]())


def schedule_install(*, parts: Iterable[str] = PARTS, reset: bool = False) -> list[str]:
    """Create the beat entries of ``parts`` (all by default); see the module docstring."""
    return periodic_tasks_install(headroom_schedule(parts), reset=reset)
