"""Benchmark: Headroom's pool simulator against the seeds' pure-Python heapq simulator.

Both simulators get the same pre-generated arrivals and service times (the seeds' 85/14/1 mix at
8 req/s on 12 replicas, one million requests by default), run side by side in one process,
interleaved so that both see the same machine load, and must return identical latencies.

Rows timed (medians of ``--repeats`` runs):

* ``seeds heapq``: ``seed_heapq_simulator.open_loop`` on Python lists (the lists are built
  before timing), returning latencies and throughput;
* ``open_loop_latencies``: the same output from ``planner.capacity.simulation``, numpy arrays
  in and out, compiled kernel when numba is installed;
* ``run_open_loop``: the full result (p50/p95/p99 overall and per class, throughput,
  utilisation, mean in system), against ``seeds heapq + 3 percentiles`` (the seeds' own
  ``percentile`` at 0.5, 0.95 and 0.99);
* the pure-Python fallback engine, for when numba is not importable.

Run: ``.venv/bin/python benchmarks/bench_simulator.py`` (``--help`` for options). Exits non-zero
if the latencies differ; the speed goal (30x) is reported, not asserted.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

# Run as a script from anywhere: make the repository importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import seed_heapq_simulator as seeds
from planner.capacity.simulation import (
    SUPPORT_MIX,
    compiled_kernels_available,
    draw_requests,
    open_loop_arrivals,
    open_loop_latencies,
    run_open_loop,
)

GOAL_SPEEDUP = 30.0
T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Wall-clock seconds of one call, after a collection so earlier garbage is not billed."""
    gc.collect()
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=1_000_000, help="requests (default 1,000,000)")
    parser.add_argument("--rate", type=float, default=8.0, help="arrivals per second (8)")
    parser.add_argument("--servers", type=int, default=12, help="replicas (12)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per row (5)")
    parser.add_argument("--seed", type=int, default=2026, help="random seed (2026)")
    parser.add_argument(
        "--skip-python-engine", action="store_true", help="do not time the pure-Python engine"
    )
    args = parser.parse_args(argv)

    requests = draw_requests(SUPPORT_MIX, args.n, args.seed)
    arrival = open_loop_arrivals(args.rate, args.n, args.seed)
    arrival_list = arrival.tolist()
    service_list = requests.service_s.tolist()

    print(f"machine: {cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(
        f"workload: seeds' 85/14/1 mix at {args.rate:g} req/s on {args.servers} replicas, "
        f"{args.n:,} requests, seed {args.seed}"
    )
    engine = "compiled (numba)" if compiled_kernels_available() else "python (numba not installed)"
    first_call, _ = timed(lambda: open_loop_latencies(requests, arrival, args.servers))
    print(f"engine: {engine}; first call (compile or load cached code): {first_call:.3f} s")

    times: dict[str, list[float]] = {
        "seeds heapq": [],
        "open_loop_latencies": [],
        "seeds heapq + 3 percentiles": [],
        "run_open_loop": [],
        "python engine (fallback)": [],
    }
    identical = True
    for _ in range(args.repeats):
        t, reference = timed(lambda: seeds.open_loop(arrival_list, service_list, args.servers))
        times["seeds heapq"].append(t)
        t, fast = timed(lambda: open_loop_latencies(requests, arrival, args.servers))
        times["open_loop_latencies"].append(t)
        reference_latency = np.asarray(reference[0])
        identical &= bool(np.array_equal(reference_latency, fast))

        def reference_with_percentiles() -> list[float]:
            latencies, _ = seeds.open_loop(arrival_list, service_list, args.servers)
            return [seeds.percentile(latencies, q) for q in (0.5, 0.95, 0.99)]

        t, reference_p = timed(reference_with_percentiles)
        times["seeds heapq + 3 percentiles"].append(t)
        t, result = timed(lambda: run_open_loop(requests, arrival, args.servers))
        times["run_open_loop"].append(t)
        overall = result.overall
        identical &= reference_p == [overall.p50_s, overall.p95_s, overall.p99_s]
        if not args.skip_python_engine:
            t, slow = timed(
                lambda: open_loop_latencies(requests, arrival, args.servers, engine="python")
            )
            times["python engine (fallback)"].append(t)
            identical &= bool(np.array_equal(reference_latency, slow))

    medians = {name: statistics.median(ts) for name, ts in times.items() if ts}
    print()
    print(f"{'row':<30} {'median s':>10} {'min s':>9} {'max s':>9}   runs")
    for name, ts in times.items():
        if ts:
            print(f"{name:<30} {medians[name]:>10.4f} {min(ts):>9.4f} {max(ts):>9.4f}   {len(ts)}")
    print()
    latency_ratio = medians["seeds heapq"] / medians["open_loop_latencies"]
    full_ratio = medians["seeds heapq + 3 percentiles"] / medians["run_open_loop"]
    print(f"speed-up, latencies:            {latency_ratio:6.1f}x (goal {GOAL_SPEEDUP:g}x)")
    print(f"speed-up, latencies + stats:    {full_ratio:6.1f}x")
    if "python engine (fallback)" in medians:
        fallback = medians["seeds heapq"] / medians["python engine (fallback)"]
        print(f"speed-up, pure-Python fallback: {fallback:6.1f}x")
    print(f"identical latencies and percentiles: {'yes' if identical else 'NO'}")
    print(f"goal met: {'yes' if latency_ratio >= GOAL_SPEEDUP else 'no'}")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
