"""Settings every test shares."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _tasks_in_process(settings: Any) -> None:
    # Isolated tasks (controlplane/core/isolated.py) would run in a child process that cannot
    # see the test database; tests run them in-process, and the isolation test turns it back on.
    settings.HEADROOM_ISOLATE_TASKS = False
