"""A fleet for the finance tests: the seeds' sizing example in the database.

One region of three zones, one GPU type (2.00 $/GPU-hour on demand, 1.30 reserved), one
1-GPU shape benchmarked at 100 output tokens/s; the "assistant" tenant sends 8 requests/s of
100 output tokens (one prompt token: a nanosecond of prefill) on a tier with burst 1.5 and zone survival, so the plan holds
the seeds' 27 replicas (9 per zone). ``with_second_tenant`` adds a 2 requests/s tenant on a
tier with no promise, for splits between tenants.
"""

from __future__ import annotations

from typing import Any

from controlplane.fleet.models import Region
from controlplane.plans.models import Plan
from tests.controlplane.api_harness import Records
from tests.controlplane.plans_helpers import run_replan

ON_DEMAND = 2.0
RESERVED = 1.3


def seeds_fleet(records: Records, *, with_second_tenant: bool = False) -> Region:
    region = records.region(name="r1")
    gpu = records.accelerator(
        name="gpu80", on_demand_price_per_gpu_hour=ON_DEMAND, reserved_price_per_gpu_hour=RESERVED
    )
    for suffix in ("a", "b", "c"):
        zone = records.zone(region=region, name=f"r1-{suffix}")
        records.inventory(zone=zone, accelerator=gpu, gpus_available=1000)
    model = records.llm_model(name="m")
    shape = records.shape(name="m/gpu80x1", model=model, accelerator=gpu, gpus_per_replica=1)
    # Prefill as fast as a figure may be, so that the one prompt token of each request costs
    # ten nanoseconds: the seeds' example has output tokens only.
    records.figure(shape=shape, prefill_tokens_per_s=1e8, decode_tokens_per_s=100.0)
    mix = records.workload_class(name="mix")
    zonal = records.tier(
        name="zonal", failure_promise="zone", burst_factor=1.5, target_utilization=0.7
    )
    _tenant(records, "assistant", zonal, region, model, mix, rate=8.0)
    if with_second_tenant:
        plain = records.tier(name="plain", failure_promise="none", burst_factor=1.0)
        _tenant(records, "helper", plain, region, model, mix, rate=2.0)
    return region


def _tenant(
    records: Records, name: str, tier: Any, region: Region, model: Any, mix: Any, *, rate: float
) -> None:
    tenant = records.tenant(name=name, tier=tier, home_region=region, residency_regions=(region,))
    figures = {
        "peak_requests_per_s": rate,
        "prompt_tokens_p50": 1.0,
        "prompt_tokens_mean": 1.0,
        "prompt_tokens_p95": 1.0,
        "prompt_tokens_p99": 1.0,
        "output_tokens_p50": 100.0,
        "output_tokens_mean": 100.0,
        "output_tokens_p95": 100.0,
        "output_tokens_p99": 100.0,
    }
    profile = records.profile(tenant=tenant, model=model, workload_class=mix, **figures)
    profile.full_clean()


def active_plan() -> Plan:
    run = run_replan()
    assert run.plan is not None and run.plan.state == Plan.State.ACTIVE, run.error
    return run.plan
