"""Shared set-up for the plans tests: the shipped scenario, a re-plan run, and the edits that
make a re-plan produce a different plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db.models import Max

from controlplane.fleet.models import Region, ZoneInventory
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.services import replan_execute, replan_request
from controlplane.policies.models import Tenant, WorkloadProfile
from controlplane.scenarios.services import scenario_load

REPO = Path(__file__).resolve().parents[2]
SUPPORT_ASSISTANT = REPO / "docs" / "scenarios" / "support-assistant.yaml"


def load_support_assistant() -> None:
    scenario_load(path=SUPPORT_ASSISTANT)


def run_replan(*, trigger: str = Plan.Trigger.COMMAND, wait_s: float = 0.0) -> ReplanRun:
    """One re-plan, run in this process; returns the finished run."""
    queued = replan_request(trigger=trigger, enqueue=False)
    run = replan_execute(run_id=queued.pk, wait_s=wait_s)
    assert run is not None
    return run


def raise_profile(tenant: str, factor: float, **filters: Any) -> WorkloadProfile:
    """A new version of one of ``tenant``'s current profiles with its peak × ``factor``."""
    profiles = WorkloadProfile.objects.filter(tenant__name=tenant, **filters)
    current = profiles.order_by("-version", "pk").first()
    assert current is not None
    top = profiles.filter(
        model=current.model, workload_class=current.workload_class, region=current.region
    ).aggregate(top=Max("version"))["top"]
    current.pk = None
    current.id = None
    current._state.adding = True
    current.version = int(top) + 1
    current.peak_requests_per_s *= factor
    current.full_clean()
    current.save()
    return current


def shrink_region(region: str, gpus_per_zone: int) -> None:
    """Leave ``gpus_per_zone`` GPUs in each zone of ``region`` (a shortage)."""
    ZoneInventory.objects.filter(zone__region=Region.objects.get(name=region)).update(
        gpus_available=gpus_per_zone
    )


def tenant(name: str) -> Tenant:
    return Tenant.objects.get(name=name)
