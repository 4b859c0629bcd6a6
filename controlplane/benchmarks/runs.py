"""Benchmark runs, both kinds, one lifecycle: request a run, execute it, record what it measured.

The life of a run (``BenchmarkRun``)::

    benchmark_run_request  →  queued
    benchmark_run_start    →  running   (records what it measures: workload, model, shape)
    benchmark_results_record → succeeded, with the CapacityFigures it measured
    benchmark_run_fail     →  failed, with the error; no figure is stored, the previous stay

Each kind of run has its Celery task, sent when the request commits: an engine run
``headroom.benchmarks.engine`` (``benchmark_run_execute``: the engine benchmark on Ray,
``workers.benchmarks.ray_runner``) and an endpoint run ``headroom.benchmarks.endpoint``
(``endpoint_run_execute``: the load test's plan built from the shape's enabled
``BenchmarkEndpoint``, its defaults resolved from the database, then
``workers.benchmarks.loadtest.load_test_run`` on load generators). Both execute through
``_execute``: start the run, measure (plain data in, a ``Measurement`` out), record the
figures or fail the run with the reason. A failure never escapes: the run records it and the
shape's previous figures stay.

The measuring code in ``workers.benchmarks`` knows nothing of Django; the bench extra it runs
on (Ray, aiohttp, torch) is optional on control-plane processes, so it is imported only where a
run executes, and a worker without it fails the run saying so.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.benchmarks import selectors
from controlplane.benchmarks.conf import BenchmarkSettings, benchmark_settings
from controlplane.benchmarks.models import BenchmarkEndpoint, BenchmarkRun
from controlplane.core.tasks import job_send_on_commit
from controlplane.fleet.models import GB, CapacityFigure, ReplicaShape, WorkloadClass
from planner.capacity.slo import FIRST_POINT_UTILISATION
from planner.capacity.workload import RequestClass, mean_request_cost, replica_request_rate
from planner.errors import PlannerInputError
from workers.benchmarks.endpoint import Endpoint, LoadPool
from workers.benchmarks.loadtest import (
    LoadTestPlan,
    LoadTestResult,
    load_test_run,
    load_test_software,
    load_test_workload,
)
from workers.benchmarks.workload import ClassProfile, classes_from_profiles

logger = logging.getLogger(__name__)

Actor = AbstractBaseUser | AnonymousUser
# Runs the engine job: (job, settings) → the runner's result (see ``workers.benchmarks``).
EngineRunner = Callable[[Mapping[str, Any], BenchmarkSettings], Mapping[str, Any]]
# Starts ``count`` load generators; closing the context stops them.
LoadGenerators = Callable[[int], AbstractContextManager[LoadPool]]

ENGINE_TASK = "headroom.benchmarks.engine"
ENDPOINT_TASK = "headroom.benchmarks.endpoint"


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


@dataclass(frozen=True)
class Measurement:
    """What a run's measuring step produced: the figures and every measured point
    (``results``), or ``failure``, why there is no figure (the results are kept then too)."""

    figures: Sequence[MeasuredFigure]
    results: Mapping[str, Any]
    failure: str = ""


@dataclass
class Provenance:
    """Where and with what a run measured, filled in by its measuring step as it learns it, so
    a run that fails half-way still records what ran it."""

    hardware: dict[str, Any] = field(default_factory=dict)
    software: dict[str, Any] = field(default_factory=dict)


def _recorded(user: Actor | None) -> User | None:
    # Every signed-in user is a stored User (the project keeps Django's user model).
    return user if isinstance(user, User) else None


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
        # Sent at commit; a broker down then fails the run with the reason and raises
        # BrokerUnavailable (the API's 503), so the shape is not blocked by a queued run
        # without a task.
        job_send_on_commit(BenchmarkRun, run.pk, run_task(run), run.pk)
    return run, True


def run_task(run: BenchmarkRun) -> str:
    """The name of the task that executes ``run``."""
    return ENDPOINT_TASK if run.kind == BenchmarkRun.Kind.ENDPOINT else ENGINE_TASK


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


def benchmark_run_abandon(*, run_id: int, reason: str) -> BenchmarkRun | None:
    """Fail run ``run_id`` whose process ended before it finished, with ``reason``; a run that
    finished (or does not exist) is left as it is."""
    run = BenchmarkRun.objects.filter(pk=run_id).first()
    if run is None:
        return None
    return benchmark_run_fail(run=run, error=f"The benchmark did not finish: {reason}.")


def measurement_record(
    *,
    run: BenchmarkRun,
    measurement: Measurement,
    hardware: Mapping[str, Any],
    software: Mapping[str, Any],
) -> list[CapacityFigure]:
    """Record a running run's measurement: its figures (``benchmark_results_record``), or, with
    a ``failure``, the run failed with it and its results (``benchmark_run_fail``); the list
    returned is then empty and the shape's previous figures stay."""
    if measurement.failure:
        benchmark_run_fail(
            run=run,
            error=measurement.failure,
            hardware=hardware,
            software=software,
            results=measurement.results,
        )
        return []
    return benchmark_results_record(
        run=run,
        figures=measurement.figures,
        results=measurement.results,
        hardware=hardware,
        software=software,
    )


