"""Celery runs each task once, and only for committed work.

- Late acknowledgement and rejection on worker loss: a task whose worker dies is redelivered,
  not lost; one message at a time per worker process (prefetch 1), so a long task does not hold
  others back.
- Every task stops within the time limit, and the broker's visibility timeout outlasts the
  longest run plus the longest retry countdown: otherwise Redis would hand a slow task, still
  running, to a second worker.
- Tasks take ids (plain numbers or timestamps), never records, and are sent only once the
  transaction that wrote their rows commits: a rolled-back request sends nothing.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from celery.app.task import Task
from django.conf import settings
from django.db import transaction

from controlplane.benchmarks.conf import benchmark_settings
from controlplane.benchmarks.services import benchmark_run_request
from controlplane.celery import app
from controlplane.fleet.models import ReplicaShape
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.services import replan_request
from tests.controlplane.plans_helpers import load_support_assistant

OURS = "headroom."


def our_tasks() -> dict[str, Any]:
    return {name: task for name, task in app.tasks.items() if name.startswith(OURS)}


def test_acknowledged_late_rejected_on_loss_one_message_at_a_time() -> None:
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1
    for name, task in our_tasks().items():
        assert task.acks_late is not False, name
        assert task.reject_on_worker_lost is not False, name


def test_every_task_has_a_time_limit_the_visibility_timeout_outlasts() -> None:
    visibility = app.conf.broker_transport_options["visibility_timeout"]
    tasks = our_tasks()
    assert len(tasks) >= 8  # pull, derive, re-plan (2), dispatch, benchmarks (3), ping
    for name, task in tasks.items():
        hard = task.time_limit or app.conf.task_time_limit
        soft = task.soft_time_limit or app.conf.task_soft_time_limit
        assert hard is not None and soft is not None and soft < hard, name
        backoff = getattr(task, "retry_backoff_max", 0) if getattr(task, "retry_backoff", 0) else 0
        countdown = max(backoff, task.default_retry_delay or 0)
        assert countdown <= settings.HEADROOM_MAX_RETRY_COUNTDOWN_S, name
        assert visibility > hard + countdown, name


def test_a_benchmark_run_ends_by_its_own_timeout_before_the_task_limit() -> None:
    assert benchmark_settings().timeout_s < app.conf.task_soft_time_limit


def _parameter_types(task: Any) -> dict[str, Any]:
    run = inspect.unwrap(task.run)
    hints = typing.get_type_hints(run)
    names = [p for p in inspect.signature(run).parameters if p != "self"]
    return {name: hints.get(name) for name in names}


def test_tasks_take_ids_not_records() -> None:
    plain = {int, str, bool, type(None)}  # ids, counts, times, flags: never records
    for name, task in our_tasks().items():
        for parameter, hint in _parameter_types(task).items():
            assert hint is not None, f"{name}({parameter}) is not annotated"
            kinds = set(typing.get_args(hint)) or {hint}
            assert kinds <= plain, (
                f"{name}({parameter}: {hint}) is not an id, a count, a time or a flag"
            )


@pytest.fixture
def sent() -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    calls: list[tuple[str, tuple[Any, ...]]] = []

    def delay(task: Task, *args: Any, **kwargs: Any) -> None:
        calls.append((task.name, args))

    with mock.patch.object(Task, "delay", delay):
        yield calls


@pytest.mark.django_db(transaction=True)
def test_a_re_plan_is_sent_only_when_its_run_is_committed(sent: list[Any]) -> None:
    with transaction.atomic():
        run = replan_request(trigger=Plan.Trigger.API)
        assert sent == []  # inside the transaction: the worker could not see the row yet
    assert sent == [("headroom.plans.replan", (run.pk,))]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_request_sends_nothing(sent: list[Any]) -> None:
    load_support_assistant()
    shape = ReplicaShape.objects.order_by("pk").first()
    assert shape is not None

    class Refused(Exception):
        pass

    with pytest.raises(Refused), transaction.atomic():
        replan_request(trigger=Plan.Trigger.API)
        benchmark_run_request(shape=shape)
        raise Refused
    assert sent == []
    assert not ReplanRun.objects.exists()
