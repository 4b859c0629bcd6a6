"""The independent verifier: hand-built plans for the shared examples, and one broken plan per
hard constraint of placement-v1."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from planner.errors import PlannerInputError
from planner.placement import parse_problem
from planner.placement.generator import generate_problem
from planner.placement.verify import cost_per_request, read_spec_problem, verify

DATA = Path(__file__).resolve().parent.parent / "data" / "placement"
SHAPE = "m/gpu80x1"


def load(name: str) -> dict[str, Any]:
    with (DATA / f"{name}.json").open() as f:
        data: dict[str, Any] = json.load(f)
    return data


def plan(
    replicas: dict[str, int],
    routing: list[tuple[str, str, float]],
    *,
    price: float = 2.0,
    unserved: dict[str, float] | None = None,
) -> dict[str, Any]:
    """A solution on the examples' one shape (1 GPU at ``price`` $/hour, multiplier 1)."""
    unserved = unserved or {}
    return {
        "format": "placement-solution/v1",
        "status": "optimal",
        "cost_per_hour": sum(replicas.values()) * price,
        "unserved_requests_per_s": sum(unserved.values()),
        "solve_seconds": 0.01,
        "gap": 0.0,
        "replicas": [{"zone": z, "shape": SHAPE, "replicas": n} for z, n in replicas.items()],
        "routing": [
            {"demand": d, "region": r, "shape": SHAPE, "requests_per_s": rate}
            for d, r, rate in routing
        ],
        "unserved": [{"demand": d, "requests_per_s": u} for d, u in unserved.items()],
        "binding": [],
    }


def fragmentation_plan(eu: tuple[int, int, int] = (4, 3, 3)) -> dict[str, Any]:
    """The seeds' 33 replicas: 10 in eu, 21 in us, 2 in ap (N+1 each)."""
    counts = dict(zip(["eu-a", "eu-b", "eu-c"], eu, strict=True))
    counts.update({"us-a": 7, "us-b": 7, "us-c": 7, "ap-a": 1, "ap-b": 1})
    return plan(
        counts, [("eu-users", "eu", 6.0), ("us-users", "us", 14.0), ("ap-users", "ap", 0.6)]
    )


