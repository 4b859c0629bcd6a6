"""``manage.py run_pipeline``: the whole job once, from telemetry to emitted allocations.

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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.emission.models import AllocationSink, OutboxEntry
from controlplane.emission.services import outbox_dispatch, outbox_enqueue_for_plan
from controlplane.emission.sinks.files import region_path
from controlplane.plans.conf import replan_settings
from controlplane.plans.demand import forecast_anchor
from controlplane.plans.impact import pool_drift_alerts_price
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.selectors import plan_summary
from controlplane.plans.services import drift_reason, replan_execute, replan_request
from controlplane.telemetry import selectors
from controlplane.telemetry.conf import TelemetrySettings, telemetry_settings
from controlplane.telemetry.derive import workload_profiles_derive
from controlplane.telemetry.drift import drift_alerts_raised
from controlplane.telemetry.models import (
    DriftAlert,
    PoolDriftAlert,
    ProfileDerivation,
    RunStatus,
)
from controlplane.telemetry.prometheus import PrometheusClient, PrometheusError
from controlplane.telemetry.pull import prometheus_client, telemetry_pull
from planner.forecast import MIN_HISTORY_HOURS
from workers.fleetsim.exposition import LabelNames
from workers.fleetsim.fleet import FleetSimulator
from workers.fleetsim.history import FRIDAY_REVIEW_EXTRA_TOKENS, FleetHistory, TrafficPattern
from workers.fleetsim.scenario import ScenarioFleetError, fleet_from_scenario
from workers.fleetsim.server import make_server, serving

HOUR_S = 3600
DAY_S = 86400
# Windows of one pull: a day of 5-minute buckets is about 200,000 samples for the example.
PULL_WINDOW = timedelta(days=1)
FILES_SINK = "local-files"
FILES_DIRECTORY = "allocations"
DEFAULT_SCENARIO = "docs/scenarios/support-assistant.yaml"


def _utc(stamp: float) -> datetime:
    return datetime.fromtimestamp(stamp, tz=UTC)


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"


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

    def _options(self, options: dict[str, Any]) -> tuple[TelemetrySettings, float]:
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
            conf = replace(conf, prometheus_url=url)
        elif DAY_S % conf.bucket_s:
            raise CommandError(
                f"HEADROOM_TELEMETRY_BUCKET_S={conf.bucket_s}: the simulator needs a bucket "
                "width that divides a day",
                returncode=2,
            )
        return conf, wait_s

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
        began = time.monotonic()
        self.verbosity = int(options["verbosity"])
        conf, wait_s = self._options(options)
        now = time.time()
        width = conf.bucket_s
        # Windows end on the hour (and the bucket grid): a run again within the hour sees the
        # same windows and changes nothing.
        end_s = math.floor((now - conf.lag_s) / HOUR_S) * HOUR_S
        end_s = math.floor(end_s / width) * width
        end = _utc(end_s)
        window = timedelta(seconds=conf.profile_window_s)
        simulated = options["prometheus_url"] is None
        if simulated:
            split = _utc(math.floor((end_s - options["drift_hours_ago"] * HOUR_S) / width) * width)
        else:
            split = end - window
        if options["history_days"] is not None:
            start = _utc(math.floor((now - options["history_days"] * DAY_S) / width) * width)
        else:
            anchor = forecast_anchor(_utc(now))
            start = min(anchor - timedelta(hours=MIN_HISTORY_HOURS + 1), split - window)

        with self._source(conf, options, now=now, start=start, split=split) as url:
            client = prometheus_client(replace(conf, prometheus_url=url))
            self._pull(client, width, start, end)
        raised = self._derive(split, end, window)
        self._print_alerts()
        self._ensure_sink()
        run = self._replan(raised, wait_s)
        assert run.plan is not None
        self._print_forecast(run.plan)
        self.stdout.write(plan_summary(run.plan))
        self._emit(run.plan)
        self.stdout.write(f"Done in {time.monotonic() - began:.0f} s.")

    @contextmanager
    def _source(
        self,
        conf: TelemetrySettings,
        options: dict[str, Any],
        *,
        now: float,
        start: datetime,
        split: datetime,
    ) -> Iterator[str]:
        """The Prometheus URL to pull from: the given one, or the simulator's, served from this
        process while the block runs."""
        if options["prometheus_url"] is not None:
            self.stdout.write(f"Telemetry: Prometheus at {conf.prometheus_url}")
            yield conf.prometheus_url
            return
        path = Path(options["scenario"])
        if not path.is_absolute() and not path.exists():
            path = Path(settings.BASE_DIR) / path
        try:
            spec = fleet_from_scenario(path)
        except ScenarioFleetError as exc:
            raise CommandError(f"--scenario: {exc}", returncode=2) from exc
        history = FleetHistory(
            spec,
            now=now,
            days=(now - start.timestamp()) / DAY_S,
            bucket_s=conf.bucket_s,
            pattern=TrafficPattern(weekly_growth=options["weekly_growth"]),
            seed=options["seed"],
            drift=[(split.timestamp(), FRIDAY_REVIEW_EXTRA_TOKENS)],
        )
        labels = LabelNames(conf.labels.tenant, conf.labels.model, conf.labels.region)
        server = make_server(
            FleetSimulator(spec, seed=options["seed"], start_time=now),
            port=0,
            labels=labels,
            history=history,
        )
        with serving(server) as url:
            self.stdout.write(
                f"Telemetry: fleet simulator at {url} ({path.name}; history from "
                f"{_when(start)}, {options['weekly_growth']:+.0%} a week; prompt growth "
                f"+{FRIDAY_REVIEW_EXTRA_TOKENS:,.0f} tokens from {_when(split)})"
            )
            yield url

    def _pull(self, client: PrometheusClient, width: int, start: datetime, end: datetime) -> None:
        """Pull the parts of [start, end) no successful pull covered, a day at a time."""
        gaps = selectors.unpulled_windows(bucket_s=width, start=start, end=end)
        if not gaps:
            self.stdout.write(f"Pulled: nothing new up to {_when(end)}.")
            return
        began = time.monotonic()
        pulls = stored = 0
        for lo, hi in gaps:
            while lo < hi:
                upper = min(hi, lo + PULL_WINDOW)
                try:
                    pull = telemetry_pull(window_start=lo, window_end=upper, client=client)
                except PrometheusError as exc:
                    raise CommandError(
                        f"pulling {_when(lo)} to {_when(upper)} failed: {exc}", returncode=1
                    ) from exc
                pulls += 1
                stored += pull.samples_stored
                if self.verbosity > 1:
                    self.stdout.write(
                        f"  pull #{pull.pk} {_when(lo)} to {_when(upper)}: "
                        f"{pull.samples_stored:,} samples"
                    )
                if pull.unknown_labels:
                    self.stdout.write(
                        "  label values the database does not know: "
                        + ", ".join(pull.unknown_labels)
                    )
                lo = upper
        first, last = gaps[0][0], gaps[-1][1]
        self.stdout.write(
            f"Pulled {_when(first)} to {_when(last)}: {pulls} windows, {stored:,} samples "
            f"stored in {time.monotonic() - began:.0f} s."
        )

    def _derive(self, split: datetime, end: datetime, window: timedelta) -> list[DriftAlert]:
        """Derive the windows not derived before; returns the drift alerts they raised."""
        windows = []
        if not ProfileDerivation.objects.filter(status=RunStatus.SUCCEEDED).exists():
            windows.append((split - window, split, "before the drift"))
        windows.append((max(split, end - window), end, "last window"))
        raised: list[DriftAlert] = []
        for lo, hi, what in windows:
            done = ProfileDerivation.objects.filter(
                status=RunStatus.SUCCEEDED, window_start=lo, window_end=hi
            ).exists()
            if done:
                self.stdout.write(f"Profiles ({what}, {_when(lo)} to {_when(hi)}): derived before.")
                continue
            try:
                run = workload_profiles_derive(window_start=lo, window_end=hi)
            except Exception as exc:
                raise CommandError(f"deriving profiles failed: {exc}", returncode=1) from exc
            pool_drift_alerts_price(derivation=run)
            alerts = drift_alerts_raised(derivation=run)
            raised += alerts
            self.stdout.write(
                f"Profiles ({what}, {_when(lo)} to {_when(hi)}): {run.profiles_created} new "
                f"versions, {run.profiles_unchanged} unchanged; drift alerts {len(alerts)} "
                f"raised, {run.alerts_updated} updated, {run.alerts_resolved} resolved."
            )
            for skipped in run.skipped:
                self.stdout.write(f"  no profile for {skipped['series']}: {skipped['reason']}")
        return raised

    def _print_alerts(self) -> None:
        alerts = (
            DriftAlert.objects.filter(status__in=DriftAlert.ACTIVE)
            .select_related("tenant", "region")
            .order_by("region__name", "tenant__name", "kind")
        )
        if not alerts:
            self.stdout.write("Drift alerts: none active.")
            return
        self.stdout.write("Drift alerts (active):")
        for alert in alerts:
            self.stdout.write(f"  #{alert.pk} [{alert.status}] {alert.message}")
        pools = PoolDriftAlert.objects.filter(status__in=PoolDriftAlert.ACTIVE).order_by("pk")
        if pools:
            self.stdout.write("Pool drift (active), priced by re-solving the placement:")
            for pool in pools.select_related("model", "region"):
                self.stdout.write(f"  #{pool.pk} [{pool.pricing}] {pool.message}")

    def _replan(self, raised: list[DriftAlert], wait_s: float) -> ReplanRun:
        if raised:
            queued = replan_request(
                trigger=Plan.Trigger.DRIFT, reason=drift_reason(raised), enqueue=False
            )
        else:
            queued = replan_request(trigger=Plan.Trigger.COMMAND, enqueue=False)
        run = replan_execute(run_id=queued.pk, wait_s=wait_s)
        assert run is not None  # created just above
        if run.status == ReplanRun.Status.SKIPPED:
            raise CommandError(f"re-plan #{run.pk} skipped: {run.error}", returncode=1)
        if run.status == ReplanRun.Status.FAILED or run.plan is None:
            raise CommandError(f"re-plan #{run.pk} failed: {run.error}", returncode=1)
        if run.status == ReplanRun.Status.UNCHANGED:
            self.stdout.write(
                f"Re-plan #{run.pk}: inputs unchanged since plan v{run.plan.version}; no new plan."
            )
        else:
            self.stdout.write(
                f"Re-plan #{run.pk} ({run.get_trigger_display()}) made plan v{run.plan.version}."
            )
        return run

    def _print_forecast(self, plan: Plan) -> None:
        band = plan.forecast_band or {}
        sources = band.get("sources", {})
        anchor = band.get("anchor", "")
        self.stdout.write(
            f"Forecast: history up to {anchor[:16].replace('T', ' ')} UTC, "
            f"{band.get('horizon_hours', '?')} h ahead; demands sized from telemetry "
            f"{sources.get('telemetry', 0)}, declared {sources.get('declared', 0)}."
        )
        for demand in plan.problem.get("demands", []):
            info = demand.get("forecast")
            if not info:
                continue
            self.stdout.write(
                f"  {demand['id']}: profile {info['declared_requests_per_s']:.2f} req/s, "
                f"planned {demand['requests_per_s']:.2f} (q={info['quantile']:g} of the "
                f"forecast; band {info['low_requests_per_s']:.2f}–"
                f"{info['high_requests_per_s']:.2f}; {info['history_hours']} h of history, "
                f"{info['weekly_growth']:+.1%} a week)"
            )

    def _ensure_sink(self) -> None:
        """A files sink under the emission root when no sink is configured at all (one an
        admin disabled stays disabled)."""
        if AllocationSink.objects.exists():
            return
        sink = AllocationSink(
            kind=AllocationSink.Kind.FILES, name=FILES_SINK, directory=FILES_DIRECTORY
        )
        try:
            sink.full_clean()
        except ValidationError as exc:
            raise CommandError(f"cannot create the files sink: {exc}", returncode=1) from exc
        sink.save()
        self.stdout.write(f"Created the files sink {FILES_SINK!r} ({sink.resolved_directory()}).")

    def _emit(self, plan: Plan) -> None:
        if plan.state != Plan.State.ACTIVE:
            self.stdout.write(f"Plan v{plan.version} is {plan.get_state_display()}: not emitted.")
            return
        # Both idempotent: a plan's rows are queued once, delivered rows are not sent again.
        outbox_enqueue_for_plan(plan=plan)
        outbox_dispatch()
        entries = (
            OutboxEntry.objects.filter(plan=plan)
            .select_related("sink")
            .order_by("sink__name", "region")
        )
        if not entries:
            self.stdout.write("Emitted: no enabled sink.")
            return
        for entry in entries:
            where = entry.region
            if entry.sink.kind == AllocationSink.Kind.FILES:
                where = str(region_path(entry.sink.resolved_directory(), entry.region))
            status = entry.get_status_display()
            error = f" ({entry.last_error})" if entry.last_error else ""
            self.stdout.write(f"Emitted to {entry.sink.name}: {where}: {status}{error}")
