"""Records the operators' pages show that a scenario alone does not make: observation windows
of a tenant's workload (as telemetry derivations store them) and a drift alert with the
re-plan it requested."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from controlplane.fleet.models import ReplicaShape
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.services import drift_reason, replan_execute, replan_request
from controlplane.policies.models import Tenant
from controlplane.telemetry.models import DriftAlert, ObservedWorkload, ProfileDerivation, RunStatus


def add_observations(tenant_name: str, *, days: int = 7) -> None:
    """One finished daily derivation per day with this tenant's observed workload, its
    prompts growing towards the last day (the Friday review's shape)."""
    tenant = Tenant.objects.get(name=tenant_name)
    profile = tenant.profiles.select_related("model", "workload_class").first()
    assert profile is not None
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    for day in range(days):
        window_end = end - timedelta(days=days - 1 - day)
        derivation = ProfileDerivation.objects.create(
            window_start=window_end - timedelta(days=1),
            window_end=window_end,
            finished_at=window_end,
            status=RunStatus.SUCCEEDED,
        )
        growth = 1.0 + 0.08 * day
        ObservedWorkload.objects.create(
            derivation=derivation,
            tenant=tenant.name,
            model=profile.model.name,
            region=tenant.home_region.name,
            workload_class=profile.workload_class.name,
            requests=86_400 * profile.peak_requests_per_s * 0.55,
            buckets=288,
            mean_requests_per_s=profile.peak_requests_per_s * (0.5 + 0.02 * day),
            peak_requests_per_s=profile.peak_requests_per_s * (0.9 + 0.03 * day),
            prompt_tokens_p50=profile.prompt_tokens_p50 * growth,
            prompt_tokens_mean=profile.prompt_tokens_mean * growth,
            prompt_tokens_p95=profile.prompt_tokens_p95 * growth,
            prompt_tokens_p99=profile.prompt_tokens_p99 * growth,
            output_tokens_p50=profile.output_tokens_p50,
            output_tokens_mean=profile.output_tokens_mean,
            output_tokens_p95=profile.output_tokens_p95,
            output_tokens_p99=profile.output_tokens_p99,
            prefix_cache_hit_rate=max(0.0, profile.prefix_cache_hit_rate - 0.02 * day),
            ttft_p95_s=0.45 + 0.05 * day,
        )


def add_drift_alert(tenant_name: str) -> DriftAlert:
    """An open prompt-length alert on the tenant's pool and the drift re-plan it requested."""
    tenant = Tenant.objects.get(name=tenant_name)
    profile = tenant.profiles.select_related("model", "workload_class").first()
    assert profile is not None
    shape = ReplicaShape.objects.filter(model=profile.model).order_by("name").first()
    alert = DriftAlert.objects.create(
        tenant=tenant,
        model=profile.model,
        region=tenant.home_region,
        workload_class=profile.workload_class,
        kind=DriftAlert.Kind.PROMPT_MEAN,
        baseline_value=profile.prompt_tokens_mean,
        current_value=profile.prompt_tokens_mean + 1200,
        threshold=0.2,
        shape=shape,
        target_utilization=0.7,
        replicas_before=4,
        replicas_after=6,
        message=(
            f"Mean prompt of {tenant.name} in {tenant.home_region.name} grew from "
            f"{profile.prompt_tokens_mean:.0f} to {profile.prompt_tokens_mean + 1200:.0f} tokens: "
            "4 → 6 replicas."
        ),
    )
    run = replan_request(trigger=Plan.Trigger.DRIFT, reason=drift_reason([alert]), enqueue=False)
    finished = replan_execute(run_id=run.pk)
    assert finished is not None and finished.status in (
        ReplanRun.Status.SUCCEEDED,
        ReplanRun.Status.UNCHANGED,
    )
    return alert


def active_and_awaiting_plans() -> tuple[Plan, Plan]:
    """The shipped scenario: v1 active, observations and a drift alert for
    nordlicht-versicherung, and v2 (no GPUs left in us-east) awaiting approval."""
    from tests.controlplane.plans_helpers import load_support_assistant, run_replan, shrink_region

    load_support_assistant()
    first = run_replan().plan
    add_observations("nordlicht-versicherung")
    add_drift_alert("nordlicht-versicherung")
    shrink_region("us-east", 0)
    second = run_replan().plan
    assert first is not None and second is not None
    assert second.state == Plan.State.AWAITING_APPROVAL
    return first, second
