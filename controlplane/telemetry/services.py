"""Telemetry operations: pull serving metrics from Prometheus, derive workload profiles from
the stored samples, and raise drift alerts with their replica impact.

Pull (``telemetry_pull``): every metric of ``METRICS`` is asked for with one range query per
stored series name, aggregated by the tenant, model and region labels (and ``le`` for histogram
buckets), one point per bucket: a counter's ``increase`` over the bucket, a gauge's
``avg_over_time``. Everything is fetched and checked first; only then are the series and
samples written, in one transaction, so a pull that fails stores nothing. Samples are keyed by
(series, bucket start) and inserted with "on conflict do nothing": pulling a window again, or
an overlapping one, stores nothing twice. Every attempt leaves a ``TelemetryPull`` row.

Derivation (``workload_profiles_derive``): per (tenant, model, region[, class]) over a window,
the peak request rate (p99 of the bucket rates), prompt and output percentiles from the
histograms (interpolated inside buckets as Prometheus' ``histogram_quantile`` does; means from
``_sum / _count``), the prefix-cache hit rate (hits / queries), p95 TTFT and the residence time
(mean end-to-end latency). A new ``WorkloadProfile`` version (source "telemetry") is written
where the figures changed; drift against the version it supersedes raises a ``DriftAlert``
with the replicas the pool needs before and after (``planner.capacity``).
"""

from __future__ import annotations

import copy
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from controlplane.core.schedule import ScheduledTask
from controlplane.fleet.models import LlmModel, Region, WorkloadClass
from controlplane.fleet.selectors import planning_target_utilization
from controlplane.policies.models import Tenant, WorkloadProfile
from controlplane.telemetry import histograms, selectors
from controlplane.telemetry.conf import (
    DriftThresholds,
    LabelConfig,
    TelemetrySettings,
    telemetry_settings,
)
from controlplane.telemetry.models import (
    OBSERVED_CLASS,
    DriftAlert,
    ObservedWorkload,
    ProfileDerivation,
    RunStatus,
    TelemetryPull,
    TelemetrySample,
    TelemetrySeries,
)
from controlplane.telemetry.prometheus import (
    PrometheusBadResponse,
    PrometheusClient,
    PrometheusError,
)
from planner.capacity.sizing import replicas_needed
from planner.capacity.workload import request_cost

logger = logging.getLogger(__name__)

# -- the metrics ----------------------------------------------------------------------------------

MetricKind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class MetricFamily:
    """A vLLM serving metric. ``combine`` joins a gauge's instances (sum, or avg for ratios)."""

    name: str
    kind: MetricKind
    combine: Literal["sum", "avg"] = "sum"


RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
REQUESTS = "vllm:request_success_total"
PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PROMPT_HIST = "vllm:request_prompt_tokens"
OUTPUT_HIST = "vllm:request_generation_tokens"
TTFT_HIST = "vllm:time_to_first_token_seconds"
E2E_HIST = "vllm:e2e_request_latency_seconds"

METRICS: tuple[MetricFamily, ...] = (
    MetricFamily(RUNNING, "gauge"),
    MetricFamily(WAITING, "gauge"),
    MetricFamily(KV_USAGE, "gauge", combine="avg"),
    MetricFamily(PROMPT_TOKENS, "counter"),
    MetricFamily(GENERATION_TOKENS, "counter"),
    MetricFamily(REQUESTS, "counter"),
    MetricFamily(PREEMPTIONS, "counter"),
    MetricFamily(PREFIX_QUERIES, "counter"),
    MetricFamily(PREFIX_HITS, "counter"),
    MetricFamily(PROMPT_HIST, "histogram"),
    MetricFamily(OUTPUT_HIST, "histogram"),
    MetricFamily(TTFT_HIST, "histogram"),
    MetricFamily(E2E_HIST, "histogram"),
)


@dataclass(frozen=True)
class Query:
    """One range query: the series name it stores and its PromQL."""

    metric: str
    promql: str
    by_le: bool = False


def pull_queries(labels: LabelConfig, bucket_s: int) -> list[Query]:
    """The range queries of one pull, one per stored series name (histograms give three)."""
    by = ", ".join(labels.names)
    window = f"[{bucket_s}s]"
    queries: list[Query] = []
    for family in METRICS:
        if family.kind == "gauge":
            inner = f"avg_over_time({family.name}{window})"
            queries.append(Query(family.name, f"{family.combine} by ({by}) ({inner})"))
        elif family.kind == "counter":
            inner = f"increase({family.name}{window})"
            queries.append(Query(family.name, f"sum by ({by}) ({inner})"))
        else:
            bucket = f"{family.name}_bucket"
            queries.append(
                Query(bucket, f"sum by ({by}, le) (increase({bucket}{window}))", by_le=True)
            )
            for part in ("_sum", "_count"):
                name = family.name + part
                queries.append(Query(name, f"sum by ({by}) (increase({name}{window}))"))
    return queries


# -- pull -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesKey:
    tenant: str
    model: str
    region: str
    workload_class: str
    metric: str
    le: str


