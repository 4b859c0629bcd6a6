"""Periodic tasks on Celery beat's database schedule (django-celery-beat): what one entry is,
and creating entries by name.

Each app names the entries it needs (``ScheduledTask``); the pipeline's registry
(``controlplane.pipeline.schedule``) collects them. An entry an admin has edited (another
interval, disabled) is left as it is unless ``reset``, which puts back the task, the interval
and the enabled flag.

**One job per tick.** Beat may deliver the same tick twice (restarted before it saved the
entry's last run time; two beat processes by mistake). A task beat sends calls
``beat_tick_claim(self.request)`` first: the tick is taken by a conditional UPDATE of the
entry's ``ScheduleTick`` row (last taken tick older than half the entry's interval), so of
two deliveries of one tick, sequential or concurrent, on any number of workers, one goes on
and the other returns at once, creating no job. A call that did not come from beat (no
``periodic_task_name`` header: a test, a shell, ``run_pipeline``) is never refused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from controlplane.core.models import ScheduleTick

logger = logging.getLogger(__name__)

# The header django-celery-beat puts on every message it sends: the entry's name.
BEAT_HEADER = "periodic_task_name"
# Crontab and solar entries tick at most once a minute.
_CRONTAB_SPACING_S = 60.0


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


def beat_entry_name(request: Any) -> str | None:
    """The beat entry a task's ``request`` was sent for; None when beat did not send it."""
    name = getattr(request, BEAT_HEADER, None)
    if not name:
        headers = getattr(request, "headers", None)
        name = headers.get(BEAT_HEADER) if isinstance(headers, dict) else None
    return str(name) if name else None


def _interval_s(name: str) -> float | None:
    entry = PeriodicTask.objects.filter(name=name).select_related("interval").first()
    if entry is None or entry.clocked_id is not None:
        return None  # gone, or a one-off: nothing to repeat
    if entry.interval is not None:
        seconds = {
            IntervalSchedule.DAYS: 86400,
            IntervalSchedule.HOURS: 3600,
            IntervalSchedule.MINUTES: 60,
            IntervalSchedule.SECONDS: 1,
            IntervalSchedule.MICROSECONDS: 1e-6,
        }[entry.interval.period]
        return float(entry.interval.every) * seconds
    return _CRONTAB_SPACING_S


def tick_claim(
    *, name: str, every_s: float, task_id: str = "", now: datetime | None = None
) -> bool:
    """Take the tick of the beat entry ``name`` (``every_s`` apart) at ``now``; False when a
    tick of it was taken less than half an interval ago (this delivery repeats it)."""
    now = now or timezone.now()
    ScheduleTick.objects.get_or_create(name=name)
    # One conditional UPDATE decides: on PostgreSQL a concurrent second delivery waits for the
    # first's row lock, then finds the condition false and updates nothing.
    taken = ScheduleTick.objects.filter(
        Q(last_tick_at__isnull=True) | Q(last_tick_at__lte=now - timedelta(seconds=every_s / 2)),
        name=name,
    ).update(last_tick_at=now, last_task_id=task_id[:64], ticks=F("ticks") + 1)
    if not taken:
        ScheduleTick.objects.filter(name=name).update(duplicates=F("duplicates") + 1)
        logger.warning("beat tick of %r repeated (task %s): nothing done", name, task_id or "?")
    return bool(taken)


def beat_tick_claim(request: Any, *, now: datetime | None = None) -> bool:
    """Whether the task ``request`` belongs to may go on: True unless beat sent it and it
    repeats a tick already taken (see the module doc)."""
    name = beat_entry_name(request)
    if name is None:
        return True
    every_s = _interval_s(name)
    if every_s is None:
        return True
    return tick_claim(name=name, every_s=every_s, task_id=str(request.id or ""), now=now)
