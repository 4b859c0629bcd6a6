"""planner.capacity.simulation: the seeds' open/closed-loop table, exactness against the seeds'
heapq simulator, both kernel engines, Little's law, Erlang C, determinism and validation."""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import seed_heapq_simulator as seeds
from planner.capacity._simkernel import MERGE_MAX_SERVERS
from planner.capacity.queueing import mmc_mean_response
from planner.capacity.simulation import (
    SUPPORT_MIX,
    LatencyStats,
    Policy,
    Requests,
    ServiceClass,
    SimulationResult,
    checked_mix,
    compiled_kernels_available,
    draw_requests,
    latency_quantile,
    open_loop_arrivals,
    open_loop_latencies,
    run_closed_loop,
    run_open_loop,
    service_order,
    simulate_closed_loop,
    simulate_open_loop,
    unit_rate_arrivals,
)
from planner.errors import PlannerInputError

needs_numba = pytest.mark.skipif(not compiled_kernels_available(), reason="numba is not installed")
ENGINES = [
    "python",
    pytest.param("compiled", marks=needs_numba),
]
POLICIES: list[Policy] = ["fifo", "class_priority", "shortest_class_first"]


def time_average_in_system(arrival: np.ndarray, done: np.ndarray) -> float:
    """∫ N(t) dt / T over [0, last completion], from a sweep over the arrival/departure events.

    Computed from the event times only, independently of the simulator's own statistics.
    """
    times = np.concatenate([arrival, done])
    steps = np.concatenate([np.ones_like(arrival), -np.ones_like(done)])
    order = np.argsort(times, kind="stable")
    t = times[order]
    in_system = np.cumsum(steps[order])
    area = float(np.sum(in_system[:-1] * np.diff(t)))
    return area / float(t[-1])


# --- the seeds' table -------------------------------------------------------------------------


@pytest.mark.parametrize(("rate", "seeds_p95"), [(8.0, 1.74), (10.5, 2.29)])
def test_open_loop_p95_matches_the_seeds_table(rate: float, seeds_p95: float) -> None:
    result = simulate_open_loop(SUPPORT_MIX, rate, 12, 200_000, seed=7)
    assert result.overall.p95_s == pytest.approx(seeds_p95, rel=0.10)
    # Throughput equals offered load below capacity (seeds: 8.05 and 10.57 req/s).
    assert result.throughput_per_s == pytest.approx(rate, rel=0.01)
    # 8 req/s × 0.992 s / 12 replicas = 66% busy.
    assert result.utilisation == pytest.approx(rate * 0.992 / 12, rel=0.02)


def test_open_loop_latency_explodes_past_capacity() -> None:
    # Seeds: 12.5 req/s is past the 12.1 req/s the pool can serve; p50 goes from ~1 s to ~100 s.
    below = simulate_open_loop(SUPPORT_MIX, 10.5, 12, 50_000, seed=1)
    above = simulate_open_loop(SUPPORT_MIX, 12.5, 12, 50_000, seed=1)
    assert above.overall.p50_s > 20 * below.overall.p50_s
    assert above.throughput_per_s == pytest.approx(12.1, rel=0.01)
    assert above.utilisation == pytest.approx(1.0, abs=0.01)


def test_closed_loop_throughput_is_capped_by_the_pool() -> None:
    twelve = simulate_closed_loop(SUPPORT_MIX, 12, 12, 100_000, seed=3)
    twenty_four = simulate_closed_loop(SUPPORT_MIX, 24, 12, 100_000, seed=3)
    # Seeds: 12 workers → 12.12 req/s, p95 1.74 s; 24 workers → 12.12 req/s, p95 2.79 s.
    assert twelve.throughput_per_s == pytest.approx(12.1, rel=0.01)
    assert twenty_four.throughput_per_s == pytest.approx(twelve.throughput_per_s, rel=0.005)
    assert twelve.overall.p95_s == pytest.approx(1.74, rel=0.01)
    assert twenty_four.overall.p95_s == pytest.approx(2.79, rel=0.05)
    assert twenty_four.overall.p50_s > 2 * twelve.overall.p50_s
    # Twelve workers on twelve replicas never queue: latency is the service time alone.
    assert twelve.mean_wait_s == 0.0


