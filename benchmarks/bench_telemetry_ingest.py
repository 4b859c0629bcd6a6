"""Benchmark: telemetry samples stored per second (``controlplane.telemetry.storage``).

Times ``samples_store`` as a pull uses it, in its own transaction including the commit: on
PostgreSQL a binary COPY into a temporary table and ``INSERT … ON CONFLICT DO NOTHING``, on
SQLite one ``INSERT OR IGNORE`` statement run for every row. Each run stores one batch of new samples
(``--series`` series × ``--buckets`` buckets, the buckets after those of the run before, so the
table grows as it would), then the same batch again, which stores nothing (a re-pulled
window). The series are created first (``series_ids``) and timed separately. Rows the
benchmark wrote (its series, tenant ``bench-…``) are deleted at the end.

Run against a migrated database (the script migrates it first), e.g.::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/headroom_dev_telemetry \\
        .venv/bin/python benchmarks/bench_telemetry_ingest.py --runs 7

Goal: at least 50,000 new samples per second on PostgreSQL (median of the runs); reported,
not asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from controlplane.telemetry.metrics import METRICS  # noqa: E402
from controlplane.telemetry.models import TelemetrySeries  # noqa: E402
from controlplane.telemetry.storage import SeriesKey, samples_store, series_ids  # noqa: E402

GOAL_PER_S = 50_000
BUCKET_S = 300


def _keys(prefix: str, count: int) -> list[SeriesKey]:
    """``count`` series shaped like a fleet's: tenants × regions × metrics × bucket bounds."""
    metrics = [(family.name, "") for family in METRICS if family.kind != "histogram"]
    for family in METRICS:
        if family.kind == "histogram":
            metrics += [(family.name + "_bucket", le) for le in ("1.0", "10.0", "100.0", "+Inf")]
            metrics += [(family.name + "_sum", ""), (family.name + "_count", "")]
    keys = []
    i = 0
    while len(keys) < count:
        tenant, region = f"{prefix}-t{i // 4}", ("eu-west", "us-east", "ap-south", "sa-east")[i % 4]
        keys += [SeriesKey(tenant, "chat-70b", region, "", m, le) for m, le in metrics]
        i += 1
    return keys[:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=2000, help="series per batch")
    parser.add_argument("--buckets", type=int, default=100, help="buckets per series per batch")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)

    call_command("migrate", verbosity=0)
    vendor = connection.vendor
    with connection.cursor() as cursor:
        cursor.execute("SELECT version()" if vendor == "postgresql" else "SELECT sqlite_version()")
        version = cursor.fetchone()[0]
    print(f"database: {vendor} {version.split(' on ')[0]}")
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs")
    try:
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    except OSError:
        pass

    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    keys = _keys(prefix, args.series)
    start = time.perf_counter()
    with transaction.atomic():
        ids = series_ids(keys=keys, bucket_s=BUCKET_S)
    series_s = time.perf_counter() - start
    print(f"{len(ids)} series created in {series_s * 1000:.0f} ms")

    origin = datetime(2025, 1, 6, tzinfo=UTC)
    per_batch = len(keys) * args.buckets
    fresh: list[float] = []
    repeat: list[float] = []
    try:
        for run in range(args.runs):
            first = origin + timedelta(seconds=run * args.buckets * BUCKET_S)
            rows = [
                (ids[key], first + timedelta(seconds=b * BUCKET_S), float(b + j))
                for j, key in enumerate(keys)
                for b in range(args.buckets)
            ]
            for label, times in (("new", fresh), ("again", repeat)):
                start = time.perf_counter()
                stored = samples_store(rows=rows)
                elapsed = time.perf_counter() - start
                expected = per_batch if label == "new" else 0
                if stored != expected:
                    print(f"run {run}: stored {stored} {label} rows, expected {expected}")
                    return 1
                times.append(per_batch / elapsed)
                print(f"run {run} {label:>5}: {per_batch:,} rows in {elapsed:.3f} s = "
                      f"{per_batch / elapsed:,.0f} rows/s")  # fmt: skip
    finally:
        TelemetrySeries.objects.filter(tenant__startswith=prefix).delete()

    print()
    print(
        f"{args.runs} runs of {per_batch:,} samples ({len(keys)} series × {args.buckets} buckets)"
    )
    print(
        f"new samples:      median {statistics.median(fresh):>10,.0f}/s  "
        f"(min {min(fresh):,.0f}, max {max(fresh):,.0f})"
    )
    print(
        f"already stored:   median {statistics.median(repeat):>10,.0f}/s  "
        f"(min {min(repeat):,.0f}, max {max(repeat):,.0f})"
    )
    verdict = "meets" if statistics.median(fresh) >= GOAL_PER_S else "misses"
    print(f"goal {GOAL_PER_S:,}/s new samples: {verdict} it ({vendor})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
