"""Benchmark operations, the app's service API (what the API, the admin and the tasks call).

- ``runs``: both kinds of run, one lifecycle (request, execute, record or fail): the engine
  benchmark on Ray, the endpoint load test against the shape's ``BenchmarkEndpoint``.
- ``schedule``: the periodic pass that requests runs for shapes whose figures are stale.
"""

from __future__ import annotations

from controlplane.benchmarks.runs import (
    ENDPOINT_TASK,
    ENGINE_TASK,
    Actor,
    EngineRunner,
    LoadGenerators,
    MeasuredFigure,
    Measurement,
    Provenance,
    RunStateError,
    benchmark_results_record,
    benchmark_run_abandon,
    benchmark_run_execute,
    benchmark_run_fail,
    benchmark_run_request,
    benchmark_run_start,
    endpoint_load_test_plan,
    endpoint_run_execute,
    engine_job,
    load_test_first_rate,
    load_test_measurement,
    measurement_record,
    ray_load_generators,
)
from controlplane.benchmarks.schedule import (
    SCHEDULE_NAME,
    SCHEDULE_TASK,
    ScheduleReport,
    benchmark_schedule,
    benchmarks_schedule,
)

__all__ = [
    "ENDPOINT_TASK",
    "ENGINE_TASK",
    "SCHEDULE_NAME",
    "SCHEDULE_TASK",
    "Actor",
    "EngineRunner",
    "LoadGenerators",
    "MeasuredFigure",
    "Measurement",
    "Provenance",
    "RunStateError",
    "ScheduleReport",
    "benchmark_results_record",
    "benchmark_run_abandon",
    "benchmark_run_execute",
    "benchmark_run_fail",
    "benchmark_run_request",
    "benchmark_run_start",
    "benchmark_schedule",
    "benchmarks_schedule",
    "endpoint_load_test_plan",
    "endpoint_run_execute",
    "engine_job",
    "load_test_first_rate",
    "load_test_measurement",
    "measurement_record",
    "ray_load_generators",
]
