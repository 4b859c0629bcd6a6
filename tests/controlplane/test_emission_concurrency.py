"""Two dispatchers at once never deliver the same outbox row twice.

Real threads, each with its own database connection, race for the same due rows against a
slow receiver; the receiver counts the requests per idempotency key. Runs on whichever
database the suite runs on (SQLite by default, PostgreSQL in CI's second pass).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from controlplane.emission import services
from controlplane.emission.models import DeliveryAttempt, OutboxEntry
from tests.controlplane.emission_support import SECRET, make_plan, webhook_sink
from workers.simulators.webhook_receiver import WebhookReceiver

DISPATCHERS = 2
SINKS = 4  # × 3 regions = 12 rows


class _MeetingReceiver(WebhookReceiver):
    """Holds its first deliveries until one from each dispatcher is in flight, so both are
    busy at the same time however late the machine runs the second thread (a fixed delay
    would race with it); then answers each after ``delay_s``, racing row by row."""

    def __init__(self, *, secret: str, delay_s: float, meet: int) -> None:
        super().__init__(secret=secret, delay_s=delay_s)
        self._meeting = threading.Barrier(meet)

    def receive(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        if not self._meeting.broken:
            try:
                self._meeting.wait(timeout=30)
            except threading.BrokenBarrierError:
                pass  # later deliveries find the meeting over
            else:
                self._meeting.abort()  # met once: the rest go through
        return super().receive(headers, body)


@pytest.fixture
def slow_receiver() -> Iterator[WebhookReceiver]:
    with _MeetingReceiver(secret=SECRET, delay_s=0.02, meet=DISPATCHERS) as receiver:
        yield receiver


def run_at_once(count: int) -> list[services.DispatchReport]:
    barrier = threading.Barrier(count)
    reports: list[services.DispatchReport] = []
    errors: list[BaseException] = []

    def dispatcher() -> None:
        try:
            barrier.wait(timeout=10)
            reports.append(services.outbox_dispatch())
        except BaseException as exc:  # reported to the test below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=dispatcher) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return reports


@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_at_once_never_deliver_a_row_twice(
    slow_receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The commit would kick an in-process dispatch of its own; the race is between these two.
    monkeypatch.setattr(services, "outbox_kick", lambda: None)
    for n in range(SINKS):
        webhook_sink(slow_receiver.url, name=f"hook-{n}")
    with transaction.atomic():
        rows = services.outbox_enqueue_for_plan(plan=make_plan())
    assert len(rows) == SINKS * 3

    reports = run_at_once(DISPATCHERS)

    per_key = Counter(r.idempotency_key for r in slow_receiver.requests)
    assert per_key == Counter({row.idempotency_key: 1 for row in rows})
    assert len(slow_receiver.deliveries) == len(rows)
    assert sum(r.claimed for r in reports) == len(rows)
    assert set(OutboxEntry.objects.values_list("status", "attempts")) == {("delivered", 1)}
    assert DeliveryAttempt.objects.count() == len(rows)
    # Both really ran concurrently: each dispatcher delivered some of the rows.
    assert all(r.claimed > 0 for r in reports), [r.summary() for r in reports]
