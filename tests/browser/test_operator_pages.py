"""The operators' pages in a real browser: Playwright for Python driving Debian's Chromium
headless against a live server. A policy admin changes a tenant's residency in the admin and
sees it in the history; a what-if that leaves demand unserved shows the warning; approving a
plan with a reason changes the fleet overview. Every page is screenshotted at 1366 × 900 under
``tests/artifacts/`` and checked for sideways scrolling.

Needs Chromium at ``HEADROOM_CHROMIUM`` (default ``/usr/bin/chromium``, Debian's package
``chromium``); Playwright's own browser download is not used.
"""

from __future__ import annotations

import csv
from typing import Any

import pytest
from django.contrib.auth.models import User

from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.plans.models import PlanDecision
from controlplane.policies.models import Tenant
from tests.browser.conftest import ARTIFACTS, BROWSER_MARKS
from tests.controlplane.plans_helpers import load_support_assistant, run_replan, shrink_region

pytest.importorskip("playwright.sync_api")

WIDTH, HEIGHT = 1366, 900

pytestmark = BROWSER_MARKS


def _page(browser: Any, live_server: Any, username: str) -> Any:
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-" + username)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


def _shot(page: Any, name: str, *, check_width: bool = True) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    if check_width:
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= WIDTH, f"{name}: the page is {scroll} px wide at {WIDTH} px"


def test_policy_admin_changes_residency_in_the_admin_and_sees_the_history(
    browser: Any, live_server: Any, users: dict[str, User]
) -> None:
    load_support_assistant()
    run_replan()
    tenant = Tenant.objects.get(name="keystone-mutual")
    page = _page(browser, live_server, "admin-user")
    page.goto(f"{live_server.url}/admin/")
    _shot(page, "admin-index")
    # The widest admin lists fit the screen: their columns wrap.
    for name, path in (
        ("admin-tenants", "/admin/policies/tenant/"),
        ("admin-workload-profiles", "/admin/policies/workloadprofile/"),
        ("admin-plans", "/admin/plans/plan/"),
        ("admin-capacity-figures", "/admin/fleet/capacityfigure/"),
    ):
        page.goto(f"{live_server.url}{path}")
        _shot(page, name)
    page.goto(f"{live_server.url}/admin/policies/tenant/{tenant.pk}/change/")
    # The residency region list is an autocomplete (select2): open it, type, pick.
    page.click(".field-residency_regions .select2-selection")
    page.keyboard.type("us-east")
    page.wait_for_selector(".select2-results__option--highlighted:has-text('us-east')")
    page.keyboard.press("Enter")
    _shot(page, "admin-tenant-change")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")
    assert [r.name for r in Tenant.objects.get(pk=tenant.pk).residency_regions.all()] == ["us-east"]
    page.click("a.historylink")
    page.wait_for_selector("#change-history")
    history = page.inner_text("#change-history")
    assert "us-east" in history and "admin-user" in history
    assert "pk=None" not in history and "None" not in history
    _shot(page, "admin-tenant-history")
    page.context.close()


def test_whatif_that_leaves_demand_unserved_shows_the_warning(
    browser: Any, live_server: Any, users: dict[str, User], fleet_with_plans: Any
) -> None:
    page = _page(browser, live_server, "admin-user")
    page.goto(f"{live_server.url}/what-if/?tenant=nordlicht-versicherung")
    _shot(page, "whatif-form")
    page.fill("#id_traffic_factor", "60")
    page.click("button[value=preview]")
    warning = page.wait_for_selector(".preview [role=alert]")
    assert "Demand would become unserved" in warning.inner_text()
    assert "nordlicht-versicherung/" in warning.inner_text()
    assert page.is_visible("button[value=save]") is False  # traffic is not policy
    _shot(page, "whatif-preview")
    page.context.close()
    # Finance previews too, and is offered no save.
    page = _page(browser, live_server, "finance-user")
    page.goto(f"{live_server.url}/what-if/?tenant=keystone-mutual")
    page.check("#id_change_residency")
    page.check("input[name=residency_regions][value=us-east]")
    page.click("button[value=preview]")
    page.wait_for_selector(".preview")
    assert page.query_selector("button[value=save]") is None
    page.context.close()


