"""``manage.py replan``: one re-plan now, the plan printed (cost, allocations per region,
unserved, binding), exit status 1 when another re-plan holds the lock."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from controlplane.fleet.models import CapacityFigure
from controlplane.plans import lock
from controlplane.plans.models import Plan, ReplanRun
from tests.controlplane.plans_helpers import load_support_assistant, shrink_region

pytestmark = pytest.mark.django_db


def _replan(*args: str) -> str:
    out = StringIO()
    call_command("replan", *args, stdout=out)
    return out.getvalue()


@pytest.fixture(autouse=True)
def scenario() -> None:
    load_support_assistant()


def test_prints_the_plan_per_region_then_reports_unchanged_inputs() -> None:
    text = _replan()

    plan = Plan.objects.get()
    assert text.startswith(f"Re-plan #{plan.runs.get().pk} made plan v1.\n")
    assert f"Cost: {plan.cost_per_hour:.2f} $/h" in text
    lines = text.splitlines()
    eu = lines.index(next(line for line in lines if line.startswith("eu-west: ")))
    us = lines.index(next(line for line in lines if line.startswith("us-east: ")))
    assert eu < us
    for row in plan.allocations.all():
        assert f"  {row.zone} × {row.shape} × {row.replicas} " in text
    assert "Unserved:" not in text
    assert "Decision: Activated: the first plan." in text

    again = _replan()
    assert "inputs unchanged since plan v1; no new plan." in again
    assert Plan.objects.count() == 1


def test_prints_unserved_demand_and_binding_sentences(settings: Any) -> None:
    settings.HEADROOM_CAPACITY_MAX_AGE_DAYS = 30
    _replan()
    shrink_region("us-east", 0)
    CapacityFigure.objects.update(measured_at=timezone.now() - timedelta(days=40))

    text = _replan()

    assert "Plan v2 (awaiting approval" in text
    assert "Unserved:\n  " in text and "keystone-mutual/chat-70b/policy-question" in text
    binding = text[text.index("\nBinding:\n") :]
    assert "\n  Stale capacity figure: chat-70b/gpu80x2 was last measured" in binding
    assert "Decision: Awaiting approval" in text


def test_exits_1_when_another_replan_holds_the_lock() -> None:
    assert lock.lock_claim(holder="run:424242", ttl_s=600).claimed

    with pytest.raises(CommandError) as skipped:
        _replan()
    assert skipped.value.returncode == 1
    assert "run:424242" in str(skipped.value)

    with pytest.raises(CommandError) as waited:
        _replan("--wait", "--timeout", "0.3")
    assert waited.value.returncode == 1
    assert ReplanRun.objects.filter(status=ReplanRun.Status.SKIPPED).count() == 2
    assert Plan.objects.count() == 0


def test_refuses_a_negative_timeout() -> None:
    with pytest.raises(CommandError) as error:
        _replan("--wait", "--timeout", "-1")
    assert error.value.returncode == 2
