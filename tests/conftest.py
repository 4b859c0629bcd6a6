"""Settings every test shares."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _tasks_in_process(settings: Any) -> None:
    # Isolated tasks (controlplane/core/isolated.py) would run in a child process that cannot
    # see the test database; tests run them in-process, and the isolation test turns it back on.
    settings.HEADROOM_ISOLATE_TASKS = False


@pytest.fixture(autouse=True)
def _no_finance_warm_up(settings: Any) -> None:
    # Each activation would compute the plan's finance snapshot and reports at once (tasks run
    # in process without a broker), in every test that activates a plan. The warm-up's own
    # tests (tests/controlplane/test_finance_warm.py) turn it back on.
    settings.HEADROOM_FINANCE_WARM = False
