"""The seeds' Friday review as a scenario: five tenants share the EU pool, retrieval goes from
top-4 to top-8 chunks for all of them, and the pool's drift alert says what the re-plan pays.

The seeds' numbers: 12 replicas of the 2-GPU replica (4,000 prompt / 160 output tokens/s) at
8 req/s, prompts 1,500 → 2,700 tokens at 100 output tokens: 8 × 1.0 / 0.7 → 12 replicas,
8 × 1.3 / 0.7 = 14.9 → 15, three more. Each tenant here sends 1.6 of the 8 req/s. Priced one
tenant at a time against a pool where the other four had already drifted, every alert read
"+0 replicas" (the pool needs 8 × 1.3 − 1.6 × 0.3 = 9.92 replica-s/s without that one
tenant's change: 14.2 → 15 replicas either way); the pool's drift, priced by re-solving the
placement with every tenant's profile before and after, reads +3, and its dollars are the
re-plan's.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.plans.impact import pool_drift_alerts_price
from controlplane.plans.models import Plan
from controlplane.plans.services import drift_reason, replan_execute, replan_request
from controlplane.scenarios.services import scenario_load
from controlplane.telemetry import derive
from controlplane.telemetry.drift import drift_alerts_raised
from controlplane.telemetry.models import DriftAlert, PoolDriftAlert, ProfileDerivation
from tests.controlplane.telemetry_fakes import steady, store, traffic_samples

pytestmark = pytest.mark.django_db

TENANTS = ("alder-health", "birch-legal", "cedar-bank", "damson-retail", "elm-travel")
RATE = 8.0 / len(TENANTS)  # requests/s each
MONDAY = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
WEDNESDAY = MONDAY + timedelta(days=2)
W = 300
HOUR = timedelta(hours=1)

FRIDAY_REVIEW: dict[str, Any] = {
    "format": "headroom-scenario/v1",
    "name": "friday-review",
    "description": "Five tenants share the EU pool of the seeds' 70B model on 2 × 80 GB.",
    "geographies": [{"name": "eu"}],
    "regions": [
        {
            "name": "eu-west",
            "geography": "eu",
            "price_multiplier": 1.1,
            "zones": ["eu-west-a", "eu-west-b", "eu-west-c"],
        }
    ],
    "accelerators": [
        {
            "name": "gpu80",
            "memory_gb": 80,
            "peak_bf16_tflops": 990,
            "memory_tbps": 3.35,
            "on_demand_price_per_gpu_hour": 4.10,
            "reserved_price_per_gpu_hour": 2.70,
        }
    ],
    "inventory": [
        {"zone": zone, "accelerator": "gpu80", "gpus_available": 32}
        for zone in ("eu-west-a", "eu-west-b", "eu-west-c")
    ],
    "models": [
        {
            "name": "chat-70b",
            "parameters_billions": 70,
            "layers": 80,
            "kv_heads": 8,
            "head_dim": 128,
        }
    ],
    "replica_shapes": [
        {
            "name": "chat-70b/gpu80x2",
            "model": "chat-70b",
            "accelerator": "gpu80",
            "gpus_per_replica": 2,
        }
    ],
    "capacity_figures": [
        {
            "shape": "chat-70b/gpu80x2",
            "prefill_tokens_per_s": 4000,
            "decode_tokens_per_s": 160,
            "max_concurrency": 12,
            "source": "engine-benchmark",
        }
    ],
    # The seeds' sizing: the 70% target, no burst on top, no failure promise.
    "tiers": [
        {
            "name": "standard",
            "p95_ttft_slo_s": 2.5,
            "failure_promise": "none",
            "target_utilization": 0.7,
            "burst_factor": 1.0,
        }
    ],
    "tenants": [{"name": name, "tier": "standard", "home_region": "eu-west"} for name in TENANTS],
}


@pytest.fixture
def friday(settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_BUCKET_S = W
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 100
    settings.HEADROOM_DEFAULT_TARGET_UTILIZATION = 0.7
    settings.HEADROOM_REPLAN_TIME_LIMIT_S = 5
    settings.HEADROOM_REPLAN_BAND_TIME_LIMIT_S = 1
    scenario_load(data=FRIDAY_REVIEW)


def _hour(start: datetime, *, prompt: float) -> ProfileDerivation:
    """An hour of the five tenants' steady traffic in eu-west, derived."""
    bucket = steady(requests_per_s=RATE, bucket_s=W, prompt_mean=prompt, output_mean=100.0)
    for tenant in TENANTS:
        store(traffic_samples(tenant, "chat-70b", "eu-west", start, W, [bucket] * 12), W)
    return derive.workload_profiles_derive(window_start=start, window_end=start + HOUR)


