"""Without a broker, a task that starts Ray runs in a child process: nothing it does ends the
process that sent it, and a child that dies fails its run with the reason."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from controlplane.benchmarks.models import BenchmarkRun
from controlplane.benchmarks.services import ENGINE_TASK, benchmark_run_request
from controlplane.celery import app
from controlplane.core import isolated
from controlplane.core import tasks as core_tasks
from controlplane.fleet.models import ReplicaShape
from tests.controlplane.plans_helpers import load_support_assistant


def test_the_ray_tasks_are_declared_isolated() -> None:
    for name in ("headroom.benchmarks.engine", "headroom.benchmarks.endpoint"):
        assert app.tasks[name].isolated is True
        assert callable(app.tasks[name].isolated_exit)


def test_without_a_broker_an_isolated_task_is_handed_to_a_child(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.HEADROOM_ISOLATE_TASKS = True
    handed: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(
        core_tasks, "run_in_child", lambda name, args, **kw: handed.append((name, tuple(args)))
    )
    ran: list[int] = []
    monkeypatch.setattr(app.tasks[ENGINE_TASK], "run", lambda run_id: ran.append(run_id))
    core_tasks.task_send(ENGINE_TASK, 41)
    assert handed == [(ENGINE_TASK, (41,))]
    assert ran == []  # nothing ran in the sender


@pytest.mark.parametrize(
    ("code", "words"),
    [("import os; os.abort()", "killed by SIGABRT"), ("import sys; sys.exit(3)", "status 3")],
)
def test_a_child_that_dies_is_reported_with_the_reason(
    code: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(isolated, "command", lambda name, args: [sys.executable, "-c", code])
    reported: list[tuple[Any, str]] = []
    done = threading.Event()

    def on_exit(args: Any, reason: str) -> None:
        reported.append((list(args), reason))
        done.set()

    isolated.run_in_child("any", [7], on_exit=on_exit, time_limit_s=60).join(timeout=60)
    assert done.is_set()
    assert reported[0][0] == [7]
    assert words in reported[0][1]


def test_a_child_past_its_time_limit_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        isolated,
        "command",
        lambda name, args: [sys.executable, "-c", "import time; time.sleep(30)"],
    )
    reasons: list[str] = []
    isolated.run_in_child(
        "any", [], on_exit=lambda args, reason: reasons.append(reason), time_limit_s=0.5
    ).join(timeout=60)
    assert reasons and "time limit of 0.5 s" in reasons[0]


def test_a_clean_exit_reports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolated, "command", lambda name, args: [sys.executable, "-c", "pass"])
    reasons: list[str] = []
    isolated.run_in_child(
        "any", [], on_exit=lambda args, reason: reasons.append(reason), time_limit_s=60
    ).join(timeout=60)
    assert reasons == []


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_process_died_fails_with_the_reason_and_keeps_the_figures() -> None:
    load_support_assistant()
    shape = ReplicaShape.objects.order_by("pk").first()
    assert shape is not None
    figures_before = list(shape.figures.values_list("pk", flat=True))
    run, _ = benchmark_run_request(shape=shape, enqueue=False)
    app.tasks[ENGINE_TASK].isolated_exit([run.pk], isolated.exit_reason(-9, "Failed to connect"))
    run.refresh_from_db()
    assert run.status == BenchmarkRun.Status.FAILED
    assert "killed by SIGKILL" in run.error and "Failed to connect" in run.error
    assert list(shape.figures.values_list("pk", flat=True)) == figures_before
