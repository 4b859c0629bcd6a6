"""Writes of tenant policy that span records, shared by the admin, the API and the
operators' pages (the what-if's save)."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from controlplane.core.records import record_unchanged
from controlplane.fleet.models import Region
from controlplane.policies.models import Tenant, validate_residency_regions


def tenant_save(*, tenant: Tenant, residency_regions: Sequence[Region] | None = None) -> Tenant:
    """Validate and save a tenant together with its residency region list.

    ``residency_regions`` replaces the list; ``None`` keeps the current one (which is still
    checked, since a new home region or geography can break it). The list rule (inside the
    residency geography, home region included) is ``validate_residency_regions``: ``clean()``
    cannot see many-to-many values.

    History: an update writes one row holding every change, regions included. A new tenant
    writes its "created" row and, when it has regions, one "changed" row that adds them,
    because the rows linking it to regions can only exist after it does. An update that
    changes neither a field nor the region list saves nothing (no revision, no history row).
    """
    with transaction.atomic():
        tenant.full_clean()
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
            current = {region.pk for region in tenant.residency_regions.all()}
            if {region.pk for region in regions} == current and record_unchanged(tenant):
                return tenant
            if residency_regions is not None:
                # Change the list without a history row of its own: the save below writes
                # one row that records the new list with the other changes.
                tenant.skip_history_when_saving = True  # type: ignore[attr-defined]
                try:
                    tenant.residency_regions.set(regions)
                finally:
                    del tenant.skip_history_when_saving  # type: ignore[attr-defined]
            tenant.save()
    return tenant
