"""Reads for telemetry: stored sums per series, known label values, a pool's current profiles
and the shape it is sized on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q, Sum

from controlplane.fleet.models import CapacityFigure, LlmModel, Region, ReplicaShape
from controlplane.policies.models import Tenant, WorkloadProfile
from controlplane.telemetry.models import (
    RunStatus,
    TelemetryPull,
    TelemetrySample,
    TelemetrySeries,
)

# -- pulls ----------------------------------------------------------------------------------------


def last_pulled_until(*, bucket_s: int) -> datetime | None:
    """End of the newest window a pull at this bucket width stored successfully."""
    return (
        TelemetryPull.objects.filter(status=RunStatus.SUCCEEDED, bucket_s=bucket_s)
        .order_by("-window_end")
        .values_list("window_end", flat=True)
        .first()
    )


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
        if tenant not in self.tenants:
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
) -> dict[int, list[float]]:
    """Every sample value in [start, end) of the given series, by series id."""
    values: dict[int, list[float]] = {}
    ids = list(series_ids)
    # Chunked: SQLite limits the number of parameters in one statement.
    for i in range(0, len(ids), 500):
        rows = TelemetrySample.objects.filter(
            series_id__in=ids[i : i + 500], bucket_start__gte=start, bucket_start__lt=end
        ).values_list("series_id", "value")
        for series_id, value in rows:
            values.setdefault(series_id, []).append(float(value))
    return values


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
    return [
        p
        for p in current.values()
        if p.tenant_id not in observed_tenants or p.source == WorkloadProfile.Source.TELEMETRY
    ]


@dataclass(frozen=True)
class PoolShape:
    """The shape a pool is sized on and its whole-mix capacity figure (tokens/s)."""

    shape: ReplicaShape
    prefill_tokens_per_s: float
    decode_tokens_per_s: float


def pool_shape(*, model: LlmModel) -> PoolShape | None:
    """The model's smallest shape (fewest GPUs, then name) with a whole-mix capacity figure,
    sized on that figure's freshest measurement; None when no shape has one.

    The smallest shape is the one the capacity method sizes fleets in (the seeds' 2-GPU
    replica); a larger shape is a redesign, not a replica count.
    """
    figures = (
        CapacityFigure.objects.filter(shape__model=model, workload_class__isnull=True)
        .select_related("shape", "shape__model", "shape__accelerator")
        .order_by("shape__gpus_per_replica", "shape__name", "-measured_at", "-pk")
    )
    figure = figures.first()
    if figure is None:
        return None
    return PoolShape(figure.shape, figure.prefill_tokens_per_s, figure.decode_tokens_per_s)