# --- exactness against the seeds' heapq simulator ----------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("rate", [8.0, 12.5])
def test_open_loop_is_identical_to_the_seeds_simulator(engine: Any, rate: float) -> None:
    requests = draw_requests(SUPPORT_MIX, 20_000, seed=11)
    arrival = open_loop_arrivals(rate, 20_000, seed=11)
    result = run_open_loop(requests, arrival, 12, engine=engine)
    latencies, _ = seeds.open_loop(arrival.tolist(), requests.service_s.tolist())
    assert np.array_equal(result.latency_s, np.asarray(latencies))
    bare = open_loop_latencies(requests, arrival, 12, engine=engine)
    assert np.array_equal(bare, result.latency_s)
    for q in (0.5, 0.95, 0.99):
        assert result.quantile(q) == seeds.percentile(latencies, q)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("workers", [5, 12, 24])
def test_closed_loop_is_identical_to_the_seeds_simulator(engine: Any, workers: int) -> None:
    requests = draw_requests(SUPPORT_MIX, 20_000, seed=5)
    result = run_closed_loop(requests, workers, 12, engine=engine)
    latencies, throughput = seeds.closed_loop(workers, requests.service_s.tolist())
    assert np.array_equal(result.latency_s, np.asarray(latencies))
    assert result.throughput_per_s == throughput


@st.composite
def open_runs(draw: st.DrawFn) -> tuple[Requests, np.ndarray, int, Policy]:
    n = draw(st.integers(1, 120))
    classes = draw(st.integers(1, 3))
    # Coarse values make ties (equal arrival and free times) common: the hard cases.
    service = draw(st.lists(st.sampled_from([0.25, 0.5, 1.0, 1.5, 3.0]), min_size=n, max_size=n))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.125, 0.25, 1.0]), min_size=n, max_size=n))
    index = draw(st.lists(st.integers(0, classes - 1), min_size=n, max_size=n))
    servers = draw(st.integers(1, 5))
    policy = draw(st.sampled_from(POLICIES))
    requests = Requests.from_arrays(service, index, [f"c{k}" for k in range(classes)])
    # The first arrival after t = 0: the seeds' simulator reports throughput as n / last arrival.
    return requests, 0.125 + np.cumsum(gaps), servers, policy


@needs_numba
@settings(max_examples=60, deadline=None)
@given(open_runs(), st.integers(1, 6), st.sampled_from([0.0, 0.5]))
def test_compiled_and_python_engines_agree_exactly(
    run: tuple[Requests, np.ndarray, int, Policy], workers: int, think: float
) -> None:
    requests, arrival, servers, policy = run
    compiled = run_open_loop(requests, arrival, servers, policy=policy, engine="compiled")
    python = run_open_loop(requests, arrival, servers, policy=policy, engine="python")
    assert np.array_equal(compiled.start_s, python.start_s)
    assert np.array_equal(compiled.done_s, python.done_s)
    assert compiled == python
    closed_c = run_closed_loop(
        requests, workers, servers, think_s=think, policy=policy, engine="compiled"
    )
    closed_p = run_closed_loop(
        requests, workers, servers, think_s=think, policy=policy, engine="python"
    )
    assert np.array_equal(closed_c.arrival_s, closed_p.arrival_s)
    assert np.array_equal(closed_c.done_s, closed_p.done_s)


