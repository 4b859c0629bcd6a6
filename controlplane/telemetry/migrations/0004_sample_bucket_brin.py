"""A BRIN index on the samples' bucket start, on PostgreSQL only.

Derivations read every series over a time window. The primary key (series, bucket start) does
not serve "all series, these buckets", and a B-tree on the bucket start cost about a fifth of
the ingest rate (docs/benchmarks.md). Pulls append the newest buckets, so the table's physical
order follows time and a BRIN index (a few pages, next to nothing per insert) narrows a window
query to the block ranges that hold it. SQLite has no BRIN; there the derivation scans.
The index is outside the model's state on purpose: it exists on one database vendor only.
"""

from django.db import migrations

INDEX = "telemetry_sample_bucket_start_brin"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON telemetry_sample USING brin (bucket_start)"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0003_sample_series_without_constraint")]

    operations = [migrations.RunPython(create, drop)]
