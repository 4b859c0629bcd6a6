"""The tenant's spill permission as a what-if input: applied to the problem the preview
solves (and rolled back), changing the routing where spill matters, validated with a 400 or
a form error naming the field, and saved like the other policy parts."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from controlplane.core.roles import POLICY_ADMIN, VIEWER
from controlplane.plans.models import WhatIfJob
from controlplane.plans.whatif import (
    WhatIfChange,
    _changed_inputs,
    change_as_dict,
    change_from_dict,
    whatif_apply,
    whatif_preview,
)
from controlplane.plans.whatif_jobs import whatif_drain
from controlplane.policies.models import Tenant
from tests.controlplane.conftest import make_user
from tests.controlplane.plans_helpers import load_support_assistant, run_replan, shrink_region

pytestmark = pytest.mark.django_db

SPILLER = "harborline-retail"
SPILLING_DEMAND = "harborline-retail/chat-70b/order-lookup@eu-west"
RESIDENT = "nordlicht-versicherung"


@pytest.fixture
def fleet() -> None:
    load_support_assistant()
    run = run_replan()
    assert run.plan is not None, run.error


def _demands(change: WhatIfChange) -> dict[str, dict[str, Any]]:
    return {d["id"]: d for d in _changed_inputs(change).problem["demands"]}


def test_forbidding_spill_takes_the_spill_limit_off_the_previewed_problem(fleet: None) -> None:
    before = Tenant.objects.get(name=SPILLER)
    assert before.spill_allowed
    spilling = _demands(WhatIfChange(tenant=SPILLER, max_spill_rtt_ms=60.0))[SPILLING_DEMAND]
    assert spilling["max_spill_rtt_ms"] == 60
    forbidden = _demands(WhatIfChange(tenant=SPILLER, spill_allowed=False))[SPILLING_DEMAND]
    assert "max_spill_rtt_ms" not in forbidden
    # Rolled back: the tenant is as it was.
    after = Tenant.objects.get(name=SPILLER)
    assert (after.spill_allowed, after.max_spill_rtt_ms, after.revision) == (
        before.spill_allowed,
        before.max_spill_rtt_ms,
        before.revision,
    )


def test_allowing_spill_puts_the_limit_on_a_resident_tenants_demands(fleet: None) -> None:
    change = WhatIfChange(tenant=RESIDENT, spill_allowed=True, max_spill_rtt_ms=80.0)
    assert change.changes_policy
    mine = [d for d in _demands(change).values() if d["tenant"] == RESIDENT]
    assert mine and all(d["max_spill_rtt_ms"] == 80 for d in mine)
    unchanged = [d for d in _demands(WhatIfChange(tenant=RESIDENT)).values()]
    assert all("max_spill_rtt_ms" not in d for d in unchanged if d["tenant"] == RESIDENT)


def test_forbidding_spill_changes_the_previewed_routing_when_the_home_region_is_short() -> None:
    load_support_assistant()
    shrink_region("eu-west", 0)
    run = run_replan()
    assert run.plan is not None, run.error
    kept = whatif_preview(change=WhatIfChange(tenant=SPILLER))
    assert not [u for u in kept.newly_unserved if u.demand == SPILLING_DEMAND]
    forbidden = whatif_preview(change=WhatIfChange(tenant=SPILLER, spill_allowed=False))
    newly = {u.demand: u for u in forbidden.newly_unserved}
    assert SPILLING_DEMAND in newly, forbidden
    assert newly[SPILLING_DEMAND].after > newly[SPILLING_DEMAND].before
    assert forbidden.unserved_after > kept.unserved_after


def test_allowing_spill_without_a_round_trip_names_the_field(fleet: None) -> None:
    assert Tenant.objects.get(name=RESIDENT).max_spill_rtt_ms is None
    with pytest.raises(ValidationError) as caught:
        whatif_preview(change=WhatIfChange(tenant=RESIDENT, spill_allowed=True))
    assert "max_spill_rtt_ms" in caught.value.message_dict


def test_the_change_round_trips_through_the_job_row() -> None:
    change = WhatIfChange(tenant=SPILLER, spill_allowed=False, max_spill_rtt_ms=30.0)
    assert change_from_dict(change_as_dict(change)) == change
    assert change_from_dict({"tenant": SPILLER}).spill_allowed is None


def test_the_api_takes_the_spill_fields_and_answers_400_naming_them(fleet: None) -> None:
    client = APIClient()
    client.force_authenticate(make_user("v", VIEWER))
    for body, field in [
        ({"tenant": SPILLER, "spill_allowed": "yes"}, "spill_allowed"),
        ({"tenant": SPILLER, "spill_allowed": 1}, "spill_allowed"),
        ({"tenant": SPILLER, "max_spill_rtt_ms": 5000}, "max_spill_rtt_ms"),
        ({"tenant": SPILLER, "max_spill_rtt_ms": True}, "max_spill_rtt_ms"),
        ({"tenant": RESIDENT, "spill_allowed": True}, "max_spill_rtt_ms"),
    ]:
        response = client.post("/api/plans/what-ifs/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert field in response.json()["error"]["fields"], (body, response.json())
    assert not WhatIfJob.objects.exists()
    response = client.post(
        "/api/plans/what-ifs/", {"tenant": SPILLER, "spill_allowed": False}, format="json"
    )
    assert response.status_code == 202, response.content
    whatif_drain()
    job = client.get(response["Location"]).json()
    assert job["status"] == "succeeded", job
    assert job["change"]["spill_allowed"] is False
    assert job["result"]["change"]["spill_allowed"] is False


def _web(user: User, **fields: Any) -> Any:
    client = Client()
    client.force_login(user)
    data = {"traffic_factor": "1", "prompt_tokens_delta": "0", "do": "preview", **fields}
    response = client.post("/what-if/", data)
    if response.status_code == 303:
        whatif_drain()
        return client.get(response["Location"])
    return response


def test_the_form_takes_spill_and_checks_the_round_trip(fleet: None) -> None:
    viewer = make_user("v", VIEWER)
    refused = _web(viewer, tenant=RESIDENT, spill_allowed="allow")
    assert refused.status_code == 200
    assert "give one to allow spill" in refused.content.decode()
    assert not WhatIfJob.objects.exists()
    shown = _web(viewer, tenant=RESIDENT, spill_allowed="allow", max_spill_rtt_ms="80")
    body = shown.content.decode()
    assert "Preview for nordlicht-versicherung" in body
    job = WhatIfJob.objects.get()
    assert job.change["spill_allowed"] is True and job.change["max_spill_rtt_ms"] == 80.0
    assert '<option value="allow" selected>' in body  # the form shows the change previewed


def test_a_policy_admin_saves_the_spill_permission(fleet: None) -> None:
    admin = make_user("admin", POLICY_ADMIN, staff=True)
    saved = whatif_apply(change=WhatIfChange(tenant=SPILLER, spill_allowed=False), user=admin)
    assert not Tenant.objects.get(pk=saved.pk).spill_allowed
    with pytest.raises(ValidationError, match="already has this policy"):
        whatif_apply(change=WhatIfChange(tenant=SPILLER, spill_allowed=False), user=admin)
