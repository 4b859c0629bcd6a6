"""Writes of fleet and policy records made through the API.

Each write runs the model's own rules (``full_clean()``: field validators, ``clean()``, unique
rules) so the API refuses exactly what the admin and the scenario loader refuse, and runs in
its own transaction (a savepoint when nested), so a refused write leaves nothing behind.
The acting user on the history rows comes from simple_history's request middleware.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction
from django.db.models import Model

from controlplane.fleet.models import Region
from controlplane.policies.models import Tenant, validate_residency_regions
from planner.errors import PlannerInputError

RecordT = TypeVar("RecordT", bound=Model)


def record_save(*, record: RecordT) -> RecordT:
    """Validate one record with its model rules and save it (insert or update)."""
    with transaction.atomic():
        _full_clean(record)
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


def tenant_save(*, tenant: Tenant, residency_regions: Sequence[Region] | None = None) -> Tenant:
    """Validate and save a tenant together with its residency region list.

    ``residency_regions`` replaces the list; ``None`` keeps the current one (which is still
    checked, since a new home region or geography can break it). The list rule (inside the
    residency geography, home region included) is ``validate_residency_regions``: ``clean()``
    cannot see many-to-many values.

    History: an update writes one row holding every change, regions included. A new tenant
    writes its "created" row and, when it has regions, one "changed" row that adds them,
    because the rows linking it to regions can only exist after it does.
    """
    with transaction.atomic():
        _full_clean(tenant)
        if residency_regions is not None:
            regions = list(residency_regions)
        elif tenant.pk is not None:
            regions = list(tenant.residency_regions.all())
        else:
            regions = []
        validate_residency_regions(
            home_region=tenant.home_region,
            geography=tenant.residency_geography,
            regions=regions,
        )
        if tenant.pk is None:
            tenant.save()
            if regions:
                tenant.residency_regions.set(regions)
        else:
            if residency_regions is not None:
                # Change the list without a history row of its own: the save below writes
                # one row that records the new list with the other changes. (The flag is
                # simple_history's per-instance switch, unknown to the model's type.)
                tenant.skip_history_when_saving = True  # type: ignore[attr-defined]
                try:
                    tenant.residency_regions.set(regions)
                finally:
                    del tenant.skip_history_when_saving  # type: ignore[attr-defined]
            tenant.save()
    return tenant
