"""Reads for telemetry: stored sums per series, known label values, request-rate history for
the demand forecast, a pool's current profiles and the shape it is sized on.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Func, IntegerField, Q, Sum, Value

from controlplane.fleet.models import LlmModel, Region, ReplicaShape
from controlplane.fleet.selectors import planning_figures
from controlplane.policies.models import Tenant, WorkloadProfile
from controlplane.telemetry.conf import telemetry_settings
from controlplane.telemetry.metrics import ARRIVALS, REQUESTS
from controlplane.telemetry.models import (
    PULL_PARTIAL,
    RunStatus,
    TelemetryPull,
    TelemetrySample,
    TelemetrySeries,
)

# -- pulls ----------------------------------------------------------------------------------------


def stored_bucket_s() -> int:
    """The bucket width of the stored telemetry, which every reader uses: the newest
    successful pull's; with no pull (request logs imported), ``HEADROOM_TELEMETRY_BUCKET_S``
    where series of that width are stored, else the newest series' width; with nothing
    stored, the setting.

    The setting says at what width new samples are written (pulls and imports). A process
    whose own setting differs (the README's quick option sets it in one shell) still reads
    what was stored, instead of finding no series at its width and sizing every demand from
    the declared profiles.
    """
    pulled = (
        TelemetryPull.objects.filter(status=RunStatus.SUCCEEDED)
        .order_by("-window_end", "-pk")
        .values_list("bucket_s", flat=True)
        .first()
    )
    if pulled is not None:
        return int(pulled)
    configured = telemetry_settings().bucket_s
    if TelemetrySeries.objects.filter(bucket_s=configured).exists():
        return configured
    newest = TelemetrySeries.objects.order_by("-pk").values_list("bucket_s", flat=True).first()
    return configured if newest is None else int(newest)


def last_pull_with_samples(*, before: datetime) -> TelemetryPull | None:
    """The newest pull started by ``before`` that stored samples (succeeded or partial): once
    there is one, telemetry is expected to size the demands."""
    return (
        TelemetryPull.objects.filter(
            status__in=(RunStatus.SUCCEEDED, PULL_PARTIAL),
            samples_stored__gt=0,
            started_at__lte=before,
        )
        .only("pk", "finished_at", "started_at", "bucket_s")
        .order_by("-started_at", "-pk")
        .first()
    )


def last_pulled_until(*, bucket_s: int) -> datetime | None:
    """End of the newest window a pull at this bucket width stored successfully."""
    return (
        TelemetryPull.objects.filter(status=RunStatus.SUCCEEDED, bucket_s=bucket_s)
        .order_by("-window_end")
        .values_list("window_end", flat=True)
        .first()
    )


def _incomplete_windows(*, bucket_s: int) -> list[tuple[datetime, datetime]]:
    """Windows of partial pulls that no later successful pull covered whole."""
    partial = TelemetryPull.objects.filter(status=PULL_PARTIAL, bucket_s=bucket_s).values_list(
        "pk", "window_start", "window_end"
    )
    pending = []
    for pk, lo, hi in partial:
        mended = TelemetryPull.objects.filter(
            status=RunStatus.SUCCEEDED,
            bucket_s=bucket_s,
            pk__gt=pk,
            window_start__lte=lo,
            window_end__gte=hi,
        ).exists()
        if not mended:
            pending.append((lo, hi))
    return sorted(pending)


def first_incomplete_start(*, bucket_s: int) -> datetime | None:
    """Start of the earliest window a partial pull stored and no later pull completed."""
    pending = _incomplete_windows(bucket_s=bucket_s)
    return pending[0][0] if pending else None


def overlaps_incomplete(*, bucket_s: int, start: datetime, end: datetime) -> bool:
    """Whether [start, end) overlaps a window a partial pull stored and no pull completed."""
    return any(lo < end and hi > start for lo, hi in _incomplete_windows(bucket_s=bucket_s))


def unpulled_windows(
    *, bucket_s: int, start: datetime, end: datetime
) -> list[tuple[datetime, datetime]]:
    """The parts of [start, end) that no successful pull at this bucket width covered, in
    time order: what a backfill still has to pull."""
    covered = (
        TelemetryPull.objects.filter(
            status=RunStatus.SUCCEEDED,
            bucket_s=bucket_s,
            window_start__lt=end,
            window_end__gt=start,
        )
        .order_by("window_start")
        .values_list("window_start", "window_end")
    )
    gaps: list[tuple[datetime, datetime]] = []
    cursor = start
    for lo, hi in covered:
        if lo > cursor:
            gaps.append((cursor, lo))
        cursor = max(cursor, hi)
    if cursor < end:
        gaps.append((cursor, end))
    return gaps


# -- label values ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnownNames:
    """Names of the tenants, models and regions the database holds."""

    tenants: frozenset[str]
    models: frozenset[str]
    regions: frozenset[str]

    def unknown(self, *, tenant: str, model: str, region: str) -> list[str]:
        """``kind: value`` for each label value that names nothing, e.g. ``tenant: acme``."""
        out = []
        if tenant and tenant not in self.tenants:  # empty: a pool's series, no tenant
            out.append(f"tenant: {tenant}")
        if model not in self.models:
            out.append(f"model: {model}")
        if region not in self.regions:
            out.append(f"region: {region}")
        return out


def known_names() -> KnownNames:
    return KnownNames(
        tenants=frozenset(Tenant.objects.values_list("name", flat=True)),
        models=frozenset(LlmModel.objects.values_list("name", flat=True)),
        regions=frozenset(Region.objects.values_list("name", flat=True)),
    )


def unknown_label_values(keys: Iterable[tuple[str, str, str]], names: KnownNames) -> list[str]:
    """Sorted distinct ``kind: value`` entries for (tenant, model, region) label triples."""
    found: set[str] = set()
    for tenant, model, region in keys:
        found.update(names.unknown(tenant=tenant, model=model, region=region))
    return sorted(found)


# -- samples --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesTotal:
    """One series over a window: label values, metric, bound, sum of bucket values, buckets."""

    series_id: int
    tenant: str
    model: str
    region: str
    workload_class: str
    metric: str
    le: str
    total: float
    buckets: int


def window_totals(*, bucket_s: int, start: datetime, end: datetime) -> list[SeriesTotal]:
    """Per series of this bucket width: the sum of its samples in [start, end) and their count.

    Grouped by series id alone (an integer), with the label values looked up afterwards:
    grouping by the seven text columns made PostgreSQL sort the whole window on disk.
    """
    series = {
        row[0]: row[1:]
        for row in TelemetrySeries.objects.filter(bucket_s=bucket_s).values_list(
            "id", "tenant", "model", "region", "workload_class", "metric", "le"
        )
    }
    rows = (
        TelemetrySample.objects.filter(
            series__bucket_s=bucket_s, bucket_start__gte=start, bucket_start__lt=end
        )
        .values("series_id")
        .annotate(total=Sum("value"), buckets=Count("bucket_start"))
        .order_by()
    )
    totals = []
    for row in rows:
        labels = series.get(row["series_id"])
        if labels is None:  # created after the first query, by a pull running meanwhile
            continue
        tenant, model, region, workload_class, metric, le = labels
        totals.append(
            SeriesTotal(
                series_id=row["series_id"],
                tenant=tenant,
                model=model,
                region=region,
                workload_class=workload_class,
                metric=metric,
                le=le,
                total=float(row["total"]),
                buckets=int(row["buckets"]),
            )
        )
    return totals


def bucket_values(
    *, series_ids: Iterable[int], start: datetime, end: datetime
) -> dict[int, list[tuple[datetime, float]]]:
    """Every sample (bucket start, value) in [start, end) of the given series, by series id."""
    values: dict[int, list[tuple[datetime, float]]] = {}
    ids = list(series_ids)
    # Chunked: SQLite limits the number of parameters in one statement.
    for i in range(0, len(ids), 500):
        rows = TelemetrySample.objects.filter(
            series_id__in=ids[i : i + 500], bucket_start__gte=start, bucket_start__lt=end
        ).values_list("series_id", "bucket_start", "value")
        for series_id, stamp, value in rows:
            values.setdefault(series_id, []).append((stamp, float(value)))
    return values


# -- request-rate history -------------------------------------------------------------------------

HOUR_S = 3600
# Series per history query: each answers at most this many × the window's hours rows.
_HISTORY_SERIES_PER_QUERY = 100

RateSeries = tuple[list[float], list[float]]


class _EpochHour(Func):
    """Whole UTC hours since the epoch of a datetime column, computed in the database, so that
    samples are summed per hour there and not fetched one by one.

    SQLite keeps datetimes as UTC text (``strftime('%s')`` reads it as seconds; the format is
    passed as a parameter so that no ``%`` has to be escaped); PostgreSQL's ``timestamptz`` has
    an epoch.
    """

    output_field = IntegerField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        clone = self.copy()
        clone.set_source_expressions([Value("%s"), *self.get_source_expressions()])
        return clone.as_sql(
            compiler,
            connection,
            template=f"(CAST(strftime(%(expressions)s) AS INTEGER) / {HOUR_S})",
            **extra,
        )

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler,
            connection,
            template=f"CAST(FLOOR(EXTRACT(EPOCH FROM %(expressions)s) / {HOUR_S}) AS bigint)",
            **extra,
        )


def request_rate_history(
    *, start: datetime, end: datetime
) -> dict[tuple[str, str, str], RateSeries]:
    """Hourly request rates in [start, end) per (tenant, model, region), for the forecast.

    Returns ``{(tenant, model, region): (hour starts in UTC epoch seconds, requests/s)}``, each
    series in time order: the contract of ``controlplane.plans.demand.rate_history``.

    - **What is counted**: arrivals where the engine gives them (``metrics.ARRIVALS``: vLLM's
      and SGLang's first tokens, TGI's ``tgi_request_count``), else finished requests (the
      stored increases of ``request_success``), per label set, at the configured bucket width
      (``HEADROOM_TELEMETRY_BUCKET_S``; series of other widths are not mixed in). The series
      of a label set's workload classes (a ``class`` label) are summed.
    - **Partial hours**: an hour's rate is its requests over the seconds its stored buckets
      cover (each class's series over its own buckets), so an hour that telemetry saw only in
      part is neither diluted by the missing buckets nor left out. An hour with no sample at
      all is absent, not zero: a telemetry gap is not an idle hour (``planner.forecast`` gives
      absent hours no weight).
    - **Known names only**: label values that name no tenant, model or region in the database
      are left out (the pull reports them); they have no demand to size.
    - **Bounded**: samples are summed per series and hour in the database, a hundred series
      per query, so weeks of 5-minute buckets for hundreds of series come back as one row per
      series and hour, never as single samples. (A bucket wider than an hour is one point,
      at the hour it starts in.)
    """
    width = stored_bucket_s()
    names = known_names()
    found: dict[str, dict[int, tuple[str, str, str]]] = {REQUESTS: {}, ARRIVALS: {}}
    for series_id, metric, tenant, model, region in TelemetrySeries.objects.filter(
        bucket_s=width, metric__in=(REQUESTS, ARRIVALS), le=""
    ).values_list("id", "metric", "tenant", "model", "region"):
        if tenant in names.tenants and model in names.models and region in names.regions:
            found[metric][series_id] = (tenant, model, region)
    arriving = set(found[ARRIVALS].values())
    keys = dict(found[ARRIVALS])
    keys.update((i, key) for i, key in found[REQUESTS].items() if key not in arriving)
    parts: dict[tuple[str, str, str], dict[int, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    ids = sorted(keys)
    for i in range(0, len(ids), _HISTORY_SERIES_PER_QUERY):
        rows = (
            TelemetrySample.objects.filter(
                series_id__in=ids[i : i + _HISTORY_SERIES_PER_QUERY],
                bucket_start__gte=start,
                bucket_start__lt=end,
            )
            .annotate(hour=_EpochHour("bucket_start"))
            .values("series_id", "hour")
            .annotate(total=Sum("value"), buckets=Count("bucket_start"))
            .order_by()
        )
        for row in rows:
            covered_s = int(row["buckets"]) * width
            parts[keys[row["series_id"]]][int(row["hour"])].append(float(row["total"]) / covered_s)
    history: dict[tuple[str, str, str], RateSeries] = {}
    for key, by_hour in sorted(parts.items()):
        hours = sorted(by_hour)
        # fsum: the same samples give the same rates whatever order the rows came in, so a
        # re-plan's inputs hash does not depend on the database's row order.
        history[key] = (
            [float(h * HOUR_S) for h in hours],
            [math.fsum(by_hour[h]) for h in hours],
        )
    return history


# -- profiles and pools ---------------------------------------------------------------------------


def current_profile(
    *, tenant: Tenant, model: LlmModel, workload_class_id: int, region: Region | None
) -> WorkloadProfile | None:
    """The highest version of a (tenant, model, class, region) profile."""
    return (
        WorkloadProfile.objects.filter(
            tenant=tenant, model=model, workload_class_id=workload_class_id, region=region
        )
        .order_by("-version")
        .first()
    )


def pool_profiles(*, model: LlmModel, region: Region) -> list[WorkloadProfile]:
    """The current profiles of every tenant whose traffic for ``model`` lands in ``region``.

    A profile without a region is the tenant's home region's. Telemetry measures a tenant's
    whole traffic in a pool, so where a tenant has telemetry profiles there, they stand for
    it and its declared (per-class) profiles are left out: counting both would count the
    traffic twice.
    """
    rows = (
        WorkloadProfile.objects.filter(model=model)
        .filter(Q(region=region) | Q(region__isnull=True, tenant__home_region=region))
        .select_related("tenant", "workload_class")
        .order_by("tenant_id", "workload_class_id", "-version")
    )
    current: dict[tuple[int, int], WorkloadProfile] = {}
    for profile in rows:
        current.setdefault((profile.tenant_id, profile.workload_class_id), profile)
    observed_tenants = {
        p.tenant_id for p in current.values() if p.source == WorkloadProfile.Source.TELEMETRY
    }
    # A pool-wide telemetry profile (tenants telemetry cannot tell apart) stands for every
    # tenant it names.
    covered = {
        name
        for p in current.values()
        if p.source == WorkloadProfile.Source.TELEMETRY
        for name in p.pool_tenants
        if name != p.tenant.name
    }
    return [
        p
        for p in current.values()
        if (p.tenant_id not in observed_tenants or p.source == WorkloadProfile.Source.TELEMETRY)
        and p.tenant.name not in covered
    ]


def pool_tenant_names(*, model: LlmModel, region: Region) -> list[str]:
    """Names of the tenants with a current profile for ``model`` whose traffic lands in
    ``region`` (a profile without a region is its tenant's home region's), sorted."""
    return sorted(
        set(
            WorkloadProfile.objects.filter(model=model)
            .filter(Q(region=region) | Q(region__isnull=True, tenant__home_region=region))
            .values_list("tenant__name", flat=True)
        )
    )


@dataclass(frozen=True)
class PoolShape:
    """The shape a pool is sized on and its whole-mix capacity figure (tokens/s)."""

    shape: ReplicaShape
    prefill_tokens_per_s: float
    decode_tokens_per_s: float


def pool_shape(*, model: LlmModel) -> PoolShape | None:
    """The model's smallest shape (fewest GPUs, then name) with a capacity figure, sized on
    the figure planning uses for it (``fleet.selectors.planning_figures``: the freshest
    whole-mix figure, else the freshest of any class); None when no shape has one.

    The smallest shape is the one the capacity method sizes fleets in (the seeds' 2-GPU
    replica); a larger shape is a redesign, not a replica count.
    """
    shapes = ReplicaShape.objects.filter(model=model).order_by("gpus_per_replica", "name")
    figures = planning_figures(shape_ids=[shape.pk for shape in shapes])
    for shape in shapes:
        figure = figures.get(shape.pk)
        if figure is not None:
            return PoolShape(shape, figure.prefill_tokens_per_s, figure.decode_tokens_per_s)
    return None