def _failure_message(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return f"the measured figure is invalid: {exc.message_dict}"
    if isinstance(exc, ValueError):  # PlannerInputError among them: the message names the field
        return str(exc)[:2000]
    return f"{type(exc).__name__}: {exc}"[:2000]


def _execute(
    *,
    run: BenchmarkRun,
    task_id: str,
    workload: Mapping[str, Any] | None,
    measure: Callable[[BenchmarkRun, Provenance], Measurement],
) -> BenchmarkRun:
    """The one lifecycle: start the queued ``run`` (a run that is not queued, a second delivery
    of its task, is returned as it is), ``measure`` it and record the measurement; any
    exception fails the run with its message. Returns the run as it ended."""
    try:
        started = benchmark_run_start(run=run, task_id=task_id, workload=workload)
    except RunStateError:
        return BenchmarkRun.objects.get(pk=run.pk)
    seen = Provenance()
    try:
        measurement = measure(started, seen)
        measurement_record(
            run=started, measurement=measurement, hardware=seen.hardware, software=seen.software
        )
    except Exception as exc:  # every failure is recorded on the run, none escapes
        logger.warning("benchmark run %s failed: %s", run.pk, exc, exc_info=True)
        benchmark_run_fail(
            run=started, error=_failure_message(exc), hardware=seen.hardware, software=seen.software
        )
    return BenchmarkRun.objects.get(pk=run.pk)


# -- engine runs ----------------------------------------------------------------------------------


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


def _ray_engine_runner(job: Mapping[str, Any], conf: BenchmarkSettings) -> Mapping[str, Any]:
    # The bench extra (Ray) is optional on control-plane processes: imported where a run executes.
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
    run_job = runner or _ray_engine_runner

    def measure(started: BenchmarkRun, seen: Provenance) -> Measurement:
        outcome = run_job(engine_job(started), benchmark_settings())
        seen.hardware = dict(outcome.get("hardware") or {})
        seen.software = dict(outcome.get("software") or {})
        figure = outcome["figure"]
        measured = MeasuredFigure(
            prefill_tokens_per_s=float(figure["prefill_tokens_per_s"]),
            decode_tokens_per_s=float(figure["decode_tokens_per_s"]),
            max_concurrency=int(figure["max_concurrency"]),
        )
        return Measurement(figures=[measured], results=outcome)

    return _execute(run=found, task_id=task_id, workload=None, measure=measure)


# -- endpoint runs --------------------------------------------------------------------------------


def endpoint_load_test_plan(
    endpoint: BenchmarkEndpoint, *, environ: Mapping[str, str] | None = None
) -> LoadTestPlan:
    """The load test's plan for ``endpoint``: where to send (URL, served model, API, timeout,
    ``ignore_eos``, the bearer key read from ``environ``, default ``os.environ``, under the
    endpoint's ``api_key_env``), the replica's ``max_concurrency`` and the requests per rate.
    The target, the first rate and the rest are the load test's defaults (the tiers' strictest
    p95 TTFT, the shape's freshest figure). Raises ``ValueError`` when the key's variable is
    not set or the endpoint has no ``max_concurrency``.
    """
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


def ray_load_generators() -> LoadGenerators:
    """Load generators on the Ray the benchmark settings name (``workers.benchmarks.loadgen``).
    Raises ``ImportError`` on a worker without the bench extra (Ray, aiohttp)."""
    # The bench extra is optional on control-plane processes: imported where a run executes.
    from workers.benchmarks.loadgen import LoadGeneratorPool
    from workers.benchmarks.ray_runner import ray_init

    def start(count: int) -> AbstractContextManager[LoadPool]:
        conf = benchmark_settings()
        ray_init(conf.ray_address or None, num_cpus=conf.ray_num_cpus)
        return LoadGeneratorPool(count)

    return start


def load_test_first_rate(shape: ReplicaShape, classes: Sequence[ClassProfile]) -> float:
    """Where a sweep of ``shape`` starts (req/s): the knee of its freshest capacity figure,
    else 0.7 × the replica request rate that figure's token rates give for the mix, else 1."""
    figure = selectors.freshest_figure(shape)
    if figure is None:
        return 1.0
    if figure.knee_requests_per_s:
        return float(figure.knee_requests_per_s)
    mix = [RequestClass(c.name, c.share, c.prompt.mean, c.output.mean) for c in classes]
    cost = mean_request_cost(mix, figure.prefill_tokens_per_s, figure.decode_tokens_per_s)
    return FIRST_POINT_UTILISATION * replica_request_rate(cost)


def load_test_measurement(result: LoadTestResult, *, max_concurrency: int) -> Measurement:
    """A load test as a run's measurement: one whole-mix figure (the probes' prefill and decode
    rates, ``max_concurrency``, the runtime's batch limit the test ran against, and the knee),
    or the test's failure; the sweep and the probes are the results either way."""
    results = result.results()
    if result.failure or result.rates is None:
        return Measurement(
            figures=[], results=results, failure=f"endpoint load test failed: {result.failure}"
        )
    figure = MeasuredFigure(
        prefill_tokens_per_s=result.rates.prefill_tokens_per_s,
        decode_tokens_per_s=result.rates.decode_tokens_per_s,
        max_concurrency=max_concurrency,
        knee_requests_per_s=result.report.knee_rate,
    )
    return Measurement(figures=[figure], results=results)


def endpoint_run_execute(
    *,
    run_id: int,
    task_id: str = "",
    pool: LoadPool | None = None,
    plan: LoadTestPlan | None = None,
) -> BenchmarkRun | None:
    """Run the queued endpoint load test ``run_id`` and record its figure; returns the run as it
    ended (None: no such run).

    ``plan`` None: the plan of the shape's enabled ``BenchmarkEndpoint``
    (``endpoint_load_test_plan``). The load is the shape's model's current workload profiles
    (``classes_from_profiles``); the plan's open defaults are resolved here (the target: the
    strictest p95 TTFT SLO of those tenants' tiers; the first rate: ``load_test_first_rate``).
    The run is started recording the load and the sweep's settings, the knee is found and the
    token rates probed (``load_test_run``), and the figure stored or the run failed.

    Never raises for a failed test: a shape without an enabled endpoint, a bearer key missing
    from the worker's environment, a worker without the bench extra, a model without workload
    profiles, an unreachable endpoint or Ray failing mark the run failed with the reason, and
    the shape's previous figures stay. A run that is not queued (a second delivery of the task)
    is returned as it is. ``pool``: load generators to use (default: ``plan.generators`` new
    ones on the Ray the settings name, ``ray_load_generators``).
    """
    found = BenchmarkRun.objects.select_related("shape__model").filter(pk=run_id).first()
    if found is None:
        return None
    if found.kind != BenchmarkRun.Kind.ENDPOINT:
        raise RunStateError(f"benchmark run {run_id} is an {found.kind} run, not an endpoint run")
    if found.status != BenchmarkRun.Status.QUEUED:
        return found
    if plan is None:
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
            plan = endpoint_load_test_plan(endpoint)
        except ValueError as exc:
            return benchmark_run_fail(run=found, error=str(exc))
    generators: LoadGenerators
    if pool is None:
        try:
            generators = ray_load_generators()
        except ImportError as exc:
            return benchmark_run_fail(
                run=found,
                error="the endpoint load test needs the bench extra (Ray, aiohttp) on the "
                f"worker: {exc}",
            )
    else:
        given = pool

        def generators(count: int) -> AbstractContextManager[LoadPool]:
            return contextlib.nullcontext(given)  # the caller's pool: the caller closes it

    profiles = selectors.current_profiles(found.shape.model)
    try:
        classes = classes_from_profiles(profiles)
        target = plan.target_ttft_s or min(p.tenant.tier.p95_ttft_slo_s for p in profiles)
    except PlannerInputError as exc:
        return benchmark_run_fail(run=found, error=f"no load to send: {exc}")
    load_plan: LoadTestPlan = plan  # narrowed, for the closure below
    workload = load_test_workload(
        classes,
        endpoint=plan.endpoint,
        target_ttft_s=target,
        quantile=plan.quantile,
        cache=plan.cache,
        requests_per_point=plan.requests_per_point,
        seed=plan.seed,
        cv=plan.cv,
    )

    def measure(started: BenchmarkRun, seen: Provenance) -> Measurement:
        seen.software = dict(load_test_software())
        with generators(load_plan.generators) as load:
            seen.hardware = {"load_generators": list(load.hosts)}
            first_rate = load_plan.first_rate or load_test_first_rate(started.shape, classes)
            result = load_test_run(
                load, load_plan, classes, target_ttft_s=target, first_rate=first_rate
            )
        return load_test_measurement(result, max_concurrency=load_plan.max_concurrency)

    return _execute(run=found, task_id=task_id, workload=workload, measure=measure)
