"""Hosted-API overflow as a planned capacity source, inside residency and TPM quotas.

One region (eu-west) with 2 H100s; the m7b shape costs 1000/10000 + 200/1000 = 0.3
replica-seconds a request, so at 75 % one replica carries 2.5 requests/s and the burst of
10 requests/s needs 4 replicas: 5 requests/s are beyond the inventory. A request is 1200
tokens, so 5 requests/s are 5 × 60 × 1200 = 360,000 tokens/min.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from planner.placement.explain import explain
from planner.placement.problem import ProblemInvalid, parse_problem
from planner.placement.solution import parse_solution, solution_to_json
from planner.placement.solver import solve
from planner.placement.verify import verify

EXAMPLES = Path(__file__).resolve().parents[2] / ".." / "shared" / "examples"


def problem(
    *,
    tpm: float = 600_000,
    overflow: bool = True,
    allowed: tuple[str, ...] = ("eu-west",),
    gpus: int = 2,
    input_price: float = 0.5,
    output_price: float = 1.5,
    provider_region: str = "eu-west",
    **demand_extra: Any,
) -> dict[str, Any]:
    demand = {
        "id": "chat",
        "tenant": "acme",
        "model": "m7b",
        "home_region": "eu-west",
        "allowed_regions": list(allowed),
        "requests_per_s": 10,
        "prompt_tokens": 1000,
        "output_tokens": 200,
        "hosted_overflow": overflow,
        **demand_extra,
    }
    return {
        "format": "placement-problem/v1",
        "target_utilization": 0.75,
        "regions": [
            {"name": "eu-west", "zones": ["eu-west-a"]},
            {"name": "us-east", "zones": ["us-east-a"]},
        ],
        "accelerators": [{"name": "H100", "price_per_gpu_hour": 4.0}],
        "inventory": [{"zone": "eu-west-a", "accelerator": "H100", "gpus": gpus}],
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
        "demands": [demand],
        "hosted": [
            {
                "name": "apiprov",
                "region": provider_region,
                "models": ["m7b"],
                "input_price_per_mtok": input_price,
                "output_price_per_mtok": output_price,
                "tpm_limit": tpm,
                "p95_ttft_s": 0.8,
            }
        ],
    }


def solved(p: dict[str, Any]) -> dict[str, Any]:
    solution = solve(p, time_limit_s=20, workers=1)
    assert solution["status"] == "optimal"
    assert verify(p, solution) == []
    return solution


def test_a_burst_beyond_inventory_overflows_to_the_hosted_api_within_its_quota() -> None:
    without = solved(problem(overflow=False))
    assert without["unserved_requests_per_s"] == pytest.approx(5.0)
    with_hosted = solved(problem())
    assert with_hosted["unserved_requests_per_s"] == 0.0
    [row] = with_hosted["hosted"]
    assert row["demand"] == "chat" and row["provider"] == "apiprov"
    assert row["requests_per_s"] == pytest.approx(5.0)
    assert row["tokens_per_minute"] == pytest.approx(360_000)
    assert row["tokens_per_minute"] <= 600_000
    # 5 × 3600 × (1000 × 0.5 + 200 × 1.5) / 1e6 = $14.40/hour, on top of two $4 replicas.
    assert row["cost_per_hour"] == pytest.approx(14.4)
    assert with_hosted["hosted_cost_per_hour"] == pytest.approx(14.4)
    assert with_hosted["cost_per_hour"] == pytest.approx(8.0 + 14.4)
    assert [r["replicas"] for r in with_hosted["replicas"]] == [2]
    # Served at the first objective: the 5 requests/s unserved without it are served.
    assert without["unserved_requests_per_s"] - with_hosted["unserved_requests_per_s"] == (
        pytest.approx(row["requests_per_s"])
    )


def test_residency_forbidding_the_providers_region_keeps_it_out() -> None:
    solution = solved(problem(provider_region="us-east"))
    assert solution["hosted"] == []
    assert solution["hosted_cost_per_hour"] == 0.0
    assert solution["unserved_requests_per_s"] == pytest.approx(5.0)
    # Allowed there too, it is used.
    allowed = solved(problem(provider_region="us-east", allowed=("eu-west", "us-east")))
    assert allowed["unserved_requests_per_s"] == 0.0


def test_a_demand_without_hosted_overflow_does_not_use_it() -> None:
    solution = solved(problem(overflow=False))
    assert solution["hosted"] == []
    assert solution["cost_per_hour"] == pytest.approx(8.0)


def test_a_provider_slower_than_the_ttft_objective_is_not_used() -> None:
    solution = solved(problem(ttft_slo_s=0.5))
    assert solution["hosted"] == []
    assert solved(problem(ttft_slo_s=1.0))["unserved_requests_per_s"] == 0.0


def test_the_tpm_quota_binds_and_the_excess_stays_unserved() -> None:
    solution = solved(problem(tpm=240_000))
    [row] = solution["hosted"]
    # 240,000 tokens/min / (60 × 1200) = 3.33 requests/s; 5 − 3.33 = 1.67 left.
    assert row["tokens_per_minute"] == pytest.approx(240_000)
    assert row["tokens_per_minute"] <= 240_000 * (1 + 1e-9)
    assert row["requests_per_s"] == pytest.approx(10 / 3)
    assert solution["unserved_requests_per_s"] == pytest.approx(5 - 10 / 3)


def test_an_rpm_quota_binds_too() -> None:
    p = problem()
    p["hosted"][0]["rpm_limit"] = 120  # 2 requests/s
    solution = solved(p)
    assert solution["hosted"][0]["requests_per_s"] == pytest.approx(2.0)
    assert solution["unserved_requests_per_s"] == pytest.approx(3.0)


def test_a_cheap_hosted_api_takes_load_replicas_could_carry() -> None:
    # 8 GPUs: replicas could serve it all for $16/hour; hosted is $0.29/hour per request/s,
    # so the quota fills (7.5 requests/s at 540,000 tokens/min with 1 replica for the rest:
    # 10 requests/s hosted would be 720,000 tokens/min, above the quota).
    p = problem(gpus=8, input_price=0.05, output_price=0.15)
    solution = solved(p)
    assert solution["hosted"][0]["requests_per_s"] == pytest.approx(7.5)
    assert solution["cost_per_hour"] == pytest.approx(4.0 + 2.16)
    [sentence] = explain(p, solution, promise_prices=False).hosted
    assert "7.5 of 10 requests/s" in sentence and "cheaper than a replica" in sentence


def test_explanation_says_inventory_exhausted() -> None:
    p = problem()
    [sentence] = explain(p, solved(p), promise_prices=False).hosted
    assert "5 of 10 requests/s" in sentence and "inventory exhausted" in sentence


def test_the_verifier_refuses_a_solution_that_breaks_the_quota() -> None:
    solution = solved(problem())
    assert verify(problem(tpm=300_000), solution) == [
        "hosted apiprov: 360000 tokens/min > tpm_limit 300000"
    ]
    assert any(
        "does not allow hosted overflow" in v for v in verify(problem(overflow=False), solution)
    )
    wrong = copy.deepcopy(solution)
    wrong["hosted"][0]["cost_per_hour"] = 1.0
    assert any("cost_per_hour 1 != recomputed 14.4" in v for v in verify(problem(), wrong))
    short = copy.deepcopy(solution)
    short["hosted"][0]["requests_per_s"] = 4.0
    assert any("!= planned rate" in v for v in verify(problem(), short))


def test_the_solution_with_hosted_rows_round_trips() -> None:
    solution = solved(problem(tpm=240_000))
    parsed = parse_solution(solution)
    assert parsed.hosted is not None and parsed.hosted_of("chat")[0].provider == "apiprov"
    assert parsed.hosted_cost_per_hour == pytest.approx(9.6)
    assert solution_to_json(parsed) == solution
    old = solved(problem(overflow=False))
    del old["hosted"], old["hosted_cost_per_hour"]
    assert parse_solution(old).hosted is None
    assert "hosted" not in solution_to_json(parse_solution(old))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda p: p["hosted"][0].update(region="mars"), "hosted[0].region"),
        (lambda p: p["hosted"][0].pop("tpm_limit"), "hosted[0].tpm_limit"),
        (lambda p: p["hosted"][0].update(tpm_limit=-1), "hosted[0].tpm_limit"),
        (lambda p: p["hosted"][0].update(models=[]), "hosted[0].models"),
        (lambda p: p["hosted"].append(dict(p["hosted"][0])), "hosted[1].name"),
        (lambda p: p["demands"][0].update(hosted_overflow="yes"), "demands[0].hosted_overflow"),
    ],
)
def test_invalid_hosted_input_names_the_field(change: Any, field: str) -> None:
    p = problem()
    change(p)
    with pytest.raises(ProblemInvalid) as error:
        parse_problem(p)
    assert error.value.argument == field
    assert solve(p, time_limit_s=5)["field"] == field


def test_demands_sharing_a_quota_share_it() -> None:
    p = problem()
    second = dict(p["demands"][0], id="batch", tenant="beta", home_region="us-east")
    second["allowed_regions"] = ["eu-west", "us-east"]
    p["demands"].append(second)
    solution = solved(p)
    total = sum(r["tokens_per_minute"] for r in solution["hosted"])
    assert total <= 600_000 * (1 + 1e-9)
    # 20 requests/s: 5 on replicas, 600,000 / 72,000 = 8.33 hosted, 6.67 unserved.
    assert solution["unserved_requests_per_s"] == pytest.approx(20 - 5 - 600_000 / 72_000)


@pytest.mark.parametrize("name", ["sizing-base", "sizing-burst", "sizing-zonal", "fragmentation"])
def test_examples_solve_to_the_same_cost_with_an_unused_provider(name: str) -> None:
    p = json.loads((EXAMPLES / f"{name}.json").read_text())
    before = solve(p, time_limit_s=30)
    assert "hosted" not in before and "hosted_cost_per_hour" not in before
    models = sorted({s["model"] for s in p["shapes"]})
    with_provider = copy.deepcopy(p)
    with_provider["hosted"] = [
        {
            "name": "api",
            "region": p["regions"][0]["name"],
            "models": models,
            "input_price_per_mtok": 0.01,
            "output_price_per_mtok": 0.01,
            "tpm_limit": 1e9,
            "p95_ttft_s": 0.1,
        }
    ]
    after = solve(with_provider, time_limit_s=30)
    assert after["cost_per_hour"] == before["cost_per_hour"]
    assert after["replicas"] == before["replicas"]
    assert after["hosted"] == []


def test_two_models_on_one_provider_share_its_quota() -> None:
    # Two models would be two parts; the provider's quota makes them one.
    p = problem()
    p["shapes"].append(dict(p["shapes"][0], name="m13b-1xH100", model="m13b"))
    p["demands"].append(dict(p["demands"][0], id="code", tenant="beta", model="m13b"))
    p["hosted"][0]["models"] = ["m7b", "m13b"]
    solution = solved(p)
    total = sum(r["tokens_per_minute"] for r in solution["hosted"])
    assert total == pytest.approx(600_000)
    # 20 requests/s: 2 replicas carry 5, the quota 8.33, and 6.67 stay unserved.
    assert solution["unserved_requests_per_s"] == pytest.approx(20 - 5 - 600_000 / 72_000)
