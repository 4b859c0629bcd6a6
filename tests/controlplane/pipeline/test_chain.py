"""The job pipeline, with tasks run in-process: a pull that stored samples derives profiles, and
a derivation that raised drift alerts re-plans (trigger ``drift``); each step can be turned off,
and nothing is re-planned when no new alert was raised.

A stand-in Prometheus serves two tenants of the support-assistant scenario at a steady 2
requests/s each; from ``DRIFT_AT`` on, every prompt is 1,200 tokens longer (the seeds' Friday
review: retrieval top-4 → top-8).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from controlplane.pipeline import tasks
from controlplane.pipeline.services import after_derivation
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.services import drift_reason, trigger_sentence
from controlplane.telemetry.drift import drift_alerts_raised
from controlplane.telemetry.metrics import (
    E2E_HIST,
    GENERATION_TOKENS,
    KV_USAGE,
    OUTPUT_HIST,
    PREEMPTIONS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_HIST,
    PROMPT_TOKENS,
    REQUESTS,
    RUNNING,
    TTFT_HIST,
    WAITING,
)
from controlplane.telemetry.models import DriftAlert, ProfileDerivation, RunStatus
from controlplane.telemetry.pull import telemetry_pull
from tests.controlplane.plans_helpers import load_support_assistant, run_replan
from tests.controlplane.telemetry_fakes import FakePrometheus, fake_prometheus

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[3]
W = 300
T0 = datetime(2025, 3, 7, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
DRIFT_AT = T0 + HOUR
RATE = 2.0  # requests/s per tenant
PROMPT_MEAN, EXTRA_PROMPT = 1500.0, 1200.0
STREAMS = (("keystone-mutual", "us-east"), ("nordlicht-versicherung", "eu-west"))


def _register(fake: FakePrometheus, tenant: str, region: str) -> None:
    """Every pulled metric of one tenant's traffic; values are per 5-minute bucket, the bucket
    ending at ``t``. Histogram buckets are fixed; the prompt mean comes from ``_sum``."""
    labels = {"tenant": tenant, "model_name": "chat-70b", "region": region}
    n = RATE * W
    drift = DRIFT_AT.timestamp()

    def prompt_mean(t: float) -> float:
        return PROMPT_MEAN + (EXTRA_PROMPT if t > drift else 0.0)

    histograms = {
        PROMPT_HIST: ({"1000": 0.5, "2000": 0.8, "4000": 0.95, "8000": 0.99}, None),
        OUTPUT_HIST: ({"50": 0.3, "100": 0.7, "200": 0.9, "500": 0.99}, 100.0),
        TTFT_HIST: ({"0.5": 0.5, "1": 0.9, "2.5": 0.99}, 0.6),
        E2E_HIST: ({"2": 0.3, "5": 0.7, "10": 0.95}, 4.0),
    }
    for family, (shares, mean) in histograms.items():
        for le, share in {**shares, "+Inf": 1.0}.items():
            fake.add(f"{family}_bucket", {**labels, "le": le}, lambda t, s=share: s * n)
        fake.add(f"{family}_count", labels, lambda t: n)
        if mean is None:
            fake.add(f"{family}_sum", labels, lambda t: prompt_mean(t) * n)
        else:
            fake.add(f"{family}_sum", labels, lambda t, m=mean: m * n)
    counters = {
        REQUESTS: lambda t: n,
        PROMPT_TOKENS: lambda t: prompt_mean(t) * n,
        GENERATION_TOKENS: lambda t: 100.0 * n,
        PREFIX_QUERIES: lambda t: prompt_mean(t) * n,
        PREFIX_HITS: lambda t: 0.35 * prompt_mean(t) * n,
        PREEMPTIONS: lambda t: 0.0,
        RUNNING: lambda t: 8.0,
        WAITING: lambda t: 0.0,
        KV_USAGE: lambda t: 0.3,
    }
    for metric, value in counters.items():
        fake.add(metric, labels, value)


@pytest.fixture
def prom(settings: Any) -> Iterator[FakePrometheus]:
    with fake_prometheus() as fake:
        settings.HEADROOM_PROMETHEUS_URL = fake.url
        settings.HEADROOM_PROMETHEUS_RETRIES = 0
        settings.HEADROOM_PROMETHEUS_TIMEOUT_S = 5
        settings.HEADROOM_TELEMETRY_BUCKET_S = W
        settings.HEADROOM_TELEMETRY_PROFILE_WINDOW_S = 3600
        settings.HEADROOM_REPLAN_TIME_LIMIT_S = 3
        settings.HEADROOM_TELEMETRY_DERIVE_AFTER_PULL = True
        settings.HEADROOM_REPLAN_ON_DRIFT = True
        load_support_assistant()
        for tenant, region in STREAMS:
            _register(fake, tenant, region)
        yield fake


def _pull(start: datetime, end: datetime, on_commit: Any) -> dict[str, Any]:
    """The pull task over [start, end), run in-process with its on-commit work."""
    with on_commit(execute=True):
        result = tasks.pull.apply(
            kwargs={"window_start": start.isoformat(), "window_end": end.isoformat()}
        )
    assert result.successful(), result.traceback
    summary: dict[str, Any] = result.get()
    return summary


def _gpus(plan: Plan) -> int:
    return sum(row.replicas * row.gpus_per_replica for row in plan.allocations.all())


def _baseline(on_commit: Any) -> Plan:
    """Pull and derive the hour before the drift, then re-plan once: plan v1."""
    summary = _pull(T0, DRIFT_AT, on_commit)
    assert summary["status"] == RunStatus.SUCCEEDED and summary["derivation_enqueued"]
    derivation = ProfileDerivation.objects.get()
    assert (derivation.status, derivation.profiles_created) == (RunStatus.SUCCEEDED, 2)
    assert (derivation.window_start, derivation.window_end) == (T0, DRIFT_AT)
    assert not DriftAlert.objects.exists() and not ReplanRun.objects.exists()
    run = run_replan()
    assert run.status == ReplanRun.Status.SUCCEEDED and run.plan is not None
    return run.plan


def test_prompt_growth_is_pulled_derived_alerted_and_re_planned(
    prom: FakePrometheus, django_capture_on_commit_callbacks: Any
) -> None:
    first = _baseline(django_capture_on_commit_callbacks)

    summary = _pull(DRIFT_AT, DRIFT_AT + HOUR, django_capture_on_commit_callbacks)
    assert summary["derivation_enqueued"]
    derivation = ProfileDerivation.objects.order_by("-pk").first()
    assert derivation is not None and derivation.window_end == DRIFT_AT + HOUR
    prompt_alerts = DriftAlert.objects.filter(kind=DriftAlert.Kind.PROMPT_MEAN)
    assert {(a.tenant.name, a.region.name) for a in prompt_alerts} == set(STREAMS)
    assert derivation.alerts_raised == DriftAlert.objects.count() >= 2

    run = ReplanRun.objects.get(trigger=Plan.Trigger.DRIFT)
    assert run.status == ReplanRun.Status.SUCCEEDED, run.error
    alerts = list(DriftAlert.objects.order_by("pk"))
    assert run.reason == drift_reason(alerts)
    assert all(f"#{a.pk}" in run.reason for a in alerts)
    second = run.plan
    assert second is not None and second.version == first.version + 1
    assert (second.trigger, second.state) == (Plan.Trigger.DRIFT, Plan.State.ACTIVE)
    assert second.explanation["trigger"] == f"Trigger: drift alert. {run.reason}"
    assert first.explanation["trigger"] == "Trigger: command line."
    # Longer prompts at the same rate need more GPUs. (Per region the counts need not both
    # grow: tenants allowed to spill may be routed differently.)
    assert _gpus(second) > _gpus(first)
    assert second.cost_per_hour is not None and first.cost_per_hour is not None
    assert second.cost_per_hour > first.cost_per_hour


def test_an_alert_seen_again_requests_no_second_re_plan(
    prom: FakePrometheus, django_capture_on_commit_callbacks: Any
) -> None:
    _baseline(django_capture_on_commit_callbacks)
    _pull(DRIFT_AT, DRIFT_AT + HOUR, django_capture_on_commit_callbacks)
    assert ReplanRun.objects.filter(trigger=Plan.Trigger.DRIFT).count() == 1

    # Another hour of the longer prompts: the open alerts are updated, none is raised.
    _pull(DRIFT_AT + HOUR, DRIFT_AT + 2 * HOUR, django_capture_on_commit_callbacks)
    derivation = ProfileDerivation.objects.order_by("-pk").first()
    assert derivation is not None
    assert (derivation.alerts_raised, derivation.alerts_updated) == (0, DriftAlert.objects.count())
    assert drift_alerts_raised(derivation=derivation) == []
    assert ReplanRun.objects.filter(trigger=Plan.Trigger.DRIFT).count() == 1


def test_drift_re_planning_can_be_turned_off(
    prom: FakePrometheus, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    _baseline(django_capture_on_commit_callbacks)
    settings.HEADROOM_REPLAN_ON_DRIFT = False
    _pull(DRIFT_AT, DRIFT_AT + HOUR, django_capture_on_commit_callbacks)
    assert DriftAlert.objects.filter(kind=DriftAlert.Kind.PROMPT_MEAN).count() == 2
    assert not ReplanRun.objects.filter(trigger=Plan.Trigger.DRIFT).exists()


def test_derivation_after_a_pull_can_be_turned_off(
    prom: FakePrometheus, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.HEADROOM_TELEMETRY_DERIVE_AFTER_PULL = False
    summary = _pull(T0, DRIFT_AT, django_capture_on_commit_callbacks)
    assert summary["samples_stored"] > 0 and not summary["derivation_enqueued"]
    assert not ProfileDerivation.objects.exists()


def test_a_pull_that_stored_nothing_new_derives_nothing(
    prom: FakePrometheus, django_capture_on_commit_callbacks: Any
) -> None:
    _pull(T0, DRIFT_AT, django_capture_on_commit_callbacks)
    assert ProfileDerivation.objects.count() == 1
    again = _pull(T0, DRIFT_AT, django_capture_on_commit_callbacks)
    assert again["samples_stored"] == 0 and not again["derivation_enqueued"]
    assert ProfileDerivation.objects.count() == 1


def test_the_derive_task_reports_the_re_plan_it_requested(
    prom: FakePrometheus, django_capture_on_commit_callbacks: Any
) -> None:
    _baseline(django_capture_on_commit_callbacks)
    window = {"window_start": DRIFT_AT.isoformat(), "window_end": (DRIFT_AT + HOUR).isoformat()}
    # Samples first (without the chain), then the derivation task on its own.
    telemetry_pull(window_start=DRIFT_AT, window_end=DRIFT_AT + HOUR)
    with django_capture_on_commit_callbacks(execute=True):
        result = tasks.derive_profiles.apply(kwargs=window).get()
    run = ReplanRun.objects.get(trigger=Plan.Trigger.DRIFT)
    assert result["replan_run"] == run.pk and result["alerts_raised"] >= 2
    # The same window again raises nothing new: no re-plan.
    with django_capture_on_commit_callbacks(execute=True):
        again = tasks.derive_profiles.apply(kwargs=window).get()
    assert again["replan_run"] is None and again["alerts_raised"] == 0


def test_drift_alerts_raised_names_only_the_derivations_own() -> None:
    from controlplane.fleet.models import LlmModel, Region, WorkloadClass
    from controlplane.policies.models import Tenant

    load_support_assistant()
    # Two derivations of the same window (two workers, say), each raising one alert.
    mine, other = (
        ProfileDerivation.objects.create(
            window_start=T0, window_end=DRIFT_AT, status=RunStatus.SUCCEEDED, alerts_raised=1
        )
        for _ in range(2)
    )
    common = {
        "tenant": Tenant.objects.get(name="keystone-mutual"),
        "model": LlmModel.objects.get(name="chat-70b"),
        "region": Region.objects.get(name="us-east"),
        "workload_class": WorkloadClass.objects.first(),
        "baseline_value": 1500.0,
        "current_value": 2700.0,
        "threshold": 0.25,
        "message": "prompt growth",
        "first_seen_at": DRIFT_AT,
        "last_seen_at": DRIFT_AT,
    }
    raised = DriftAlert.objects.create(kind=DriftAlert.Kind.PROMPT_MEAN, raised_by=mine, **common)
    DriftAlert.objects.create(kind=DriftAlert.Kind.OUTPUT_MEAN, raised_by=other, **common)
    assert drift_alerts_raised(derivation=mine) == [raised]

    mine.status = RunStatus.FAILED
    assert drift_alerts_raised(derivation=mine) == []
    none_raised = ProfileDerivation.objects.create(
        window_start=T0, window_end=DRIFT_AT, status=RunStatus.SUCCEEDED
    )
    assert drift_alerts_raised(derivation=none_raised) == []


def test_a_derivation_without_alerts_requests_no_re_plan() -> None:
    quiet = ProfileDerivation.objects.create(
        window_start=T0, window_end=DRIFT_AT, status=RunStatus.SUCCEEDED
    )
    assert after_derivation(derivation=quiet) is None
    assert not ReplanRun.objects.exists()


def test_trigger_sentence_without_a_reason() -> None:
    run = ReplanRun(trigger=Plan.Trigger.SCHEDULE)
    assert trigger_sentence(run) == "Trigger: schedule."


def test_the_switches_come_from_the_environment() -> None:
    code = (
        "from django.conf import settings as s;"
        "print(s.HEADROOM_TELEMETRY_DERIVE_AFTER_PULL, s.HEADROOM_REPLAN_ON_DRIFT)"
    )

    def shell(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", code],
            cwd=REPO,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )

    off = shell(HEADROOM_TELEMETRY_DERIVE_AFTER_PULL="false", HEADROOM_REPLAN_ON_DRIFT="0")
    assert off.returncode == 0, off.stderr
    assert off.stdout.split()[-2:] == ["False", "False"]
    bad = shell(HEADROOM_REPLAN_ON_DRIFT="sometimes")
    assert bad.returncode != 0
    assert "HEADROOM_REPLAN_ON_DRIFT must be a boolean" in bad.stderr