GOOD = {
    "sizing-base": plan({"r1-a": 4, "r1-b": 4, "r1-c": 4}, [("assistant", "r1", 8.0)]),
    "sizing-burst": plan({"r1-a": 6, "r1-b": 6, "r1-c": 6}, [("assistant", "r1", 12.0)]),
    "sizing-zonal": plan({"r1-a": 9, "r1-b": 9, "r1-c": 9}, [("assistant", "r1", 12.0)]),
    "fragmentation": fragmentation_plan(),
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_known_good_plans_verify(name: str) -> None:
    problem = load(name)
    solution = GOOD[name]
    assert verify(problem, solution) == []
    total = sum(row["replicas"] for row in solution["replicas"])
    assert total == problem["expect_total_replicas"]


def test_one_replica_fewer_breaks_each_example() -> None:
    # The known answers are minimal: any plan with one replica fewer fails a constraint.
    for name, good in GOOD.items():
        problem = load(name)
        for index in range(len(good["replicas"])):
            broken = copy.deepcopy(good)
            broken["replicas"][index]["replicas"] -= 1
            broken["cost_per_hour"] -= 2.0
            assert verify(problem, broken), (name, broken["replicas"][index])


def _only(violations: list[str], prefix: str) -> None:
    assert violations, "expected a violation"
    assert all(v.startswith(prefix) or prefix in v for v in violations), violations


def test_capacity_violation() -> None:
    broken = plan({"r1-a": 4, "r1-b": 4, "r1-c": 3}, [("assistant", "r1", 8.0)])
    violations = verify(load("sizing-base"), broken)
    assert violations == ["capacity r1 m/gpu80x1: load 8 replica-s/s > 0.7 x 11 replicas = 7.7"]


def test_n_plus_one_violation() -> None:
    # 9 replicas carry eu's 6 requests/s at 0.7 (6.3) but not after losing one (5.6).
    violations = verify(load("fragmentation"), fragmentation_plan((3, 3, 3)))
    _only(violations, "N+1 eu m/gpu80x1")
    assert len(violations) == 1


def test_n_plus_one_applies_only_where_replicas_exist() -> None:
    # A region and shape with no replicas carries no load and needs no spare.
    problem = load("fragmentation")
    solution = fragmentation_plan()
    solution["replicas"].append({"zone": "ap-c", "shape": SHAPE, "replicas": 0})
    assert verify(problem, solution) == []
    # A "none" demand on a single replica needs no spare either.
    problem["demands"][2]["promise"] = "none"
    solution["replicas"] = [r for r in solution["replicas"] if r["zone"] != "ap-b"]
    solution["cost_per_hour"] -= 2.0
    assert verify(problem, solution) == []


def test_zone_loss_violation_names_the_zone() -> None:
    # 27 replicas, but losing the 10-replica zone leaves 17 × 0.7 = 11.9 < 12.
    broken = plan({"r1-a": 10, "r1-b": 9, "r1-c": 8}, [("assistant", "r1", 12.0)])
    violations = verify(load("sizing-zonal"), broken)
    assert len(violations) == 1
    assert violations[0].startswith("zone loss r1-a for m/gpu80x1")


def test_zone_promise_needs_two_zones() -> None:
    # Capacity and N+1 hold in one zone, but a zone promise cannot survive losing it.
    broken = plan({"r1-a": 27}, [("assistant", "r1", 12.0)])
    violations = verify(load("sizing-zonal"), broken)
    _only(violations, "zone loss r1-a")


def test_concurrency_violation() -> None:
    problem = load("sizing-base")
    problem["shapes"][0]["max_concurrency"] = 4
    problem["demands"][0]["residence_s"] = 6.0
    solution = GOOD["sizing-base"]
    # 8 requests/s × 6 s = 48 in flight = 4 × 12 slots: just fits.
    assert verify(problem, solution) == []
    problem["demands"][0]["residence_s"] = 7.0
    assert verify(problem, solution) == [
        "concurrency r1 m/gpu80x1: 56 requests in flight > 4 x 12 replicas = 48"
    ]


def test_inventory_violation() -> None:
    problem = load("sizing-base")
    problem["inventory"][0]["gpus"] = 3
    violations = verify(problem, GOOD["sizing-base"])
    assert violations == ["inventory r1-a gpu80: 4 GPUs planned > 3 available"]
    # No inventory row means no GPUs.
    del problem["inventory"][0]
    assert verify(problem, GOOD["sizing-base"]) == [
        "inventory r1-a gpu80: 4 GPUs planned > 0 available"
    ]


def _two_regions(max_spill_rtt_ms: float | None, allowed: list[str] | None) -> dict[str, Any]:
    problem = load("sizing-base")
    problem["regions"].append({"name": "r2", "geo": "us", "zones": ["r2-a", "r2-b"]})
    problem["inventory"] += [
        {"zone": "r2-a", "accelerator": "gpu80", "gpus": 100},
        {"zone": "r2-b", "accelerator": "gpu80", "gpus": 100},
    ]
    problem["rtt_ms"] = [{"from": "r2", "to": "r1", "ms": 90}]
    demand = problem["demands"][0]
    if max_spill_rtt_ms is not None:
        demand["max_spill_rtt_ms"] = max_spill_rtt_ms
    if allowed is not None:
        demand["allowed_regions"] = allowed
    return problem


SPILLED = plan({"r2-a": 6, "r2-b": 6}, [("assistant", "r2", 8.0)])


def test_spill_within_rtt_is_valid() -> None:
    assert verify(_two_regions(100.0, None), SPILLED) == []


def test_spill_without_permission_or_beyond_rtt() -> None:
    assert verify(_two_regions(None, None), SPILLED) == [
        "routing[0]: assistant spills from r1 to r2 (rtt 90 ms, no spill allowed)"
    ]
    assert verify(_two_regions(50.0, None), SPILLED) == [
        "routing[0]: assistant spills from r1 to r2 (rtt 90 ms, limit 50 ms)"
    ]
    unlinked = _two_regions(500.0, None)
    unlinked["rtt_ms"] = []
    assert verify(unlinked, SPILLED) == [
        "routing[0]: assistant spills from r1 to r2 (no rtt link, limit 500 ms)"
    ]


def test_routing_outside_allowed_regions() -> None:
    # Residency wins even where the rtt would allow the spill.
    assert verify(_two_regions(100.0, ["r1"]), SPILLED) == [
        "routing[0]: assistant is not allowed in region r2"
    ]


def test_routing_plus_unserved_must_equal_planned_rate() -> None:
    problem = load("sizing-base")
    short = plan({"r1-a": 4, "r1-b": 4, "r1-c": 4}, [("assistant", "r1", 7.0)])
    assert verify(problem, short) == [
        "demand assistant: routed 7 + unserved 0 != planned rate 8 requests/s"
    ]
    declared = plan(
        {"r1-a": 4, "r1-b": 4, "r1-c": 4}, [("assistant", "r1", 7.0)], unserved={"assistant": 1.0}
    )
    assert verify(problem, declared) == []
    # Burst counts: the planned rate of sizing-burst is 8 × 1.5 = 12.
    unburst = plan({"r1-a": 6, "r1-b": 6, "r1-c": 6}, [("assistant", "r1", 8.0)])
    _only(verify(load("sizing-burst"), unburst), "demand assistant")


def test_unserved_total_must_match_rows() -> None:
    solution = plan(
        {"r1-a": 4, "r1-b": 4, "r1-c": 4}, [("assistant", "r1", 6.0)], unserved={"assistant": 2.0}
    )
    solution["unserved_requests_per_s"] = 0.0
    assert verify(load("sizing-base"), solution) == [
        "unserved_requests_per_s 0 != sum of unserved rows 2"
    ]


def test_negative_rates_are_rejected() -> None:
    solution = plan(
        {"r1-a": 4, "r1-b": 4, "r1-c": 4},
        [("assistant", "r1", 9.0), ("assistant", "r1", -1.0)],
    )
    violations = verify(load("sizing-base"), solution)
    assert "routing[1]: requests_per_s is negative (-1)" in violations
    solution = plan(
        {"r1-a": 4, "r1-b": 4, "r1-c": 4}, [("assistant", "r1", 9.0)], unserved={"assistant": -1.0}
    )
    assert "unserved[0]: requests_per_s is negative (-1)" in verify(load("sizing-base"), solution)


def test_replicas_must_be_whole_and_non_negative() -> None:
    solution = plan({"r1-a": 4, "r1-b": 4, "r1-c": 4}, [("assistant", "r1", 8.0)])
    solution["replicas"][0]["replicas"] = 4.5
    assert "replicas[0]: replicas must be a whole number, got 4.5" in verify(
        load("sizing-base"), solution
    )
    solution["replicas"][0]["replicas"] = -4
    assert "replicas[0]: replicas is negative (-4)" in verify(load("sizing-base"), solution)
    # A whole number written as a float is still whole.
    solution["replicas"][0]["replicas"] = 4.0
    assert verify(load("sizing-base"), solution) == []


@pytest.mark.parametrize(
    ("table", "field", "value", "message"),
    [
        ("replicas", "zone", "r9-a", "replicas[0]: unknown zone 'r9-a'"),
        ("replicas", "shape", "m/gpu80x9", "replicas[0]: unknown shape 'm/gpu80x9'"),
        ("routing", "demand", "nobody", "routing[0]: unknown demand 'nobody'"),
        ("routing", "region", "r9", "routing[0]: unknown region 'r9'"),
        ("routing", "shape", "m/gpu80x9", "routing[0]: unknown shape 'm/gpu80x9'"),
    ],
)
def test_rows_must_name_known_things(table: str, field: str, value: str, message: str) -> None:
    solution = copy.deepcopy(GOOD["sizing-base"])
    solution[table][0][field] = value
    assert message in verify(load("sizing-base"), solution)


def test_duplicate_rows_are_ambiguous() -> None:
    solution = copy.deepcopy(GOOD["sizing-base"])
    solution["replicas"].append(dict(solution["replicas"][0]))
    assert "replicas[3]: duplicate replicas row for r1-a/m/gpu80x1" in verify(
        load("sizing-base"), solution
    )


def test_shape_must_serve_the_demands_model() -> None:
    problem = load("sizing-base")
    problem["shapes"].append(dict(problem["shapes"][0], name="other/gpu80x1", model="other"))
    solution = copy.deepcopy(GOOD["sizing-base"])
    solution["routing"][0]["shape"] = "other/gpu80x1"
    violations = verify(problem, solution)
    assert (
        "routing[0]: demand assistant is for model m, shape other/gpu80x1 serves other"
        in violations
    )


def test_cost_must_be_recomputed_exactly() -> None:
    problem = load("sizing-base")
    solution = copy.deepcopy(GOOD["sizing-base"])
    solution["cost_per_hour"] = 23.0
    assert verify(problem, solution) == ["cost_per_hour 23 != recomputed 24 $/hour"]
    # Prices and region multipliers both count.
    problem["regions"][0]["price_multiplier"] = 1.5
    problem["accelerators"][0]["price_per_gpu_hour"] = 3.0
    solution["cost_per_hour"] = 12 * 3.0 * 1.5
    assert verify(problem, solution) == []


def test_tolerance_is_relative_to_the_larger_side() -> None:
    problem = load("sizing-base")
    solution = copy.deepcopy(GOOD["sizing-base"])
    solution["cost_per_hour"] = 24.0 * (1 + 5e-7)
    solution["routing"][0]["requests_per_s"] = 8.0 * (1 - 5e-7)
    assert verify(problem, solution) == []
    solution["cost_per_hour"] = 24.0 * (1 + 5e-6)
    assert len(verify(problem, solution)) == 1


def test_status_and_validity_must_agree() -> None:
    problem = load("sizing-base")
    invalid_answer = {"format": "placement-solution/v1", "status": "invalid", "message": "x"}
    assert verify(problem, invalid_answer) == [
        "status is invalid for a valid problem (message 'x'); a valid problem always gets a plan"
    ]
    problem["demands"][0]["burst"] = 0.5
    assert verify(problem, invalid_answer) == []
    violations = verify(problem, GOOD["sizing-base"])
    assert len(violations) == 1 and "demands[0].burst" in violations[0]


def test_header_fields_are_checked() -> None:
    solution = copy.deepcopy(GOOD["sizing-base"])
    solution["format"] = "placement-solution/v0"
    solution["status"] = "done"
    solution["gap"] = -0.1
    violations = verify(load("sizing-base"), solution)
    assert len(violations) == 3


def test_reader_applies_the_spec_defaults() -> None:
    spec = read_spec_problem(load("fragmentation"))
    demand = spec.demands["eu-users"]
    assert demand.burst == 1.0 and demand.prefix_cache_hit_rate == 0.0
    assert demand.residence_s is None and demand.max_spill_rtt_ms is None
    assert demand.priority == 0
    assert spec.shapes[SHAPE].target_utilization == 0.7
    assert spec.shapes[SHAPE].max_concurrency is None
    assert spec.regions["eu"].price_multiplier == 1.0
    assert spec.rtt_ms("eu", "eu") == 0.0 and spec.rtt_ms("eu", "us") is None
    base = read_spec_problem(load("sizing-base"))
    assert base.demands["assistant"].allowed_regions == ("r1",)


@pytest.mark.parametrize(
    ("path", "value", "argument"),
    [
        (("demands", 0, "home_region"), "r9", "demands[0].home_region"),
        (("demands", 0, "allowed_regions"), [], "demands[0].allowed_regions"),
        (("demands", 0, "model"), "nope", "demands[0].model"),
        (("demands", 0, "requests_per_s"), -1.0, "demands[0].requests_per_s"),
        (("demands", 0, "prompt_tokens"), -5, "demands[0].prompt_tokens"),
        (("demands", 0, "burst"), 0.9, "demands[0].burst"),
        (("demands", 0, "prefix_cache_hit_rate"), 1.2, "demands[0].prefix_cache_hit_rate"),
        (("demands", 0, "residence_s"), -1.0, "demands[0].residence_s"),
        (("demands", 0, "promise"), "always", "demands[0].promise"),
        (("shapes", 0, "target_utilization"), 0.0, "shapes[0].target_utilization"),
        (("shapes", 0, "accelerator"), "tpu", "shapes[0].accelerator"),
        (("inventory", 0, "zone"), "r9-a", "inventory[0].zone"),
        (("inventory", 0, "gpus"), 2.5, "inventory[0].gpus"),
        (("target_utilization",), 1.5, "target_utilization"),
    ],
)
def test_reader_rejects_what_the_spec_calls_invalid(
    path: tuple[Any, ...], value: Any, argument: str
) -> None:
    problem = load("sizing-base")
    target: Any = problem
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(PlannerInputError) as caught:
        read_spec_problem(problem)
    assert caught.value.argument == argument


def test_reader_rejects_duplicates() -> None:
    problem = load("sizing-base")
    problem["inventory"].append(dict(problem["inventory"][0]))
    with pytest.raises(PlannerInputError) as caught:
        read_spec_problem(problem)
    assert caught.value.argument == "inventory[3]"
    problem = load("sizing-base")
    problem["regions"][0]["zones"].append("r1-a")
    with pytest.raises(PlannerInputError) as caught:
        read_spec_problem(problem)
    assert caught.value.argument == "regions[0].zones[3]"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("demands", 0, "priority"), 1.5),
        (("demands", 0, "max_spill_rtt_ms"), -5),
        (("demands", 0, "residence_s"), -1.0),
        (("shapes", 0, "gpus"), 0),
        (("shapes", 0, "decode_tokens_per_s"), 0),
        (("shapes", 0, "max_concurrency"), -1),
        (("regions", 0, "price_multiplier"), -1),
        (("accelerators", 0, "price_per_gpu_hour"), -1),
        (("inventory", 0, "gpus"), 2.5),
        (("demands", 0, "allowed_regions"), []),
    ],
)
def test_reader_and_solver_parser_name_the_same_field(path: tuple[Any, ...], value: Any) -> None:
    # Two independent readings of the contract must refuse the same input for the same reason.
    problem = load("sizing-base")
    target: Any = problem
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(PlannerInputError) as ours:
        read_spec_problem(problem)
    with pytest.raises(PlannerInputError) as theirs:
        parse_problem(problem)
    assert ours.value.argument == theirs.value.argument


