"""The seeds' pure-Python heapq pool simulator, kept as the reference for the fast one.

Copied from the seeds' load-testing section ("Open-loop versus closed-loop") and adapted only to
take pre-generated arrival times and service times instead of drawing them itself, so the
benchmark and the tests can feed it and ``planner.capacity.simulation`` identical input. The
queueing logic (earliest free replica from a heap, ``start = max(arrival, free)``) and the
percentile rule are the seeds' own, line for line.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

CLASSES = [
    ("policy", 0.85, 0.825),
    ("order", 0.14, 1.7375),
    ("long", 0.01, 4.75),
]  # share, replica-seconds
REPLICAS = 12


def percentile(xs: Sequence[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def open_loop(
    arrivals: Sequence[float], services: Sequence[float], replicas: int = REPLICAS
) -> tuple[list[float], float]:
    """Arrivals independent of completions; FIFO over ``replicas`` servers.

    ``arrivals`` are absolute times (the seeds' running ``t``), ``services`` the replica-seconds
    of each request (the seeds' ``sample_service(rng)``). Returns latencies and throughput.
    """
    free = [0.0] * replicas
    heapq.heapify(free)
    t, lat = 0.0, []
    for t, service in zip(arrivals, services, strict=True):
        start = max(t, heapq.heappop(free))
        done = start + service
        heapq.heappush(free, done)
        lat.append(done - t)
    return lat, len(lat) / t


def closed_loop(
    workers: int, services: Sequence[float], replicas: int = REPLICAS
) -> tuple[list[float], float]:
    """Each worker sends its next request only after the previous one completes."""
    free = [0.0] * replicas
    heapq.heapify(free)
    ready = [(0.0, w) for w in range(workers)]
    heapq.heapify(ready)
    lat, last = [], 0.0
    for service in services:
        t, w = heapq.heappop(ready)
        start = max(t, heapq.heappop(free))
        done = start + service
        heapq.heappush(free, done)
        heapq.heappush(ready, (done, w))
        lat.append(done - t)
        last = max(last, done)
    return lat, len(lat) / last
