"""``manage.py install_schedule``: create the telemetry periodic tasks that Celery beat runs."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from controlplane.telemetry.services import schedule_install


class Command(BaseCommand):
    help = (
        "Create the telemetry periodic tasks (pull every bucket, derive profiles hourly) in "
        "django-celery-beat's schedule. Safe to run again: existing tasks are kept as an admin "
        "left them unless --reset."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--reset",
            action="store_true",
            help="put existing tasks back to the default interval and enable them",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        for line in schedule_install(reset=options["reset"]):
            self.stdout.write(line)
