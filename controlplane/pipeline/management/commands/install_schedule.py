"""``manage.py install_schedule``: create Headroom's periodic tasks that Celery beat runs."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.pipeline.schedule import PARTS, schedule_install


class Command(BaseCommand):
    help = (
        "Create Headroom's periodic tasks in django-celery-beat's schedule: the telemetry pull "
        "(every bucket) and profile derivation (hourly), the re-plan (hourly), the outbox "
        "dispatch (every 30 s) and the benchmark schedule (hourly). Safe to run again: "
        "existing tasks are kept as an admin left them unless --reset."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--reset",
            action="store_true",
            help="put existing tasks back to the default interval and enable them",
        )
        parser.add_argument(
            "--only",
            metavar="PART",
            action="append",
            help=f"only this part's tasks ({', '.join(PARTS)}); may be repeated",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        parts = options["only"] or list(PARTS)
        unknown = sorted(set(parts) - set(PARTS))
        if unknown:
            raise CommandError(
                f"--only: unknown part {', '.join(unknown)}; choose from {', '.join(PARTS)}",
                returncode=2,
            )
        for line in schedule_install(parts=parts, reset=options["reset"]):
            self.stdout.write(line)
