"""Enqueueing a task by name.

A service that hands work to a worker calls ``task_send`` from ``transaction.on_commit``, so
the task never runs before the row it names is committed. The task is looked up by name in
the Celery app, where its app's ``tasks.py`` registered it: services never import task
modules (tasks import services, not the other way round). Without a broker the task runs
in-process (eager), as every task does by default, except a task declared ``isolated`` (one
that starts Ray), which runs in a child process so that nothing it does can end the sender.

With a broker, a send that fails (the broker unreachable after kombu's own retries) raises
``BrokerUnavailable``: the API answers it 503 with ``Retry-After``. A job's task is sent with
``job_send_on_commit``, which also fails the job row with the reason.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction

from controlplane.celery import app
from controlplane.core.isolated import run_in_child
from controlplane.core.jobs import Job, job_fail
from controlplane.core.outage import BROKER_ERRORS, DATABASE_ERRORS, BrokerUnavailable, log_outage

logger = logging.getLogger(__name__)


def task_send(name: str, *args: Any) -> None:
    """Send the task ``name`` with ``args`` now.

    Without a broker a task declared ``isolated`` runs in a child process of its own
    (``controlplane.core.isolated``) instead of in the sender's thread. With a broker that
    cannot be reached: ``BrokerUnavailable``.
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
    if app.conf.task_always_eager:
        # In-process: what the task raises is the task's own error, not the broker's.
        task.delay(*args)
        return
    try:
        task.delay(*args)
    except BROKER_ERRORS as exc:
        raise BrokerUnavailable(f"sending {name}: {type(exc).__name__}: {exc}") from exc


def task_send_on_commit(name: str, *args: Any, robust: bool = False) -> None:
    """Send the task ``name`` with ``args`` once the current transaction commits (at once
    outside one). ``robust``: a failure to send is logged, not raised (the periodic run is the
    safety net)."""
    transaction.on_commit(lambda: task_send(name, *args), robust=robust)


def job_send(model: type[Job], job_id: int, name: str, *args: Any) -> None:
    """Send the task ``name`` (``args``) of the job ``job_id`` now; if the broker is
    unreachable, fail the still-queued row with the reason and raise ``BrokerUnavailable``."""
    try:
        task_send(name, *args)
    except BrokerUnavailable as exc:
        log_outage(exc, f"queueing {model._meta.label} {job_id}")
        try:
            job_fail(
                model,
                job_id,
                "Could not be queued: the task queue (broker) was unreachable. "
                "Request it again once the broker is back.",
            )
        except DATABASE_ERRORS:
            # The database is down too: the row stays queued; the recovery sweep re-sends it.
            logger.warning("%s %s stays queued for the recovery sweep", model._meta.label, job_id)
        raise


def job_send_on_commit(model: type[Job], job_id: int, name: str, *args: Any) -> None:
    """``job_send`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: job_send(model, job_id, name, *args))
