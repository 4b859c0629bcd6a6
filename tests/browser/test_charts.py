"""The tenant page's charts in a real browser (Playwright driving Debian's Chromium headless
against a live server): with a measured p95 TTFT above the tier's SLO the TTFT chart draws the
SLO line, rings the breach and says so, every series of every chart has a legend entry that
overlaps neither another entry nor the axis unit label, and at 400 px wide the charts fit the
page. Screenshots go under ``tests/artifacts/``.

Needs Chromium at ``HEADROOM_CHROMIUM`` (default ``/usr/bin/chromium``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from controlplane.core.roles import VIEWER
from controlplane.policies.models import Tenant
from controlplane.telemetry.models import ObservedWorkload
from tests.browser.conftest import ARTIFACTS, BROWSER_MARKS
from tests.controlplane.conftest import make_user
from tests.controlplane.plans_helpers import load_support_assistant, run_replan
from tests.controlplane.web_support import add_observations

pytest.importorskip("playwright.sync_api")

pytestmark = BROWSER_MARKS

TENANT = "nordlicht-versicherung"
EXPECTED_LEGENDS = {
    "rate": ["peak", "mean"],
    "prompt": ["p50", "p95", "p99"],
    "output": ["p50", "p95", "p99"],
    "cache": ["hit rate"],
    "ttft": ["p95", "SLO 2.5 s", "above SLO 2.5 s (1)"],
}


@pytest.fixture
def viewer(_fast_password_hasher: None) -> User:
    return make_user("viewer-user", VIEWER)


@pytest.fixture
def breaching_tenant() -> Tenant:
    """The shipped scenario with a week of observations for one tenant, the last window's
    p95 TTFT 3.94 s against its tier's 2.5 s objective."""
    load_support_assistant()
    run_replan()
    add_observations(TENANT)
    tenant = Tenant.objects.select_related("tier").get(name=TENANT)
    tenant.tier.p95_ttft_slo_s = 2.5
    tenant.tier.save()
    last = ObservedWorkload.objects.filter(tenant=TENANT).order_by("-derivation__window_end")[0]
    ObservedWorkload.objects.filter(pk=last.pk).update(ttft_p95_s=3.94)
    return tenant


def _open(browser: Any, live_server: Any, width: int) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "viewer-user")
    page.fill("#id_password", "pw-viewer-user")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    page.goto(f"{live_server.url}/tenants/{TENANT}/")
    return page


def _boxes(page: Any, chart: str, selector: str) -> list[dict[str, float]]:
    return list(
        page.eval_on_selector_all(
            f"svg#{chart} {selector}",
            "els => els.map(e => { const r = e.getBoundingClientRect();"
            " return {x: r.left, y: r.top, w: r.width, h: r.height}; })",
        )
    )


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


@pytest.mark.parametrize("width", [1366, 400])
def test_the_ttft_chart_flags_the_breach_and_every_series_is_in_the_legend(
    browser: Any, live_server: Any, viewer: User, breaching_tenant: Tenant, width: int
) -> None:
    page = _open(browser, live_server, width)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"tenant-charts-{width}.png"), full_page=True)
    page.locator("svg#ttft").screenshot(path=str(ARTIFACTS / f"tenant-ttft-chart-{width}.png"))

    assert page.locator("svg#ttft line.threshold").count() == 1
    assert page.locator("svg#ttft text.threshold-label").text_content() == "SLO 2.5 s"
    assert page.locator("svg#ttft circle.breach").count() == 1
    assert "SLO 2.5 s: 1 of 7 points above it" in page.locator("svg#ttft desc").text_content() or ""
    assert page.locator("td strong[data-breach]").inner_text() == "3.94 s, above the SLO 2.5 s"

    for chart, labels in EXPECTED_LEGENDS.items():
        legend = page.locator(f"svg#{chart} text.legend").all_text_contents()
        assert legend == labels, chart
        entries = _boxes(page, chart, "g.legend-entry")
        (unit,) = _boxes(page, chart, "text.unit")
        svg = page.locator(f"svg#{chart}").bounding_box()
        for i, entry in enumerate(entries):
            assert not _overlap(entry, unit), (chart, labels[i])
            assert all(not _overlap(entry, other) for other in entries[i + 1 :]), chart
            # Inside the drawing, not cut off at its right edge.
            assert entry["x"] + entry["w"] <= svg["x"] + svg["width"] + 0.5, (chart, labels[i])
        # At 400 px the chart still fits its container and its text stays legible.
        assert svg["width"] <= width
        font = page.eval_on_selector(
            f"svg#{chart} text.legend",
            "e => e.getBoundingClientRect().height",
        )
        assert font >= 9, (chart, font)
    scroll = page.evaluate("document.querySelector('.charts').scrollWidth")
    client = page.evaluate("document.querySelector('.charts').clientWidth")
    assert scroll <= client
    page.context.close()
