"""The operators' pages through Django's test client: every page as every role on an empty
database and on the shipped scenario with plans, the approval step, the what-if, and query
counts that do not grow with the fleet."""

from __future__ import annotations

import csv
import html
import io
import re
from collections import defaultdict
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.plans.models import Plan, PlanDecision
from controlplane.plans.whatif_jobs import whatif_drain
from controlplane.policies.models import Tenant
from controlplane.telemetry.models import ObservedWorkload
from controlplane.web import selectors
from controlplane.web.selectors import FINANCE_ACTUALS_HORIZON
from tests.controlplane.plans_helpers import load_support_assistant, run_replan
from tests.controlplane.web_support import (
    active_and_awaiting_plans,
)

pytestmark = pytest.mark.django_db

ROLES = (POLICY_ADMIN, FINANCE, VIEWER)


def page_urls() -> list[str]:
    """Every page, with the first plan and tenant where there are any."""
    urls = [
        "/",
        "/plans/",
        "/plans/active/",
        "/tenants/",
        "/what-if/",
        "/drift/",
        "/drift/?status=all",
    ]
    plan = Plan.objects.order_by("-version").first()
    if plan is not None:
        urls.append(f"/plans/v{plan.version}/")
        if plan.state == Plan.State.AWAITING_APPROVAL:
            urls.append(f"/plans/v{plan.version}/decide/?action=approve")
    for tenant in Tenant.objects.order_by("name")[:1]:
        urls += [f"/tenants/{tenant.name}/", f"/what-if/?tenant={tenant.name}"]
    if Tenant.objects.filter(name="nordlicht-versicherung").exists():
        urls.append("/tenants/nordlicht-versicherung/")
    return urls


