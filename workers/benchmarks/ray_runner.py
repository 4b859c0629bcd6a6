"""Run the engine benchmark as a Ray task that asks for the shape's GPUs.

``ray_init`` joins the cluster at ``address`` (``ray://head:10001`` through a KubeRay head's
client port, or ``head:6379`` from inside the cluster), or starts a local Ray with a few CPUs,
no dashboard and no worker logs copied to this process. It does nothing when Ray is already
initialised in the process (a test session, a long-lived worker).

``run_engine_job`` first checks that the cluster has the GPUs the job asks for (waiting up to
``gpu_wait_s`` for an autoscaling group to bring them up): a task asking for GPUs that no node
has would wait for ever. Then the task runs with ``num_gpus`` = the shape's GPUs (Ray sets
``CUDA_VISIBLE_DEVICES`` to those it granted) and is cancelled when it runs past ``timeout_s``.
Every failure is a ``BenchmarkRunFailed`` with a message fit for the run's error field.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError, RayTaskError

# Ray's own default is to copy every worker's output into the driver's log; benchmarks print
# progress lines that belong in the worker's log only.
LOCAL_INIT: dict[str, Any] = {
    "include_dashboard": False,
    "log_to_driver": False,
    "configure_logging": True,
    "logging_level": logging.WARNING,
}
GPU_POLL_S = 5.0


class BenchmarkRunFailed(RuntimeError):
    """The benchmark did not produce figures; the message says why."""


def ray_init(address: str | None = None, *, num_cpus: int = 2) -> None:
    """Connect to the Ray cluster at ``address``, or start a local one with ``num_cpus``."""
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    else:
        ray.init(num_cpus=num_cpus, **LOCAL_INIT)


def cluster_gpus() -> float:
    """GPUs the cluster has (busy or not)."""
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return float(resources.get("GPU", 0.0))


def wait_for_gpus(needed: int, *, wait_s: float, poll_s: float = GPU_POLL_S) -> float:
    """Wait up to ``wait_s`` for the cluster to have ``needed`` GPUs; returns how many it has.
    Raises ``BenchmarkRunFailed`` when it still has too few."""
    deadline = time.monotonic() + wait_s
    while True:
        have = cluster_gpus()
        if have >= needed:
            return have
        if time.monotonic() >= deadline:
            waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
            raise BenchmarkRunFailed(
                f"the Ray cluster has {have:g} GPUs{waited}, the shape needs {needed}: start "
                "GPU workers (the gpu-workers group of deploy/kubernetes/raycluster.yaml) or "
                "set HEADROOM_BENCHMARK_GPU_WAIT_S for an autoscaling group"
            )
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def _engine_task(job: Mapping[str, Any]) -> dict[str, Any]:
    # Imported on the worker: the driver (a Celery worker) never needs torch.
    from workers.benchmarks import engine

    return engine.run_job(job, log=lambda message: print(message, flush=True))


def run_engine_job(
    job: Mapping[str, Any],
    *,
    address: str | None = None,
    num_cpus: int = 2,
    timeout_s: float = 3600.0,
    gpu_wait_s: float = 0.0,
) -> dict[str, Any]:
    """Run the engine benchmark ``job`` (see ``engine.run_job``) on Ray; returns its result.

    A CUDA job asks Ray for ``job["gpus"]`` GPUs and one CPU; a CPU job for one CPU. Raises
    ``BenchmarkRunFailed`` when the cluster lacks the GPUs, the task fails or it runs past
    ``timeout_s`` (it is then cancelled).
    """
    ray_init(address, num_cpus=num_cpus)
    gpus = int(job.get("gpus", 0) or 0) if job.get("device") == "cuda" else 0
    if job.get("device") == "cuda" and gpus < 1:
        raise BenchmarkRunFailed("a CUDA job needs at least one GPU")
    if gpus:
        wait_for_gpus(gpus, wait_s=gpu_wait_s)
    remote = ray.remote(num_cpus=1, num_gpus=gpus, max_retries=0)(_engine_task)
    ref = remote.remote(dict(job))
    try:
        result: dict[str, Any] = ray.get(ref, timeout=timeout_s)
    except GetTimeoutError as exc:
        ray.cancel(ref, force=True)
        raise BenchmarkRunFailed(
            f"the benchmark ran past {timeout_s:g} s and was cancelled"
        ) from exc
    except RayTaskError as exc:
        cause = exc.cause if exc.cause is not None else exc
        raise BenchmarkRunFailed(f"{type(cause).__name__}: {cause}") from exc
    except RayError as exc:
        raise BenchmarkRunFailed(f"Ray: {type(exc).__name__}: {exc}") from exc
    return result
