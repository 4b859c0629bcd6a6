"""The diff of a new plan against the active one, from the two plans' documents."""

from __future__ import annotations

from typing import Any

from controlplane.plans.diff import PlanDocuments, diff_lines, plan_diff, serves_less

# A valid placement problem (a plan's stored problem always is): only the names, GPUs,
# rates, bursts, tenants and priorities matter to the diff.
_DEMAND = {"model": "m", "home_region": "eu-west", "prompt_tokens": 0, "output_tokens": 100}
PROBLEM: dict[str, Any] = {
    "format": "placement-problem/v1",
    "regions": [
        {"name": "eu-west", "geo": "eu", "zones": ["eu-west-a", "eu-west-b"]},
        {"name": "us-east", "geo": "us", "zones": ["us-east-a"]},
    ],
    "accelerators": [{"name": "g", "price_per_gpu_hour": 2.0}],
    "shapes": [
        {
            "name": f"m/x{gpus}",
            "model": "m",
            "accelerator": "g",
            "gpus": gpus,
            "prefill_tokens_per_s": 4000,
            "decode_tokens_per_s": 100,
        }
        for gpus in (2, 4)
    ],
    "demands": [
        {"id": "acme/m", "tenant": "acme", "requests_per_s": 4.0, "burst": 1.5, "priority": 0}
        | _DEMAND,
        {"id": "beta/m", "tenant": "beta", "requests_per_s": 2.0, "priority": 2} | _DEMAND,
    ],
}


def solution(
    replicas: dict[tuple[str, str], int],
    routing: list[tuple[str, str, str, float]],
    unserved: dict[str, float] | None = None,
    cost: float = 0.0,
) -> dict[str, Any]:
    return {
        "format": "placement-solution/v1",
        "status": "optimal",
        "cost_per_hour": cost,
        "replicas": [{"zone": z, "shape": s, "replicas": n} for (z, s), n in replicas.items()],
        "routing": [
            {"demand": d, "region": r, "shape": s, "requests_per_s": x} for d, r, s, x in routing
        ],
        "unserved": [
            {"demand": d, "tenant": d.split("/")[0], "priority": 0, "requests_per_s": u}
            for d, u in (unserved or {}).items()
        ],
    }


BEFORE = solution(
    {("eu-west-a", "m/x2"): 3, ("eu-west-b", "m/x2"): 3, ("us-east-a", "m/x4"): 1},
    [("acme/m", "eu-west", "m/x2", 6.0), ("beta/m", "us-east", "m/x4", 2.0)],
    cost=100.0,
)


def test_no_active_plan_makes_every_replica_new() -> None:
    diff = plan_diff(before=None, after=PlanDocuments.read(PROBLEM, BEFORE))

    assert diff["against_version"] is None
    assert diff["replicas_added"] == 7 and diff["replicas_removed"] == 0
    assert diff["gpus_added"] == 3 * 2 + 3 * 2 + 4
    assert diff["cost_per_hour"] == {"before": 0.0, "after": 100.0, "change": 100.0}
    assert diff["demands_added"] == ["acme/m", "beta/m"]
    assert not serves_less(diff)
    assert diff_lines(diff) == ["No active plan to compare with: every replica is new."]


def test_replica_changes_cost_and_moved_routing() -> None:
    after = solution(
        {("eu-west-a", "m/x2"): 4, ("eu-west-b", "m/x2"): 3, ("us-east-a", "m/x2"): 1},
        [
            ("acme/m", "eu-west", "m/x2", 6.0),
            ("beta/m", "eu-west", "m/x2", 1.0),
            ("beta/m", "us-east", "m/x2", 1.0),
        ],
        cost=110.5,
    )

    diff = plan_diff(
        before=PlanDocuments.read(PROBLEM, BEFORE),
        after=PlanDocuments.read(PROBLEM, after),
        before_version=4,
    )

    assert diff["against_version"] == 4
    assert diff["replicas"] == [
        {
            "region": "eu-west",
            "zone": "eu-west-a",
            "shape": "m/x2",
            "before": 3,
            "after": 4,
            "change": 1,
        },
        {
            "region": "us-east",
            "zone": "us-east-a",
            "shape": "m/x2",
            "before": 0,
            "after": 1,
            "change": 1,
        },
        {
            "region": "us-east",
            "zone": "us-east-a",
            "shape": "m/x4",
            "before": 1,
            "after": 0,
            "change": -1,
        },
    ]
    assert (diff["replicas_added"], diff["replicas_removed"]) == (2, 1)
    assert (diff["gpus_added"], diff["gpus_removed"]) == (4, 4)
    assert diff["cost_per_hour"]["change"] == 10.5
    assert [row["demand"] for row in diff["routing_changed"]] == ["beta/m"]
    moved = diff["routing_changed"][0]
    assert moved["before"] == [{"region": "us-east", "shape": "m/x4", "share": 1.0}]
    assert moved["after"] == [
        {"region": "eu-west", "shape": "m/x2", "share": 0.5},
        {"region": "us-east", "shape": "m/x2", "share": 0.5},
    ]
    assert diff["newly_unserved"] == [] and not serves_less(diff)
    lines = diff_lines(diff)
    assert lines[0] == (
        "Against active plan v4: cost 100.00 → 110.50 $/h (+10.50); replicas +2 / -1 "
        "(GPUs +4 / -4)."
    )
    assert "Routing changed for 1 demands: beta/m." in lines


def test_a_demand_that_only_grew_has_not_moved() -> None:
    grown = {**PROBLEM, "demands": [{**PROBLEM["demands"][0], "requests_per_s": 8.0}]}
    after = solution({("eu-west-a", "m/x2"): 6}, [("acme/m", "eu-west", "m/x2", 12.0)])

    diff = plan_diff(
        before=PlanDocuments.read(PROBLEM, BEFORE),
        after=PlanDocuments.read(grown, after),
        before_version=1,
    )

    assert diff["routing_changed"] == []
    assert diff["demands_removed"] == ["beta/m"]


def test_newly_unserved_demand_needs_approval() -> None:
    short = solution(
        {("eu-west-a", "m/x2"): 2},
        [("acme/m", "eu-west", "m/x2", 4.0)],
        unserved={"acme/m": 2.0, "beta/m": 2.0},
    )
    diff = plan_diff(
        before=PlanDocuments.read(PROBLEM, BEFORE),
        after=PlanDocuments.read(PROBLEM, short),
        before_version=2,
    )

    assert [
        (r["demand"], r["priority"], r["before"], r["after"]) for r in diff["newly_unserved"]
    ] == [
        ("acme/m", 0, 0.0, 2.0),
        ("beta/m", 2, 0.0, 2.0),
    ]
    assert diff["unserved_requests_per_s"] == {"before": 0.0, "after": 4.0, "change": 4.0}
    assert serves_less(diff)
    assert "Newly unserved: acme/m (priority 0) 0 → 2 req/s." in diff_lines(diff)


def test_less_unserved_than_before_is_not_newly_unserved() -> None:
    before = solution({}, [], unserved={"acme/m": 6.0, "beta/m": 2.0})
    after = solution({}, [], unserved={"acme/m": 3.0, "beta/m": 2.0 + 1e-9})

    diff = plan_diff(
        before=PlanDocuments.read(PROBLEM, before),
        after=PlanDocuments.read(PROBLEM, after),
        before_version=7,
    )

    assert diff["newly_unserved"] == []
    assert not serves_less(diff)