@dataclass
class Fetched:
    """What a pull read from Prometheus, checked, before anything is written."""

    samples: dict[SeriesKey, dict[datetime, float]] = field(default_factory=dict)
    queries: int = 0
    series: int = 0
    skipped_series: int = 0

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
    the last successful pull ended, but catches up no more than ``max_catchup_s``; the first
    pull looks back ``lookback_s``.
    """
    width = conf.bucket_s

    def floor(moment: datetime) -> datetime:
        return _utc(math.floor(moment.timestamp() / width) * width)

    end = floor(window_end if window_end is not None else now - timedelta(seconds=conf.lag_s))
    last = selectors.last_pulled_until(bucket_s=width)
    if window_start is not None:
        start = floor(window_start)
    elif last is not None:
        start = max(floor(last), floor(end - timedelta(seconds=conf.max_catchup_s)))
    else:
        start = floor(end - timedelta(seconds=conf.lookback_s))
    return min(start, end), end


def telemetry_fetch(
    *,
    client: PrometheusClient,
    labels: LabelConfig,
    bucket_s: int,
    start: datetime,
    end: datetime,
) -> Fetched:
    """Run every query over [start, end) and check the answers; raises ``PrometheusError``.

    The point Prometheus evaluates at time t covers (t − bucket, t]; it is stored as the bucket
    starting at t − bucket. Series without a tenant, model or region label are counted and
    left out; a point off the bucket grid, outside the window, repeated, not finite or
    negative (every metric here is a count, a mean count or a fraction) is garbage, and
    garbage fails the whole pull.
    """
    fetched = Fetched()
    first, last = start.timestamp() + bucket_s, end.timestamp()
    if last < first:
        return fetched
    chunk = _MAX_POINTS * bucket_s
    for query in pull_queries(labels, bucket_s):
        chunk_start = first
        while chunk_start <= last:
            chunk_end = min(last, chunk_start + chunk - bucket_s)
            result = client.query_range(
                query.promql, start=chunk_start, end=chunk_end, step_s=bucket_s
            )
            fetched.queries += 1
            for series in result:
                key = _series_key(series.labels, labels, query)
                if key is None:
                    fetched.skipped_series += 1
                    continue
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
                    if bucket_start in points:
                        raise PrometheusBadResponse(
                            f"{query.metric}{dict(series.labels)}: two values at {stamp}"
                        )
                    points[bucket_start] = value
            chunk_start = chunk_end + bucket_s
    return fetched


def _series_key(found: Mapping[str, str], labels: LabelConfig, query: Query) -> SeriesKey | None:
    tenant, model, region = (
        found.get(labels.tenant),
        found.get(labels.model),
        found.get(labels.region),
    )
    if not tenant or not model or not region:
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


def series_ids(*, keys: Iterable[SeriesKey], bucket_s: int) -> dict[SeriesKey, int]:
    """Ids of the series these keys name, creating the missing ones."""
    wanted = set(keys)
    if not wanted:
        return {}
    TelemetrySeries.objects.bulk_create(
        [
            TelemetrySeries(
                tenant=k.tenant,
                model=k.model,
                region=k.region,
                workload_class=k.workload_class,
                metric=k.metric,
                le=k.le,
                bucket_s=bucket_s,
            )
            for k in wanted
        ],
        ignore_conflicts=True,
        batch_size=1000,
    )
    ids: dict[SeriesKey, int] = {}
    tenants = sorted({k.tenant for k in wanted})
    for i in range(0, len(tenants), 200):
        rows = TelemetrySeries.objects.filter(
            bucket_s=bucket_s, tenant__in=tenants[i : i + 200]
        ).values_list("id", "tenant", "model", "region", "workload_class", "metric", "le")
        for pk, *parts in rows:
            key = SeriesKey(*parts)
            if key in wanted:
                ids[key] = pk
    return ids


SampleRow = tuple[int, datetime, float]


def samples_store(*, rows: Sequence[SampleRow]) -> int:
    """Insert (series id, bucket start, value) rows, skipping buckets already stored.

    Returns the number of rows inserted. On PostgreSQL the rows are copied (binary COPY) into
    a temporary table and moved with ``INSERT … ON CONFLICT DO NOTHING``; on SQLite they are
    inserted with one ``INSERT OR IGNORE`` statement run for every row; elsewhere they go
    through ``bulk_create(ignore_conflicts=True)``. Runs in a transaction (a savepoint when one
    is open).
    """
    if not rows:
        return 0
    with transaction.atomic():
        if connection.vendor == "postgresql":
            return _store_by_copy(rows)
        if connection.vendor == "sqlite":
            return _store_by_insert_or_ignore(rows)
        return _store_by_bulk_create(rows)


def _store_by_insert_or_ignore(rows: Sequence[SampleRow]) -> int:
    # About five times bulk_create's rate (no model instances, no per-field preparation),
    # and SQLite counts only the rows it inserted, so no counting before and after.
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT OR IGNORE INTO telemetry_sample (series_id, bucket_start, value) "
            "VALUES (%s, %s, %s)",
            [(series_id, adapt(stamp), value) for series_id, stamp, value in rows],
        )
        return int(cursor.rowcount)


def _store_by_copy(rows: Sequence[SampleRow]) -> int:
    with connection.cursor() as cursor:
        # ON COMMIT DELETE ROWS: the staging table lives as long as the database connection,
        # empty between uses.
        cursor.execute(
            "CREATE TEMPORARY TABLE IF NOT EXISTS telemetry_sample_staging "
            "(series_id bigint, bucket_start timestamptz, value double precision) "
            "ON COMMIT DELETE ROWS"
        )
        with cursor.copy(
            "COPY telemetry_sample_staging (series_id, bucket_start, value) "
            "FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "timestamptz", "float8"])
            for row in rows:
                copy.write_row(row)
        cursor.execute(
            "INSERT INTO telemetry_sample (series_id, bucket_start, value) "
            "SELECT series_id, bucket_start, value FROM telemetry_sample_staging "
            "ON CONFLICT (series_id, bucket_start) DO NOTHING"
        )
        stored = int(cursor.rowcount)
        # A second store in the same transaction must not move these rows again.
        cursor.execute("TRUNCATE telemetry_sample_staging")
    return stored


def _store_by_bulk_create(rows: Sequence[SampleRow]) -> int:
    ids = sorted({series_id for series_id, _, _ in rows})
    first = min(stamp for _, stamp, _ in rows)
    last = max(stamp for _, stamp, _ in rows)

    def count() -> int:
        total = 0
        for i in range(0, len(ids), 500):
            total += TelemetrySample.objects.filter(
                series_id__in=ids[i : i + 500], bucket_start__gte=first, bucket_start__lte=last
            ).count()
        return total

    # bulk_create cannot say how many rows it skipped: count the rows it could touch.
    before = count()
    TelemetrySample.objects.bulk_create(
        [TelemetrySample(series_id=s, bucket_start=b, value=v) for s, b, v in rows],
        ignore_conflicts=True,
        batch_size=2000,
    )
    return count() - before


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
    the caller to retry.
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
        )
    except PrometheusError as exc:
        _pull_failed(pull, exc)
        logger.warning("telemetry pull %s failed (attempt %s): %s", pull.pk, attempt, exc)
        raise
    pull.queries = fetched.queries
    pull.series_fetched = fetched.series
    pull.samples_fetched = fetched.sample_count
    pull.skipped_series = fetched.skipped_series
    pull.unknown_labels = selectors.unknown_label_values(
        {(k.tenant, k.model, k.region) for k in fetched.samples}, selectors.known_names()
    )
    try:
        with transaction.atomic():
            ids = series_ids(keys=fetched.samples, bucket_s=conf.bucket_s)
            rows = [
                (ids[key], bucket_start, value)
                for key, points in fetched.samples.items()
                for bucket_start, value in points.items()
            ]
            pull.samples_stored = samples_store(rows=rows)
            pull.status = RunStatus.SUCCEEDED
            pull.finished_at = timezone.now()
            pull.save()
    except Exception as exc:
        _pull_failed(pull, exc)
        raise
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
    pull.save()


# -- derivation -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelSet:
    tenant: str
    model: str
    region: str
    workload_class: str

    def __str__(self) -> str:
        return f"{self.tenant}/{self.model}/{self.region}/{self.workload_class}"


@dataclass
class _Collected:
    """The window's totals of one label set, by metric (and ``le`` for buckets)."""

    totals: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, int] = field(default_factory=dict)
    histograms: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    request_series: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Observation:
    """Figures measured for one label set; see ``ObservedWorkload`` for units."""

    labels: LabelSet
    requests: float
    buckets: int
    mean_requests_per_s: float
    peak_requests_per_s: float
    prompt: tuple[float, float, float, float]  # p50, mean, p95, p99 (tokens)
    output: tuple[float, float, float, float]
    prefix_cache_hit_rate: float
    ttft_p95_s: float | None
    residence_s: float | None
    kv_cache_usage_mean: float | None
    running_mean: float | None
    waiting_mean: float | None
    preemptions_per_s: float | None


