"""Records edited under optimistic concurrency, and the test every update service makes
first: whether the write changes anything at all."""

from __future__ import annotations

from typing import Any

from django.db import models


class Revisioned(models.Model):
    """A record edited under optimistic concurrency: ``revision`` grows on every save."""

    revision = models.PositiveIntegerField(default=1, editable=False)

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not kwargs.get("force_insert"):
            self.revision = (self.revision or 0) + 1
        super().save(*args, **kwargs)

    @property
    def etag(self) -> str:
        return f'"{type(self).__name__.lower()}-{self.pk}-{self.revision}"'


def record_unchanged(record: models.Model) -> bool:
    """Whether ``record``, an update of a stored row, holds exactly the stored values.

    Update services save nothing for such a write: no new revision (so the ETag stays), no
    audit history row. Compares every concrete column but the revision (the database's own
    counter, not a value the writer sets) with the row as stored now; a new record, or one
    deleted meanwhile, is a change. Many-to-many values are the caller's to compare.
    """
    if record.pk is None or record._state.adding:
        return False
    fields = [
        f for f in record._meta.concrete_fields if not f.primary_key and f.attname != "revision"
    ]
    stored = (
        type(record)
        ._default_manager.filter(pk=record.pk)
        .values(*(f.attname for f in fields))
        .first()
    )
    if stored is None:
        return False
    return all(getattr(record, f.attname) == stored[f.attname] for f in fields)
