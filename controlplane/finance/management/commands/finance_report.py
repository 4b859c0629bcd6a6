"""``manage.py finance_report``: the finance API's tables for a script (text, CSV or JSON)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.finance import services
from controlplane.finance.renderers import CSVRenderer
from planner.forecast.finance import PERIODS

REPORTS = ("forecast", "commitments", "promises", "showback", "history")


class Command(BaseCommand):
    help = (
        "Print a finance report of the active plan: the same rows as /api/finance/<report>/. "
        "Exit status 2 with a one-line message for a bad option, 1 when no plan is active."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("report", choices=REPORTS, help="which report")
        parser.add_argument("--period", choices=PERIODS, default="month")
        parser.add_argument(
            "--group-by",
            default="",
            help=f"forecast and history: comma-separated, any of {', '.join(services.GROUPS)}",
        )
        parser.add_argument("--horizon", type=int, default=None, help="number of periods")
        parser.add_argument(
            "--format", choices=("table", "csv", "json"), default="table", dest="output"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = options["report"]
        groups = [g for g in options["group_by"].split(",") if g.strip()]
        kwargs: dict[str, Any] = {"period": options["period"], "horizon": options["horizon"]}
        try:
            if report == "forecast":
                result = services.finance_forecast(group_by=groups, **kwargs)
            elif report == "history":
                result = services.finance_history(group_by=groups, **kwargs)
            elif report == "commitments":
                result = services.finance_commitments(**kwargs)
            elif report == "showback":
                result = services.finance_showback(**kwargs)
            else:
                result = services.finance_promises()
        except services.FinanceInputError as exc:
            raise CommandError(
                f"--{exc.field.replace('_', '-')}: {exc.message}", returncode=2
            ) from exc
        except services.NoActivePlan as exc:
            raise CommandError(str(exc), returncode=1) from exc
        body = result.as_dict()
        if options["output"] == "json":
            self.stdout.write(json.dumps(body, indent=2))
        elif options["output"] == "csv":
            self.stdout.write(CSVRenderer().render(body).decode(), ending="")
        else:
            self.stdout.write(_table(body))


def _table(body: dict[str, Any]) -> str:
    columns = [c for c in body["columns"] if c not in ("period_start", "period_end")]
    cells = [[_cell(row.get(c)) for c in columns] for row in body["rows"]]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    numeric = [all(_is_number(row.get(c)) for row in body["rows"]) for c in columns]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    head = f"Plan v{body['plan_version']}, by {body['period']}, {len(body['rows'])} rows"
    out = [head, line(columns), *(line(r) for r in cells)]
    out += [f"Note: {note}" for note in body.get("notes", [])]
    return "\n".join(out)


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)