class NotEnoughData(Exception):
    """A label set whose samples make no profile; the message says why."""


def _lengths(collected: _Collected, family: str, what: str) -> tuple[float, float, float, float]:
    buckets = collected.histograms.get(family + "_bucket")
    count = collected.totals.get(family + "_count", 0.0)
    total = collected.totals.get(family + "_sum")
    if not buckets or count <= 0 or total is None:
        raise NotEnoughData(f"no {what} histogram observations")
    try:
        p50, p95, p99 = (histograms.histogram_quantile(q, buckets) for q in (0.5, 0.95, 0.99))
    except histograms.HistogramError as exc:
        raise NotEnoughData(f"{what} histogram: {exc}") from exc
    return p50, total / count, p95, p99


def observe(
    labels: LabelSet,
    collected: _Collected,
    request_buckets: Sequence[float],
    *,
    bucket_s: int,
    min_requests: float,
) -> Observation:
    """Workload figures of one label set from its window totals; raises ``NotEnoughData``.

    Request counts come from ``request_success`` (finished requests); each bucket's count over
    its width is that bucket's rate, and the peak is the p99 of those rates.
    """
    totals = collected.totals
    requests = totals.get(REQUESTS, 0.0)
    if not request_buckets or requests < max(min_requests, 1e-9):
        raise NotEnoughData(f"{requests:.0f} requests in the window, fewer than {min_requests:g}")
    rates = [value / bucket_s for value in request_buckets]
    prompt = _lengths(collected, PROMPT_HIST, "prompt length")
    output = _lengths(collected, OUTPUT_HIST, "output length")
    queries = totals.get(PREFIX_QUERIES, 0.0)
    hit_rate = min(1.0, totals.get(PREFIX_HITS, 0.0) / queries) if queries > 0 else 0.0
    ttft: float | None = None
    if collected.histograms.get(TTFT_HIST + "_bucket") and totals.get(TTFT_HIST + "_count", 0) > 0:
        try:
            ttft = histograms.histogram_quantile(0.95, collected.histograms[TTFT_HIST + "_bucket"])
        except histograms.HistogramError:
            ttft = None
    e2e_count = totals.get(E2E_HIST + "_count", 0.0)
    residence = totals[E2E_HIST + "_sum"] / e2e_count if e2e_count > 0 else None

    def gauge_mean(name: str) -> float | None:
        n = collected.buckets.get(name, 0)
        return totals[name] / n if n else None

    n_preempt = collected.buckets.get(PREEMPTIONS, 0)
    return Observation(
        labels=labels,
        requests=requests,
        buckets=len(request_buckets),
        mean_requests_per_s=requests / (len(request_buckets) * bucket_s),
        peak_requests_per_s=histograms.percentile(rates, 0.99),
        prompt=prompt,
        output=output,
        prefix_cache_hit_rate=hit_rate,
        ttft_p95_s=ttft,
        residence_s=residence if residence and residence > 0 else None,
        kv_cache_usage_mean=gauge_mean(KV_USAGE),
        running_mean=gauge_mean(RUNNING),
        waiting_mean=gauge_mean(WAITING),
        preemptions_per_s=totals[PREEMPTIONS] / (n_preempt * bucket_s) if n_preempt else None,
    )


