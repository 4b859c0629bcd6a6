"""Inner loops of the pool simulator, compiled with numba when it imports, else pure Python.

Private to ``planner.capacity.simulation``. Every kernel exists twice with the same arithmetic
(only comparisons and one float64 addition per request), so both paths give bit-identical
start and completion times:

* a numba version (``@njit``) over numpy arrays, used when numba is importable; it is what
  makes a million-request run take milliseconds;
* a pure-Python version over Python floats with ``heapq``, used when numba is missing or when
  a caller asks for it (the tests run both and compare them).

The multi-server FIFO recurrence is sequential (each start depends on the earliest free server
after the previous request), so the loops cannot be vectorised with plain numpy.

Conventions shared by all kernels (times in seconds, servers start free at t = 0):

* The ``servers`` free times live in an array whose first element is the earliest (sorted or
  a binary heap in the compiled kernels, see ``_replace_earliest``; a ``heapq`` heap in
  Python). A request takes the earliest free server, the FIFO rule of the seeds' heapq
  simulator. Which of several equally free servers it takes changes no time, so no
  tie-breaking is needed.
* Per-class queues are FIFO within a class. Class ``k``'s queue is a window
  ``[head[k], tail[k])`` of ``members``, the request indices of class ``k`` in issue order:
  requests join their class queue in issue order, so the next to join is always
  ``members[tail[k]]``.
* ``class_order`` lists class ids from highest to lowest priority; a server that frees picks
  the head of the first non-empty queue in that order (non-preemptive priority). A single
  class gives plain FIFO.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_F = TypeVar("_F", bound=Callable[..., Any])


# Names of the functions below that numba compiles. They stay plain Python functions until the
# first compiled run, so importing the simulator (and the planner with it) does not pay for
# importing numba (about 0.3 s) unless a compiled run is asked for.
_JIT_NAMES: list[str] = []
_COMPILE_LOCK = threading.Lock()
_compiled: bool | None = None  # None: not tried yet


def _jit(fn: _F) -> _F:
    """Mark ``fn`` for compilation by ``compiled_kernels_available``."""
    _JIT_NAMES.append(fn.__name__)
    return fn


def compiled_kernels_available() -> bool:
    """Whether numba imports; on the first call, compile-on-demand versions of the kernels.

    Each marked function is replaced in this module's namespace by its numba dispatcher, so
    the kernels call each other's compiled versions (numba resolves globals when it compiles).
    Machine code is generated on the first call per argument types; ``cache=True`` keeps it in
    ``__pycache__`` for later processes. Where numba cannot locate the source file it refuses
    to cache, and each process compiles for itself. The pure-Python kernels never call the
    marked functions, so replacing them changes no result.
    """
    global _compiled
    with _COMPILE_LOCK:
        if _compiled is None:
            try:
                import numba
            except ImportError:
                _compiled = False
            else:
                namespace = globals()
                for name in _JIT_NAMES:
                    try:
                        namespace[name] = numba.njit(cache=True, nogil=True)(namespace[name])
                    except RuntimeError:
                        namespace[name] = numba.njit(nogil=True)(namespace[name])
                _compiled = True
        return _compiled


#: Largest pool whose free times the compiled kernels keep as a sorted array (branch-free merge
#: per request) rather than a binary heap; measured on the development machine, the merge is
#: 3x faster at 12 servers and still ahead at 256, the heap ahead from about 512.
MERGE_MAX_SERVERS = 256


def class_members(class_index: IntArray, classes: int) -> tuple[IntArray, IntArray]:
    """Request indices grouped by class in issue order, and each class's offset into them.

    Returns ``(members, offsets)`` with ``members[offsets[k]:offsets[k + 1]]`` the indices of
    class ``k`` in increasing order (a stable sort keeps issue order within a class).
    """
    members = np.argsort(class_index, kind="stable").astype(np.int64)
    counts = np.bincount(class_index, minlength=classes)
    offsets = np.zeros(classes + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return members, offsets


# ---------------------------------------------------------------------------------------------
# numba kernels: loops over numpy arrays, compiled when numba is available.
# ---------------------------------------------------------------------------------------------


@_jit
def _replace_earliest(free: FloatArray, value: float) -> None:
    """Replace the earliest free time ``free[0]`` by ``value`` (>= it), keeping ``free[0]`` least.

    Pools up to ``MERGE_MAX_SERVERS`` keep ``free`` sorted ascending and update it with a
    branch-free merge: dropping x0 and inserting v, the new k-th smallest is
    min(x[k+1], max(x[k], v)), and the last is max(x[-1], v). Every step is a select between
    existing values (no arithmetic), the loop vectorises, and the next minimum
    min(x[1], v) is ready after two selects; it is about three times faster than a heap at 12
    servers. Larger pools keep a binary min-heap (sift-down, O(log c)). A sorted array is also
    a valid heap, and either way ``free[0]`` is the earliest free time, so the choice never
    changes a result.
    """
    size = free.shape[0]
    if size <= MERGE_MAX_SERVERS:
        last = size - 1
        for k in range(last):
            upper = free[k] if free[k] > value else value
            following = free[k + 1]
            free[k] = following if following < upper else upper
        free[last] = free[last] if free[last] > value else value
        return
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        right = child + 1
        if right < size and free[right] < free[child]:
            child = right
        if free[child] < value:
            free[pos] = free[child]
            pos = child
        else:
            break
    free[pos] = value


@_jit
def _fifo_open_nb(
    arrival: FloatArray, service: FloatArray, servers: int, start: FloatArray, done: FloatArray
) -> None:
    """Open-loop FIFO over ``servers``: start = max(arrival, earliest free), done = start + s."""
    free = np.zeros(servers, dtype=np.float64)
    for i in range(arrival.shape[0]):
        a = arrival[i]
        f = free[0]
        b = a if a >= f else f
        d = b + service[i]
        _replace_earliest(free, d)
        start[i] = b
        done[i] = d


@_jit
def _fifo_open_latency_nb(
    arrival: FloatArray, service: FloatArray, servers: int, latency: FloatArray
) -> None:
    """``_fifo_open_nb`` writing only each latency, done − arrival (one output array, not
    three, when only latencies are wanted: at a million requests the saved 16 MB of fresh
    memory is a noticeable share of the run)."""
    free = np.zeros(servers, dtype=np.float64)
    for i in range(arrival.shape[0]):
        a = arrival[i]
        f = free[0]
        b = a if a >= f else f
        d = b + service[i]
        _replace_earliest(free, d)
        latency[i] = d - a


@_jit
def _priority_open_nb(
    arrival: FloatArray,
    service: FloatArray,
    class_index: IntArray,
    members: IntArray,
    offsets: IntArray,
    class_order: IntArray,
    servers: int,
    start: FloatArray,
    done: FloatArray,
) -> None:
    """Open loop with per-class FIFO queues served in ``class_order`` (non-preemptive)."""
    n = arrival.shape[0]
    head = offsets[:-1].copy()
    tail = offsets[:-1].copy()
    free = np.zeros(servers, dtype=np.float64)
    nxt = 0
    queued = 0
    for _ in range(n):
        f = free[0]
        # Everything that has arrived by the time the earliest server frees joins its queue.
        while nxt < n and arrival[nxt] <= f:
            tail[class_index[nxt]] += 1
            nxt += 1
            queued += 1
        if queued > 0:
            j = -1
            for k in class_order:
                if head[k] < tail[k]:
                    j = members[head[k]]
                    head[k] += 1
                    break
            queued -= 1
            b = f
        else:
            # Queues empty: the next arrival finds a server idle and starts on arrival.
            j = nxt
            nxt += 1
            k = class_index[j]
            head[k] += 1
            tail[k] += 1
            b = arrival[j]
        d = b + service[j]
        _replace_earliest(free, d)
        start[j] = b
        done[j] = d


@_jit
def _ready_pop(ready_t: FloatArray, ready_w: IntArray, size: int) -> tuple[float, int]:
    """Pop the (time, worker) minimum of a heap stored in ``ready_t``/``ready_w[:size]``."""
    t0 = ready_t[0]
    w0 = ready_w[0]
    size -= 1
    t = ready_t[size]
    w = ready_w[size]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        right = child + 1
        if right < size and (
            ready_t[right] < ready_t[child]
            or (ready_t[right] == ready_t[child] and ready_w[right] < ready_w[child])
        ):
            child = right
        if ready_t[child] < t or (ready_t[child] == t and ready_w[child] < w):
            ready_t[pos] = ready_t[child]
            ready_w[pos] = ready_w[child]
            pos = child
        else:
            break
    ready_t[pos] = t
    ready_w[pos] = w
    return t0, w0


@_jit
def _ready_push(ready_t: FloatArray, ready_w: IntArray, size: int, t: float, w: int) -> None:
    """Push (time, worker) onto the heap ``ready_t``/``ready_w[:size]`` (caller grows size)."""
    pos = size
    while pos > 0:
        parent = (pos - 1) // 2
        if t < ready_t[parent] or (t == ready_t[parent] and w < ready_w[parent]):
            ready_t[pos] = ready_t[parent]
            ready_w[pos] = ready_w[parent]
            pos = parent
        else:
            break
    ready_t[pos] = t
    ready_w[pos] = w


@_jit
def _closed_nb(
    service: FloatArray,
    class_index: IntArray,
    members: IntArray,
    offsets: IntArray,
    class_order: IntArray,
    servers: int,
    workers: int,
    think: float,
    arrival: FloatArray,
    start: FloatArray,
    done: FloatArray,
) -> None:
    """Closed loop: each worker issues its next request ``think`` seconds after the last ends.

    Requests are issued in (ready time, worker) order, as the seeds' ``closed_loop`` pops its
    ready heap; request ``i`` gets ``service[i]``.
    """
    n = service.shape[0]
    head = offsets[:-1].copy()
    tail = offsets[:-1].copy()
    free = np.zeros(servers, dtype=np.float64)
    ready_t = np.zeros(workers, dtype=np.float64)
    ready_w = np.arange(workers, dtype=np.int64)  # all ready at 0, ordered by worker: a heap
    size = workers
    owner = np.zeros(n, dtype=np.int64)
    issued = 0
    queued = 0
    for _ in range(n):
        f = free[0]
        while issued < n and size > 0 and ready_t[0] <= f:
            t, w = _ready_pop(ready_t, ready_w, size)
            size -= 1
            arrival[issued] = t
            owner[issued] = w
            tail[class_index[issued]] += 1
            issued += 1
            queued += 1
        if queued > 0:
            j = -1
            for k in class_order:
                if head[k] < tail[k]:
                    j = members[head[k]]
                    head[k] += 1
                    break
            queued -= 1
            b = f
        else:
            # Nothing waits, so every worker is in the ready heap and the earliest one issues.
            t, w = _ready_pop(ready_t, ready_w, size)
            size -= 1
            j = issued
            issued += 1
            arrival[j] = t
            owner[j] = w
            k = class_index[j]
            head[k] += 1
            tail[k] += 1
            b = t
        d = b + service[j]
        _replace_earliest(free, d)
        start[j] = b
        done[j] = d
        _ready_push(ready_t, ready_w, size, d + think, owner[j])
        size += 1


# ---------------------------------------------------------------------------------------------
# Pure-Python versions: the same arithmetic on Python floats with heapq.
# ---------------------------------------------------------------------------------------------


def _fifo_open_py(
    arrival: list[float], service: list[float], servers: int
) -> tuple[list[float], list[float]]:
    free = [0.0] * servers
    start = [0.0] * len(arrival)
    done = [0.0] * len(arrival)
    replace = heapq.heapreplace
    for i, (a, s) in enumerate(zip(arrival, service, strict=True)):
        f = free[0]
        b = a if a >= f else f
        d = b + s
        replace(free, d)
        start[i] = b
        done[i] = d
    return start, done


def _priority_open_py(
    arrival: list[float],
    service: list[float],
    class_index: list[int],
    members: list[int],
    offsets: list[int],
    class_order: list[int],
    servers: int,
) -> tuple[list[float], list[float]]:
    n = len(arrival)
    head = offsets[:-1]
    tail = offsets[:-1].copy()
    free = [0.0] * servers
    start = [0.0] * n
    done = [0.0] * n
    nxt = 0
    queued = 0
    for _ in range(n):
        f = free[0]
        while nxt < n and arrival[nxt] <= f:
            tail[class_index[nxt]] += 1
            nxt += 1
            queued += 1
        if queued > 0:
            j = -1
            for k in class_order:
                if head[k] < tail[k]:
                    j = members[head[k]]
                    head[k] += 1
                    break
            queued -= 1
            b = f
        else:
            j = nxt
            nxt += 1
            k = class_index[j]
            head[k] += 1
            tail[k] += 1
            b = arrival[j]
        d = b + service[j]
        heapq.heapreplace(free, d)
        start[j] = b
        done[j] = d
    return start, done


def _closed_py(
    service: list[float],
    class_index: list[int],
    members: list[int],
    offsets: list[int],
    class_order: list[int],
    servers: int,
    workers: int,
    think: float,
) -> tuple[list[float], list[float], list[float]]:
    n = len(service)
    head = offsets[:-1]
    tail = offsets[:-1].copy()
    free = [0.0] * servers
    ready = [(0.0, w) for w in range(workers)]
    owner = [0] * n
    arrival = [0.0] * n
    start = [0.0] * n
    done = [0.0] * n
    issued = 0
    queued = 0
    for _ in range(n):
        f = free[0]
        while issued < n and ready and ready[0][0] <= f:
            t, w = heapq.heappop(ready)
            arrival[issued] = t
            owner[issued] = w
            tail[class_index[issued]] += 1
            issued += 1
            queued += 1
        if queued > 0:
            j = -1
            for k in class_order:
                if head[k] < tail[k]:
                    j = members[head[k]]
                    head[k] += 1
                    break
            queued -= 1
            b = f
        else:
            t, w = heapq.heappop(ready)
            j = issued
            issued += 1
            arrival[j] = t
            owner[j] = w
            k = class_index[j]
            head[k] += 1
            tail[k] += 1
            b = t
        d = b + service[j]
        heapq.heapreplace(free, d)
        start[j] = b
        done[j] = d
        heapq.heappush(ready, (d + think, owner[j]))
    return arrival, start, done


# ---------------------------------------------------------------------------------------------
# Compilation and dispatch.
# ---------------------------------------------------------------------------------------------


def _require_numba() -> None:
    if not compiled_kernels_available():  # callers check first; this guards against misuse
        raise RuntimeError("numba is not available")


def fifo_open(
    arrival: FloatArray, service: FloatArray, servers: int, compiled: bool
) -> tuple[FloatArray, FloatArray]:
    """Start and completion times of open-loop FIFO over ``servers`` (seconds)."""
    if compiled:
        start = np.empty_like(arrival)
        done = np.empty_like(arrival)
        _require_numba()
        _fifo_open_nb(arrival, service, servers, start, done)
        return start, done
    s, d = _fifo_open_py(arrival.tolist(), service.tolist(), servers)
    return np.asarray(s, dtype=np.float64), np.asarray(d, dtype=np.float64)


def fifo_open_latency(
    arrival: FloatArray, service: FloatArray, servers: int, compiled: bool
) -> FloatArray:
    """Latency (completion − arrival, seconds) of each request under open-loop FIFO."""
    if compiled:
        latency = np.empty_like(arrival)
        _require_numba()
        _fifo_open_latency_nb(arrival, service, servers, latency)
        return latency
    _, done = fifo_open(arrival, service, servers, compiled=False)
    return done - arrival


def priority_open(
    arrival: FloatArray,
    service: FloatArray,
    class_index: IntArray,
    class_order: IntArray,
    servers: int,
    compiled: bool,
) -> tuple[FloatArray, FloatArray]:
    """Start and completion times of open loop with per-class queues in ``class_order``."""
    members, offsets = class_members(class_index, int(class_order.max()) + 1)
    if compiled:
        start = np.empty_like(arrival)
        done = np.empty_like(arrival)
        _require_numba()
        _priority_open_nb(
            arrival, service, class_index, members, offsets, class_order, servers, start, done
        )
        return start, done
    s, d = _priority_open_py(
        arrival.tolist(),
        service.tolist(),
        class_index.tolist(),
        members.tolist(),
        offsets.tolist(),
        class_order.tolist(),
        servers,
    )
    return np.asarray(s, dtype=np.float64), np.asarray(d, dtype=np.float64)


def closed(
    service: FloatArray,
    class_index: IntArray,
    class_order: IntArray,
    servers: int,
    workers: int,
    think: float,
    compiled: bool,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Issue, start and completion times of a closed loop of ``workers`` (seconds)."""
    members, offsets = class_members(class_index, int(class_order.max()) + 1)
    if compiled:
        arrival = np.empty_like(service)
        start = np.empty_like(service)
        done = np.empty_like(service)
        _require_numba()
        _closed_nb(
            service,
            class_index,
            members,
            offsets,
            class_order,
            servers,
            workers,
            think,
            arrival,
            start,
            done,
        )
        return arrival, start, done
    a, s, d = _closed_py(
        service.tolist(),
        class_index.tolist(),
        members.tolist(),
        offsets.tolist(),
        class_order.tolist(),
        servers,
        workers,
        think,
    )
    return (
        np.asarray(a, dtype=np.float64),
        np.asarray(s, dtype=np.float64),
        np.asarray(d, dtype=np.float64),
    )
