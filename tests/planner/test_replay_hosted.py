"""Replay of hosted overflow: the plan's hosted share goes to the provider, not the replicas.

One region, one m7b shape (1000 prompt + 200 output tokens a request, 1200 tokens), one
provider ``apiprov`` with a p95 TTFT of 0.8 s. The hand-made plan routes 70 % of the demand's
1 request/s to two replicas and 30 % to the provider: 0.3 × 60 = 18 requests and 21,600
tokens a minute on average, within a quota of 25 requests a minute. The log is five minutes
at 1 request/s, except the third, which is a burst at 2 requests/s: 360 requests, of which
the split sends 36 of the burst minute's 120 (30 %) to the provider, 11 beyond its 25.
"""

from __future__ import annotations

import copy
import csv
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.placement import parse_problem, solve
from planner.placement.replay import Traffic, admitted_within_quota, replay, traffic_from_log
from planner.placement.verify import verify

TOKENS = 1200
# One hour of a production conversation service (Azure LLM inference trace 2023, CC-BY 4.0;
# Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting",
# ISCA 2024), beside the checkout.
CONV = Path(__file__).resolve().parents[3] / "shared/data/azure-llm-trace-2023/conv.csv"


def problem(*, rpm: float | None = 25, tpm: float = 1_000_000, demands: int = 1) -> dict[str, Any]:
    provider: dict[str, Any] = {
        "name": "apiprov",
        "region": "eu-west",
        "models": ["m7b"],
        "input_price_per_mtok": 0.5,
        "output_price_per_mtok": 1.5,
        "tpm_limit": tpm,
        "p95_ttft_s": 0.8,
    }
    if rpm is not None:
        provider["rpm_limit"] = rpm
    return {
        "regions": [{"name": "eu-west", "zones": ["eu-west-a"]}],
        "accelerators": [{"name": "H100", "price_per_gpu_hour": 4.0}],
        "inventory": [{"zone": "eu-west-a", "accelerator": "H100", "gpus": 8}],
        "shapes": [
            {
                "name": "m7b-1xH100",
                "model": "m7b",
                "accelerator": "H100",
                "gpus": 1,
                "prefill_tokens_per_s": 10000,
                "decode_tokens_per_s": 1000,
            }
        ],
        "demands": [
            {
                "id": f"chat-{i}",
                "tenant": f"tenant-{i}",
                "model": "m7b",
                "home_region": "eu-west",
                "requests_per_s": 1.0,
                "prompt_tokens": 1000,
                "output_tokens": 200,
                "ttft_slo_s": 2.0,
                "hosted_overflow": True,
            }
            for i in range(demands)
        ],
        "hosted": [provider],
    }


def plan(*, demands: int = 1, hosted: float = 0.3) -> dict[str, Any]:
    """Two replicas per demand, ``1 − hosted`` of each demand on them, ``hosted`` hosted."""
    return {
        "replicas": [{"zone": "eu-west-a", "shape": "m7b-1xH100", "replicas": 2 * demands}],
        "routing": [
            {
                "demand": f"chat-{i}",
                "region": "eu-west",
                "shape": "m7b-1xH100",
                "requests_per_s": 1.0 - hosted,
            }
            for i in range(demands)
        ],
        "hosted": [
            {"demand": f"chat-{i}", "provider": "apiprov", "requests_per_s": hosted}
            for i in range(demands)
            if hosted > 0
        ],
        "unserved": [],
    }


def burst_log() -> Traffic:
    """Minutes 0, 1, 3 and 4 at 1 request/s, minute 2 at 2 requests/s."""
    times = np.concatenate(
        [60.0 * m + np.arange(60.0) for m in (0, 1)]
        + [120.0 + np.arange(120.0) / 2]
        + [60.0 * m + np.arange(60.0) for m in (3, 4)]
    )
    n = times.shape[0]
    return Traffic(
        arrival_s=times,
        prompt_tokens=np.full(n, 1000.0),
        output_tokens=np.full(n, 200.0),
        requests_per_s=1.0,
    )