def collect(totals: Iterable[selectors.SeriesTotal]) -> dict[LabelSet, _Collected]:
    """Group a window's series totals by label set."""
    grouped: dict[LabelSet, _Collected] = defaultdict(_Collected)
    for row in totals:
        labels = LabelSet(row.tenant, row.model, row.region, row.workload_class or OBSERVED_CLASS)
        target = grouped[labels]
        if row.le:
            target.histograms[row.metric][row.le] = row.total
            continue
        target.totals[row.metric] = row.total
        target.buckets[row.metric] = row.buckets
        if row.metric == REQUESTS:
            target.request_series.append(row.series_id)
    return grouped


# Profile figures compared to decide whether a measurement is a new version.
_PROFILE_FIGURES = (
    "peak_requests_per_s",
    "prompt_tokens_p50",
    "prompt_tokens_mean",
    "prompt_tokens_p95",
    "prompt_tokens_p99",
    "output_tokens_p50",
    "output_tokens_mean",
    "output_tokens_p95",
    "output_tokens_p99",
    "prefix_cache_hit_rate",
    "residence_s",
)


def _profile_figures(obs: Observation) -> dict[str, float | None]:
    return {
        "peak_requests_per_s": obs.peak_requests_per_s,
        "prompt_tokens_p50": obs.prompt[0],
        "prompt_tokens_mean": obs.prompt[1],
        "prompt_tokens_p95": obs.prompt[2],
        "prompt_tokens_p99": obs.prompt[3],
        "output_tokens_p50": obs.output[0],
        "output_tokens_mean": obs.output[1],
        "output_tokens_p95": obs.output[2],
        "output_tokens_p99": obs.output[3],
        "prefix_cache_hit_rate": obs.prefix_cache_hit_rate,
        "residence_s": obs.residence_s,
    }


def _changed(
    profile: WorkloadProfile, figures: Mapping[str, float | None], tolerance: float
) -> bool:
    """Whether any figure moved by more than ``tolerance`` (relative; absolute for the hit rate)."""
    for name in _PROFILE_FIGURES:
        old, new = getattr(profile, name), figures[name]
        if old is None or new is None:
            if old != new:
                return True
            continue
        if name == "prefix_cache_hit_rate":
            if abs(new - old) > tolerance:
                return True
        elif abs(new - old) > tolerance * max(abs(old), 1e-9):
            return True
    return False


@dataclass
class _Resolved:
    """A label set whose values name a tenant, model, region and class."""

    tenant: Tenant
    model: LlmModel
    region: Region
    workload_class: WorkloadClass


