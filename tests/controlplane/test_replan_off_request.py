"""Without a broker, a re-plan asked for over the API runs in a child process, not in the
request; a child that dies fails its run with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.celery import app
from controlplane.core import tasks as core_tasks
from controlplane.core.roles import POLICY_ADMIN
from controlplane.plans.models import ReplanRun
from controlplane.plans.services import REPLAN_TASK
from tests.controlplane.plans_helpers import load_support_assistant

pytestmark = pytest.mark.django_db


def test_the_replan_task_is_isolated() -> None:
    assert app.tasks[REPLAN_TASK].isolated is True
    assert callable(app.tasks[REPLAN_TASK].isolated_exit)


def test_an_api_replan_answers_queued_and_is_solved_in_a_child(
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    api_client_for: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    load_support_assistant()
    settings.HEADROOM_ISOLATE_TASKS = True
    handed: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(
        core_tasks, "run_in_child", lambda name, args, **kw: handed.append((name, tuple(args)))
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = api_client_for(POLICY_ADMIN).post("/api/plans/replan/", {}, format="json")
    assert response.status_code == 202
    run = ReplanRun.objects.get()
    assert response.json()["status"] == "queued" and run.status == ReplanRun.Status.QUEUED
    assert handed == [(REPLAN_TASK, (run.pk,))]
    # The child's process dies before the run ends: the run fails, saying why.
    app.tasks[REPLAN_TASK].isolated_exit((run.pk,), "the task's process was killed by SIGKILL")
    run.refresh_from_db()
    assert run.status == ReplanRun.Status.FAILED
    assert "process ended before it finished" in run.error and "SIGKILL" in run.error
