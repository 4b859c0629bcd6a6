"""Fixtures of the browser tests: Debian's Chromium driven headless by Playwright for Python
(Playwright's own browser download is not used), and the marks every browser test module
takes (``pytestmark = BROWSER_MARKS``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("HEADROOM_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

# Transactional: the live server reads what the test writes.
BROWSER_MARKS = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists(),
        reason=f"Chromium not found at {CHROMIUM} (apt-get install chromium)",
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for a test module."""
    playwright_sync = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
    # between browser steps are ordinary synchronous ones. Only while these tests run: the
    # variable would leak into later tests' subprocesses (check --deploy refuses it).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with playwright_sync.sync_playwright() as p:
            instance = p.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            yield instance
            instance.close()


@pytest.fixture
def _fast_password_hasher(settings: Any) -> None:
    """Creating and logging in users with the production hasher costs seconds each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def users(_fast_password_hasher: None) -> dict[str, Any]:
    """A policy admin (staff, so the admin too), a viewer and a finance user; each one's
    password is ``pw-`` and the username."""
    from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
    from tests.controlplane.conftest import make_user

    return {
        POLICY_ADMIN: make_user("admin-user", POLICY_ADMIN, staff=True),
        VIEWER: make_user("viewer-user", VIEWER),
        FINANCE: make_user("finance-user", FINANCE),
    }


@pytest.fixture
def fleet_with_plans() -> tuple[Any, Any]:
    """The shipped scenario: v1 active, observations and a drift alert for one tenant, and
    v2 (no GPUs left in us-east) awaiting approval."""
    from tests.controlplane.web_support import active_and_awaiting_plans

    return active_and_awaiting_plans()


@pytest.fixture(autouse=True)
def _role_groups(transactional_db: None) -> None:
    """The role groups and their permissions, as the data migrations make them.

    A transactional test's flush deletes every row, the migrations' included, so a browser
    test after another transactional test would find its policy admin without any admin
    permission. The migrations' own functions run again here (each is idempotent), in the
    order the migration graph gives.
    """
    from django.apps import apps
    from django.db import connection
    from django.db.migrations.loader import MigrationLoader
    from django.db.migrations.operations.special import RunPython

    loader = MigrationLoader(connection, ignore_no_migrations=True)
    editor = type("Editor", (), {"connection": connection})()
    plan: list[tuple[str, str]] = []
    for leaf in loader.graph.leaf_nodes():
        plan += [node for node in loader.graph.forwards_plan(leaf) if node not in plan]
    for key in plan:
        if not key[0].startswith(("policies", "plans", "telemetry", "emission", "benchmarks")):
            continue
        if "role" not in key[1] and "permission" not in key[1]:
            continue
        for operation in loader.graph.nodes[key].operations:
            if isinstance(operation, RunPython):
                # The live app registry stands in for the migration state's (the same models).
                operation.code(apps, editor)  # type: ignore[arg-type]
