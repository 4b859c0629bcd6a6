"""Records edited under optimistic concurrency."""

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
