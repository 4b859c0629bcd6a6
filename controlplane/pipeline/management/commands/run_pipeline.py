"""``manage.py run_pipeline``: the whole job once, from telemetry to emitted allocations.

The work is ``controlplane.pipeline.services.pipeline_run``; this command parses the options,
prints the report's lines as they come, and turns a failure into its exit status.

1. **Telemetry source.** Without ``--prometheus-url``, the fleet simulator (built from the
   scenario file) serves Prometheus' range-query API on a free loopback port of this process,
   over simulated history: two weeks before the start of today (UTC), what the forecast needs,
   with a weekday daytime peak, weekly growth, and the Friday-review prompt growth from
   ``--drift-hours-ago`` hours before the last pulled hour.
2. **Pull** the history's buckets no earlier pull stored, a day per ``telemetry_pull`` (the
   same code path, client and checks as the scheduled pull).
3. **Derive** workload profiles: on a database that has none yet, first for the day before the
   drift, then for the last window (up to a day, from the drift on), so the prompt growth
   raises its drift alerts with their replica impact. A window derived before is not derived
   again.
4. **Re-plan** through ``replan_request`` / ``replan_execute`` (trigger ``drift`` when this run
   raised alerts): the forecast sizes demand from the pulled request-rate history; the plan is
   stored and activated as any re-plan's. Then **emit** it: the outbox is filled and dispatched
   in this process, to the configured sinks or, when there is none, to a files sink under
   ``var/emission/allocations/`` created for it.
5. **Print** the drift alerts, the forecast and the region allocations.

Ends of windows lie on the hour, so running it again within the hour pulls nothing, derives
nothing and makes no new plan; later, it pulls and derives only what is new. Exit status 0 on
success, 1 when a pull, the re-plan or emission fails, 2 for bad options or settings.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.pipeline.services import (
    DAY_S,
    DEFAULT_SCENARIO,
    PipelineFailed,
    PipelineOptions,
    pipeline_run,
)
from controlplane.plans.conf import replan_settings
from controlplane.telemetry.conf import TelemetrySettings, telemetry_settings


class Command(BaseCommand):
    help = (
        "Run the whole job once: pull telemetry (from the fleet simulator, started in this "
        "process with simulated history, or from --prometheus-url), derive workload profiles "
        "and drift alerts, re-plan from the forecast, activate, emit, and print the drift "
        "alerts, the forecast and the region allocations."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--scenario",
            default=DEFAULT_SCENARIO,
            metavar="FILE",
            help=f"scenario the simulated fleet is built from; load the same file with "
            f"load_scenario first (default {DEFAULT_SCENARIO})",
        )
        parser.add_argument(
            "--prometheus-url",
            metavar="URL",
            help="pull from this Prometheus instead of starting the simulator",
        )
        parser.add_argument(
            "--history-days",
            type=float,
            metavar="N",
            help="days of simulated history before now (default: what the forecast needs, "
            "two weeks before the start of today, UTC, and an hour)",
        )
        parser.add_argument(
            "--drift-hours-ago",
            type=float,
            default=24.0,
            metavar="H",
            help="the simulated Friday-review prompt growth starts H hours before the last "
            "pulled hour (default 24)",
        )
        parser.add_argument(
            "--weekly-growth",
            type=float,
            default=0.02,
            metavar="G",
            help="simulated traffic growth per week, a fraction (default 0.02)",
        )
        parser.add_argument(
            "--seed", type=int, default=0, help="the simulator's random seed (default 0)"
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=None,
            metavar="S",
            help="seconds to wait for a re-plan that is running (default "
            "HEADROOM_PLANNER_LOCK_TTL_S)",
        )

    # -- options ------------------------------------------------------------------------------

    def _options(self, options: dict[str, Any]) -> tuple[TelemetrySettings, PipelineOptions]:
        try:
            conf = telemetry_settings()
            wait_s = replan_settings().lock_ttl_s
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc), returncode=2) from exc
        days = options["history_days"]
        if days is not None and not (days > 0 and math.isfinite(days)):
            raise CommandError("--history-days must be a positive number of days", returncode=2)
        hours = options["drift_hours_ago"]
        if not (hours > 0 and math.isfinite(hours)):
            raise CommandError("--drift-hours-ago must be a positive number of hours", returncode=2)
        if days is not None and hours >= days * 24:
            raise CommandError("--drift-hours-ago must lie within --history-days", returncode=2)
        growth = options["weekly_growth"]
        if not (growth > -1 and math.isfinite(growth)):
            raise CommandError("--weekly-growth must be a number above -1", returncode=2)
        timeout = options["timeout"]
        if timeout is not None:
            if not (timeout >= 0 and math.isfinite(timeout)):
                raise CommandError("--timeout must be zero or more seconds", returncode=2)
            wait_s = timeout
        url = options["prometheus_url"]
        if url is not None:
            if not url.startswith(("http://", "https://")):
                raise CommandError("--prometheus-url must be an http(s) URL", returncode=2)
        elif DAY_S % conf.bucket_s:
            raise CommandError(
                f"HEADROOM_TELEMETRY_BUCKET_S={conf.bucket_s}: the simulator needs a bucket "
                "width that divides a day",
                returncode=2,
            )
        return conf, PipelineOptions(
            scenario=Path(options["scenario"]),
            prometheus_url=url,
            history_days=days,
            drift_hours_ago=hours,
            weekly_growth=growth,
            seed=options["seed"],
            wait_s=wait_s,
            verbose=int(options["verbosity"]) > 1,
        )

    # -- the job ------------------------------------------------------------------------------

    def handle(self, *args: Any, **options: Any) -> None:
        with self._quiet_logs(int(options["verbosity"])):
            self._handle(**options)

    @staticmethod
    @contextmanager
    def _quiet_logs(verbosity: int) -> Iterator[None]:
        """Below verbosity 2, leave out the log lines the printed report already says: the
        drift alerts' warnings, Celery's per-task lines for the in-process tasks and the
        broker library's note that eager mode has no broker host."""
        if verbosity >= 2:
            yield
            return
        names = (
            "controlplane.telemetry.pull",
            "controlplane.telemetry.derive",
            "controlplane.telemetry.drift",
            "controlplane.pipeline.services",
            "celery.app.trace",
            "kombu.connection",
        )
        loggers = [logging.getLogger(name) for name in names]
        levels = [logger.level for logger in loggers]
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)

    def _handle(self, **options: Any) -> None:
        conf, run_options = self._options(options)
        try:
            pipeline_run(options=run_options, conf=conf, echo=self.stdout.write)
        except PipelineFailed as exc:
            raise CommandError(str(exc), returncode=exc.exit_status) from exc