@needs_numba
def test_compiled_heap_layout_for_large_pools_matches_python() -> None:
    # Pools above MERGE_MAX_SERVERS keep a heap instead of a sorted array: same times.
    servers = MERGE_MAX_SERVERS + 44
    rate = 0.95 * servers / 0.992
    requests = draw_requests(SUPPORT_MIX, 30_000, seed=2)
    arrival = open_loop_arrivals(rate, 30_000, seed=2)
    compiled = run_open_loop(requests, arrival, servers, engine="compiled")
    python = run_open_loop(requests, arrival, servers, engine="python")
    assert compiled.mean_wait_s > 0  # the pool is busy enough for the order to matter
    assert np.array_equal(compiled.done_s, python.done_s)
    bare = open_loop_latencies(requests, arrival, servers, engine="compiled")
    assert np.array_equal(bare, python.latency_s)
    closed_c = run_closed_loop(requests, servers + 20, servers, engine="compiled")
    closed_p = run_closed_loop(requests, servers + 20, servers, engine="python")
    assert np.array_equal(closed_c.done_s, closed_p.done_s)


@settings(max_examples=40, deadline=None)
@given(open_runs())
def test_fifo_open_loop_matches_the_seeds_simulator_on_ties(
    run: tuple[Requests, np.ndarray, int, Policy],
) -> None:
    requests, arrival, servers, _ = run
    result = run_open_loop(requests, arrival, servers)
    latencies, _ = seeds.open_loop(arrival.tolist(), requests.service_s.tolist(), servers)
    assert np.array_equal(result.latency_s, np.asarray(latencies))
    # One class under class priority is plain FIFO, through the other kernel.
    single = Requests.from_arrays(requests.service_s)
    assert np.array_equal(
        run_open_loop(single, arrival, servers, policy="class_priority").done_s, result.done_s
    )


# --- properties of every run ----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    open_runs(),
    st.booleans(),
    st.integers(1, 6),
)
def test_littles_law_and_schedule_sanity(
    run: tuple[Requests, np.ndarray, int, Policy], closed: bool, workers: int
) -> None:
    requests, arrival, servers, policy = run
    if closed:
        result = run_closed_loop(requests, workers, servers, policy=policy)
    else:
        result = run_open_loop(requests, arrival, servers, policy=policy)
    arrival_s, start, done = result.arrival_s, result.start_s, result.done_s
    assert np.all(start >= arrival_s)
    assert np.array_equal(done, start + requests.service_s)
    # Never more requests in service than replicas.
    events = np.concatenate([start, done])
    steps = np.concatenate([np.ones_like(start), -np.ones_like(done)])
    order = np.lexsort((steps, events))  # departures before starts at the same instant
    assert int(np.max(np.cumsum(steps[order]))) <= servers
    # Little's law over the run, from the event times: L = X × W.
    horizon = float(done.max())
    throughput = requests.count / horizon
    mean_residence = float(np.mean(done - arrival_s))
    in_system = time_average_in_system(arrival_s, done)
    assert in_system == pytest.approx(throughput * mean_residence, rel=1e-9)
    assert result.mean_in_system == pytest.approx(in_system, rel=1e-9)
    assert result.throughput_per_s == pytest.approx(throughput, rel=1e-12)
    busy = float(np.sum(requests.service_s))
    assert result.utilisation == pytest.approx(busy / (servers * horizon), rel=1e-12)
    assert 0 < result.utilisation <= 1 + 1e-12


@settings(max_examples=40, deadline=None)
@given(open_runs())
def test_per_class_statistics_are_consistent_with_overall(
    run: tuple[Requests, np.ndarray, int, Policy],
) -> None:
    requests, arrival, servers, policy = run
    result = run_open_loop(requests, arrival, servers, policy=policy)
    stats = list(result.per_class.values())
    assert sum(s.count for s in stats) == result.overall.count == requests.count
    weighted_mean = sum(s.count * s.mean_s for s in stats) / result.overall.count
    assert result.overall.mean_s == pytest.approx(weighted_mean, rel=1e-9)
    # A nearest-rank quantile of a union lies between its parts' quantiles at the same level.
    for field in ("p50_s", "p95_s", "p99_s"):
        parts = [getattr(s, field) for s in stats]
        assert min(parts) <= getattr(result.overall, field) <= max(parts)
    for name, s in result.per_class.items():
        assert s.p50_s <= s.p95_s <= s.p99_s
        assert result.quantile(0.95, name) == s.p95_s


