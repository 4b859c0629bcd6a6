"""SLO attainment per tenant: measured p95 TTFT from the newest telemetry window and the active
plan's replay verdict against the tier's objective; breaches first on the fleet overview and
on the tenant's page."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from controlplane.core.roles import VIEWER
from controlplane.plans.models import Plan
from controlplane.policies.models import Tenant
from controlplane.telemetry.models import ObservedWorkload
from controlplane.web.attainment import slo_attainment, tenant_attainment
from tests.controlplane.plans_helpers import load_support_assistant, run_replan, shrink_region
from tests.controlplane.web_support import add_observations

pytestmark = pytest.mark.django_db


@pytest.fixture
def active() -> Plan:
    load_support_assistant()
    plan = run_replan().plan
    assert plan is not None and plan.state == Plan.State.ACTIVE
    return plan


def _newest(tenant: str) -> ObservedWorkload:
    row = (
        ObservedWorkload.objects.filter(tenant=tenant)
        .order_by("-derivation__window_end", "-pk")
        .first()
    )
    assert row is not None
    return row


def _client(user: User | None) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def test_a_measured_p95_ttft_above_the_tiers_objective_is_a_breach(active: Plan) -> None:
    add_observations("harborline-retail")  # standard tier: 2.5 s objective
    newest = _newest("harborline-retail")
    newest.ttft_p95_s = 3.94
    newest.itl_p95_s = 0.045
    newest.save(update_fields=["ttft_p95_s", "itl_p95_s"])

    row = tenant_attainment(active=active, tenant=Tenant.objects.get(name="harborline-retail"))

    assert row is not None and row.objective_s == 2.5 and row.tier == "standard"
    assert row.measured is not None and row.measured.ttft_p95_s == 3.94
    assert row.measured.itl_p95_s == 0.045
    assert row.measured_breach and row.breach and row.verdict == "breach"
    assert row.breaches[0].startswith(
        "measured p95 TTFT 3.94 s against the 2.50 s objective of tier standard"
    )
    # Breaches come first in the fleet's list.
    rows = slo_attainment(active=active)
    assert rows[0].tenant == "harborline-retail"
    assert [r.tenant for r in rows if r.breach] == ["harborline-retail"]


def test_a_measured_p95_ttft_within_the_objective_is_met(active: Plan) -> None:
    add_observations("harborline-retail")  # newest window: 0.75 s
    row = tenant_attainment(active=active, tenant=Tenant.objects.get(name="harborline-retail"))
    assert row is not None and row.measured is not None
    assert row.measured.ttft_p95_s == pytest.approx(0.75)
    assert not row.measured_breach
    assert row.verdict == "met" and row.breaches == []
    # Only the newest window counts: an older slow window is history, not a breach.
    oldest = (
        ObservedWorkload.objects.filter(tenant="harborline-retail")
        .order_by("derivation__window_end")
        .first()
    )
    assert oldest is not None
    oldest.ttft_p95_s = 9.0
    oldest.save(update_fields=["ttft_p95_s"])
    again = tenant_attainment(active=active, tenant=Tenant.objects.get(name="harborline-retail"))
    assert again is not None and not again.breach


def test_a_measured_p95_itl_above_the_tiers_itl_objective_is_a_breach(
    role_users: dict[str, User | None], active: Plan
) -> None:
    """Inter-token latency is a breach only against an objective the tier sets."""
    add_observations("harborline-retail")
    newest = _newest("harborline-retail")
    newest.itl_p95_s = 0.085
    newest.save(update_fields=["itl_p95_s"])
    tenant = Tenant.objects.get(name="harborline-retail")

    row = tenant_attainment(active=active, tenant=tenant)
    assert row is not None and row.itl_objective_s is None
    assert not row.itl_breach and row.verdict == "met"

    tier = tenant.tier
    tier.p95_itl_slo_s = 0.05
    tier.save(update_fields=["p95_itl_slo_s"])
    row = tenant_attainment(active=active, tenant=tenant)
    assert row is not None and row.itl_breach and row.breach and row.verdict == "breach"
    assert not row.measured_breach  # TTFT met
    assert row.breaches == [
        f"measured p95 ITL 85 ms against the 50 ms ITL objective of tier standard "
        f"({row.measured.window})"  # type: ignore[union-attr]
    ]
    page = _client(role_users[VIEWER]).get("/tenants/harborline-retail/").content.decode()
    assert "<strong>Breach:</strong> measured p95 ITL 85 ms" in page
    assert '0.085 s <span class="muted">(objective 0.05 s)</span>' in page


def test_a_replay_that_misses_is_a_breach(active: Plan) -> None:
    solution = dict(active.solution)
    verification = dict(solution.get("verification") or {})
    tenants = [dict(v) for v in verification.get("tenants", [])]
    assert tenants, "the shipped scenario replays every tenant with an objective"
    missed = next(v for v in tenants if v["tenant"] == "nordlicht-versicherung")
    missed.update(holds=False, worst_p95_ttft_s=2.2, worst_scenario="zone eu-west-a down")
    verification.update(tenants=tenants, holds=False)
    solution["verification"] = verification
    # A plan's documents never change once stored; a new plan row carries the miss.
    Plan.objects.filter(pk=active.pk).update(state=Plan.State.SUPERSEDED)
    missing = Plan.objects.create(
        version=active.version + 1,
        inputs_hash=active.inputs_hash,
        state=Plan.State.ACTIVE,
        solver_status=active.solver_status,
        problem=active.problem,
        solution=solution,
    )

    rows = slo_attainment(active=missing)

    row = next(r for r in rows if r.tenant == "nordlicht-versicherung")
    assert row.replay_breach and not row.measured_breach and row.measured is None
    assert row.breaches == [
        f"plan v{missing.version} under replay: p95 TTFT 2.20 s with zone eu-west-a down "
        "against the 1.50 s objective"
    ]
    assert rows[0].tenant == "nordlicht-versicherung"
    others = [r for r in rows if r.tenant != "nordlicht-versicherung"]
    assert all(r.replay is not None and r.replay.holds for r in others if r.replay)


def test_demand_the_active_plan_leaves_unserved_is_a_breach() -> None:
    load_support_assistant()
    shrink_region("us-east", 0)  # keystone-mutual (us-east, no spill) has nowhere to go
    plan = run_replan().plan
    assert plan is not None and plan.state == Plan.State.ACTIVE

    rows = {r.tenant: r for r in slo_attainment(active=plan)}

    keystone = rows["keystone-mutual"]
    planned = sum(
        float(d["requests_per_s"]) * float(d.get("burst", 1.0))
        for d in plan.problem["demands"]
        if d["tenant"] == "keystone-mutual"
    )
    unserved = sum(
        float(u["requests_per_s"])
        for u in plan.solution["unserved"]
        if u["demand"].startswith("keystone-mutual/")
    )
    assert unserved > 0 and keystone.unserved_requests_per_s == pytest.approx(unserved)
    assert keystone.planned_requests_per_s == pytest.approx(planned)
    assert keystone.unserved_breach and keystone.breach
    assert keystone.breaches[-1].startswith(f"plan v{plan.version} leaves ")
    assert keystone.breaches[-1].endswith(" req/s unserved")
    served = [r for r in rows.values() if r.unserved_requests_per_s == 0]
    assert served and not any(r.unserved_breach for r in served)


def test_breaches_head_the_fleet_overview_and_show_on_the_tenant_page(
    role_users: dict[str, User | None], active: Plan
) -> None:
    add_observations("harborline-retail")
    newest = _newest("harborline-retail")
    newest.ttft_p95_s = 3.94
    newest.save(update_fields=["ttft_p95_s"])
    client = _client(role_users[VIEWER])

    fleet = client.get("/").content.decode()
    head = fleet.index('id="slo"')
    assert head < fleet.index('id="jobs"') and head < fleet.index('id="active"')
    assert "1 tenant breaches its SLO" in fleet
    assert "measured p95 TTFT 3.94 s against the 2.50 s objective" in fleet

    page = client.get("/tenants/harborline-retail/").content.decode()
    assert "<strong>Breach:</strong> measured p95 TTFT 3.94 s" in page
    assert 'data-verdict="breach"' in page

    calm = client.get("/tenants/brightpath-learning/").content.decode()
    assert "Breach:" not in calm and 'data-verdict="met"' in calm  # met under replay
