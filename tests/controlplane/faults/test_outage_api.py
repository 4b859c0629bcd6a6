"""A dependency down answers 503 in the API's error shape with ``Retry-After``, and is logged.

The database is made unreachable by a cursor that raises what a refused connection raises;
the broker by pointing the Celery app at a loopback port nothing listens on (a real refused
connection). The end-to-end tests in ``test_private_services.py`` restart real servers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import OperationalError
from django.db.backends.utils import CursorWrapper
from django.test import Client

from controlplane.benchmarks.models import BenchmarkRun
from controlplane.celery import app
from controlplane.plans.models import ReplanRun
from tests.controlplane.faults.support import closed_port_broker

pytestmark = pytest.mark.django_db


@contextmanager
def database_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every query raises as it does when PostgreSQL refuses connections."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OperationalError('connection to server at "127.0.0.1", port 5432 failed')

    with monkeypatch.context() as patch:
        patch.setattr(CursorWrapper, "execute", refuse)
        patch.setattr(CursorWrapper, "executemany", refuse)
        yield


def _assert_unavailable(response: Any, *, retry_after: str = "30") -> dict[str, Any]:
    assert response.status_code == 503
    assert response["Retry-After"] == retry_after
    assert response["Content-Type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == "unavailable"
    return body


def test_a_read_while_the_database_is_down_is_503_with_retry_after(
    api_client_for: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    client = api_client_for("viewer")
    with caplog.at_level(logging.WARNING), database_down(monkeypatch):
        response = client.get("/api/plans/")
    body = _assert_unavailable(response)
    assert "database" in body["error"]["message"]
    # The host and port in the driver's message are logged, not shown to the client.
    assert "5432" not in body["error"]["message"]
    assert any(
        "database unavailable while answering GET /api/plans/" in r.getMessage()
        for r in caplog.records
    )


def test_retry_after_is_the_setting(
    api_client_for: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.HEADROOM_RETRY_AFTER_S = 7
    client = api_client_for("policy-admin")
    with database_down(monkeypatch):
        response = client.post("/api/plans/replan/", {}, format="json")
    _assert_unavailable(response, retry_after="7")


def test_an_outage_met_outside_any_view_is_503_too(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A middleware that queries the database (Django's session middleware) meets the outage before any view runs; Django
    turns that into its 500 page, which the API's middleware answers as 503."""
    from django.contrib.sessions.middleware import SessionMiddleware

    def refuse(self: Any, request: Any) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(SessionMiddleware, "process_request", refuse)
    with caplog.at_level(logging.WARNING):
        response = Client(raise_request_exception=False).get("/api/plans/")
    _assert_unavailable(response)
    assert any("database unavailable" in r.getMessage() for r in caplog.records)


def test_readyz_and_the_api_agree_while_the_database_is_down(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.HEADROOM_RETRY_AFTER_S = 12
    with database_down(monkeypatch):
        ready = Client().get("/readyz", HTTP_HOST="10.0.0.7")
    assert ready.status_code == 503
    assert ready["Retry-After"] == "12"
    assert Client().get("/readyz", HTTP_HOST="10.0.0.7").status_code == 200


# The task is sent when the transaction commits: these need real commits.
@pytest.mark.django_db(transaction=True)
def test_broker_unreachable_at_enqueue_is_503_and_the_run_is_failed_not_queued(
    api_client_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The run's row is committed before its task is sent (a worker must be able to read it);
    the send failing then fails the row with the reason, so nothing waits queued for a task
    that was never sent, and the client is told to retry."""
    client = api_client_for("policy-admin")
    with caplog.at_level(logging.WARNING), closed_port_broker():
        response = client.post("/api/plans/replan/", {}, format="json")
    body = _assert_unavailable(response)
    assert "broker" in body["error"]["message"]
    (run,) = ReplanRun.objects.all()
    assert run.status == ReplanRun.Status.FAILED
    assert "broker" in run.error
    assert run.finished_at is not None
    assert any("broker unavailable while queueing" in r.getMessage() for r in caplog.records)
    # With the broker back (here: in-process), the same request succeeds.
    assert app.conf.task_always_eager
    again = client.post("/api/plans/replan/", {}, format="json")
    assert again.status_code == 202


@pytest.mark.django_db(transaction=True)
def test_a_benchmark_request_with_the_broker_down_leaves_no_active_run(
    api_client_for: Any,
) -> None:
    """An active (queued) run blocks further requests for its shape: a run whose task was never
    sent must not stay active."""
    from tests.controlplane.faults.support import make_shape

    shape = make_shape()
    client = api_client_for("policy-admin")
    with closed_port_broker():
        response = client.post("/api/benchmarks/runs/", {"shape": shape.name}, format="json")
    _assert_unavailable(response)
    (run,) = BenchmarkRun.objects.all()
    assert (run.status, run.is_active) == (BenchmarkRun.Status.FAILED, False)
    assert "broker" in run.error
