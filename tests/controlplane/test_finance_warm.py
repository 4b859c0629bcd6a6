"""An activated plan's finance snapshot and monthly reports are stored before the first read.

When a plan becomes active, ``headroom.finance.warm`` is sent once the activation commits; it
stores the plan's snapshot, the monthly forecast and the monthly showback, so the first finance
read after a re-plan reads stored rows instead of computing them in a web request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.celery import app
from controlplane.core.roles import FINANCE
from controlplane.finance import services
from controlplane.finance.models import FinanceReport, FinanceSnapshot
from controlplane.plans.models import Plan
from tests.controlplane.api_harness import Records
from tests.controlplane.finance_helpers import active_plan, seeds_fleet
from tests.controlplane.plans_helpers import raise_profile

pytestmark = pytest.mark.django_db


@pytest.fixture
def warm(settings: Any) -> None:
    settings.HEADROOM_FINANCE_WARM = True


def _activate(capture: Callable[..., Any]) -> Plan:
    with capture(execute=True):
        return active_plan()


def test_an_activation_stores_the_snapshot_and_the_monthly_reports(
    warm: None, django_capture_on_commit_callbacks: Any, api_client_for: Any
) -> None:
    seeds_fleet(Records(), with_second_tenant=True)
    plan = _activate(django_capture_on_commit_callbacks)
    (snapshot,) = FinanceSnapshot.objects.filter(plan=plan)
    stored = set(FinanceReport.objects.filter(snapshot=snapshot).values_list("endpoint", flat=True))
    assert stored == {"forecast", "showback"}
    # The first read is a read: no snapshot to compute, nothing more stored.
    client = api_client_for(FINANCE)
    with CaptureQueriesContext(connection) as queries:
        body = client.get("/api/finance/forecast/").json()
    assert body["plan_version"] == plan.version and body["snapshot"] == snapshot.pk
    assert not any(q["sql"].lstrip().upper().startswith("INSERT") for q in queries)
    assert FinanceSnapshot.objects.count() == 1
    assert FinanceReport.objects.filter(snapshot=snapshot).count() == 2
    # The next activation warms the next plan.
    raise_profile("assistant", 1.5)
    second = _activate(django_capture_on_commit_callbacks)
    assert second.version == plan.version + 1
    assert FinanceSnapshot.objects.filter(plan=second).count() == 1


def test_a_plan_no_longer_active_is_not_warmed(warm: None) -> None:
    seeds_fleet(Records())
    first = active_plan()
    raise_profile("assistant", 1.5)
    second = active_plan()
    assert services.finance_warm(plan_id=first.pk) is None
    assert not FinanceSnapshot.objects.filter(plan=first).exists()
    warmed = services.finance_warm(plan_id=second.pk)
    assert warmed is not None and warmed.plan_id == second.pk
    # Again: everything is stored already, and read.
    assert services.finance_warm(plan_id=second.pk) == warmed
    assert FinanceSnapshot.objects.count() == 1


@pytest.mark.parametrize("on", [True, False])
def test_the_warm_up_is_sent_for_the_activated_plan_unless_switched_off(
    on: bool, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.HEADROOM_FINANCE_WARM = on
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(services, "task_send_on_commit", lambda *a, **k: sent.append((*a, k)))
    seeds_fleet(Records())
    plan = active_plan()
    assert sent == ([(services.FINANCE_WARM_TASK, plan.pk, {"robust": True})] if on else [])
    assert FinanceSnapshot.objects.count() == 0  # nothing computed in the activating thread


def test_the_task_takes_the_plan_id_and_runs_outside_the_sender() -> None:
    task = app.tasks[services.FINANCE_WARM_TASK]
    # Without a broker an isolated task runs in a child process, not in the request or
    # re-plan that activated the plan.
    assert getattr(task, "isolated", False) is True
    assert task.acks_late is True and task.reject_on_worker_lost is True