def _resolve(
    labels: LabelSet, names: Mapping[str, Mapping[str, Any]], class_label: bool
) -> _Resolved | list[str]:
    """The rows the label values name, or ``kind: value`` for each unknown one."""
    missing = []
    tenant = names["tenant"].get(labels.tenant)
    model = names["model"].get(labels.model)
    region = names["region"].get(labels.region)
    cls = names["class"].get(labels.workload_class)
    if tenant is None:
        missing.append(f"tenant: {labels.tenant}")
    if model is None:
        missing.append(f"model: {labels.model}")
    if region is None:
        missing.append(f"region: {labels.region}")
    if cls is None and class_label:
        missing.append(f"workload class: {labels.workload_class}")
    if missing or tenant is None or model is None or region is None:
        return missing
    if cls is None:
        cls, _ = WorkloadClass.objects.get_or_create(
            name=OBSERVED_CLASS,
            defaults={"description": "All of a tenant's traffic, as telemetry sees it."},
        )
    return _Resolved(tenant, model, region, cls)


@dataclass
class _Versioned:
    resolved: _Resolved
    observation: Observation
    before: WorkloadProfile | None
    after: WorkloadProfile


def workload_profiles_derive(
    *,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
    now: datetime | None = None,
) -> ProfileDerivation:
    """Derive workload profiles from the samples of [start, end) and check them for drift.

    Default window: the ``profile_window_s`` up to the last pulled bucket. All writes happen in
    one transaction; a failure leaves a failed ``ProfileDerivation`` and nothing else.
    """
    conf = telemetry_settings()
    width = conf.bucket_s
    end = window_end or selectors.last_pulled_until(bucket_s=width) or (now or timezone.now())
    start = window_start or end - timedelta(seconds=conf.profile_window_s)
    run = ProfileDerivation.objects.create(window_start=start, window_end=end)
    try:
        with transaction.atomic():
            _derive(run, conf, start, end)
            run.status = RunStatus.SUCCEEDED
            run.finished_at = timezone.now()
            run.save()
    except Exception as exc:
        run.refresh_from_db()
        run.status = RunStatus.FAILED
        run.error = f"{type(exc).__name__}: {exc}"
        run.finished_at = timezone.now()
        run.save()
        raise
    if run.unknown_labels:
        logger.warning(
            "profile derivation %s: label values the database does not know: %s",
            run.pk,
            ", ".join(run.unknown_labels),
        )
    return run


def _derive(
    run: ProfileDerivation, conf: TelemetrySettings, start: datetime, end: datetime
) -> None:
    grouped = collect(selectors.window_totals(bucket_s=conf.bucket_s, start=start, end=end))
    request_values = selectors.bucket_values(
        series_ids=[i for c in grouped.values() for i in c.request_series], start=start, end=end
    )
    names: dict[str, dict[str, Any]] = {
        "tenant": {t.name: t for t in Tenant.objects.select_related("home_region")},
        "model": {m.name: m for m in LlmModel.objects.all()},
        "region": {r.name: r for r in Region.objects.all()},
        "class": {c.name: c for c in WorkloadClass.objects.all()},
    }
    class_label = conf.labels.workload_class is not None
    unknown: set[str] = set()
    skipped: list[dict[str, str]] = []
    measured: list[tuple[Observation, _Resolved | None]] = []
    for labels in sorted(grouped, key=str):
        collected = grouped[labels]
        buckets = [v for i in collected.request_series for v in request_values.get(i, [])]
        try:
            obs = observe(
                labels, collected, buckets, bucket_s=conf.bucket_s, min_requests=conf.min_requests
            )
        except NotEnoughData as exc:
            skipped.append({"series": str(labels), "reason": str(exc)})
            continue
        found = _resolve(labels, names, class_label)
        if isinstance(found, list):
            unknown.update(found)
            skipped.append({"series": str(labels), "reason": "unknown " + "; ".join(found)})
            measured.append((obs, None))
        else:
            measured.append((obs, found))

    # Each pool's token shares as they stand before this run writes anything: a tenant's
    # share is compared pool state to pool state, not against the others' new figures.
    shares_before = {
        (r.model.pk, r.region.pk): pool_token_shares(model=r.model, region=r.region)
        for _, r in measured
        if r is not None
    }
    observed: list[ObservedWorkload] = []
    versioned: list[_Versioned] = []
    for obs, resolved in measured:
        profile: WorkloadProfile | None = None
        if resolved is not None:
            try:
                before, profile = _version(resolved, obs, conf.profile_tolerance)
            except ValidationError as exc:
                skipped.append({"series": str(obs.labels), "reason": f"not a valid profile: {exc}"})
            else:
                if profile is before:
                    run.profiles_unchanged += 1
                else:
                    run.profiles_created += 1
                versioned.append(_Versioned(resolved, obs, before, profile))
        observed.append(_observed_row(run, obs, profile))
    ObservedWorkload.objects.bulk_create(observed)
    # Drift after every version is written, so each pool's "after" holds this run's figures.
    for item in versioned:
        pool = (item.resolved.model.pk, item.resolved.region.pk)
        outcome = drift_check(
            before=item.before,
            after=item.after,
            share_before=shares_before[pool].get(item.resolved.tenant.pk),
            thresholds=conf.drift,
            now=end,
            derivation=run,
        )
        run.alerts_raised += outcome.raised
        run.alerts_updated += outcome.updated
        run.alerts_resolved += outcome.resolved
    run.unknown_labels = sorted(unknown)
    run.skipped = skipped


