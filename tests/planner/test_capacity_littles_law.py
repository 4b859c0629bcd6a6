"""Little's law: in flight for the whole system, stage by stage, and the per-replica KV check."""

from __future__ import annotations

import pytest

from planner.capacity.littles_law import (
    Stage,
    concurrency_with_headroom,
    in_flight,
    replica_kv_check,
    stage_in_flight,
)
from planner.capacity.memory import GB, MIB
from planner.errors import PlannerInputError


def test_in_flight_is_rate_times_residence() -> None:
    # L = λ × W = 20 req/s × 5 s = 100; if W drifts to 8 s, 160 at the same rate (+60%).
    assert in_flight(20, 5) == 100
    assert in_flight(20, 8) == 160
    assert in_flight(20, 8) / in_flight(20, 5) == pytest.approx(1.6)
    # Seed 004: 50 req/s × 8 s = 400 in flight, queued requests included.
    assert in_flight(50, 8.0) == 400


def test_concurrency_with_headroom() -> None:
    # Seed 001: 12 req/s × 4.5 s = 54.0 average concurrency; × 1.4 headroom = 75.6.
    assert in_flight(12.0, 4.5) == pytest.approx(54.0)
    assert concurrency_with_headroom(12.0, 4.5, 1.4) == pytest.approx(75.6)


def test_stage_by_stage_split() -> None:
    # Gateway 0.1 s, retrieval 0.4 s, order tool 2 s for 15% of requests, model 4.2 s.
    split = stage_in_flight(
        20,
        [
            Stage("gateway", 0.1),
            Stage("retrieval", 0.4),
            Stage("tools", 2.0, share=0.15),
            Stage("model", 4.2),
        ],
    )
    by_name = {s.name: s for s in split.stages}
    assert by_name["tools"].mean_seconds == pytest.approx(0.3)
    assert [round(s.in_flight, 9) for s in split.stages] == [2, 8, 6, 84]
    assert split.time_in_system_s == pytest.approx(5.0)
    assert split.in_flight == pytest.approx(100)
    assert split.in_flight == pytest.approx(in_flight(20, split.time_in_system_s))


def test_kv_check_of_seven_sequences() -> None:
    # 84 sequences in the model stage over 12 replicas is 7 each; at 400 MB a sequence
    # (1,600 tokens at 0.25 MB/token) they need 2.8 GB of the replica's KV pool.
    per_replica = in_flight(20, 4.2) / 12
    assert per_replica == pytest.approx(7)
    check = replica_kv_check(per_replica, 1600, 250_000, 8 * GB)
    assert check.demand_bytes == pytest.approx(2.8 * GB)
    assert check.fits
    assert check.fill == pytest.approx(0.35)


def test_friday_review_kv_pool_fill() -> None:
    # λ per replica = 8/12. Before: W = 5 s → 3.3 in flight × 1,600 tokens ≈ 5,300 tokens, 17%
    # of the 2-GPU replica's 8 GB pool (≈30,500 tokens at 0.25 MiB). After: W = 16 s → 10.7 ×
    # 2,800 ≈ 29,900 tokens, 98%.
    lam = 8 / 12
    before = replica_kv_check(in_flight(lam, 5), 1600, 0.25 * MIB, 8 * GB)
    after = replica_kv_check(in_flight(lam, 16), 2800, 0.25 * MIB, 8 * GB)
    assert before.sequences == pytest.approx(3.3, abs=0.05)
    assert before.tokens == pytest.approx(5300, abs=50)
    assert round(before.fill * 100) == 17
    assert after.sequences == pytest.approx(10.7, abs=0.05)
    assert after.tokens == pytest.approx(29_900, abs=50)
    assert round(after.fill * 100) == 98
    assert before.fits and after.fits
    # A third more sequences than that and the pool overflows: preemptions.
    assert not replica_kv_check(in_flight(lam, 21), 2800, 0.25 * MIB, 8 * GB).fits


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: in_flight(-1, 5), "arrival_rate"),
        (lambda: in_flight(20, float("inf")), "time_in_system_s"),
        (lambda: concurrency_with_headroom(12, 4.5, 0.5), "headroom"),
        (lambda: stage_in_flight(20, []), "stages"),
        (lambda: stage_in_flight(20, [Stage("tools", 2.0, share=1.5)]), "stages[tools].share"),
        (lambda: stage_in_flight(20, [Stage("model", -4.2)]), "stages[model].seconds"),
        (lambda: replica_kv_check(-7, 1600, 250_000, 8 * GB), "in_flight_sequences"),
        (lambda: replica_kv_check(7, 1600, 0, 8 * GB), "kv_bytes_per_token"),
        (lambda: replica_kv_check(7, 1600, 250_000, -1.0), "kv_pool_bytes"),
    ],
)
def test_invalid_arguments_are_named(call: object, argument: str) -> None:
    assert callable(call)
    with pytest.raises(PlannerInputError) as caught:
        call()
    assert caught.value.argument == argument
