"""Every operator page and the admin forms policy work uses, in a real browser (Playwright
driving Debian's Chromium headless against a live server): axe-core finds no critical
accessibility violation on any of them, none scrolls sideways at 400 px wide (wide tables
scroll inside their own container, charts shrink to the width), and the figures they print
are rounded for reading (no floating-point residue such as ``162.35999999999999`` or
``8.9e-16``). Each page is screenshotted at 1366 and at 400 px under ``tests/artifacts/``.

Needs Chromium at ``HEADROOM_CHROMIUM`` (default ``/usr/bin/chromium``) and the package
``axe-playwright-python`` (it carries axe-core).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from controlplane.fleet.models import AcceleratorType
from controlplane.policies.models import Tenant, Tier
from controlplane.telemetry.models import ObservedWorkload
from tests.browser.conftest import ARTIFACTS, BROWSER_MARKS

pytest.importorskip("playwright.sync_api")
axe_playwright = pytest.importorskip("axe_playwright_python.sync_playwright")

pytestmark = BROWSER_MARKS

WIDE, NARROW = 1366, 400

# A float's residue as a page would print it: long runs of 9s or 0s after the point, or an
# exponent.
RESIDUE = re.compile(r"\d\.\d*(?:9{5,}|0{5,})\d|\d(?:\.\d+)?e[-+]\d+", re.IGNORECASE)


def _pages(first: Any, second: Any) -> dict[str, str]:
    """Every operator page and the admin forms, by the name their screenshots take."""
    tenant = Tenant.objects.get(name="nordlicht-versicherung")
    tier = Tier.objects.order_by("pk").first()
    accelerator = AcceleratorType.objects.order_by("pk").first()
    observed = ObservedWorkload.objects.order_by("pk").first()
    assert tier is not None and accelerator is not None and observed is not None
    return {
        "fleet": "/",
        "tenants": "/tenants/",
        "tenant": f"/tenants/{tenant.name}/",
        "plans": "/plans/",
        "plan-active": f"/plans/v{first.version}/",
        "plan-awaiting": f"/plans/v{second.version}/",
        "plan-decide": f"/plans/v{second.version}/decide/?action=approve",
        "drift": "/drift/",
        "finance": "/finance/",
        "whatif": "/what-if/",
        "whatif-tenant": f"/what-if/?tenant={tenant.name}",
        "admin-index": "/admin/",
        "admin-tenant-change": f"/admin/policies/tenant/{tenant.pk}/change/",
        "admin-tenant-add": "/admin/policies/tenant/add/",
        "admin-tier-change": f"/admin/policies/tier/{tier.pk}/change/",
        "admin-tier-add": "/admin/policies/tier/add/",
        "admin-accelerator-change": f"/admin/fleet/acceleratortype/{accelerator.pk}/change/",
        "admin-accelerators": "/admin/fleet/acceleratortype/",
        "admin-plans": "/admin/plans/plan/",
        "admin-plan-change": f"/admin/plans/plan/{second.pk}/change/",
        # Lists of measured and derived figures.
        "admin-capacity-figures": "/admin/fleet/capacityfigure/",
        "admin-workload-profiles": "/admin/policies/workloadprofile/",
        "admin-observed-workloads": "/admin/telemetry/observedworkload/",
        "admin-observed-workload": f"/admin/telemetry/observedworkload/{observed.pk}/change/",
        "admin-drift-alerts": "/admin/telemetry/driftalert/",
    }


def _context(browser: Any, width: int) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(60_000)
    return context


def _login(browser: Any, live_server: Any, width: int) -> Any:
    page = _context(browser, width).new_page()
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "admin-user")
    page.fill("#id_password", "pw-admin-user")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


def _visit(page: Any, live_server: Any, path: str) -> None:
    response = page.goto(f"{live_server.url}{path}")
    assert response is not None and response.status == 200, (path, response and response.status)
    page.wait_for_load_state("networkidle")


def _critical(page: Any) -> list[str]:
    """The rules axe-core finds critical violations of on the page, each with its first
    offending element."""
    results = axe_playwright.Axe().run(page)
    found = []
    for violation in results.response["violations"]:
        if violation.get("impact") == "critical":
            target = violation["nodes"][0]["target"] if violation["nodes"] else "?"
            found.append(f"{violation['id']} ×{len(violation['nodes'])} (first: {target})")
    return found


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_no_page_has_a_critical_accessibility_violation(
    browser: Any, live_server: Any, users: dict[str, Any], fleet_with_plans: Any
) -> None:
    pages = _pages(*fleet_with_plans)
    problems: dict[str, list[str]] = {}
    anonymous = _context(browser, WIDE).new_page()
    _visit(anonymous, live_server, "/login/")
    if found := _critical(anonymous):
        problems["login"] = found
    anonymous.context.close()
    page = _login(browser, live_server, WIDE)
    for name, path in pages.items():
        _visit(page, live_server, path)
        if found := _critical(page):
            problems[name] = found
    page.context.close()
    assert not problems, "critical axe-core violations:\n" + "\n".join(
        f"{name}: {'; '.join(rules)}" for name, rules in problems.items()
    )


def test_every_page_fits_400_px_and_prints_rounded_figures(
    browser: Any, live_server: Any, users: dict[str, Any], fleet_with_plans: Any
) -> None:
    pages = {"login": "/login/", **_pages(*fleet_with_plans)}
    too_wide: dict[str, int] = {}
    residue: dict[str, list[str]] = {}
    for width in (WIDE, NARROW):
        anonymous = _context(browser, width).new_page()
        page = _login(browser, live_server, width)
        for name, path in pages.items():
            current = anonymous if name == "login" else page
            _visit(current, live_server, path)
            _shot(current, f"reach-{name}-{width}px")
            scroll = current.evaluate("document.documentElement.scrollWidth")
            inner = current.evaluate("window.innerWidth")
            if scroll > inner:
                too_wide[f"{name} at {width} px"] = scroll
            if width == WIDE:
                # Figures in text and in form fields the admin shows read-only or editable.
                text = (
                    current.inner_text("body")
                    + " "
                    + " ".join(
                        current.eval_on_selector_all(
                            "input:not([type=hidden])", "els => els.map(e => e.value)"
                        )
                    )
                )
                if found := sorted(set(RESIDUE.findall(text))):
                    residue[name] = found
        anonymous.context.close()
        page.context.close()
    assert not too_wide, f"pages wider than the screen (scrollWidth): {too_wide}"
    assert not residue, f"unrounded figures: {residue}"
