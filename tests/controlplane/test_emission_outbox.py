"""The outbox: written in the activation's transaction, one row per (plan, region, sink),
superseding older waiting rows, and dispatched with claims, backoff and an attempt log."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from controlplane.emission import services, sinks
from controlplane.emission.models import AllocationSink, DeliveryAttempt, OutboxEntry
from controlplane.plans.models import Plan
from tests.controlplane.emission_support import activate, files_sink, make_plan

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _emission_root(settings: Any, tmp_path: Path) -> None:
    settings.HEADROOM_EMISSION_ROOT = str(tmp_path)
    settings.HEADROOM_EMISSION_BACKOFF_BASE_S = 10
    settings.HEADROOM_EMISSION_BACKOFF_MAX_S = 600


def test_one_row_per_region_and_enabled_sink_with_a_stable_key(
    django_capture_on_commit_callbacks: Any,
) -> None:
    files = files_sink()
    other = files_sink("other", name="other")
    AllocationSink.objects.create(
        kind=AllocationSink.Kind.FILES, name="off", directory="off", enabled=False
    )
    plan = make_plan(3, state=Plan.State.PROPOSED)
    with django_capture_on_commit_callbacks() as callbacks:
        rows = activate(plan)
    assert len(callbacks) == 1, "a dispatch is kicked once the activation commits"
    assert sorted((r.sink.name, r.region) for r in rows) == [
        (sink, region) for sink in ("files", "other") for region in ("ap", "eu", "us")
    ]
    assert all(r.status == OutboxEntry.Status.PENDING and r.attempts == 0 for r in rows)
    keys = {r.idempotency_key for r in rows}
    assert len(keys) == 6
    assert f"headroom:plan-v3:eu:sink-{files.pk}" in keys
    assert f"headroom:plan-v3:us:sink-{other.pk}" in keys
    eu = next(r for r in rows if r.region == "eu" and r.sink == files)
    assert eu.payload["plan"]["version"] == 3
    assert eu.payload["total_replicas"] == 30


def test_activation_rolled_back_leaves_no_outbox_rows_and_kicks_nothing(
    django_capture_on_commit_callbacks: Any,
) -> None:
    files_sink()
    plan = make_plan(1, state=Plan.State.PROPOSED)
    with django_capture_on_commit_callbacks() as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            activate(plan)
            assert OutboxEntry.objects.count() == 3  # written inside the transaction
            raise RuntimeError("activation failed after the outbox write")
    assert OutboxEntry.objects.count() == 0
    assert Plan.objects.get(pk=plan.pk).state == Plan.State.PROPOSED
    assert callbacks == []


def test_plan_activate_writes_the_outbox_in_its_transaction(
    django_capture_on_commit_callbacks: Any,
) -> None:
    from controlplane.plans.services import plan_activate

    files_sink()
    plan = make_plan(8, state=Plan.State.PROPOSED)
    with django_capture_on_commit_callbacks() as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            plan_activate(plan=plan)
            assert OutboxEntry.objects.filter(plan=plan).count() == 3
            raise RuntimeError("rolled back after activation")
    assert OutboxEntry.objects.count() == 0 and callbacks == []
    assert Plan.objects.get(pk=plan.pk).state == Plan.State.PROPOSED

    with django_capture_on_commit_callbacks() as callbacks:
        plan_activate(plan=plan)
    assert len(callbacks) == 1
    rows = OutboxEntry.objects.filter(plan=plan)
    assert {r.region for r in rows} == {"ap", "eu", "us"}
    assert all(r.payload["plan"]["activated_at"].endswith("Z") for r in rows)


def test_no_enabled_sink_means_no_rows() -> None:
    assert activate(make_plan()) == []
    assert OutboxEntry.objects.count() == 0


def test_enqueueing_the_same_plan_again_adds_nothing() -> None:
    files_sink()
    plan = make_plan()
    first = activate(plan)
    again = services.outbox_enqueue_for_plan(plan=plan)
    assert [r.pk for r in again] == [r.pk for r in first]
    assert OutboxEntry.objects.count() == 3


def test_a_newer_plan_supersedes_rows_still_waiting_for_the_same_sink_and_region() -> None:
    sink = files_sink()
    old = activate(make_plan(1))
    # eu of plan 1 was delivered already; ap and us are still waiting.
    OutboxEntry.objects.filter(pk=next(r.pk for r in old if r.region == "eu")).update(
        status=OutboxEntry.Status.DELIVERED
    )
    activate(make_plan(2, state=Plan.State.PROPOSED, scale=2))
    statuses = dict(
        OutboxEntry.objects.filter(plan__version=1, sink=sink).values_list("region", "status")
    )
    assert statuses == {"ap": "superseded", "eu": "delivered", "us": "superseded"}
    assert set(OutboxEntry.objects.filter(plan__version=2).values_list("status", flat=True)) == {
        "pending"
    }


def test_dispatch_delivers_files_and_logs_each_attempt(tmp_path: Path) -> None:
    files_sink()
    activate(make_plan())
    report = services.outbox_dispatch()
    assert (report.claimed, report.delivered, report.retrying, report.failed) == (3, 3, 0, 0)
    assert sorted(p.name for p in (tmp_path / "allocations").glob("*.json")) == [
        "ap.json",
        "eu.json",
        "us.json",
    ]
    for entry in OutboxEntry.objects.all():
        assert entry.status == OutboxEntry.Status.DELIVERED
        assert entry.delivered_at is not None and entry.claimed_by == ""
        (attempt,) = entry.attempt_log.all()
        assert (attempt.number, attempt.outcome) == (1, DeliveryAttempt.Outcome.DELIVERED)
    # Nothing is due any more.
    assert services.outbox_dispatch().claimed == 0


def test_retry_backoff_grows_exponentially_with_jitter_and_a_cap(settings: Any) -> None:
    rng = random.Random(7)
    delays = [services.retry_delay_s(n, rng=rng) for n in range(1, 9)]
    for attempt, delay in enumerate(delays, start=1):
        nominal = min(600, 10 * 2 ** (attempt - 1))
        assert nominal / 2 <= delay <= nominal
    # Jitter: the same attempt number does not always wait the same time.
    assert len({round(services.retry_delay_s(3), 6) for _ in range(20)}) > 1


def test_retryable_failure_goes_back_to_pending_with_its_next_attempt_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files_sink()
    activate(make_plan())
    monkeypatch.setattr(
        sinks,
        "deliver",
        lambda sink, delivery: sinks.DeliveryResult(
            sinks.Outcome.RETRY, status_code=503, error="HTTP 503", retry_after_s=400
        ),
    )
    now = timezone.now()
    report = services.outbox_dispatch(now=now)
    assert report.retrying == 3
    for entry in OutboxEntry.objects.all():
        assert entry.status == OutboxEntry.Status.PENDING
        assert entry.attempts == 1
        assert entry.last_error == "HTTP 503"
        # Retry-After (400 s) is longer than the first backoff (5–10 s), so it wins.
        assert entry.next_attempt_at == now + timedelta(seconds=400)
    # Not due before then.
    assert services.outbox_dispatch(now=now + timedelta(seconds=399)).claimed == 0
    assert services.outbox_dispatch(now=now + timedelta(seconds=400)).claimed == 3


def test_permanent_failure_is_failed_visible_and_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files_sink()
    activate(make_plan())
    monkeypatch.setattr(
        sinks,
        "deliver",
        lambda sink, delivery: sinks.DeliveryResult(
            sinks.Outcome.FAILED, status_code=400, error="HTTP 400: bad document"
        ),
    )
    report = services.outbox_dispatch()
    assert report.failed == 3
    assert set(OutboxEntry.objects.values_list("status", "last_error")) == {
        ("failed", "HTTP 400: bad document")
    }
    later = timezone.now() + timedelta(days=30)
    assert services.outbox_dispatch(now=later).claimed == 0


def test_an_operator_can_requeue_a_failed_row_but_not_a_delivered_one() -> None:
    files_sink()
    rows = activate(make_plan())
    failed, delivered = rows[0], rows[1]
    OutboxEntry.objects.filter(pk=failed.pk).update(status=OutboxEntry.Status.FAILED, attempts=4)
    OutboxEntry.objects.filter(pk=delivered.pk).update(status=OutboxEntry.Status.DELIVERED)
    assert services.outbox_entry_retry(entry=failed) is True
    assert (failed.status, failed.attempts) == ("pending", 4)
    assert services.outbox_entry_retry(entry=delivered) is False
    assert delivered.status == "delivered"


def test_an_unexpected_error_in_one_row_does_not_stop_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files_sink()
    activate(make_plan())
    real = sinks.deliver

    def flaky(sink: AllocationSink, delivery: sinks.Delivery) -> sinks.DeliveryResult:
        if delivery.region == "eu":
            raise KeyError("bug")
        return real(sink, delivery)

    monkeypatch.setattr(sinks, "deliver", flaky)
    report = services.outbox_dispatch()
    assert (report.delivered, report.retrying) == (2, 1)
    eu = OutboxEntry.objects.get(region="eu")
    assert eu.status == "pending" and "internal error" in eu.last_error


def test_a_dead_dispatchers_claim_expires_and_the_row_is_taken_over() -> None:
    files_sink()
    activate(make_plan())
    now = timezone.now()
    # A dispatcher claimed eu and died: the row says delivering, claimed until now + 300 s.
    OutboxEntry.objects.filter(region="eu").update(
        status=OutboxEntry.Status.DELIVERING,
        claimed_by="dead-host:1",
        claim_expires_at=now + timedelta(seconds=300),
        attempts=1,
    )
    first = services.outbox_dispatch(now=now)
    assert first.claimed == 2, "a live claim is left alone"
    second = services.outbox_dispatch(now=now + timedelta(seconds=301))
    assert (second.claimed, second.delivered) == (1, 1)
    eu = OutboxEntry.objects.get(region="eu")
    assert (eu.status, eu.attempts) == ("delivered", 2)


def test_a_dispatcher_whose_claim_was_taken_over_does_not_overwrite_the_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files_sink()
    activate(make_plan())
    real = sinks.deliver

    def slow_then_taken_over(
        sink: AllocationSink, delivery: sinks.Delivery
    ) -> sinks.DeliveryResult:
        # While this attempt runs, its claim expires and another dispatcher delivers the row.
        OutboxEntry.objects.filter(idempotency_key=delivery.idempotency_key).update(
            status=OutboxEntry.Status.DELIVERED, claimed_by="", delivered_at=timezone.now()
        )
        real(sink, delivery)
        return sinks.DeliveryResult(sinks.Outcome.RETRY, error="late answer")

    monkeypatch.setattr(sinks, "deliver", slow_then_taken_over)
    report = services.outbox_dispatch()
    assert report.lost_claims == 3
    assert set(OutboxEntry.objects.values_list("status", flat=True)) == {"delivered"}
    assert set(DeliveryAttempt.objects.values_list("outcome", flat=True)) == {"lost-claim"}


def test_dispatch_task_runs_the_service() -> None:
    from controlplane.emission.tasks import dispatch

    files_sink()
    activate(make_plan())
    summary = dispatch.delay().get(timeout=10)
    assert (summary["claimed"], summary["delivered"]) == (3, 3)


def test_the_dispatcher_is_on_the_beat_schedule() -> None:
    from django_celery_beat.models import PeriodicTask

    from workers.celery import app

    task = PeriodicTask.objects.get(name="emission: dispatch the outbox")
    assert (task.task, task.enabled) == ("headroom.emission.dispatch", True)
    assert (task.interval.every, task.interval.period) == (30, "seconds")
    app.loader.import_default_modules()
    assert task.task in app.tasks