def _version(
    resolved: _Resolved, obs: Observation, tolerance: float
) -> tuple[WorkloadProfile | None, WorkloadProfile]:
    """(profile before, profile after): a new telemetry version when the figures moved."""
    before = selectors.current_profile(
        tenant=resolved.tenant,
        model=resolved.model,
        workload_class_id=resolved.workload_class.pk,
        region=resolved.region,
    )
    figures = _profile_figures(obs)
    if before is not None and not _changed(before, figures, tolerance):
        return before, before
    profile = WorkloadProfile(
        tenant=resolved.tenant,
        model=resolved.model,
        workload_class=resolved.workload_class,
        region=resolved.region,
        version=(before.version + 1) if before is not None else 1,
        source=WorkloadProfile.Source.TELEMETRY,
        **figures,
    )
    profile.full_clean()
    profile._change_reason = "derived from telemetry"  # type: ignore[attr-defined]
    profile.save()
    return before, profile


def _observed_row(
    run: ProfileDerivation, obs: Observation, profile: WorkloadProfile | None
) -> ObservedWorkload:
    return ObservedWorkload(
        derivation=run,
        tenant=obs.labels.tenant,
        model=obs.labels.model,
        region=obs.labels.region,
        workload_class=obs.labels.workload_class,
        profile=profile,
        requests=obs.requests,
        buckets=obs.buckets,
        mean_requests_per_s=obs.mean_requests_per_s,
        peak_requests_per_s=obs.peak_requests_per_s,
        prompt_tokens_p50=obs.prompt[0],
        prompt_tokens_mean=obs.prompt[1],
        prompt_tokens_p95=obs.prompt[2],
        prompt_tokens_p99=obs.prompt[3],
        output_tokens_p50=obs.output[0],
        output_tokens_mean=obs.output[1],
        output_tokens_p95=obs.output[2],
        output_tokens_p99=obs.output[3],
        prefix_cache_hit_rate=obs.prefix_cache_hit_rate,
        ttft_p95_s=obs.ttft_p95_s,
        residence_s=obs.residence_s,
        kv_cache_usage_mean=obs.kv_cache_usage_mean,
        running_mean=obs.running_mean,
        waiting_mean=obs.waiting_mean,
        preemptions_per_s=obs.preemptions_per_s,
    )


# -- drift ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolSizing:
    """Replicas a pool needs for a demand, on one shape at its planning target."""

    shape_name: str
    shape_id: int
    target_utilization: float
    demand_replica_s_per_s: float
    replicas: int


def profile_cost_s(profile: WorkloadProfile, prefill: float, decode: float) -> float:
    """Replica-seconds of this profile's mean request on a replica of the given rates."""
    return request_cost(
        profile.prompt_tokens_mean,
        profile.output_tokens_mean,
        prefill,
        decode,
        profile.prefix_cache_hit_rate,
    )


def pool_sizing(
    *, model: LlmModel, region: Region, replace: Mapping[int, WorkloadProfile] | None = None
) -> PoolSizing | None:
    """Replicas for the peak demand of every tenant's current profile in the pool.

    ``replace`` maps a tenant id to the profile that stands for that tenant instead (the
    "before" of a change). Demand is Σ peak rate × mean request cost, in replica-seconds per
    second, sized with ``planner.capacity.sizing.replicas_needed`` at the shape's target (or
    the fleet default). None when the model has no shape with a whole-mix capacity figure.
    """
    shape = selectors.pool_shape(model=model)
    if shape is None:
        return None
    profiles: dict[int, list[WorkloadProfile]] = {}
    for profile in selectors.pool_profiles(model=model, region=region):
        profiles.setdefault(profile.tenant_id, []).append(profile)
    for tenant_id, profile in (replace or {}).items():
        profiles[tenant_id] = [profile]
    demand = math.fsum(
        p.peak_requests_per_s
        * profile_cost_s(p, shape.prefill_tokens_per_s, shape.decode_tokens_per_s)
        for group in profiles.values()
        for p in group
    )
    target = planning_target_utilization(shape=shape.shape)
    return PoolSizing(
        shape_name=shape.shape.name,
        shape_id=shape.shape.pk,
        target_utilization=target,
        demand_replica_s_per_s=demand,
        replicas=replicas_needed(demand, 1.0, target),
    )


def _token_rate(profile: WorkloadProfile) -> float:
    """Prompt and output tokens per second at the profile's peak rate."""
    return profile.peak_requests_per_s * (profile.prompt_tokens_mean + profile.output_tokens_mean)


def pool_token_shares(*, model: LlmModel, region: Region) -> dict[int, float]:
    """Each tenant's share (0..1) of the pool's tokens per second at peak, by tenant id."""
    rates: dict[int, float] = defaultdict(float)
    for profile in selectors.pool_profiles(model=model, region=region):
        rates[profile.tenant_id] += _token_rate(profile)
    total = math.fsum(rates.values())
    return {tenant: rate / total if total > 0 else 0.0 for tenant, rate in rates.items()}


