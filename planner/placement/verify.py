"""Independent check of a placement solution against its problem (format v1).

``verify`` recomputes every sum of the contract's hard constraints straight from the two
JSON documents and returns one sentence per violation; an empty list means the plan is
valid. It reads the problem with its own small reader (``read_spec_problem``) rather than
the solver's model code, so a misreading in one is caught by the other. The greedy
baseline, the reference formulation and the control plane's emission (which sizes the
autoscalers from the plan's own problem) use the same reader for the same reason. The
reader accepts every problem the solver's parser accepts (``planner.placement.problem``),
with the same values: token means and concurrency caps are numbers, not only whole ones
(telemetry means never are).

Tolerance: a constraint ``lhs ≤ rhs`` holds when ``lhs − rhs ≤ 1e-6 × max(Σ|lhs terms|,
Σ|rhs terms|)``, as the contract specifies; equalities use the same bound on ``|lhs − rhs|``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from planner.errors import PlannerInputError

# The contract's constants are defined once, beside the solver's reader; only the reading
# below is independent of it.
from planner.placement.problem import (
    DEFAULT_TARGET_UTILIZATION,
    PROBLEM_FORMAT,
    PROMISES,
    SOLUTION_FORMAT,
)

TOLERANCE = 1e-6


@dataclass(frozen=True)
class SpecRegion:
    """A region: its geography, zones and price multiplier (1.0 = list price)."""

    name: str
    geo: str
    zones: tuple[str, ...]
    price_multiplier: float


@dataclass(frozen=True)
class SpecAccelerator:
    """A GPU class: memory in GB, price in $/GPU-hour."""

    name: str
    memory_gb: float
    price_per_gpu_hour: float


@dataclass(frozen=True)
class SpecShape:
    """A replica shape: GPUs per replica, tokens/s of prefill and decode, concurrency cap."""

    name: str
    model: str
    accelerator: str
    gpus: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    max_concurrency: float | None
    target_utilization: float


@dataclass(frozen=True)
class SpecDemand:
    """A demand with defaults applied; ``allowed_regions`` is explicit (every region if absent)."""

    id: str
    tenant: str
    model: str
    home_region: str
    allowed_regions: tuple[str, ...]
    requests_per_s: float
    burst: float
    prompt_tokens: float
    output_tokens: float
    prefix_cache_hit_rate: float
    residence_s: float | None
    max_spill_rtt_ms: float | None
    promise: str
    priority: int
    ttft_slo_s: float | None = None
    prompt_tokens_p95: float | None = None
    excluded_shapes: tuple[str, ...] = ()
    hosted_overflow: bool = False

    @property
    def planned_rate(self) -> float:
        """``R_d = requests_per_s × burst``, requests/s."""
        return self.requests_per_s * self.burst

    @property
    def promise_level(self) -> int:
        """0 for "none", 1 for "n+1", 2 for "zone" ("zone" includes the N+1 promise)."""
        return PROMISES.index(self.promise)


@dataclass(frozen=True)
class SpecHosted:
    """A hosted API: its region, models, $ per million input/output tokens, quotas, p95 TTFT."""

    name: str
    region: str
    models: tuple[str, ...]
    input_price_per_mtok: float
    output_price_per_mtok: float
    tpm_limit: float
    rpm_limit: float | None
    p95_ttft_s: float


@dataclass(frozen=True)
class SpecProblem:
    """A placement problem as the v1 contract defines it, validated, defaults applied."""

    target_utilization: float
    regions: dict[str, SpecRegion]
    accelerators: dict[str, SpecAccelerator]
    inventory: dict[tuple[str, str], int]
    shapes: dict[str, SpecShape]
    rtt: dict[tuple[str, str], float]
    demands: dict[str, SpecDemand]
    previous: dict[tuple[str, str], int]
    region_of_zone: dict[str, str]
    hosted: dict[str, SpecHosted] = field(default_factory=dict)

    def rtt_ms(self, first: str, second: str) -> float | None:
        """Round trip between two regions in ms; 0 to itself; None where no link exists."""
        if first == second:
            return 0.0
        return self.rtt.get((first, second))

    def may_serve(self, demand: SpecDemand, region: str) -> bool:
        """Whether ``region`` may carry ``demand``: allowed, and home or within the spill rtt."""
        if region not in demand.allowed_regions:
            return False
        if region == demand.home_region:
            return True
        if demand.max_spill_rtt_ms is None:
            return False
        rtt = self.rtt_ms(demand.home_region, region)
        return rtt is not None and rtt <= demand.max_spill_rtt_ms

    def shapes_of_model(self, model: str) -> list[SpecShape]:
        """Shapes that serve ``model``, in problem order."""
        return [s for s in self.shapes.values() if s.model == model]

    def inventory_gpus(self, zone: str, accelerator: str) -> int:
        """GPUs of ``accelerator`` in ``zone`` (no row = 0)."""
        return self.inventory.get((zone, accelerator), 0)

    def gpu_hour_price(self, region: str, shape: SpecShape) -> float:
        """$/hour of one replica of ``shape`` in ``region``."""
        price = self.accelerators[shape.accelerator].price_per_gpu_hour
        return shape.gpus * price * self.regions[region].price_multiplier


def _prefill_floor_s(demand: SpecDemand, shape: SpecShape) -> float:
    """Seconds the demand's p95 prompt takes to prefill on ``shape`` (0 where unknown)."""
    if demand.prompt_tokens_p95 is None:
        return 0.0
    prefill = demand.prompt_tokens_p95 * (1.0 - demand.prefix_cache_hit_rate)
    return prefill / shape.prefill_tokens_per_s


