"""Benchmark endpoints: the replica each shape's endpoint load test measures.

- The API keeps the record-endpoint contract (roles, CRUD, history, ETag and If-Match, no 5xx)
  and refuses a bad URL, API or key variable with a 400 naming the field.
- ``headroom.benchmarks.endpoint``, sent when an endpoint run is requested, load-tests the
  shape's endpoint: against the simulated replica it stores an ``endpoint-load-test`` figure
  with its provenance; without an enabled endpoint, with the key's variable unset, or against
  an endpoint nobody answers, the run fails with the reason and the previous figure stays.
- The schedule measures a stale shape with an enabled endpoint by the load test, and keeps
  queueing engine benchmarks for the others.

The simulated replica runs two sequences at once, 20× faster than the seeds' cost model
(80,000 prefill and 3,200 decode tokens/s per sequence); the tier's target is 0.15 s. The
figures are checked with the replica played in virtual time (``VirtualReplicaPool`` in place of
the Ray load generators), where they are exact on any machine; the same task through Ray and
HTTP checks what is sent and recorded, never how fast.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from controlplane.benchmarks import runs, services
from controlplane.benchmarks import tasks as benchmark_tasks
from controlplane.benchmarks.models import BenchmarkEndpoint, BenchmarkRun, ShapeFreshness
from controlplane.benchmarks.urls import router
from controlplane.core.roles import POLICY_ADMIN, VIEWER
from controlplane.fleet.models import CapacityFigure
from controlplane.policies.models import WorkloadProfile
from tests.controlplane.api_harness import ConditionalEndpointContract, error_fields
from tests.controlplane.conftest import make_user
from tests.controlplane.test_benchmarks_helpers import BenchFleet, make_bench_fleet, make_figure
from workers.celery import app as celery_app
from workers.simulators.replica import ReplicaConfig, VirtualReplicaPool, replica_server_process

ENDPOINTS = "/api/benchmarks/endpoints/"
RUNS = "/api/benchmarks/runs/"

SLOTS = 2
SLOT_PREFILL = 80_000.0
SLOT_DECODE = 3_200.0
TARGET_TTFT_S = 0.15
# Where the sweep starts (the previous figure's knee), req/s: about half the replica's
# saturation for the profile below (2 slots / 36 ms a request).
FIRST_RATE = 30.0


# -- the API ------------------------------------------------------------------------------------


class TestBenchmarkEndpointEndpoint(ConditionalEndpointContract):
    basename = "benchmark-endpoint"
    model = BenchmarkEndpoint

    def make(self) -> Model:
        endpoint = BenchmarkEndpoint(
            shape=self.records.shape(),
            base_url="http://replica-0.inference.internal:8000",
            served_model_name="llama-3.1-8b",
            max_concurrency=64,
        )
        endpoint.full_clean()
        endpoint.save()
        return endpoint

    def create_payload(self) -> dict[str, Any]:
        return {
            "shape": self.records.shape().name,
            "base_url": "https://replica-1.inference.internal:8443",
            "served_model_name": "llama-3.1-8b-instruct",
            "api": "chat",
            "api_key_env": "REPLICA_API_KEY",
            "timeout_s": 30.0,
            "max_concurrency": 128,
            "ignore_eos": False,
            "requests_per_point": 500,
            "enabled": True,
        }

    def update_payload(self, record: Model) -> dict[str, Any]:
        return {"enabled": False, "timeout_s": 45.0}

    def invalid_payloads(self) -> Iterator[tuple[dict[str, Any], str]]:
        yield {**self.create_payload(), "base_url": "ftp://replica-1.internal/"}, "base_url"
        yield {**self.create_payload(), "base_url": "replica-1.internal:8000"}, "base_url"
        yield {**self.create_payload(), "base_url": "http://replica-1.internal:8000/v1"}, "base_url"
        yield {**self.create_payload(), "base_url": "http://u:key@replica-1.internal"}, "base_url"
        yield {**self.create_payload(), "api": "grpc"}, "api"
        yield {**self.create_payload(), "api_key_env": "sk-live-0123456789"}, "api_key_env"
        yield {**self.create_payload(), "served_model_name": ""}, "served_model_name"
        yield {**self.create_payload(), "timeout_s": 0}, "timeout_s"
        yield {**self.create_payload(), "requests_per_point": 5}, "requests_per_point"
        yield {**self.create_payload(), "max_concurrency": 0}, "max_concurrency"
        # No max_concurrency, and the shape has no figure to take it from.
        no_limit = self.create_payload()
        del no_limit["max_concurrency"]
        yield no_limit, "max_concurrency"
        yield {**self.create_payload(), "shape": "no-such-shape"}, "shape"
        taken = self.make()
        yield {**self.create_payload(), "shape": taken.shape.name}, "shape"  # type: ignore[attr-defined]

    # The harness finds views in the record router; these live under /api/benchmarks/.
    def _view(self) -> Any:
        return next(view for _, view, name in router.registry if name == self.basename)

    def test_bad_url_and_api_name_the_field_and_say_why(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        versioned = client.post(
            ENDPOINTS,
            {**self.create_payload(), "base_url": "http://replica-1.internal:8000/v1/"},
            format="json",
        )
        assert versioned.status_code == 400
        assert "without /v1" in error_fields(versioned)["base_url"][0]
        api = client.post(ENDPOINTS, {**self.create_payload(), "api": "grpc"}, format="json")
        assert api.status_code == 400 and list(error_fields(api)) == ["api"]
        assert not BenchmarkEndpoint.objects.exists()

    def test_max_concurrency_defaults_to_the_shapes_figure(self, api_client_for: Any) -> None:
        payload = self.create_payload()
        del payload["max_concurrency"]
        shape = self.records.shape()
        make_figure(shape)  # max_concurrency 32
        response = self.admin(api_client_for).post(
            ENDPOINTS, {**payload, "shape": shape.name}, format="json"
        )
        assert response.status_code == 201, response.json()
        assert response.json()["max_concurrency"] == 32

    def test_filters_by_shape_and_enabled(self, api_client_for: Any) -> None:
        on = self.make()
        off = self.make()
        BenchmarkEndpoint.objects.filter(pk=off.pk).update(enabled=False)
        client = api_client_for(VIEWER)
        by_shape = client.get(ENDPOINTS, {"shape": on.shape.name}).json()  # type: ignore[attr-defined]
        assert [row["id"] for row in by_shape["results"]] == [on.pk]
        disabled = client.get(ENDPOINTS, {"enabled": "false"}).json()
        assert [row["id"] for row in disabled["results"]] == [off.pk]


@pytest.fixture
def fleet(db: None) -> BenchFleet:
    return make_bench_fleet()


def _endpoint(fleet: BenchFleet, base_url: str, **fields: Any) -> BenchmarkEndpoint:
    endpoint = BenchmarkEndpoint(
        shape=fleet.shape,
        base_url=base_url,
        served_model_name="sim",
        max_concurrency=SLOTS,
        requests_per_point=20,
        timeout_s=10.0,
        **fields,
    )
    endpoint.full_clean()
    endpoint.save()
    return endpoint


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Run ids whose endpoint task was sent (the task itself is not run here)."""
    ids: list[int] = []
    monkeypatch.setattr(benchmark_tasks.endpoint, "delay", ids.append)
    return ids