def test_thirty_percent_goes_hosted_and_the_burst_minute_passes_the_request_quota() -> None:
    report = replay(parse_problem(problem()), plan(), {"chat-0": burst_log()})
    [verdict] = report.demands
    assert verdict.requests == 360  # every arrival is replayed: on replicas or hosted
    hosted = verdict.hosted
    assert hosted is not None
    # The low-discrepancy split sends 108 of the 360 (30 %) to the provider, 18 in each
    # quiet minute and 36 in the burst, 11 beyond the 25 a minute the quota admits.
    assert hosted.requests == 108
    assert hosted.share == pytest.approx(0.3)
    assert hosted.over_quota == 11
    assert hosted.p95_ttft_s == 0.8
    assert dict(hosted.providers) == {"apiprov": (108, 11)}
    [provider] = report.providers
    assert provider.provider == "apiprov"
    assert (provider.requests, provider.over_quota, provider.minutes_over_quota) == (108, 11, 1)
    assert provider.peak_requests_per_minute == 36
    assert provider.peak_tokens_per_minute == 36 * TOKENS
    assert report.over_quota == 11
    assert report.notes == ("hosted apiprov: 11 of 108 requests over its quota in 1 of 5 minutes",)
    # 11 refused of 360 is 3.1 %: the tenant's p95 is the provider's 0.8 s (the replicas
    # answer faster), within its 2 s.
    assert verdict.p95_ttft_s == {"all up": 0.8}
    assert report.holds
    out = report.as_dict()
    assert out["demands"][0]["hosted"] == {
        "requests": 108,
        "share": 0.3,
        "over_quota": 11,
        "p95_ttft_s": 0.8,
        "providers": {"apiprov": {"requests": 108, "over_quota": 11}},
    }
    assert out["hosted"] == [
        {
            "provider": "apiprov",
            "requests": 108,
            "over_quota": 11,
            "minutes_over_quota": 1,
            "peak_requests_per_minute": 36,
            "peak_tokens_per_minute": 43200.0,
            "rpm_limit": 25.0,
            "tpm_limit": 1000000.0,
        }
    ]


def test_only_the_replica_share_enters_the_replica_queues() -> None:
    # The same log all on replicas, and with 30 % hosted: the replicas see 252 requests, not
    # 360, and a hosted request waits in no replica queue.
    report = replay(parse_problem(problem()), plan(), {"chat-0": burst_log()})
    all_replicas = replay(parse_problem(problem()), plan(hosted=0.0), {"chat-0": burst_log()})
    assert all_replicas.demands[0].requests == 360
    assert all_replicas.demands[0].hosted is None
    assert all_replicas.providers == ()
    # Two replicas at 0.3 replica-seconds a request: a TTFT of 0.1 s prefill, no queue.
    assert all_replicas.demands[0].p95_ttft_s["all up"] < 0.8
    assert report.demands[0].requests - report.demands[0].hosted.requests == 252  # type: ignore[union-attr]


def test_the_token_quota_refuses_the_same_requests_as_the_request_quota_it_matches() -> None:
    # 30,000 tokens a minute is 25 requests of 1200 tokens.
    report = replay(
        parse_problem(problem(rpm=None, tpm=25 * TOKENS)), plan(), {"chat-0": burst_log()}
    )
    [provider] = report.providers
    assert provider.rpm_limit is None
    assert (provider.requests, provider.over_quota) == (108, 11)


def test_more_refused_than_the_tail_allows_fails_the_tenant() -> None:
    # At 15 a minute every minute refuses some: 3 + 3 + 21 + 3 + 3 = 33 of the 108, above
    # 5 % of 360 (18), so the tenant's p95 is a request never served.
    report = replay(parse_problem(problem(rpm=15)), plan(), {"chat-0": burst_log()})
    [verdict] = report.demands
    assert verdict.hosted is not None
    assert verdict.hosted.over_quota == 33
    assert report.providers[0].minutes_over_quota == 5
    assert math.isinf(verdict.worst_p95_ttft_s)
    assert verdict.holds is False
    assert not report.holds
    assert report.as_dict()["demands"][0]["worst_p95_ttft_s"] is None
    # The requests it admitted still answer in the provider's time.
    assert verdict.hosted.p95_ttft_s == 0.8


def test_demands_sharing_a_provider_share_its_quota_per_minute() -> None:
    # Two tenants, each 30 % hosted: alone each stays within 25 a minute but for the burst;
    # together they send 36 a minute (72 in the burst) and pass it every minute.
    logs = {"chat-0": burst_log(), "chat-1": burst_log()}
    report = replay(parse_problem(problem(demands=2)), plan(demands=2), logs)
    [provider] = report.providers
    assert provider.requests == sum(v.hosted.requests for v in report.demands)  # type: ignore[union-attr]
    assert provider.minutes_over_quota == 5
    assert provider.peak_requests_per_minute == 72
    assert provider.over_quota == sum(v.hosted.over_quota for v in report.demands)  # type: ignore[union-attr]
    assert (provider.requests, provider.over_quota) == (216, 216 - 5 * 25)


