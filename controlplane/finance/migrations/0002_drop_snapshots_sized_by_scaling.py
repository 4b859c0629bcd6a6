"""Finance snapshots are a cache: those stored before the days were sized by re-solving the
placement (the plan scaled zone by zone) are dropped with their reports, and the first read or
the warm-up computes them again."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def drop_snapshots(apps: Any, schema_editor: Any) -> None:
    apps.get_model("finance", "FinanceSnapshot").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("finance", "0001_initial")]

    operations = [migrations.RunPython(drop_snapshots, migrations.RunPython.noop)]