def test_policy_admin_queues_an_endpoint_run_through_the_api(
    fleet: BenchFleet,
    api_client_for: Any,
    sent: list[int],
    django_capture_on_commit_callbacks: Any,
) -> None:
    client = api_client_for(POLICY_ADMIN)
    refused = client.post(RUNS, {"shape": fleet.shape.name, "kind": "endpoint"}, format="json")
    assert refused.status_code == 400 and "no enabled benchmark endpoint" in str(
        error_fields(refused)["kind"]
    )
    _endpoint(fleet, "http://replica-0.internal:8000")
    with django_capture_on_commit_callbacks(execute=True):
        queued = client.post(RUNS, {"shape": fleet.shape.name, "kind": "endpoint"}, format="json")
    assert queued.status_code == 202, queued.json()
    assert queued.json()["kind"] == "endpoint" and sent == [queued.json()["id"]]


# -- the admin ----------------------------------------------------------------------------------


def _admin(role: str) -> Client:
    client = Client()
    client.force_login(make_user(f"{role}-staff", role, staff=True))
    return client


def _admin_url(model: type, view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def test_the_admin_edits_endpoints_and_queues_load_tests(
    fleet: BenchFleet, sent: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    endpoint = _endpoint(fleet, "http://replica-0.internal:8000")
    viewer = _admin(VIEWER)
    assert viewer.get(_admin_url(BenchmarkEndpoint, "change", endpoint.pk)).status_code == 200
    assert viewer.get(_admin_url(BenchmarkEndpoint, "add")).status_code == 403
    admin = _admin(POLICY_ADMIN)
    page = admin.get(_admin_url(BenchmarkEndpoint, "change", endpoint.pk))
    assert page.status_code == 200 and "replica-0.internal" in page.content.decode()
    form = {
        "shape": fleet.shape.pk,
        "enabled": "on",
        "base_url": "http://replica-1.internal:8000",
        "served_model_name": "sim",
        "api": "chat",
        "api_key_env": "",
        "timeout_s": "20",
        "max_concurrency": "2",
        "ignore_eos": "on",
        "requests_per_point": "20",
        "expected_revision": endpoint.revision,
    }
    saved = admin.post(_admin_url(BenchmarkEndpoint, "change", endpoint.pk), form)
    assert saved.status_code == 302
    endpoint.refresh_from_db()
    assert (endpoint.base_url, endpoint.api, endpoint.revision) == (
        "http://replica-1.internal:8000",
        "chat",
        2,
    )
    refused = admin.post(
        _admin_url(BenchmarkEndpoint, "change", endpoint.pk),
        {**form, "base_url": "http://replica-1.internal:8000/v1", "expected_revision": 2},
    )
    assert refused.status_code == 200 and "without /v1" in refused.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(
            _admin_url(ShapeFreshness, "changelist"),
            {"action": "queue_endpoint_load_test", "_selected_action": [fleet.shape.pk]},
            follow=True,
        )
    run = BenchmarkRun.objects.get()
    assert run.kind == BenchmarkRun.Kind.ENDPOINT and sent == [run.pk]
    assert f"Queued: {fleet.shape.name} (#{run.pk})" in response.content.decode()


# -- the task -------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def replica_url() -> Iterator[str]:
    with replica_server_process(_replica()) as url:
        yield url


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    """A local Ray with 2 CPUs (one per load generator); one a test run already has is
    reused as it is."""
    import ray

    from workers.benchmarks.ray_runner import LOCAL_INIT

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, num_gpus=0, **LOCAL_INIT)
    yield
    if started:
        ray.shutdown()


@pytest.fixture
def eager() -> None:
    """Tasks run in-process when sent (no broker is configured for tests)."""
    assert celery_app.conf.task_always_eager


def _request_and_run(fleet: BenchFleet, capture: Any) -> BenchmarkRun:
    with capture(execute=True):
        run, created = services.benchmark_run_request(
            shape=fleet.shape, kind=BenchmarkRun.Kind.ENDPOINT, reason="test"
        )
    assert created
    run.refresh_from_db()
    return run


def _previous_figure(fleet: BenchFleet) -> CapacityFigure:
    figure = make_figure(fleet.shape, age_days=40)
    CapacityFigure.objects.filter(pk=figure.pk).update(knee_requests_per_s=FIRST_RATE)
    figure.refresh_from_db()
    return figure


def _chat_profile(fleet: BenchFleet, target_ttft_s: float) -> None:
    """The tier's target, and chat-like lengths (a new version of the tenant's profile): 36 ms
    of a slot a request."""
    tier = fleet.tenant.tier
    tier.p95_ttft_slo_s = target_ttft_s
    tier.save()
    profile = WorkloadProfile(
        tenant=fleet.tenant,
        model=fleet.model,
        workload_class=fleet.workload_class,
        version=2,
        peak_requests_per_s=5,
        prompt_tokens_p50=400,
        prompt_tokens_mean=600,
        prompt_tokens_p95=2000,
        prompt_tokens_p99=3000,
        output_tokens_p50=60,
        output_tokens_mean=90,
        output_tokens_p95=300,
        output_tokens_p99=400,
    )
    profile.full_clean()
    profile.save()


def _replica() -> ReplicaConfig:
    return ReplicaConfig.fifo_slots(
        SLOTS, SLOT_PREFILL * SLOTS, SLOT_DECODE * SLOTS, model="sim", stream_interval_s=0.02
    )


@pytest.fixture
def virtual_generators(monkeypatch: pytest.MonkeyPatch) -> list[VirtualReplicaPool]:
    """The run's load generators play the simulated replica in virtual time instead of
    sending over HTTP from Ray: the whole task and service path runs, and every figure is the
    replica model's exactly, however busy the machine is."""
    started: list[VirtualReplicaPool] = []

    def generators() -> runs.LoadGenerators:
        def start(count: int) -> VirtualReplicaPool:
            started.append(VirtualReplicaPool(_replica()))
            return started[-1]

        return start

    monkeypatch.setattr(runs, "ray_load_generators", generators)
    return started


def test_the_task_load_tests_the_shapes_endpoint_and_stores_a_figure(
    fleet: BenchFleet,
    virtual_generators: list[VirtualReplicaPool],
    eager: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    _chat_profile(fleet, TARGET_TTFT_S)
    previous = _previous_figure(fleet)
    base_url = "http://replica-0.internal:8000"
    _endpoint(fleet, base_url)

    run = _request_and_run(fleet, django_capture_on_commit_callbacks)

    assert run.status == BenchmarkRun.Status.SUCCEEDED, run.error
    assert run.task_id  # sent through Celery
    assert len(virtual_generators) == 1
    figure = run.figures.get()
    assert figure.source == CapacityFigure.Source.ENDPOINT_LOAD_TEST
    assert figure.measured_at > previous.measured_at
    assert figure.max_concurrency == SLOTS
    # The sweep starts at the previous figure's knee, which meets the target: the knee is above.
    assert figure.knee_requests_per_s is not None and figure.knee_requests_per_s > FIRST_RATE
    points = run.results["load_test"]["points"]
    assert points[0]["rate_per_s"] == FIRST_RATE and points[0]["meets"]
    assert run.results["load_test"]["bracketed"]
    # The probes recover the replica's rates.
    assert figure.prefill_tokens_per_s == pytest.approx(SLOTS * SLOT_PREFILL, rel=1e-6)
    assert figure.decode_tokens_per_s == pytest.approx(SLOTS * SLOT_DECODE, rel=1e-6)
    provenance = figure.provenance
    assert provenance["benchmark_run"] == run.pk and provenance["kind"] == "endpoint"
    assert provenance["workload"]["endpoint"] == {
        "base_url": base_url,
        "model": "sim",
        "api": "completions",
    }
    assert provenance["workload"]["target_ttft_s"] == TARGET_TTFT_S
    assert provenance["workload"]["requests_per_point"] == 20
    assert provenance["workload_profile_version"] == run.workload_profile_version != "none"
    assert provenance["hardware"]["load_generators"] == list(virtual_generators[0].hosts)
    assert run.results["load_test"]["knee_rate_per_s"] == figure.knee_requests_per_s
    # The previous figure stays; the new one is the freshest.
    assert CapacityFigure.objects.filter(pk=previous.pk).exists()


def test_the_task_load_tests_over_http_from_ray(
    fleet: BenchFleet,
    replica_url: str,
    local_ray: None,
    eager: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # The same through Ray load generators and HTTP: what is sent and recorded. The target is
    # one no run misses, however busy the machine (the knee's value is the virtual-time test's):
    # 20 requests sent at once queue 0.36 s on the two slots, and with both cores kept busy by
    # other processes a 0.3 s target was missed at 30 req/s over HTTP.
    _chat_profile(fleet, 5.0)
    previous = _previous_figure(fleet)
    _endpoint(fleet, replica_url)

    run = _request_and_run(fleet, django_capture_on_commit_callbacks)

    assert run.status == BenchmarkRun.Status.SUCCEEDED, run.error
    figure = run.figures.get()
    assert figure.source == CapacityFigure.Source.ENDPOINT_LOAD_TEST
    assert figure.knee_requests_per_s is not None and figure.knee_requests_per_s >= FIRST_RATE
    assert figure.prefill_tokens_per_s > 0 and figure.decode_tokens_per_s > 0
    provenance = figure.provenance
    assert provenance["workload"]["endpoint"]["base_url"] == replica_url
    assert provenance["software"]["ray"] and len(provenance["hardware"]["load_generators"]) == 2
    for point in run.results["load_test"]["points"]:
        assert point["errors"] == 0 and point["timeouts"] == 0
    assert CapacityFigure.objects.filter(pk=previous.pk).exists()


def test_an_unreachable_endpoint_fails_the_run_and_keeps_the_figure(
    fleet: BenchFleet, local_ray: None, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    previous = _previous_figure(fleet)
    _endpoint(fleet, f"http://127.0.0.1:{_free_port()}")

    run = _request_and_run(fleet, django_capture_on_commit_callbacks)

    assert run.status == BenchmarkRun.Status.FAILED
    assert run.error.startswith(
        f"endpoint load test failed: at {FIRST_RATE:g} req/s: 20 of 20 requests failed"
    )
    assert list(CapacityFigure.objects.all()) == [previous]


@pytest.mark.parametrize("enabled", [None, False], ids=["no-endpoint", "disabled"])
def test_without_an_enabled_endpoint_the_run_fails_saying_so(
    enabled: bool | None, fleet: BenchFleet, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    previous = _previous_figure(fleet)
    if enabled is not None:
        _endpoint(fleet, "http://replica-0.internal:8000", enabled=enabled)

    run = _request_and_run(fleet, django_capture_on_commit_callbacks)

    assert run.status == BenchmarkRun.Status.FAILED
    assert run.error.startswith(f"shape {fleet.shape.name} has no enabled benchmark endpoint")
    assert list(CapacityFigure.objects.all()) == [previous]
    assert CapacityFigure.objects.get().knee_requests_per_s == FIRST_RATE


def test_a_key_variable_missing_on_the_worker_fails_the_run(
    fleet: BenchFleet,
    eager: None,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    monkeypatch.delenv("HEADROOM_TEST_REPLICA_KEY", raising=False)
    _endpoint(fleet, "http://replica-0.internal:8000", api_key_env="HEADROOM_TEST_REPLICA_KEY")

    run = _request_and_run(fleet, django_capture_on_commit_callbacks)

    assert run.status == BenchmarkRun.Status.FAILED
    assert "HEADROOM_TEST_REPLICA_KEY" in run.error and "not set on the worker" in run.error
    monkeypatch.setenv("HEADROOM_TEST_REPLICA_KEY", "secret-key")
    plan = services.endpoint_load_test_plan(BenchmarkEndpoint.objects.get())
    assert plan.endpoint.headers()["Authorization"] == "Bearer secret-key"
    assert plan.max_concurrency == SLOTS and plan.requests_per_point == 20


def test_a_second_delivery_leaves_a_started_run_alone(fleet: BenchFleet) -> None:
    run, _ = services.benchmark_run_request(
        shape=fleet.shape, kind=BenchmarkRun.Kind.ENDPOINT, enqueue=False
    )
    services.benchmark_run_start(run=run)
    # No endpoint is configured, yet the running run is not failed by a redelivered task.
    assert benchmark_tasks.endpoint(run.pk) == BenchmarkRun.Status.RUNNING
    assert benchmark_tasks.endpoint(987_654) is None


def test_an_endpoint_run_measures_the_shapes_gpus_whatever_the_device_setting(
    fleet: BenchFleet, settings: Any
) -> None:
    # HEADROOM_BENCHMARK_DEVICE says where engine benchmarks run; a load test measures a
    # replica of the shape, which runs on the shape's GPUs.
    settings.HEADROOM_BENCHMARK_DEVICE = "cpu"
    engine, _ = services.benchmark_run_request(shape=fleet.shape, enqueue=False)
    endpoint, _ = services.benchmark_run_request(
        shape=fleet.shape, kind=BenchmarkRun.Kind.ENDPOINT, enqueue=False
    )
    assert engine.device == BenchmarkRun.Device.CPU
    assert endpoint.device == BenchmarkRun.Device.GPU


# -- the schedule ---------------------------------------------------------------------------------


def test_the_schedule_load_tests_a_stale_shape_with_an_endpoint(
    fleet: BenchFleet, sent: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    make_figure(fleet.shape, age_days=45)
    _endpoint(fleet, "http://replica-0.internal:8000")
    with django_capture_on_commit_callbacks(execute=True):
        summary = benchmark_tasks.schedule()
    run = BenchmarkRun.objects.get()
    assert run.kind == BenchmarkRun.Kind.ENDPOINT and run.trigger == BenchmarkRun.Trigger.SCHEDULE
    assert summary["queued"] == [
        {"shape": fleet.shape.name, "kind": "endpoint", "reasons": [run.reason], "run": run.pk}
    ]
    assert sent == [run.pk]
    # Idempotent while it is queued.
    again = services.benchmarks_schedule(enqueue=False)
    assert again.queued == [] and again.skipped[0]["why"] == "a run is already queued or running"


def test_the_schedule_waits_after_a_failed_load_test(fleet: BenchFleet, settings: Any) -> None:
    settings.HEADROOM_BENCHMARK_RETRY_AFTER_S = 3600
    make_figure(fleet.shape, age_days=45)
    _endpoint(fleet, "http://replica-0.internal:8000")
    queued = services.benchmarks_schedule(enqueue=False)
    run = BenchmarkRun.objects.get(pk=queued.queued[0]["run"])
    services.benchmark_run_fail(run=run, error="the replica refused")
    report = services.benchmarks_schedule(enqueue=False)
    assert report.queued == [] and report.skipped[0]["why"] == f"run {run.pk} failed recently"
    assert report.skipped[0]["kind"] == "endpoint"


def test_an_endpoint_needs_no_model_architecture(db: None) -> None:
    fleet = make_bench_fleet(architecture=False)
    _endpoint(fleet, "http://replica-0.internal:8000")
    report = services.benchmarks_schedule(enqueue=False)
    assert [row["kind"] for row in report.queued] == ["endpoint"]


def test_shapes_without_an_enabled_endpoint_keep_the_engine_benchmark(fleet: BenchFleet) -> None:
    make_figure(fleet.shape, age_days=45)
    _endpoint(fleet, "http://replica-0.internal:8000", enabled=False)
    report = services.benchmarks_schedule(enqueue=False)
    (row,) = report.queued
    assert row["kind"] == "engine"
    assert BenchmarkRun.objects.get().kind == BenchmarkRun.Kind.ENGINE
