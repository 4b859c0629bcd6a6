"""Benchmark runs and capacity figures: requesting (idempotent), recording with provenance,
failing (previous figures stay), the schedule that finds stale shapes, and the beat entry.

The engine itself is replaced by a fake runner here; ``test_benchmarks_ray.py`` runs it on Ray.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from controlplane.benchmarks import selectors, services
from controlplane.benchmarks import tasks as benchmark_tasks
from controlplane.benchmarks.models import BenchmarkRun
from controlplane.fleet.models import CapacityFigure, LlmModel
from tests.controlplane.test_benchmarks_helpers import (
    BenchFleet,
    FakeRunner,
    make_bench_fleet,
    make_figure,
    make_profile,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(db: None) -> BenchFleet:
    return make_bench_fleet()


@pytest.fixture(autouse=True)
def _gpu_device(settings: Any) -> None:
    settings.HEADROOM_BENCHMARK_DEVICE = "gpu"
    settings.HEADROOM_CAPACITY_MAX_AGE_DAYS = 30


def _run(fleet: BenchFleet, runner: FakeRunner) -> BenchmarkRun:
    run, created = services.benchmark_run_request(shape=fleet.shape, enqueue=False)
    assert created
    ended = services.benchmark_run_execute(run_id=run.pk, runner=runner)
    assert ended is not None
    return ended


# -- the model's architecture -------------------------------------------------------------------


def test_model_architecture_is_all_or_nothing(fleet: BenchFleet) -> None:
    model = LlmModel(
        name="half", parameters_billions=8, layers=32, kv_heads=8, head_dim=128, hidden_size=4096
    )
    with pytest.raises(ValidationError) as info:
        model.full_clean()
    assert set(info.value.message_dict) == {"intermediate_size", "attention_heads", "vocab_size"}
    assert not model.has_architecture and fleet.model.has_architecture


def test_attention_heads_must_group_over_kv_heads(fleet: BenchFleet) -> None:
    fleet.model.attention_heads = 5
    with pytest.raises(ValidationError) as info:
        fleet.model.full_clean()
    assert "multiple of the KV heads" in info.value.message_dict["attention_heads"][0]


# -- requesting, recording, failing ------------------------------------------------------------


def test_request_is_idempotent_while_a_run_is_active(fleet: BenchFleet) -> None:
    first, created = services.benchmark_run_request(shape=fleet.shape, enqueue=False)
    again, created_again = services.benchmark_run_request(shape=fleet.shape, enqueue=False)
    assert created and not created_again and again.pk == first.pk
    assert first.status == BenchmarkRun.Status.QUEUED and first.device == "gpu"
    # An endpoint load test of the same shape is another kind: it may run alongside.
    endpoint, created_endpoint = services.benchmark_run_request(
        shape=fleet.shape, kind=BenchmarkRun.Kind.ENDPOINT, enqueue=False
    )
    assert created_endpoint and endpoint.pk != first.pk


def test_database_refuses_a_second_active_run(fleet: BenchFleet) -> None:
    # Writers that skip the service (two workers racing) still cannot make two.
    BenchmarkRun.objects.create(shape=fleet.shape)
    with pytest.raises(IntegrityError), transaction.atomic():
        BenchmarkRun.objects.create(shape=fleet.shape, status=BenchmarkRun.Status.RUNNING)


def test_a_finished_run_frees_the_shape_for_the_next(fleet: BenchFleet) -> None:
    first = _run(fleet, FakeRunner())
    second, created = services.benchmark_run_request(shape=fleet.shape, enqueue=False)
    assert first.status == BenchmarkRun.Status.SUCCEEDED and created and second.pk != first.pk


def test_results_become_a_figure_with_provenance(fleet: BenchFleet) -> None:
    runner = FakeRunner()
    run = _run(fleet, runner)
    assert run.status == BenchmarkRun.Status.SUCCEEDED, run.error
    figure = run.figures.get()
    assert figure.source == CapacityFigure.Source.ENGINE_BENCHMARK
    assert figure.workload_class is None and figure.knee_requests_per_s is None
    assert (figure.prefill_tokens_per_s, figure.decode_tokens_per_s) == (12000.0, 900.0)
    assert figure.max_concurrency == 48
    provenance = figure.provenance
    assert provenance["benchmark_run"] == run.pk and provenance["kind"] == "engine"
    assert provenance["hardware"] == {"gpu": "Fake GPU", "gpus": 1}
    assert set(provenance["software"]) == {"torch", "ray", "python", "cuda"}
    assert provenance["workload_profile_version"] == selectors.workload_profile_version(fleet.model)
    assert provenance["workload_profile_version"].startswith("1:")
    assert provenance["model"] == selectors.model_fingerprint(fleet.model)
    assert provenance["shape"]["gpus_per_replica"] == 1
    assert provenance["runtime_version"] == "vllm-0.6.3"
    assert provenance["workload"]["prompt_tokens_mean"] == 40
    # The job the runner got: the shape's GPUs and the accelerator's roofline.
    (job,) = runner.jobs
    assert job["device"] == "cuda" and job["gpus"] == 1
    assert job["accelerator"]["peak_tflops"] == 989 and job["model"]["hidden_size"] == 64
    assert job["workload"] == {
        "prompt_tokens_mean": 40,
        "prompt_tokens_p95": 64,
        "output_tokens_mean": 12,
        "output_tokens_p95": 24,
    }
    assert run.results["figure"]["max_concurrency"] == 48 and run.duration_s is not None


def test_a_failed_run_keeps_the_previous_figures(fleet: BenchFleet) -> None:
    previous = make_figure(fleet.shape, age_days=60)
    run = _run(fleet, FakeRunner(error=RuntimeError("CUDA error: out of memory")))
    assert run.status == BenchmarkRun.Status.FAILED
    assert run.error == "RuntimeError: CUDA error: out of memory"
    assert list(CapacityFigure.objects.filter(shape=fleet.shape)) == [previous]
    assert run.figures.count() == 0 and run.finished_at is not None


def test_an_invalid_figure_fails_the_run_and_stores_nothing(fleet: BenchFleet) -> None:
    runner = FakeRunner(
        figure={"prefill_tokens_per_s": 100.0, "decode_tokens_per_s": 0.0, "max_concurrency": 1}
    )
    run = _run(fleet, runner)
    assert run.status == BenchmarkRun.Status.FAILED
    assert "decode_tokens_per_s" in run.error
    assert not CapacityFigure.objects.exists()


def test_a_model_without_architecture_fails_with_what_is_missing(db: None) -> None:
    fleet = make_bench_fleet(architecture=False)
    runner = FakeRunner()
    run = _run(fleet, runner)
    assert run.status == BenchmarkRun.Status.FAILED and not runner.jobs
    assert "hidden_size, intermediate_size, attention_heads, vocab_size" in run.error


def test_a_second_delivery_does_not_run_again(fleet: BenchFleet) -> None:
    runner = FakeRunner()
    run = _run(fleet, runner)
    again = services.benchmark_run_execute(run_id=run.pk, runner=runner)
    assert again is not None and again.status == BenchmarkRun.Status.SUCCEEDED
    assert len(runner.jobs) == 1 and CapacityFigure.objects.count() == 1
    assert services.benchmark_run_execute(run_id=10**9, runner=runner) is None


def test_recording_needs_a_running_run(fleet: BenchFleet) -> None:
    run, _ = services.benchmark_run_request(shape=fleet.shape, enqueue=False)
    figure = services.MeasuredFigure(100.0, 10.0, 2)
    with pytest.raises(services.RunStateError):
        services.benchmark_results_record(
            run=run, figures=[figure], results={}, hardware={}, software={}
        )
    services.benchmark_run_start(run=run)
    with pytest.raises(services.RunStateError):
        services.benchmark_run_start(run=run)


def test_endpoint_runs_record_load_test_figures_per_class(fleet: BenchFleet) -> None:
    run, _ = services.benchmark_run_request(
        shape=fleet.shape, kind=BenchmarkRun.Kind.ENDPOINT, enqueue=False
    )
    run = services.benchmark_run_start(run=run, workload={"rates": [1, 2, 4]})
    stored = services.benchmark_results_record(
        run=run,
        figures=[
            services.MeasuredFigure(3000.0, 150.0, 24, knee_requests_per_s=1.8),
            services.MeasuredFigure(
                2500.0, 140.0, 20, knee_requests_per_s=1.2, workload_class=fleet.workload_class
            ),
        ],
        results={"knee": 1.8},
        hardware={"endpoint": "http://replica"},
        software={"runtime": "vllm-0.6.3"},
    )
    assert [f.source for f in stored] == [CapacityFigure.Source.ENDPOINT_LOAD_TEST] * 2
    assert stored[1].workload_class == fleet.workload_class
    assert stored[0].provenance["workload"] == {"rates": [1, 2, 4]}
    run.refresh_from_db()
    assert run.status == BenchmarkRun.Status.SUCCEEDED and run.figures.count() == 2


# -- freshness and the schedule -------------------------------------------------------------------


def _fresh_provenance(fleet: BenchFleet) -> dict[str, Any]:
    return {
        "model": selectors.model_fingerprint(fleet.model),
        "shape": selectors.shape_fingerprint(fleet.shape),
        "runtime_version": fleet.shape.runtime_version,
        "workload_profile_version": selectors.workload_profile_version(fleet.model),
    }


def test_a_fresh_figure_schedules_nothing(fleet: BenchFleet) -> None:
    make_figure(fleet.shape, age_days=2, provenance=_fresh_provenance(fleet))
    report = services.benchmarks_schedule(enqueue=False)
    assert report.fresh == 1 and report.queued == [] and not BenchmarkRun.objects.exists()


def test_a_stale_figure_triggers_a_scheduled_benchmark(fleet: BenchFleet) -> None:
    make_figure(fleet.shape, age_days=31, provenance=_fresh_provenance(fleet))
    summary = benchmark_tasks.schedule()
    run = BenchmarkRun.objects.get()
    assert summary["queued"] == [
        {"shape": fleet.shape.name, "kind": "engine", "reasons": [run.reason], "run": run.pk}
    ]
    assert run.trigger == BenchmarkRun.Trigger.SCHEDULE and run.status == "queued"
    assert run.reason.startswith("figure is 31.0 days old (max 30)")


def test_the_schedule_is_idempotent(fleet: BenchFleet) -> None:
    make_figure(fleet.shape, age_days=45)
    first = services.benchmarks_schedule(enqueue=False)
    second = services.benchmarks_schedule(enqueue=False)
    assert len(first.queued) == 1 and second.queued == []
    assert second.skipped[0]["why"] == "a run is already queued or running"
    assert BenchmarkRun.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda f: setattr(f.model, "layers", 3), "model changed since measured (layers)"),
        (lambda f: setattr(f.shape, "runtime_version", "vllm-0.7.0"), "runtime version changed"),
        (lambda f: setattr(f.shape, "gpus_per_replica", 2), "shape changed since measured"),
        (
            lambda f: make_profile(
                tenant=f.tenant, model=f.model, workload_class=f.workload_class, version=2
            ),
            "workload profiles changed since measured",
        ),
    ],
    ids=["model", "runtime", "shape", "workload-profile"],
)
def test_a_change_since_the_figure_was_measured_schedules_a_run(
    fleet: BenchFleet, change: Any, reason: str
) -> None:
    make_figure(fleet.shape, age_days=1, provenance=_fresh_provenance(fleet))
    change(fleet)
    fleet.model.save()
    fleet.shape.save()
    report = services.benchmarks_schedule(enqueue=False)
    assert len(report.queued) == 1
    assert report.queued[0]["reasons"][0].startswith(reason)


def test_a_shape_without_figures_and_a_hand_entered_figure(fleet: BenchFleet) -> None:
    assert selectors.refresh_reasons(fleet.shape, None) == ["no capacity figure"]
    # A recent figure entered by hand records nothing to compare with: it is fresh.
    figure = make_figure(fleet.shape, age_days=1)
    assert selectors.refresh_reasons(fleet.shape, figure) == []


def test_the_schedule_skips_models_without_architecture(db: None) -> None:
    fleet = make_bench_fleet(architecture=False)
    report = services.benchmarks_schedule(enqueue=False)
    assert report.queued == [] and "lacks dimensions" in report.skipped[0]["why"]
    assert fleet.shape.benchmark_runs.count() == 0


def test_a_recent_failure_is_not_retried_at_once(fleet: BenchFleet, settings: Any) -> None:
    settings.HEADROOM_BENCHMARK_RETRY_AFTER_S = 3600
    failed = _run(fleet, FakeRunner(error=RuntimeError("no GPU")))
    report = services.benchmarks_schedule(enqueue=False)
    assert report.queued == [] and report.skipped[0]["why"] == f"run {failed.pk} failed recently"
    later = services.benchmarks_schedule(enqueue=False, now=timezone.now() + timedelta(hours=2))
    assert len(later.queued) == 1


def test_an_abandoned_run_is_failed_and_replaced(fleet: BenchFleet, settings: Any) -> None:
    settings.HEADROOM_BENCHMARK_TIMEOUT_S = 60
    stuck, _ = services.benchmark_run_request(shape=fleet.shape, enqueue=False)
    services.benchmark_run_start(run=stuck)
    BenchmarkRun.objects.filter(pk=stuck.pk).update(
        started_at=timezone.now() - timedelta(minutes=5)
    )
    report = services.benchmarks_schedule(enqueue=False)
    stuck.refresh_from_db()
    assert report.expired == [stuck.pk] and stuck.status == BenchmarkRun.Status.FAILED
    assert stuck.error.startswith("abandoned: still running")
    # The abandoned run counts as a failure just now: the retry delay applies.
    settings.HEADROOM_BENCHMARK_RETRY_AFTER_S = 0
    assert len(services.benchmarks_schedule(enqueue=False).queued) == 1


def test_freshness_reports_every_shape(fleet: BenchFleet) -> None:
    figure = make_figure(fleet.shape, age_days=40)
    (row,) = selectors.shapes_freshness()
    assert row.figure == figure and not row.is_fresh and row.age_days == pytest.approx(40, 0.01)
    assert row.active_run is None and row.last_run is None


def test_workload_summary_weights_profiles_by_peak_rate(fleet: BenchFleet) -> None:
    from controlplane.fleet.models import WorkloadClass
    from controlplane.policies.models import WorkloadProfile

    summarise = WorkloadClass.objects.create(name="summarise")
    WorkloadProfile.objects.create(
        tenant=fleet.tenant,
        model=fleet.model,
        workload_class=summarise,
        peak_requests_per_s=15,
        prompt_tokens_p50=800,
        prompt_tokens_mean=1000,
        prompt_tokens_p95=3000,
        prompt_tokens_p99=5000,
        output_tokens_p50=100,
        output_tokens_mean=120,
        output_tokens_p95=300,
        output_tokens_p99=400,
    )
    summary = selectors.workload_summary(fleet.model)
    # (5 × 40 + 15 × 1000) / 20 = 760; (5 × 12 + 15 × 120) / 20 = 93.
    assert (summary.prompt_tokens_mean, summary.output_tokens_mean) == (760, 93)
    assert (summary.prompt_tokens_p95, summary.output_tokens_p95) == (3000, 300)
    assert summary.profiles == 2
    empty = LlmModel.objects.create(
        name="empty", parameters_billions=1, layers=1, kv_heads=1, head_dim=1
    )
    assert selectors.workload_summary(empty).profile_version == "none"


def test_install_schedule_creates_the_periodic_task_once(settings: Any) -> None:
    settings.HEADROOM_BENCHMARK_SCHEDULE_S = 1800
    out = StringIO()
    call_command("install_schedule", "--only", "benchmarks", stdout=out)
    call_command("install_schedule", "--only", "benchmarks", stdout=out)
    task = PeriodicTask.objects.get(name=services.SCHEDULE_NAME)
    assert task.task == services.SCHEDULE_TASK and task.interval is not None
    assert task.interval.every == 1800 and task.enabled
    assert out.getvalue().splitlines()[1] == f"kept {services.SCHEDULE_NAME!r} as it is"
    task.enabled = False
    task.save()
    call_command("install_schedule", "--only", "benchmarks", "--reset", stdout=out)
    task.refresh_from_db()
    assert task.enabled


def test_requesting_with_enqueue_sends_the_task_at_commit(
    fleet: BenchFleet, django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(benchmark_tasks.engine, "delay", sent.append)
    with django_capture_on_commit_callbacks(execute=True):
        run, _ = services.benchmark_run_request(shape=fleet.shape)
        services.benchmark_run_request(shape=fleet.shape)
    assert sent == [run.pk]
