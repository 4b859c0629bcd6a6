"""The plans admin: read-only plans with allocations inline, the "Re-plan now" button and the
approve/reject actions, for policy admins only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from controlplane.core.roles import POLICY_ADMIN, VIEWER
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.services import replan_request
from tests.controlplane.conftest import make_user
from tests.controlplane.plans_helpers import load_support_assistant, run_replan, shrink_region

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:plans_plan_changelist"


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin_client_for_role() -> Any:
    def make(role: str) -> Client:
        return _client(make_user(f"{role}-staff", role, staff=True))

    return make


def test_policy_admin_replans_from_the_plan_list(
    admin_client_for_role: Any, django_capture_on_commit_callbacks: Any
) -> None:
    load_support_assistant()
    client = admin_client_for_role(POLICY_ADMIN)

    page = client.get(reverse(CHANGELIST))
    assert page.status_code == 200
    assert "Re-plan now" in page.content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("admin:plans_plan_replan"), follow=True)

    assert response.status_code == 200
    run = ReplanRun.objects.get()
    assert run.trigger == Plan.Trigger.ADMIN and run.requested_by is not None
    assert run.status == ReplanRun.Status.SUCCEEDED
    assert Plan.objects.get().trigger == Plan.Trigger.ADMIN
    messages = [str(m) for m in response.context["messages"]]
    # In a test the task runs when the test's transaction hands it over, after the redirect
    # was answered; outside a test the message names the new plan.
    assert messages == [f"Re-plan #{run.pk} queued."]
    assert client.get(reverse("admin:plans_plan_replan")).status_code == 405


def test_viewers_see_plans_but_no_button_and_cannot_replan(admin_client_for_role: Any) -> None:
    load_support_assistant()
    plan = run_replan().plan
    assert plan is not None
    client = admin_client_for_role(VIEWER)

    page = client.get(reverse(CHANGELIST))
    assert page.status_code == 200
    html = page.content.decode()
    assert "Re-plan now" not in html and "approve_plans" not in html
    assert client.post(reverse("admin:plans_plan_replan")).status_code == 403
    assert ReplanRun.objects.count() == 1
    assert client.get(reverse("admin:plans_plan_change", args=[plan.pk])).status_code == 200


def test_a_plan_page_is_read_only_with_allocations_inline(admin_client_for_role: Any) -> None:
    load_support_assistant()
    plan = run_replan().plan
    assert plan is not None
    client = admin_client_for_role(POLICY_ADMIN)

    page = client.get(reverse("admin:plans_plan_change", args=[plan.pk]))

    assert page.status_code == 200
    html = page.content.decode()
    allocation = plan.allocations.order_by("zone", "shape").first()
    assert allocation is not None
    assert allocation.zone in html and allocation.shape in html
    assert "Activated: the first plan." in html
    assert 'name="_save"' not in html
    assert client.get(reverse("admin:plans_plan_add")).status_code == 403
    assert client.post(reverse("admin:plans_plan_delete", args=[plan.pk])).status_code == 403
    runs = client.get(reverse("admin:plans_replanrun_changelist"))
    assert runs.status_code == 200

    reason = "Drift alert #7: brightpath-learning in eu-west needs 3 more replicas."
    drift = replan_request(trigger=Plan.Trigger.DRIFT, enqueue=False, reason=reason)
    run_page = client.get(reverse("admin:plans_replanrun_change", args=[drift.pk]))
    assert run_page.status_code == 200
    run_html = run_page.content.decode()
    assert "Reason:" in run_html and reason in run_html
    assert 'name="_save"' not in run_html


def test_approve_and_reject_actions_lead_to_the_confirmation_step(
    admin_client_for_role: Any,
) -> None:
    load_support_assistant()
    first = run_replan().plan
    shrink_region("us-east", 0)
    second = run_replan().plan
    assert first is not None and second is not None
    client = admin_client_for_role(POLICY_ADMIN)
    url = reverse(CHANGELIST)

    for action, verb in (("approve_plans", "approve"), ("reject_plans", "reject")):
        response = client.post(url, {"action": action, "_selected_action": [second.pk]})
        assert response.status_code == 302
        assert response["Location"] == f"/plans/v{second.version}/decide/?action={verb}"
    # Nothing is decided by the action itself.
    second.refresh_from_db()
    assert second.state == Plan.State.AWAITING_APPROVAL

    both = client.post(
        url, {"action": "approve_plans", "_selected_action": [first.pk, second.pk]}, follow=True
    )
    assert any("Select one plan" in str(m) for m in both.context["messages"])
    first.refresh_from_db()
    assert first.state == Plan.State.ACTIVE
