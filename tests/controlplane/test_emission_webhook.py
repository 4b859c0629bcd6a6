"""The webhook sink end to end against the shipped receiver: signed, retried with backoff
until acknowledged, applied exactly once per idempotency key, refused requests failed."""

from __future__ import annotations

import itertools
import json
import socket
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from controlplane.emission import services
from controlplane.emission.models import DeliveryAttempt, OutboxEntry
from controlplane.emission.sinks import Delivery, Outcome, webhook
from controlplane.plans.models import Plan
from planner import signing
from tests.controlplane.emission_support import SECRET, make_plan, webhook_sink
from workers.simulators.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_backoff(settings: Any) -> None:
    settings.HEADROOM_EMISSION_BACKOFF_BASE_S = 10
    settings.HEADROOM_EMISSION_BACKOFF_MAX_S = 3600


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET) as running:
        yield running


def enqueue(plan: Plan) -> list[OutboxEntry]:
    with transaction.atomic():
        return services.outbox_enqueue_for_plan(plan=plan)


def drain(start: datetime, *, rounds: int = 10) -> list[datetime]:
    """Dispatch, then jump the clock to the next due row, until nothing is pending; returns
    the moments each dispatch ran at."""
    moments = []
    now = start
    for _ in range(rounds):
        moments.append(now)
        services.outbox_dispatch(now=now)
        due = (
            OutboxEntry.objects.filter(status=OutboxEntry.Status.PENDING)
            .order_by("next_attempt_at")
            .values_list("next_attempt_at", flat=True)
            .first()
        )
        if due is None:
            break
        now = max(due, now)
    return moments


def test_receiver_failing_three_times_then_delivered_once_per_key(
    receiver: WebhookReceiver,
) -> None:
    webhook_sink(receiver.url)
    rows = enqueue(make_plan())
    receiver.fail_next(3, status=503)
    start = timezone.now()
    drain(start)

    assert set(OutboxEntry.objects.values_list("status", flat=True)) == {"delivered"}
    # One applied delivery per key, carrying the region's document.
    assert sorted(receiver.deliveries) == sorted(r.idempotency_key for r in rows)
    eu = next(d for d in receiver.deliveries.values() if d.region == "eu")
    assert eu.document == next(r.payload for r in rows if r.region == "eu")
    # The three refused requests were retried: 3 + 3 requests in all.
    statuses = Counter(r.status for r in receiver.requests)
    assert statuses == {503: 3, 200: 3}
    # Backoff: the row that failed most waited longer each time (5–10 s, then 10–20 s …).
    worst = max(OutboxEntry.objects.all(), key=lambda e: e.attempts)
    log = list(worst.attempt_log.order_by("number"))
    assert [a.outcome for a in log][-1] == DeliveryAttempt.Outcome.DELIVERED
    assert [a.status_code for a in log] == [503] * (len(log) - 1) + [200]
    waits = [(b.started_at - a.finished_at).total_seconds() for a, b in itertools.pairwise(log)]
    for number, wait in enumerate(waits, start=1):
        nominal = 10 * 2 ** (number - 1)
        assert nominal / 2 <= wait <= nominal


def test_receiver_down_then_up_delivers(settings: Any) -> None:
    # A port with nothing listening: connection refused, which is worth retrying.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sink = webhook_sink(f"http://127.0.0.1:{port}/allocations")
    enqueue(make_plan())
    now = timezone.now()
    report = services.outbox_dispatch(now=now)
    assert report.retrying == 3
    entry = OutboxEntry.objects.get(region="eu")
    assert entry.status == "pending" and "no answer" in entry.last_error

    with WebhookReceiver(secret=SECRET, port=port) as receiver:
        assert receiver.url == sink.url
        drain(now + timedelta(seconds=11))
    assert set(OutboxEntry.objects.values_list("status", flat=True)) == {"delivered"}
    assert len(receiver.deliveries) == 3


def test_lost_acknowledgement_is_retried_and_not_applied_twice(
    receiver: WebhookReceiver,
) -> None:
    webhook_sink(receiver.url)
    rows = enqueue(make_plan())
    # The receiver applies each of the first three requests, then answers 500: the sender
    # cannot tell this from a failure and sends again with the same key.
    receiver.fail_next(3, status=500, after_apply=True)
    drain(timezone.now())
    assert set(OutboxEntry.objects.values_list("status", flat=True)) == {"delivered"}
    assert len(receiver.deliveries) == len(rows) == 3
    reasons = Counter(r.reason for r in receiver.requests)
    assert reasons == {
        "applied, then told to fail": 3,
        "duplicate: acknowledged, not applied again": 3,
    }


