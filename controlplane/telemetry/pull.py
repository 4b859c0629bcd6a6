"""Pull serving metrics from Prometheus (``telemetry_pull``) and the telemetry schedule.

Every query of ``metrics.pull_queries`` is run over the window; everything is fetched and
checked first; only then are the series and samples written (``storage``), in one transaction,
so a pull that fails stores nothing. Every attempt leaves a ``TelemetryPull`` row.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from controlplane.core.outage import on_fresh_connection
from controlplane.core.schedule import ScheduledTask
from controlplane.telemetry import histograms, selectors
from controlplane.telemetry.conf import LabelConfig, TelemetrySettings, telemetry_settings
from controlplane.telemetry.metrics import GATEWAY_METRICS, Query, gateway_queries, pull_queries
from controlplane.telemetry.models import PULL_PARTIAL, RunStatus, TelemetryPull
from controlplane.telemetry.prometheus import (
    PrometheusBadResponse,
    PrometheusClient,
    PrometheusError,
    PrometheusTooManySamples,
    RangeAnswer,
)
from controlplane.telemetry.storage import SeriesKey, samples_store, series_ids

logger = logging.getLogger(__name__)


@dataclass
class Fetched:
    """What a pull read from Prometheus, checked, before anything is written."""

    samples: dict[SeriesKey, dict[datetime, float]] = field(default_factory=dict)
    queries: int = 0
    series: int = 0
    skipped_series: int = 0
    warnings: list[str] = field(default_factory=list)
    splits: int = 0
    # Stored names no series answered under any of their exposed names, with those names.
    missing: dict[str, tuple[str, ...]] = field(default_factory=dict)
    engine_answered: bool = False
    gateway_answered: bool = False

    def silence(self, *, engine: str, gateway: str) -> str:
        """What the pull must say when a whole source answered none of its names."""
        notes = []
        if not self.engine_answered:
            notes.append(
                f"the engine's metrics ({engine}) answered no series under any of their names: "
                "check HEADROOM_TELEMETRY_ENGINE and the scrape of the pools"
            )
        if gateway and not self.gateway_answered:
            names = sorted({n for m in GATEWAY_METRICS for n in self.missing.get(m, ())})
            notes.append(
                f"the gateway ({gateway}) answered none of its metrics ({', '.join(names)}): "
                "no tenant's demand is measured, and no pool's demand is filed under a tenant; "
                "check HEADROOM_TELEMETRY_GATEWAY and the gateway's release"
            )
        return "; ".join(notes)

    @property
    def sample_count(self) -> int:
        return sum(len(points) for points in self.samples.values())


# Prometheus refuses a range query of more than 11,000 points per series.
_MAX_POINTS = 10_000


def _utc(stamp: float) -> datetime:
    return datetime.fromtimestamp(stamp, tz=UTC)


def pull_window(
    *,
    conf: TelemetrySettings,
    now: datetime,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
) -> tuple[datetime, datetime]:
    """The buckets a pull asks for: [start, end), both on the bucket grid (unix time).

    By default it ends at the last bucket that finished at least ``lag_s`` ago and starts where
    the last successful pull ended, or earlier at the start of a partial pull's window that no
    later pull completed, but catches up no more than ``max_catchup_s``; the first pull looks
    back ``lookback_s``.
    """
    width = conf.bucket_s

    def floor(moment: datetime) -> datetime:
        return _utc(math.floor(moment.timestamp() / width) * width)

    end = floor(window_end if window_end is not None else now - timedelta(seconds=conf.lag_s))
    last = selectors.last_pulled_until(bucket_s=width)
    if window_start is not None:
        start = floor(window_start)
    else:
        if last is not None:
            start = floor(last)
        else:
            start = floor(end - timedelta(seconds=conf.lookback_s))
        partial = selectors.first_incomplete_start(bucket_s=width)
        if partial is not None:
            start = min(start, floor(partial))
        start = max(start, floor(end - timedelta(seconds=conf.max_catchup_s)))
    return min(start, end), end


def _answers(
    client: PrometheusClient, query: str, *, start: float, end: float, step_s: int, fetched: Fetched
) -> list[RangeAnswer]:
    """The answers for [start, end) at ``step_s``; a range Prometheus refuses as too many
    samples is split in two on the step grid, down to a single step."""
    try:
        fetched.queries += 1
        return [client.query_range_answer(query, start=start, end=end, step_s=step_s)]
    except PrometheusTooManySamples:
        steps = round((end - start) / step_s)
        if steps < 1:
            raise
        fetched.splits += 1
        middle = start + (steps // 2) * step_s
        return _answers(
            client, query, start=start, end=middle, step_s=step_s, fetched=fetched
        ) + _answers(client, query, start=middle + step_s, end=end, step_s=step_s, fetched=fetched)


def telemetry_fetch(
    *,
    client: PrometheusClient,
    labels: LabelConfig,
    bucket_s: int,
    start: datetime,
    end: datetime,
    engine: str = "vllm-v1",
    gateway: str = "",
    gateway_labels: LabelConfig | None = None,
) -> Fetched:
    """Run every query over [start, end) and check the answers; raises ``PrometheusError``.

    The point Prometheus evaluates at time t covers (t − bucket, t]; it is stored as the bucket
    starting at t − bucket. Series without a model or region label are counted and left out;
    a series without a tenant label is the pool's (tenant ""). A point off the bucket grid,
    outside the window, repeated, not finite or negative (every metric here is a count, a
    mean count or a fraction) is garbage, and garbage fails the whole pull. A name the engine
    does not answer is tried under its fallback names; warnings are collected (the answer is
    partial); a range refused as too many samples is split. A gateway's series (tenant
    demand) must name a tenant.
    """
    fetched = Fetched()
    first, last = start.timestamp() + bucket_s, end.timestamp()
    if last < first:
        return fetched
    chunk = _MAX_POINTS * bucket_s
    planned = [(q, labels) for q in pull_queries(labels, bucket_s, engine)]
    if gateway:
        gw_labels = gateway_labels or labels
        planned += [(q, gw_labels) for q in gateway_queries(gw_labels, bucket_s, gateway)]
    for query, query_labels in planned:
        answered = False
        # An info gauge's engines per label set and bucket: (Σ engines × product, Σ engines).
        per_engine: dict[SeriesKey, dict[datetime, list[float]]] = {}
        chunk_start = first
        while chunk_start <= last:
            chunk_end = min(last, chunk_start + chunk - bucket_s)
            answers: list[RangeAnswer] = []
            for promql in (query.promql, *query.fallbacks):
                answers = _answers(
                    client, promql, start=chunk_start, end=chunk_end, step_s=bucket_s,
                    fetched=fetched,
                )  # fmt: skip
                if any(answer.series for answer in answers):
                    break
            result = [series for answer in answers for series in answer.series]
            answered = answered or bool(result)
            fetched.warnings += [w for answer in answers for w in answer.warnings]
            for series in result:
                key = _series_key(series.labels, query_labels, query)
                if key is None or (query.metric in GATEWAY_METRICS and not key.tenant):
                    fetched.skipped_series += 1
                    continue
                factor = _label_product(series.labels, query.label_factors)
                if factor is None:
                    continue  # vLLM before its profiling run: no blocks yet
                fetched.series += 1
                points = fetched.samples.setdefault(key, {})
                for stamp, value in series.points:
                    steps = (stamp - first) / bucket_s
                    if abs(steps - round(steps)) > 1e-6 or not first <= stamp <= last:
                        raise PrometheusBadResponse(
                            f"{query.metric}: point at {stamp} is off the {bucket_s} s grid of "
                            "the window asked for"
                        )
                    if not math.isfinite(value) or value < 0:
                        raise PrometheusBadResponse(
                            f"{query.metric}{dict(series.labels)}: value {value!r} at {stamp} "
                            "is not a finite non-negative number"
                        )
                    bucket_start = _utc(round(stamp) - bucket_s)
                    if query.label_factors:
                        acc = per_engine.setdefault(key, {}).setdefault(bucket_start, [0.0, 0.0])
                        acc[0] += value * factor
                        acc[1] += value
                        continue
                    if bucket_start in points:
                        raise PrometheusBadResponse(
                            f"{query.metric}{dict(series.labels)}: two values at {stamp}"
                        )
                    points[bucket_start] = value
            chunk_start = chunk_end + bucket_s
        for key, buckets in per_engine.items():
            fetched.samples[key].update(
                (start_at, weighted / engines)
                for start_at, (weighted, engines) in buckets.items()
                if engines > 0
            )
        if not answered:
            fetched.missing[query.metric] = query.names
        elif query.metric in GATEWAY_METRICS:
            fetched.gateway_answered = True
        else:
            fetched.engine_answered = True
    return fetched


def _label_product(found: Mapping[str, str], factors: tuple[str, ...]) -> float | None:
    """The product of the named labels' values (1 without factors); None when one is absent
    or not a positive number (vLLM writes "None" before it knows its blocks)."""
    product = 1.0
    for name in factors:
        try:
            value = float(found.get(name, ""))
        except ValueError:
            return None
        if not math.isfinite(value) or value <= 0:
            return None
        product *= value
    return product


def _series_key(found: Mapping[str, str], labels: LabelConfig, query: Query) -> SeriesKey | None:
    tenant, model, region = (
        found.get(labels.tenant, ""),
        found.get(labels.model),
        found.get(labels.region),
    )
    if not model or not region:
        return None
    workload_class = found.get(labels.workload_class, "") if labels.workload_class else ""
    le = ""
    if query.by_le:
        le = found.get("le", "")
        try:
            histograms.parse_le(le)
        except histograms.HistogramError as exc:
            raise PrometheusBadResponse(f"{query.metric}: {exc}") from exc
    return SeriesKey(tenant, model, region, workload_class, query.metric, le)


def prometheus_client(conf: TelemetrySettings) -> PrometheusClient:
    return PrometheusClient(
        conf.prometheus_url,
        timeout_s=conf.prometheus_timeout_s,
        retries=conf.prometheus_retries,
        backoff_s=conf.prometheus_backoff_s,
    )


def telemetry_pull(
    *,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
    attempt: int = 1,
    task_id: str = "",
    client: PrometheusClient | None = None,
    now: datetime | None = None,
) -> TelemetryPull:
    """Pull one window of serving metrics and store its samples; returns the pull's report.

    On a Prometheus failure (down, slow, garbage, a refused query) the report is saved as
    failed with the error, nothing is stored, and the ``PrometheusError`` is raised again for
    the caller to retry. An answer that carried ``warnings`` is incomplete: its samples are
    stored as they came but the pull is recorded as ``partial`` (its warnings in ``error``),
    which is not final: the next pull starts at its window again, and a pull over a window a
    partial pull stored overwrites the stored values with what Prometheus answers now.
    """
    conf = telemetry_settings()
    start, end = pull_window(
        conf=conf, now=now or timezone.now(), window_start=window_start, window_end=window_end
    )
    pull = TelemetryPull.objects.create(
        task_id=task_id[:64],
        attempt=attempt,
        window_start=start,
        window_end=end,
        bucket_s=conf.bucket_s,
    )
    try:
        fetched = telemetry_fetch(
            client=client or prometheus_client(conf),
            labels=conf.labels,
            bucket_s=conf.bucket_s,
            start=start,
            end=end,
            engine=conf.engine,
            gateway=conf.gateway,
            gateway_labels=conf.gateway_labels,
        )
    except PrometheusError as exc:
        _pull_failed(pull, exc)
        logger.warning("telemetry pull %s failed (attempt %s): %s", pull.pk, attempt, exc)
        raise
    pull.queries = fetched.queries
    pull.series_fetched = fetched.series
    pull.samples_fetched = fetched.sample_count
    pull.skipped_series = fetched.skipped_series
    pull.missing_metrics = [
        f"{metric}: {' | '.join(names)}" for metric, names in sorted(fetched.missing.items())
    ]
    asked = end.timestamp() >= start.timestamp() + conf.bucket_s
    silence = fetched.silence(engine=conf.engine, gateway=conf.gateway) if asked else ""
    # Every read and write from here is inside the try: the database failing (restarted under
    # the pull) leaves a failed report, not one running for ever.
    try:
        pull.unknown_labels = selectors.unknown_label_values(
            {(k.tenant, k.model, k.region) for k in fetched.samples}, selectors.known_names()
        )
        overwrite = selectors.overlaps_incomplete(bucket_s=conf.bucket_s, start=start, end=end)
        with transaction.atomic():
            ids = series_ids(keys=fetched.samples, bucket_s=conf.bucket_s)
            rows = [
                (ids[key], bucket_start, value)
                for key, points in fetched.samples.items()
                for bucket_start, value in points.items()
            ]
            pull.samples_stored = samples_store(rows=rows, overwrite=overwrite)
            if fetched.warnings:
                pull.status = PULL_PARTIAL
                distinct = sorted(set(fetched.warnings))
                pull.error = "Prometheus answered with warnings: " + "; ".join(distinct)[:2000]
            else:
                pull.status = RunStatus.SUCCEEDED
            if silence:
                pull.error = "; ".join(filter(None, [pull.error, silence]))[:4000]
            pull.finished_at = timezone.now()
            pull.save()
    except Exception as exc:
        _pull_failed(pull, exc)
        raise
    if pull.status == PULL_PARTIAL:
        logger.warning("telemetry pull %s is partial: %s", pull.pk, pull.error)
    if silence:
        logger.warning("telemetry pull %s: %s", pull.pk, silence)
    if pull.unknown_labels:
        logger.warning(
            "telemetry pull %s: label values the database does not know: %s",
            pull.pk,
            ", ".join(pull.unknown_labels),
        )
    return pull


def _pull_failed(pull: TelemetryPull, exc: Exception) -> None:
    pull.status = RunStatus.FAILED
    pull.error = f"{type(exc).__name__}: {exc}"
    pull.samples_stored = 0
    pull.finished_at = timezone.now()
    # On a new connection if the database restarted during the pull: the failure is recorded.
    on_fresh_connection(pull.save)


# -- schedule -------------------------------------------------------------------------------------

PULL_TASK = "headroom.telemetry.pull"
DERIVE_TASK = "headroom.telemetry.derive_profiles"
DERIVE_EVERY_S = 3600


def telemetry_schedule() -> tuple[ScheduledTask, ...]:
    """The periodic tasks telemetry needs: a pull per bucket, a derivation per hour."""
    conf = telemetry_settings()
    return (
        ScheduledTask(
            "telemetry: pull from Prometheus",
            PULL_TASK,
            conf.bucket_s,
            "Pull the buckets finished since the last pull (one bucket width apart).",
        ),
        ScheduledTask(
            "telemetry: derive workload profiles",
            DERIVE_TASK,
            DERIVE_EVERY_S,
            "Derive workload profiles from the stored samples and check them for drift.",
        ),
    )