def test_same_seed_gives_identical_results_and_another_seed_does_not() -> None:
    def run(seed: int) -> SimulationResult:
        return simulate_open_loop(SUPPORT_MIX, 10.5, 12, 20_000, seed=seed, cv=1.5)

    first, again, other = run(4), run(4), run(5)
    assert first == again
    assert np.array_equal(first.latency_s, again.latency_s)
    assert np.array_equal(first.class_index, again.class_index)
    assert first != other
    closed = [simulate_closed_loop(SUPPORT_MIX, 16, 12, 5_000, seed=9) for _ in range(2)]
    assert closed[0] == closed[1]
    assert np.array_equal(closed[0].done_s, closed[1].done_s)


# --- queueing theory ----------------------------------------------------------------------------


@pytest.mark.parametrize("utilisation", [0.7, 0.8])
def test_exponential_service_matches_erlang_c(utilisation: float) -> None:
    # M/M/12: Erlang C gives 1.05 S at ρ = 0.7 and 1.15 S at ρ = 0.8 (seeds).
    rate = 12 * utilisation
    exponential = [ServiceClass("any", 1.0, 1.0, "exponential")]
    result = simulate_open_loop(exponential, rate, 12, 400_000, seed=21)
    assert result.overall.mean_s == pytest.approx(mmc_mean_response(rate, 1.0, 12), rel=0.02)


def test_priority_among_equal_classes_keeps_the_erlang_c_mean() -> None:
    # Any non-preemptive work-conserving order of identically distributed jobs leaves the mean
    # response unchanged (conservation law); only the split between classes moves.
    two = [
        ServiceClass("first", 0.5, 1.0, "exponential"),
        ServiceClass("second", 0.5, 1.0, "exponential"),
    ]
    result = simulate_open_loop(two, 9.6, 12, 400_000, seed=22, policy="class_priority")
    assert result.overall.mean_s == pytest.approx(mmc_mean_response(9.6, 1.0, 12), rel=0.025)
    assert result.per_class["first"].mean_s < result.per_class["second"].mean_s


def test_priority_policies_favour_the_classes_they_rank_first() -> None:
    fifo = simulate_open_loop(SUPPORT_MIX, 11.0, 12, 100_000, seed=8)
    shortest = simulate_open_loop(
        SUPPORT_MIX, 11.0, 12, 100_000, seed=8, policy="shortest_class_first"
    )
    assert shortest.per_class["policy"].p95_s < fifo.per_class["policy"].p95_s
    assert shortest.per_class["long_summary"].p95_s > fifo.per_class["long_summary"].p95_s
    # Shortest-class-first lowers mean latency (seeds: "reduces mean latency but starves").
    assert shortest.overall.mean_s < fifo.overall.mean_s
    # Declared order puts the long summaries last here too, so the two policies coincide...
    assert service_order(draw_requests(SUPPORT_MIX, 10), "class_priority").tolist() == [0, 1, 2]
    # ...but reversing the declared order makes class priority serve long summaries first.
    reversed_mix = tuple(reversed(SUPPORT_MIX))
    longest_first = simulate_open_loop(
        reversed_mix, 11.0, 12, 100_000, seed=8, policy="class_priority"
    )
    assert longest_first.per_class["long_summary"].p95_s < fifo.per_class["long_summary"].p95_s
    ranked = service_order(draw_requests(reversed_mix, 10), "shortest_class_first")
    assert ranked.tolist() == [2, 1, 0]


# --- inputs ------------------------------------------------------------------------------------


