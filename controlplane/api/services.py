"""Writes of fleet and policy records made through the API.

Each write runs the model's own rules (``full_clean()``: field validators, ``clean()``, unique
rules) so the API refuses exactly what the admin and the scenario loader refuse, and runs in
its own transaction (a savepoint when nested), so a refused write leaves nothing behind.
The acting user on the history rows comes from simple_history's request middleware. A
tenant with its residency regions is saved by ``controlplane.policies.services.tenant_save``,
which the admin uses too.

An update whose values equal the stored ones saves nothing: no new revision, no history row
(``core.records.record_unchanged``).
"""

from __future__ import annotations

from typing import TypeVar

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction
from django.db.models import Model

from controlplane.core.records import record_unchanged
from planner.errors import PlannerInputError

RecordT = TypeVar("RecordT", bound=Model)


def record_save(*, record: RecordT) -> RecordT:
    """Validate one record with its model rules and save it (insert or update); an update
    that changes nothing is validated and not saved."""
    with transaction.atomic():
        _full_clean(record)
        if record_unchanged(record):
            return record
        record.save()
    return record


def _full_clean(record: Model) -> None:
    """``full_clean()``, where a planner formula refusing the figures is a validation error.

    A ``clean()`` that derives figures (a shape's KV pool) hands the record's values, and
    those of the records it points at, to ``planner.capacity``; values that are each valid
    but together overflow (a reserve of 1e300 GB) make the planner refuse them.
    """
    try:
        record.full_clean()
    except PlannerInputError as exc:
        raise ValidationError(
            {NON_FIELD_ERRORS: [f"These figures are outside what capacity planning can use: {exc}"]}
        ) from exc


def record_delete(*, record: Model) -> None:
    """Delete one record; ``ProtectedError`` names what still refers to it."""
    with transaction.atomic():
        record.delete()
