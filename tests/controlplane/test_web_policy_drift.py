"""A notice wherever the active plan and current policy disagree: what the active plan was
built from against the tenant's policy now, what the plan does that policy no longer allows,
and that a re-plan applies it."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from controlplane.core.roles import POLICY_ADMIN, VIEWER
from controlplane.fleet.models import Region
from controlplane.plans import services as plan_services
from controlplane.plans.models import Plan
from controlplane.policies.models import Tenant, Tier
from controlplane.web.policy_drift import policy_notices
from tests.controlplane.plans_helpers import load_support_assistant, run_replan, shrink_region

pytestmark = pytest.mark.django_db


def _text(body: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


@pytest.fixture
def spilling() -> Plan:
    """v1 active, with no GPUs in us-east: harborline-retail (home us-east, spill allowed up
    to 120 ms) is served elsewhere by spill."""
    load_support_assistant()
    shrink_region("us-east", 0)
    plan = run_replan().plan
    assert plan is not None and plan.state == Plan.State.ACTIVE
    routed = plan.routing.filter(tenant="harborline-retail")
    assert routed.exists() and not routed.filter(region="us-east").exists()
    return plan


def test_no_notice_while_the_active_plan_matches_policy(spilling: Plan) -> None:
    assert policy_notices(active=spilling) == []
    assert policy_notices(active=None) == []


def test_spill_turned_off_after_a_rejected_plan_is_noticed_with_what_the_plan_still_does(
    role_users: dict[str, User | None], spilling: Plan
) -> None:
    Tenant.objects.filter(name="harborline-retail").update(spill_allowed=False)
    held = run_replan().plan  # without spill harborline-retail is left unserved: held
    assert held is not None and held.state == Plan.State.AWAITING_APPROVAL
    plan_services.plan_reject(plan=held, user=role_users[POLICY_ADMIN], reason="not now")

    notices = policy_notices(active=spilling)

    assert [n.tenant for n in notices] == ["harborline-retail"]
    (notice,) = notices
    assert [(d.field, d.planned, d.now) for d in notice.differences] == [
        ("spill", "allowed up to 120 ms", "not allowed")
    ]
    assert len(notice.conflicts) == 1
    assert notice.conflicts[0].startswith("the active plan routes ")
    assert (
        "by spill (away from its home region), which its policy no longer allows"
        in (notice.conflicts[0])
    )

    client = Client()
    client.force_login(role_users[VIEWER])  # type: ignore[arg-type]
    page = _text(client.get("/tenants/harborline-retail/").content.decode())
    assert f"Policy changed since active plan v{spilling.version} was built." in page
    assert "Spill: allowed up to 120 ms in the plan, not allowed now." in page
    assert "The next re-plan applies the current policy." in page
    assert "Spill not allowed" in page  # the policy beside it, as it is now

    fleet = _text(client.get("/").content.decode())
    assert "Active plan and current policy disagree" in fleet
    assert f"harborline-retail : policy changed since active plan v{spilling.version}" in fleet

    calm = client.get("/tenants/nordlicht-versicherung/").content.decode()
    assert "policy-notice" not in calm


def test_tier_changes_are_each_named(spilling: Plan) -> None:
    standard = Tier.objects.get(name="standard")
    Tier.objects.filter(pk=standard.pk).update(p95_ttft_slo_s=2.0, failure_promise="none")
    nordlicht = Tenant.objects.get(name="nordlicht-versicherung")
    nordlicht.tier = Tier.objects.get(name="standard")
    nordlicht.save(update_fields=["tier"])

    notices = {n.tenant: n for n in policy_notices(active=spilling)}

    changed = {d.field: (d.planned, d.now) for d in notices["nordlicht-versicherung"].differences}
    assert changed == {
        "tier": ("premium", "standard"),
        "p95 TTFT objective": ("1.5 s", "2 s"),
        "failure promise": ("zone", "none"),
        "priority": ("0", "1"),
    }
    harborline = {d.field: d.now for d in notices["harborline-retail"].differences}
    assert harborline == {"p95 TTFT objective": "2 s", "failure promise": "none"}
    assert notices["harborline-retail"].conflicts == []
    only = policy_notices(active=spilling, tenant=nordlicht)
    assert [n.tenant for n in only] == ["nordlicht-versicherung"]


def test_a_narrower_residency_names_the_regions_and_the_traffic_routed_outside(
    spilling: Plan,
) -> None:
    brightpath = Tenant.objects.get(name="brightpath-learning")  # no residency rule
    assert [r.name for r in brightpath.allowed_regions()] == ["eu-west", "us-east"]
    brightpath.residency_regions.set([Region.objects.get(name="us-east")])

    (notice,) = policy_notices(active=spilling, tenant=brightpath)

    assert [(d.field, d.planned, d.now) for d in notice.differences] == [
        ("regions it may be served in", "eu-west, us-east", "us-east")
    ]
    routed = sum(r.requests_per_s for r in spilling.routing.filter(tenant="brightpath-learning"))
    assert routed > 0  # all of it in eu-west, us-east having no GPUs
    assert len(notice.conflicts) == 1
    assert notice.conflicts[0] == (
        f"the active plan routes {routed:,.2f}".rstrip("0").rstrip(".")
        + " req/s to eu-west, outside the regions its policy now allows"
    )