def test_service_distributions_keep_their_means() -> None:
    mix = [
        ServiceClass("fixed", 0.3, 2.0),
        ServiceClass("exp", 0.3, 2.0, "exponential"),
        ServiceClass("logn", 0.4, 2.0, "lognormal", sigma=0.8),
    ]
    requests = draw_requests(mix, 300_000, seed=1)
    for k, name in enumerate(requests.class_names):
        service = requests.service_s[requests.class_index == k]
        assert float(np.mean(service)) == pytest.approx(2.0, rel=0.02), name
        assert requests.class_mean_s[k] == 2.0
    fixed = requests.service_s[requests.class_index == 0]
    assert np.all(fixed == 2.0)
    logn = requests.service_s[requests.class_index == 2]
    assert float(np.std(np.log(logn))) == pytest.approx(0.8, rel=0.02)
    shares = np.bincount(requests.class_index) / requests.count
    assert shares == pytest.approx([0.3, 0.3, 0.4], abs=0.005)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_arrivals_have_the_requested_rate_and_variation(cv: float) -> None:
    arrival = open_loop_arrivals(4.0, 200_000, seed=3, cv=cv)
    gaps = np.diff(arrival)
    assert float(np.mean(gaps)) == pytest.approx(0.25, rel=0.02)
    assert float(np.std(gaps) / np.mean(gaps)) == pytest.approx(cv, rel=0.03)
    # Common random numbers: every rate scales the same unit-rate stream.
    assert np.array_equal(arrival, unit_rate_arrivals(200_000, seed=3, cv=cv) / 4.0)


def test_bursty_arrivals_queue_longer_at_the_same_rate() -> None:
    poisson = simulate_open_loop(SUPPORT_MIX, 10.0, 12, 100_000, seed=6)
    bursty = simulate_open_loop(SUPPORT_MIX, 10.0, 12, 100_000, seed=6, cv=2.0)
    assert bursty.overall.p95_s > 1.5 * poisson.overall.p95_s
    assert bursty.mean_wait_s > 2 * poisson.mean_wait_s


def test_requests_from_arrays_name_and_rank_classes() -> None:
    requests = Requests.from_arrays([3.0, 1.0, 1.0, 2.0], [0, 1, 1, 2], ["a", "b", "c"])
    assert requests.class_mean_s == (3.0, 1.0, 2.0)
    assert service_order(requests, "shortest_class_first").tolist() == [1, 2, 0]
    unnamed = Requests.from_arrays([1.0, 2.0], [0, 1])
    assert unnamed.class_names == ("class0", "class1")
    result = run_open_loop(unnamed, [0.0, 0.0], 1)
    assert result.latency_s.tolist() == [1.0, 3.0]
    assert set(result.per_class) == {"class0", "class1"}


def test_latency_quantile_is_the_seeds_nearest_rank() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    for q in (0.01, 0.2, 0.5, 0.95, 0.99):
        assert latency_quantile(values, q) == seeds.percentile(values, q)
    stats = LatencyStats.of(np.asarray(values))
    assert (stats.count, stats.mean_s, stats.p50_s, stats.p99_s) == (5, 3.0, 3.0, 5.0)


# --- validation ----------------------------------------------------------------------------------

