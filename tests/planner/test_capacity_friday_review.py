"""The seeds' Friday review, end to end: longer prompts, same request rate, a full KV pool."""

from __future__ import annotations

import pytest

from planner.capacity.littles_law import in_flight, replica_kv_check
from planner.capacity.memory import GB, MIB, context_tokens_that_fit, kv_pool_bytes
from planner.capacity.queueing import offered_load
from planner.capacity.sizing import replicas_needed
from planner.capacity.workload import fleet_utilization, replica_request_rate, request_cost

RATE = 8.0  # req/s, flat all week
REPLICAS = 12
KV_PER_TOKEN = 0.25 * MIB


def test_friday_review() -> None:
    # Retrieval depth went from top-4 to top-8 chunks of ~300 tokens: 1,500 → 2,700 prompt.
    assert 4 * 300 + 300 == 1500 and 8 * 300 + 300 == 2700
    before = request_cost(1500, 100, 4000, 160)
    after = request_cost(2700, 100, 4000, 160)
    assert before == pytest.approx(1.000)
    assert after == pytest.approx(1.300)
    # Prefill per request rose 80% (0.375 → 0.675 s).
    assert request_cost(2700, 0, 4000, 160) / request_cost(1500, 0, 4000, 160) == pytest.approx(1.8)
    assert replica_request_rate(before) == pytest.approx(1.00)
    assert replica_request_rate(after) == pytest.approx(0.77, abs=0.005)

    # Utilisation 0.67 → 0.87, above the 0.70 planning target.
    assert fleet_utilization(RATE, before, REPLICAS) == pytest.approx(0.67, abs=0.005)
    assert fleet_utilization(RATE, after, REPLICAS) == pytest.approx(0.87, abs=0.005)

    # The 2-GPU replica's 8 GB pool, about 30,500 tokens at 0.25 MiB each.
    pool = kv_pool_bytes(80 * GB, 2, 140 * GB, 6 * GB)
    assert context_tokens_that_fit(pool, KV_PER_TOKEN) == pytest.approx(30_500, abs=50)
    per_replica = RATE / REPLICAS
    fill_before = replica_kv_check(in_flight(per_replica, 5), 1500 + 100, KV_PER_TOKEN, pool)
    fill_after = replica_kv_check(in_flight(per_replica, 16), 2700 + 100, KV_PER_TOKEN, pool)
    assert round(fill_before.fill, 2) == 0.17
    assert round(fill_after.fill, 2) == 0.98

    # 8 × 1.3 / 0.7 = 14.9 → 15 replicas, three more.
    needed = replicas_needed(offered_load(RATE, after), 1.0, target_util=0.7)
    assert needed == 15
    assert needed - REPLICAS == 3
    # Cutting the prompt back restores the 12-replica fleet.
    assert replicas_needed(offered_load(RATE, before), 1.0) == 12
