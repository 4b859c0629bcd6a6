"""The beat schedule (``manage.py install_schedule``) and the telemetry settings."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from controlplane.telemetry.conf import LabelConfig, telemetry_settings
from workers.celery import app


def _install(*args: str) -> str:
    out = StringIO()
    call_command("install_schedule", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_install_schedule_creates_the_periodic_tasks_once(settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_BUCKET_S = 300
    first = _install()
    assert "created 'telemetry: pull from Prometheus'" in first
    tasks = {t.name: t for t in PeriodicTask.objects.all()}
    pull = tasks["telemetry: pull from Prometheus"]
    derive = tasks["telemetry: derive workload profiles"]
    assert pull.task == "headroom.telemetry.pull" and pull.enabled
    assert (pull.interval.every, pull.interval.period) == (300, IntervalSchedule.SECONDS)
    assert derive.task == "headroom.telemetry.derive_profiles"
    assert derive.interval.every == 3600
    # The task names are those the apps register (their ``tasks.py``).
    app.loader.import_default_modules()
    assert {pull.task, derive.task} <= set(app.tasks)

    # Run again: nothing changes, and an admin's edit is kept.
    pull.interval = IntervalSchedule.objects.create(every=600, period=IntervalSchedule.SECONDS)
    pull.enabled = False
    pull.save()
    assert "kept 'telemetry: pull from Prometheus' as it is" in _install()
    assert PeriodicTask.objects.filter(task__startswith="headroom.telemetry.").count() == 2
    pull.refresh_from_db()
    assert (pull.interval.every, pull.enabled) == (600, False)

    # --reset puts it back.
    assert "reset 'telemetry: pull from Prometheus'" in _install("--reset")
    pull.refresh_from_db()
    assert (pull.interval.every, pull.enabled) == (300, True)


def test_beat_uses_the_database_schedule() -> None:
    assert app.conf.beat_scheduler == "django_celery_beat.schedulers:DatabaseScheduler"


def test_defaults(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(vars(settings._wrapped)):
        if name.startswith(("HEADROOM_TELEMETRY_", "HEADROOM_PROMETHEUS_")):
            delattr(settings, name)
    for name in (
        "HEADROOM_PROMETHEUS_URL",
        "HEADROOM_TELEMETRY_LABELS",
        "HEADROOM_TELEMETRY_BUCKET_S",
    ):
        monkeypatch.delenv(name, raising=False)
    conf = telemetry_settings()
    assert conf.prometheus_url == "http://127.0.0.1:9090"
    assert conf.bucket_s == 60 and conf.peak_s == 60 and conf.engine == "vllm-v1"
    assert conf.labels == LabelConfig("tenant", "model_name", "region", None)
    assert conf.drift.prompt_mean_rel == 0.25 and conf.drift.token_share_abs == 0.10


def test_environment_is_read_when_settings_say_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_TELEMETRY_LABELS", "tenant=customer, class=request_class")
    monkeypatch.setenv("HEADROOM_TELEMETRY_BUCKET_S", "60")
    monkeypatch.setenv("HEADROOM_PROMETHEUS_URL", "https://prometheus.example:9090")
    conf = telemetry_settings()
    assert conf.labels == LabelConfig("customer", "model_name", "region", "request_class")
    assert conf.labels.names == ("customer", "model_name", "region", "request_class")
    assert conf.bucket_s == 60
    assert conf.prometheus_url == "https://prometheus.example:9090"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("HEADROOM_TELEMETRY_BUCKET_S", "five", "must be a whole number"),
        ("HEADROOM_TELEMETRY_BUCKET_S", "0", "must be positive"),
        ("HEADROOM_PROMETHEUS_URL", "prometheus:9090", "http"),
        ("HEADROOM_TELEMETRY_LABELS", "tenant", "role=label"),
        ("HEADROOM_TELEMETRY_LABELS", "pod=pod_name", "unknown roles"),
        ("HEADROOM_TELEMETRY_LABELS", "tenant=region", "its own label"),
        ("HEADROOM_TELEMETRY_LABELS", "tenant=le", "not a label name"),
        ("HEADROOM_TELEMETRY_LABELS", "tenant=te nant", "not a label name"),
        ("HEADROOM_TELEMETRY_DRIFT_PROMPT_MEAN", "-0.1", "must be positive"),
    ],
)
def test_malformed_values_fail_loudly(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=message):
        telemetry_settings()


@pytest.mark.django_db
def test_install_schedule_installs_every_part_once_and_resets_a_part() -> None:
    from controlplane.pipeline.schedule import headroom_schedule

    wanted = {t.name: t for t in headroom_schedule()}
    assert set(wanted) == {
        "telemetry: pull from Prometheus",
        "telemetry: derive workload profiles",
        "plans: re-plan",
        "emission: dispatch the outbox",
        "benchmarks: measure shapes with stale capacity figures",
        "jobs: re-send or fail jobs no worker finished",
    }
    _install()
    _install()
    for name, entry in wanted.items():
        task = PeriodicTask.objects.get(name=name)
        assert (task.task, task.interval.every, task.enabled) == (entry.task, entry.every_s, True)
    # Every task named is one Celery registers.
    app.loader.import_default_modules()
    assert {t.task for t in wanted.values()} <= set(app.tasks)

    replan = PeriodicTask.objects.get(name="plans: re-plan")
    replan.enabled = False
    replan.save()
    out = _install("--only", "plans", "--reset")
    assert out.splitlines() == [
        "reset 'plans: re-plan': headroom.plans.replan_scheduled every 3600 s"
    ]
    replan.refresh_from_db()
    assert replan.enabled


@pytest.mark.django_db
def test_the_migrations_create_the_same_plans_emission_and_recovery_entries() -> None:
    import importlib

    from controlplane.pipeline.schedule import headroom_schedule

    for module, part in (
        ("controlplane.plans.migrations.0004_replan_schedule", "plans"),
        ("controlplane.emission.migrations.0003_dispatch_schedule", "emission"),
        ("controlplane.core.migrations.0002_recovery_schedule", "recovery"),
    ):
        migration = importlib.import_module(module)
        (entry,) = headroom_schedule([part])
        assert (migration.TASK_NAME, migration.TASK, migration.EVERY_S) == (
            entry.name,
            entry.task,
            entry.every_s,
        )


def test_install_schedule_refuses_an_unknown_part() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="unknown part forecasts") as raised:
        _install("--only", "forecasts")
    assert raised.value.returncode == 2
