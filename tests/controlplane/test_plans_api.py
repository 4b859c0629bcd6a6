"""The plans API: the role × endpoint matrix, plan and run content, re-plan (202 with the
run), approve and reject, the active plan, and 4xx (never 5xx) for bad ids, bodies and
query strings."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.serializers import PlanDetailSerializer
from controlplane.plans.services import replan_request
from controlplane.policies.models import Tenant
from tests.controlplane.api_harness import MALFORMED_BODIES
from tests.controlplane.plans_helpers import (
    load_support_assistant,
    raise_profile,
    run_replan,
    shrink_region,
)
from tests.controlplane.tenant_key_support import issue_key, key_client

pytestmark = pytest.mark.django_db

NO_ROLE, ANONYMOUS = "no-role", "anonymous"
DRIFT_REASON = "Drift alert #7: brightpath-learning in eu-west needs 3 more replicas."
READERS = (POLICY_ADMIN, FINANCE, VIEWER)


@pytest.fixture
def plans() -> tuple[Plan, Plan]:
    """v1 active; v2 (a shortage in us-east) awaiting approval."""
    load_support_assistant()
    first = run_replan().plan
    shrink_region("us-east", 0)
    second = run_replan().plan
    assert first is not None and second is not None
    assert second.state == Plan.State.AWAITING_APPROVAL
    return first, second


def _read_status(role: str) -> int:
    return 200 if role in READERS else 403 if role == NO_ROLE else 401


def _write_status(role: str, allowed: int) -> int:
    return allowed if role == POLICY_ADMIN else 403 if role != ANONYMOUS else 401


@pytest.mark.parametrize("role", [POLICY_ADMIN, FINANCE, VIEWER, NO_ROLE, ANONYMOUS])
def test_role_matrix(
    role: str,
    plans: tuple[Plan, Plan],
    api_client_for: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    first, second = plans
    client: APIClient = api_client_for(role)
    run = ReplanRun.objects.order_by("-pk").first()
    assert run is not None

    reads = [
        "/api/plans/",
        f"/api/plans/{first.pk}/",
        "/api/plans/active/",
        "/api/plans/runs/",
        f"/api/plans/runs/{run.pk}/",
    ]
    for url in reads:
        assert client.get(url).status_code == _read_status(role), url

    runs_before = ReplanRun.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        replanned = client.post("/api/plans/replan/", {}, format="json")
    assert replanned.status_code == _write_status(role, 202)
    assert ReplanRun.objects.count() == runs_before + (1 if role == POLICY_ADMIN else 0)

    rejected = client.post(f"/api/plans/{second.pk}/reject/", {"reason": "checked"}, format="json")
    assert rejected.status_code == _write_status(role, 200)
    second.refresh_from_db()
    expected = Plan.State.REJECTED if role == POLICY_ADMIN else Plan.State.AWAITING_APPROVAL
    assert second.state == expected

    approved = client.post(f"/api/plans/{second.pk}/approve/", {"reason": "checked"}, format="json")
    # A policy admin may approve, but not a plan already rejected: 400 naming the state.
    assert approved.status_code == _write_status(role, 400)
    first.refresh_from_db()
    assert first.state == Plan.State.ACTIVE


def test_plan_list_and_detail(plans: tuple[Plan, Plan], api_client_for: Any) -> None:
    _, second = plans
    client = api_client_for(VIEWER)

    listed = client.get("/api/plans/").json()
    assert [row["version"] for row in listed["results"]] == [2, 1]
    assert listed["results"][0]["state"] == "awaiting-approval"
    assert listed["results"][1]["created_by"] is None and "allocations" not in listed["results"][1]
    assert [r["version"] for r in client.get("/api/plans/?state=active").json()["results"]] == [1]

    detail = client.get(f"/api/plans/{second.pk}/").json()
    assert detail["version"] == 2 and detail["state"] == "awaiting-approval"
    assert detail["unserved_requests_per_s"] > 0 and detail["unserved"]
    assert {row["region"] for row in detail["allocations"]} <= {"eu-west", "us-east"}
    assert detail["routing"] and {"demand", "tenant", "region", "shape"} <= set(
        detail["routing"][0]
    )
    assert detail["diff"]["against_version"] == 1 and detail["diff"]["newly_unserved"]
    assert detail["explanation"]["decision"].startswith("Awaiting approval")
    assert set(detail["forecast_band"]) >= {"low", "high", "quantiles"}
    assert isinstance(detail["binding"], list) and detail["stale_figures"] == []

    active = client.get("/api/plans/active/").json()
    assert active["version"] == 1 and active["allocations"]


def test_plan_list_queries_do_not_grow_with_plans(
    plans: tuple[Plan, Plan], api_client_for: Any
) -> None:
    client = api_client_for(VIEWER)
    client.get("/api/plans/")  # the user's roles are read once, then cached
    with CaptureQueriesContext(connection) as two:
        assert client.get("/api/plans/").status_code == 200
    raise_profile("brightpath-learning", 2.0)
    run_replan()
    with CaptureQueriesContext(connection) as three:
        assert client.get("/api/plans/").status_code == 200
    assert len(three) == len(two)


def test_no_active_plan_is_a_404(api_client_for: Any) -> None:
    response = api_client_for(VIEWER).get("/api/plans/active/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_replan_answers_202_with_the_run(
    api_client_for: Any, django_capture_on_commit_callbacks: Any
) -> None:
    load_support_assistant()
    client = api_client_for(POLICY_ADMIN)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/plans/replan/")

    assert response.status_code == 202
    body = response.json()
    # The test's transaction holds the task back until the block above ends (outside a test,
    # without a broker, the run has finished before the request answers).
    assert body["status"] == "queued" and body["trigger"] == "api"
    assert body["requested_by"] == "admin-user"
    assert body["reason"] == ""  # only a drift re-plan says why beyond its trigger
    assert response["Location"] == f"/api/plans/runs/{body['id']}/"
    finished = client.get(response["Location"]).json()
    assert finished["status"] == "succeeded" and finished["plan_version"] == 1
    plan = Plan.objects.get(version=1)
    assert plan.trigger == Plan.Trigger.API and plan.created_by is not None

    with django_capture_on_commit_callbacks(execute=True):
        again = client.post("/api/plans/replan/", {}, format="json").json()
    again = client.get(f"/api/plans/runs/{again['id']}/").json()
    assert again["status"] == "unchanged" and again["plan_version"] == 1
    runs = client.get("/api/plans/runs/?status=unchanged").json()["results"]
    assert [r["id"] for r in runs] == [again["id"]]

    drift = replan_request(trigger=Plan.Trigger.DRIFT, enqueue=False, reason=DRIFT_REASON)
    served = client.get(f"/api/plans/runs/{drift.pk}/").json()
    assert served["trigger"] == "drift" and served["reason"] == DRIFT_REASON
    listed = client.get("/api/plans/runs/?trigger=drift").json()["results"]
    assert [(r["id"], r["reason"]) for r in listed] == [(drift.pk, DRIFT_REASON)]
    # Read-only: a reason sent with a re-plan request is refused, not stored.
    refused = client.post("/api/plans/replan/", {"reason": "mine"}, format="json")
    assert refused.status_code == 400


def test_approve_activates_and_supersedes(plans: tuple[Plan, Plan], api_client_for: Any) -> None:
    first, second = plans
    client = api_client_for(POLICY_ADMIN)

    response = client.post(
        f"/api/plans/{second.pk}/approve/", {"reason": "  cheaper, same promises  "}, format="json"
    )

    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "active" and body["approved_by"] == "admin-user"
    assert client.get("/api/plans/active/").json()["version"] == 2
    first.refresh_from_db()
    assert first.state == Plan.State.SUPERSEDED

    decision = second.decisions.get()
    assert (decision.action, decision.reason) == ("approved", "cheaper, same promises")
    assert decision.actor is not None and decision.actor.username == "admin-user"

    again = client.post(f"/api/plans/{second.pk}/approve/", {"reason": "again"}, format="json")
    assert again.status_code == 400
    error = again.json()["error"]
    assert error["code"] == "invalid" and "state" in error["fields"]


def test_the_active_plan_is_rendered_once_while_it_is_unchanged(
    plans: tuple[Plan, Plan], api_client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = plans
    details: list[int] = []
    serialize = PlanDetailSerializer.to_representation

    def counting(self: PlanDetailSerializer, plan: Plan) -> Any:
        details.append(plan.pk)
        return serialize(self, plan)

    monkeypatch.setattr(PlanDetailSerializer, "to_representation", counting)
    client = api_client_for(POLICY_ADMIN)
    one = client.get("/api/plans/active/")
    with CaptureQueriesContext(connection) as queries:
        two = client.get("/api/plans/active/")
    assert one.content == two.content and one.json()["version"] == first.version
    assert details == [first.pk]
    # Unchanged: one small row is read for the plan, none of its documents or rows.
    sql = " ".join(q["sql"] for q in queries)
    assert '"solution"' not in sql and "plans_planrouting" not in sql
    # Approving the second plan changes which plan is active and who approved it.
    client.post(f"/api/plans/{second.pk}/approve/", {"reason": "newer"}, format="json")
    approved = client.get("/api/plans/active/").json()
    assert (approved["version"], approved["approved_by"]) == (second.version, "admin-user")
    # A name the detail shows changes it too.
    User.objects.filter(username="admin-user").update(username="admin-renamed")
    assert client.get("/api/plans/active/").json()["approved_by"] == "admin-renamed"
    assert details == [first.pk, second.pk, second.pk, second.pk]


def test_a_tenant_key_reads_the_active_plan_cut_to_its_tenant(
    plans: tuple[Plan, Plan],
) -> None:
    first, _ = plans
    tenant = Tenant.objects.order_by("name").first()
    assert tenant is not None
    body = key_client(issue_key(tenant)).get("/api/plans/active/").json()
    assert body["version"] == first.version
    assert {row["tenant"] for row in body["routing"]} == {tenant.name}
    assert "explanation" not in body


def test_malformed_bodies_never_reach_a_500(plans: tuple[Plan, Plan], api_client_for: Any) -> None:
    _, second = plans
    client = api_client_for(POLICY_ADMIN)
    for content_type, body in MALFORMED_BODIES:
        for url in ("/api/plans/replan/", f"/api/plans/{second.pk}/approve/"):
            response = client.generic("POST", url, body, content_type=content_type)
            assert response.status_code < 500, (url, content_type, body[:40])
            if response.status_code >= 400:
                assert "error" in response.json()


def test_unexpected_bodies_are_a_400(plans: tuple[Plan, Plan], api_client_for: Any) -> None:
    _, second = plans
    client = api_client_for(POLICY_ADMIN)
    runs = ReplanRun.objects.count()
    for body in ([], [1], {"force": True}, {"": None}, "text", 3):
        for url in ("/api/plans/replan/", f"/api/plans/{second.pk}/approve/"):
            response = client.post(url, body, format="json")
            assert response.status_code == 400, (url, body)
            assert response.json()["error"]["code"] == "invalid"
    assert client.post("/api/plans/replan/", {"force": True}, format="json").json()["error"][
        "fields"
    ] == {"force": ["Unknown field: a re-plan takes no options."]}
    assert ReplanRun.objects.count() == runs
    second.refresh_from_db()
    assert second.state == Plan.State.AWAITING_APPROVAL


BAD_READS = (
    ("/api/plans/abc/", 404),
    ("/api/plans/999999/", 404),
    ("/api/plans/99999999999999999999999/", 404),
    ("/api/plans/-1/", 404),
    ("/api/plans/runs/999999/", 404),
    ("/api/plans/runs/x/", 404),
    ("/api/plans/?state=bogus", 400),
    ("/api/plans/?solver_status=%00", 400),
    ("/api/plans/runs/?status=nope", 400),
    ("/api/plans/?limit=abc&offset=-4", 400),
    ("/api/plans/?ordering=nonsense", 200),
    ("/api/plans/?x%00=1", 400),
)


@pytest.mark.parametrize("action", ["approve", "reject"])
@pytest.mark.parametrize("body", [None, {}, {"reason": ""}, {"reason": "   "}, {"reason": 3}])
def test_a_decision_without_a_reason_is_a_400_naming_it(
    action: str, body: Any, plans: tuple[Plan, Plan], api_client_for: Any
) -> None:
    _, second = plans
    client = api_client_for(POLICY_ADMIN)
    url = f"/api/plans/{second.pk}/{action}/"
    response = client.post(url, body, format="json") if body is not None else client.post(url)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    wanted = "Not a valid string." if body == {"reason": 3} else "Give a reason"
    assert error["fields"]["reason"][0].startswith(wanted)
    second.refresh_from_db()
    assert second.state == Plan.State.AWAITING_APPROVAL and not second.decisions.exists()


def test_the_schema_requires_the_decisions_reason(api_client_for: Any) -> None:
    schema = api_client_for(VIEWER).get("/api/schema/?format=json").json()
    for action in ("approve", "reject"):
        body = schema["paths"][f"/api/plans/{{id}}/{action}/"]["post"]["requestBody"]
        ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        component = schema["components"]["schemas"][ref]
        assert component["required"] == ["reason"]
        assert component["properties"]["reason"]["maxLength"] == 2000


def test_bad_ids_and_query_strings_are_4xx(plans: tuple[Plan, Plan], api_client_for: Any) -> None:
    client = api_client_for(VIEWER)
    for url, status in BAD_READS:
        assert client.get(url).status_code == status, url


def test_deciding_a_missing_plan_is_a_404(plans: tuple[Plan, Plan], api_client_for: Any) -> None:
    client = api_client_for(POLICY_ADMIN)
    reason = {"reason": "x"}
    assert client.post("/api/plans/999999/approve/", reason, format="json").status_code == 404
    assert client.post("/api/plans/abc/reject/", reason, format="json").status_code == 404
    assert client.get("/api/plans/replan/").status_code == 405
