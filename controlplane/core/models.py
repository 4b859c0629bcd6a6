"""The kit's one table: which beat tick of each periodic task was taken."""

from __future__ import annotations

from django.db import models


class ScheduleTick(models.Model):
    """The last tick of one beat entry (by its name) that a worker took.

    Celery beat can deliver a tick twice: beat restarted before it saved the entry's last run,
    or two beat processes running at once. ``controlplane.core.schedule.beat_tick_claim``
    takes a tick with a conditional UPDATE of this row, so a repeat arriving less than half the
    entry's interval after the taken one finds the row moved on and does nothing.
    """

    name = models.CharField(max_length=200, unique=True, help_text="The beat entry's name.")
    last_tick_at = models.DateTimeField(null=True, blank=True)
    last_task_id = models.CharField(max_length=64, blank=True)
    ticks = models.PositiveIntegerField(default=0, help_text="Ticks taken.")
    duplicates = models.PositiveIntegerField(
        default=0, help_text="Deliveries refused as repeats of a tick already taken."
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name}: {self.ticks} ticks, {self.duplicates} repeats refused"