def _same_reading(problem: dict[str, Any]) -> None:
    """The reader and the solver's parser read ``problem`` to the same values."""
    ours, theirs = read_spec_problem(problem), parse_problem(problem)
    assert list(ours.regions) == [r.name for r in theirs.regions]
    for region in theirs.regions:
        assert ours.regions[region.name].zones == region.zones
        assert ours.regions[region.name].price_multiplier == region.price_multiplier
    assert ours.inventory == {(r.zone, r.accelerator): r.gpus for r in theirs.inventory}
    for shape in theirs.shapes:
        mine = ours.shapes[shape.name]
        assert (mine.model, mine.accelerator, mine.gpus) == (
            shape.model,
            shape.accelerator,
            shape.gpus,
        )
        assert (mine.prefill_tokens_per_s, mine.decode_tokens_per_s) == (
            shape.prefill_tokens_per_s,
            shape.decode_tokens_per_s,
        )
        assert mine.max_concurrency == shape.max_concurrency
        assert mine.target_utilization == shape.target_utilization
    assert list(ours.demands) == [d.id for d in theirs.demands]
    for demand in theirs.demands:
        mine_d = ours.demands[demand.id]
        for field in (
            "tenant",
            "model",
            "home_region",
            "allowed_regions",
            "requests_per_s",
            "burst",
            "prompt_tokens",
            "output_tokens",
            "prefix_cache_hit_rate",
            "residence_s",
            "max_spill_rtt_ms",
            "promise",
            "priority",
        ):
            assert getattr(mine_d, field) == getattr(demand, field), (demand.id, field)
        for shape in (s for s in theirs.shapes if s.model == demand.model):
            assert cost_per_request(mine_d, ours.shapes[shape.name]) == pytest.approx(
                theirs.request_cost_s(demand, shape), rel=1e-12
            )
    for first in theirs.regions:
        for second in theirs.regions:
            assert ours.rtt_ms(first.name, second.name) == theirs.rtt(first.name, second.name)


