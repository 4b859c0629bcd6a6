"""``manage.py export_problem``: the placement problem (placement-problem/v1) built from the
database, as JSON on stdout or in a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.plans.problem import problem_export, problem_summary


class Command(BaseCommand):
    help = (
        "Write the placement problem built from the database (format placement-problem/v1). "
        "Left-out shapes and demands are reported on stderr."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-o", "--output", help="write to this file instead of stdout")
        parser.add_argument(
            "--summary", action="store_true", help="print a readable summary to stderr"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        problem = problem_export(warn=lambda message: self.stderr.write(f"warning: {message}"))
        text = json.dumps(problem, indent=2, ensure_ascii=False) + "\n"
        if options["output"]:
            try:
                Path(options["output"]).write_text(text, encoding="utf-8")
            except OSError as exc:
                raise CommandError(
                    f"cannot write {options['output']}: {exc}", returncode=2
                ) from exc
        else:
            self.stdout.write(text, ending="")
        if options["summary"]:
            self.stderr.write(problem_summary(problem), style_func=lambda s: s)
