"""Burstiness, shape eligibility, replay verification and the re-solve loop (planner only)."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

from planner.capacity import burstiness, queueing
from planner.errors import PlannerInputError
from planner.placement import parse_problem, solve
from planner.placement.replay import (
    ALL_UP,
    ONE_REPLICA,
    Traffic,
    replay,
    synthesised_traffic,
    traffic_from_log,
    zone_scenario,
)
from planner.placement.verified import solve_verified
from planner.placement.verify import verify


def _problem(**demand: Any) -> dict[str, Any]:
    """One region of three zones, the support assistant's two shapes: gpu80x2 is cheaper per
    unit of decode work (2 GPUs for 160 tokens/s) but prefills at 4,000 tokens/s."""
    row = {
        "id": "acme/chat",
        "tenant": "acme",
        "model": "chat-70b",
        "home_region": "eu-west",
        "requests_per_s": 2.0,
        "burst": 1.0,
        "prompt_tokens": 2000,
        "output_tokens": 30,
        "promise": "zone",
        "ttft_slo_s": 1.5,
        "prompt_tokens_p95": 7303,
    }
    row.update(demand)
    return {
        "regions": [{"name": "eu-west", "zones": ["eu-west-a", "eu-west-b", "eu-west-c"]}],
        "accelerators": [{"name": "gpu80", "price_per_gpu_hour": 4.1}],
        "inventory": [
            {"zone": z, "accelerator": "gpu80", "gpus": 64}
            for z in ("eu-west-a", "eu-west-b", "eu-west-c")
        ],
        "shapes": [
            {
                "name": "chat-70b/gpu80x2",
                "model": "chat-70b",
                "accelerator": "gpu80",
                "gpus": 2,
                "prefill_tokens_per_s": 4000,
                "decode_tokens_per_s": 160,
            },
            {
                "name": "chat-70b/gpu80x4",
                "model": "chat-70b",
                "accelerator": "gpu80",
                "gpus": 4,
                "prefill_tokens_per_s": 7600,
                "decode_tokens_per_s": 380,
            },
        ],
        "demands": [row],
    }


def test_the_only_cheaper_shape_that_cannot_meet_the_slo_is_excluded_and_said_why() -> None:
    problem = _problem()
    without_slo = _problem(ttft_slo_s=None)
    del without_slo["demands"][0]["ttft_slo_s"]
    # Without the objective the cheaper shape wins: 2 GPUs of gpu80x2 carry a request for
    # 0.69 replica-s (1.38 GPU-s) against 0.34 replica-s on 4 GPUs (1.37 GPU-s) plus floors.
    cheap = solve(without_slo, time_limit_s=10)
    assert {r["shape"] for r in cheap["routing"]} == {"chat-70b/gpu80x2"}
    solution = solve(problem, time_limit_s=10)
    assert {r["shape"] for r in solution["routing"]} == {"chat-70b/gpu80x4"}
    assert solution["cost_per_hour"] > cheap["cost_per_hour"]
    [excluded] = solution["excluded_shapes"]
    assert excluded["demand"] == "acme/chat" and excluded["shape"] == "chat-70b/gpu80x2"
    # 7,303 tokens at 4,000 tokens/s: 1.83 s of prefill before any queueing.
    assert "1.83 s to prefill" in excluded["reason"] and "1.5 s" in excluded["reason"]
    assert verify(problem, solution) == []
    # The independent checker refuses a plan that routes to the excluded shape.
    assert any("gpu80x2" in v for v in verify(problem, cheap))


def test_a_demand_no_shape_can_serve_in_time_is_unserved_with_the_reason() -> None:
    problem = _problem(ttft_slo_s=0.5)  # 7,300 / 7,600 = 0.96 s even on gpu80x4
    solution = solve(problem, time_limit_s=10)
    assert solution["unserved"] and not solution["routing"]
    assert any("no shape of chat-70b can meet its p95 TTFT" in s for s in solution["binding"])


def test_burstiness_of_poisson_arrivals_reads_one_and_of_clumps_far_above() -> None:
    rng = np.random.default_rng(1)
    poisson = np.cumsum(rng.exponential(1 / 5.0, 20_000))
    figures = burstiness.from_arrivals(poisson)
    assert figures.interarrival_scv == pytest.approx(1.0, abs=0.05)
    assert figures.dispersion_1s == pytest.approx(1.0, abs=0.1)
    assert figures.dispersion_10s == pytest.approx(1.0, abs=0.2)
    assert figures.mean_requests_per_s == pytest.approx(5.0, rel=0.03)
    assert figures.span_s == pytest.approx(3600.0, abs=1.0)  # the busiest hour only
    # The same count in clumps: 100 requests within a second every 20 s.
    clumps = np.concatenate([t + np.sort(rng.uniform(0, 1, 100)) for t in range(0, 3600, 20)])
    bursty = burstiness.from_arrivals(clumps)
    assert bursty.peak_1s is not None and bursty.peak_1s >= 100
    assert bursty.dispersion_1s is not None and bursty.dispersion_1s > 50
    # A sliding minute holds three clumps and part of a fourth: 5 to 6.7 requests/s.
    assert bursty.peak_60s is not None and 300 / 60 <= bursty.peak_60s <= 400 / 60


def test_burstiness_from_counts_is_read_at_the_bucket_width() -> None:
    counts = [60] * 30 + [600] + [60] * 29  # a one-minute spike
    figures = burstiness.from_counts(counts, 60.0)
    assert figures.resolution_s == 60.0
    assert figures.peak_60s == pytest.approx(10.0)
    assert figures.peak_1s is None and figures.interarrival_scv is None
    assert figures.dispersion > 50
    with pytest.raises(PlannerInputError, match="counts"):
        burstiness.from_counts([1, -1], 60.0)


def test_allen_cunneen_is_erlang_c_for_poisson_and_exponential_service() -> None:
    # M/M/c: P(W > t) = C(c, a) · exp(−(cμ − λ) t), exactly.
    tail = burstiness.allen_cunneen_wait_p(
        servers=12, rate=8.0, service_s=1.0, arrival_scv=1.0, service_scv=1.0, wait_s=0.5
    )
    assert tail == pytest.approx(queueing.erlang_c(12, 8.0) * math.exp(-(12 - 8) * 0.5))
    # Burstier arrivals (ca² = 13, the public code trace's 1 s dispersion) wait longer.
    bursty = burstiness.allen_cunneen_wait_p(
        servers=12, rate=8.0, service_s=1.0, arrival_scv=13.0, service_scv=1.0, wait_s=0.5
    )
    assert bursty > 3 * tail
    poisson_c = burstiness.allen_cunneen_servers(
        rate=8.0, service_s=1.0, arrival_scv=1.0, service_scv=0.4, wait_s=0.5
    )
    bursty_c = burstiness.allen_cunneen_servers(
        rate=8.0, service_s=1.0, arrival_scv=13.0, service_scv=0.4, wait_s=0.5
    )
    assert bursty_c > poisson_c


def _clumped_log(seed: int = 5) -> Traffic:
    """An hour: 1.5 requests/s steady, and 150 requests within 5 s every two minutes."""
    rng = np.random.default_rng(seed)
    steady = np.cumsum(rng.exponential(1 / 1.5, 5400))
    steady = steady[steady < 3600]
    bursts = np.concatenate(
        [t + np.sort(rng.uniform(0, 5, 150)) for t in np.arange(30.0, 3600.0, 120.0)]
    )
    times = np.sort(np.concatenate([steady, bursts]))
    prompts = np.full(times.shape[0], 2000.0)
    outputs = np.full(times.shape[0], 30.0)
    peak = float(np.bincount((times // 60).astype(int)).max()) / 60
    return traffic_from_log(times, prompts, outputs, requests_per_s=peak)


def test_replay_of_a_clumped_log_misses_where_the_linear_plan_looked_fine() -> None:
    traffic = _clumped_log()
    problem = _problem(requests_per_s=traffic.requests_per_s, prompt_tokens_p95=2000)
    solution = solve(problem, time_limit_s=10)
    report = replay(parse_problem(problem), solution, {"acme/chat": traffic})
    [verdict] = report.demands
    assert verdict.source == "request log" and verdict.requests == traffic.arrival_s.shape[0]
    assert set(verdict.p95_ttft_s) == {
        ALL_UP,
        ONE_REPLICA,
        *(zone_scenario(z) for z in ("eu-west-a", "eu-west-b", "eu-west-c")),
    }
    assert verdict.holds is False and verdict.worst_p95_ttft_s > 1.5
    [*shortfalls] = report.shortfalls
    assert shortfalls and all(s.needed_live and s.needed_live > s.live for s in shortfalls)


def test_solve_verified_raises_the_load_until_the_replay_holds() -> None:
    traffic = _clumped_log()
    problem = _problem(requests_per_s=traffic.requests_per_s, prompt_tokens_p95=2000)
    result = solve_verified(problem, {"acme/chat": traffic}, time_limit_s=10)
    assert result.holds and len(result.rounds) >= 2
    assert not result.rounds[0].holds and result.rounds[-1].holds
    [demand] = result.problem["demands"]
    assert demand["burst_before_replay"] == 1.0 and demand["burst"] > 1.0
    assert verify(result.problem, result.solution) == []
    # Replaying the final plan on its own agrees.
    again = replay(parse_problem(result.problem), result.solution, {"acme/chat": traffic})
    assert again.holds
    # The input is not modified.
    assert problem["demands"][0]["burst"] == 1.0
    document = result.verification()
    assert document["holds"] and document["raised"]["acme/chat"]["burst_before"] == 1.0


def test_a_shape_no_replica_count_can_hold_is_excluded_by_the_replay() -> None:
    """A profile that says p95 prompts of 4,000 tokens (1.0 s of prefill on gpu80x2, within
    the 1.2 s objective) while the log's prompts are 5,000 (1.25 s): the prompt check passes
    gpu80x2, the replay finds no replica count that holds there, and the loop moves the
    demand to gpu80x4 (0.66 s) and says why."""
    traffic = _clumped_log()
    long = copy.copy(traffic)
    object.__setattr__(long, "prompt_tokens", np.full(traffic.arrival_s.shape[0], 5000.0))
    problem = _problem(
        requests_per_s=traffic.requests_per_s, prompt_tokens=5000, prompt_tokens_p95=4000,
        promise="none", output_tokens=5, ttft_slo_s=1.2,
    )  # fmt: skip
    result = solve_verified(problem, {"acme/chat": long}, time_limit_s=10)
    assert result.holds
    assert {r["shape"] for r in result.solution["routing"]} == {"chat-70b/gpu80x4"}
    assert result.problem["demands"][0]["excluded_shapes"] == ["chat-70b/gpu80x2"]
    [excluded] = result.solution["excluded_shapes"]
    assert "at any replica count" in excluded["reason"]


def test_synthesised_traffic_has_the_demands_rate_dispersion_and_lengths() -> None:
    demand = parse_problem(
        _problem(requests_per_s=20.0, arrival_scv=4.0, prompt_tokens=1000, prompt_tokens_p95=3000)
    ).demands[0]
    traffic = synthesised_traffic(demand, seed=3)
    span = float(traffic.arrival_s[-1])
    assert traffic.source == "synthesised"
    assert traffic.arrival_s.shape[0] / span == pytest.approx(20.0, rel=0.05)
    assert np.mean(traffic.prompt_tokens) == pytest.approx(1000, rel=0.05)
    assert np.percentile(traffic.prompt_tokens, 95) == pytest.approx(3000, rel=0.1)
    gaps = np.diff(traffic.arrival_s)
    assert float(np.var(gaps) / np.mean(gaps) ** 2) == pytest.approx(4.0, rel=0.15)
    # Deterministic: the same seed gives the same arrivals.
    assert np.array_equal(synthesised_traffic(demand, seed=3).arrival_s, traffic.arrival_s)
