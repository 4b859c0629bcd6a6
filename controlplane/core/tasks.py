"""Enqueueing a task by name.

A service that hands work to a worker calls ``task_send`` from ``transaction.on_commit``, so
the task never runs before the row it names is committed. The task is looked up by name in
the Celery app, where its app's ``tasks.py`` registered it: services never import task
modules (tasks import services, not the other way round). Without a broker the task runs
in-process (eager), as every task does by default.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from controlplane.celery import app


def task_send(name: str, *args: Any) -> None:
    """Send the task ``name`` with ``args`` now."""
    app.tasks[name].delay(*args)


def task_send_on_commit(name: str, *args: Any, robust: bool = False) -> None:
    """Send the task ``name`` with ``args`` once the current transaction commits (at once
    outside one). ``robust``: a failure to send is logged, not raised (the periodic run is the
    safety net)."""
    transaction.on_commit(lambda: task_send(name, *args), robust=robust)
