"""Benchmark operations: request a run, start it, record its results as capacity figures or
fail it, run the engine benchmark on Ray or the endpoint load test against the shape's
``BenchmarkEndpoint``, and schedule runs for shapes whose figures are stale.

The life of a run (``BenchmarkRun``)::

    benchmark_run_request  →  queued
    benchmark_run_start    →  running   (records what it measures: workload, model, shape)
    benchmark_results_record → succeeded, with the CapacityFigures it measured
    benchmark_run_fail     →  failed, with the error; no figure is stored, the previous stay

Each kind of run has its Celery task, sent when the request commits: an engine run
``headroom.benchmarks.engine`` (``benchmark_run_execute``), an endpoint run
``headroom.benchmarks.endpoint`` (``endpoint_run_execute``, which builds the load test's plan
from the shape's enabled ``BenchmarkEndpoint`` and hands it to
``workers.benchmarks.loadtest.endpoint_load_test_execute``). Both go through the states above.

Scheduling (``benchmarks_schedule``, run by Celery beat) requests one run per shape whose
figures need measuring again (``selectors.refresh_reasons``): an endpoint load test when the
shape has an enabled endpoint (it measures the served replica, knee included), else an engine
benchmark. Never a second one of that kind while one is queued or running, not again soon after
one failed, and no engine run for a model whose architecture is incomplete (the engine benchmark
builds the model from it).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.benchmarks import selectors
from controlplane.benchmarks.conf import BenchmarkSettings, benchmark_settings
from controlplane.benchmarks.models import BenchmarkEndpoint, BenchmarkRun
from controlplane.core.schedule import ScheduledTask
from controlplane.core.tasks import task_send
from controlplane.fleet.models import GB, CapacityFigure, ReplicaShape, WorkloadClass

if TYPE_CHECKING:  # the load test's modules need the bench extra (Ray, aiohttp)
    from workers.benchmarks.loadgen import LoadGeneratorPool
    from workers.benchmarks.loadtest import LoadTestPlan

logger = logging.getLogger(__name__)

Actor = AbstractBaseUser | AnonymousUser
# Runs the engine job: (job, settings) → the runner's result (see ``workers.benchmarks``).
EngineRunner = Callable[[Mapping[str, Any], BenchmarkSettings], Mapping[str, Any]]

ENGINE_TASK = "headroom.benchmarks.engine"
ENDPOINT_TASK = "headroom.benchmarks.endpoint"
SCHEDULE_TASK = "headroom.benchmarks.schedule"
SCHEDULE_NAME = "benchmarks: measure shapes with stale capacity figures"


class RunStateError(Exception):
    """The run is not in the state the operation needs (e.g. starting a finished run)."""


@dataclass(frozen=True)
class MeasuredFigure:
    """One capacity figure a run measured: what one replica of the shape sustains.

    Rates in tokens/s (prefill: prompt tokens ingested; decode: output tokens generated, in
    aggregate over the batch); ``max_concurrency`` in sequences; ``knee_requests_per_s`` (the
    load test's highest open-loop rate whose p95 TTFT met the target) in requests/s.
    ``workload_class`` None: the figure holds for the shape's whole mix.
    """

    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    max_concurrency: int
    knee_requests_per_s: float | None = None
    workload_class: WorkloadClass | None = None


def _recorded(user: Actor | None) -> AbstractBaseUser | None:
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return user  # type: ignore[return-value]


# -- requesting -------------------------------------------------------------------------------------


def benchmark_run_request(
    *,
    shape: ReplicaShape,
    kind: str = BenchmarkRun.Kind.ENGINE,
    trigger: str = BenchmarkRun.Trigger.MANUAL,
    reason: str = "",
    user: Actor | None = None,
    device: str | None = None,
    enqueue: bool = True,
) -> tuple[BenchmarkRun, bool]:
    """Queue a benchmark run of ``shape``; idempotent.

    Returns ``(run, created)``: when the shape already has a queued or running run of this
    kind, that run and False (the database's partial unique constraint settles two requests
    racing). ``device`` defaults to ``HEADROOM_BENCHMARK_DEVICE``; an endpoint run's is always
    ``gpu`` (it measures a replica on the shape's GPUs).
    With ``enqueue`` the run's Celery task (``headroom.benchmarks.engine`` or
    ``headroom.benchmarks.endpoint``) is sent when the transaction commits; without a broker it
    then runs in-process. An endpoint run is queued whether or not the shape has an enabled
    endpoint: without one it fails when its task runs, saying so.
    """
    existing = selectors.active_run(shape, kind)
    if existing is not None:
        return existing, False
    run = BenchmarkRun(
        shape=shape,
        kind=kind,
        trigger=trigger,
        reason=reason[:500],
        # An endpoint run measures a replica of the shape, on the shape's GPUs, wherever
        # the load comes from; the device setting is where engine benchmarks run.
        device=(device or benchmark_settings().device)
        if kind == BenchmarkRun.Kind.ENGINE
        else BenchmarkRun.Device.GPU,
        requested_by=_recorded(user),
    )
    # The constraint is checked by the database below, race-safely; validate the rest.
    run.full_clean(validate_constraints=False)
    try:
        with transaction.atomic():
            run.save()
    except IntegrityError:
        existing = selectors.active_run(shape, kind)
        if existing is None:
            raise
        return existing, False
    if enqueue:
        run_id = run.pk
        if kind == BenchmarkRun.Kind.ENDPOINT:
            transaction.on_commit(lambda: _enqueue_endpoint(run_id))
        else:
            transaction.on_commit(lambda: _enqueue_engine(run_id))
    return run, True


def _enqueue_engine(run_id: int) -> None:
    task_send(ENGINE_TASK, run_id)


def _enqueue_endpoint(run_id: int) -> None:
    task_send(ENDPOINT_TASK, run_id)


# -- running ------------------------------------------------------------------------------------


def benchmark_run_start(
    *, run: BenchmarkRun, task_id: str = "", workload: Mapping[str, Any] | None = None
) -> BenchmarkRun:
    """Mark a queued run running and record what it measures (``run.inputs``): the workload
    (``workload`` when given, else the model's current profiles, ``selectors.workload_summary``),
    the model's architecture, the shape and the runtime version, and the workload profile
    version. Raises ``RunStateError`` unless the run is queued (a second delivery of its task).
    """
    with transaction.atomic():
        locked = (
            BenchmarkRun.objects.select_for_update()
            .select_related("shape__model", "shape__accelerator")
            .get(pk=run.pk)
        )
        if locked.status != BenchmarkRun.Status.QUEUED:
            raise RunStateError(f"benchmark run {run.pk} is {locked.status}, not queued")
        shape = locked.shape
        summary = selectors.workload_summary(shape.model)
        locked.status = BenchmarkRun.Status.RUNNING
        locked.started_at = timezone.now()
        locked.task_id = task_id[:64]
        locked.workload_profile_version = summary.profile_version
        locked.inputs = {
            "workload": dict(workload) if workload is not None else summary.as_dict(),
            "model": selectors.model_fingerprint(shape.model),
            "shape": selectors.shape_fingerprint(shape),
            "runtime_version": shape.runtime_version,
        }
        locked.full_clean(validate_constraints=False)
        locked.save()
    return locked


def benchmark_results_record(
    *,
    run: BenchmarkRun,
    figures: Sequence[MeasuredFigure],
    results: Mapping[str, Any],
    hardware: Mapping[str, Any],
    software: Mapping[str, Any],
    measured_at: datetime | None = None,
) -> list[CapacityFigure]:
    """Store what a running run measured and mark it succeeded, in one transaction.

    Each ``MeasuredFigure`` becomes a ``CapacityFigure`` of the run's shape, with source
    ``engine-benchmark`` or ``endpoint-load-test`` (from the run's kind) and provenance: the
    run id and kind, ``hardware`` (e.g. ``{"gpu": "NVIDIA H200", "gpus": 1}`` or
    ``{"cpu": "AMD EPYC …"}``), ``software`` (e.g. torch, ray, python, cuda versions), the
    workload profile version, and the workload, model, shape and runtime version the run
    recorded when it started (the schedule compares these with the current ones).
    ``results`` is every measured point, stored on the run. Figures are validated
    (``full_clean``): an invalid one stores nothing and raises ``ValidationError``, and the run
    stays running for the caller to fail. Raises ``RunStateError`` unless the run is running.
    """
    if not figures:
        raise ValidationError({"figures": "A successful run measures at least one figure."})
    when = measured_at or timezone.now()
    with transaction.atomic():
        locked = BenchmarkRun.objects.select_for_update().select_related("shape").get(pk=run.pk)
        if locked.status != BenchmarkRun.Status.RUNNING:
            raise RunStateError(f"benchmark run {run.pk} is {locked.status}, not running")
        inputs = locked.inputs if isinstance(locked.inputs, Mapping) else {}
        provenance = {
            "benchmark_run": locked.pk,
            "kind": locked.kind,
            "device": locked.device,
            "hardware": dict(hardware),
            "software": dict(software),
            "workload_profile_version": locked.workload_profile_version,
            "workload": inputs.get("workload", {}),
            "model": inputs.get("model", selectors.model_fingerprint(locked.shape.model)),
            "shape": inputs.get("shape", selectors.shape_fingerprint(locked.shape)),
            "runtime_version": inputs.get("runtime_version", locked.shape.runtime_version),
        }
        stored = []
        for measured in figures:
            figure = CapacityFigure(
                shape=locked.shape,
                workload_class=measured.workload_class,
                prefill_tokens_per_s=measured.prefill_tokens_per_s,
                decode_tokens_per_s=measured.decode_tokens_per_s,
                max_concurrency=measured.max_concurrency,
                knee_requests_per_s=measured.knee_requests_per_s,
                measured_at=when,
                source=locked.figure_source,
                provenance=provenance,
            )
            figure.full_clean()
            figure.save()
            stored.append(figure)
        locked.status = BenchmarkRun.Status.SUCCEEDED
        locked.finished_at = timezone.now()
        locked.results = dict(results)
        locked.hardware = dict(hardware)
        locked.software = dict(software)
        locked.error = ""
        locked.save()
        locked.figures.add(*stored)
    run.refresh_from_db()
    return stored


def benchmark_run_fail(
    *,
    run: BenchmarkRun,
    error: str,
    hardware: Mapping[str, Any] | None = None,
    software: Mapping[str, Any] | None = None,
    results: Mapping[str, Any] | None = None,
) -> BenchmarkRun:
    """Mark a queued or running run failed with ``error``; no figure is stored, so the
    shape's previous figures stay. A finished run is returned unchanged."""
    with transaction.atomic():
        locked = BenchmarkRun.objects.select_for_update().get(pk=run.pk)
        if locked.status in BenchmarkRun.FINISHED:
            return locked
        locked.status = BenchmarkRun.Status.FAILED
        locked.finished_at = timezone.now()
        locked.error = error or "failed without an error message"
        if hardware:
            locked.hardware = dict(hardware)
        if software:
            locked.software = dict(software)
        if results:
            locked.results = dict(results)
        locked.save()
    run.refresh_from_db()
    return locked


def engine_job(run: BenchmarkRun) -> dict[str, Any]:
    """The engine benchmark's job for a running run, as plain data (it crosses to a Ray
    worker): the model's dimensions, the workload, the device, the GPUs, the runtime reserve
    and, on GPU, the accelerator's peak figures (the roofline). Raises ``ValueError`` when the
    model's architecture is incomplete."""
    shape = run.shape
    model = shape.model
    if not model.has_architecture:
        missing = [name for name in model.ARCHITECTURE_FIELDS if getattr(model, name) is None]
        raise ValueError(
            f"model {model.name} has no {', '.join(missing)}: the engine benchmark builds the "
            "model from its architecture; fill these in on the model"
        )
    inputs = run.inputs if isinstance(run.inputs, Mapping) else {}
    workload = inputs.get("workload") or selectors.workload_summary(model).as_dict()
    gpu = run.device == BenchmarkRun.Device.GPU
    return {
        "model": {
            "name": model.name,
            "layers": model.layers,
            "hidden_size": model.hidden_size,
            "intermediate_size": model.intermediate_size,
            "attention_heads": model.attention_heads,
            "kv_heads": model.kv_heads,
            "head_dim": model.head_dim,
            "vocab_size": model.vocab_size,
        },
        "workload": {
            key: workload[key]
            for key in (
                "prompt_tokens_mean",
                "prompt_tokens_p95",
                "output_tokens_mean",
                "output_tokens_p95",
            )
        },
        "device": "cuda" if gpu else "cpu",
        "gpus": shape.gpus_per_replica if gpu else 0,
        "reserve_bytes_per_device": shape.runtime_reserve_gb_per_gpu * GB,
        "accelerator": (
            {
                "name": shape.accelerator.name,
                "peak_tflops": shape.accelerator.peak_bf16_tflops,
                "memory_tbps": shape.accelerator.memory_tbps,
                "memory_gb": shape.accelerator.memory_gb,
            }
            if gpu
            else None
        ),
    }


def _default_runner(job: Mapping[str, Any], conf: BenchmarkSettings) -> Mapping[str, Any]:
    # Imported here: Ray is only needed where benchmarks run.
    from workers.benchmarks import ray_runner

    return ray_runner.run_engine_job(
        job,
        address=conf.ray_address or None,
        num_cpus=conf.ray_num_cpus,
        timeout_s=conf.timeout_s,
        gpu_wait_s=conf.gpu_wait_s,
    )


def benchmark_run_execute(
    *, run_id: int, task_id: str = "", runner: EngineRunner | None = None
) -> BenchmarkRun | None:
    """Run the queued engine benchmark ``run_id`` and record its figures; returns the run as
    it ended (None: no such run).

    ``runner`` runs the job (default: on Ray, ``workers.benchmarks.ray_runner``). Never raises
    for a failed benchmark: a Ray cluster without the GPUs the shape needs, a timeout, an
    out-of-memory or an invalid figure marks the run failed with the error, and the shape's
    previous figures stay. A run that is not queued (a second delivery of the task) is
    returned as it is.
    """
    found = (
        BenchmarkRun.objects.select_related("shape__model", "shape__accelerator")
        .filter(pk=run_id)
        .first()
    )
    if found is None:
        return None
    if found.kind != BenchmarkRun.Kind.ENGINE:
        raise RunStateError(f"benchmark run {run_id} is an {found.kind} run, not an engine run")
    try:
        started = benchmark_run_start(run=found, task_id=task_id)
    except RunStateError:
        return BenchmarkRun.objects.get(pk=run_id)
    conf = benchmark_settings()
    hardware: Mapping[str, Any] | None = None
    software: Mapping[str, Any] | None = None
    try:
        job = engine_job(started)
        outcome = (runner or _default_runner)(job, conf)
        hardware = outcome.get("hardware") or {}
        software = outcome.get("software") or {}
        figure = outcome["figure"]
        benchmark_results_record(
            run=started,
            figures=[
                MeasuredFigure(
                    prefill_tokens_per_s=float(figure["prefill_tokens_per_s"]),
                    decode_tokens_per_s=float(figure["decode_tokens_per_s"]),
                    max_concurrency=int(figure["max_concurrency"]),
                )
            ],
            results=outcome,
            hardware=hardware,
            software=software,
        )
    except Exception as exc:  # every failure is recorded on the run, none escapes
        logger.warning("benchmark run %s failed: %s", run_id, exc, exc_info=True)
        message = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, ValidationError):
            message = f"the measured figure is invalid: {exc.message_dict}"
        benchmark_run_fail(run=started, error=message, hardware=hardware, software=software)
    return BenchmarkRun.objects.get(pk=run_id)


def endpoint_load_test_plan(
    endpoint: BenchmarkEndpoint, *, environ: Mapping[str, str] | None = None
) -> LoadTestPlan:
    """The load test's plan for ``endpoint``: where to send (URL, served model, API, timeout,
    ``ignore_eos``, the bearer key read from ``environ``, default ``os.environ``, under the
    endpoint's ``api_key_env``), the replica's ``max_concurrency`` and the requests per rate.
    The target, the first rate and the rest are the load test's defaults (the tiers' strictest
    p95 TTFT, the shape's freshest figure). Raises ``ValueError`` when the key's variable is
    not set or the endpoint has no ``max_concurrency``, and ``ImportError`` without the bench
    extra.
    """
    from workers.benchmarks.loadgen import Endpoint
    from workers.benchmarks.loadtest import LoadTestPlan

    env = os.environ if environ is None else environ
    key: str | None = None
    if endpoint.api_key_env:
        key = env.get(endpoint.api_key_env)
        if not key:
            raise ValueError(
                f"the environment variable {endpoint.api_key_env} (the bearer key of "
                f"{endpoint.base_url}) is not set on the worker"
            )
    if endpoint.max_concurrency is None:
        raise ValueError(
            f"the benchmark endpoint of shape {endpoint.shape.name} has no max_concurrency"
        )
    return LoadTestPlan(
        endpoint=Endpoint(
            endpoint.base_url,
            endpoint.served_model_name,
            api="chat" if endpoint.api == BenchmarkEndpoint.Api.CHAT else "completions",
            api_key=key,
            timeout_s=endpoint.timeout_s,
            ignore_eos=endpoint.ignore_eos,
        ),
        max_concurrency=endpoint.max_concurrency,
        requests_per_point=endpoint.requests_per_point,
    )


def endpoint_run_execute(
    *, run_id: int, task_id: str = "", pool: LoadGeneratorPool | None = None
) -> BenchmarkRun | None:
    """Run the queued endpoint load test ``run_id`` against its shape's enabled
    ``BenchmarkEndpoint`` and record its figure; returns the run as it ended (None: no such
    run).

    Never raises for a failed test: a shape without an enabled endpoint, a bearer key missing
    from the worker's environment, a worker without the bench extra, and whatever
    ``endpoint_load_test_execute`` reports (an unreachable endpoint, a model without workload
    profiles, Ray failing) mark the run failed with the reason, and the shape's previous
    figures stay. A run that is not queued (a second delivery of the task) is returned as it
    is. ``pool``: load generators to use (default: new ones on the Ray the settings name).
    """
    found = BenchmarkRun.objects.select_related("shape").filter(pk=run_id).first()
    if found is None:
        return None
    if found.kind != BenchmarkRun.Kind.ENDPOINT:
        raise RunStateError(f"benchmark run {run_id} is an {found.kind} run, not an endpoint run")
    if found.status != BenchmarkRun.Status.QUEUED:
        return found
    endpoint = selectors.enabled_endpoint(found.shape)
    if endpoint is None:
        return benchmark_run_fail(
            run=found,
            error=(
                f"shape {found.shape.name} has no enabled benchmark endpoint: register a "
                "replica of it (admin: Benchmark endpoints, or POST /api/benchmarks/endpoints/)"
            ),
        )
    try:
        from workers.benchmarks.loadtest import endpoint_load_test_execute

        if pool is None:  # the load generators run on Ray
            importlib.import_module("workers.benchmarks.ray_runner")
        plan = endpoint_load_test_plan(endpoint)
    except ImportError as exc:
        return benchmark_run_fail(
            run=found,
            error=f"the endpoint load test needs the bench extra (Ray, aiohttp) on the worker: {exc}",
        )
    except ValueError as exc:
        return benchmark_run_fail(run=found, error=str(exc))
    return endpoint_load_test_execute(run_id=run_id, plan=plan, task_id=task_id, pool=pool)


# -- scheduling -------------------------------------------------------------------------------


@dataclass
class ScheduleReport:
    """What one scheduling pass did: runs queued, shapes skipped and why, overdue runs
    failed, and how many shapes were fresh."""

    queued: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)
    fresh: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "queued": list(self.queued),
            "skipped": list(self.skipped),
            "expired": list(self.expired),
            "fresh": self.fresh,
        }