def cost_per_request(demand: SpecDemand, shape: SpecShape) -> float:
    """Replica-seconds one request takes: uncached prompt / prefill rate + output / decode rate."""
    prefill = demand.prompt_tokens * (1.0 - demand.prefix_cache_hit_rate)
    return prefill / shape.prefill_tokens_per_s + demand.output_tokens / shape.decode_tokens_per_s


# --- reading the problem ---------------------------------------------------------------


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(row: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = row.get(key, default)
    if value is None:
        raise PlannerInputError(f"{where}.{key}", "is required")
    if not _is_number(value) or not math.isfinite(value):
        raise PlannerInputError(f"{where}.{key}", f"must be a finite number, got {value!r}")
    return float(value)


def _optional_number(row: Mapping[str, Any], key: str, where: str) -> float | None:
    if row.get(key) is None:
        return None
    return _number(row, key, where)


def _whole(
    row: Mapping[str, Any], key: str, where: str, *, minimum: int = 0, default: int | None = None
) -> int:
    value = row.get(key, default)
    if value is None:
        raise PlannerInputError(f"{where}.{key}", "is required")
    if not _is_number(value) or not math.isfinite(value) or float(value) != int(value):
        raise PlannerInputError(f"{where}.{key}", f"must be a whole number, got {value!r}")
    if value < minimum:
        raise PlannerInputError(f"{where}.{key}", f"must be at least {minimum}, got {value!r}")
    return int(value)


def _text(row: Mapping[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value:
        raise PlannerInputError(f"{where}.{key}", f"must be a non-empty string, got {value!r}")
    return value


def _rows(problem: Mapping[str, Any], key: str, *, required: bool) -> list[Mapping[str, Any]]:
    value = problem.get(key)
    if value is None:
        if required:
            raise PlannerInputError(key, "is required")
        return []
    if not isinstance(value, list) or not all(isinstance(row, Mapping) for row in value):
        raise PlannerInputError(key, "must be a list of objects")
    return value


def _utilization(value: float, where: str) -> float:
    if not (0.0 < value <= 1.0):
        raise PlannerInputError(where, f"must be within (0, 1], got {value!r}")
    return value


def _non_negative(value: float, where: str) -> float:
    if value < 0:
        raise PlannerInputError(where, f"must be zero or more, got {value!r}")
    return value


def read_spec_problem(problem: Mapping[str, Any]) -> SpecProblem:
    """Validate ``problem`` against the v1 contract and return it with defaults applied.

    Raises ``PlannerInputError`` naming the field (e.g. ``demands[3].burst``) for every case
    the contract calls invalid.
    """
    if not isinstance(problem, Mapping):
        raise PlannerInputError("problem", "must be an object")
    if problem.get("format", PROBLEM_FORMAT) != PROBLEM_FORMAT:
        raise PlannerInputError("format", f"must be {PROBLEM_FORMAT!r}")
    target = _utilization(
        _number(problem, "target_utilization", "problem", DEFAULT_TARGET_UTILIZATION),
        "target_utilization",
    )

    regions: dict[str, SpecRegion] = {}
    region_of_zone: dict[str, str] = {}
    for i, row in enumerate(_rows(problem, "regions", required=True)):
        where = f"regions[{i}]"
        name = _text(row, "name", where)
        if name in regions:
            raise PlannerInputError(f"{where}.name", f"duplicate region {name!r}")
        zones_value = row.get("zones")
        if zones_value is None:
            raise PlannerInputError(f"{where}.zones", "is required")
        if not isinstance(zones_value, list):
            # An empty list is a region with nowhere to place replicas: valid, and empty.
            raise PlannerInputError(f"{where}.zones", "must be a list of zone names")
        for j, zone in enumerate(zones_value):
            if not isinstance(zone, str) or not zone:
                raise PlannerInputError(f"{where}.zones[{j}]", "must be a non-empty string")
            if zone in region_of_zone:
                raise PlannerInputError(f"{where}.zones[{j}]", f"duplicate zone {zone!r}")
            region_of_zone[zone] = name
        geo = row.get("geo", "")
        multiplier = _non_negative(
            _number(row, "price_multiplier", where, 1.0), f"{where}.price_multiplier"
        )
        regions[name] = SpecRegion(name, str(geo), tuple(zones_value), multiplier)

    accelerators: dict[str, SpecAccelerator] = {}
    for i, row in enumerate(_rows(problem, "accelerators", required=True)):
        where = f"accelerators[{i}]"
        name = _text(row, "name", where)
        if name in accelerators:
            raise PlannerInputError(f"{where}.name", f"duplicate accelerator {name!r}")
        memory = _non_negative(_number(row, "memory_gb", where, 0.0), f"{where}.memory_gb")
        price = _non_negative(
            _number(row, "price_per_gpu_hour", where), f"{where}.price_per_gpu_hour"
        )
        accelerators[name] = SpecAccelerator(name, memory, price)

    inventory: dict[tuple[str, str], int] = {}
    for i, row in enumerate(_rows(problem, "inventory", required=False)):
        where = f"inventory[{i}]"
        zone = _text(row, "zone", where)
        accelerator = _text(row, "accelerator", where)
        if zone not in region_of_zone:
            raise PlannerInputError(f"{where}.zone", f"unknown zone {zone!r}")
        if accelerator not in accelerators:
            raise PlannerInputError(f"{where}.accelerator", f"unknown accelerator {accelerator!r}")
        if (zone, accelerator) in inventory:
            raise PlannerInputError(where, f"duplicate inventory row for {zone}/{accelerator}")
        inventory[(zone, accelerator)] = _whole(row, "gpus", where)

    shapes: dict[str, SpecShape] = {}
    for i, row in enumerate(_rows(problem, "shapes", required=True)):
        where = f"shapes[{i}]"
        name = _text(row, "name", where)
        if name in shapes:
            raise PlannerInputError(f"{where}.name", f"duplicate shape {name!r}")
        accelerator = _text(row, "accelerator", where)
        if accelerator not in accelerators:
            raise PlannerInputError(f"{where}.accelerator", f"unknown accelerator {accelerator!r}")
        prefill = _number(row, "prefill_tokens_per_s", where)
        decode = _number(row, "decode_tokens_per_s", where)
        for key, value in (("prefill_tokens_per_s", prefill), ("decode_tokens_per_s", decode)):
            if value <= 0:
                raise PlannerInputError(f"{where}.{key}", f"must be positive, got {value!r}")
        concurrency = (
            None
            if row.get("max_concurrency") is None
            else _non_negative(_number(row, "max_concurrency", where), f"{where}.max_concurrency")
        )
        shapes[name] = SpecShape(
            name=name,
            model=_text(row, "model", where),
            accelerator=accelerator,
            gpus=_whole(row, "gpus", where, minimum=1),
            prefill_tokens_per_s=prefill,
            decode_tokens_per_s=decode,
            max_concurrency=concurrency,
            target_utilization=_utilization(
                _number(row, "target_utilization", where, target),
                f"{where}.target_utilization",
            ),
        )
    models = {s.model for s in shapes.values()}

    rtt: dict[tuple[str, str], float] = {}
    for i, row in enumerate(_rows(problem, "rtt_ms", required=False)):
        where = f"rtt_ms[{i}]"
        first, second = _text(row, "from", where), _text(row, "to", where)
        for key, region in (("from", first), ("to", second)):
            if region not in regions:
                raise PlannerInputError(f"{where}.{key}", f"unknown region {region!r}")
        ms = _non_negative(_number(row, "ms", where), f"{where}.ms")
        if first == second and ms != 0:
            raise PlannerInputError(f"{where}.ms", f"a region's rtt to itself is 0, got {ms!r}")
        # A repeated pair (either direction) that agrees is harmless; one that disagrees
        # would make the plan depend on row order.
        if rtt.get((first, second), ms) != ms:
            raise PlannerInputError(where, f"duplicate rtt row for {first}/{second}")
        rtt[(first, second)] = ms
        rtt[(second, first)] = ms

    demands: dict[str, SpecDemand] = {}
    for i, row in enumerate(_rows(problem, "demands", required=False)):
        where = f"demands[{i}]"
        demand_id = _text(row, "id", where)
        if demand_id in demands:
            raise PlannerInputError(f"{where}.id", f"duplicate demand {demand_id!r}")
        model = _text(row, "model", where)
        if model not in models:
            raise PlannerInputError(f"{where}.model", f"unknown model {model!r}")
        home = _text(row, "home_region", where)
        if home not in regions:
            raise PlannerInputError(f"{where}.home_region", f"unknown region {home!r}")
        allowed_value = row.get("allowed_regions")
        if allowed_value is None:
            allowed = tuple(regions)
        else:
            if not isinstance(allowed_value, list) or not allowed_value:
                raise PlannerInputError(f"{where}.allowed_regions", "must be a non-empty list")
            for j, region in enumerate(allowed_value):
                if not isinstance(region, str) or region not in regions:
                    raise PlannerInputError(
                        f"{where}.allowed_regions[{j}]", f"unknown region {region!r}"
                    )
            allowed = tuple(dict.fromkeys(allowed_value))
        burst = _number(row, "burst", where, 1.0)
        if burst < 1.0:
            raise PlannerInputError(f"{where}.burst", f"must be at least 1, got {burst!r}")
        hit = _number(row, "prefix_cache_hit_rate", where, 0.0)
        if not (0.0 <= hit <= 1.0):
            raise PlannerInputError(
                f"{where}.prefix_cache_hit_rate", f"must be within [0, 1], got {hit!r}"
            )
        residence = _optional_number(row, "residence_s", where)
        spill = _optional_number(row, "max_spill_rtt_ms", where)
        promise = row.get("promise", "none")
        if promise not in PROMISES:
            raise PlannerInputError(f"{where}.promise", f"must be one of {PROMISES}")
        priority = row.get("priority", 0)
        if not _is_number(priority) or not math.isfinite(priority) or priority != int(priority):
            raise PlannerInputError(
                f"{where}.priority", f"must be a whole number, got {priority!r}"
            )
        slo = _optional_number(row, "ttft_slo_s", where)
        prompt_p95 = _optional_number(row, "prompt_tokens_p95", where)
        excluded = row.get("excluded_shapes") or []
        if not isinstance(excluded, list) or not all(isinstance(x, str) for x in excluded):
            raise PlannerInputError(f"{where}.excluded_shapes", "must be a list of shape names")
        overflow = row.get("hosted_overflow", False)
        if overflow is None:
            overflow = False
        if not isinstance(overflow, bool):
            raise PlannerInputError(f"{where}.hosted_overflow", "must be true or false")
        demands[demand_id] = SpecDemand(
            hosted_overflow=overflow,
            excluded_shapes=tuple(excluded),
            ttft_slo_s=None if slo is None else _non_negative(slo, f"{where}.ttft_slo_s"),
            prompt_tokens_p95=(
                None
                if prompt_p95 is None
                else _non_negative(prompt_p95, f"{where}.prompt_tokens_p95")
            ),
            id=demand_id,
            # The solver's default: a demand without a tenant is its own tenant.
            tenant=str(row.get("tenant") or demand_id),
            model=model,
            home_region=home,
            allowed_regions=allowed,
            requests_per_s=_non_negative(
                _number(row, "requests_per_s", where), f"{where}.requests_per_s"
            ),
            burst=burst,
            prompt_tokens=_non_negative(
                _number(row, "prompt_tokens", where), f"{where}.prompt_tokens"
            ),
            output_tokens=_non_negative(
                _number(row, "output_tokens", where), f"{where}.output_tokens"
            ),
            prefix_cache_hit_rate=hit,
            residence_s=(
                None if residence is None else _non_negative(residence, f"{where}.residence_s")
            ),
            max_spill_rtt_ms=(
                None if spill is None else _non_negative(spill, f"{where}.max_spill_rtt_ms")
            ),
            promise=str(promise),
            priority=int(priority),
        )

    previous: dict[tuple[str, str], int] = {}
    for i, row in enumerate(_rows(problem, "previous", required=False)):
        where = f"previous[{i}]"
        zone, shape = _text(row, "zone", where), _text(row, "shape", where)
        if zone not in region_of_zone:
            raise PlannerInputError(f"{where}.zone", f"unknown zone {zone!r}")
        if shape not in shapes:
            raise PlannerInputError(f"{where}.shape", f"unknown shape {shape!r}")
        if (zone, shape) in previous:
            raise PlannerInputError(where, f"duplicate previous row for {zone}/{shape}")
        previous[(zone, shape)] = _whole(row, "replicas", where)

    hosted: dict[str, SpecHosted] = {}
    for i, row in enumerate(_rows(problem, "hosted", required=False)):
        where = f"hosted[{i}]"
        name = _text(row, "name", where)
        if name in hosted:
            raise PlannerInputError(f"{where}.name", f"duplicate hosted provider {name!r}")
        region = _text(row, "region", where)
        if region not in regions:
            raise PlannerInputError(f"{where}.region", f"unknown region {region!r}")
        served_models = row.get("models")
        if (
            not isinstance(served_models, list)
            or not served_models
            or not all(isinstance(m, str) and m for m in served_models)
        ):
            raise PlannerInputError(f"{where}.models", "must be a non-empty list of model names")
        rpm = _optional_number(row, "rpm_limit", where)
        hosted[name] = SpecHosted(
            name=name,
            region=region,
            models=tuple(served_models),
            input_price_per_mtok=_non_negative(
                _number(row, "input_price_per_mtok", where), f"{where}.input_price_per_mtok"
            ),
            output_price_per_mtok=_non_negative(
                _number(row, "output_price_per_mtok", where), f"{where}.output_price_per_mtok"
            ),
            tpm_limit=_non_negative(_number(row, "tpm_limit", where), f"{where}.tpm_limit"),
            rpm_limit=None if rpm is None else _non_negative(rpm, f"{where}.rpm_limit"),
            p95_ttft_s=_non_negative(_number(row, "p95_ttft_s", where), f"{where}.p95_ttft_s"),
        )

    return SpecProblem(
        hosted=hosted,
        target_utilization=target,
        regions=regions,
        accelerators=accelerators,
        inventory=inventory,
        shapes=shapes,
        rtt=rtt,
        demands=demands,
        previous=previous,
        region_of_zone=region_of_zone,
    )


# --- checking the solution -------------------------------------------------------------


def _exceeds(lhs: float, rhs: float, lhs_abs: float, rhs_abs: float) -> bool:
    """Whether ``lhs ≤ rhs`` fails beyond the contract's tolerance."""
    return lhs - rhs > TOLERANCE * max(lhs_abs, rhs_abs)


def _differs(lhs: float, rhs: float, lhs_abs: float, rhs_abs: float) -> bool:
    """Whether ``lhs = rhs`` fails beyond the contract's tolerance."""
    return abs(lhs - rhs) > TOLERANCE * max(lhs_abs, rhs_abs)


def _fmt(value: float) -> str:
    return f"{value:.6g}"


class _Load:
    """Sums of one region and shape: all, promised (n+1 or zone) and zone-promised work."""

    __slots__ = ("concurrency", "promised", "total", "zonal")

    def __init__(self) -> None:
        self.total = 0.0
        self.promised = 0.0
        self.zonal = 0.0
        self.concurrency = 0.0


def _solution_rows(
    solution: Mapping[str, Any], key: str, violations: list[str]
) -> Sequence[Mapping[str, Any]]:
    value = solution.get(key, [])
    if not isinstance(value, list) or not all(isinstance(row, Mapping) for row in value):
        violations.append(f"{key} must be a list of objects")
        return []
    return value


def _rate(row: Mapping[str, Any], where: str, violations: list[str]) -> float | None:
    value = row.get("requests_per_s")
    if not _is_number(value) or not math.isfinite(value):
        violations.append(f"{where}: requests_per_s must be a finite number, got {value!r}")
        return None
    if value < 0:
        violations.append(f"{where}: requests_per_s is negative ({_fmt(value)})")
        return None
    return float(value)


def _read_replicas(
    spec: SpecProblem, solution: Mapping[str, Any], violations: list[str]
) -> dict[tuple[str, str], int]:
    replicas: dict[tuple[str, str], int] = {}
    for i, row in enumerate(_solution_rows(solution, "replicas", violations)):
        where = f"replicas[{i}]"
        zone, shape, count = row.get("zone"), row.get("shape"), row.get("replicas")
        if zone not in spec.region_of_zone:
            violations.append(f"{where}: unknown zone {zone!r}")
            continue
        if shape not in spec.shapes:
            violations.append(f"{where}: unknown shape {shape!r}")
            continue
        if not _is_number(count) or not math.isfinite(count) or count != int(count):
            violations.append(f"{where}: replicas must be a whole number, got {count!r}")
            continue
        if count < 0:
            violations.append(f"{where}: replicas is negative ({count})")
            continue
        key = (str(zone), str(shape))
        if key in replicas:
            violations.append(f"{where}: duplicate replicas row for {zone}/{shape}")
            continue
        replicas[key] = int(count)
    return replicas


def _read_routing(
    spec: SpecProblem, solution: Mapping[str, Any], violations: list[str]
) -> dict[tuple[str, str, str], float]:
    routing: dict[tuple[str, str, str], float] = {}
    for i, row in enumerate(_solution_rows(solution, "routing", violations)):
        where = f"routing[{i}]"
        demand_id, region, shape_name = row.get("demand"), row.get("region"), row.get("shape")
        if demand_id not in spec.demands:
            violations.append(f"{where}: unknown demand {demand_id!r}")
            continue
        if region not in spec.regions:
            violations.append(f"{where}: unknown region {region!r}")
            continue
        if shape_name not in spec.shapes:
            violations.append(f"{where}: unknown shape {shape_name!r}")
            continue
        rate = _rate(row, where, violations)
        if rate is None:
            continue
        demand, shape = spec.demands[str(demand_id)], spec.shapes[str(shape_name)]
        # A row that breaks a routing rule is still counted in the sums below, so that one
        # mistake is reported once and not again as a conservation or capacity error.
        if shape.model != demand.model:
            violations.append(
                f"{where}: demand {demand.id} is for model {demand.model}, "
                f"shape {shape.name} serves {shape.model}"
            )
        elif rate > 0 and shape.name in demand.excluded_shapes:
            violations.append(f"{where}: {demand.id} is routed to {shape.name}, which it excludes")
        elif rate > 0 and _prefill_floor_s(demand, shape) > (demand.ttft_slo_s or math.inf):
            violations.append(
                f"{where}: {demand.id} is routed to {shape.name}, whose p95 prompt prefill "
                f"({_fmt(_prefill_floor_s(demand, shape))} s) exceeds its "
                f"{_fmt(demand.ttft_slo_s or 0.0)} s TTFT objective"
            )
        elif rate > 0 and not spec.may_serve(demand, str(region)):
            if str(region) not in demand.allowed_regions:
                violations.append(f"{where}: {demand.id} is not allowed in region {region}")
            else:
                rtt = spec.rtt_ms(demand.home_region, str(region))
                reach = "no rtt link" if rtt is None else f"rtt {_fmt(rtt)} ms"
                limit = (
                    "no spill allowed"
                    if demand.max_spill_rtt_ms is None
                    else f"limit {_fmt(demand.max_spill_rtt_ms)} ms"
                )
                violations.append(
                    f"{where}: {demand.id} spills from {demand.home_region} to {region} "
                    f"({reach}, {limit})"
                )
        key = (demand.id, str(region), shape.name)
        if key in routing:
            violations.append(f"{where}: duplicate routing row for {'/'.join(key)}")
            continue
        routing[key] = rate
    return routing


def _read_unserved(
    spec: SpecProblem, solution: Mapping[str, Any], violations: list[str]
) -> dict[str, float]:
    unserved: dict[str, float] = {}
    for i, row in enumerate(_solution_rows(solution, "unserved", violations)):
        where = f"unserved[{i}]"
        demand_id = row.get("demand")
        if demand_id not in spec.demands:
            violations.append(f"{where}: unknown demand {demand_id!r}")
            continue
        rate = _rate(row, where, violations)
        if rate is None:
            continue
        if demand_id in unserved:
            violations.append(f"{where}: duplicate unserved row for {demand_id}")
            continue
        unserved[str(demand_id)] = rate
    return unserved


def _check_header(solution: Mapping[str, Any], violations: list[str]) -> None:
    if solution.get("format") != SOLUTION_FORMAT:
        violations.append(f"format must be {SOLUTION_FORMAT!r}, got {solution.get('format')!r}")
    status = solution.get("status")
    if status not in ("optimal", "feasible", "invalid"):
        violations.append(f"status must be optimal, feasible or invalid, got {status!r}")
    if status == "invalid":
        violations.append(
            f"status is invalid for a valid problem (message {solution.get('message')!r}); "
            "a valid problem always gets a plan"
        )
        return
    for key in ("cost_per_hour", "unserved_requests_per_s"):
        value = solution.get(key)
        if not _is_number(value) or not math.isfinite(value):
            violations.append(f"{key} must be a finite number, got {value!r}")
    gap = solution.get("gap")
    if gap is not None and (not _is_number(gap) or not gap >= 0):
        violations.append(f"gap must be a non-negative number or null, got {gap!r}")
    binding = solution.get("binding", [])
    if not isinstance(binding, list) or not all(isinstance(b, str) for b in binding):
        violations.append("binding must be a list of sentences")


def verify(problem: Mapping[str, Any], solution: Mapping[str, Any]) -> list[str]:
    """Every hard-constraint violation of ``solution`` for ``problem``, one sentence each.

    An empty list means the plan satisfies the v1 contract: rows name known zones, shapes,
    demands and regions; counts are whole and rates non-negative; each demand's routing plus
    unserved equals its planned rate; capacity, N+1 (wherever N ≥ 1), zone loss per zone,
    concurrency and inventory hold; routing stays within allowed regions and the spill rtt;
    ``unserved_requests_per_s`` and ``cost_per_hour`` match the rows. An invalid problem
    must get status ``invalid`` (and then no plan is checked).
    """
    try:
        spec = read_spec_problem(problem)
    except PlannerInputError as error:
        if solution.get("status") == "invalid":
            return []
        return [
            f"problem is invalid ({error}) but the solution has status {solution.get('status')!r}"
        ]

    violations: list[str] = []
    _check_header(solution, violations)
    if solution.get("status") == "invalid":
        return violations

    replicas = _read_replicas(spec, solution, violations)
    routing = _read_routing(spec, solution, violations)
    unserved = _read_unserved(spec, solution, violations)
    hosted = _read_hosted(spec, solution, violations)
    _check_demands(spec, solution, routing, unserved, violations, hosted)
    _check_regions(spec, replicas, routing, violations)
    _check_inventory(spec, replicas, violations)
    _check_quotas(spec, hosted, violations)
    _check_cost(spec, solution, replicas, violations, hosted)
    return violations


def hosted_cost_per_hour(
    spec: SpecProblem, demand: SpecDemand, provider: str, rate: float
) -> float:
    """$/hour of ``rate`` requests/s of ``demand`` on hosted ``provider``:
    rate × 3600 × (prompt × input price + output × output price) / 1e6."""
    p = spec.hosted[provider]
    per_request = (
        demand.prompt_tokens * p.input_price_per_mtok
        + demand.output_tokens * p.output_price_per_mtok
    ) / 1e6
    return rate * 3600.0 * per_request


def _hosted_refusal(demand: SpecDemand, provider: SpecHosted) -> str | None:
    if not demand.hosted_overflow:
        return "the demand does not allow hosted overflow"
    if demand.model not in provider.models:
        return f"{provider.name} does not serve {demand.model}"
    if provider.region not in demand.allowed_regions:
        return f"{provider.name}'s region {provider.region} is not an allowed region"
    if demand.ttft_slo_s is not None and provider.p95_ttft_s > demand.ttft_slo_s:
        return (
            f"{provider.name}'s p95 TTFT {_fmt(provider.p95_ttft_s)} s is above the "
            f"{_fmt(demand.ttft_slo_s)} s objective"
        )
    return None


def _read_hosted(
    spec: SpecProblem, solution: Mapping[str, Any], violations: list[str]
) -> dict[tuple[str, str], float]:
    """(demand, provider) -> requests/s of the solution's hosted rows, each row checked:
    known and eligible, its tokens per minute and $/hour those of its rate."""
    out: dict[tuple[str, str], float] = {}
    for i, row in enumerate(_solution_rows(solution, "hosted", violations)):
        where = f"hosted[{i}]"
        demand_id, provider = row.get("demand"), row.get("provider")
        if demand_id not in spec.demands:
            violations.append(f"{where}: unknown demand {demand_id!r}")
            continue
        if provider not in spec.hosted:
            violations.append(f"{where}: unknown hosted provider {provider!r}")
            continue
        rate = _rate(row, where, violations)
        if rate is None:
            continue
        demand = spec.demands[str(demand_id)]
        refusal = _hosted_refusal(demand, spec.hosted[str(provider)])
        if refusal is not None:
            violations.append(f"{where}: demand {demand_id} may not use {provider}: {refusal}")
        tpm = rate * 60.0 * (demand.prompt_tokens + demand.output_tokens)
        for key, expected in (
            ("tokens_per_minute", tpm),
            ("cost_per_hour", hosted_cost_per_hour(spec, demand, str(provider), rate)),
        ):
            value = row.get(key)
            if not _is_number(value) or not math.isfinite(value):
                violations.append(f"{where}: {key} must be a finite number, got {value!r}")
            elif _differs(float(value), expected, abs(float(value)), abs(expected)):
                violations.append(
                    f"{where}: {key} {_fmt(float(value))} != recomputed {_fmt(expected)}"
                )
        key2 = (str(demand_id), str(provider))
        if key2 in out:
            violations.append(f"{where}: duplicate hosted row for {demand_id}/{provider}")
            continue
        out[key2] = rate
    return out


def _check_quotas(
    spec: SpecProblem, hosted: Mapping[tuple[str, str], float], violations: list[str]
) -> None:
    """Per provider: Σ rate × 60 × (prompt + output) ≤ tpm_limit; Σ rate × 60 ≤ rpm_limit."""
    tpm: dict[str, float] = defaultdict(float)
    rpm: dict[str, float] = defaultdict(float)
    for (demand_id, provider), rate in hosted.items():
        demand = spec.demands[demand_id]
        tpm[provider] += rate * 60.0 * (demand.prompt_tokens + demand.output_tokens)
        rpm[provider] += rate * 60.0
    for provider in sorted(tpm):
        p = spec.hosted[provider]
        if _exceeds(tpm[provider], p.tpm_limit, tpm[provider], p.tpm_limit):
            violations.append(
                f"hosted {provider}: {_fmt(tpm[provider])} tokens/min > tpm_limit "
                f"{_fmt(p.tpm_limit)}"
            )
        if p.rpm_limit is not None and _exceeds(
            rpm[provider], p.rpm_limit, rpm[provider], p.rpm_limit
        ):
            violations.append(
                f"hosted {provider}: {_fmt(rpm[provider])} requests/min > rpm_limit "
                f"{_fmt(p.rpm_limit)}"
            )


def _check_demands(
    spec: SpecProblem,
    solution: Mapping[str, Any],
    routing: Mapping[tuple[str, str, str], float],
    unserved: Mapping[str, float],
    violations: list[str],
    hosted: Mapping[tuple[str, str], float] | None = None,
) -> None:
    served: dict[str, list[float]] = defaultdict(list)
    for (demand_id, _region, _shape), rate in routing.items():
        served[demand_id].append(rate)
    for (demand_id, _provider), rate in (hosted or {}).items():
        served[demand_id].append(rate)
    for demand in spec.demands.values():
        rates = served.get(demand.id, [])
        u = unserved.get(demand.id, 0.0)
        lhs = sum(rates) + u
        planned = demand.planned_rate
        if _differs(lhs, planned, sum(abs(r) for r in rates) + abs(u), abs(planned)):
            violations.append(
                f"demand {demand.id}: routed {_fmt(sum(rates))} + unserved {_fmt(u)} "
                f"!= planned rate {_fmt(planned)} requests/s"
            )
    total = sum(unserved.values())
    reported = solution.get("unserved_requests_per_s")
    if _is_number(reported) and _differs(float(reported), total, abs(float(reported)), total):
        violations.append(
            f"unserved_requests_per_s {_fmt(float(reported))} != sum of unserved rows {_fmt(total)}"
        )


def _check_regions(
    spec: SpecProblem,
    replicas: Mapping[tuple[str, str], int],
    routing: Mapping[tuple[str, str, str], float],
    violations: list[str],
) -> None:
    loads: dict[tuple[str, str], _Load] = defaultdict(_Load)
    for (demand_id, region, shape_name), rate in routing.items():
        demand, shape = spec.demands[demand_id], spec.shapes[shape_name]
        work = rate * cost_per_request(demand, shape)
        load = loads[(region, shape_name)]
        load.total += work
        if demand.promise_level >= 1:
            load.promised += work
        if demand.promise_level >= 2:
            load.zonal += work
        if demand.residence_s is not None:
            load.concurrency += rate * demand.residence_s
    per_zone: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for (zone, shape_name), count in replicas.items():
        per_zone[(spec.region_of_zone[zone], shape_name)][zone] = count

    for key in sorted(set(loads) | set(per_zone)):
        region, shape_name = key
        shape = spec.shapes[shape_name]
        load = loads.get(key, _Load())
        zones = per_zone.get(key, {})
        n_total = sum(zones.values())
        u = shape.target_utilization
        label = f"{region} {shape_name}"
        capacity = u * n_total
        if _exceeds(load.total, capacity, load.total, capacity):
            violations.append(
                f"capacity {label}: load {_fmt(load.total)} replica-s/s > "
                f"{_fmt(u)} x {n_total} replicas = {_fmt(capacity)}"
            )
        if n_total >= 1:
            spare = u * (n_total - 1)
            if _exceeds(load.promised, spare, load.promised, u * (n_total + 1)):
                violations.append(
                    f"N+1 {label}: promised load {_fmt(load.promised)} replica-s/s > "
                    f"{_fmt(u)} x ({n_total} - 1) = {_fmt(spare)}"
                )
        if load.zonal > 0:
            for zone in spec.regions[region].zones:
                n_zone = zones.get(zone, 0)
                survivors = u * (n_total - n_zone)
                if _exceeds(load.zonal, survivors, load.zonal, u * (n_total + n_zone)):
                    violations.append(
                        f"zone loss {zone} for {shape_name}: zone-promised load "
                        f"{_fmt(load.zonal)} replica-s/s > {_fmt(u)} x ({n_total} - {n_zone}) "
                        f"= {_fmt(survivors)} (a zone promise needs the shape in two zones)"
                    )
        if shape.max_concurrency is not None:
            slots = float(shape.max_concurrency * n_total)
            if _exceeds(load.concurrency, slots, load.concurrency, slots):
                violations.append(
                    f"concurrency {label}: {_fmt(load.concurrency)} requests in flight > "
                    f"{_fmt(shape.max_concurrency)} x {n_total} replicas = {_fmt(slots)}"
                )


def _check_inventory(
    spec: SpecProblem, replicas: Mapping[tuple[str, str], int], violations: list[str]
) -> None:
    used: dict[tuple[str, str], int] = defaultdict(int)
    for (zone, shape_name), count in replicas.items():
        shape = spec.shapes[shape_name]
        used[(zone, shape.accelerator)] += count * shape.gpus
    for (zone, accelerator), gpus in sorted(used.items()):
        limit = spec.inventory_gpus(zone, accelerator)
        if gpus > limit:
            violations.append(
                f"inventory {zone} {accelerator}: {gpus} GPUs planned > {limit} available"
            )


def plan_cost_per_hour(spec: SpecProblem, replicas: Iterable[tuple[str, str, int]]) -> float:
    """$/hour of (zone, shape, replicas) rows: Σ n × gpus × price × region multiplier."""
    return sum(
        count * spec.gpu_hour_price(spec.region_of_zone[zone], spec.shapes[shape])
        for zone, shape, count in replicas
    )


def _check_cost(
    spec: SpecProblem,
    solution: Mapping[str, Any],
    replicas: Mapping[tuple[str, str], int],
    violations: list[str],
    hosted: Mapping[tuple[str, str], float] | None = None,
) -> None:
    spend = [
        hosted_cost_per_hour(spec, spec.demands[d], p, rate)
        for (d, p), rate in (hosted or {}).items()
    ]
    reported_hosted = solution.get("hosted_cost_per_hour")
    if reported_hosted is not None:
        if not _is_number(reported_hosted) or not math.isfinite(reported_hosted):
            violations.append(
                f"hosted_cost_per_hour must be a finite number, got {reported_hosted!r}"
            )
        elif _differs(float(reported_hosted), sum(spend), abs(float(reported_hosted)), sum(spend)):
            violations.append(
                f"hosted_cost_per_hour {_fmt(float(reported_hosted))} != recomputed "
                f"{_fmt(sum(spend))} $/hour"
            )
    reported = solution.get("cost_per_hour")
    if not _is_number(reported):
        return
    terms = [
        count * spec.gpu_hour_price(spec.region_of_zone[zone], spec.shapes[shape])
        for (zone, shape), count in replicas.items()
    ] + spend
    total = sum(terms)
    if _differs(float(reported), total, abs(float(reported)), sum(abs(t) for t in terms)):
        violations.append(
            f"cost_per_hour {_fmt(float(reported))} != recomputed {_fmt(total)} $/hour"
        )