@dataclass(frozen=True)
class DriftOutcome:
    raised: int = 0
    updated: int = 0
    resolved: int = 0


def _kind_value(kind: str, profile: WorkloadProfile, region: Region) -> float:
    """The figure an alert kind watches, for a profile as it stands in its pool now."""
    if kind == DriftAlert.Kind.PROMPT_MEAN:
        return float(profile.prompt_tokens_mean)
    if kind == DriftAlert.Kind.OUTPUT_MEAN:
        return float(profile.output_tokens_mean)
    if kind == DriftAlert.Kind.CACHE_HIT_RATE:
        return float(profile.prefix_cache_hit_rate)
    shares = pool_token_shares(model=profile.model, region=region)
    return shares.get(profile.tenant_id, 0.0)


def _threshold(kind: str, thresholds: DriftThresholds) -> float:
    return {
        DriftAlert.Kind.PROMPT_MEAN: thresholds.prompt_mean_rel,
        DriftAlert.Kind.OUTPUT_MEAN: thresholds.output_mean_rel,
        DriftAlert.Kind.CACHE_HIT_RATE: thresholds.cache_hit_rate_abs,
        DriftAlert.Kind.TOKEN_SHARE: thresholds.token_share_abs,
    }[DriftAlert.Kind(kind)]


def _relative(kind: str) -> bool:
    return kind in (DriftAlert.Kind.PROMPT_MEAN, DriftAlert.Kind.OUTPUT_MEAN)


def drifted(kind: str, before: float, after: float, threshold: float) -> bool:
    """Whether a change is beyond the threshold: relative for lengths, absolute otherwise."""
    if _relative(kind):
        return abs(after - before) > threshold * max(abs(before), 1e-9)
    return abs(after - before) > threshold


def drift_check(
    *,
    before: WorkloadProfile | None,
    after: WorkloadProfile,
    share_before: float | None,
    thresholds: DriftThresholds,
    now: datetime,
    derivation: ProfileDerivation | None = None,
) -> DriftOutcome:
    """Raise, update or resolve the drift alerts of one (tenant, model, region, class);
    a raised alert records ``derivation`` as what raised it.

    An active (open or acknowledged) alert of a kind compares the new figures with its own
    baseline: back within the threshold resolves it, else it is updated (current value,
    replica impact, last seen, occurrences). Without one, a change from the superseded
    version ``before`` beyond the threshold raises a new alert; for the token share the
    "before" is ``share_before``, the tenant's share of the pool before this derivation
    (None: it had none).

    The replica impact is the pool's replicas with this tenant at its baseline profile and
    everyone else as they are now, against the pool as it is now: what this tenant's change
    costs.
    """
    region = after.region
    if region is None:  # telemetry profiles always name their region
        region = after.tenant.home_region
    raised = updated = resolved = 0
    active = {
        a.kind: a
        for a in DriftAlert.objects.filter(
            tenant=after.tenant,
            model=after.model,
            region=region,
            workload_class=after.workload_class,
            status__in=DriftAlert.ACTIVE,
        )
    }
    for kind in DriftAlert.Kind.values:
        threshold = _threshold(kind, thresholds)
        alert = active.get(kind)
        if alert is not None:
            baseline = alert.baseline_profile
            current = _kind_value(kind, after, region)
            if not drifted(kind, alert.baseline_value, current, threshold):
                alert.status = DriftAlert.Status.RESOLVED
                alert.resolved_at = now
                alert.current_value = current
                alert.current_profile = after
                alert.last_seen_at = now
                alert.save()
                resolved += 1
                continue
            _fill_alert(alert, kind, alert.baseline_value, current, baseline, after, region)
            alert.threshold = threshold
            alert.occurrences += 1
            alert.last_seen_at = now
            alert.save()
            updated += 1
            continue
        if before is None or before.pk == after.pk:
            continue
        if kind == DriftAlert.Kind.TOKEN_SHARE:
            if share_before is None:
                continue
            old = share_before
        else:
            old = _kind_value(kind, before, region)
        new = _kind_value(kind, after, region)
        if not drifted(kind, old, new, threshold):
            continue
        alert = DriftAlert(
            tenant=after.tenant,
            model=after.model,
            region=region,
            workload_class=after.workload_class,
            kind=kind,
            threshold=threshold,
            first_seen_at=now,
            last_seen_at=now,
            raised_by=derivation,
        )
        _fill_alert(alert, kind, old, new, before, after, region)
        alert.full_clean()
        alert.save()
        raised += 1
        logger.warning("drift alert %s: %s", alert.pk, alert.message)
    return DriftOutcome(raised, updated, resolved)