def _replan(trigger: str, reason: str = "") -> Plan:
    queued = replan_request(trigger=trigger, enqueue=False, reason=reason)
    run = replan_execute(run_id=queued.pk)
    assert run is not None and run.plan is not None, run and run.error
    return run.plan


def _replicas(plan: Plan) -> int:
    return sum(row.replicas for row in plan.allocations.all())


@pytest.mark.usefixtures("friday")
def test_friday_review_pool_alert_says_three_more_replicas_and_what_the_re_plan_pays() -> None:
    monday = _hour(MONDAY, prompt=1500.0)
    assert monday.profiles_created == len(TENANTS) and monday.alerts_raised == 0
    plan_before = _replan(Plan.Trigger.COMMAND)
    assert _replicas(plan_before) == 12
    # 12 replicas × 2 GPUs × $4.10 × 1.1 (eu-west) = $108.24/h.
    assert plan_before.cost_per_hour == pytest.approx(108.24)

    # Wednesday: top-8 retrieval for everyone, 2,700-token prompts at the same 8 req/s.
    wednesday = _hour(WEDNESDAY, prompt=2700.0)
    assert wednesday.alerts_raised == len(TENANTS)
    priced = pool_drift_alerts_price(derivation=wednesday)

    pool = PoolDriftAlert.objects.get()
    assert priced == [pool]
    assert pool.pricing == PoolDriftAlert.Pricing.PRICED, pool.pricing_error
    assert (pool.model.name, pool.region.name) == ("chat-70b", "eu-west")
    assert (pool.replicas_before, pool.replicas_after, pool.replica_delta) == (12, 15, 3)
    assert (pool.gpus_before, pool.gpus_after) == (24, 30)
    assert pool.pools == [
        {
            "region": "eu-west",
            "shape": "chat-70b/gpu80x2",
            "model": "chat-70b",
            "replicas_before": 12,
            "replicas_after": 15,
            "gpus_before": 24,
            "gpus_after": 30,
            "cost_per_hour_before": pytest.approx(108.24),
            "cost_per_hour_after": pytest.approx(135.30),
        }
    ]
    # Every tenant carries a fifth of the change: 1.6 × 0.3 = 0.48 of 2.4 replica-s/s.
    assert [t["tenant"] for t in pool.tenants] == sorted(TENANTS)
    for share in pool.tenants:
        assert share["share"] == pytest.approx(0.2)
        assert (share["load_before"], share["load_after"]) == (
            pytest.approx(1.6),
            pytest.approx(2.08),
        )
        assert share["kinds"] == [DriftAlert.Kind.PROMPT_MEAN]

    tenant_alerts = list(DriftAlert.objects.order_by("tenant__name"))
    assert len(tenant_alerts) == len(TENANTS)
    for alert in tenant_alerts:
        assert alert.pool_alert == pool
        assert alert.pool_share == pytest.approx(0.2)
        assert (alert.replicas_before, alert.replicas_after, alert.replica_delta) == (12, 15, 3)
        assert "20% of the pool's drift" in alert.message
        assert "+3 replicas in eu-west" in alert.message

    # The re-plan the drift asks for pays what the pool alert said.
    raised = drift_alerts_raised(derivation=wednesday)
    plan_after = _replan(Plan.Trigger.DRIFT, reason=drift_reason(raised))
    assert _replicas(plan_after) == 15
    assert plan_after.cost_per_hour == pytest.approx(pool.cost_per_hour_after)
    assert plan_before.cost_per_hour == pytest.approx(pool.cost_per_hour_before)
    cost_change = (
        f"from 24 GPUs at ${plan_before.cost_per_hour:,.2f}/h to 30 GPUs at "
        f"${plan_after.cost_per_hour:,.2f}/h "
        f"(+${plan_after.cost_per_hour - plan_before.cost_per_hour:,.2f}/h)"
    )
    assert cost_change == "from 24 GPUs at $108.24/h to 30 GPUs at $135.30/h (+$27.06/h)"
    assert pool.message == (
        "drift of chat-70b in eu-west (5 tenants: alder-health 20%, birch-legal 20%, "
        "cedar-bank 20%, damson-retail 20%, elm-travel 20%): +3 replicas in eu-west "
        f"(12 → 15 × chat-70b/gpu80x2); the re-plan goes {cost_change}"
    )
    # The re-plan's explanation repeats why: the alerts, with the pool's price.
    assert "+3 replicas in eu-west" in json.dumps(plan_after.explanation, ensure_ascii=False)