def client_for(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def plans() -> tuple[Plan, Plan]:
    """v1 active; v2 (no GPUs left in us-east) awaiting approval."""
    return active_and_awaiting_plans()


def _walk(role_users: dict[str, User | None]) -> None:
    for url in page_urls():
        for role in ROLES:
            response = client_for(role_users[role]).get(url)
            decide = "/decide/" in url
            expected = (403 if role != POLICY_ADMIN else 200) if decide else None
            if url == "/plans/active/":
                assert response.status_code == 302, (url, role)
                continue
            assert response.status_code == (expected or 200), (url, role, response.status_code)
        assert client_for(role_users["no-role"]).get(url).status_code == 403, url
        anonymous = client_for(None).get(url)
        assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/"), url


def test_every_page_renders_on_an_empty_database(role_users: dict[str, User | None]) -> None:
    _walk(role_users)
    body = client_for(role_users[VIEWER]).get("/").content.decode()
    assert "No plan is active yet" in body


def test_every_page_renders_with_plans(
    role_users: dict[str, User | None], plans: tuple[Plan, Plan]
) -> None:
    _walk(role_users)


def test_tenant_page_charts_its_workload_with_the_numbers(
    role_users: dict[str, User | None], plans: tuple[Plan, Plan]
) -> None:
    body = client_for(role_users[VIEWER]).get("/tenants/nordlicht-versicherung/").content.decode()
    for title in ("Request rate", "Prompt tokens", "Output tokens", "Prefix-cache hit rate"):
        assert "<title id=" in body and title in body, title
    assert body.count("<svg") >= 5
    assert "telemetry observation windows" in body
    assert "0.75 s" in body  # TTFT p95 of the last window, in the table


def test_tenant_page_flags_a_measured_ttft_above_the_tier_slo(
    role_users: dict[str, User | None], plans: tuple[Plan, Plan]
) -> None:
    tenant = Tenant.objects.select_related("tier").get(name="nordlicht-versicherung")
    tenant.tier.p95_ttft_slo_s = 2.5
    tenant.tier.save()
    last = ObservedWorkload.objects.filter(tenant=tenant.name).order_by("-derivation__window_end")
    ObservedWorkload.objects.filter(pk=last[0].pk).update(ttft_p95_s=3.94)
    body = client_for(role_users[VIEWER]).get(f"/tenants/{tenant.name}/").content.decode()
    ttft = body[body.index('id="ttft"') :]
    ttft = ttft[: ttft.index("</svg>")]
    assert '<line class="threshold"' in ttft and ">SLO 2.5 s</text>" in ttft
    assert ttft.count('class="breach"') == 1 and 'data-breaches="1"' in ttft
    assert "SLO 2.5 s: 1 of 7 points above it" in ttft
    assert "3.94 s, above the SLO 2.5 s" in body  # in the table
    assert "1 TTFT p95 value above the SLO 2.5 s" in body
    # Daily windows a day apart are joined; every chart's series are all in its legend.
    assert ttft.count('<path class="series"') == 1
    for chart, labels in (("rate", ["peak", "mean"]), ("prompt", ["p50", "p95", "p99"])):
        svg = body[body.index(f'id="{chart}"') :]
        svg = svg[: svg.index("</svg>")]
        assert re.findall(r'<text class="legend"[^>]*>([^<]*)</text>', svg) == labels


def test_a_tenant_alert_no_pool_drift_holds_is_listed_with_the_replan_it_caused(
    role_users: dict[str, User | None], plans: tuple[Plan, Plan]
) -> None:
    body = client_for(role_users[VIEWER]).get("/drift/").content.decode()
    assert "nordlicht-versicherung" in body
    # No pool drift holds it yet: listed on its own with its message, no priced figures
    # of its own (those are the pool drift's).
    assert "Tenant alerts not yet part of a pool's drift" in body
    assert "4 → 6 replicas." in body and "4 → 6 (+2)" not in body
    assert "re-plan #" in body


def test_only_a_policy_admin_sees_the_approve_button(
    role_users: dict[str, User | None], plans: tuple[Plan, Plan]
) -> None:
    _, second = plans
    url = f"/plans/v{second.version}/"
    for role in ROLES:
        body = client_for(role_users[role]).get(url).content.decode()
        assert ("Approve…" in body) is (role == POLICY_ADMIN), role
        assert "awaiting approval" in body


def test_approval_needs_a_reason_and_records_it_with_the_actor(
    role_users: dict[str, User | None], plans: tuple[Plan, Plan]
) -> None:
    first, second = plans
    admin = client_for(role_users[POLICY_ADMIN])
    url = f"/plans/v{second.version}/decide/"
    page = admin.get(url + "?action=approve").content.decode()
    assert "Approve plan v2" in page and "more unserved" in page
    refused = admin.post(url, {"action": "approve", "reason": "   "})
    assert refused.status_code == 200
    assert "Give a reason" in refused.content.decode()
    second.refresh_from_db()
    assert second.state == Plan.State.AWAITING_APPROVAL
    done = admin.post(url, {"action": "approve", "reason": "us-east maintenance, agreed"})
    assert done.status_code == 302 and done["Location"] == f"/plans/v{second.version}/"
    second.refresh_from_db()
    first.refresh_from_db()
    assert second.state == Plan.State.ACTIVE and first.state == Plan.State.SUPERSEDED
    decision = PlanDecision.objects.get(plan=second)
    assert decision.action == "approved" and decision.actor == role_users[POLICY_ADMIN]
    assert decision.reason == "us-east maintenance, agreed"
    history = admin.get(done["Location"]).content.decode()
    assert "us-east maintenance, agreed" in history and "admin-user" in history
    assert f'Plan <a href="/plans/v{second.version}/">v{second.version}</a>' in (
        admin.get("/").content.decode()
    )


def test_viewer_and_finance_cannot_decide(
    role_users: dict[str, User | None], plans: tuple[Plan, Plan]
) -> None:
    _, second = plans
    for role in (VIEWER, FINANCE):
        response = client_for(role_users[role]).post(
            f"/plans/v{second.version}/decide/", {"action": "approve", "reason": "because"}
        )
        assert response.status_code == 403
    second.refresh_from_db()
    assert second.state == Plan.State.AWAITING_APPROVAL


def test_rejecting_keeps_the_active_plan(
    role_users: dict[str, User | None], plans: tuple[Plan, Plan]
) -> None:
    first, second = plans
    response = client_for(role_users[POLICY_ADMIN]).post(
        f"/plans/v{second.version}/decide/", {"action": "reject", "reason": "wait for GPUs"}
    )
    assert response.status_code == 302
    second.refresh_from_db()
    assert second.state == Plan.State.REJECTED
    assert PlanDecision.objects.get(plan=second).reason == "wait for GPUs"
    first.refresh_from_db()
    assert first.state == Plan.State.ACTIVE


def _whatif(client: Client, **fields: Any) -> Any:
    """Post the what-if form; a preview queued (303 to its page) is solved as a worker would
    solve it, then its page is read."""
    data = {"tenant": "nordlicht-versicherung", "traffic_factor": "1", "prompt_tokens_delta": "0"}
    data.update(fields)
    response = client.post("/what-if/", data)
    if response.status_code == 303:
        whatif_drain()
        return client.get(response["Location"])
    return response


def test_whatif_preview_warns_of_unserved_demand_and_stores_nothing(
    role_users: dict[str, User | None],
) -> None:
    load_support_assistant()
    run_replan()
    plans_before = Plan.objects.count()
    tenant_revision = Tenant.objects.get(name="nordlicht-versicherung").revision
    response = _whatif(client_for(role_users[VIEWER]), traffic_factor="60")
    body = response.content.decode()
    assert response.status_code == 200
    assert "Demand would become unserved" in body
    assert "nordlicht-versicherung/" in body
    assert Plan.objects.count() == plans_before
    assert Tenant.objects.get(name="nordlicht-versicherung").revision == tenant_revision
    # A viewer sees no save button.
    assert 'value="save"' not in body


def test_whatif_residency_change_is_checked_like_the_admin(
    role_users: dict[str, User | None],
) -> None:
    load_support_assistant()
    run_replan()
    response = _whatif(
        client_for(role_users[POLICY_ADMIN]), change_residency="on", residency_regions=["us-east"]
    )
    body = response.content.decode()
    assert "outside the residency geography" in body or "home region" in body


def test_whatif_save_is_for_policy_admins_and_goes_through_tenant_save(
    role_users: dict[str, User | None],
) -> None:
    load_support_assistant()
    run_replan()
    keystone = Tenant.objects.get(name="keystone-mutual")
    change = {
        "tenant": "keystone-mutual",
        "change_residency": "on",
        "residency_regions": ["us-east"],
        "do": "save",
    }
    for role in (FINANCE, VIEWER):
        assert _whatif(client_for(role_users[role]), **change).status_code == 403
    keystone.refresh_from_db()
    assert list(keystone.residency_regions.all()) == []
    rows_before = keystone.history.count()
    preview = _whatif(client_for(role_users[POLICY_ADMIN]), **{**change, "do": "preview"})
    assert 'value="save"' in preview.content.decode()
    saved = _whatif(client_for(role_users[POLICY_ADMIN]), **change)
    assert saved.status_code == 302 and saved["Location"] == "/tenants/keystone-mutual/"
    keystone.refresh_from_db()
    assert [r.name for r in keystone.residency_regions.all()] == ["us-east"]
    # One history row for the save, regions included.
    assert keystone.history.count() == rows_before + 1


def test_whatif_refuses_an_infinite_factor_keeping_the_value(
    role_users: dict[str, User | None],
) -> None:
    load_support_assistant()
    response = _whatif(client_for(role_users[VIEWER]), traffic_factor="1e309")
    body = response.content.decode()
    assert "Enter a finite number" in body
    assert 'value="1e309"' in body


def test_finance_page_tables_download_as_the_api_serves_them(
    role_users: dict[str, User | None], plans: tuple[Plan, Plan]
) -> None:
    client = client_for(role_users[FINANCE])
    body = client.get("/finance/").content.decode()
    assert "Cost by month, region and GPU type" in body and "The price of each promise" in body
    links = re.findall(r'href="(/api/finance/[^"]+format=csv[^"]*)"', body)
    # The chosen view, actuals, cost by region and GPU type, commitments, promises.
    assert len(links) == 5
    for link in links:
        url = html.unescape(link)
        download = client.get(url)
        assert download.status_code == 200 and download["Content-Type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(download.content.decode())))
        api = client.get(url.replace("format=csv", "format=json")).json()
        assert [list(r) for r in rows[:1]] == [list(api["columns"])][: len(rows[:1])]
        # Actuals count whole hours held: none yet for a plan activated this hour.
        assert len(rows) == len(api["rows"]) and (rows or "/history/" in url)
        for row, expected in zip(rows, api["rows"], strict=True):
            for column in api["columns"]:
                value = expected[column]
                assert row[column] == ("" if value is None else str(value)), (url, column)
    tenant = client.get("/tenants/nordlicht-versicherung/").content.decode()
    assert "Showback by month" in tenant


def _figures(body: str, table: str) -> dict[str, float]:
    """The cost figures of one of the finance page's tables, by row key."""
    part = body.split(f'data-table="{table}"', 1)[1].split("</table>", 1)[0]
    found = re.findall(
        r'data-(?:period|group)="([^"]+)"><th scope="row">[^<]*</th>'
        r'<td class="n" data-figure="cost">([^<]+)</td>',
        part,
    )
    return {html.unescape(key): float(value.replace(",", "")) for key, value in found}


@pytest.mark.parametrize(
    ("group_by", "period"), [("region", "month"), ("tenant", "quarter"), ("accelerator", "week")]
)
def test_finance_page_shows_the_apis_figures(
    role_users: dict[str, User | None], plans: tuple[Plan, Plan], group_by: str, period: str
) -> None:
    client = client_for(role_users[FINANCE])
    response = client.get("/finance/", {"group_by": group_by, "period": period})
    assert response.status_code == 200
    body = response.content.decode()
    api = client.get("/api/finance/forecast/", {"group_by": group_by, "period": period}).json()
    rows = api["rows"]
    by_period: dict[str, float] = defaultdict(float)
    by_group: dict[str, float] = defaultdict(float)
    for row in rows:
        by_period[row["period"]] += row["cost"]
        by_group[row[group_by]] += row["cost"]
    shown = _figures(body, "period-totals")
    assert shown.keys() == by_period.keys()
    for label, cost in by_period.items():
        assert shown[label] == pytest.approx(cost, abs=0.005), label
    groups = _figures(body, "group-totals")
    assert groups.keys() == by_group.keys()
    for name, cost in by_group.items():
        assert groups[name] == pytest.approx(cost, abs=0.005), name
    horizon = re.search(r'<strong data-figure="cost">([^<]+)</strong>', body)
    assert horizon is not None
    assert float(horizon.group(1).replace(",", "")) == pytest.approx(
        sum(r["cost"] for r in rows), abs=0.005
    )
    # The selector the page renders holds the same figures as the API.
    page = selectors.finance_page(group_by=group_by, period=period)
    assert page.horizon is not None
    assert page.horizon.cost == pytest.approx(sum(r["cost"] for r in rows), abs=0.005)
    history = client.get(
        "/api/finance/history/",
        {"group_by": group_by, "period": period, "horizon": FINANCE_ACTUALS_HORIZON[period]},
    ).json()["rows"]
    assert [(a.period, a.group, a.cost, a.source) for a in page.actuals] == [
        (r["period"], r[group_by], r["cost"], r["source"]) for r in history
    ]
    # Labelled controls; every header cell has a scope.
    for control in ("finance-group-by", "finance-period"):
        assert f'<label for="{control}">' in body and f'id="{control}"' in body
    assert "<th>" not in body.split('<div class="finance">', 1)[1]


def test_finance_page_refuses_a_bad_choice_naming_it(role_users: dict[str, User | None]) -> None:
    client = client_for(role_users[FINANCE])
    for params, name in (({"group_by": "planet"}, "group_by"), ({"period": "year"}, "period")):
        response = client.get("/finance/", params)
        assert response.status_code == 400
        assert f"{name}: must be one of" in response.content.decode()


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_query_counts_do_not_grow_with_tenants(role_users: dict[str, User | None]) -> None:
    load_support_assistant()
    run_replan()
    client = client_for(role_users[VIEWER])
    version = Plan.objects.get(state=Plan.State.ACTIVE).version
    urls = ["/", f"/plans/v{version}/", "/tenants/", "/plans/", "/drift/?status=all"]
    before = {url: _queries(client, url) for url in urls}
    # Ten more tenants, each with the profile of an existing one, and a re-plan.
    source = Tenant.objects.get(name="harborline-retail")
    profile = source.profiles.first()
    assert profile is not None
    for i in range(10):
        clone = Tenant.objects.create(
            name=f"clone-{i}", tier=source.tier, home_region=source.home_region
        )
        profile.pk = None
        profile.id = None
        profile._state.adding = True
        profile.tenant = clone
        profile.save()
    run_replan()
    version = Plan.objects.get(state=Plan.State.ACTIVE).version
    urls_after = ["/", f"/plans/v{version}/", "/tenants/", "/plans/", "/drift/?status=all"]
    after = {url: _queries(client, url) for url in urls_after}
    assert list(before.values()) == list(after.values()), (before, after)


def test_pages_read_a_plans_documents_once(role_users: dict[str, User | None]) -> None:
    load_support_assistant()
    run_replan()
    client = client_for(role_users[VIEWER])
    urls = ["/", "/tenants/nordlicht-versicherung/"]
    for url in urls:
        assert client.get(url).status_code == 200, url
        with CaptureQueriesContext(connection) as captured:
            again = client.get(url)
        assert again.status_code == 200, url
        # The pool loads and routing derived from the stored problem and solution are kept
        # per plan: the documents are not read again.
        sql = " ".join(q["sql"] for q in captured)
        assert '"problem"' not in sql and '"solution"' not in sql, url


def test_login_without_next_lands_on_the_fleet_overview(role_users: dict[str, User | None]) -> None:
    for url in ("/login/", "/api/auth/login/"):
        response = Client().post(url, {"username": "viewer-user", "password": "pw-viewer-user"})
        assert response.status_code == 302 and response["Location"] == "/", url


def test_favicon_and_static_files_are_served(role_users: dict[str, User | None]) -> None:
    response = Client().get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("web/favicon.svg")
