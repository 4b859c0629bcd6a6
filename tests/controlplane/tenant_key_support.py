"""Two tenants with a record of every tenant-owned kind each, and clients that hold keys.

``two_tenant_world`` builds the finance seeds' fleet with its two tenants ("assistant", 8
requests/s, and "helper", 2 requests/s), solves and activates a plan that routes both, and
adds, for each tenant, a quota, a telemetry profile, a series, an observation and an open
drift alert; the first tenant's telemetry profile is pooled with the second's. ``key_client(key)`` is an API client sending ``Authorization: Bearer <key>``.
``issue_key`` makes a key the way an operator would (also usable by other test suites that
need a tenant-key caller, e.g. a schema fuzzer).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.access.services import tenant_key_create
from controlplane.fleet.models import LlmModel, Region, WorkloadClass
from controlplane.plans.models import Plan
from controlplane.policies.models import Tenant, TenantQuota, WorkloadProfile
from controlplane.telemetry.models import (
    DriftAlert,
    ObservedWorkload,
    ProfileDerivation,
    RunStatus,
    TelemetrySeries,
)
from tests.controlplane.api_harness import Records, profile_figures
from tests.controlplane.finance_helpers import active_plan, seeds_fleet

OWN = "assistant"
OTHER = "helper"


@dataclass(frozen=True)
class TenantRecords:
    tenant: Tenant
    quota: TenantQuota
    profile: WorkloadProfile
    telemetry_profile: WorkloadProfile
    series: TelemetrySeries
    observation: ObservedWorkload
    alert: DriftAlert


@dataclass(frozen=True)
class World:
    plan: Plan
    own: TenantRecords
    other: TenantRecords


def issue_key(tenant: Tenant, *, name: str = "test", read_only: bool = False) -> str:
    return tenant_key_create(tenant=tenant, name=name, created_by=None, read_only=read_only).key


def key_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def _tenant_records(tenant: Tenant, derivation: ProfileDerivation) -> TenantRecords:
    model = LlmModel.objects.get(name="m")
    region = Region.objects.get(name="r1")
    mix = WorkloadClass.objects.get(name="mix")
    quota = TenantQuota.objects.create(
        tenant=tenant, budget_rate_replica_s_per_s=2.0, budget_burst_replica_s=60.0
    )
    profile = WorkloadProfile.objects.get(tenant=tenant)
    measured = WorkloadProfile.objects.create(
        tenant=tenant,
        model=model,
        workload_class=mix,
        region=region,
        version=2,
        source=WorkloadProfile.Source.TELEMETRY,
        **profile_figures(),
    )
    series = TelemetrySeries.objects.create(
        tenant=tenant.name, model="m", region="r1", metric="requests_total", bucket_s=60
    )
    figures = profile_figures()
    observation = ObservedWorkload.objects.create(
        derivation=derivation,
        tenant=tenant.name,
        model="m",
        region="r1",
        workload_class="mix",
        profile=measured,
        requests=100.0,
        buckets=10,
        mean_requests_per_s=1.0,
        **{k: v for k, v in figures.items() if k.startswith(("prompt", "output", "peak"))},
    )
    alert = DriftAlert.objects.create(
        tenant=tenant,
        model=model,
        region=region,
        workload_class=mix,
        kind=DriftAlert.Kind.PROMPT_MEAN,
        baseline_value=1500.0,
        current_value=2700.0,
        threshold=0.25,
        message=f"prompt growth for {tenant.name}",
        raised_by=derivation,
    )
    return TenantRecords(tenant, quota, profile, measured, series, observation, alert)


def two_tenant_world() -> World:
    records = Records()
    seeds_fleet(records, with_second_tenant=True)
    records.region_link()
    records.hosted_provider()
    plan = active_plan()
    now = timezone.now()
    derivation = ProfileDerivation.objects.create(
        window_start=now - timedelta(hours=1), window_end=now, status=RunStatus.SUCCEEDED
    )
    own = _tenant_records(Tenant.objects.get(name=OWN), derivation)
    other = _tenant_records(Tenant.objects.get(name=OTHER), derivation)
    # A pooled measurement: telemetry could not tell the two tenants apart.
    WorkloadProfile.objects.filter(pk=own.telemetry_profile.pk).update(pool_tenants=[OWN, OTHER])
    return World(plan=plan, own=own, other=other)
