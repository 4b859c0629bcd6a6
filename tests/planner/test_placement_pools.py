"""Pool loads of a plan, on the spec's worked sizing example."""

from __future__ import annotations

import pytest

from planner.placement import solve
from planner.placement.pools import pool_loads


def _problem(promise: str, burst: float) -> dict[str, object]:
    return {
        "format": "placement-problem/v1",
        "target_utilization": 0.7,
        "regions": [{"name": "r", "geo": "g", "zones": ["r-a", "r-b", "r-c"]}],
        "accelerators": [{"name": "gpu", "memory_gb": 80, "price_per_gpu_hour": 1.0}],
        "inventory": [
            {"zone": z, "accelerator": "gpu", "gpus": 1000} for z in ("r-a", "r-b", "r-c")
        ],
        "shapes": [
            {
                "name": "m/gpu",
                "model": "m",
                "accelerator": "gpu",
                "gpus": 1,
                "prefill_tokens_per_s": 1e12,
                "decode_tokens_per_s": 100,
                "max_concurrency": 1000,
            }
        ],
        "demands": [
            {
                "id": "t/m",
                "tenant": "t",
                "model": "m",
                "home_region": "r",
                "requests_per_s": 8,
                "burst": burst,
                "prompt_tokens": 0,
                "output_tokens": 100,
                "promise": promise,
            }
        ],
    }


def test_sizing_example_pool_reads_back_the_seed_numbers() -> None:
    problem = _problem("none", 1.0)
    [pool] = pool_loads(problem, solve(problem, time_limit_s=10))
    # 8 req/s × 1 replica-second each, at U = 0.7: 11.43 replicas of target capacity, 12 whole.
    assert pool.replicas == 12
    assert pool.load_replicas == pytest.approx(8 / 0.7)
    assert pool.utilization == pytest.approx(8 / 12)
    assert pool.headroom_replicas == pytest.approx(12 - 8 / 0.7)
    assert pool.promise == "none"


def test_zone_promise_keeps_spares_as_headroom() -> None:
    problem = _problem("zone", 1.5)
    [pool] = pool_loads(problem, solve(problem, time_limit_s=10))
    assert pool.replicas == 27
    assert pool.promise == "zone"
    assert pool.utilization == pytest.approx(12 / 27)
    assert pool.headroom_replicas == pytest.approx(27 - 12 / 0.7)


def test_an_empty_plan_has_no_pools() -> None:
    problem = _problem("none", 1.0)
    problem["demands"] = []
    assert pool_loads(problem, solve(problem, time_limit_s=10)) == []