BAD_CALLS: list[tuple[str, Callable[[], object]]] = [
    ("rate", lambda: simulate_open_loop(SUPPORT_MIX, 0.0, 12, 10)),
    ("rate", lambda: simulate_open_loop(SUPPORT_MIX, -1.0, 12, 10)),
    ("servers", lambda: simulate_open_loop(SUPPORT_MIX, 8.0, 0, 10)),
    ("servers", lambda: simulate_closed_loop(SUPPORT_MIX, 4, 0, 10)),
    ("workers", lambda: simulate_closed_loop(SUPPORT_MIX, 0, 12, 10)),
    ("think_s", lambda: simulate_closed_loop(SUPPORT_MIX, 4, 12, 10, think_s=-1.0)),
    ("n", lambda: simulate_open_loop(SUPPORT_MIX, 8.0, 12, 0)),
    ("seed", lambda: simulate_open_loop(SUPPORT_MIX, 8.0, 12, 10, seed=-1)),
    ("cv", lambda: simulate_open_loop(SUPPORT_MIX, 8.0, 12, 10, cv=0.0)),
    ("cv", lambda: unit_rate_arrivals(10, cv=-0.5)),
    ("classes", lambda: checked_mix([ServiceClass("a", 0.5, 1.0)])),
    ("classes", lambda: checked_mix([ServiceClass("a", 0.5, 1.0), ServiceClass("a", 0.5, 1.0)])),
    ("classes", lambda: checked_mix([])),
    ("share", lambda: ServiceClass("a", 1.5, 1.0)),
    ("service_s", lambda: ServiceClass("a", 1.0, 0.0)),
    ("distribution", lambda: ServiceClass("a", 1.0, 1.0, "pareto")),  # type: ignore[arg-type]
    ("sigma", lambda: ServiceClass("a", 1.0, 1.0, "lognormal")),
    ("sigma", lambda: ServiceClass("a", 1.0, 1.0, "fixed", sigma=0.5)),
    ("q", lambda: latency_quantile([1.0], 1.0)),
    ("q", lambda: latency_quantile([1.0], 0.0)),
    ("policy", lambda: simulate_open_loop(SUPPORT_MIX, 8.0, 12, 10, policy="lifo")),  # type: ignore[arg-type]
    ("engine", lambda: simulate_open_loop(SUPPORT_MIX, 8.0, 12, 10, engine="gpu")),  # type: ignore[arg-type]
    ("service_s", lambda: Requests.from_arrays([1.0, -1.0])),
    ("service_s", lambda: Requests.from_arrays([])),
    ("class_index", lambda: Requests.from_arrays([1.0, 1.0], [0, -1])),
    ("class_index", lambda: Requests.from_arrays([1.0, 1.0], [0.5, 1.0])),
    ("class_names", lambda: Requests.from_arrays([1.0, 1.0], [0, 1], ["only"])),
    ("arrival_s", lambda: run_open_loop(Requests.from_arrays([1.0, 1.0]), [1.0, 0.5], 1)),
    ("arrival_s", lambda: run_open_loop(Requests.from_arrays([1.0, 1.0]), [-1.0, 0.5], 1)),
    ("arrival_s", lambda: run_open_loop(Requests.from_arrays([1.0, 1.0]), [0.0], 1)),
    ("arrival_s", lambda: run_open_loop(Requests.from_arrays([1.0]), [math.nan], 1)),
]


@pytest.mark.parametrize(("argument", "call"), BAD_CALLS)
def test_bad_input_raises_naming_the_argument(argument: str, call: Callable[[], object]) -> None:
    with pytest.raises(PlannerInputError) as raised:
        call()
    assert raised.value.argument == argument


def test_without_numba_the_python_kernels_run_and_agree() -> None:
    # A fresh interpreter where importing numba fails, as on a machine without it.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["numba"] = None
        import numpy as np
        from planner.capacity.simulation import (
            SUPPORT_MIX, compiled_kernels_available, simulate_open_loop,
        )
        from planner.errors import PlannerInputError
        assert not compiled_kernels_available()
        result = simulate_open_loop(SUPPORT_MIX, 10.5, 12, 5_000, seed=3)
        np.save(sys.argv[1], result.done_s)
        try:
            simulate_open_loop(SUPPORT_MIX, 10.5, 12, 10, engine="compiled")
        except PlannerInputError as err:
            assert err.argument == "engine"
        else:
            raise AssertionError("the compiled engine ran without numba")
        """
    )
    with tempfile.TemporaryDirectory() as folder:
        saved = Path(folder) / "done.npy"
        subprocess.run(
            [sys.executable, "-c", script, str(saved)],
            check=True,
            cwd=Path(__file__).resolve().parents[2],
            timeout=120,
        )
        done = np.load(saved)
    assert np.array_equal(done, simulate_open_loop(SUPPORT_MIX, 10.5, 12, 5_000, seed=3).done_s)


@pytest.mark.skipif(compiled_kernels_available(), reason="numba is installed")
def test_compiled_engine_without_numba_is_refused() -> None:
    with pytest.raises(PlannerInputError) as raised:
        simulate_open_loop(SUPPORT_MIX, 8.0, 12, 10, engine="compiled")
    assert raised.value.argument == "engine"
