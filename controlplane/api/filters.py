"""Query-string filters, ordering and pagination for the record endpoints.

Foreign keys filter by id (``?tier=3``); choices by value (``?state=down``); an unknown id or
value is a 400 naming the parameter, not an empty page.
"""

from __future__ import annotations

from datetime import timedelta

import django_filters
from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from controlplane.core.filters import StrictBooleanFilter, StrictFilterSet
from controlplane.fleet.models import (
    CapacityFigure,
    Geography,
    HostedProvider,
    Region,
    RegionLink,
    ReplicaShape,
    Zone,
    ZoneInventory,
)
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile


class RegionFilter(StrictFilterSet):
    class Meta:
        model = Region
        fields = ("geography",)


class HostedProviderFilter(StrictFilterSet):
    class Meta:
        model = HostedProvider
        fields = ("region", "enabled")


class ZoneFilter(StrictFilterSet):
    geography = django_filters.ModelChoiceFilter(
        field_name="region__geography",
        queryset=Geography.objects.all(),
        label="Zones in regions of this geography.",
    )

    class Meta:
        model = Zone
        fields = ("region", "state")


class RegionLinkFilter(StrictFilterSet):
    region = django_filters.ModelChoiceFilter(
        queryset=Region.objects.all(),
        method="filter_either_end",
        label="Links with this region at either end.",
    )

    class Meta:
        model = RegionLink
        fields = ("region_a", "region_b")

    def filter_either_end(
        self, queryset: QuerySet[RegionLink], name: str, value: Region
    ) -> QuerySet[RegionLink]:
        return queryset.filter(Q(region_a=value) | Q(region_b=value))


class ZoneInventoryFilter(StrictFilterSet):
    region = django_filters.ModelChoiceFilter(
        field_name="zone__region", queryset=Region.objects.all(), label="Zones of this region."
    )

    class Meta:
        model = ZoneInventory
        fields = ("zone", "accelerator")


class ReplicaShapeFilter(StrictFilterSet):
    class Meta:
        model = ReplicaShape
        fields = ("model", "accelerator")


class CapacityFigureFilter(StrictFilterSet):
    stale = StrictBooleanFilter(
        method="filter_stale",
        label="true: figures older than the fleet's maximum age; false: fresh ones.",
    )

    class Meta:
        model = CapacityFigure
        fields = ("shape", "workload_class", "source")

    def filter_stale(
        self, queryset: QuerySet[CapacityFigure], name: str, value: bool
    ) -> QuerySet[CapacityFigure]:
        # The same rule as CapacityFigure.is_stale (age > max age), as a query.
        cutoff = timezone.now() - timedelta(days=settings.HEADROOM_CAPACITY_MAX_AGE_DAYS)
        if value:
            return queryset.filter(measured_at__lt=cutoff)
        return queryset.filter(measured_at__gte=cutoff)


class TierFilter(StrictFilterSet):
    class Meta:
        model = Tier
        fields = ("failure_promise",)


class TenantFilter(StrictFilterSet):
    residency_region = django_filters.ModelChoiceFilter(
        field_name="residency_regions",
        queryset=Region.objects.all(),
        label="Tenants whose residency region list includes this region.",
    )

    class Meta:
        model = Tenant
        fields = ("tier", "home_region", "residency_geography", "spill_allowed")


class TenantQuotaFilter(StrictFilterSet):
    class Meta:
        model = TenantQuota
        fields = ("tenant",)


class WorkloadProfileFilter(StrictFilterSet):
    class Meta:
        model = WorkloadProfile
        fields = ("tenant", "model", "workload_class", "region", "source")
