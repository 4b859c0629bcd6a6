"""The engine benchmark end to end on a local Ray: a run on the CPU stores a figure with its
provenance; a shape that needs a GPU on a Ray without one fails at once with a clear error and
the previous figures stay.

Ray starts once for the whole test session (``ray_session``) with 2 CPUs and no GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest
import ray

from controlplane.benchmarks import services
from controlplane.benchmarks.models import BenchmarkRun
from controlplane.fleet.models import CapacityFigure
from tests.controlplane.test_benchmarks_helpers import BenchFleet, make_bench_fleet, make_figure
from workers.benchmarks import engine, ray_runner


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A local Ray for the whole test run: 2 CPUs, no GPU whatever the machine has."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, num_gpus=0, **ray_runner.LOCAL_INIT)
    yield
    if started:
        ray.shutdown()


@pytest.fixture
def fleet(db: None) -> BenchFleet:
    return make_bench_fleet()


@pytest.mark.django_db
def test_an_engine_run_on_ray_stores_a_figure_with_provenance(
    ray_session: None, fleet: BenchFleet, settings: Any
) -> None:
    settings.HEADROOM_BENCHMARK_DEVICE = "cpu"
    previous = make_figure(fleet.shape, age_days=45)
    run, _ = services.benchmark_run_request(shape=fleet.shape, enqueue=False)
    assert run.device == "cpu"
    ended = services.benchmark_run_execute(run_id=run.pk)
    assert ended is not None and ended.status == BenchmarkRun.Status.SUCCEEDED, ended.error
    figure = ended.figures.get()
    assert figure.source == CapacityFigure.Source.ENGINE_BENCHMARK
    assert figure.measured_at > previous.measured_at
    assert figure.prefill_tokens_per_s > 0 and figure.decode_tokens_per_s > 0
    assert figure.max_concurrency >= 1
    provenance = figure.provenance
    assert provenance["benchmark_run"] == run.pk and provenance["device"] == "cpu"
    assert provenance["hardware"]["gpus"] == 0 and provenance["hardware"]["cpu"]
    software = provenance["software"]
    assert software["ray"] == ray.__version__ and software["torch"] and software["python"]
    assert "cuda" in software
    assert provenance["workload_profile_version"].startswith("1:")
    results = ended.results
    assert [p["prompt_length"] for p in results["prefill"]] == [40, 64]
    fractions = [p["roofline_fraction"] for p in results["prefill"] + results["decode"]]
    assert fractions and all(0 < f <= 1 for f in fractions)
    assert results["figure"]["decode_tokens_per_s"] == figure.decode_tokens_per_s
    # The figure is the shape's freshest now; the previous one is kept as history.
    assert CapacityFigure.objects.filter(shape=fleet.shape).count() == 2


@pytest.mark.django_db
def test_a_gpu_shape_on_a_ray_without_gpus_fails_clearly(
    ray_session: None,
    fleet: BenchFleet,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.HEADROOM_BENCHMARK_DEVICE = "gpu"
    settings.HEADROOM_BENCHMARK_GPU_WAIT_S = 0
    # One GPU more than the test run's Ray has: 1 on a Ray without GPUs (this fixture's), and
    # still too many where another module started Ray on a machine with GPUs.
    have = int(ray_runner.cluster_gpus())
    fleet.shape.gpus_per_replica = have + 1
    fleet.shape.save()
    previous = make_figure(fleet.shape, age_days=45)
    # Through the Celery task, run in-process at commit (no broker in tests).
    with django_capture_on_commit_callbacks(execute=True):
        run, created = services.benchmark_run_request(shape=fleet.shape)
    assert created
    run.refresh_from_db()
    assert run.status == BenchmarkRun.Status.FAILED
    assert run.error.startswith(
        f"BenchmarkRunFailed: the Ray cluster has {have} GPUs, the shape needs {have + 1}"
    )
    assert list(CapacityFigure.objects.filter(shape=fleet.shape)) == [previous]
    assert run.figures.count() == 0 and run.finished_at is not None


def test_waiting_for_gpus_gives_up_after_the_wait(ray_session: None) -> None:
    with pytest.raises(ray_runner.BenchmarkRunFailed, match=r"0 GPUs after waiting 0.2 s"):
        ray_runner.wait_for_gpus(1, wait_s=0.2, poll_s=0.05)
    assert ray_runner.wait_for_gpus(0, wait_s=0) == 0


def test_an_error_inside_the_ray_task_names_its_cause(ray_session: None) -> None:
    job = {
        "model": {**asdict(engine.PRESETS["tiny"]), "attention_heads": 5},
        "workload": {
            "prompt_tokens_mean": 8,
            "prompt_tokens_p95": 8,
            "output_tokens_mean": 4,
            "output_tokens_p95": 4,
        },
        "device": "cpu",
        "gpus": 0,
    }
    with pytest.raises(ray_runner.BenchmarkRunFailed, match=r"^ValueError: attention_heads: 5"):
        ray_runner.run_engine_job(job, timeout_s=300)