def test_reader_reads_fractional_token_means_as_the_solver_does() -> None:
    # Telemetry means are never whole: 2855.29 prompt tokens is a valid demand (issue: the
    # emitted autoscalers were dropped because this reader demanded whole numbers).
    problem = load("sizing-zonal")
    problem["demands"][0].update(prompt_tokens=2855.29, output_tokens=187.6)
    problem["shapes"][0]["max_concurrency"] = 31.5
    _same_reading(problem)
    assert read_spec_problem(problem).demands["assistant"].prompt_tokens == 2855.29


def test_reader_accepts_every_optional_form_the_solver_accepts() -> None:
    problem = load("fragmentation")
    problem["regions"].append({"name": "empty", "zones": []})
    problem["rtt_ms"] = [
        {"from": "eu", "to": "us", "ms": 80.0},
        {"from": "us", "to": "eu", "ms": 80.0},  # the same pair again, agreeing
        {"from": "eu", "to": "eu", "ms": 0},
    ]
    for demand in problem["demands"]:
        demand.pop("tenant", None)
        demand["allowed_regions"] = ["eu", "us", "eu"]
    _same_reading(problem)
    no_demands = load("sizing-base")
    del no_demands["demands"]
    _same_reading(no_demands)


def test_reader_reads_the_generated_fleet_with_telemetry_means_as_the_solver_does() -> None:
    problem = generate_problem(
        tenants=40, regions=4, zones_per_region=3, gpu_types=3, models=3, seed=11
    )
    for i, demand in enumerate(problem["demands"]):
        demand["prompt_tokens"] = demand["prompt_tokens"] + 0.29 + i / 1000
        demand["output_tokens"] = demand["output_tokens"] + 0.61
    _same_reading(problem)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("rtt_ms",), [{"from": "r1", "to": "r1", "ms": 5}]),
        (("demands", 0, "output_tokens"), -0.5),
        (("demands", 0, "prompt_tokens"), float("nan")),
    ],
)
def test_reader_still_refuses_what_the_solver_refuses(path: tuple[Any, ...], value: Any) -> None:
    problem = load("sizing-base")
    target: Any = problem
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(PlannerInputError):
        read_spec_problem(problem)
    with pytest.raises(PlannerInputError):
        parse_problem(problem)
