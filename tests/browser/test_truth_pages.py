"""The pages that must tell the truth at a glance, read in a real browser (Playwright driving
Debian's Chromium headless against a live server): the drift page's figures are the pool
alert's and the re-plan's; a rejected plan says so, not "awaiting approval"; an SLO breach
heads the fleet overview. Each is screenshotted at 1366 and 400 px under
``tests/artifacts/``."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from controlplane.plans.models import Plan
from controlplane.plans.services import plan_reject
from controlplane.telemetry.models import ObservedWorkload, PoolDriftAlert
from tests.browser.conftest import ARTIFACTS, BROWSER_MARKS
from tests.controlplane.test_drift_page import drifted  # noqa: F401  (a fixture)

pytest.importorskip("playwright.sync_api")

pytestmark = BROWSER_MARKS


def _viewer(browser: Any, live_server: Any, width: int = 1366) -> Any:
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "viewer-user")
    page.fill("#id_password", "pw-viewer-user")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


def _shots(browser: Any, live_server: Any, path: str, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for width in (1366, 400):
        page = _viewer(browser, live_server, width)
        page.goto(f"{live_server.url}{path}")
        page.screenshot(path=str(ARTIFACTS / f"truth-{name}-{width}px.png"), full_page=True)
        page.context.close()


def test_the_drift_page_shows_the_pool_alerts_priced_change(
    browser: Any,
    live_server: Any,
    users: dict[str, User],
    drifted: tuple[Plan, PoolDriftAlert, Plan],  # noqa: F811
) -> None:
    before, pool, after = drifted
    page = _viewer(browser, live_server)
    page.goto(f"{live_server.url}/drift/")
    row = page.locator(f"#pool-drift-{pool.pk}")

    def figure(name: str) -> str:
        return " ".join(row.locator(f'[data-figure="{name}"]').first.inner_text().split())

    assert figure("replicas") == "12 → 15 (+3)"
    assert figure("gpus") == "24 → 30 (+6)"
    assert figure("cost") == "$108.24/h → $135.30/h (+$27.06/h)"
    # The same as the re-plan pays, and as the message in the same row says.
    assert before.cost_per_hour is not None and after.cost_per_hour is not None
    assert f"${after.cost_per_hour:,.2f}/h" in figure("cost")
    assert "from 24 GPUs at $108.24/h to 30 GPUs at $135.30/h (+$27.06/h)" in row.inner_text()
    page.context.close()
    _shots(browser, live_server, "/drift/", "drift")


def test_a_rejected_plan_says_it_was_rejected_not_awaiting_approval(
    browser: Any, live_server: Any, users: dict[str, User], fleet_with_plans: tuple[Plan, Plan]
) -> None:
    first, second = fleet_with_plans
    plan_reject(plan=second, user=users["policy-admin"], reason="wait for GPUs")
    page = _viewer(browser, live_server)
    page.goto(f"{live_server.url}/plans/v{second.version}/")
    banner = page.locator(".banner").first.inner_text()
    assert banner.startswith("Rejected by admin-user on ")
    assert "wait for GPUs" in banner
    assert f"Plan v{first.version} stays the active plan." in banner
    assert "Awaiting approval" not in page.inner_text("main")
    page.context.close()
    _shots(browser, live_server, f"/plans/v{second.version}/", "plan-rejected")


def test_an_slo_breach_heads_the_fleet_overview(
    browser: Any, live_server: Any, users: dict[str, User], fleet_with_plans: tuple[Plan, Plan]
) -> None:
    newest = (
        ObservedWorkload.objects.filter(tenant="nordlicht-versicherung")
        .order_by("-derivation__window_end", "-pk")
        .first()
    )
    assert newest is not None
    newest.ttft_p95_s = 3.94
    newest.save(update_fields=["ttft_p95_s"])
    page = _viewer(browser, live_server)
    headings = [h.strip() for h in page.locator("main h2").all_inner_texts()]
    assert headings[0] == "SLO attainment", headings
    alert = page.locator("#slo ~ .banner.bad").first.inner_text()
    assert "nordlicht-versicherung" in alert and "measured p95 TTFT 3.94 s" in alert
    page.context.close()
    _shots(browser, live_server, "/", "fleet-breach")
