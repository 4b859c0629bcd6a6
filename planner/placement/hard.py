"""Hard placement problems (format v1): many models and shapes per region, several GPU
classes able to serve every demand, and zone floors that bind.

The family of ``generate_problem`` (``planner.placement.generator``) gives each model a
clear cheapest GPU class and mostly large demands, so the integer floors (N+1, zone loss)
rarely decide the plan. ``generate_hard_problem`` builds fleets where they do:

- every model has two replica shapes on each of the GPU classes (the smallest tensor
  parallelism that leaves a useful KV pool, and twice that), and each shape's rates carry a
  random efficiency factor, so the classes' prices per unit of work overlap and which class
  (or mix) serves a region is a real choice;
- tenants send several models each, small to medium rates (a typical demand fills one to a
  handful of replicas), so rounding to whole replicas and the spare replica of N+1 matter;
- most demands are promised ``n+1`` or ``zone``, so the floors bind in most blocks;
- some regions lack a GPU class in one zone or altogether, so zones are not all alike;
- most demands may spill, some across geographies, so each model's cells form one part.

Inventory is not scarce: each region holds, on every class it has, twice the GPUs its home
demand would need on that class alone, split over the zones that have it. But flexible
demand pools in the cheapest regions, and several models pooled onto one class there
overfill it: the models' parts are coupled by inventory. The same arguments give the same
JSON-serialisable dict; ``HARD_SEEDS`` are the benchmark's instances
(``benchmarks/bench_placement_hard.py``).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

from planner.capacity.memory import GB, MIB, kv_pool_bytes, shape_fits
from planner.errors import PlannerInputError
from planner.placement.generator import AcceleratorClass, ModelClass
from planner.placement.problem import DEFAULT_TARGET_UTILIZATION, PROBLEM_FORMAT

HARD_SEEDS: tuple[int, ...] = (1, 2, 3, 4, 5)

RESERVE_BYTES_PER_GPU = 6 * GB
MIN_KV_SHARE = 0.10
TYPICAL_CONTEXT_TOKENS = 4096
MAX_CONCURRENCY_CAP = 256
PREFILL_MFU = 0.45
DECODE_BANDWIDTH_SHARE = 0.7
DECODE_BATCH_EFFICIENCY = 0.6
DECODE_BATCH_CAP = 64
TENSOR_PARALLEL_EFFICIENCY = 0.92
# Each shape's rates are scaled by a factor drawn from this range (kernels, batching, the
# serving stack's version): the classes' price per unit of work overlap.
SHAPE_EFFICIENCY = (0.8, 1.2)


# Prices roughly follow throughput, so no class dominates every model.
_ACCELERATORS: tuple[AcceleratorClass, ...] = (
    AcceleratorClass("h100", 80, 2.90, 989.0, 3.35),
    AcceleratorClass("h200", 141, 3.70, 989.0, 4.8),
    AcceleratorClass("b200", 192, 6.20, 2250.0, 8.0),
)
_MODELS: tuple[ModelClass, ...] = (
    ModelClass("llama-8b", 8.0, 8.0, 2.0, 0.125, 0.35),
    ModelClass("qwen-32b", 32.0, 32.0, 2.0, 0.25, 0.25),
    ModelClass("llama-70b", 70.0, 70.0, 2.0, 0.3125, 0.25),
    ModelClass("mixtral-8x22b", 141.0, 39.0, 2.0, 0.22, 0.15),
)
# Geographies and their regions' price levels; rtt across geographies is too far to spill.
_GEOS: tuple[tuple[str, float], ...] = (("us", 1.0), ("eu", 1.08), ("ap", 1.15))
_GEO_RTT_MS = {frozenset({"us", "eu"}): 85.0, frozenset({"us", "ap"}): 140.0}
_GEO_RTT_MS[frozenset({"eu", "ap"})] = 180.0
_SUFFIXES = ("east", "west", "central", "north", "south")

_PROMISES = ("none", "n+1", "zone")
_PROMISE_WEIGHTS = (0.15, 0.45, 0.40)
_MODELS_PER_TENANT = (1, 2, 3)
_MODELS_PER_TENANT_WEIGHTS = (0.45, 0.40, 0.15)
_BURSTS = (1.0, 1.0, 1.2, 1.5)
_SPILL_RTT_MS = (30.0, 100.0, 150.0, 200.0)
_SHAPE_UTILIZATIONS = (0.65, 0.75, 0.8)
PARETO_ALPHA = 1.3
MIN_DEMAND_RPS = 0.5
MAX_DEMAND_RPS = 40.0
RESIDENT_SHARE = 0.15
SPILL_SHARE = 0.7
INVENTORY_FACTOR = 2.0


def _shapes(
    rng: random.Random, model: ModelClass, accelerator: AcceleratorClass
) -> list[dict[str, Any]]:
    """Two shapes of ``model`` on ``accelerator``: the smallest useful GPU count and twice it."""
    weights = model.parameters_b * 1e9 * model.bytes_per_parameter
    memory = accelerator.memory_gb * GB
    kv_per_token = model.kv_mib_per_token * MIB
    smallest = next(
        gpus
        for gpus in (1, 2, 4, 8, 16)
        if shape_fits(memory, gpus, weights, RESERVE_BYTES_PER_GPU)
        and kv_pool_bytes(memory, gpus, weights, RESERVE_BYTES_PER_GPU)
        >= MIN_KV_SHARE * memory * gpus
    )
    rows: list[dict[str, Any]] = []
    for gpus in (smallest, 2 * smallest):
        pool = kv_pool_bytes(memory, gpus, weights, RESERVE_BYTES_PER_GPU)
        parallel = TENSOR_PARALLEL_EFFICIENCY ** math.log2(gpus)
        efficiency = rng.uniform(*SHAPE_EFFICIENCY)
        prefill = (gpus * accelerator.dense_tflops * 1e12 * PREFILL_MFU * parallel) / (
            2.0 * model.active_parameters_b * 1e9
        )
        step_s = weights / (gpus * accelerator.bandwidth_tb_s * 1e12 * DECODE_BANDWIDTH_SHARE)
        step_s /= parallel
        max_concurrency = max(
            1, min(MAX_CONCURRENCY_CAP, int(pool // (kv_per_token * TYPICAL_CONTEXT_TOKENS)))
        )
        decode = min(max_concurrency, DECODE_BATCH_CAP) / step_s * DECODE_BATCH_EFFICIENCY
        row: dict[str, Any] = {
            "name": f"{model.name}/{accelerator.name}x{gpus}",
            "model": model.name,
            "accelerator": accelerator.name,
            "gpus": gpus,
            "prefill_tokens_per_s": float(max(10, round(prefill * efficiency, -1))),
            "decode_tokens_per_s": float(max(1, round(decode * efficiency))),
            "max_concurrency": max_concurrency,
        }
        if rng.random() < 0.25:
            row["target_utilization"] = rng.choice(_SHAPE_UTILIZATIONS)
        rows.append(row)
    return rows


def _work(demand: dict[str, Any], shape: dict[str, Any], target: float) -> float:
    """Replicas of ``shape`` the demand's planned rate fills at the shape's target."""
    per_request = (
        demand["prompt_tokens"]
        * (1.0 - demand.get("prefix_cache_hit_rate", 0.0))
        / (shape["prefill_tokens_per_s"])
        + demand["output_tokens"] / shape["decode_tokens_per_s"]
    )
    rate = demand["requests_per_s"] * demand["burst"]
    return float(rate * per_request / shape.get("target_utilization", target))


def generate_hard_problem(
    *,
    seed: int,
    tenants: int = 100,
    regions: int = 8,
    zones_per_region: int = 3,
    target_utilization: float = DEFAULT_TARGET_UTILIZATION,
) -> dict[str, Any]:
    """A hard placement problem (see the module doc); 3 GPU classes, 4 models, 24 shapes.

    At the defaults: about 170 demands and 60 inventory rows.
    """
    for name, value, least in (
        ("tenants", tenants, 1),
        ("regions", regions, 1),
        ("zones_per_region", zones_per_region, 2),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise PlannerInputError(name, f"must be a whole number of at least {least}")
    if not (0.0 < target_utilization <= 1.0):
        raise PlannerInputError("target_utilization", "must be within (0, 1]")
    rng = random.Random(seed)

    # Regions, round-robin over the geographies; zones per region; which classes each has.
    region_rows: list[dict[str, Any]] = []
    geo_of: dict[str, str] = {}
    by_geo: dict[str, list[str]] = defaultdict(list)
    zones_with: dict[tuple[str, str], list[str]] = {}
    for index in range(regions):
        geo, level = _GEOS[index % len(_GEOS)]
        ordinal = len(by_geo[geo])
        name = f"{geo}-{_SUFFIXES[ordinal % len(_SUFFIXES)]}-{ordinal // len(_SUFFIXES) + 1}"
        zones = [f"{name}-{chr(ord('a') + z)}" for z in range(zones_per_region)]
        region_rows.append(
            {
                "name": name,
                "geo": geo,
                "zones": zones,
                "price_multiplier": round(level * rng.uniform(0.96, 1.06), 3),
            }
        )
        geo_of[name] = geo
        by_geo[geo].append(name)
        for position, accelerator in enumerate(_ACCELERATORS):
            draw = rng.random()
            if position == 0 or draw < 0.6:
                zones_with[(name, accelerator.name)] = list(zones)
            elif draw < 0.85:
                missing = rng.randrange(zones_per_region)
                zones_with[(name, accelerator.name)] = [
                    z for i, z in enumerate(zones) if i != missing
                ]

    names = [row["name"] for row in region_rows]
    rtt_rows: list[dict[str, Any]] = []
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            if geo_of[first] == geo_of[second]:
                ms = rng.uniform(8.0, 30.0)
            else:
                ms = _GEO_RTT_MS[frozenset({geo_of[first], geo_of[second]})] * rng.uniform(1, 1.2)
            rtt_rows.append({"from": first, "to": second, "ms": round(ms, 1)})

    shape_rows: list[dict[str, Any]] = []
    shapes_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for model in _MODELS:
        for accelerator in _ACCELERATORS:
            for shape in _shapes(rng, model, accelerator):
                shape_rows.append(shape)
                shapes_of[model.name].append(shape)

    demand_rows: list[dict[str, Any]] = []
    width = len(str(tenants))
    popularity = tuple(m.popularity for m in _MODELS)
    for index in range(tenants):
        tenant = f"tenant-{index + 1:0{width}d}"
        home = rng.choice(names)
        resident = rng.random() < RESIDENT_SHARE
        spill = rng.random() < SPILL_SHARE
        count = rng.choices(_MODELS_PER_TENANT, weights=_MODELS_PER_TENANT_WEIGHTS)[0]
        chosen: list[ModelClass] = []
        while len(chosen) < count:
            model = rng.choices(_MODELS, weights=popularity)[0]
            if model not in chosen:
                chosen.append(model)
        promise = rng.choices(_PROMISES, weights=_PROMISE_WEIGHTS)[0]
        priority = rng.choice((0, 1, 1, 2))
        for model in chosen:
            rate = min(MAX_DEMAND_RPS, MIN_DEMAND_RPS * rng.paretovariate(PARETO_ALPHA))
            prompt = int(min(16000, max(50, rng.lognormvariate(math.log(1000), 0.6))))
            output = int(min(2000, max(5, rng.lognormvariate(math.log(150), 0.5))))
            demand: dict[str, Any] = {
                "id": f"{tenant}/{model.name}",
                "tenant": tenant,
                "model": model.name,
                "home_region": home,
                "requests_per_s": round(rate, 3),
                "burst": rng.choice(_BURSTS),
                "prompt_tokens": prompt,
                "output_tokens": output,
                # A tenant's demands mostly share its promise; some ask more of one model.
                "promise": promise
                if rng.random() < 0.8
                else rng.choices(_PROMISES, _PROMISE_WEIGHTS)[0],
                "priority": priority,
            }
            if rng.random() < 0.7:
                demand["prefix_cache_hit_rate"] = round(rng.uniform(0.1, 0.6), 2)
            if rng.random() < 0.8:
                demand["residence_s"] = round(0.5 + prompt / 8000.0 + output / 35.0, 2)
            if resident:
                demand["allowed_regions"] = list(by_geo[geo_of[home]])
            if spill:
                demand["max_spill_rtt_ms"] = rng.choice(_SPILL_RTT_MS)
            demand_rows.append(demand)

    # Per region and class: twice the home need (the class's two shapes averaged), over its
    # zones.
    need: dict[tuple[str, str], float] = defaultdict(float)
    for demand in demand_rows:
        for shape in shapes_of[demand["model"]]:
            key = (demand["home_region"], shape["accelerator"])
            need[key] += _work(demand, shape, target_utilization) * shape["gpus"] / 2.0
    inventory_rows: list[dict[str, Any]] = []
    for row in region_rows:
        for accelerator in _ACCELERATORS:
            zones = zones_with.get((row["name"], accelerator.name), [])
            if not zones:
                continue
            gpus = math.ceil(INVENTORY_FACTOR * need[(row["name"], accelerator.name)] / len(zones))
            for zone in zones:
                inventory_rows.append({"zone": zone, "accelerator": accelerator.name, "gpus": gpus})

    return {
        "format": PROBLEM_FORMAT,
        "target_utilization": target_utilization,
        "regions": region_rows,
        "accelerators": [
            {"name": a.name, "memory_gb": a.memory_gb, "price_per_gpu_hour": a.price_per_gpu_hour}
            for a in _ACCELERATORS
        ],
        "inventory": inventory_rows,
        "shapes": shape_rows,
        "rtt_ms": rtt_rows,
        "demands": demand_rows,
    }
