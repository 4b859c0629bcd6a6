"""The placement problem of ``placement-v1``: parsed, validated, typed and frozen.

The format (problem and solution, defaults, what is invalid, the control plane's extensions)
is described in ``docs/placement-format.md``; the version strings and the default target
utilisation below are the only definitions of them in the project.

``parse_problem`` turns a problem dict (the JSON the control plane exports) into a ``Problem``
of frozen dataclasses with the spec's defaults applied, or raises ``ProblemInvalid`` naming
the field (``demands[3].allowed_regions``, ``inventory[2].zone``) and saying what is wrong.

Units are in the names: rates in requests/s, tokens per request, throughput in tokens/s,
prices in $/GPU-hour, round-trip times in ms, residence in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final, Literal

from planner.capacity.sizing import DEFAULT_TARGET_UTILIZATION as DEFAULT_TARGET_UTILIZATION
from planner.errors import PlannerInputError
from planner.placement import checks

# The problem and solution formats: docs/placement-format.md.
PROBLEM_FORMAT: Final = "placement-problem/v1"
# The solution document's version string (``planner.placement.solver`` writes it).
SOLUTION_FORMAT: Final = "placement-solution/v1"

Promise = Literal["none", "n+1", "zone"]
PROMISES: Final[tuple[Promise, ...]] = ("none", "n+1", "zone")
# Promise strength: "n+1" and "zone" demands both count in the N+1 row, "zone" alone in the
# zone-loss rows.
PROMISE_LEVEL: Final[Mapping[Promise, int]] = MappingProxyType({"none": 0, "n+1": 1, "zone": 2})


class ProblemInvalid(PlannerInputError):
    """A placement problem breaks a rule of ``placement-v1``.

    ``argument`` is the field path (``demands[3].allowed_regions``); ``message`` says what is
    wrong with it.
    """


@dataclass(frozen=True, slots=True)
class Region:
    """A cloud region: its zones (failure domains) and a price multiplier on GPU-hours."""

    name: str
    geo: str | None
    zones: tuple[str, ...]
    price_multiplier: float = 1.0


@dataclass(frozen=True, slots=True)
class Accelerator:
    """A GPU type and its price in $/GPU-hour."""

    name: str
    memory_gb: float | None
    price_per_gpu_hour: float


@dataclass(frozen=True, slots=True)
class InventoryRow:
    """GPUs of one accelerator type available in one zone."""

    zone: str
    accelerator: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Shape:
    """A replica shape: one model on ``gpus`` GPUs of one accelerator type.

    ``prefill_tokens_per_s`` and ``decode_tokens_per_s`` are the benchmarked aggregate rates of
    one replica; ``max_concurrency`` the sequences it holds (None: not checked);
    ``target_utilization`` the share of a replica the plan may fill, in (0, 1].
    """

    name: str
    model: str
    accelerator: str
    gpus: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    max_concurrency: float | None
    target_utilization: float


@dataclass(frozen=True, slots=True)
class Rtt:
    """Round-trip time between two regions in ms; holds in both directions."""

    from_region: str
    to_region: str
    ms: float


@dataclass(frozen=True, slots=True)
class Demand:
    """One tenant workload on one model, with its residency, spill and failure promise.

    ``requests_per_s × burst`` is the planned rate. ``residence_s`` (None: not checked) is the
    mean time a request is in the system, for the concurrency check; ``max_spill_rtt_ms``
    (None: no spill) is the largest rtt from ``home_region`` to a region that may serve it.
    A lower ``priority`` is more important.
    """

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
    promise: Promise
    priority: int
    #: p95 time to first token the demand's tier promises, seconds (None: no SLO to check).
    ttft_slo_s: float | None = None
    #: Prompt and output tokens of the 95th-percentile request (None: unknown).
    prompt_tokens_p95: float | None = None
    output_tokens_p95: float | None = None
    #: Burstiness of the arrivals: the index of dispersion a synthesised replay uses (1:
    #: Poisson; ``planner.capacity.burstiness``).
    arrival_scv: float = 1.0
    #: Shapes a replay found unable to hold the objective at any replica count
    #: (``planner.placement.verified``): not eligible for this demand.
    excluded_shapes: tuple[str, ...] = ()
    # The control plane's extensions (docs/placement-format.md, "What the control plane
    # adds"): the planner does not read them; they are typed here so that no reader of a plan
    # goes back to the raw document for them.
    #: The tenant's tier name (None: not given).
    tier: str | None = None
    #: How ``requests_per_s`` was forecast from telemetry (None: sized from the profile).
    forecast: Mapping[str, object] | None = None
    #: The id of the stored request trace a re-plan replays (None: none).
    request_trace: object | None = None
    #: The burst before a replay raised it (None: not raised).
    burst_before_replay: float | None = None
    #: May the plan send part of this demand to a hosted API (``Problem.hosted``)? The
    #: control plane sets it from the tenant's tier policy.
    hosted_overflow: bool = False

    @property
    def tokens_per_request(self) -> float:
        """Prompt + output tokens of one request: what a tokens-per-minute quota counts."""
        return self.prompt_tokens + self.output_tokens

    @property
    def planned_requests_per_s(self) -> float:
        """Planned rate ``R_d = requests_per_s × burst``, in requests/s."""
        return self.requests_per_s * self.burst

    @property
    def promise_level(self) -> int:
        """0 for "none", 1 for "n+1", 2 for "zone"."""
        return PROMISE_LEVEL[self.promise]


@dataclass(frozen=True, slots=True)
class HostedProvider:
    """A hosted inference API the plan may send overflow to, inside its quotas.

    It serves ``models`` from ``region`` (a region of the problem, for residency), bills $ per
    million input and output tokens, and admits ``tpm_limit`` tokens per minute (input +
    output) and ``rpm_limit`` requests per minute (None: no request quota). ``p95_ttft_s`` is
    its p95 time to first token, held against a demand's ``ttft_slo_s``. It has no zones:
    what it carries is on no replica and in no failure floor.
    """

    name: str
    region: str
    models: tuple[str, ...]
    input_price_per_mtok: float
    output_price_per_mtok: float
    tpm_limit: float
    rpm_limit: float | None
    p95_ttft_s: float

    def cost_per_request(self, demand: Demand) -> float:
        """$ of one request of ``demand`` here: prompt × input price + output × output price."""
        return (
            demand.prompt_tokens * self.input_price_per_mtok
            + demand.output_tokens * self.output_price_per_mtok
        ) / 1e6


@dataclass(frozen=True, slots=True)
class PreviousRow:
    """Replicas of one shape in one zone in the plan now running."""

    zone: str
    shape: str
    replicas: int


@dataclass(frozen=True)
class Problem:
    """A validated placement problem; rows keep their input order (so field paths hold).

    Lookups by name are precomputed; ``previous`` is None when no previous plan was given.
    """

    target_utilization: float
    regions: tuple[Region, ...]
    accelerators: tuple[Accelerator, ...]
    inventory: tuple[InventoryRow, ...]
    shapes: tuple[Shape, ...]
    rtt_ms: tuple[Rtt, ...]
    demands: tuple[Demand, ...]
    previous: tuple[PreviousRow, ...] | None = None
    hosted: tuple[HostedProvider, ...] = ()

    _region_by_name: Mapping[str, Region] = field(init=False, repr=False, compare=False)
    _region_of_zone: Mapping[str, str] = field(init=False, repr=False, compare=False)
    _accelerator_by_name: Mapping[str, Accelerator] = field(init=False, repr=False, compare=False)
    _shape_by_name: Mapping[str, Shape] = field(init=False, repr=False, compare=False)
    _inventory: Mapping[tuple[str, str], int] = field(init=False, repr=False, compare=False)
    _rtt: Mapping[tuple[str, str], float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Frozen: the indexes are set once here, through object.__setattr__.
        region_of_zone = {z: r.name for r in self.regions for z in r.zones}
        rtt: dict[tuple[str, str], float] = {}
        for row in self.rtt_ms:
            rtt[(row.from_region, row.to_region)] = row.ms
            rtt[(row.to_region, row.from_region)] = row.ms
        for r in self.regions:
            rtt[(r.name, r.name)] = 0.0
        indexes: dict[str, object] = {
            "_region_by_name": MappingProxyType({r.name: r for r in self.regions}),
            "_region_of_zone": MappingProxyType(region_of_zone),
            "_accelerator_by_name": MappingProxyType({a.name: a for a in self.accelerators}),
            "_shape_by_name": MappingProxyType({s.name: s for s in self.shapes}),
            "_inventory": MappingProxyType(
                {(row.zone, row.accelerator): row.gpus for row in self.inventory}
            ),
            "_rtt": MappingProxyType(rtt),
        }
        for name, value in indexes.items():
            object.__setattr__(self, name, value)

    def __reduce__(self) -> tuple[type[Problem], tuple[Any, ...]]:
        # Pickled (parts solved on Ray, solver.py) by its rows only: the indexes are
        # rebuilt on the other side (a MappingProxyType does not pickle).
        return (Problem, tuple(getattr(self, f.name) for f in fields(self) if f.init))

    def region(self, name: str) -> Region:
        """The region called ``name``."""
        return self._region_by_name[name]

    def region_of_zone(self, zone: str) -> str:
        """Name of the region that holds ``zone``."""
        return self._region_of_zone[zone]

    def accelerator(self, name: str) -> Accelerator:
        """The accelerator type called ``name``."""
        return self._accelerator_by_name[name]

    def shape(self, name: str) -> Shape:
        """The replica shape called ``name``."""
        return self._shape_by_name[name]

    def inventory_gpus(self, zone: str, accelerator: str) -> int:
        """GPUs of ``accelerator`` in ``zone``; a missing inventory row means 0."""
        return self._inventory.get((zone, accelerator), 0)

    def rtt(self, a: str, b: str) -> float | None:
        """Round-trip time in ms between regions ``a`` and ``b``; None: they cannot talk."""
        return self._rtt.get((a, b))

    def request_cost_s(self, demand: Demand, shape: Shape) -> float:
        """Replica-seconds one request of ``demand`` costs on ``shape`` (the seeds' model).

        ``prompt × (1 − prefix_cache_hit_rate) / prefill_tokens_per_s +
        output / decode_tokens_per_s``: a prefix-cache hit removes prefill work only.
        """
        prefill = demand.prompt_tokens * (1.0 - demand.prefix_cache_hit_rate)
        return (
            prefill / shape.prefill_tokens_per_s + demand.output_tokens / shape.decode_tokens_per_s
        )

    def ineligible_reason(self, demand: Demand, shape: Shape) -> str | None:
        """Why ``shape`` can never meet ``demand``'s TTFT objective at any load, or None.

        The 95th-percentile prompt's prefill alone, ``prompt_tokens_p95 × (1 − hit rate) /
        prefill_tokens_per_s``, is a floor under the p95 time to first token that no number
        of replicas lowers: where it exceeds ``ttft_slo_s`` the shape is not eligible.
        """
        if shape.name in demand.excluded_shapes:
            return (
                f"its replayed arrivals miss the {demand.ttft_slo_s:g} s p95 TTFT objective on "
                f"{shape.name} at any replica count (the prefill and round trip alone are too "
                "slow)"
            )
        if demand.ttft_slo_s is None or demand.prompt_tokens_p95 is None:
            return None
        prefill_s = (
            demand.prompt_tokens_p95 * (1.0 - demand.prefix_cache_hit_rate)
        ) / shape.prefill_tokens_per_s
        if prefill_s <= demand.ttft_slo_s:
            return None
        return (
            f"the p95 prompt ({demand.prompt_tokens_p95:,.0f} tokens) takes {prefill_s:.2f} s to "
            f"prefill on {shape.name} before any queueing, above the {demand.ttft_slo_s:g} s "
            "p95 TTFT objective"
        )

    def hosted_ineligible_reason(self, demand: Demand, provider: HostedProvider) -> str | None:
        """Why ``demand`` may not overflow to ``provider``, or None where it may.

        It may where its tier allows hosted overflow, the provider serves its model from one
        of its allowed regions, and (where the demand has a TTFT objective) the provider's
        p95 time to first token is within it.
        """
        if not demand.hosted_overflow:
            return "its tier does not allow hosted overflow"
        if demand.model not in provider.models:
            return f"{provider.name} does not serve {demand.model}"
        if provider.region not in demand.allowed_regions:
            return (
                f"{provider.name} serves from {provider.region}, outside its allowed regions "
                f"({', '.join(demand.allowed_regions)})"
            )
        if demand.ttft_slo_s is not None and provider.p95_ttft_s > demand.ttft_slo_s:
            return (
                f"{provider.name}'s p95 TTFT of {provider.p95_ttft_s:g} s is above its "
                f"{demand.ttft_slo_s:g} s objective"
            )
        return None

    def serving_regions(self, demand: Demand) -> tuple[str, ...]:
        """Regions that may serve ``demand``: allowed, and home or within its spill rtt."""
        out: list[str] = []
        for r in demand.allowed_regions:
            if r == demand.home_region:
                out.append(r)
                continue
            if demand.max_spill_rtt_ms is None:
                continue
            ms = self.rtt(demand.home_region, r)
            if ms is not None and ms <= demand.max_spill_rtt_ms:
                out.append(r)
        return tuple(out)

    def replica_price_per_hour(self, zone: str, shape: Shape) -> float:
        """$/hour of one replica of ``shape`` in ``zone``: GPUs × GPU price × region multiplier."""
        region = self.region(self.region_of_zone(zone))
        price = self.accelerator(shape.accelerator).price_per_gpu_hour
        return shape.gpus * price * region.price_multiplier


# --------------------------------------------------------------------------------------------
# Parsing. Each helper takes the field path it reports on failure.


def _fail(path: str, message: str) -> ProblemInvalid:
    return ProblemInvalid(path, message)


def _mapping(value: object, path: str) -> Mapping[str, object]:
    return checks.mapping(value, path, ProblemInvalid)


def _list(value: object, path: str) -> Sequence[object]:
    return checks.sequence(value, path, ProblemInvalid)


def _required(row: Mapping[str, object], key: str, path: str) -> object:
    return checks.required(row, key, path, ProblemInvalid)


def _name(value: object, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, f"must be a non-empty string, got {value!r}")
    return value


def _number(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(path, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise _fail(path, f"must be a finite number, got {value!r}")
    return float(value)


def _non_negative(value: object, path: str) -> float:
    v = _number(value, path)
    if v < 0:
        raise _fail(path, f"must be zero or more, got {value!r}")
    return v


def _positive(value: object, path: str) -> float:
    v = _number(value, path)
    if v <= 0:
        raise _fail(path, f"must be a positive number, got {value!r}")
    return v


def _whole(value: object, path: str, minimum: int | None = 0) -> int:
    v = _number(value, path)
    if not v.is_integer():
        raise _fail(path, f"must be a whole number, got {value!r}")
    if minimum is not None and v < minimum:
        raise _fail(path, f"must be at least {minimum}, got {value!r}")
    return int(v)


def _utilization(value: object, path: str) -> float:
    v = _number(value, path)
    if not 0 < v <= 1:
        raise _fail(path, f"must be in (0, 1], got {value!r}")
    return v


def _known(name: str, known: Mapping[str, object] | set[str], kind: str, path: str) -> str:
    if name not in known:
        listed = ", ".join(sorted(known)[:8]) + (", ..." if len(known) > 8 else "")
        raise _fail(path, f"unknown {kind} {name!r} (known: {listed or 'none'})")
    return name


def _optional(row: Mapping[str, object], key: str) -> object | None:
    return row.get(key)


def _parse_regions(data: Mapping[str, object]) -> tuple[Region, ...]:
    regions: list[Region] = []
    seen_regions: set[str] = set()
    seen_zones: set[str] = set()
    for i, raw in enumerate(_list(_required(data, "regions", ""), "regions")):
        path = f"regions[{i}]"
        row = _mapping(raw, path)
        name = _name(_required(row, "name", path), f"{path}.name")
        if name in seen_regions:
            raise _fail(f"{path}.name", f"duplicate region name {name!r}")
        seen_regions.add(name)
        geo_raw = _optional(row, "geo")
        geo = None if geo_raw is None else _name(geo_raw, f"{path}.geo")
        zones: list[str] = []
        for j, z in enumerate(_list(_required(row, "zones", path), f"{path}.zones")):
            zone = _name(z, f"{path}.zones[{j}]")
            if zone in seen_zones:
                raise _fail(f"{path}.zones[{j}]", f"duplicate zone name {zone!r}")
            seen_zones.add(zone)
            zones.append(zone)
        mult_raw = _optional(row, "price_multiplier")
        mult = 1.0 if mult_raw is None else _non_negative(mult_raw, f"{path}.price_multiplier")
        regions.append(Region(name=name, geo=geo, zones=tuple(zones), price_multiplier=mult))
    return tuple(regions)


def _parse_accelerators(data: Mapping[str, object]) -> tuple[Accelerator, ...]:
    out: list[Accelerator] = []
    seen: set[str] = set()
    for i, raw in enumerate(_list(_required(data, "accelerators", ""), "accelerators")):
        path = f"accelerators[{i}]"
        row = _mapping(raw, path)
        name = _name(_required(row, "name", path), f"{path}.name")
        if name in seen:
            raise _fail(f"{path}.name", f"duplicate accelerator name {name!r}")
        seen.add(name)
        mem_raw = _optional(row, "memory_gb")
        mem = None if mem_raw is None else _non_negative(mem_raw, f"{path}.memory_gb")
        price = _non_negative(
            _required(row, "price_per_gpu_hour", path), f"{path}.price_per_gpu_hour"
        )
        out.append(Accelerator(name=name, memory_gb=mem, price_per_gpu_hour=price))
    return tuple(out)


def _parse_inventory(
    data: Mapping[str, object], zones: set[str], accelerators: set[str]
) -> tuple[InventoryRow, ...]:
    out: list[InventoryRow] = []
    seen: set[tuple[str, str]] = set()
    raw_rows = _optional(data, "inventory")
    for i, raw in enumerate(_list(raw_rows if raw_rows is not None else [], "inventory")):
        path = f"inventory[{i}]"
        row = _mapping(raw, path)
        zone = _known(
            _name(_required(row, "zone", path), f"{path}.zone"), zones, "zone", f"{path}.zone"
        )
        acc = _known(
            _name(_required(row, "accelerator", path), f"{path}.accelerator"),
            accelerators,
            "accelerator",
            f"{path}.accelerator",
        )
        if (zone, acc) in seen:
            raise _fail(path, f"duplicate inventory row for zone {zone!r} and accelerator {acc!r}")
        seen.add((zone, acc))
        gpus = _whole(_required(row, "gpus", path), f"{path}.gpus")
        out.append(InventoryRow(zone=zone, accelerator=acc, gpus=gpus))
    return tuple(out)


def _parse_shapes(
    data: Mapping[str, object], accelerators: set[str], default_util: float
) -> tuple[Shape, ...]:
    out: list[Shape] = []
    seen: set[str] = set()
    for i, raw in enumerate(_list(_required(data, "shapes", ""), "shapes")):
        path = f"shapes[{i}]"
        row = _mapping(raw, path)
        name = _name(_required(row, "name", path), f"{path}.name")
        if name in seen:
            raise _fail(f"{path}.name", f"duplicate shape name {name!r}")
        seen.add(name)
        model = _name(_required(row, "model", path), f"{path}.model")
        acc = _known(
            _name(_required(row, "accelerator", path), f"{path}.accelerator"),
            accelerators,
            "accelerator",
            f"{path}.accelerator",
        )
        gpus = _whole(_required(row, "gpus", path), f"{path}.gpus", minimum=1)
        prefill = _positive(
            _required(row, "prefill_tokens_per_s", path), f"{path}.prefill_tokens_per_s"
        )
        decode = _positive(
            _required(row, "decode_tokens_per_s", path), f"{path}.decode_tokens_per_s"
        )
        conc_raw = _optional(row, "max_concurrency")
        conc = None if conc_raw is None else _non_negative(conc_raw, f"{path}.max_concurrency")
        util_raw = _optional(row, "target_utilization")
        util = (
            default_util
            if util_raw is None
            else _utilization(util_raw, f"{path}.target_utilization")
        )
        out.append(
            Shape(
                name=name,
                model=model,
                accelerator=acc,
                gpus=gpus,
                prefill_tokens_per_s=prefill,
                decode_tokens_per_s=decode,
                max_concurrency=conc,
                target_utilization=util,
            )
        )
    return tuple(out)


def _parse_rtt(data: Mapping[str, object], regions: set[str]) -> tuple[Rtt, ...]:
    out: list[Rtt] = []
    seen: dict[frozenset[str], float] = {}
    raw_rows = _optional(data, "rtt_ms")
    for i, raw in enumerate(_list(raw_rows if raw_rows is not None else [], "rtt_ms")):
        path = f"rtt_ms[{i}]"
        row = _mapping(raw, path)
        a = _known(
            _name(_required(row, "from", path), f"{path}.from"), regions, "region", f"{path}.from"
        )
        b = _known(_name(_required(row, "to", path), f"{path}.to"), regions, "region", f"{path}.to")
        ms = _non_negative(_required(row, "ms", path), f"{path}.ms")
        if a == b and ms != 0:
            raise _fail(f"{path}.ms", f"a region's rtt to itself is 0, got {ms!r}")
        pair = frozenset((a, b))
        # A repeated pair (either direction) is harmless when it agrees; a disagreeing one
        # would make the plan depend on row order.
        if pair in seen and seen[pair] != ms:
            raise _fail(path, f"duplicate rtt row for {a!r} and {b!r} with a different ms")
        seen[pair] = ms
        out.append(Rtt(from_region=a, to_region=b, ms=ms))
    return tuple(out)


def _parse_demands(
    data: Mapping[str, object], regions: tuple[str, ...], models: set[str]
) -> tuple[Demand, ...]:
    out: list[Demand] = []
    seen: set[str] = set()
    region_set = set(regions)
    raw_rows = _optional(data, "demands")
    for i, raw in enumerate(_list(raw_rows if raw_rows is not None else [], "demands")):
        path = f"demands[{i}]"
        row = _mapping(raw, path)
        demand_id = _name(_required(row, "id", path), f"{path}.id")
        if demand_id in seen:
            raise _fail(f"{path}.id", f"duplicate demand id {demand_id!r}")
        seen.add(demand_id)
        tenant_raw = _optional(row, "tenant")
        tenant = demand_id if tenant_raw is None else _name(tenant_raw, f"{path}.tenant")
        model = _known(
            _name(_required(row, "model", path), f"{path}.model"),
            models,
            "model (no shape serves it)",
            f"{path}.model",
        )
        home = _known(
            _name(_required(row, "home_region", path), f"{path}.home_region"),
            region_set,
            "region",
            f"{path}.home_region",
        )
        allowed_raw = _optional(row, "allowed_regions")
        if allowed_raw is None:
            allowed = regions
        else:
            names: list[str] = []
            for j, r in enumerate(_list(allowed_raw, f"{path}.allowed_regions")):
                name = _name(r, f"{path}.allowed_regions[{j}]")
                _known(name, region_set, "region", f"{path}.allowed_regions")
                if name not in names:
                    names.append(name)
            if not names:
                raise _fail(
                    f"{path}.allowed_regions",
                    "names no region (a residency list must allow at least one region)",
                )
            allowed = tuple(names)
        rate = _non_negative(_required(row, "requests_per_s", path), f"{path}.requests_per_s")
        burst_raw = _optional(row, "burst")
        burst = 1.0 if burst_raw is None else _number(burst_raw, f"{path}.burst")
        if burst < 1:
            raise _fail(f"{path}.burst", f"must be at least 1, got {burst_raw!r}")
        prompt = _non_negative(_required(row, "prompt_tokens", path), f"{path}.prompt_tokens")
        output = _non_negative(_required(row, "output_tokens", path), f"{path}.output_tokens")
        hit_raw = _optional(row, "prefix_cache_hit_rate")
        hit = 0.0 if hit_raw is None else _number(hit_raw, f"{path}.prefix_cache_hit_rate")
        if not 0 <= hit <= 1:
            raise _fail(f"{path}.prefix_cache_hit_rate", f"must be in [0, 1], got {hit_raw!r}")
        res_raw = _optional(row, "residence_s")
        residence = None if res_raw is None else _non_negative(res_raw, f"{path}.residence_s")
        spill_raw = _optional(row, "max_spill_rtt_ms")
        spill = None if spill_raw is None else _non_negative(spill_raw, f"{path}.max_spill_rtt_ms")
        promise_raw = _optional(row, "promise")
        if promise_raw is None:
            promise: Promise = "none"
        elif promise_raw in PROMISES:
            promise = promise_raw
        else:
            raise _fail(f"{path}.promise", f"must be one of none, n+1, zone; got {promise_raw!r}")
        prio_raw = _optional(row, "priority")
        priority = 0 if prio_raw is None else _whole(prio_raw, f"{path}.priority", minimum=None)
        slo_raw = _optional(row, "ttft_slo_s")
        slo = None if slo_raw is None else _positive(slo_raw, f"{path}.ttft_slo_s")
        p95_raw = _optional(row, "prompt_tokens_p95")
        prompt_p95 = (
            None if p95_raw is None else _non_negative(p95_raw, f"{path}.prompt_tokens_p95")
        )
        out95_raw = _optional(row, "output_tokens_p95")
        output_p95 = (
            None if out95_raw is None else _non_negative(out95_raw, f"{path}.output_tokens_p95")
        )
        scv_raw = _optional(row, "arrival_scv")
        scv = 1.0 if scv_raw is None else _positive(scv_raw, f"{path}.arrival_scv")
        tier_raw = _optional(row, "tier")
        tier = None if tier_raw is None else _name(tier_raw, f"{path}.tier")
        forecast_raw = _optional(row, "forecast")
        forecast = (
            None
            if forecast_raw is None
            else MappingProxyType(dict(_mapping(forecast_raw, f"{path}.forecast")))
        )
        before_raw = _optional(row, "burst_before_replay")
        before = None if before_raw is None else _number(before_raw, f"{path}.burst_before_replay")
        excluded_raw = _optional(row, "excluded_shapes")
        excluded = tuple(
            _name(name, f"{path}.excluded_shapes[{j}]")
            for j, name in enumerate(_list(excluded_raw or [], f"{path}.excluded_shapes"))
        )
        overflow_raw = _optional(row, "hosted_overflow")
        if overflow_raw is not None and not isinstance(overflow_raw, bool):
            raise _fail(f"{path}.hosted_overflow", f"must be true or false, got {overflow_raw!r}")
        out.append(
            Demand(
                id=demand_id,
                tenant=tenant,
                model=model,
                home_region=home,
                allowed_regions=allowed,
                requests_per_s=rate,
                burst=burst,
                prompt_tokens=prompt,
                output_tokens=output,
                prefix_cache_hit_rate=hit,
                residence_s=residence,
                max_spill_rtt_ms=spill,
                promise=promise,
                priority=priority,
                ttft_slo_s=slo,
                prompt_tokens_p95=prompt_p95,
                output_tokens_p95=output_p95,
                arrival_scv=scv,
                excluded_shapes=excluded,
                tier=tier,
                forecast=forecast,
                request_trace=_optional(row, "request_trace"),
                burst_before_replay=before,
                hosted_overflow=bool(overflow_raw),
            )
        )
    return tuple(out)


def _parse_hosted(data: Mapping[str, object], regions: set[str]) -> tuple[HostedProvider, ...]:
    out: list[HostedProvider] = []
    seen: set[str] = set()
    raw_rows = _optional(data, "hosted")
    for i, raw in enumerate(_list(raw_rows if raw_rows is not None else [], "hosted")):
        path = f"hosted[{i}]"
        row = _mapping(raw, path)
        name = _name(_required(row, "name", path), f"{path}.name")
        if name in seen:
            raise _fail(f"{path}.name", f"duplicate hosted provider name {name!r}")
        seen.add(name)
        region = _known(
            _name(_required(row, "region", path), f"{path}.region"),
            regions,
            "region",
            f"{path}.region",
        )
        models: list[str] = []
        for j, m in enumerate(_list(_required(row, "models", path), f"{path}.models")):
            model = _name(m, f"{path}.models[{j}]")
            if model not in models:
                models.append(model)
        if not models:
            raise _fail(f"{path}.models", "names no model")
        in_price = _non_negative(
            _required(row, "input_price_per_mtok", path), f"{path}.input_price_per_mtok"
        )
        out_price = _non_negative(
            _required(row, "output_price_per_mtok", path), f"{path}.output_price_per_mtok"
        )
        tpm = _non_negative(_required(row, "tpm_limit", path), f"{path}.tpm_limit")
        rpm_raw = _optional(row, "rpm_limit")
        rpm = None if rpm_raw is None else _non_negative(rpm_raw, f"{path}.rpm_limit")
        ttft = _non_negative(_required(row, "p95_ttft_s", path), f"{path}.p95_ttft_s")
        out.append(
            HostedProvider(
                name=name,
                region=region,
                models=tuple(models),
                input_price_per_mtok=in_price,
                output_price_per_mtok=out_price,
                tpm_limit=tpm,
                rpm_limit=rpm,
                p95_ttft_s=ttft,
            )
        )
    return tuple(out)


def _check_hosted_products(demands: Sequence[Demand], hosted: Sequence[HostedProvider]) -> None:
    """Refuse a demand whose tokens per minute or hosted $/hour is not a finite number."""
    for i, d in enumerate(demands):
        if not d.hosted_overflow:
            continue
        tpm = d.planned_requests_per_s * 60.0 * d.tokens_per_request
        if not math.isfinite(tpm):
            raise _fail(f"demands[{i}]", "its tokens per minute is not a finite number")
        for p in hosted:
            if not math.isfinite(d.planned_requests_per_s * 3600.0 * p.cost_per_request(d)):
                raise _fail(
                    f"demands[{i}]", f"its $/hour on hosted provider {p.name!r} is not finite"
                )


def _parse_previous(
    data: Mapping[str, object], zones: set[str], shapes: set[str]
) -> tuple[PreviousRow, ...] | None:
    raw_rows = _optional(data, "previous")
    if raw_rows is None:
        return None
    out: list[PreviousRow] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(_list(raw_rows, "previous")):
        path = f"previous[{i}]"
        row = _mapping(raw, path)
        zone = _known(
            _name(_required(row, "zone", path), f"{path}.zone"), zones, "zone", f"{path}.zone"
        )
        shape = _known(
            _name(_required(row, "shape", path), f"{path}.shape"), shapes, "shape", f"{path}.shape"
        )
        if (zone, shape) in seen:
            raise _fail(path, f"duplicate previous row for zone {zone!r} and shape {shape!r}")
        seen.add((zone, shape))
        replicas = _whole(_required(row, "replicas", path), f"{path}.replicas")
        out.append(PreviousRow(zone=zone, shape=shape, replicas=replicas))
    return tuple(out)


def _check_products(
    demands: Sequence[Demand],
    shapes: Sequence[Shape],
    regions: Sequence[Region],
    accelerators: Sequence[Accelerator],
) -> None:
    """Refuse figures that are each finite but whose products are not.

    The solver multiplies them: a demand's planned rate (rate × burst), its load on a shape
    (planned rate × replica-seconds per request / target utilisation), the load of all
    demands together, a replica's price (GPUs × price × region multiplier). ``1e200`` requests
    per second at burst ``1e200`` is no number the solver can round up to replicas.
    """
    total = 0.0
    for i, d in enumerate(demands):
        path = f"demands[{i}]"
        if not math.isfinite(d.planned_requests_per_s):
            raise _fail(
                f"{path}.burst",
                f"requests_per_s × burst ({d.requests_per_s!r} × {d.burst!r}) is not a finite "
                "number",
            )
        for s in shapes:
            if s.model != d.model:
                continue
            prefill = d.prompt_tokens * (1.0 - d.prefix_cache_hit_rate)
            cost = prefill / s.prefill_tokens_per_s + d.output_tokens / s.decode_tokens_per_s
            load = d.planned_requests_per_s * cost / s.target_utilization
            if not math.isfinite(load):
                raise _fail(
                    path,
                    f"its load on shape {s.name!r} (planned rate × replica-seconds per request / "
                    "target utilisation) is not a finite number",
                )
            total += load
    if not math.isfinite(total):
        raise _fail("demands", "the load of all demands together is not a finite number")
    highest = max((r.price_multiplier for r in regions), default=1.0)
    price = {a.name: a.price_per_gpu_hour for a in accelerators}
    for i, s in enumerate(shapes):
        if not math.isfinite(s.gpus * price[s.accelerator] * highest):
            raise _fail(
                f"shapes[{i}].gpus",
                "GPUs × GPU price × region price multiplier is not a finite number",
            )


def parse_problem(data: Mapping[str, object] | object) -> Problem:
    """Validate a ``placement-problem/v1`` dict and return it as a typed, frozen ``Problem``.

    Applies the spec's defaults (utilisation 0.7, price multiplier 1, all regions allowed,
    burst 1, hit rate 0, promise "none", priority 0, no previous plan). Fields the spec does
    not list are ignored. Raises ``ProblemInvalid`` naming the first offending field.
    """
    root = _mapping(data, "problem")
    fmt = _optional(root, "format")
    if fmt is not None and fmt != PROBLEM_FORMAT:
        raise _fail("format", f"must be {PROBLEM_FORMAT!r}, got {fmt!r}")
    util_raw = _optional(root, "target_utilization")
    util = (
        DEFAULT_TARGET_UTILIZATION
        if util_raw is None
        else _utilization(util_raw, "target_utilization")
    )
    regions = _parse_regions(root)
    region_names = tuple(r.name for r in regions)
    zones = {z for r in regions for z in r.zones}
    accelerators = _parse_accelerators(root)
    accelerator_names = {a.name for a in accelerators}
    inventory = _parse_inventory(root, zones, accelerator_names)
    shapes = _parse_shapes(root, accelerator_names, util)
    rtt = _parse_rtt(root, set(region_names))
    demands = _parse_demands(root, region_names, {s.model for s in shapes})
    _check_products(demands, shapes, regions, accelerators)
    previous = _parse_previous(root, zones, {s.name for s in shapes})
    hosted = _parse_hosted(root, set(region_names))
    _check_hosted_products(demands, hosted)
    return Problem(
        target_utilization=util,
        regions=regions,
        accelerators=accelerators,
        inventory=inventory,
        shapes=shapes,
        rtt_ms=rtt,
        demands=demands,
        previous=previous,
        hosted=hosted,
    )
