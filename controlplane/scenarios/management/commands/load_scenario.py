"""``manage.py load_scenario FILE``: load a fleet and its tenants from a YAML or JSON scenario."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.scenarios.schema import ScenarioError
from controlplane.scenarios.services import scenario_load


class Command(BaseCommand):
    help = (
        "Load a scenario file (YAML or JSON): create or update what differs, never delete. "
        "All or nothing; a bad entry is named and exits with status 2."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="scenario file, .yaml/.yml or .json")
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="check the whole file against the database, then save nothing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = scenario_load(path=options["file"], dry_run=options["dry_run"])
        except ScenarioError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        self.stdout.write("\n".join(report.lines()))
        if options["verbosity"] >= 2:
            for line in report.changes:
                self.stdout.write(f"  {line}")
