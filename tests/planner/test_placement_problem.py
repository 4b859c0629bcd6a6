"""parse_problem: the spec's defaults, and every "Invalid" rule refused with the field named."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from planner.errors import PlannerInputError
from planner.placement import ProblemInvalid, parse_problem

DATA = Path(__file__).resolve().parent.parent / "data" / "placement"


def load(name: str) -> dict[str, Any]:
    with (DATA / f"{name}.json").open() as f:
        data: dict[str, Any] = json.load(f)
    return data


def spec_example() -> dict[str, Any]:
    """The problem printed in placement-v1, with a second region and an rtt row."""
    return {
        "format": "placement-problem/v1",
        "target_utilization": 0.7,
        "regions": [
            {
                "name": "eu-west",
                "geo": "eu",
                "zones": ["eu-west-a", "eu-west-b", "eu-west-c"],
                "price_multiplier": 1.0,
            },
            {"name": "us-east", "geo": "us", "zones": ["us-east-a", "us-east-b"]},
        ],
        "accelerators": [{"name": "h200", "memory_gb": 141, "price_per_gpu_hour": 3.9}],
        "inventory": [
            {"zone": "eu-west-a", "accelerator": "h200", "gpus": 64},
            {"zone": "us-east-a", "accelerator": "h200", "gpus": 16},
        ],
        "shapes": [
            {
                "name": "llama-70b/h200x2",
                "model": "llama-70b",
                "accelerator": "h200",
                "gpus": 2,
                "prefill_tokens_per_s": 4000,
                "decode_tokens_per_s": 160,
                "max_concurrency": 32,
                "target_utilization": 0.7,
            }
        ],
        "rtt_ms": [{"from": "eu-west", "to": "us-east", "ms": 90}],
        "demands": [
            {
                "id": "acme/support",
                "tenant": "acme",
                "model": "llama-70b",
                "home_region": "eu-west",
                "allowed_regions": ["eu-west"],
                "requests_per_s": 8.0,
                "burst": 1.5,
                "prompt_tokens": 1500,
                "output_tokens": 100,
                "prefix_cache_hit_rate": 0.35,
                "residence_s": 5.0,
                "max_spill_rtt_ms": 150,
                "promise": "zone",
                "priority": 0,
            },
            {
                "id": "globex/chat",
                "tenant": "globex",
                "model": "llama-70b",
                "home_region": "us-east",
                "requests_per_s": 2.0,
                "prompt_tokens": 1000,
                "output_tokens": 80,
                "max_spill_rtt_ms": 100,
            },
        ],
        "previous": [{"zone": "eu-west-a", "shape": "llama-70b/h200x2", "replicas": 9}],
    }


def test_spec_example_parses_with_its_values() -> None:
    p = parse_problem(spec_example())
    acme = p.demands[0]
    assert acme.planned_requests_per_s == pytest.approx(12.0)
    shape = p.shapes[0]
    # The seeds' cost model: 1500 × 0.65 / 4000 + 100 / 160 = 0.24375 + 0.625 replica-seconds.
    assert p.request_cost_s(acme, shape) == pytest.approx(0.86875)
    assert p.inventory_gpus("eu-west-a", "h200") == 64
    assert p.inventory_gpus("eu-west-b", "h200") == 0  # no row: 0 GPUs
    assert p.rtt("us-east", "eu-west") == 90  # both directions
    assert p.rtt("eu-west", "eu-west") == 0
    assert p.region_of_zone("us-east-b") == "us-east"
    assert p.previous is not None and p.previous[0].replicas == 9
    # A region, zone and shape price: 2 GPUs × $3.9 × 1.0.
    assert p.replica_price_per_hour("eu-west-a", shape) == pytest.approx(7.8)


def test_defaults_are_the_spec_defaults() -> None:
    data = spec_example()
    del data["target_utilization"]
    del data["shapes"][0]["target_utilization"]
    del data["regions"][0]["price_multiplier"]
    del data["previous"]
    p = parse_problem(data)
    assert p.target_utilization == 0.7
    assert p.shapes[0].target_utilization == 0.7
    assert p.regions[0].price_multiplier == 1.0
    assert p.previous is None
    globex = p.demands[1]
    assert globex.allowed_regions == ("eu-west", "us-east")  # absent: every region
    assert globex.burst == 1.0
    assert globex.prefix_cache_hit_rate == 0.0
    assert globex.residence_s is None
    assert globex.promise == "none"
    assert globex.priority == 0


def test_shape_utilization_defaults_to_the_problems() -> None:
    data = spec_example()
    data["target_utilization"] = 0.6
    del data["shapes"][0]["target_utilization"]
    assert parse_problem(data).shapes[0].target_utilization == 0.6


def test_serving_regions_follow_residency_and_spill_rtt() -> None:
    data = spec_example()
    p = parse_problem(data)
    assert p.serving_regions(p.demands[0]) == ("eu-west",)  # residency: eu only
    # globex may use every region; eu-west is 90 ms from home, within its 100 ms spill.
    assert p.serving_regions(p.demands[1]) == ("eu-west", "us-east")
    data["demands"][1]["max_spill_rtt_ms"] = 80
    p = parse_problem(data)
    assert p.serving_regions(p.demands[1]) == ("us-east",)
    del data["demands"][1]["max_spill_rtt_ms"]  # absent: no spill outside home
    p = parse_problem(data)
    assert p.serving_regions(p.demands[1]) == ("us-east",)


def test_missing_rtt_pair_means_no_traffic() -> None:
    data = spec_example()
    data["rtt_ms"] = []
    data["demands"][1]["max_spill_rtt_ms"] = 1000
    p = parse_problem(data)
    assert p.rtt("eu-west", "us-east") is None
    assert p.serving_regions(p.demands[1]) == ("us-east",)


@pytest.mark.parametrize("name", ["sizing-base", "sizing-burst", "sizing-zonal", "fragmentation"])
def test_shared_examples_parse(name: str) -> None:
    p = parse_problem(load(name))
    assert p.demands and p.shapes


def test_integral_floats_count_as_whole_numbers() -> None:
    data = spec_example()
    data["inventory"][0]["gpus"] = 64.0
    assert parse_problem(data).inventory[0].gpus == 64


Mutation = Callable[[dict[str, Any]], None]


def _set(path: tuple[Any, ...], value: Any) -> Mutation:
    def mutate(d: dict[str, Any]) -> None:
        target: Any = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(path: tuple[Any, ...]) -> Mutation:
    def mutate(d: dict[str, Any]) -> None:
        target: Any = d
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


def _append(key: str, row: dict[str, Any]) -> Mutation:
    def mutate(d: dict[str, Any]) -> None:
        d[key].append(row)

    return mutate


INVALID: list[tuple[str, Mutation, str, str]] = [
    # (case, mutation, field named, a word the message carries)
    ("unknown zone", _set(("inventory", 1, "zone"), "eu-west-z"), "inventory[1].zone", "zone"),
    (
        "unknown accelerator",
        _set(("shapes", 0, "accelerator"), "b200"),
        "shapes[0].accelerator",
        "accelerator",
    ),
    ("unknown shape", _set(("previous", 0, "shape"), "nope/x1"), "previous[0].shape", "shape"),
    ("unknown model", _set(("demands", 1, "model"), "gpt-9"), "demands[1].model", "model"),
    (
        "unknown home",
        _set(("demands", 0, "home_region"), "mars"),
        "demands[0].home_region",
        "region",
    ),
    (
        "allowed names unknown region",
        _set(("demands", 0, "allowed_regions"), ["eu-west", "moon"]),
        "demands[0].allowed_regions",
        "moon",
    ),
    (
        "empty residency list",
        _set(("demands", 0, "allowed_regions"), []),
        "demands[0].allowed_regions",
        "no region",
    ),
    ("unknown rtt region", _set(("rtt_ms", 0, "to"), "mars"), "rtt_ms[0].to", "region"),
    (
        "negative rate",
        _set(("demands", 1, "requests_per_s"), -1),
        "demands[1].requests_per_s",
        "zero",
    ),
    (
        "negative prompt",
        _set(("demands", 1, "prompt_tokens"), -5),
        "demands[1].prompt_tokens",
        "zero",
    ),
    (
        "negative output",
        _set(("demands", 0, "output_tokens"), -1),
        "demands[0].output_tokens",
        "zero",
    ),
    ("negative gpus", _set(("inventory", 0, "gpus"), -64), "inventory[0].gpus", "at least"),
    ("fractional gpus", _set(("inventory", 0, "gpus"), 6.5), "inventory[0].gpus", "whole"),
    ("shape gpus zero", _set(("shapes", 0, "gpus"), 0), "shapes[0].gpus", "at least 1"),
    (
        "negative replicas",
        _set(("previous", 0, "replicas"), -1),
        "previous[0].replicas",
        "at least",
    ),
    (
        "negative price",
        _set(("accelerators", 0, "price_per_gpu_hour"), -3.9),
        "accelerators[0].price_per_gpu_hour",
        "zero",
    ),
    (
        "zero decode rate",
        _set(("shapes", 0, "decode_tokens_per_s"), 0),
        "shapes[0].decode_tokens_per_s",
        "positive",
    ),
    ("negative rtt", _set(("rtt_ms", 0, "ms"), -1), "rtt_ms[0].ms", "zero"),
    (
        "hit rate above 1",
        _set(("demands", 0, "prefix_cache_hit_rate"), 1.2),
        "demands[0].prefix_cache_hit_rate",
        "[0, 1]",
    ),
    (
        "hit rate below 0",
        _set(("demands", 0, "prefix_cache_hit_rate"), -0.1),
        "demands[0].prefix_cache_hit_rate",
        "[0, 1]",
    ),
    ("burst below 1", _set(("demands", 0, "burst"), 0.9), "demands[0].burst", "at least 1"),
    ("utilisation zero", _set(("target_utilization",), 0), "target_utilization", "(0, 1]"),
    (
        "utilisation above 1",
        _set(("shapes", 0, "target_utilization"), 1.1),
        "shapes[0].target_utilization",
        "(0, 1]",
    ),
    ("bad promise", _set(("demands", 0, "promise"), "region"), "demands[0].promise", "n+1"),
    ("fractional priority", _set(("demands", 0, "priority"), 0.5), "demands[0].priority", "whole"),
    (
        "missing prompt tokens",
        _delete(("demands", 0, "prompt_tokens")),
        "demands[0].prompt_tokens",
        "required",
    ),
    ("missing gpus", _delete(("shapes", 0, "gpus")), "shapes[0].gpus", "required"),
    (
        "not a number",
        _set(("demands", 0, "requests_per_s"), "8"),
        "demands[0].requests_per_s",
        "number",
    ),
    ("boolean is no number", _set(("inventory", 0, "gpus"), True), "inventory[0].gpus", "number"),
    ("nan", _set(("demands", 0, "burst"), float("nan")), "demands[0].burst", "finite"),
    ("regions not a list", _set(("regions",), {"name": "x"}), "regions", "list"),
    ("wrong format", _set(("format",), "placement-problem/v2"), "format", "v1"),
    (
        "duplicate region name",
        _append("regions", {"name": "eu-west", "zones": ["x-a"]}),
        "regions[2].name",
        "duplicate",
    ),
    (
        "duplicate zone name",
        _append("regions", {"name": "ap", "zones": ["ap-a", "eu-west-b"]}),
        "regions[2].zones[1]",
        "duplicate",
    ),
    (
        "duplicate shape name",
        _append(
            "shapes",
            {
                "name": "llama-70b/h200x2",
                "model": "llama-70b",
                "accelerator": "h200",
                "gpus": 2,
                "prefill_tokens_per_s": 1,
                "decode_tokens_per_s": 1,
            },
        ),
        "shapes[1].name",
        "duplicate",
    ),
    (
        "duplicate accelerator",
        _append("accelerators", {"name": "h200", "price_per_gpu_hour": 1}),
        "accelerators[1].name",
        "duplicate",
    ),
    (
        "duplicate demand id",
        _append(
            "demands",
            {
                "id": "acme/support",
                "model": "llama-70b",
                "home_region": "eu-west",
                "requests_per_s": 1,
                "prompt_tokens": 1,
                "output_tokens": 1,
            },
        ),
        "demands[2].id",
        "duplicate",
    ),
    (
        "duplicate inventory row",
        _append("inventory", {"zone": "eu-west-a", "accelerator": "h200", "gpus": 1}),
        "inventory[2]",
        "duplicate",
    ),
    (
        "duplicate previous row",
        _append("previous", {"zone": "eu-west-a", "shape": "llama-70b/h200x2", "replicas": 1}),
        "previous[1]",
        "duplicate",
    ),
    (
        "conflicting rtt rows",
        _append("rtt_ms", {"from": "us-east", "to": "eu-west", "ms": 95}),
        "rtt_ms[1]",
        "duplicate",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "field", "word"),
    [pytest.param(m, f, w, id=case) for case, m, f, w in INVALID],
)
def test_invalid_problem_is_refused_with_the_field_named(
    mutate: Mutation, field: str, word: str
) -> None:
    data = spec_example()
    mutate(data)
    with pytest.raises(ProblemInvalid) as info:
        parse_problem(data)
    assert info.value.argument == field
    assert word in info.value.message
    assert isinstance(info.value, PlannerInputError)


def test_agreeing_repeated_rtt_row_is_accepted() -> None:
    data = spec_example()
    data["rtt_ms"].append({"from": "us-east", "to": "eu-west", "ms": 90})
    assert parse_problem(data).rtt("eu-west", "us-east") == 90


def test_problem_must_be_an_object() -> None:
    with pytest.raises(ProblemInvalid) as info:
        parse_problem([1, 2])
    assert info.value.argument == "problem"


def test_parsing_does_not_touch_the_input() -> None:
    data = spec_example()
    before = copy.deepcopy(data)
    parse_problem(data)
    assert data == before


def test_unlisted_fields_are_ignored() -> None:
    data = load("sizing-zonal")
    assert "expect_total_replicas" in data
    assert parse_problem(data).demands[0].promise == "zone"


def _both(*mutations: Mutation) -> Mutation:
    def mutate(d: dict[str, Any]) -> None:
        for m in mutations:
            m(d)

    return mutate


# Figures each finite, whose products the solver forms are not: (case, mutation, field).
OVERFLOWING: list[tuple[str, Mutation, str]] = [
    (
        "rate × burst",
        _both(_set(("demands", 0, "requests_per_s"), 1e200), _set(("demands", 0, "burst"), 1e200)),
        "demands[0].burst",
    ),
    (
        "load on a shape",
        _both(
            _set(("demands", 1, "prompt_tokens"), 1e300),
            _set(("shapes", 0, "prefill_tokens_per_s"), 1e-100),
        ),
        "demands[1]",
    ),
    (
        "all demands together",
        # Loads of 1.49e308 and 1.61e308 replicas: each finite, their sum is not.
        _both(
            _set(("demands", 0, "requests_per_s"), 8e307),
            _set(("demands", 1, "requests_per_s"), 1.5e308),
        ),
        "demands",
    ),
    ("replica price", _set(("accelerators", 0, "price_per_gpu_hour"), 1e308), "shapes[0].gpus"),
]


@pytest.mark.parametrize(
    ("mutate", "field"), [pytest.param(m, f, id=case) for case, m, f in OVERFLOWING]
)
def test_finite_figures_whose_products_overflow_are_refused_with_the_field_named(
    mutate: Mutation, field: str
) -> None:
    data = spec_example()
    mutate(data)
    with pytest.raises(ProblemInvalid) as info:
        parse_problem(data)
    assert info.value.argument == field
    assert "not a finite number" in info.value.message
