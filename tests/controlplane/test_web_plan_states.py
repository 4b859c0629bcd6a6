"""The plan page's banner says what the plan's state is now: active, awaiting approval,
rejected (by whom, when, why), superseded (by which version), failed; never the sentence
stored when the plan was made once the state has moved on."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane.core.roles import POLICY_ADMIN, VIEWER
from controlplane.plans import services as plan_services
from controlplane.plans.models import Plan
from controlplane.telemetry.models import RunStatus, TelemetryPull
from tests.controlplane.plans_helpers import load_support_assistant, run_replan, shrink_region

pytestmark = pytest.mark.django_db


def _client(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def _banner(body: str) -> str:
    """The state banner's text, tags dropped and whitespace folded."""
    found = re.search(r'<div class="banner[^"]*" id="plan-state"[^>]*>(.*?)</div>', body, re.S)
    assert found is not None, "no state banner"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


def _page(user: User | None, plan: Plan) -> str:
    response = _client(user).get(f"/plans/v{plan.version}/")
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def held(role_users: dict[str, User | None]) -> tuple[Plan, Plan]:
    """v1 active; v2 (no GPUs left in us-east) awaiting approval."""
    load_support_assistant()
    first = run_replan().plan
    shrink_region("us-east", 0)
    second = run_replan().plan
    assert first is not None and second is not None
    assert second.state == Plan.State.AWAITING_APPROVAL
    return first, second


def test_an_active_plan_says_since_when(
    role_users: dict[str, User | None], held: tuple[Plan, Plan]
) -> None:
    first, _ = held
    text = _banner(_page(role_users[VIEWER], first))
    assert text.startswith("Active since ")
    assert "Activated: the first plan." in text
    assert "awaiting" not in text.lower()


def test_a_plan_awaiting_approval_says_why_and_who_must_decide(
    role_users: dict[str, User | None], held: tuple[Plan, Plan]
) -> None:
    first, second = held
    body = _page(role_users[VIEWER], second)
    text = _banner(body)
    assert text.startswith("Awaiting approval.")
    assert "more unserved than plan v1" in text
    assert "A policy admin must approve or reject it." in text
    assert f"Plan v{first.version} stays the active plan." in text
    assert 'class="banner warn"' in body


def test_a_rejected_plan_names_who_rejected_it_when_and_why(
    role_users: dict[str, User | None], held: tuple[Plan, Plan]
) -> None:
    first, second = held
    admin = role_users[POLICY_ADMIN]
    response = _client(admin).post(
        f"/plans/v{second.version}/decide/", {"action": "reject", "reason": "wait for GPUs"}
    )
    assert response.status_code == 302
    second.refresh_from_db()
    assert second.state == Plan.State.REJECTED

    body = _page(role_users[VIEWER], second)
    text = _banner(body)
    assert text.startswith("Rejected by admin-user on ")
    assert "“wait for GPUs”" in text
    assert "It was held for approval because it leaves" in text
    assert f"Plan v{first.version} stays the active plan." in text
    assert "Awaiting approval" not in body and "must approve" not in body
    assert 'class="banner bad"' in body
    # The confirmation page, reached by its address, says the same.
    decide = _client(admin).get(f"/plans/v{second.version}/decide/?action=approve")
    assert _banner(decide.content.decode()).startswith("Rejected by admin-user")


def test_an_approved_plan_supersedes_the_one_before_and_both_say_so(
    role_users: dict[str, User | None], held: tuple[Plan, Plan]
) -> None:
    first, second = held
    plan_services.plan_approve(plan=second, user=role_users[POLICY_ADMIN], reason="accept it")

    new = _banner(_page(role_users[VIEWER], second))
    assert new.startswith("Active since ")
    assert "It was held for approval because it leaves" in new
    assert "Approved by admin-user on " in new and "“accept it”" in new
    assert "must approve" not in new

    old_body = _page(role_users[VIEWER], first)
    old = _banner(old_body)
    assert old.startswith(f"Superseded by v{second.version} on ")
    assert "It was active from " in old
    assert "Awaiting approval" not in old_body and "Activated: the first plan." not in old


def test_an_older_plan_awaiting_approval_says_it_can_no_longer_be_approved(
    role_users: dict[str, User | None], held: tuple[Plan, Plan]
) -> None:
    _, second = held
    shrink_region("us-east", 8)  # some GPUs back: a third plan, also held or activated
    third = run_replan().plan
    assert third is not None and third.version == second.version + 1
    text = _banner(_page(role_users[POLICY_ADMIN], second))
    assert f"v{third.version} is newer; only the newest plan can be approved" in text
    assert "A policy admin must approve or reject it." not in text


def test_a_plan_of_an_invalid_problem_says_it_failed(
    role_users: dict[str, User | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    load_support_assistant()
    real_export = plan_services.problem_export

    def broken_export(**kwargs: Any) -> dict[str, Any]:
        problem = real_export(**kwargs)
        problem["demands"][0]["home_region"] = "mars-north"
        return problem

    monkeypatch.setattr(plan_services, "problem_export", broken_export)
    plan = run_replan().plan
    assert plan is not None and plan.solver_status == Plan.SolverStatus.INVALID

    body = _page(role_users[VIEWER], plan)
    text = _banner(body)
    assert text.startswith("Failed: the placement problem was invalid.")
    assert "mars-north" in text
    assert "Never activated. No plan is active." in text
    assert 'class="banner bad"' in body


def _sizing(body: str) -> tuple[str, str]:
    found = re.search(r'<p class="banner ?([^"]*)" id="plan-sizing"[^>]*>(.*?)</p>', body, re.S)
    assert found is not None, "no sizing notice"
    return found.group(1), " ".join(html.unescape(found.group(2)).split())


def test_a_plan_sized_from_declared_profiles_says_so_at_the_top(
    role_users: dict[str, User | None],
) -> None:
    load_support_assistant()
    first = run_replan().plan
    assert first is not None
    declared = first.forecast_band["sources"]["declared"]
    assert declared > 0 and first.forecast_band["sources"]["telemetry"] == 0

    body = _page(role_users[VIEWER], first)
    tone, text = _sizing(body)
    assert tone == ""
    assert text == (
        f"Every demand ({declared}) was sized from its declared workload profile: no telemetry "
        "had been pulled when it was made."
    )
    assert body.index('id="plan-sizing"') < body.index('id="allocations"')


def test_a_fallback_to_declared_profiles_after_telemetry_was_pulled_is_a_warning(
    role_users: dict[str, User | None],
) -> None:
    load_support_assistant()
    now = timezone.now()
    TelemetryPull.objects.create(
        status=RunStatus.SUCCEEDED,
        window_start=now - timedelta(hours=1),
        window_end=now,
        bucket_s=300,
        samples_stored=1440,
        finished_at=now,
    )
    plan = run_replan().plan  # the pull stored no request rates the re-plan reads
    assert plan is not None and plan.forecast_band["sources"]["telemetry"] == 0

    tone, text = _sizing(_page(role_users[VIEWER], plan))
    assert tone == "warn"
    assert "was sized from its declared workload profile, though telemetry had been pulled" in (
        text
    )
    assert "300 s buckets" in text

    # Some demands from telemetry, some declared: the count of each, no warning.
    Plan.objects.filter(pk=plan.pk).update(
        forecast_band={**plan.forecast_band, "sources": {"declared": 2, "telemetry": 7}}
    )
    tone, text = _sizing(_page(role_users[VIEWER], plan))
    assert tone == ""
    assert text.startswith("2 of 9 demands were sized from their declared workload profiles")
