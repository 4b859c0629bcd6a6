"""Benchmark settings, read at call time.

Read with ``controlplane.core.conf`` (the Django setting of the same name, else the
environment variable, else the default below; a malformed value is an error).

- ``HEADROOM_RAY_ADDRESS``: the Ray cluster to join (``ray://head:10001`` for a KubeRay head's
  client port, or ``head:6379`` from inside the cluster). Empty (the default): start a local
  Ray in the worker process.
- ``HEADROOM_RAY_NUM_CPUS`` (2): CPUs of that local Ray; ignored when joining a cluster.
- ``HEADROOM_BENCHMARK_DEVICE`` (``gpu``): where engine benchmarks run. ``gpu`` asks Ray for
  the shape's GPUs; ``cpu`` runs on CPU threads (development and tests: the figures then
  describe the host and say so in their provenance).
- ``HEADROOM_BENCHMARK_TIMEOUT_S`` (3600): a run still going after this is cancelled and
  failed; a queued or running row older than twice this is failed as abandoned.
- ``HEADROOM_BENCHMARK_GPU_WAIT_S`` (0): how long to wait for the cluster to show enough GPUs
  (an autoscaling GPU group takes minutes) before the run fails; 0 fails at once.
- ``HEADROOM_BENCHMARK_SCHEDULE_S`` (3600): how often beat looks for shapes to measure.
- ``HEADROOM_BENCHMARK_RETRY_AFTER_S`` (86400): a shape whose last run failed is not scheduled
  again before this (a shape that cannot run would otherwise fail on every tick).

Figures older than ``HEADROOM_CAPACITY_MAX_AGE_DAYS`` (the project setting) are stale.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from controlplane.core.conf import setting_choice, setting_int, setting_number, setting_text

DEVICES = ("gpu", "cpu")


@dataclass(frozen=True)
class BenchmarkSettings:
    ray_address: str
    ray_num_cpus: int
    device: str
    timeout_s: float
    gpu_wait_s: float
    schedule_s: int
    retry_after_s: float
    max_age_days: int


def benchmark_settings() -> BenchmarkSettings:
    """The current benchmark settings, checked."""
    return BenchmarkSettings(
        ray_address=setting_text("HEADROOM_RAY_ADDRESS", ""),
        ray_num_cpus=setting_int("HEADROOM_RAY_NUM_CPUS", 2, minimum=1),
        device=setting_choice("HEADROOM_BENCHMARK_DEVICE", "gpu", DEVICES),
        timeout_s=setting_number("HEADROOM_BENCHMARK_TIMEOUT_S", 3600.0, minimum=1.0),
        gpu_wait_s=setting_number("HEADROOM_BENCHMARK_GPU_WAIT_S", 0.0, minimum=0.0),
        schedule_s=setting_int("HEADROOM_BENCHMARK_SCHEDULE_S", 3600, minimum=60),
        retry_after_s=setting_number("HEADROOM_BENCHMARK_RETRY_AFTER_S", 86400.0, minimum=0.0),
        max_age_days=int(settings.HEADROOM_CAPACITY_MAX_AGE_DAYS),
    )
