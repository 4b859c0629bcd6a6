"""Benchmarks over the API and in the admin: every role reads runs and figure freshness; only
policy-admin queues a run, idempotently; the admin lists runs read-only and queues from the
freshness list."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.benchmarks import services
from controlplane.benchmarks import tasks as benchmark_tasks
from controlplane.benchmarks.models import BenchmarkRun, ShapeFreshness
from controlplane.core.roles import FINANCE, POLICY_ADMIN, ROLES, VIEWER
from tests.controlplane.conftest import make_user
from tests.controlplane.test_benchmarks_helpers import (
    BenchFleet,
    FakeRunner,
    make_bench_fleet,
    make_figure,
)

pytestmark = pytest.mark.django_db

RUNS = "/api/benchmarks/runs/"
FRESHNESS = "/api/benchmarks/freshness/"


@pytest.fixture
def fleet(db: None, settings: Any) -> BenchFleet:
    settings.HEADROOM_BENCHMARK_DEVICE = "gpu"
    return make_bench_fleet()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Run ids whose engine task was sent (the task itself is not run here)."""
    ids: list[int] = []
    monkeypatch.setattr(benchmark_tasks.engine, "delay", ids.append)
    return ids


def _finished_run(fleet: BenchFleet) -> BenchmarkRun:
    run, _ = services.benchmark_run_request(shape=fleet.shape, enqueue=False)
    ended = services.benchmark_run_execute(run_id=run.pk, runner=FakeRunner())
    assert ended is not None
    return ended


@pytest.mark.parametrize("role", ROLES)
def test_every_role_reads_runs_and_freshness(
    role: str, fleet: BenchFleet, api_client_for: Any
) -> None:
    run = _finished_run(fleet)
    client = api_client_for(role)
    listed = client.get(RUNS)
    assert listed.status_code == 200 and listed.json()["count"] == 1
    row = listed.json()["results"][0]
    assert row["id"] == run.pk and row["shape"] == fleet.shape.name
    assert row["status"] == "succeeded" and row["figures"] == [run.figures.get().pk]
    assert row["hardware"] == {"gpu": "Fake GPU", "gpus": 1}
    detail = client.get(f"{RUNS}{run.pk}/")
    assert detail.status_code == 200 and detail.json()["results"]["figure"]["max_concurrency"] == 48
    freshness = client.get(FRESHNESS)
    assert freshness.status_code == 200
    (shape_row,) = freshness.json()["results"]
    assert shape_row["shape"] == fleet.shape.name and shape_row["is_fresh"] is True
    assert shape_row["figure_source"] == "engine-benchmark" and shape_row["reasons"] == []
    assert shape_row["last_run"] == run.pk and shape_row["last_run_status"] == "succeeded"


@pytest.mark.parametrize("role", ["no-role", "anonymous"])
def test_reading_needs_a_role(role: str, fleet: BenchFleet, api_client_for: Any) -> None:
    client = api_client_for(role)
    assert client.get(RUNS).status_code in (401, 403)
    assert client.get(FRESHNESS).status_code in (401, 403)


def test_freshness_says_why_a_shape_is_stale(fleet: BenchFleet, api_client_for: Any) -> None:
    make_figure(fleet.shape, age_days=40)
    (row,) = api_client_for(VIEWER).get(FRESHNESS).json()["results"]
    assert row["is_fresh"] is False and row["age_days"] == pytest.approx(40, abs=0.01)
    assert row["reasons"][0].startswith("figure is 40.0 days old")
    assert row["active_run"] is None


