"""Random but realistic placement problems (format v1) for tests and benchmarks.

``generate_problem`` builds a fleet the way an operator would describe one: geographies
(us, eu, ap, ...) with several regions each and three-ish zones per region, round-trip
times that are low inside a geography and high across, a catalogue of GPU classes with
list prices, a model mix whose replica shapes are derived from memory fit and throughput
arithmetic, and tenants whose request rates follow a heavy-tailed (Pareto) law. The same
arguments and seed always give the same JSON-serialisable problem dict.

Units follow the contract: requests/s, tokens, tokens/s, seconds, milliseconds, GB and
dollars per GPU-hour.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.capacity.memory import GB, MIB, kv_pool_bytes, shape_fits
from planner.errors import PlannerInputError
from planner.placement.problem import DEFAULT_TARGET_UTILIZATION, PROBLEM_FORMAT

# Runtime and activation reserve per GPU, as in the seeds' 140 GB / 80 GB example.
RESERVE_BYTES_PER_GPU = 6 * GB
# A shape is only offered when its KV pool is at least this share of the replica's memory:
# a replica that barely holds its weights cannot batch and nobody would deploy it.
MIN_KV_SHARE = 0.10
# Context a typical in-flight sequence holds, used to turn the KV pool into max_concurrency.
TYPICAL_CONTEXT_TOKENS = 4096
MAX_CONCURRENCY_CAP = 256
# Model FLOPs utilisation during prefill and the share of HBM bandwidth decode achieves.
PREFILL_MFU = 0.45
DECODE_BANDWIDTH_SHARE = 0.7
# Continuous batching does not reach the ideal batch × per-sequence rate.
DECODE_BATCH_EFFICIENCY = 0.6
DECODE_BATCH_CAP = 64
# Each doubling of tensor parallelism loses this share to all-reduce traffic.
TENSOR_PARALLEL_EFFICIENCY = 0.92


@dataclass(frozen=True)
class AcceleratorClass:
    """A GPU class: memory in GB, list price in $/GPU-hour, dense bf16 TFLOP/s, HBM TB/s."""

    name: str
    memory_gb: int
    price_per_gpu_hour: float
    dense_tflops: float
    bandwidth_tb_s: float


@dataclass(frozen=True)
class ModelClass:
    """A served model: total and active parameters (billions), bytes per parameter, KV MiB/token.

    ``popularity`` is the relative chance a tenant's demand names this model.
    """

    name: str
    parameters_b: float
    active_parameters_b: float
    bytes_per_parameter: float
    kv_mib_per_token: float
    popularity: float


# An 80 GB, a 141 GB and a 192 GB class first (the benchmark's three-type fleets), then an
# older 80 GB class and a 48 GB inference card. Prices are plausible on-demand list prices.
ACCELERATOR_CLASSES: tuple[AcceleratorClass, ...] = (
    AcceleratorClass("h100", 80, 2.90, 989.0, 3.35),
    AcceleratorClass("h200", 141, 3.70, 989.0, 4.8),
    AcceleratorClass("b200", 192, 5.60, 2250.0, 8.0),
    AcceleratorClass("a100", 80, 1.80, 312.0, 2.0),
    AcceleratorClass("l40s", 48, 1.00, 362.0, 0.864),
)

# Small, large and very large first, so that a mix of three still spans the range.
MODEL_CLASSES: tuple[ModelClass, ...] = (
    ModelClass("llama-8b", 8.0, 8.0, 2.0, 0.125, 0.40),
    ModelClass("llama-70b", 70.0, 70.0, 2.0, 0.3125, 0.30),
    ModelClass("llama-405b-fp8", 405.0, 405.0, 1.0, 0.49, 0.08),
    ModelClass("qwen-32b", 32.0, 32.0, 2.0, 0.25, 0.22),
    ModelClass("mixtral-8x22b", 141.0, 39.0, 2.0, 0.22, 0.10),
)

GEOGRAPHIES: tuple[str, ...] = ("us", "eu", "ap", "sa", "me")
# Share of tenants homed in each geography (renormalised over the geographies present).
GEO_TENANT_SHARE: dict[str, float] = {"us": 0.45, "eu": 0.30, "ap": 0.17, "sa": 0.05, "me": 0.03}
# Regional price level: the same GPU costs more where capacity is scarcer.
GEO_PRICE_MULTIPLIER: dict[str, float] = {"us": 1.0, "eu": 1.08, "ap": 1.15, "sa": 1.2, "me": 1.25}
# Typical rtt between geographies in ms (one row per unordered pair).
GEO_RTT_MS: dict[frozenset[str], float] = {
    frozenset({"us", "eu"}): 85.0,
    frozenset({"us", "ap"}): 140.0,
    frozenset({"us", "sa"}): 115.0,
    frozenset({"us", "me"}): 190.0,
    frozenset({"eu", "ap"}): 180.0,
    frozenset({"eu", "sa"}): 195.0,
    frozenset({"eu", "me"}): 95.0,
    frozenset({"ap", "sa"}): 290.0,
    frozenset({"ap", "me"}): 120.0,
    frozenset({"sa", "me"}): 280.0,
}
REGION_SUFFIXES: tuple[str, ...] = ("east", "west", "central", "north", "south")

PROMISES: tuple[str, ...] = ("none", "n+1", "zone")
PROMISE_WEIGHTS: tuple[float, ...] = (0.35, 0.45, 0.20)
PRIORITIES: tuple[int, ...] = (0, 1, 2)
PRIORITY_WEIGHTS: tuple[float, ...] = (0.25, 0.45, 0.30)
BURSTS: tuple[float, ...] = (1.0, 1.0, 1.2, 1.5, 2.0)
SPILL_RTT_CHOICES_MS: tuple[float, ...] = (30.0, 80.0, 150.0, 250.0)
SHAPE_UTILIZATIONS: tuple[float, ...] = (0.6, 0.65, 0.75, 0.8)

# Tenant request rates: Pareto with the 80/20 exponent, scaled so the smallest tenant sends
# 0.2 requests/s, capped where one tenant would be a fleet of its own.
PARETO_ALPHA = 1.16
MIN_TENANT_RPS = 0.2
MAX_TENANT_RPS = 150.0
# Ample inventory: each zone holds this multiple of its region's need on every GPU class.
AMPLE_FACTOR = 2.0
AMPLE_FLOOR_GPUS = 16


@dataclass(frozen=True)
class HostedVendor:
    """A hosted-API vendor: where its list prices sit in each model's range (0 cheapest,
    1 dearest), its p95 time to first token (s), the geographies it serves from (at most
    this many regions in each) and the chance it serves a given model."""

    name: str
    price_position: float
    p95_ttft_s: float
    geographies: tuple[str, ...]
    regions_per_geography: int
    model_share: float


# Three vendor archetypes: a cheap one in the two big geographies, a mid-priced one
# almost everywhere, and a premium one with the fastest first token.
HOSTED_VENDORS: tuple[HostedVendor, ...] = (
    HostedVendor("budget-api", 0.15, 0.9, ("us", "eu"), 1, 0.75),
    HostedVendor("cloud-api", 0.5, 0.6, ("us", "eu", "ap", "sa", "me"), 2, 0.8),
    HostedVendor("premium-api", 0.85, 0.35, ("us", "eu", "ap"), 1, 0.6),
)
# $ per million input and output tokens, (cheapest, dearest) over public open-weights list
# prices. Against this catalogue's replicas, hosting the large models is often cheaper than
# a marginal replica and the small ones seldom are (a replica's rounding and failure floors
# aside).
HOSTED_PRICES: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "llama-8b": ((0.05, 0.20), (0.08, 0.20)),
    "llama-70b": ((0.35, 0.90), (0.40, 0.90)),
    "llama-405b-fp8": ((0.80, 3.50), (0.80, 3.50)),
    "qwen-32b": ((0.20, 0.80), (0.20, 0.90)),
    "mixtral-8x22b": ((0.60, 1.20), (0.60, 1.20)),
}
# Quota tiers a provider account is on: tokens per minute (input + output) and, for some,
# requests per minute. The small tiers bind for the larger tenants.
HOSTED_TPM_TIERS: tuple[int, ...] = (100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)
HOSTED_RPM_TIERS: tuple[int, ...] = (300, 1_000, 5_000)
HOSTED_RPM_SHARE = 0.5


def _require_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PlannerInputError(
            name, f"must be a whole number of at least {minimum}, got {value!r}"
        )


def _require_share(name: str, value: float) -> None:
    if not (0.0 <= value <= 1.0):
        raise PlannerInputError(name, f"must be within [0, 1], got {value!r}")


def _weighted_choice(rng: random.Random, items: tuple[Any, ...], weights: tuple[float, ...]) -> Any:
    return rng.choices(items, weights=weights, k=1)[0]


def _region_layout(regions: int) -> list[tuple[str, str]]:
    """(region name, geo) pairs: about sqrt(1.5 × regions) geographies, filled round-robin."""
    geo_count = min(len(GEOGRAPHIES), max(1, round(math.sqrt(1.5 * regions))))
    geos = GEOGRAPHIES[:geo_count]
    per_geo: dict[str, int] = defaultdict(int)
    layout: list[tuple[str, str]] = []
    for index in range(regions):
        geo = geos[index % geo_count]
        ordinal = per_geo[geo]
        per_geo[geo] += 1
        suffix = REGION_SUFFIXES[ordinal % len(REGION_SUFFIXES)]
        layout.append((f"{geo}-{suffix}-{ordinal // len(REGION_SUFFIXES) + 1}", geo))
    return layout


def _replica_shapes(
    rng: random.Random, model: ModelClass, accelerator: AcceleratorClass
) -> list[dict[str, Any]]:
    """Up to two replica shapes of ``model`` on ``accelerator``: the two smallest GPU counts
    among 1/2/4/8 whose KV pool is useful, with rates from roofline arithmetic."""
    weights = model.parameters_b * 1e9 * model.bytes_per_parameter
    memory = accelerator.memory_gb * GB
    kv_per_token = model.kv_mib_per_token * MIB
    shapes: list[dict[str, Any]] = []
    for gpus in (1, 2, 4, 8):
        if not shape_fits(memory, gpus, weights, RESERVE_BYTES_PER_GPU):
            continue
        pool = kv_pool_bytes(memory, gpus, weights, RESERVE_BYTES_PER_GPU)
        if pool < MIN_KV_SHARE * memory * gpus:
            continue
        parallel = TENSOR_PARALLEL_EFFICIENCY ** math.log2(gpus)
        # Prefill is compute-bound: 2 FLOPs per active parameter per token.
        prefill = (gpus * accelerator.dense_tflops * 1e12 * PREFILL_MFU * parallel) / (
            2.0 * model.active_parameters_b * 1e9
        )
        # Decode is bandwidth-bound: every step reads the weights once for the whole batch.
        step_s = weights / (gpus * accelerator.bandwidth_tb_s * 1e12 * DECODE_BANDWIDTH_SHARE)
        step_s /= parallel
        max_concurrency = max(
            1, min(MAX_CONCURRENCY_CAP, int(pool // (kv_per_token * TYPICAL_CONTEXT_TOKENS)))
        )
        batch = min(max_concurrency, DECODE_BATCH_CAP)
        decode = batch / step_s * DECODE_BATCH_EFFICIENCY
        shape: dict[str, Any] = {
            "name": f"{model.name}/{accelerator.name}x{gpus}",
            "model": model.name,
            "accelerator": accelerator.name,
            "gpus": gpus,
            "prefill_tokens_per_s": float(max(10, round(prefill, -1))),
            "decode_tokens_per_s": float(max(1, round(decode))),
            "max_concurrency": max_concurrency,
        }
        # Most shapes use the fleet's target; some were benchmarked against their own.
        if rng.random() < 0.25:
            shape["target_utilization"] = rng.choice(SHAPE_UTILIZATIONS)
        shapes.append(shape)
        if len(shapes) == 2:
            break
    return shapes


def _cost_per_request(demand: dict[str, Any], shape: dict[str, Any]) -> float:
    """Replica-seconds one request of ``demand`` takes on ``shape`` (prefix cache removes prefill)."""
    prefill = (
        demand["prompt_tokens"]
        * (1.0 - demand.get("prefix_cache_hit_rate", 0.0))
        / shape["prefill_tokens_per_s"]
    )
    return float(prefill + demand["output_tokens"] / shape["decode_tokens_per_s"])


def generate_problem(
    *,
    tenants: int,
    regions: int,
    zones_per_region: int,
    gpu_types: int,
    seed: int,
    scarcity: float | None = None,
    residency_share: float = 0.3,
    spill_share: float = 0.4,
    models: int = 4,
    two_model_share: float = 0.35,
    target_utilization: float = DEFAULT_TARGET_UTILIZATION,
    hosted: bool = False,
    hosted_overflow_share: float = 0.4,
) -> dict[str, Any]:
    """A placement problem in format v1 with ``tenants`` tenants on a random fleet.

    ``regions`` regions of ``zones_per_region`` zones each are spread over geographies;
    ``gpu_types`` GPU classes (at most 5) and ``models`` models (at most 5) are taken from
    the catalogues above. Each tenant has one demand, or two on different models with chance
    ``two_model_share``. ``residency_share`` of tenants may only use their geography's
    regions; ``spill_share`` of demands may spill to regions within a random rtt budget.

    Inventory: with ``scarcity`` None it is ample (every zone could host twice its region's
    home demand on any single GPU class). With a number it is ``scarcity`` × an estimate of
    the GPUs the home demand needs (work at target utilisation, zone headroom for "zone"
    promises, one spare replica per model) on one GPU class chosen per demand, split evenly
    over the zones: well below 1 the fleet cannot serve everything.

    With ``hosted`` the problem also has ``hosted`` providers (``_hosted_providers``) and
    ``hosted_overflow_share`` of tenants (their tier) may overflow to them. Everything else
    is drawn exactly as without: the providers come from a random stream of their own, so
    the same arguments give the same fleet and demands with or without them.
    """
    _require_count("tenants", tenants, 1)
    _require_count("regions", regions, 1)
    _require_count("zones_per_region", zones_per_region, 1)
    _require_count("gpu_types", gpu_types, 1)
    _require_count("models", models, 1)
    if gpu_types > len(ACCELERATOR_CLASSES):
        raise PlannerInputError("gpu_types", f"at most {len(ACCELERATOR_CLASSES)} GPU classes")
    if models > len(MODEL_CLASSES):
        raise PlannerInputError("models", f"at most {len(MODEL_CLASSES)} models")
    if scarcity is not None and not (scarcity > 0 and math.isfinite(scarcity)):
        raise PlannerInputError("scarcity", f"must be a positive number, got {scarcity!r}")
    _require_share("residency_share", residency_share)
    _require_share("spill_share", spill_share)
    _require_share("two_model_share", two_model_share)
    _require_share("hosted_overflow_share", hosted_overflow_share)
    if not (0.0 < target_utilization <= 1.0):
        raise PlannerInputError("target_utilization", "must be within (0, 1]")

    rng = random.Random(seed)
    accelerators = ACCELERATOR_CLASSES[:gpu_types]
    model_classes = MODEL_CLASSES[:models]

    # Geography and regions.
    layout = _region_layout(regions)
    region_rows: list[dict[str, Any]] = []
    regions_by_geo: dict[str, list[str]] = defaultdict(list)
    geo_of: dict[str, str] = {}
    region_accelerators: dict[str, list[AcceleratorClass]] = {}
    for name, geo in layout:
        zones = [f"{name}-{chr(ord('a') + z)}" for z in range(zones_per_region)]
        multiplier = round(GEO_PRICE_MULTIPLIER[geo] * rng.uniform(0.95, 1.08), 3)
        region_rows.append(
            {"name": name, "geo": geo, "zones": zones, "price_multiplier": multiplier}
        )
        regions_by_geo[geo].append(name)
        geo_of[name] = geo
        # The first class is everywhere; newer or rarer ones are missing from some regions.
        present = [accelerators[0]] + [a for a in accelerators[1:] if rng.random() < 0.8]
        region_accelerators[name] = present

    # Round-trip times: low inside a geography, high across; a few far pairs have no link.
    rtt_rows: list[dict[str, Any]] = []
    names = [name for name, _ in layout]
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            geo_a, geo_b = geo_of[first], geo_of[second]
            if geo_a == geo_b:
                ms = rng.uniform(8.0, 35.0)
            else:
                if rng.random() < 0.1:
                    continue
                ms = GEO_RTT_MS[frozenset({geo_a, geo_b})] * rng.uniform(0.9, 1.2)
            rtt_rows.append({"from": first, "to": second, "ms": round(ms, 1)})

    # Replica shapes per model and GPU class.
    shape_rows: list[dict[str, Any]] = []
    shapes_of_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for model in model_classes:
        for accelerator in accelerators:
            for shape in _replica_shapes(rng, model, accelerator):
                shape_rows.append(shape)
                shapes_of_model[model.name].append(shape)
    servable_models = [m for m in model_classes if shapes_of_model[m.name]]

    # Tenants and their demands.
    geos_present = list(regions_by_geo)
    geo_weights = tuple(GEO_TENANT_SHARE[g] for g in geos_present)
    model_weights = tuple(m.popularity for m in servable_models)
    demand_rows: list[dict[str, Any]] = []
    width = len(str(tenants))
    for index in range(tenants):
        tenant = f"tenant-{index + 1:0{width}d}"
        geo = _weighted_choice(rng, tuple(geos_present), geo_weights)
        home = rng.choice(regions_by_geo[geo])
        resident = rng.random() < residency_share
        total_rps = min(MAX_TENANT_RPS, MIN_TENANT_RPS * rng.paretovariate(PARETO_ALPHA))
        if len(servable_models) >= 2 and rng.random() < two_model_share:
            first = _weighted_choice(rng, tuple(servable_models), model_weights)
            others = [m for m in servable_models if m is not first]
            second = _weighted_choice(rng, tuple(others), tuple(m.popularity for m in others))
            split = rng.uniform(0.55, 0.85)
            mix = [(first, split), (second, 1.0 - split)]
        else:
            mix = [(_weighted_choice(rng, tuple(servable_models), model_weights), 1.0)]
        for model, share in mix:
            # Lognormal prompt and output lengths, as fitted in the seeds' workload profile.
            prompt = int(min(32000, max(50, rng.lognormvariate(math.log(1100), 0.6))))
            output = int(min(4000, max(5, rng.lognormvariate(math.log(110), 0.6))))
            demand: dict[str, Any] = {
                "id": f"{tenant}/{model.name}",
                "tenant": tenant,
                "model": model.name,
                "home_region": home,
                "requests_per_s": round(max(0.01, total_rps * share), 3),
                "burst": rng.choice(BURSTS),
                "prompt_tokens": prompt,
                "output_tokens": output,
                "promise": _weighted_choice(rng, PROMISES, PROMISE_WEIGHTS),
                "priority": _weighted_choice(rng, PRIORITIES, PRIORITY_WEIGHTS),
            }
            if rng.random() < 0.7:
                demand["prefix_cache_hit_rate"] = round(rng.uniform(0.1, 0.7), 2)
            if rng.random() < 0.8:
                # Streamed answers hold their slot through the whole generation.
                demand["residence_s"] = round(0.5 + prompt / 8000.0 + output / 35.0, 2)
            if resident:
                demand["allowed_regions"] = list(regions_by_geo[geo])
            if rng.random() < spill_share:
                demand["max_spill_rtt_ms"] = rng.choice(SPILL_RTT_CHOICES_MS)
            demand_rows.append(demand)

    inventory_rows = _inventory(
        rng,
        region_rows,
        region_accelerators,
        shapes_of_model,
        demand_rows,
        scarcity,
        target_utilization,
    )

    out: dict[str, Any] = {
        "format": PROBLEM_FORMAT,
        "target_utilization": target_utilization,
        "regions": region_rows,
        "accelerators": [
            {"name": a.name, "memory_gb": a.memory_gb, "price_per_gpu_hour": a.price_per_gpu_hour}
            for a in accelerators
        ],
        "inventory": inventory_rows,
        "shapes": shape_rows,
        "rtt_ms": rtt_rows,
        "demands": demand_rows,
    }
    if hosted:
        out["hosted"] = _hosted_providers(
            random.Random(f"hosted:{seed}"),
            regions_by_geo,
            [m.name for m in servable_models],
            demand_rows,
            hosted_overflow_share,
        )
    return out


def _hosted_providers(
    rng: random.Random,
    regions_by_geo: Mapping[str, list[str]],
    models: list[str],
    demand_rows: list[dict[str, Any]],
    overflow_share: float,
) -> list[dict[str, Any]]:
    """``hosted`` rows, and ``hosted_overflow`` on the demands of some tenants (in place).

    One row per vendor, model and region it serves that model from (a provider bills one
    price for everything it serves, and list prices differ by model): the vendor's place
    in the model's price range, ±10 % per row; a quota tier per row, drawn so that some
    bind; a request quota on some. Tenants residing in one geography can only use the rows
    in its regions (their ``allowed_regions``); the others may use any.
    """
    rows: list[dict[str, Any]] = []
    for vendor in HOSTED_VENDORS:
        served = [m for m in models if m in HOSTED_PRICES and rng.random() < vendor.model_share]
        places = [
            region
            for geo in vendor.geographies
            if geo in regions_by_geo
            for region in rng.sample(
                regions_by_geo[geo], min(vendor.regions_per_geography, len(regions_by_geo[geo]))
            )
        ]
        for model in served:
            (in_low, in_high), (out_low, out_high) = HOSTED_PRICES[model]
            for region in places:
                factor = rng.uniform(0.9, 1.1)
                position = vendor.price_position
                row: dict[str, Any] = {
                    "name": f"{vendor.name}/{model}@{region}",
                    "region": region,
                    "models": [model],
                    "input_price_per_mtok": round(
                        factor * (in_low + position * (in_high - in_low)), 3
                    ),
                    "output_price_per_mtok": round(
                        factor * (out_low + position * (out_high - out_low)), 3
                    ),
                    "tpm_limit": rng.choice(HOSTED_TPM_TIERS),
                    "p95_ttft_s": round(vendor.p95_ttft_s * rng.uniform(0.9, 1.2), 2),
                }
                if rng.random() < HOSTED_RPM_SHARE:
                    row["rpm_limit"] = rng.choice(HOSTED_RPM_TIERS)
                rows.append(row)
    allowed = {str(d["tenant"]) for d in demand_rows}
    overflowing = {t for t in sorted(allowed) if rng.random() < overflow_share}
    for demand in demand_rows:
        if demand["tenant"] in overflowing:
            demand["hosted_overflow"] = True
    return rows


def _gpus_needed(
    demand: dict[str, Any], shape: dict[str, Any], target_utilization: float, zones: int
) -> float:
    """GPUs (fractional) that ``demand`` alone takes on ``shape`` at target, with zone headroom."""
    utilization = float(shape.get("target_utilization", target_utilization))
    rate = float(demand["requests_per_s"]) * float(demand["burst"])
    work = rate * _cost_per_request(demand, shape)
    replicas = work / utilization
    if demand["promise"] == "zone" and zones > 1:
        replicas *= zones / (zones - 1)
    return replicas * float(shape["gpus"])


def _inventory(
    rng: random.Random,
    region_rows: list[dict[str, Any]],
    region_accelerators: dict[str, list[AcceleratorClass]],
    shapes_of_model: dict[str, list[dict[str, Any]]],
    demand_rows: list[dict[str, Any]],
    scarcity: float | None,
    target_utilization: float,
) -> list[dict[str, Any]]:
    """Inventory rows per zone and GPU class, ample or scaled to the estimated need."""
    zones_of = {row["name"]: len(row["zones"]) for row in region_rows}
    # need[region][accelerator]: GPUs the region's home demand needs there.
    need: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    # Spare GPUs per region, GPU class and model: ample leaves room for N+1 and rounding to
    # equal zones; a scarce fleet is sized to the need plus one spare replica.
    spares: dict[tuple[str, str, str], float] = {}
    for demand in demand_rows:
        region = demand["home_region"]
        zones = zones_of[region]
        present = {a.name for a in region_accelerators[region]}
        candidates = [s for s in shapes_of_model[demand["model"]] if s["accelerator"] in present]
        if not candidates:
            continue
        if scarcity is None:
            # Ample: every GPU class could take all of it on its smallest shape.
            per_class: dict[str, dict[str, Any]] = {}
            for shape in candidates:
                per_class.setdefault(shape["accelerator"], shape)
            for class_name, shape in per_class.items():
                need[region][class_name] += _gpus_needed(demand, shape, target_utilization, zones)
                key = (region, class_name, demand["model"])
                spares[key] = float(shape["gpus"]) * (zones + 1)
        else:
            # One GPU class per demand, its most GPU-efficient shape, one spare replica.
            accelerator = rng.choice(sorted({s["accelerator"] for s in candidates}))
            on_class = [s for s in candidates if s["accelerator"] == accelerator]
            gpus_by_shape = [
                (_gpus_needed(demand, s, target_utilization, zones), s) for s in on_class
            ]
            gpus, shape = min(gpus_by_shape, key=lambda pair: pair[0])
            need[region][accelerator] += gpus
            key = (region, accelerator, demand["model"])
            spares[key] = max(spares.get(key, 0.0), float(shape["gpus"]))
    for (region, class_name, _model), spare_gpus in spares.items():
        need[region][class_name] += spare_gpus

    rows: list[dict[str, Any]] = []
    for region_row in region_rows:
        region = region_row["name"]
        zones = len(region_row["zones"])
        for accelerator in region_accelerators[region]:
            per_zone = need[region][accelerator.name] / zones
            if scarcity is None:
                zone_gpus = math.ceil(AMPLE_FACTOR * per_zone) + AMPLE_FLOOR_GPUS
            else:
                zone_gpus = math.ceil(scarcity * per_zone)
            for zone in region_row["zones"]:
                rows.append({"zone": zone, "accelerator": accelerator.name, "gpus": zone_gpus})
    return rows
