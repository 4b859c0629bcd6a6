"""The whole chain in one place: pull telemetry → derive workload profiles and drift alerts →
re-plan from the forecast → activate → emit.

Every other app does one link and never calls the next one; this module decides when the next
link follows. Two paths make the same decisions:

- **Scheduled** (Celery beat, ``controlplane.pipeline.tasks``): a pull that stored new samples
  calls ``after_pull``, which names the window to derive (or None); the derivation then calls
  ``after_derivation``, which prices each pool's drift by re-solving the placement and
  requests a drift re-plan when it raised alerts. An activated
  plan is handed to emission's outbox by ``after_activation``, in the activating transaction.
- **At once** (``manage.py run_pipeline``): ``pipeline_run`` pulls what no pull stored, derives
  the same windows (``derivation_window``), re-plans (trigger ``drift`` when alerts were
  raised), and emits in this process, returning a ``PipelineReport``.

A derivation window is ``HEADROOM_TELEMETRY_PROFILE_WINDOW_S`` long and ends at the newest
pulled data (``derivation_window``); a window derived before is not derived again. The command
pulls up to the last whole hour, so running it again within the hour pulls nothing, derives
nothing and makes no new plan; the schedule derives after each pull that stored new samples,
and its hourly derivation only when a pull left a window underived.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from controlplane.emission.models import AllocationSink, OutboxEntry
from controlplane.emission.services import outbox_dispatch, outbox_enqueue_for_plan
from controlplane.emission.sinks.files import region_path
from controlplane.plans.assumptions import pool_signal_alerts_check
from controlplane.plans.demand import forecast_anchor
from controlplane.plans.impact import pool_drift_alerts_price
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.selectors import plan_problem_or_error, plan_summary
from controlplane.plans.services import drift_reason, replan_execute, replan_request
from controlplane.plans.signals import plan_activated
from controlplane.telemetry import selectors as telemetry_selectors
from controlplane.telemetry.conf import TelemetrySettings, telemetry_settings
from controlplane.telemetry.derive import derivation_follows_pull, workload_profiles_derive
from controlplane.telemetry.drift import drift_alerts_raised
from controlplane.telemetry.models import (
    DriftAlert,
    PoolDriftAlert,
    ProfileDerivation,
    RunStatus,
    TelemetryPull,
)
from controlplane.telemetry.prometheus import PrometheusClient, PrometheusError
from controlplane.telemetry.pull import prometheus_client, telemetry_pull
from planner.forecast import MIN_HISTORY_HOURS
from workers.simulators.fleet.exposition import LabelNames
from workers.simulators.fleet.fleet import FleetSimulator
from workers.simulators.fleet.history import (
    FRIDAY_REVIEW_EXTRA_TOKENS,
    FleetHistory,
    TrafficPattern,
)
from workers.simulators.fleet.scenario import ScenarioFleetError, fleet_from_scenario
from workers.simulators.fleet.server import make_server, serving

logger = logging.getLogger(__name__)

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


# -- the decisions both paths share -----------------------------------------------------------


def on_the_hour(moment: datetime, *, bucket_s: int) -> datetime:
    """``moment`` floored to the hour and then to the bucket grid."""
    stamp = math.floor(moment.timestamp() / HOUR_S) * HOUR_S
    return _utc(math.floor(stamp / bucket_s) * bucket_s)


def derivation_window(
    *, end: datetime, conf: TelemetrySettings, not_before: datetime | None = None
) -> tuple[datetime, datetime]:
    """The profile window that ends at ``end``: ``profile_window_s`` long, and starting no
    earlier than ``not_before`` when given (the command's simulated drift)."""
    start = end - timedelta(seconds=conf.profile_window_s)
    if not_before is not None:
        start = max(start, not_before)
    return start, end


def derived_before(*, start: datetime, end: datetime) -> bool:
    """Whether a derivation of exactly this window succeeded before."""
    return ProfileDerivation.objects.filter(
        status=RunStatus.SUCCEEDED, window_start=start, window_end=end
    ).exists()


def after_pull(*, pull: TelemetryPull) -> tuple[datetime, datetime] | None:
    """The window to derive after ``pull``, or None: only after a pull that succeeded and
    stored new samples (a window pulled again stores none), with
    ``HEADROOM_TELEMETRY_DERIVE_AFTER_PULL`` on, for the window ending at the newest pulled
    bucket, when that window was not derived before."""
    if not derivation_follows_pull(pull=pull):
        return None
    return due_derivation_window()


def due_derivation_window() -> tuple[datetime, datetime] | None:
    """The window ending at the newest pulled bucket, unless derived before (None also when
    nothing was pulled yet)."""
    conf = telemetry_settings()
    pulled = telemetry_selectors.last_pulled_until(bucket_s=telemetry_selectors.stored_bucket_s())
    if pulled is None:
        return None
    start, end = derivation_window(end=pulled, conf=conf)
    if derived_before(start=start, end=end):
        return None
    return start, end


def after_derivation(*, derivation: ProfileDerivation) -> ReplanRun | None:
    """Price the pool drifts ``derivation`` changed and check the pools' engine signals
    against the active plan (``plans.assumptions.pool_signal_alerts_check``), then request a
    re-plan (trigger ``drift``) for the drift alerts it raised.

    Pricing re-solves the re-plan's problem before and after the drift
    (``plans.impact.pool_drift_alerts_price``), so the alerts, and the re-plan's reason that
    repeats them, say what the re-plan will pay. None, and nothing requested, when the
    derivation raised no alert or ``HEADROOM_REPLAN_ON_DRIFT`` is off. Requesting one while
    another re-plan runs, or for inputs that have not changed, is harmless: the planner lock
    runs one at a time and unchanged inputs make no new plan.
    """
    pool_drift_alerts_price(derivation=derivation)
    pool_signal_alerts_check(derivation=derivation)
    alerts = drift_alerts_raised(derivation=derivation)
    if not alerts or not settings.HEADROOM_REPLAN_ON_DRIFT:
        return None
    run = replan_request(trigger=Plan.Trigger.DRIFT, reason=drift_reason(alerts))
    logger.info("re-plan run %s requested for drift alerts %s", run.pk, [a.pk for a in alerts])
    return run


def after_activation(*, plan: Plan) -> None:
    """Hand an activated plan to emission: its outbox rows, written in the activating
    transaction (a dispatch is kicked once it commits)."""
    outbox_enqueue_for_plan(plan=plan)


def _on_plan_activated(sender: Any, *, plan: Plan, **kwargs: Any) -> None:
    after_activation(plan=plan)


def connect() -> None:
    """Connect the hand-over from an activated plan to emission (``PipelineConfig.ready``)."""
    plan_activated.connect(_on_plan_activated, dispatch_uid="pipeline.after_activation")


# -- the whole job at once --------------------------------------------------------------------


class PipelineFailed(Exception):
    """A step failed; ``report`` holds what ran before it, ``exit_status`` is 1 for a failed
    step and 2 for bad options or settings."""

    def __init__(self, message: str, *, report: PipelineReport, exit_status: int = 1) -> None:
        super().__init__(message)
        self.report = report
        self.exit_status = exit_status


@dataclass(frozen=True)
class PipelineOptions:
    """What ``pipeline_run`` pulls from and how the simulated history looks."""

    scenario: Path = Path(DEFAULT_SCENARIO)
    # None: serve the fleet simulator in this process.
    prometheus_url: str | None = None
    # None: what the forecast needs (two weeks before the start of today, UTC, and an hour).
    history_days: float | None = None
    drift_hours_ago: float = 24.0
    weekly_growth: float = 0.02
    seed: int = 0
    # Seconds to wait for a re-plan that is running.
    wait_s: float = 0.0
    # Report each pull too.
    verbose: bool = False


@dataclass
class PipelineReport:
    """What the run did, step by step, and the lines that tell an operator so."""

    lines: list[str] = field(default_factory=list)
    pulls: int = 0
    samples_stored: int = 0
    derivations: list[ProfileDerivation] = field(default_factory=list)
    alerts_raised: list[DriftAlert] = field(default_factory=list)
    replan: ReplanRun | None = None
    plan: Plan | None = None
    outbox: list[OutboxEntry] = field(default_factory=list)
    # Called with each line as it is said (the command prints them as the run goes).
    echo: Callable[[str], None] | None = None

    def say(self, line: str) -> None:
        self.lines.append(line)
        if self.echo is not None:
            self.echo(line)


def pipeline_run(
    *,
    options: PipelineOptions,
    conf: TelemetrySettings,
    echo: Callable[[str], None] | None = None,
) -> PipelineReport:
    """Run the whole job once (see the module docstring); raises ``PipelineFailed``.

    ``echo`` is called with each line of the report as it is added."""
    began = time.monotonic()
    report = PipelineReport(echo=echo)
    if options.prometheus_url is not None:
        conf = replace(conf, prometheus_url=options.prometheus_url)
    now = wall_clock()
    width = conf.bucket_s
    end = on_the_hour(_utc(now - conf.lag_s), bucket_s=width)
    window = timedelta(seconds=conf.profile_window_s)
    if options.prometheus_url is None:
        drift_s = end.timestamp() - options.drift_hours_ago * HOUR_S
        split = _utc(math.floor(drift_s / width) * width)
    else:
        split = end - window
    if options.history_days is not None:
        start = _utc(math.floor((now - options.history_days * DAY_S) / width) * width)
    else:
        anchor = forecast_anchor(_utc(now))
        start = min(anchor - timedelta(hours=MIN_HISTORY_HOURS + 1), split - window)

    with _source(report, conf, options, now=now, start=start, split=split) as url:
        client = prometheus_client(replace(conf, prometheus_url=url))
        _pull(report, options, client, width, start, end)
    _derive(report, conf, split, end)
    _alerts(report)
    _ensure_sink(report)
    run = _replan(report, options)
    assert run.plan is not None
    _forecast(report, run.plan)
    report.say(plan_summary(run.plan))
    _emit(report, run.plan)
    report.say(f"Done in {time.monotonic() - began:.0f} s.")
    return report


@contextmanager
def _source(
    report: PipelineReport,
    conf: TelemetrySettings,
    options: PipelineOptions,
    *,
    now: float,
    start: datetime,
    split: datetime,
) -> Iterator[str]:
    """The Prometheus URL to pull from: the given one, or the fleet simulator's, served from
    this process while the block runs, over simulated history with the Friday-review prompt
    growth from ``split``."""
    if options.prometheus_url is not None:
        report.say(f"Telemetry: Prometheus at {conf.prometheus_url}")
        yield conf.prometheus_url
        return
    path = options.scenario
    if not path.is_absolute() and not path.exists():
        path = Path(settings.BASE_DIR) / path
    try:
        spec = fleet_from_scenario(path)
    except ScenarioFleetError as exc:
        raise PipelineFailed(f"--scenario: {exc}", report=report, exit_status=2) from exc
    history = FleetHistory(
        spec,
        now=now,
        days=(now - start.timestamp()) / DAY_S,
        bucket_s=conf.bucket_s,
        pattern=TrafficPattern(weekly_growth=options.weekly_growth),
        seed=options.seed,
        drift=[(split.timestamp(), FRIDAY_REVIEW_EXTRA_TOKENS)],
    )
    labels = LabelNames(conf.labels.tenant, conf.labels.model, conf.labels.region)
    server = make_server(
        FleetSimulator(spec, seed=options.seed, start_time=now),
        port=0,
        labels=labels,
        history=history,
    )
    with serving(server) as url:
        report.say(
            f"Telemetry: fleet simulator at {url} ({path.name}; history from "
            f"{_when(start)}, {options.weekly_growth:+.0%} a week; prompt growth "
            f"+{FRIDAY_REVIEW_EXTRA_TOKENS:,.0f} tokens from {_when(split)})"
        )
        yield url


def wall_clock() -> float:
    """Now, in seconds since the epoch: the moment a run's windows are laid out from."""
    return time.time()


def _pull(
    report: PipelineReport,
    options: PipelineOptions,
    client: PrometheusClient,
    width: int,
    start: datetime,
    end: datetime,
) -> None:
    """Pull the parts of [start, end) no successful pull covered, a day at a time."""
    gaps = telemetry_selectors.unpulled_windows(bucket_s=width, start=start, end=end)
    if not gaps:
        report.say(f"Pulled: nothing new up to {_when(end)}.")
        return
    began = time.monotonic()
    for lo, hi in gaps:
        while lo < hi:
            upper = min(hi, lo + PULL_WINDOW)
            try:
                pull = telemetry_pull(window_start=lo, window_end=upper, client=client)
            except PrometheusError as exc:
                raise PipelineFailed(
                    f"pulling {_when(lo)} to {_when(upper)} failed: {exc}", report=report
                ) from exc
            report.pulls += 1
            report.samples_stored += pull.samples_stored
            if options.verbose:
                report.say(
                    f"  pull #{pull.pk} {_when(lo)} to {_when(upper)}: "
                    f"{pull.samples_stored:,} samples"
                )
            if pull.unknown_labels:
                report.say(
                    "  label values the database does not know: " + ", ".join(pull.unknown_labels)
                )
            lo = upper
    first, last = gaps[0][0], gaps[-1][1]
    report.say(
        f"Pulled {_when(first)} to {_when(last)}: {report.pulls} windows, "
        f"{report.samples_stored:,} samples stored in {time.monotonic() - began:.0f} s."
    )


def _derive(
    report: PipelineReport, conf: TelemetrySettings, split: datetime, end: datetime
) -> None:
    """Derive the windows not derived before: on a database without profiles derived from
    telemetry, first the window before ``split`` (a baseline for drift), then the window
    ending at ``end`` (from ``split`` on at the earliest)."""
    windows: list[tuple[datetime, datetime, str]] = []
    if not ProfileDerivation.objects.filter(status=RunStatus.SUCCEEDED).exists():
        lo, hi = derivation_window(end=split, conf=conf)
        windows.append((lo, hi, "before the drift"))
    lo, hi = derivation_window(end=end, conf=conf, not_before=split)
    windows.append((lo, hi, "last window"))
    for lo, hi, what in windows:
        if derived_before(start=lo, end=hi):
            report.say(f"Profiles ({what}, {_when(lo)} to {_when(hi)}): derived before.")
            continue
        try:
            run = workload_profiles_derive(window_start=lo, window_end=hi)
        except Exception as exc:
            raise PipelineFailed(f"deriving profiles failed: {exc}", report=report) from exc
        pool_drift_alerts_price(derivation=run)
        signals = pool_signal_alerts_check(derivation=run)
        alerts = drift_alerts_raised(derivation=run)
        report.derivations.append(run)
        report.alerts_raised += alerts
        report.say(
            f"Profiles ({what}, {_when(lo)} to {_when(hi)}): {run.profiles_created} new "
            f"versions, {run.profiles_unchanged} unchanged; drift alerts {len(alerts)} "
            f"raised, {run.alerts_updated} updated, {run.alerts_resolved} resolved."
        )
        for skipped in run.skipped:
            report.say(f"  no profile for {skipped['series']}: {skipped['reason']}")
        for signal in signals:
            report.say(f"  pool signal alert #{signal.pk}: {signal.message}")


def _alerts(report: PipelineReport) -> None:
    alerts = (
        DriftAlert.objects.filter(status__in=DriftAlert.ACTIVE)
        .select_related("tenant", "region")
        .order_by("region__name", "tenant__name", "kind")
    )
    if not alerts:
        report.say("Drift alerts: none active.")
        return
    report.say("Drift alerts (active):")
    for alert in alerts:
        report.say(f"  #{alert.pk} [{alert.status}] {alert.message}")
    pools = PoolDriftAlert.objects.filter(status__in=PoolDriftAlert.ACTIVE).order_by("pk")
    if pools:
        report.say("Pool drift (active), priced by re-solving the placement:")
        for pool in pools.select_related("model", "region"):
            report.say(f"  #{pool.pk} [{pool.pricing}] {pool.message}")


def _ensure_sink(report: PipelineReport) -> None:
    """A files sink under the emission root when no sink is configured at all (one an admin
    disabled stays disabled)."""
    if AllocationSink.objects.exists():
        return
    sink = AllocationSink(
        kind=AllocationSink.Kind.FILES, name=FILES_SINK, directory=FILES_DIRECTORY
    )
    try:
        sink.full_clean()
    except ValidationError as exc:
        raise PipelineFailed(f"cannot create the files sink: {exc}", report=report) from exc
    sink.save()
    report.say(f"Created the files sink {FILES_SINK!r} ({sink.resolved_directory()}).")


def _replan(report: PipelineReport, options: PipelineOptions) -> ReplanRun:
    """One re-plan in this process: trigger ``drift`` when this run raised alerts."""
    raised: Sequence[DriftAlert] = report.alerts_raised
    if raised:
        queued = replan_request(
            trigger=Plan.Trigger.DRIFT, reason=drift_reason(raised), enqueue=False
        )
    else:
        queued = replan_request(trigger=Plan.Trigger.COMMAND, enqueue=False)
    run = replan_execute(run_id=queued.pk, wait_s=options.wait_s)
    assert run is not None  # created just above
    report.replan = run
    if run.status == ReplanRun.Status.SKIPPED:
        raise PipelineFailed(f"re-plan #{run.pk} skipped: {run.error}", report=report)
    if run.status == ReplanRun.Status.FAILED or run.plan is None:
        raise PipelineFailed(f"re-plan #{run.pk} failed: {run.error}", report=report)
    report.plan = run.plan
    if run.status == ReplanRun.Status.UNCHANGED:
        report.say(
            f"Re-plan #{run.pk}: inputs unchanged since plan v{run.plan.version}; no new plan."
        )
    else:
        report.say(
            f"Re-plan #{run.pk} ({run.get_trigger_display()}) made plan v{run.plan.version}."
        )
    return run


def _forecast(report: PipelineReport, plan: Plan) -> None:
    band = plan.forecast_band or {}
    sources = band.get("sources", {})
    anchor = band.get("anchor", "")
    report.say(
        f"Forecast: history up to {anchor[:16].replace('T', ' ')} UTC, "
        f"{band.get('horizon_hours', '?')} h ahead; demands sized from telemetry "
        f"{sources.get('telemetry', 0)}, declared {sources.get('declared', 0)}."
    )
    problem, _ = plan_problem_or_error(plan)
    for demand in problem.demands if problem else ():
        info: Mapping[str, Any] | None = demand.forecast
        if not info:
            continue
        report.say(
            f"  {demand.id}: profile {info['declared_requests_per_s']:.2f} req/s, "
            f"planned {demand.requests_per_s:.2f} (q={info['quantile']:g} of the "
            f"forecast; band {info['low_requests_per_s']:.2f}–"
            f"{info['high_requests_per_s']:.2f}; {info['history_hours']} h of history, "
            f"{info['weekly_growth']:+.1%} a week)"
        )


def _emit(report: PipelineReport, plan: Plan) -> None:
    if plan.state != Plan.State.ACTIVE:
        report.say(f"Plan v{plan.version} is {plan.get_state_display()}: not emitted.")
        return
    # Both idempotent: a plan's rows are queued once, delivered rows are not sent again.
    outbox_enqueue_for_plan(plan=plan)
    outbox_dispatch()
    entries = list(
        OutboxEntry.objects.filter(plan=plan)
        .select_related("sink")
        .order_by("sink__name", "region")
    )
    report.outbox = entries
    if not entries:
        report.say("Emitted: no enabled sink.")
        return
    for entry in entries:
        where = entry.region
        if entry.sink.kind == AllocationSink.Kind.FILES:
            where = str(region_path(entry.sink.resolved_directory(), entry.region))
        status = entry.get_status_display()
        error = f" ({entry.last_error})" if entry.last_error else ""
        report.say(f"Emitted to {entry.sink.name}: {where}: {status}{error}")
