"""The hourly re-plan is on Celery beat's database schedule, once, naming a registered task."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection
from django_celery_beat.models import PeriodicTask

from workers.celery import app

pytestmark = pytest.mark.django_db

schedule = importlib.import_module("controlplane.plans.migrations.0004_replan_schedule")


def _install() -> None:
    schedule.install(apps, SimpleNamespace(connection=connection))


def test_the_schedule_is_installed_once_and_an_edited_task_is_kept() -> None:
    PeriodicTask.objects.filter(name=schedule.TASK_NAME).delete()

    _install()
    task = PeriodicTask.objects.get(name=schedule.TASK_NAME)
    assert task.enabled and task.interval is not None
    assert (task.interval.every, task.interval.period) == (3600, "seconds")

    task.enabled = False
    task.save()
    _install()
    assert PeriodicTask.objects.filter(name=schedule.TASK_NAME).count() == 1
    assert not PeriodicTask.objects.get(name=schedule.TASK_NAME).enabled


def test_the_scheduled_task_is_registered_with_celery() -> None:
    app.loader.import_default_modules()
    assert schedule.TASK in app.tasks
    assert "headroom.plans.replan" in app.tasks
