"""System checks of the shared kit.

``stored_figures_within_bounds`` (tag ``database``, so ``manage.py check --database default``
runs it): rows stored before a field gained its range, or written around the validators (a
raw SQL fix, a restore from an older release), can hold values outside it. The API, the
admin and the published schema all promise the range, so each such row is reported as a
warning naming the table, the row and the field, with the range it should lie in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from django.apps import apps
from django.core import checks
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import DatabaseError, connections, models
from django.db.models import Q

from controlplane.core.validators import number

# Enough rows to act on; a larger count is reported as a count.
ROWS_NAMED = 20


def _ranged_fields(model: type[models.Model]) -> Iterator[tuple[models.Field[Any, Any], Q]]:
    """Each concrete field with a minimum or maximum, and the filter of rows outside it."""
    for field in model._meta.concrete_fields:
        outside = Q()
        for validator in field.validators:
            if isinstance(validator, MinValueValidator):
                outside |= Q(**{f"{field.attname}__lt": validator.limit_value})
            elif isinstance(validator, MaxValueValidator):
                outside |= Q(**{f"{field.attname}__gt": validator.limit_value})
        if outside:
            yield field, outside


def _range(field: models.Field[Any, Any]) -> str:
    low = [v.limit_value for v in field.validators if isinstance(v, MinValueValidator)]
    high = [v.limit_value for v in field.validators if isinstance(v, MaxValueValidator)]
    return f"[{number(low[0]) if low else '-inf'}, {number(high[0]) if high else 'inf'}]"


@checks.register(checks.Tags.database)
def stored_figures_within_bounds(
    app_configs: Sequence[Any] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    configs = app_configs or apps.get_app_configs()
    for alias in databases or ():
        tables = set(connections[alias].introspection.table_names())
        for config in configs:
            for model in config.get_models():
                if not model._meta.managed or model._meta.db_table not in tables:
                    continue
                for field, outside in _ranged_fields(model):
                    try:
                        rows = model._default_manager.using(alias).filter(outside)
                        found = list(
                            rows.order_by("pk").values_list("pk", field.attname)[:ROWS_NAMED]
                        )
                        total = rows.count() if len(found) == ROWS_NAMED else len(found)
                    except DatabaseError as exc:  # a table from an unapplied migration
                        messages.append(
                            checks.Warning(
                                f"{model._meta.label}.{field.name}: not checked ({exc}).",
                                id="core.W002",
                            )
                        )
                        continue
                    if not found:
                        continue
                    named = ", ".join(f"#{pk} = {value!r}" for pk, value in found)
                    more = f" and {total - len(found)} more" if total > len(found) else ""
                    messages.append(
                        checks.Warning(
                            f"{model._meta.label}.{field.name}: {total} row(s) outside "
                            f"{_range(field)}: {named}{more}.",
                            hint="Correct them in the admin or the API: both, and the "
                            "published schema, promise the range, and a figure far outside it "
                            "can make a re-plan fail.",
                            obj=model,
                            id="core.W001",
                        )
                    )
    return messages
