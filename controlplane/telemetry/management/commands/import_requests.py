"""``manage.py import_requests FILE --format azure|jsonl|csv``: import a request log as telemetry."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.telemetry.requestlog import (
    DEFAULT_RESOLUTION,
    FORMATS,
    Defaults,
    RequestLogError,
    requests_import,
)


class Command(BaseCommand):
    help = (
        "Import a request log (one request per record: arrival time, prompt and output tokens) "
        "as telemetry samples, then derive workload profiles over its buckets. Importing the "
        "same file again stores nothing twice. The next re-plan (manage.py replan, or the "
        "hourly one) sizes from them. See docs/telemetry.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the log; - reads standard input")
        parser.add_argument("--format", required=True, choices=FORMATS, dest="fmt")
        parser.add_argument("--tenant", default="", help="tenant of records without one")
        parser.add_argument("--model", default="", help="model of records without one")
        parser.add_argument("--region", default="", help="region of records without one")
        parser.add_argument(
            "--resolution",
            type=float,
            default=DEFAULT_RESOLUTION,
            help="relative width of the length histogram's buckets (default 0.01: 1%%)",
        )
        parser.add_argument(
            "--no-derive", action="store_true", help="store the samples, derive nothing"
        )
        parser.add_argument(
            "--create-missing",
            action="store_true",
            help="store samples of tenants, models or regions the fleet has no record of, as "
            "telemetry only (derivations skip them until the records exist); without it such "
            "a name is refused",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = str(options["file"])
        try:
            raw = (self.stdin_bytes() if path == "-" else Path(path).read_bytes()).decode(
                "utf-8-sig"
            )
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror or exc}", returncode=2) from None
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path}: not UTF-8 text (byte {exc.start})", returncode=2) from None
        defaults = Defaults(
            tenant=options["tenant"].strip(),
            model=options["model"].strip(),
            region=options["region"].strip(),
        )
        try:
            report = requests_import(
                stream=io.StringIO(raw, newline=""),
                fmt=options["fmt"],
                defaults=defaults,
                resolution=float(options["resolution"]),
                derive=not options["no_derive"],
                create_missing=bool(options["create_missing"]),
            )
        except RequestLogError as exc:
            raise CommandError(f"{path}: {exc}", returncode=2) from None
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc), returncode=2) from None
        out = self.stdout
        out.write(
            f"{report.requests:,} requests, {report.series} series, "
            f"{report.samples_stored:,} of {report.samples_total:,} samples new, "
            f"{report.window_start:%Y-%m-%d %H:%M}–{report.window_end:%Y-%m-%d %H:%M} UTC"
        )
        run = report.derivation
        if run is not None:
            out.write(
                f"derivation {run.pk}: {run.status}, {run.profiles_created} profiles new, "
                f"{run.profiles_unchanged} unchanged, {run.alerts_raised} drift alerts raised"
            )
            for item in run.skipped:
                out.write(f"  no profile for {item['series']}: {item['reason']}")

    def stdin_bytes(self) -> bytes:
        return sys.stdin.buffer.read()
