"""The bounded pool of child processes that drains a queue without a broker: at most its size
at once, a child after every kick that finds work, none when there is none."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from controlplane.core import isolated


def _wait_idle(pool: isolated.ChildPool, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while pool.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.alive == 0


def test_at_most_size_children_at_once_and_one_after_the_last_kick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each child appends its start and end to a log, holding for a moment.
    log = tmp_path / "log"
    code = (
        "import sys, time; f = open(sys.argv[1], 'a'); f.write('start\\n'); f.flush(); "
        "time.sleep(0.2); f.write('end\\n')"
    )
    monkeypatch.setattr(
        isolated, "command", lambda name, args: [sys.executable, "-c", code, str(log)]
    )
    pool = isolated.ChildPool("drain", start=lambda: [], size=lambda: 1, time_limit_s=lambda: 60)
    pool.kick()
    deadline = time.monotonic() + 30
    while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    # Kicks while the first child runs: folded into one more child after it, not four.
    for _ in range(4):
        pool.kick()
    assert pool.alive == 1
    _wait_idle(pool)
    lines = log.read_text().split()
    # One at a time: every start is followed by its end before the next start.
    assert lines == ["start", "end", "start", "end"]
    # A kick after the queue went idle starts a child again.
    pool.kick()
    _wait_idle(pool)
    assert len(log.read_text().split()) // 2 == 3


def test_no_child_when_none_would_find_work(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Any] = []
    monkeypatch.setattr(isolated, "_run_child", lambda *a, **kw: started.append(a))
    pool = isolated.ChildPool("drain", start=lambda: None, size=lambda: 2, time_limit_s=lambda: 60)
    pool.kick()
    _wait_idle(pool)
    assert started == []


def test_children_are_niced_before_they_import_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    code = "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"
    monkeypatch.setattr(isolated, "command", lambda name, args: [sys.executable, "-c", code])
    real_run = isolated.subprocess.run

    def run(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["env"].get(isolated.NICE_ENV, ""))
        return real_run(*args, **kwargs)

    monkeypatch.setattr(isolated.subprocess, "run", run)
    pool = isolated.ChildPool(
        "drain", start=lambda: [], size=lambda: 1, time_limit_s=lambda: 60, nice=lambda: 7
    )
    pool.kick()
    _wait_idle(pool)
    assert seen == ["7"]


def test_the_child_entry_point_takes_the_niceness_first(monkeypatch: pytest.MonkeyPatch) -> None:
    niced: list[int] = []
    monkeypatch.setenv(isolated.NICE_ENV, "5")
    monkeypatch.setattr(isolated.os, "nice", lambda n: niced.append(n))

    class Stop(Exception):
        pass

    def setup() -> None:
        raise Stop

    monkeypatch.setattr(isolated.django, "setup", setup)
    with pytest.raises(Stop):
        isolated.main(["any", "[]"])
    assert niced == [5]


def test_a_kick_racing_the_end_of_a_child_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    # The child "ends" only when the test says so; a kick lands just before it ends.
    release = threading.Event()
    runs: list[int] = []

    def child(*args: Any, **kwargs: Any) -> None:
        runs.append(1)
        if len(runs) == 1:
            release.wait(10)

    monkeypatch.setattr(isolated, "_run_child", child)
    pool = isolated.ChildPool("drain", start=lambda: [], size=lambda: 1, time_limit_s=lambda: 60)
    pool.kick()
    deadline = time.monotonic() + 10
    while not runs and time.monotonic() < deadline:
        time.sleep(0.01)
    pool.kick()
    release.set()
    _wait_idle(pool)
    assert len(runs) == 2
