"""Hosted spend on the operators' pages: the plan page, the fleet overview, the finance page
and the tenant page show what a plan sends to a hosted API as its own line, and nothing new
for a plan without hosted rows.

The fleet is ``test_finance_hosted``'s (the planner's worked example): 2 replicas at
8.00 $/h and 5 requests/s sent to ``apiprov`` in eu-west at 14.40 $/h, 22.40 $/h in all.
"""

from __future__ import annotations

import calendar
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from controlplane.core.roles import FINANCE, VIEWER
from controlplane.plans.models import Plan
from tests.controlplane.api_harness import Records
from tests.controlplane.plans_helpers import run_replan
from tests.controlplane.test_finance_hosted import hosted_fleet, hosted_plan

pytestmark = pytest.mark.django_db

LINE = "hosted: 14.40 $/h, 5 req/s to provider apiprov in region eu-west"


def client_for(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def text(html: str) -> str:
    """The page's text, tags dropped and white space folded."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _figures(body: str, table: str, figure: str) -> list[str]:
    start = body.index(f'data-table="{table}"')
    part = body[start : body.index("</table>", start)]
    return re.findall(rf'data-figure="{figure}">([^<]*)<', part)


def test_plan_and_fleet_pages_show_the_hosted_line(role_users: dict[str, User | None]) -> None:
    plan = hosted_plan()
    client = client_for(role_users[VIEWER])
    page = text(client.get(f"/plans/v{plan.version}/").content.decode())
    assert "22.40 $/h (replicas 8.00 $/h, hosted 14.40 $/h)" in page
    assert LINE in page
    fleet = text(client.get("/").content.decode())
    assert LINE in fleet and "22.40 $/h" in fleet


def test_finance_and_tenant_pages_show_hosted_spend_as_its_own_figure(
    role_users: dict[str, User | None],
) -> None:
    hosted_plan()
    client = client_for(role_users[FINANCE])
    body = client.get("/finance/?group_by=accelerator&period=month").content.decode()
    page = text(body)
    # 12 months ahead: each costs 22.40 $/h, 14.40 of it hosted, × its hours.
    months = re.findall(r'<tr data-period="([^"]+)">', body)
    assert len(months) == 12
    hosted = [float(v.replace(",", "")) for v in _figures(body, "period-totals", "hosted_cost")]
    costs = [float(v.replace(",", "")) for v in _figures(body, "period-totals", "cost")]
    assert len(hosted) == len(costs) == 12
    # A month's hours from its label: the whole month, its days before today run the plan.
    month_hours = [24 * calendar.monthrange(*map(int, m.split("-")))[1] for m in months]
    for cost, spend, hours in zip(costs, hosted, month_hours, strict=True):
        assert spend == pytest.approx(14.4 * hours, abs=0.005)
        assert cost == pytest.approx(22.4 * hours, abs=0.005)
    horizon_hours = sum(round(s / 14.4) for s in hosted)
    assert f"of which hosted APIs {14.4 * horizon_hours:,.2f} $" in page
    assert f"replicas {8.0 * horizon_hours:,.2f} $" in page
    # By GPU type, the provider is a group of its own.
    groups = dict(
        re.findall(
            r'<tr data-group="([^"]+)"><th scope="row">[^<]*</th><td class="n" '
            r'data-figure="cost">([^<]*)<',
            body,
        )
    )
    assert groups == {
        "(hosted) apiprov": f"{14.4 * horizon_hours:,.2f}",
        "h100": f"{8.0 * horizon_hours:,.2f}",
    }
    tenant = client.get("/tenants/acme/").content.decode()
    assert "Hosted $" in tenant
    # Its showback by month: the current month's hosted spend, 14.40 $/h × its hours.
    first = re.findall(r'data-figure="hosted_cost">([^<]*)<', tenant)[0]
    assert first == f"{14.4 * month_hours[0]:,.2f}"


def test_a_plan_without_hosted_rows_shows_nothing_new(role_users: dict[str, User | None]) -> None:
    hosted_fleet(Records(), provider=False)
    run = run_replan()
    assert run.plan is not None and run.plan.state == Plan.State.ACTIVE, run.error
    client = client_for(role_users[FINANCE])
    for url in (f"/plans/v{run.plan.version}/", "/", "/finance/", "/tenants/acme/"):
        body = client.get(url).content.decode()
        assert "hosted" not in text(body).lower(), url
        assert "hosted_cost" not in body, url
