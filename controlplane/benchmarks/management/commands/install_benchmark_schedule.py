"""``manage.py install_benchmark_schedule``: create the periodic task that keeps capacity
figures fresh."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from controlplane.benchmarks.services import benchmark_schedule_install


class Command(BaseCommand):
    help = (
        "Create the periodic task that queues an engine benchmark for each shape whose capacity "
        "figure is stale (every HEADROOM_BENCHMARK_SCHEDULE_S, default hourly) in "
        "django-celery-beat's schedule. Safe to run again: an existing task is kept as an admin "
        "left it unless --reset."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--reset",
            action="store_true",
            help="put the existing task back to the default interval and enable it",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        for line in benchmark_schedule_install(reset=options["reset"]):
            self.stdout.write(line)
