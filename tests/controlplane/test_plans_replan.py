"""Re-planning the shipped support-assistant scenario: a verified plan with allocations and
routing, no new version for unchanged inputs, version 2 with a diff after a profile change,
approval for a plan that serves less, stale figures flagged, activation and its emission hook.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.core.roles import FINANCE, POLICY_ADMIN
from controlplane.fleet.models import CapacityFigure
from controlplane.pipeline import services as pipeline
from controlplane.plans import services
from controlplane.plans.models import Plan, PlanAllocation, PlanRouting, ReplanRun
from controlplane.plans.problem import problem_export
from controlplane.plans.services import (
    plan_activate,
    plan_approve,
    plan_reject,
    problem_inputs_hash,
)
from planner.placement.verify import verify
from tests.controlplane.conftest import make_user
from tests.controlplane.plans_helpers import (
    load_support_assistant,
    raise_profile,
    run_replan,
    shrink_region,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def scenario() -> None:
    load_support_assistant()


@pytest.fixture
def policy_admin() -> User:
    return make_user("planner-admin", POLICY_ADMIN)


def _served_less_plan() -> tuple[Plan, Plan]:
    """v1 active; v2 made after a shortage in us-east, waiting for approval."""
    first = run_replan().plan
    assert first is not None
    shrink_region("us-east", 0)
    run = run_replan()
    assert run.status == ReplanRun.Status.SUCCEEDED, run.error
    assert run.plan is not None
    return first, run.plan


def test_replan_stores_a_verified_plan_with_allocations_and_routing(scenario: None) -> None:
    run = run_replan()

    assert run.status == ReplanRun.Status.SUCCEEDED, run.error
    assert run.attempts == 1 and run.started_at and run.finished_at
    plan = run.plan
    assert plan is not None
    assert plan.version == 1 and plan.state == Plan.State.ACTIVE and plan.activated_at
    assert plan.solver_status == Plan.SolverStatus.OPTIMAL
    assert plan.trigger == Plan.Trigger.COMMAND
    assert verify(plan.problem, plan.solution) == []
    # Without rate history the declared profiles stand: the problem is the export's.
    assert plan.problem == problem_export()
    assert plan.inputs_hash == problem_inputs_hash(plan.problem)
    assert plan.cost_per_hour == pytest.approx(plan.solution["cost_per_hour"])
    assert plan.cost_per_hour > 0 and plan.gap == 0.0 and plan.solve_seconds is not None
    assert plan.planned_requests_per_s == pytest.approx(11.0338, abs=1e-3)
    assert plan.unserved_requests_per_s == 0.0
    assert plan.stale_figures == []

    allocations = list(PlanAllocation.objects.filter(plan=plan))
    assert {(a.zone, a.shape, a.replicas) for a in allocations} == {
        (r["zone"], r["shape"], r["replicas"]) for r in plan.solution["replicas"]
    }
    assert {a.region for a in allocations} == {"eu-west", "us-east"}
    assert sum(a.cost_per_hour for a in allocations) == pytest.approx(plan.cost_per_hour)
    for a in allocations:
        assert a.accelerator == "gpu80" and a.gpus_per_replica in (2, 4)
    routing = list(PlanRouting.objects.filter(plan=plan))
    assert len(routing) == len(plan.solution["routing"])
    # EU-resident traffic stays in eu-west.
    assert {r.region for r in routing if r.tenant == "nordlicht-versicherung"} == {"eu-west"}
    served = sum(r.requests_per_s for r in routing)
    assert served == pytest.approx(plan.planned_requests_per_s)

    band = plan.forecast_band
    assert band["quantiles"]["premium"] == 0.95 and band["sources"]["declared"] == 21
    assert band["low"]["cost_per_hour"] == band["high"]["cost_per_hour"] == plan.cost_per_hour
    assert band["low"]["solved"] is False and band["high"]["solved"] is False
    assert plan.diff["against_version"] is None
    assert plan.explanation["headline"].startswith("Plan v1:")
    assert plan.explanation["decision"] == "Activated: the first plan."
    replicas = sum(a.replicas for a in allocations)
    assert plan.explanation["planner"][0].startswith(f"plan: optimal, {replicas} replicas")


def test_unchanged_inputs_store_no_new_plan(scenario: None) -> None:
    first = run_replan()
    again = run_replan()

    assert again.status == ReplanRun.Status.UNCHANGED
    assert again.plan_id == first.plan_id
    assert Plan.objects.count() == 1


def test_a_profile_change_makes_version_2_with_a_diff(scenario: None) -> None:
    first = run_replan().plan
    assert first is not None
    raise_profile("keystone-mutual", 3.0, workload_class__name="policy-question")

    run = run_replan()

    assert run.status == ReplanRun.Status.SUCCEEDED, run.error
    plan = run.plan
    assert plan is not None and plan.version == 2
    assert plan.inputs_hash != first.inputs_hash
    assert plan.state == Plan.State.ACTIVE
    first.refresh_from_db()
    assert first.state == Plan.State.SUPERSEDED
    assert verify(plan.problem, plan.solution) == []
    # The active plan's replicas were the solver's previous plan.
    assert plan.problem["previous"] == [
        {"zone": a.zone, "shape": a.shape, "replicas": a.replicas} for a in first.allocations.all()
    ]
    diff = plan.diff
    assert diff["against_version"] == 1
    assert diff["cost_per_hour"]["before"] == pytest.approx(first.cost_per_hour)
    assert diff["cost_per_hour"]["after"] == pytest.approx(plan.cost_per_hour)
    assert diff["cost_per_hour"]["change"] > 0
    assert diff["replicas_added"] > 0 and diff["replicas"]
    assert diff["newly_unserved"] == []
    assert plan.explanation["changes"][0].startswith("Against active plan v1")


def test_a_plan_serving_less_waits_for_approval(scenario: None, policy_admin: User) -> None:
    first, second = _served_less_plan()

    assert second.state == Plan.State.AWAITING_APPROVAL
    assert second.unserved_requests_per_s > 0
    assert second.diff["newly_unserved"]
    assert second.explanation["decision"].startswith("Awaiting approval")
    assert any(
        line.startswith("short: tenant keystone-mutual") for line in second.explanation["planner"]
    )
    first.refresh_from_db()
    assert first.state == Plan.State.ACTIVE
    assert verify(second.problem, second.solution) == []

    approved = plan_approve(plan=second, user=policy_admin)

    assert approved.state == Plan.State.ACTIVE
    assert approved.approved_by == policy_admin and approved.activated_at
    first.refresh_from_db()
    assert first.state == Plan.State.SUPERSEDED
    assert Plan.objects.filter(state=Plan.State.ACTIVE).count() == 1


def test_a_rejected_plan_leaves_the_active_one_and_is_not_remade(
    scenario: None, policy_admin: User
) -> None:
    first, second = _served_less_plan()

    rejected = plan_reject(plan=second, user=policy_admin)

    assert rejected.state == Plan.State.REJECTED
    assert rejected.rejected_by == policy_admin and rejected.rejected_at
    first.refresh_from_db()
    assert first.state == Plan.State.ACTIVE
    # The same inputs again: the newest plan has their hash, so nothing new is stored.
    assert run_replan().status == ReplanRun.Status.UNCHANGED
    assert Plan.objects.count() == 2


def test_only_policy_admins_decide_and_only_on_the_newest_plan_awaiting_approval(
    scenario: None, policy_admin: User
) -> None:
    first, second = _served_less_plan()
    finance = make_user("finance-person", FINANCE)

    with pytest.raises(PermissionDenied):
        plan_approve(plan=second, user=finance)
    with pytest.raises(PermissionDenied):
        plan_reject(plan=second, user=None)
    with pytest.raises(ValidationError) as not_waiting:
        plan_approve(plan=first, user=policy_admin)
    assert "awaiting approval" in str(not_waiting.value)

    # A newer plan makes the older one unapprovable: its diff is against another state.
    raise_profile("brightpath-learning", 2.0)
    third = run_replan().plan
    assert third is not None and third.version == 3
    with pytest.raises(ValidationError) as older:
        plan_approve(plan=second, user=policy_admin)
    assert "not the newest plan" in str(older.value)
    second.refresh_from_db()
    assert second.state == Plan.State.AWAITING_APPROVAL


def test_stale_capacity_figures_are_flagged(scenario: None, settings: Any) -> None:
    settings.HEADROOM_CAPACITY_MAX_AGE_DAYS = 30
    old = timezone.now() - timedelta(days=45)
    CapacityFigure.objects.filter(shape__name="chat-70b/gpu80x4").update(measured_at=old)

    plan = run_replan().plan

    assert plan is not None
    assert [row["shape"] for row in plan.stale_figures] == ["chat-70b/gpu80x4"]
    row = plan.stale_figures[0]
    assert row["age_days"] == pytest.approx(45, abs=0.1) and row["max_age_days"] == 30
    assert row["source"] == "engine-benchmark" and row["workload_class"] is None
    assert any("Stale capacity figure: chat-70b/gpu80x4" in s for s in plan.binding)
    assert (
        plan.explanation["stale_figures"] and "45 days ago" in plan.explanation["stale_figures"][0]
    )
    assert any("older than 30 days" in w for w in plan.explanation["warnings"])


def test_an_invalid_problem_is_stored_but_never_activated(
    scenario: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_export = services.problem_export

    def broken_export(**kwargs: Any) -> dict[str, Any]:
        problem = real_export(**kwargs)
        problem["demands"][0]["home_region"] = "mars-north"
        return problem

    monkeypatch.setattr(services, "problem_export", broken_export)

    run = run_replan()

    assert run.status == ReplanRun.Status.FAILED
    assert "invalid" in run.error and "home_region" in run.error
    plan = run.plan
    assert plan is not None
    assert plan.state == Plan.State.PROPOSED
    assert plan.solver_status == Plan.SolverStatus.INVALID and plan.cost_per_hour is None
    assert not plan.allocations.exists()
    with pytest.raises(ValidationError):
        plan_activate(plan=plan)


def test_a_finished_or_missing_run_is_not_run_again(scenario: None) -> None:
    run = run_replan()
    assert services.replan_execute(run_id=run.pk) == run
    run.refresh_from_db()
    assert run.attempts == 1
    assert services.replan_execute(run_id=run.pk + 1000) is None
    assert Plan.objects.count() == 1


def test_an_ordinary_error_fails_the_run_and_frees_the_lock(
    scenario: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_solver(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("solver unavailable")

    monkeypatch.setattr(services, "_solve", no_solver)
    run = run_replan()

    assert run.status == ReplanRun.Status.FAILED
    assert run.error == "RuntimeError: solver unavailable"
    assert Plan.objects.count() == 0
    monkeypatch.undo()
    assert run_replan().status == ReplanRun.Status.SUCCEEDED


def test_one_active_plan_is_enforced_by_the_database(scenario: None) -> None:
    first = run_replan().plan
    assert first is not None
    duplicate = Plan.objects.get(pk=first.pk)
    duplicate.pk = None
    duplicate.version = 99
    with pytest.raises(IntegrityError), transaction.atomic():
        duplicate.save()


def test_activation_hands_the_plan_to_emission_inside_its_transaction(
    scenario: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pipeline connects activation to emission's outbox (``after_activation``).
    seen: list[tuple[int, str, bool]] = []

    def record(*, plan: Plan) -> list[Any]:
        seen.append((plan.version, plan.state, transaction.get_connection().in_atomic_block))
        return []

    monkeypatch.setattr(pipeline, "outbox_enqueue_for_plan", record)
    plan = run_replan().plan

    assert plan is not None
    assert seen == [(1, Plan.State.ACTIVE, True)]