def benchmarks_schedule(*, now: datetime | None = None, enqueue: bool = True) -> ScheduleReport:
    """Request a benchmark for each shape whose figures need measuring again.

    First fails runs queued or running for over twice ``HEADROOM_BENCHMARK_TIMEOUT_S`` (their
    worker or message was lost; they would otherwise block their shape for ever). Then, per
    shape with refresh reasons, the kind of run: an endpoint load test when the shape has an
    enabled ``BenchmarkEndpoint``, else an engine benchmark. The shape is skipped when a run of
    that kind is already queued or running (idempotent), when its last run of that kind failed
    less than ``HEADROOM_BENCHMARK_RETRY_AFTER_S`` ago, or, for an engine run, when its model's
    architecture is incomplete; else one run is queued with the reasons.
    """
    conf = benchmark_settings()
    now = now or timezone.now()
    report = ScheduleReport()
    for run in selectors.overdue_runs(timeout=timedelta(seconds=2 * conf.timeout_s), now=now):
        benchmark_run_fail(
            run=run,
            error=(
                f"abandoned: still {run.status} after {2 * conf.timeout_s:g} s (its worker or "
                "its task message was lost)"
            ),
        )
        report.expired.append(run.pk)
    with_endpoint = selectors.enabled_endpoint_shape_ids()
    for freshness in selectors.shapes_freshness():
        shape = freshness.shape
        if freshness.is_fresh:
            report.fresh += 1
            continue
        kind = BenchmarkRun.Kind.ENDPOINT if shape.pk in with_endpoint else BenchmarkRun.Kind.ENGINE
        row = {"shape": shape.name, "kind": str(kind), "reasons": list(freshness.reasons)}
        if selectors.active_run(shape, kind) is not None:
            report.skipped.append({**row, "why": "a run is already queued or running"})
            continue
        if kind == BenchmarkRun.Kind.ENGINE and not shape.model.has_architecture:
            report.skipped.append({**row, "why": f"model {shape.model.name} lacks dimensions"})
            continue
        last = selectors.last_finished_run(shape, kind)
        if (
            last is not None
            and last.status == BenchmarkRun.Status.FAILED
            and last.finished_at is not None
            and (now - last.finished_at).total_seconds() < conf.retry_after_s
        ):
            report.skipped.append({**row, "why": f"run {last.pk} failed recently"})
            continue
        run, created = benchmark_run_request(
            shape=shape,
            kind=kind,
            trigger=BenchmarkRun.Trigger.SCHEDULE,
            reason="; ".join(freshness.reasons),
            enqueue=enqueue,
        )
        if created:
            report.queued.append({**row, "run": run.pk})
        else:
            report.skipped.append({**row, "why": "a run is already queued or running"})
    return report


def benchmark_schedule() -> tuple[ScheduledTask, ...]:
    """The beat entry that keeps figures fresh (every ``HEADROOM_BENCHMARK_SCHEDULE_S``)."""
    return (
        ScheduledTask(
            SCHEDULE_NAME,
            SCHEDULE_TASK,
            int(benchmark_settings().schedule_s),
            "Queue a benchmark for each shape whose capacity figure is stale: an endpoint load "
            "test where the shape has an enabled endpoint, else an engine benchmark.",
        ),
    )