# The profile field each length or cache alert watches. Its replica impact varies that field
# alone, at the current request rate: the Friday review's question is what the longer prompts
# cost at a flat rate, and rate noise between two short windows must not mask (or invert) it.
_WATCHED_FIELDS = {
    DriftAlert.Kind.PROMPT_MEAN: "prompt_tokens_mean",
    DriftAlert.Kind.OUTPUT_MEAN: "output_tokens_mean",
    DriftAlert.Kind.CACHE_HIT_RATE: "prefix_cache_hit_rate",
}


def _impact_baseline(
    kind: str, baseline: WorkloadProfile, current: WorkloadProfile
) -> WorkloadProfile:
    """The profile that stands for "before" when pricing an alert of this kind.

    A token-share alert compares whole profiles (the share moves with the rate); the others
    take the current profile with only the watched figure set back to the baseline's.
    """
    field = _WATCHED_FIELDS.get(DriftAlert.Kind(kind))
    if field is None:
        return baseline
    standin = copy.copy(current)
    setattr(standin, field, getattr(baseline, field))
    return standin


def _fill_alert(
    alert: DriftAlert,
    kind: str,
    old: float,
    new: float,
    baseline: WorkloadProfile | None,
    current: WorkloadProfile,
    region: Region,
) -> None:
    """Set an alert's values, profiles, replica impact and message."""
    alert.baseline_value = old
    alert.current_value = new
    alert.baseline_profile = baseline
    alert.current_profile = current
    before = after = None
    if baseline is not None:
        after = pool_sizing(model=current.model, region=region)
        before = pool_sizing(
            model=current.model,
            region=region,
            replace={current.tenant_id: _impact_baseline(kind, baseline, current)},
        )
    # Without a baseline version (deleted since) the impact measured earlier still stands.
    if before is not None and after is not None:
        alert.shape_id = after.shape_id
        alert.target_utilization = after.target_utilization
        alert.replicas_before = before.replicas
        alert.replicas_after = after.replicas
    alert.message = drift_message(
        kind=kind,
        old=old,
        new=new,
        tenant=current.tenant.name,
        model=current.model.name,
        region=region.name,
        before=before,
        after=after,
    )


def drift_message(
    *,
    kind: str,
    old: float,
    new: float,
    tenant: str,
    model: str,
    region: str,
    before: PoolSizing | None,
    after: PoolSizing | None,
) -> str:
    """One line for an operator, e.g. "mean prompt length 1,500 → 2,700 tokens (+80%) …"."""
    label = DriftAlert.Kind(kind).label
    if _relative(kind):
        change = (new - old) / old * 100 if old else math.inf
        what = f"{label} {old:,.0f} → {new:,.0f} tokens ({change:+.0f}%)"
    else:
        what = f"{label} {old:.0%} → {new:.0%} ({(new - old) * 100:+.0f} points)"
    text = f"{what} for {tenant} on {model} in {region}"
    if before is None or after is None:
        return (
            text + ": replica impact unknown (no shape of the model has a whole-mix capacity "
            "figure, or the baseline version is gone)"
        )
    delta = after.replicas - before.replicas
    return (
        f"{text}: {delta:+d} replicas in {region} at the "
        f"{after.target_utilization:.0%} target ({before.replicas} → {after.replicas} × "
        f"{after.shape_name})"
    )


def drift_alert_acknowledge(
    *, alert: DriftAlert, user: AbstractBaseUser | AnonymousUser | None
) -> DriftAlert:
    """Mark an open alert as seen by ``user``; acknowledging twice changes nothing.

    A resolved alert cannot be acknowledged (``ValidationError`` on ``status``).
    """
    with transaction.atomic():
        locked = DriftAlert.objects.select_for_update().get(pk=alert.pk)
        if locked.status == DriftAlert.Status.RESOLVED:
            raise ValidationError(
                {"status": "This alert is resolved; there is nothing to acknowledge."}
            )
        if locked.status == DriftAlert.Status.ACKNOWLEDGED:
            return locked
        locked.status = DriftAlert.Status.ACKNOWLEDGED
        locked.acknowledged_at = timezone.now()
        locked.acknowledged_by = user  # type: ignore[assignment]
        locked._history_user = user  # type: ignore[attr-defined]
        locked.full_clean()
        locked.save()
    return locked


# -- the pipeline ---------------------------------------------------------------------------------


def derivation_follows_pull(*, pull: TelemetryPull) -> bool:
    """Whether a pull's task should go on to derive profiles: it succeeded, stored new samples
    (a window pulled again stores none, and would derive the same profiles) and
    ``HEADROOM_TELEMETRY_DERIVE_AFTER_PULL`` is on."""
    return (
        bool(settings.HEADROOM_TELEMETRY_DERIVE_AFTER_PULL)
        and pull.status == RunStatus.SUCCEEDED
        and pull.samples_stored > 0
    )


def drift_alerts_raised(*, derivation: ProfileDerivation) -> list[DriftAlert]:
    """The drift alerts this derivation raised (not those it only updated), oldest first.
    Empty for a failed derivation (its alerts were rolled back with it) or one that raised
    none."""
    if derivation.status != RunStatus.SUCCEEDED:
        return []
    return list(derivation.raised_alerts.select_related("tenant", "region").order_by("pk"))


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
