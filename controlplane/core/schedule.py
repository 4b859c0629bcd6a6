"""Periodic tasks on Celery beat's database schedule (django-celery-beat): what one entry is,
and creating entries by name.

Each app names the entries it needs (``ScheduledTask``); the pipeline's registry
(``controlplane.pipeline.schedule``) collects them. An entry an admin has edited (another
interval, disabled) is left as it is unless ``reset``, which puts back the task, the interval
and the enabled flag.
"""

from __future__ import annotations

from collections.abc import Iterable
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