def test_approving_a_plan_with_a_reason_changes_the_fleet_overview(
    browser: Any, live_server: Any, users: dict[str, User], fleet_with_plans: Any
) -> None:
    first, second = fleet_with_plans
    page = _page(browser, live_server, "admin-user")
    overview = page.inner_text("main")
    assert f"Plan v{second.version} is awaiting approval" in overview
    assert f"Plan v{first.version}, active since" in overview
    _shot(page, "fleet-before-approval")
    page.goto(f"{live_server.url}/plans/v{second.version}/")
    _shot(page, "plan-awaiting")
    page.click("text=Approve…")
    page.wait_for_selector("#id_reason")
    _shot(page, "plan-decide")
    page.click("button[type=submit]:has-text('Approve plan')")
    # The reason is required: the browser refuses the empty field before sending it.
    assert page.url.endswith("/decide/?action=approve")
    page.fill("#id_reason", "us-east maintenance window agreed with the tenants")
    page.click("button[type=submit]:has-text('Approve plan')")
    page.wait_for_url(f"{live_server.url}/plans/v{second.version}/")
    assert "approved" in page.inner_text(".messages")
    assert "us-east maintenance window agreed" in page.inner_text("#history + ul")
    decision = PlanDecision.objects.get(plan=second)
    assert decision.actor == users[POLICY_ADMIN]
    page.click("nav[aria-label=Main] >> text=Fleet")
    overview = page.inner_text("main")
    assert "awaiting approval" not in overview
    assert f"Plan v{second.version}, active since" in overview
    _shot(page, "fleet-after-approval")
    page.context.close()


def test_finance_downloads_a_csv_that_matches_the_api(
    browser: Any, live_server: Any, users: dict[str, User], fleet_with_plans: Any
) -> None:
    page = _page(browser, live_server, "finance-user")
    page.click("nav[aria-label=Main] >> text=Finance")
    page.wait_for_selector("a[data-csv=forecast]")
    _shot(page, "finance")
    with page.expect_download() as info:
        page.click("a[data-csv=forecast]")
    with open(info.value.path(), newline="") as handle:
        rows = list(csv.DictReader(handle))
    href = page.get_attribute("a[data-csv=forecast]", "href")
    assert href is not None
    api = page.request.get(f"{live_server.url}{href.replace('format=csv', 'format=json')}").json()
    assert len(rows) == len(api["rows"]) > 0
    for row, expected in zip(rows, api["rows"], strict=True):
        assert float(row["cost"]) == pytest.approx(float(expected["cost"]))
        assert row["region"] == expected["region"] and row["period"] == expected["period"]
    page.context.close()


def test_screenshots_of_every_page_for_each_role(
    browser: Any, live_server: Any, users: dict[str, User], fleet_with_plans: Any
) -> None:
    first, second = fleet_with_plans
    pages = {
        "fleet": "/",
        "plans": "/plans/",
        "plan-active": f"/plans/v{first.version}/",
        "plan-awaiting": f"/plans/v{second.version}/",
        "tenants": "/tenants/",
        "tenant": "/tenants/nordlicht-versicherung/",
        "whatif": "/what-if/",
        "drift": "/drift/",
        "finance": "/finance/",
    }
    for role, username in (
        (POLICY_ADMIN, "admin-user"),
        (VIEWER, "viewer-user"),
        (FINANCE, "finance-user"),
    ):
        page = _page(browser, live_server, username)
        for name, url in pages.items():
            response = page.goto(f"{live_server.url}{url}")
            assert response is not None and response.status == 200, (role, url)
            _shot(page, f"{role}-{name}")
        approve = page.goto(f"{live_server.url}/plans/v{second.version}/")
        assert approve is not None
        assert (page.query_selector("text=Approve…") is not None) is (role == POLICY_ADMIN)
        page.context.close()
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    page.goto(f"{live_server.url}/")
    assert page.url.startswith(f"{live_server.url}/login/")
    _shot(page, "login")
    page.close()


def test_whatif_forbidding_spill_shows_the_demand_it_leaves_unserved(
    browser: Any, live_server: Any, users: dict[str, User]
) -> None:
    """With no GPUs left in its home region, harborline-retail is served by spill; the
    what-if form's spill field, set to "not allowed", previews that demand as unserved."""
    load_support_assistant()
    shrink_region("eu-west", 0)
    assert run_replan().plan is not None
    page = _page(browser, live_server, "viewer-user")
    page.goto(f"{live_server.url}/what-if/?tenant=harborline-retail")
    assert page.is_visible("#id_spill_allowed") and page.is_visible("#id_max_spill_rtt_ms")
    page.select_option("#id_spill_allowed", "forbid")
    page.click("button[value=preview]")
    warning = page.wait_for_selector(".preview [role=alert]")
    assert "Demand would become unserved" in warning.inner_text()
    assert "harborline-retail/chat-70b/order-lookup@eu-west" in warning.inner_text()
    _shot(page, "whatif-spill-forbidden")
    page.context.close()
