"""Telemetry storage: series ids and sample rows.

Samples are keyed by (series, bucket start) and inserted with "on conflict do nothing":
storing a window again, or an overlapping one, stores nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from controlplane.telemetry.models import TelemetrySample, TelemetrySeries


@dataclass(frozen=True)
class SeriesKey:
    tenant: str
    model: str
    region: str
    workload_class: str
    metric: str
    le: str


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


def samples_store(*, rows: Sequence[SampleRow], overwrite: bool = False) -> int:
    """Insert (series id, bucket start, value) rows, skipping buckets already stored, or with
    ``overwrite`` replacing their values (a window pulled again after a partial answer).

    Returns the number of rows inserted (with ``overwrite``: inserted or changed). On PostgreSQL the rows are copied (binary COPY) into
    a temporary table and moved with ``INSERT … ON CONFLICT DO NOTHING``; on SQLite they are
    inserted with one ``INSERT OR IGNORE`` statement run for every row; elsewhere they go
    through ``bulk_create(ignore_conflicts=True)``. Runs in a transaction (a savepoint when one
    is open).
    """
    if not rows:
        return 0
    with transaction.atomic():
        if overwrite:
            return _store_overwriting(rows)
        if connection.vendor == "postgresql":
            return _store_by_copy(rows)
        if connection.vendor == "sqlite":
            return _store_by_insert_or_ignore(rows)
        return _store_by_bulk_create(rows)


def _store_overwriting(rows: Sequence[SampleRow]) -> int:
    # An upsert that leaves equal values alone, so that the count is of rows that changed.
    # PostgreSQL and SQLite (3.24 and later) share the syntax.
    if connection.vendor not in ("postgresql", "sqlite"):
        TelemetrySample.objects.bulk_create(
            [TelemetrySample(series_id=s, bucket_start=b, value=v) for s, b, v in rows],
            update_conflicts=True,
            unique_fields=["series", "bucket_start"],
            update_fields=["value"],
            batch_size=2000,
        )
        return len(rows)
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO telemetry_sample (series_id, bucket_start, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (series_id, bucket_start) DO UPDATE SET value = excluded.value "
            "WHERE telemetry_sample.value <> excluded.value",
            [(series_id, adapt(stamp), value) for series_id, stamp, value in rows],
        )
        return int(cursor.rowcount)


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