def test_a_refused_request_uses_none_of_the_quota() -> None:
    arrival = np.array([0.0, 1.0, 2.0, 3.0, 61.0])
    tokens = np.array([500.0, 600.0, 300.0, 100.0, 900.0])
    admitted = admitted_within_quota(arrival, tokens, tpm_limit=1000, rpm_limit=None)
    # 500 fits; 600 would make 1100; 300 and 100 fit after it (900); a new minute for 900.
    assert admitted.tolist() == [True, False, True, True, True]
    by_requests = admitted_within_quota(arrival, tokens, tpm_limit=1e9, rpm_limit=2)
    assert by_requests.tolist() == [True, True, False, False, True]


def test_without_hosted_rows_the_report_is_as_before() -> None:
    parsed = parse_problem(problem())
    without_key = plan(hosted=0.0)
    del without_key["hosted"]
    empty = plan(hosted=0.0)
    assert empty["hosted"] == []
    first = replay(parsed, without_key, {"chat-0": burst_log()}).as_dict()
    second = replay(parsed, empty, {"chat-0": burst_log()}).as_dict()
    first.pop("seconds")
    second.pop("seconds")
    assert first == second
    assert "hosted" not in first
    assert all("hosted" not in d for d in first["demands"])
    assert first["notes"] == []


def test_a_solved_plan_replays_its_hosted_share() -> None:
    # The worked example of docs/planning.md: 10 requests/s, 2 replicas carry 5, the
    # provider the other 5 (360,000 of its 600,000 tokens a minute).
    document = problem(rpm=None, tpm=600_000)
    document["inventory"][0]["gpus"] = 2
    document["target_utilization"] = 0.75
    demand = document["demands"][0]
    demand.update(requests_per_s=10.0, id="chat", tenant="acme")
    del demand["ttft_slo_s"]
    solution = solve(copy.deepcopy(document), time_limit_s=20, workers=1)
    assert verify(document, solution) == []
    [row] = solution["hosted"]
    assert row["requests_per_s"] == pytest.approx(5.0)
    report = replay(parse_problem(document), solution)
    [verdict] = report.demands
    assert verdict.hosted is not None
    assert verdict.hosted.share == pytest.approx(0.5, abs=0.002)
    assert verdict.hosted.over_quota == 0  # about 300 a minute against 500
    assert report.providers[0].over_quota == 0


@pytest.mark.skipif(not CONV.exists(), reason="the Azure trace is not beside the checkout")
def test_the_production_trace_passes_a_quota_its_average_keeps() -> None:
    with CONV.open(newline="") as f:
        rows = list(csv.DictReader(f))
    stamps = [datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in rows]
    arrival = np.array([(t - stamps[0]).total_seconds() for t in stamps])
    rate = 5.38  # 19,366 requests in the hour
    log = traffic_from_log(
        arrival,
        [float(r["ContextTokens"]) for r in rows],
        [float(r["GeneratedTokens"]) for r in rows],
        requests_per_s=rate,
    )
    document = problem(rpm=120, tpm=200_000)
    document["demands"][0].update(requests_per_s=rate, prompt_tokens=1155, output_tokens=211)
    solution = plan(hosted=0.3 * rate)
    solution["routing"][0]["requests_per_s"] = 0.7 * rate
    solution["replicas"][0]["replicas"] = 4
    # On average 0.3 × 5.38 × 60 = 96.8 requests and 132,000 tokens a minute: within 120
    # and 200,000. The trace's busy minutes are not.
    report = replay(parse_problem(document), solution, {"chat-0": log})
    [verdict] = report.demands
    assert verdict.requests == 19366
    assert verdict.hosted is not None
    assert (verdict.hosted.requests, verdict.hosted.over_quota) == (5810, 171)
    [provider] = report.providers
    assert provider.minutes_over_quota == 13
    assert provider.peak_requests_per_minute == 152
    assert provider.peak_tokens_per_minute == 243131
    # 171 refused of 19,366 is 0.9 %: the tenant still holds its p95.
    assert report.holds
