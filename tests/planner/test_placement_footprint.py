"""footprint: a solution read pool by pool; the seeds' Friday review priced by re-solving.

The Friday review: 8 req/s flat on the seeds' 2-GPU replica (4,000 prompt and 160 output
tokens/s), prompts 1,500 → 2,700 tokens at 100 output tokens: 8 × 1.0 / 0.7 → 12 replicas,
8 × 1.3 / 0.7 = 14.9 → 15. Here the 8 req/s come from five tenants sharing eu-west.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner.placement import solve
from planner.placement.footprint import footprint, footprint_change

TENANTS = ("alder", "birch", "cedar", "damson", "elm")
PRICE = 4.10  # $/GPU-hour
MULTIPLIER = 1.1  # eu-west


def friday(prompt_tokens: float) -> dict[str, Any]:
    return {
        "format": "placement-problem/v1",
        "target_utilization": 0.7,
        "regions": [
            {
                "name": "eu-west",
                "zones": ["eu-west-a", "eu-west-b", "eu-west-c"],
                "price_multiplier": MULTIPLIER,
            }
        ],
        "accelerators": [{"name": "gpu80", "price_per_gpu_hour": PRICE}],
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
            }
        ],
        "demands": [
            {
                "id": f"{tenant}/chat-70b/chat@eu-west",
                "tenant": tenant,
                "model": "chat-70b",
                "home_region": "eu-west",
                "requests_per_s": 1.6,
                "prompt_tokens": prompt_tokens,
                "output_tokens": 100,
            }
            for tenant in TENANTS
        ],
    }


def test_friday_review_priced_pool_by_pool() -> None:
    before_problem, after_problem = friday(1500), friday(2700)
    before = footprint(before_problem, solve(before_problem, time_limit_s=5))
    after = footprint(after_problem, solve(after_problem, time_limit_s=5))
    assert (before.replicas, after.replicas) == (12, 15)
    assert before.replicas_of(model="chat-70b", region="eu-west") == 12
    assert before.replicas_of(model="chat-70b", region="us-east") == 0
    assert (before.gpus, after.gpus) == (24, 30)
    # 24 GPUs × $4.10 × 1.1 = $108.24/h; 30 GPUs: $135.30/h.
    assert before.cost_per_hour == pytest.approx(108.24)
    assert after.cost_per_hour == pytest.approx(135.30)
    # Each tenant's 1.6 req/s costs 1.6 × (1,500/4,000 + 100/160) = 1.6 replica-s/s, then 2.08.
    assert set(before.demand_load) == {f"{t}/chat-70b/chat@eu-west" for t in TENANTS}
    assert all(v == pytest.approx(1.6) for v in before.demand_load.values())
    assert all(v == pytest.approx(2.08) for v in after.demand_load.values())

    (pool,) = footprint_change(before, after)
    assert (pool.region, pool.shape, pool.model) == ("eu-west", "chat-70b/gpu80x2", "chat-70b")
    assert (pool.replicas_before, pool.replicas_after, pool.replica_delta) == (12, 15, 3)
    assert (pool.gpus_before, pool.gpus_after) == (24, 30)
    assert (pool.cost_per_hour_before, pool.cost_per_hour_after) == (
        pytest.approx(108.24),
        pytest.approx(135.30),
    )


def test_a_pool_on_one_side_only_reads_as_zero_on_the_other() -> None:
    problem = friday(1500)
    solution = solve(problem, time_limit_s=5)
    moved = copy.deepcopy(problem)
    moved["shapes"].append({**moved["shapes"][0], "name": "chat-70b/gpu80x2-b"})
    # The same replicas, written against a second, identical shape.
    other = {
        **solution,
        "replicas": [{**r, "shape": "chat-70b/gpu80x2-b"} for r in solution["replicas"]],
        "routing": [{**r, "shape": "chat-70b/gpu80x2-b"} for r in solution["routing"]],
    }
    rows = footprint_change(footprint(problem, solution), footprint(moved, other))
    assert [(r.shape, r.replicas_before, r.replicas_after) for r in rows] == [
        ("chat-70b/gpu80x2", 12, 0),
        ("chat-70b/gpu80x2-b", 0, 12),
    ]
    assert rows[0].cost_per_hour_after == 0.0 and rows[1].gpus_before == 0


def test_a_solution_of_another_problem_is_refused() -> None:
    problem = friday(1500)
    solution = solve(problem, time_limit_s=5)
    solution["replicas"] = [{"zone": "us-east-a", "shape": "chat-70b/gpu80x2", "replicas": 1}]
    with pytest.raises(KeyError):
        footprint(problem, solution)


def test_an_unserved_demand_still_asks_its_load() -> None:
    # No GPUs at all: nothing is routed, every demand is unserved, and each still asks
    # 1.6 req/s × 1.0 replica-s of the plan (on its model's cheapest shape).
    problem = friday(1500)
    problem["inventory"] = []
    solution = solve(problem, time_limit_s=5)
    assert solution["unserved_requests_per_s"] == pytest.approx(8.0)
    print_ = footprint(problem, solution)
    assert print_.pools == () and print_.cost_per_hour == 0.0
    assert all(v == pytest.approx(1.6) for v in print_.demand_load.values())
