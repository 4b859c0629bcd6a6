"""The drift page shows each pool drift's priced change, the figures its message states and
the re-plan pays, with its tenant alerts under it and the pools' engine signal alerts beside.

The seeds' Friday review (``test_drift_friday_review``): five tenants' prompts go from 1,500
to 2,700 tokens; the pool's drift re-solves the placement to +3 replicas, 24 → 30 GPUs and
$108.24/h → $135.30/h, and the drift re-plan then stores exactly that plan.
"""

from __future__ import annotations

import copy
import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from controlplane.core.roles import VIEWER
from controlplane.plans.assumptions import pool_signal_alerts_check
from controlplane.plans.impact import pool_drift_alerts_price
from controlplane.plans.models import Plan
from controlplane.plans.services import drift_reason, replan_execute, replan_request
from controlplane.scenarios.services import scenario_load
from controlplane.telemetry import derive
from controlplane.telemetry.drift import drift_alerts_raised
from controlplane.telemetry.models import DriftAlert, PoolDriftAlert, PoolSignalAlert
from tests.controlplane.telemetry_fakes import steady, store, traffic_samples
from tests.controlplane.test_drift_friday_review import (
    FRIDAY_REVIEW,
    MONDAY,
    RATE,
    TENANTS,
    WEDNESDAY,
    W,
)
from tests.controlplane.test_pool_signal_alerts import LONG_QUEUE, SLOW_ITL, engine_samples

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


def _replan(trigger: str, reason: str = "") -> Plan:
    queued = replan_request(trigger=trigger, enqueue=False, reason=reason)
    run = replan_execute(run_id=queued.pk)
    assert run is not None and run.plan is not None, run and run.error
    return run.plan


def _hour(start: Any, *, prompt: float) -> Any:
    bucket = steady(requests_per_s=RATE, bucket_s=W, prompt_mean=prompt, output_mean=100.0)
    for tenant in TENANTS:
        store(traffic_samples(tenant, "chat-70b", "eu-west", start, W, [bucket] * 12), W)
    return bucket


@pytest.fixture
def drifted(settings: Any) -> tuple[Plan, PoolDriftAlert, Plan]:
    """(the plan before, the priced pool drift, the drift re-plan's plan)."""
    settings.HEADROOM_TELEMETRY_BUCKET_S = W
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 100
    settings.HEADROOM_DEFAULT_TARGET_UTILIZATION = 0.7
    settings.HEADROOM_REPLAN_TIME_LIMIT_S = 5
    settings.HEADROOM_REPLAN_BAND_TIME_LIMIT_S = 1
    scenario_load(data=copy.deepcopy(FRIDAY_REVIEW))
    _hour(MONDAY, prompt=1500.0)
    derive.workload_profiles_derive(window_start=MONDAY, window_end=MONDAY + HOUR)
    before = _replan(Plan.Trigger.COMMAND)
    _hour(WEDNESDAY, prompt=2700.0)
    # The pool's engines slow too: a pool signal alert beside the drift.
    store(engine_samples(WEDNESDAY, itl=SLOW_ITL, queue=LONG_QUEUE, kv_tokens=24_320.0), W)
    wednesday = derive.workload_profiles_derive(window_start=WEDNESDAY, window_end=WEDNESDAY + HOUR)
    pool_drift_alerts_price(derivation=wednesday)
    pool_signal_alerts_check(derivation=wednesday)
    after = _replan(
        Plan.Trigger.DRIFT, reason=drift_reason(drift_alerts_raised(derivation=wednesday))
    )
    return before, PoolDriftAlert.objects.get(), after


def _page(user: User | None, query: str = "") -> str:
    client = Client()
    if user is not None:
        client.force_login(user)
    response = client.get("/drift/" + query)
    assert response.status_code == 200
    return response.content.decode()


def _pool_block(body: str, pool: PoolDriftAlert) -> str:
    match = re.search(
        rf'<tbody class="drift-pool" id="pool-drift-{pool.pk}">(.*?)</tbody>', body, re.S
    )
    assert match, "the pool drift is on the page"
    return match.group(1)


def _figure(block: str, name: str) -> str:
    match = re.search(rf'data-figure="{name}">(.*?)</td>', block, re.S)
    assert match, name
    return html.unescape(re.sub(r"\s+", " ", match.group(1)).strip())


def _gpus(plan: Plan) -> int:
    return sum(row.replicas * row.gpus_per_replica for row in plan.allocations.all())


