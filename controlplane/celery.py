"""The Celery app. Configuration comes from Django settings (``CELERY_*``).

Without ``CELERY_BROKER_URL`` tasks run in-process (``task_always_eager``), which is the
embedded default; with a broker (Redis in production, RabbitMQ also works) they run on
``celery -A workers worker`` and the schedule on ``celery -A workers beat`` (``workers/celery.py``
starts processes from this app).

Each app's tasks live in its ``tasks.py``, registered when the app is ready (its
``AppConfig.ready``) and, in a worker, by autodiscovery over ``INSTALLED_APPS``. Services
enqueue a task by its name (``controlplane.core.tasks.task_send``), so no service imports a
task module.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("headroom")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="headroom.health.ping")
def ping() -> str:
    """Round trip through the broker; operators use it to check that workers are consuming."""
    return "pong"
