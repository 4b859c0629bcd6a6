"""The finance page in a real browser (Playwright driving Debian's Chromium headless against a
live server): a finance user switches the grouping and the period to quarter, and the totals
the page shows equal the finance API's for the same query; at 400 px wide the page itself does
not scroll sideways (wide tables scroll inside their own container). Screenshots go under
``tests/artifacts/``.

Needs Chromium at ``HEADROOM_CHROMIUM`` (default ``/usr/bin/chromium``).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.core.roles import FINANCE
from controlplane.plans.models import Plan
from tests.browser.conftest import ARTIFACTS, BROWSER_MARKS
from tests.controlplane.conftest import make_user
from tests.controlplane.plans_helpers import load_support_assistant, run_replan

pytest.importorskip("playwright.sync_api")


pytestmark = BROWSER_MARKS


@pytest.fixture
def finance_user(_fast_password_hasher: None) -> User:
    return make_user("finance-user", FINANCE)


@pytest.fixture
def active_plan() -> Plan:
    """The shipped scenario's plan, active since two days ago, so past hours have actuals."""
    load_support_assistant()
    plan = run_replan().plan
    assert plan is not None and plan.state == Plan.State.ACTIVE
    Plan.objects.filter(pk=plan.pk).update(activated_at=timezone.now() - timedelta(days=2))
    return plan


def _login(browser: Any, live_server: Any, width: int) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "finance-user")
    page.fill("#id_password", "pw-finance-user")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


def _money(text: str) -> float:
    return float(text.replace(",", "").replace("$", "").strip())


def _shown(page: Any, table: str, key: str) -> dict[str, float]:
    """The cost column of one of the page's totals tables, by its row's key."""
    out = {}
    for row in page.query_selector_all(f"table[data-table={table}] tbody tr[data-{key}]"):
        cell = row.query_selector("td[data-figure=cost]")
        out[str(row.get_attribute(f"data-{key}"))] = _money(cell.inner_text())
    return out


def _api_totals(page: Any, live_server: Any, group_by: str, period: str) -> dict[str, Any]:
    body = page.request.get(
        f"{live_server.url}/api/finance/forecast/?group_by={group_by}&period={period}"
    ).json()
    by_period: dict[str, float] = defaultdict(float)
    by_group: dict[str, float] = defaultdict(float)
    for row in body["rows"]:
        by_period[row["period"]] += row["cost"]
        by_group[row[group_by]] += row["cost"]
    return {
        "horizon": sum(row["cost"] for row in body["rows"]),
        "periods": dict(by_period),
        "groups": dict(by_group),
    }


def _check_totals(page: Any, live_server: Any, group_by: str, period: str) -> None:
    api = _api_totals(page, live_server, group_by, period)
    horizon = page.inner_text("dl[data-total=horizon] [data-figure=cost]")
    assert _money(horizon) == pytest.approx(api["horizon"], abs=0.005)
    periods = _shown(page, "period-totals", "period")
    assert periods.keys() == api["periods"].keys()
    for label, cost in api["periods"].items():
        assert periods[label] == pytest.approx(cost, abs=0.005), label
    groups = _shown(page, "group-totals", "group")
    assert groups.keys() == api["groups"].keys()
    for name, cost in api["groups"].items():
        assert groups[name] == pytest.approx(cost, abs=0.005), name


def _no_sideways_scroll(page: Any, width: int, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"{name}: the page is {scroll} px wide at {width} px"


def test_switching_group_and_quarter_shows_the_apis_totals(
    browser: Any, live_server: Any, finance_user: User, active_plan: Plan
) -> None:
    page = _login(browser, live_server, 1366)
    page.click("nav[aria-label=Main] >> text=Finance")
    page.wait_for_selector("table[data-table=period-totals]")
    assert page.input_value("#finance-group-by") == "region"
    assert page.input_value("#finance-period") == "month"
    _check_totals(page, live_server, "region", "month")

    # By tenant and quarter: the form's labelled controls, then Show.
    page.get_by_label("Group by").select_option("tenant")
    page.get_by_label("Period").select_option("quarter")
    page.click("form.finance-query button[type=submit]")
    page.wait_for_url("**/finance/?group_by=tenant&period=quarter")
    assert page.input_value("#finance-period") == "quarter"
    labels = list(_shown(page, "period-totals", "period"))
    assert labels and all("-Q" in label for label in labels)
    _check_totals(page, live_server, "tenant", "quarter")
    # Actuals: the plan has held two days; each row says where its figures came from.
    actuals = page.query_selector_all("table[data-table=actuals] tbody tr")
    assert actuals and "plan" in actuals[-1].inner_text()
    _no_sideways_scroll(page, 1366, "finance-tenant-quarter")

    page.get_by_label("Group by").select_option("accelerator")
    page.click("form.finance-query button[type=submit]")
    page.wait_for_url("**/finance/?group_by=accelerator&period=quarter")
    _check_totals(page, live_server, "accelerator", "quarter")
    page.context.close()


def test_the_page_fits_400_px(
    browser: Any, live_server: Any, finance_user: User, active_plan: Plan
) -> None:
    page = _login(browser, live_server, 400)
    page.goto(f"{live_server.url}/finance/?group_by=tenant&period=quarter")
    page.wait_for_selector("table[data-table=period-totals]")
    _no_sideways_scroll(page, 400, "finance-400px")
    # Wide tables scroll inside their own container instead.
    assert page.evaluate(
        "[...document.querySelectorAll('.finance .scroll')].some(e => e.scrollWidth > e.clientWidth)"
    )
    page.context.close()
