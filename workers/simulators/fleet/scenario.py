"""A simulated fleet built from a Headroom scenario file (``docs/scenarios/*.yaml``).

Streams come from the scenario's workload profiles: one stream per (tenant, model, origin
region), whose classes are the tenant's profiles there (share = the class's peak rate over the
stream's, lengths lognormal from each profile's p50 and mean, its prefix-cache hit rate). A
profile without a region originates in the tenant's home region. Only the highest version of
each (tenant, model, class, region) profile counts.

Pools: one per (model, region) that has traffic, on the model's smallest replica shape (fewest
GPUs) that has a whole-mix capacity figure, with that figure's prefill and decode rates and the
shape's KV pool in tokens (``planner.capacity.memory``). Replicas are what the capacity method
plans: ``replicas_needed`` for the pool's peak demand in replica-seconds per second at the
planning target (the shape's, else 0.7), so the simulated fleet runs as a sized fleet would.

The tenant, model and region names are the scenario's, so after ``manage.py load_scenario`` of
the same file every label the simulator exposes names a row in the database.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from planner.capacity import memory
from planner.capacity.sizing import replicas_needed
from planner.capacity.workload import request_cost
from planner.placement.problem import DEFAULT_TARGET_UTILIZATION
from workers.simulators.fleet.fleet import ClassSpec, FleetSpec, PoolSpec, StreamSpec

_GB = memory.GB


class ScenarioFleetError(ValueError):
    """A scenario file the simulator cannot build a fleet from; the message says where."""


def _section(data: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    entries = data.get(key)
    if not isinstance(entries, list) or not entries:
        raise ScenarioFleetError(f"{key}: the scenario needs a non-empty list")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ScenarioFleetError(f"{key}[{index}]: expected a mapping")
    return entries


def _number(entry: Mapping[str, Any], key: str, where: str) -> float:
    node: Any = entry
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if isinstance(node, bool) or not isinstance(node, int | float) or not math.isfinite(node):
        raise ScenarioFleetError(f"{where}: {key} must be a number")
    return float(node)


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise ScenarioFleetError(f"{where}: {key} must be a name")
    return value


def fleet_from_scenario(
    path: Path | str,
    *,
    extra_prompt_tokens: float = 0.0,
    target_utilization: float = DEFAULT_TARGET_UTILIZATION,
) -> FleetSpec:
    """The fleet a scenario file describes; raises ``ScenarioFleetError`` naming the entry."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioFleetError(f"{path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ScenarioFleetError(f"{path}: expected a mapping of sections")
    return fleet_from_data(
        data, extra_prompt_tokens=extra_prompt_tokens, target_utilization=target_utilization
    )


def fleet_from_data(
    data: Mapping[str, Any],
    *,
    extra_prompt_tokens: float = 0.0,
    target_utilization: float = DEFAULT_TARGET_UTILIZATION,
) -> FleetSpec:
    """The fleet of an already parsed scenario mapping."""
    regions = {_text(r, "name", f"regions[{i}]") for i, r in enumerate(_section(data, "regions"))}
    homes: dict[str, str] = {}
    for i, entry in enumerate(_section(data, "tenants")):
        where = f"tenants[{i}]"
        homes[_text(entry, "name", where)] = _text(entry, "home_region", where)
    models = {_text(m, "name", f"models[{i}]"): m for i, m in enumerate(_section(data, "models"))}

    # The highest version of each profile.
    latest: dict[tuple[str, str, str, str], tuple[int, dict[str, Any], str]] = {}
    for i, profile in enumerate(_section(data, "workload_profiles")):
        where = f"workload_profiles[{i}]"
        tenant = _text(profile, "tenant", where)
        if tenant not in homes:
            raise ScenarioFleetError(f"{where}: tenant: unknown tenant {tenant!r}")
        model = _text(profile, "model", where)
        if model not in models:
            raise ScenarioFleetError(f"{where}: model: unknown model {model!r}")
        region = profile.get("region") or homes[tenant]
        if region not in regions:
            raise ScenarioFleetError(f"{where}: region: unknown region {region!r}")
        cls = _text(profile, "workload_class", where)
        version = int(profile.get("version", 1))
        key = (tenant, model, region, cls)
        if key not in latest or latest[key][0] < version:
            latest[key] = (version, profile, where)

    grouped: dict[tuple[str, str, str], list[tuple[str, dict[str, Any], str]]] = {}
    for (tenant, model, region, cls), (_, profile, where) in sorted(latest.items()):
        grouped.setdefault((tenant, model, region), []).append((cls, profile, where))
    streams = []
    for (tenant, model, region), profiles in grouped.items():
        rates = [_number(p, "peak_requests_per_s", w) for _, p, w in profiles]
        total = math.fsum(rates)
        if total <= 0:
            continue
        classes = tuple(
            ClassSpec(
                name=cls,
                share=rate / total,
                prompt_median=_number(p, "prompt_tokens.p50", w),
                prompt_mean=_number(p, "prompt_tokens.mean", w),
                output_median=_number(p, "output_tokens.p50", w),
                output_mean=_number(p, "output_tokens.mean", w),
                prefix_cache_hit_rate=float(p.get("prefix_cache_hit_rate", 0.0)),
            )
            for (cls, p, w), rate in zip(profiles, rates, strict=True)
        )
        streams.append(StreamSpec(tenant, model, region, total, classes))
    if not streams:
        raise ScenarioFleetError("workload_profiles: no profile has traffic")

    pools = []
    for model, region in sorted({(s.model, s.region) for s in streams}):
        shape, figure = _pool_shape(data, model)
        prefill = _number(figure, "prefill_tokens_per_s", "capacity figure")
        decode = _number(figure, "decode_tokens_per_s", "capacity figure")
        demand = math.fsum(
            s.requests_per_s
            * c.share
            * request_cost(c.prompt_mean, c.output_mean, prefill, decode, c.prefix_cache_hit_rate)
            for s in streams
            if s.model == model and s.region == region
            for c in s.classes
        )
        target = float(shape.get("target_utilization") or target_utilization)
        pools.append(
            PoolSpec(
                model=model,
                region=region,
                replicas=max(1, replicas_needed(demand, 1.0, target)),
                prefill_tokens_per_s=prefill,
                decode_tokens_per_s=decode,
                kv_pool_tokens=float(_kv_pool_tokens(models[model], shape, data)),
            )
        )
    return FleetSpec(tuple(streams), tuple(pools), extra_prompt_tokens)


def _pool_shape(data: Mapping[str, Any], model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's smallest shape with a whole-mix capacity figure, and that figure."""
    shapes = {
        _text(s, "name", f"replica_shapes[{i}]"): s
        for i, s in enumerate(_section(data, "replica_shapes"))
        if s.get("model") == model
    }
    figures = [
        f
        for f in _section(data, "capacity_figures")
        if f.get("shape") in shapes and not f.get("workload_class")
    ]
    if not figures:
        raise ScenarioFleetError(
            f"capacity_figures: no whole-mix figure for a shape of model {model!r}"
        )
    figure = min(
        figures,
        key=lambda f: (
            _number(shapes[f["shape"]], "gpus_per_replica", f"replica_shapes ({f['shape']})"),
            f["shape"],
        ),
    )
    return shapes[figure["shape"]], figure


def _kv_pool_tokens(
    model: Mapping[str, Any], shape: Mapping[str, Any], data: Mapping[str, Any]
) -> int:
    """Tokens of KV cache one replica of the shape holds."""
    accelerators = {a.get("name"): a for a in _section(data, "accelerators")}
    accelerator = accelerators.get(shape.get("accelerator"))
    where = f"replica_shapes ({shape.get('name')})"
    if accelerator is None:
        raise ScenarioFleetError(f"{where}: accelerator: unknown accelerator")
    weights = memory.weight_bytes(
        _number(model, "parameters_billions", "models") * 1e9,
        float(model.get("bytes_per_parameter", 2.0)),
    )
    pool = memory.kv_pool_bytes(
        _number(accelerator, "memory_gb", "accelerators") * _GB,
        int(_number(shape, "gpus_per_replica", where)),
        weights,
        float(shape.get("runtime_reserve_gb_per_gpu", 6.0)) * _GB,
    )
    per_token = memory.kv_bytes_per_token(
        int(_number(model, "layers", "models")),
        int(_number(model, "kv_heads", "models")),
        int(_number(model, "head_dim", "models")),
        float(model.get("kv_bytes_per_element", 2.0)),
    )
    tokens = memory.context_tokens_that_fit(pool, per_token)
    if tokens <= 0:
        raise ScenarioFleetError(f"{where}: the weights leave no room for a KV cache")
    return tokens
