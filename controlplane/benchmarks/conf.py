"""Benchmark settings, read at call time.

Each value comes from the Django setting of the same name when the settings module defines it
(tests override them with pytest-django's ``settings``), else from the environment variable of
that name, else the default below. A value that is present but malformed is an error.

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

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")

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


def _read(name: str, parse: Callable[[str], T], default: T) -> T:
    if hasattr(settings, name):
        value: Any = getattr(settings, name)
        return parse(value) if isinstance(value, str) else value
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return parse(raw.strip())


def _number(name: str, cast: Callable[[str], T]) -> Callable[[str], T]:
    def parse(raw: str) -> T:
        try:
            return cast(raw)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc

    return parse


def _at_least(name: str, value: Any, low: float) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= low:
        raise ImproperlyConfigured(f"{name} must be at least {low:g}, got {value!r}")
    return value


def benchmark_settings() -> BenchmarkSettings:
    """The current benchmark settings, checked."""

    def num(name: str, default: float, low: float) -> float:
        return float(_at_least(name, _read(name, _number(name, float), default), low))

    def whole(name: str, default: int, low: int) -> int:
        return int(_at_least(name, _read(name, _number(name, int), default), low))

    address = str(_read("HEADROOM_RAY_ADDRESS", str, "")).strip()
    device = str(_read("HEADROOM_BENCHMARK_DEVICE", str, "gpu")).strip().lower()
    if device not in DEVICES:
        raise ImproperlyConfigured(
            f"HEADROOM_BENCHMARK_DEVICE must be one of {', '.join(DEVICES)}, got {device!r}"
        )
    return BenchmarkSettings(
        ray_address=address,
        ray_num_cpus=whole("HEADROOM_RAY_NUM_CPUS", 2, 1),
        device=device,
        timeout_s=num("HEADROOM_BENCHMARK_TIMEOUT_S", 3600.0, 1.0),
        gpu_wait_s=num("HEADROOM_BENCHMARK_GPU_WAIT_S", 0.0, 0.0),
        schedule_s=whole("HEADROOM_BENCHMARK_SCHEDULE_S", 3600, 60),
        retry_after_s=num("HEADROOM_BENCHMARK_RETRY_AFTER_S", 86400.0, 0.0),
        max_age_days=int(settings.HEADROOM_CAPACITY_MAX_AGE_DAYS),
    )