def test_redelivery_after_a_dead_dispatcher_is_deduplicated(receiver: WebhookReceiver) -> None:
    webhook_sink(receiver.url)
    enqueue(make_plan())
    services.outbox_dispatch()
    # As if the dispatcher had died after the POST but before recording the outcome.
    OutboxEntry.objects.filter(region="us").update(
        status=OutboxEntry.Status.DELIVERING,
        claimed_by="dead",
        claim_expires_at=timezone.now() - timedelta(seconds=1),
    )
    report = services.outbox_dispatch()
    assert (report.claimed, report.delivered) == (1, 1)
    assert len(receiver.deliveries) == 3
    assert sum(1 for r in receiver.requests if r.reason.startswith("duplicate")) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422])
def test_client_errors_other_than_408_and_429_fail_without_retry(
    receiver: WebhookReceiver, status: int
) -> None:
    webhook_sink(receiver.url)
    enqueue(make_plan())
    receiver.fail_next(100, status=status)
    report = services.outbox_dispatch()
    assert report.failed == 3
    entry = OutboxEntry.objects.get(region="eu")
    assert entry.status == "failed" and entry.last_error.startswith(f"HTTP {status}")
    assert services.outbox_dispatch(now=timezone.now() + timedelta(days=1)).claimed == 0
    assert len(receiver.requests) == 3


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_timeouts_throttling_and_server_errors_are_retried(
    receiver: WebhookReceiver, status: int
) -> None:
    webhook_sink(receiver.url)
    enqueue(make_plan())
    receiver.fail_next(3, status=status)
    assert services.outbox_dispatch().retrying == 3
    assert set(OutboxEntry.objects.values_list("status", flat=True)) == {"pending"}


def test_a_receiver_with_another_secret_refuses_and_the_row_fails(
    receiver: WebhookReceiver,
) -> None:
    sink = webhook_sink(receiver.url)
    sink.secret = "a-different-secret-of-enough-length"
    sink.save()
    enqueue(make_plan())
    assert services.outbox_dispatch().failed == 3
    assert receiver.deliveries == {}
    assert {r.status for r in receiver.requests} == {401}
    assert "HTTP 401" in OutboxEntry.objects.first().last_error  # type: ignore[union-attr]


class _Recorder(BaseHTTPRequestHandler):
    """Answers 200 and keeps the raw request, to check what goes on the wire."""

    seen: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Recorder.seen.append((dict(self.headers.items()), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_what_goes_on_the_wire_is_the_signed_canonical_document() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        _Recorder.seen.clear()
        sink = webhook_sink(f"http://127.0.0.1:{server.server_address[1]}/hook")
        delivery = Delivery("key-1", "eu", {"plan": {"version": 1}, "region": "eu", "x": [1.5]})
        assert webhook.deliver(sink, delivery).outcome is Outcome.DELIVERED
    finally:
        server.shutdown()
        server.server_close()
    ((headers, body),) = _Recorder.seen
    assert json.loads(body) == delivery.payload
    assert body == b'{"plan":{"version":1},"region":"eu","x":[1.5]}'
    assert headers["Content-Type"] == "application/json"
    assert signing.verify(secret=SECRET, headers=headers, body=body) == "key-1"


def test_redirects_are_not_followed() -> None:
    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(307)
            self.send_header("Location", "http://example.invalid/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        sink = webhook_sink(f"http://127.0.0.1:{server.server_address[1]}/hook")
        result = webhook.deliver(sink, Delivery("k", "eu", {"plan": {"version": 1}}))
    finally:
        server.shutdown()
        server.server_close()
    assert (result.outcome, result.status_code) == (Outcome.FAILED, 307)


def test_retry_after_header_forms() -> None:
    assert webhook.retry_after_s("120") == 120
    assert webhook.retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480 - 60) == 60
    assert webhook.retry_after_s("soon") is None
    assert webhook.retry_after_s(None) is None