def _replicas(plan: Plan) -> int:
    return sum(
        r.replicas for r in plan.allocations.filter(region="eu-west", shape__startswith="chat-70b")
    )


def test_the_pages_figures_are_the_pool_alerts_and_the_re_plans(
    drifted: tuple[Plan, PoolDriftAlert, Plan], role_users: dict[str, User | None]
) -> None:
    before, pool, after = drifted
    assert pool.pricing == PoolDriftAlert.Pricing.PRICED, pool.pricing_error
    block = _pool_block(_page(role_users[VIEWER]), pool)
    replicas, gpus, cost = (_figure(block, n) for n in ("replicas", "gpus", "cost"))

    # The pool alert's stored figures …
    assert replicas == (f"{pool.replicas_before} → {pool.replicas_after} ({pool.replica_delta:+d})")
    assert (
        gpus == f"{pool.gpus_before} → {pool.gpus_after} ({pool.gpus_after - pool.gpus_before:+d})"
    )
    assert pool.cost_per_hour_before is not None and pool.cost_per_hour_after is not None
    assert cost == (
        f"${pool.cost_per_hour_before:,.2f}/h → ${pool.cost_per_hour_after:,.2f}/h "
        f"(+${pool.cost_per_hour_after - pool.cost_per_hour_before:,.2f}/h)"
    )
    # … the re-plans' (the plan before the drift and the drift re-plan at the same demand) …
    assert (
        replicas
        == f"{_replicas(before)} → {_replicas(after)} (+{_replicas(after) - _replicas(before)})"
    )
    assert gpus == f"{_gpus(before)} → {_gpus(after)} (+{_gpus(after) - _gpus(before)})"
    assert before.cost_per_hour is not None and after.cost_per_hour is not None
    assert cost == (
        f"${before.cost_per_hour:,.2f}/h → ${after.cost_per_hour:,.2f}/h "
        f"(+${after.cost_per_hour - before.cost_per_hour:,.2f}/h)"
    )
    # … and the message's, word for word, the seeds' numbers.
    assert (replicas, gpus, cost) == (
        "12 → 15 (+3)",
        "24 → 30 (+6)",
        "$108.24/h → $135.30/h (+$27.06/h)",
    )
    assert "(12 → 15 × chat-70b/gpu80x2)" in pool.message
    assert "from 24 GPUs at $108.24/h to 30 GPUs at $135.30/h (+$27.06/h)" in pool.message
    assert html.escape(pool.message) in block

    # Each tenant's share as priced, and its alert grouped under the pool's drift.
    assert _figure(block, "shares") == ", ".join(f"{t} 20%" for t in sorted(TENANTS))
    for alert in DriftAlert.objects.all():
        assert alert.pool_alert_id == pool.pk
        assert f">{alert.tenant.name}</a>" in block
    assert block.count("20% of the pool's drift") == len(TENANTS)
    assert "mean prompt length 1,500 → 2,700 tokens (+80%)" in block


def test_the_engine_signals_are_on_the_page_with_their_numbers(
    drifted: tuple[Plan, PoolDriftAlert, Plan], role_users: dict[str, User | None]
) -> None:
    body = _page(role_users[VIEWER])
    signals = body[body.index('id="pool-signals"') :]
    itl = PoolSignalAlert.objects.get(kind=PoolSignalAlert.Kind.ITL_P95)
    assert html.escape(itl.message) in signals
    for text in ("175 ms", "75 ms", "at most 94 ms", "1.75 s", "at most 1.00 s"):
        assert f'<td class="n">{text}</td>' in signals, text
    # The KV capacity (24,320 tokens per engine) holds the 12 sequences of 1,600 tokens
    # (19,200) the plan active at the check assumed: no alert.
    assert not PoolSignalAlert.objects.filter(kind=PoolSignalAlert.Kind.KV_CAPACITY).exists()
    # Resolved alerts leave the open tab for the resolved one.
    assert "No open engine signal alerts." not in body
    PoolSignalAlert.objects.update(status="resolved")
    assert "No open engine signal alerts." in _page(role_users[VIEWER])
    assert "175 ms" in _page(role_users[VIEWER], "?status=resolved")


def test_numbers_are_rounded_by_meaning(
    drifted: tuple[Plan, PoolDriftAlert, Plan], role_users: dict[str, User | None]
) -> None:
    body = _page(role_users[VIEWER], "?status=all")
    assert not re.search(r"\d\.\d{5,}", body), "no float noise"
    assert not re.search(r"\de-\d", body), "no exponent"
