"""Enqueueing a task by name.

A service that hands work to a worker calls ``task_send`` from ``transaction.on_commit``, so
the task never runs before the row it names is committed. The task is looked up by name in
the Celery app, where its app's ``tasks.py`` registered it: services never import task
modules (tasks import services, not the other way round). Without a broker the task runs
in-process (eager), as every task does by default, except a task declared ``isolated`` (one
that starts Ray), which runs in a child process so that nothing it does can end the sender.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from controlplane.celery import app
from controlplane.core.isolated import run_in_child


def task_send(name: str, *args: Any) -> None:
    """Send the task ``name`` with ``args`` now.

    Without a broker a task declared ``isolated`` runs in a child process of its own
    (``controlplane.core.isolated``) instead of in the sender's thread.
    """
    task = app.tasks[name]
    if (
        app.conf.task_always_eager
        and getattr(task, "isolated", False)
        and settings.HEADROOM_ISOLATE_TASKS
    ):
        run_in_child(
            name,
            args,
            on_exit=getattr(task, "isolated_exit", None),
            time_limit_s=float(task.time_limit or app.conf.task_time_limit),
        )
        return
    task.delay(*args)


def task_send_on_commit(name: str, *args: Any, robust: bool = False) -> None:
    """Send the task ``name`` with ``args`` once the current transaction commits (at once
    outside one). ``robust``: a failure to send is logged, not raised (the periodic run is the
    safety net)."""
    transaction.on_commit(lambda: task_send(name, *args), robust=robust)