def test_policy_admin_queues_a_run_idempotently(
    fleet: BenchFleet, api_client_for: Any, sent: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    client = api_client_for(POLICY_ADMIN)
    with django_capture_on_commit_callbacks(execute=True):
        first = client.post(RUNS, {"shape": fleet.shape.name}, format="json")
    assert first.status_code == 202, first.json()
    body = first.json()
    assert body["status"] == "queued" and body["trigger"] == "manual"
    assert body["requested_by"] == "admin-user" and body["kind"] == "engine"
    assert first["Location"] == f"{RUNS}{body['id']}/"
    again = client.post(RUNS, {"shape": fleet.shape.name}, format="json")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert sent == [body["id"]]
    (row,) = client.get(FRESHNESS).json()["results"]
    assert row["active_run"] == body["id"]


@pytest.mark.parametrize("role", [FINANCE, VIEWER])
def test_other_roles_cannot_queue(role: str, fleet: BenchFleet, api_client_for: Any) -> None:
    response = api_client_for(role).post(RUNS, {"shape": fleet.shape.name}, format="json")
    assert response.status_code == 403 and not BenchmarkRun.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"shape": "no-such-shape"}, "shape"),
        ({}, "shape"),
        ({"shape": "tiny-llama-h100x1", "kind": "endpoint"}, "kind"),
        ({"shape": "tiny-llama-h100x1", "device": "cpu"}, "device"),
    ],
    ids=["unknown-shape", "no-shape", "endpoint-kind", "unknown-field"],
)
def test_a_bad_request_names_the_field(
    body: dict[str, str], field: str, fleet: BenchFleet, api_client_for: Any
) -> None:
    response = api_client_for(POLICY_ADMIN).post(RUNS, body, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["fields"]
    assert not BenchmarkRun.objects.exists()


def test_runs_filter_by_shape_and_status(fleet: BenchFleet, api_client_for: Any) -> None:
    run = _finished_run(fleet)
    client = api_client_for(VIEWER)
    assert client.get(RUNS, {"shape": fleet.shape.name}).json()["count"] == 1
    assert client.get(RUNS, {"status": "failed"}).json()["count"] == 0
    assert client.get(RUNS, {"status": "succeeded"}).json()["results"][0]["id"] == run.pk


# -- admin ------------------------------------------------------------------------------------


def _admin(role: str) -> Client:
    client = Client()
    client.force_login(make_user(f"{role}-staff", role, staff=True))
    return client


def _url(model: type, view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


@pytest.mark.parametrize("role", [POLICY_ADMIN, VIEWER])
def test_the_admin_shows_runs_and_freshness(role: str, fleet: BenchFleet) -> None:
    run = _finished_run(fleet)
    client = _admin(role)
    runs = client.get(_url(BenchmarkRun, "changelist"))
    assert runs.status_code == 200 and fleet.shape.name in runs.content.decode()
    detail = client.get(_url(BenchmarkRun, "change", run.pk))
    assert detail.status_code == 200 and "Fake GPU" in detail.content.decode()
    freshness = client.get(_url(ShapeFreshness, "changelist"))
    assert freshness.status_code == 200 and f"#{run.pk} succeeded" in freshness.content.decode()
    assert client.get(_url(BenchmarkRun, "add")).status_code == 403


def test_policy_admin_queues_from_the_freshness_list(
    fleet: BenchFleet, sent: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    make_figure(fleet.shape, age_days=40)
    client = _admin(POLICY_ADMIN)
    page = client.get(_url(ShapeFreshness, "changelist"))
    assert "queue_engine_benchmark" in page.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            _url(ShapeFreshness, "changelist"),
            {"action": "queue_engine_benchmark", "_selected_action": [fleet.shape.pk]},
            follow=True,
        )
    run = BenchmarkRun.objects.get()
    assert response.status_code == 200 and f"Queued: {fleet.shape.name} (#{run.pk})" in (
        response.content.decode()
    )
    assert run.requested_by is not None and run.requested_by.username == "policy-admin-staff"
    assert sent == [run.pk]


def test_a_viewer_cannot_queue_from_the_admin(fleet: BenchFleet) -> None:
    page = _admin(VIEWER).get(_url(ShapeFreshness, "changelist"))
    assert page.status_code == 200 and "queue_engine_benchmark" not in page.content.decode()
