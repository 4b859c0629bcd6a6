"""The per-region allocation document every sink receives, built from a plan snapshot.

Pure functions over plain rows (no database), so the document's arithmetic reads and tests
like the seeds' worked examples. Per region and shape the document carries, besides the plan's
replicas, what an autoscaler needs:

- the **standing floor**: the fewest replicas that still meet every hard constraint of the
  placement contract for the region's routed load *before* the burst factor (capacity at the
  shape's target utilisation, one spare where N+1 was promised, surviving the loss of any zone
  in use where a zone promise was made, the concurrency cap). The plan's replicas are sized for
  the burst; the floor is what stands when the burst is not there. The seeds' sizing exercise:
  8 requests/s of 1 replica-second each at a 70% target stand on 12 replicas; the 1.5 burst
  makes the plan 18.
- the **ceiling**: the plan's replicas plus as many more as the region's unallocated GPUs of
  the shape's accelerator hold (inventory from the plan's own problem, minus every
  allocation on that accelerator in the region), and, when every tenant the shape serves
  there has a quota, no more than those quotas can keep busy: Σ budget refill rates
  (replica-seconds per second) at the shape's target utilisation. Never below the plan.
- the **in-flight target per replica**: the shape's target utilisation times the requests in
  flight per replica at saturation, Σ rate·residence / Σ rate·cost over the routed demands
  that give a residence time (Little's law); the seeds' 70% of 5 = 3.5. ``None`` when no
  routed demand gives a residence time.
- **per zone**, the floor each zone keeps standing (``planner.capacity.sizing.zone_floors``:
  the region's floor spread as evenly as the plan allows, so that losing any zone still
  leaves what the zone promise needs; at least 1 in a zone the plan uses, since each zone runs
  its own autoscaled Deployment) and the zone's ceiling (its plan replicas plus what the
  zone's free GPUs hold).
- **serving**: how a cluster starts the shape (image, what vLLM loads, tensor-parallel size,
  max model length, extra arguments, the GPU product node label), from the shape's records
  at activation; and the tenants the shape serves in the region.

Units: requests/s for rates, replica-seconds for request costs, seconds for residence, $/hour
for costs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from planner.capacity.sizing import replicas_needed, zone_floors
from planner.capacity.workload import request_cost
from planner.errors import PlannerInputError
from planner.placement.verify import SpecProblem, read_spec_problem

FORMAT = "headroom-allocation/v1"


@dataclass(frozen=True)
class AllocationRow:
    """Whole replicas of one shape in one zone, as the plan stores them."""

    region: str
    zone: str
    shape: str
    accelerator: str
    gpus_per_replica: int
    replicas: int
    cost_per_hour: float


@dataclass(frozen=True)
class RoutingRow:
    """Requests/s of one demand served by one shape in one region, planned units (× burst)."""

    demand: str
    tenant: str
    region: str
    shape: str
    requests_per_s: float


@dataclass(frozen=True)
class ShapeServing:
    """How a cluster starts one replica of a shape, from the shape's records.

    ``model_path`` is what vLLM's ``--model`` loads (a Hugging Face repository id or a path in
    the pod), ``served_model_name`` the name clients ask for (the model's name in Headroom),
    ``tensor_parallel_size`` the shape's GPUs; ``image`` empty means the sink's own image;
    ``gpu_product`` is the GPU product node label value pods require.
    """

    image: str
    model_path: str
    served_model_name: str
    tensor_parallel_size: int
    max_model_len: int | None
    extra_args: tuple[str, ...]
    gpu_product: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "model_path": self.model_path,
            "served_model_name": self.served_model_name,
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "extra_args": list(self.extra_args),
            "gpu_product": self.gpu_product,
        }


@dataclass(frozen=True)
class PlanSnapshot:
    """What a plan decided, as stored: the sinks' documents are built from this alone.

    ``serving`` maps shape names to how a cluster starts them; a shape missing from it (its
    record was deleted since) is served under the model's name with the sink's image.
    """

    plan_id: int
    version: int
    inputs_hash: str
    created_at: datetime
    activated_at: datetime
    problem: Mapping[str, Any]
    allocations: tuple[AllocationRow, ...]
    routing: tuple[RoutingRow, ...]
    serving: Mapping[str, ShapeServing] = field(default_factory=dict)
    # Tenant → its quota's budget refill rate, replica-seconds per second (no entry: no quota).
    quota_replica_s_per_s: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ShapeSizing:
    """One shape in one region: the plan's replicas and the autoscaler's bounds and target."""

    replicas: int
    standing_floor: int
    max_replicas: int
    inflight_target_per_replica: float | None
    model: str
    zone_floors: Mapping[str, int] = field(default_factory=dict)
    zone_max_replicas: Mapping[str, int] = field(default_factory=dict)


@dataclass
class _Load:
    """Un-bursted load routed to one region and shape, replica-seconds per second."""

    all: float = 0.0
    n_plus_1: float = 0.0
    zone: float = 0.0
    in_flight: float = 0.0
    costed_with_residence: float = 0.0
    unknown: bool = False


def regions_of(snapshot: PlanSnapshot) -> list[str]:
    """Every region the documents go to: the problem's regions (a region the plan leaves
    empty gets an empty document, so its consumers scale down) and any region a row names."""
    names: list[str] = []
    for row in snapshot.problem.get("regions", []) if isinstance(snapshot.problem, Mapping) else []:
        if isinstance(row, Mapping) and isinstance(row.get("name"), str) and row["name"]:
            names.append(row["name"])
    names.extend(a.region for a in snapshot.allocations)
    names.extend(r.region for r in snapshot.routing)
    return sorted(set(names))


def _loads(spec: SpecProblem, routing: Iterable[RoutingRow]) -> dict[tuple[str, str], _Load]:
    loads: dict[tuple[str, str], _Load] = defaultdict(_Load)
    for row in routing:
        load = loads[(row.region, row.shape)]
        demand = spec.demands.get(row.demand)
        shape = spec.shapes.get(row.shape)
        if demand is None or shape is None:
            # The plan routes to something its own problem does not describe: size nothing
            # below the plan for this shape.
            load.unknown = True
            continue
        rate = row.requests_per_s / demand.burst
        cost = request_cost(
            demand.prompt_tokens,
            demand.output_tokens,
            shape.prefill_tokens_per_s,
            shape.decode_tokens_per_s,
            demand.prefix_cache_hit_rate,
        )
        work = rate * cost
        load.all += work
        if demand.promise_level >= 1:
            load.n_plus_1 += work
        if demand.promise_level >= 2:
            load.zone += work
        if demand.residence_s is not None:
            load.in_flight += rate * demand.residence_s
            load.costed_with_residence += work
    return loads


def _floor(
    load: _Load, utilization: float, zones_in_use: int, max_concurrency: float | None
) -> int:
    """The fewest replicas meeting the contract's hard constraints for the un-bursted load."""
    floors = [1, replicas_needed(load.all, 1.0, utilization)]
    if load.n_plus_1 > 0:
        floors.append(replicas_needed(load.n_plus_1, 1.0, utilization) + 1)
    if load.zone > 0 and zones_in_use >= 2:
        floors.append(replicas_needed(load.zone, 1.0, utilization, zones=zones_in_use))
    if max_concurrency and load.in_flight > 0:
        floors.append(replicas_needed(load.in_flight, float(max_concurrency), 1.0))
    return max(floors)


def _quota_cap(tenants: set[str], quotas: Mapping[str, float], utilization: float) -> int | None:
    """Replicas the tenants' quotas can keep busy at ``utilization``; None when a tenant has
    no quota (nothing bounds its traffic but inventory)."""
    if not tenants or any(t not in quotas for t in tenants):
        return None
    return replicas_needed(sum(quotas[t] for t in tenants), 1.0, utilization)


def shape_sizing(snapshot: PlanSnapshot) -> tuple[dict[tuple[str, str], ShapeSizing], str]:
    """Sizing per (region, shape) with replicas, and a note ('' when all went well).

    A plan whose stored problem cannot be read (it always can, for plans the planner made)
    still emits: every floor and ceiling is then the plan's own replica count and the note
    says why.
    """
    replicas: dict[tuple[str, str], int] = defaultdict(int)
    zones: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    used_gpus: dict[tuple[str, str], int] = defaultdict(int)
    used_zone_gpus: dict[tuple[str, str], int] = defaultdict(int)
    accelerator_of: dict[str, str] = {}
    gpus_of: dict[str, int] = {}
    for row in snapshot.allocations:
        if row.replicas <= 0:
            continue
        key = (row.region, row.shape)
        replicas[key] += row.replicas
        zones[key][row.zone] = zones[key].get(row.zone, 0) + row.replicas
        used_gpus[(row.region, row.accelerator)] += row.replicas * row.gpus_per_replica
        used_zone_gpus[(row.zone, row.accelerator)] += row.replicas * row.gpus_per_replica
        accelerator_of[row.shape] = row.accelerator
        gpus_of[row.shape] = row.gpus_per_replica

    def fixed(key: tuple[str, str], n: int) -> ShapeSizing:
        # Bounds at the plan itself: every zone keeps what the plan gave it.
        return ShapeSizing(
            n,
            n,
            n,
            None,
            model="",
            zone_floors=dict(zones[key]),
            zone_max_replicas=dict(zones[key]),
        )

    try:
        spec = read_spec_problem(snapshot.problem)
    except PlannerInputError as exc:
        return (
            {key: fixed(key, n) for key, n in sorted(replicas.items())},
            f"the plan's problem could not be read ({exc}); bounds fixed at the plan",
        )
    loads = _loads(spec, snapshot.routing)
    served: dict[tuple[str, str], set[str]] = defaultdict(set)
    for route in snapshot.routing:
        if route.requests_per_s > 0:
            served[(route.region, route.shape)].add(route.tenant)
    sizing: dict[tuple[str, str], ShapeSizing] = {}
    for (region, shape_name), n in sorted(replicas.items()):
        shape = spec.shapes.get(shape_name)
        load = loads.get((region, shape_name), _Load())
        if shape is None or load.unknown:
            sizing[(region, shape_name)] = fixed((region, shape_name), n)
            continue
        in_zones = zones[(region, shape_name)]
        floor = _floor(load, shape.target_utilization, len(in_zones), shape.max_concurrency)
        accelerator = accelerator_of[shape_name]
        region_row = spec.regions.get(region)
        inventory = sum(
            spec.inventory_gpus(zone, accelerator)
            for zone in (region_row.zones if region_row else ())
        )
        free = max(0, inventory - used_gpus[(region, accelerator)])
        target = (
            shape.target_utilization * load.in_flight / load.costed_with_residence
            if load.costed_with_residence > 0
            else None
        )
        survivors = (
            replicas_needed(load.zone, 1.0, shape.target_utilization)
            if load.zone > 0 and len(in_zones) >= 2
            else 0
        )
        per_zone = zone_floors(total=min(floor, n), survivors=survivors, zone_replicas=in_zones)
        gpus = gpus_of[shape_name]
        quota_cap = _quota_cap(
            served[(region, shape_name)], snapshot.quota_replica_s_per_s, shape.target_utilization
        )

        def capped(plan: int, inventory_max: int, cap: int | None = quota_cap) -> int:
            return max(plan, inventory_max if cap is None else min(inventory_max, cap))

        sizing[(region, shape_name)] = ShapeSizing(
            replicas=n,
            standing_floor=min(floor, n),
            max_replicas=capped(n, n + free // gpus),
            inflight_target_per_replica=target,
            model=shape.model,
            zone_floors={zone: max(1, f) for zone, f in per_zone.items()},
            # A zone takes more than its share while another is down: each zone's ceiling is
            # bounded by the whole quota, not by a split of it.
            zone_max_replicas={
                zone: capped(
                    count,
                    count
                    + max(
                        0,
                        spec.inventory_gpus(zone, accelerator)
                        - used_zone_gpus[(zone, accelerator)],
                    )
                    // gpus,
                )
                for zone, count in in_zones.items()
            },
        )
    return sizing, ""


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def region_documents(snapshot: PlanSnapshot) -> dict[str, dict[str, Any]]:
    """The allocation document of every region (see ``regions_of``), keyed by region."""
    sizing, note = shape_sizing(snapshot)
    by_region: dict[str, list[AllocationRow]] = defaultdict(list)
    for row in snapshot.allocations:
        if row.replicas > 0:
            by_region[row.region].append(row)
    routed: dict[str, list[RoutingRow]] = defaultdict(list)
    for route in snapshot.routing:
        routed[route.region].append(route)

    documents: dict[str, dict[str, Any]] = {}
    for region in regions_of(snapshot):
        rows = sorted(by_region.get(region, []), key=lambda a: (a.zone, a.shape))
        documents[region] = {
            "format": FORMAT,
            "plan": {
                "id": snapshot.plan_id,
                "version": snapshot.version,
                "inputs_hash": snapshot.inputs_hash,
                "created_at": _iso(snapshot.created_at),
                "activated_at": _iso(snapshot.activated_at),
            },
            "region": region,
            "allocations": [
                {
                    "zone": a.zone,
                    "shape": a.shape,
                    "accelerator": a.accelerator,
                    "gpus_per_replica": a.gpus_per_replica,
                    "replicas": a.replicas,
                    "gpus": a.replicas * a.gpus_per_replica,
                    "cost_per_hour": a.cost_per_hour,
                }
                for a in rows
            ],
            "shapes": _shape_entries(region, rows, sizing, snapshot, routed.get(region, [])),
            "routing": _tenant_routing(routed.get(region, [])),
            "total_replicas": sum(a.replicas for a in rows),
            "total_gpus": sum(a.replicas * a.gpus_per_replica for a in rows),
            "total_cost_per_hour": sum(a.cost_per_hour for a in rows),
            "sizing_note": note,
        }
    return documents


def _model_of(problem: Mapping[str, Any], shape: str) -> str:
    """The shape's model as the plan's problem names it ('' if it does not)."""
    rows = problem.get("shapes") if isinstance(problem, Mapping) else None
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, Mapping) and row.get("name") == shape:
            return str(row.get("model") or "")
    return ""


def _serving(snapshot: PlanSnapshot, shape: str, model: str, first: AllocationRow) -> ShapeServing:
    known = snapshot.serving.get(shape)
    if known is not None:
        return known
    # The shape's record is gone: serve the plan's model under its own name.
    return ShapeServing(
        image="",
        model_path=model,
        served_model_name=model,
        tensor_parallel_size=first.gpus_per_replica,
        max_model_len=None,
        extra_args=(),
        gpu_product=first.accelerator,
    )


def _shape_entries(
    region: str,
    rows: Sequence[AllocationRow],
    sizing: Mapping[tuple[str, str], ShapeSizing],
    snapshot: PlanSnapshot,
    routing: Sequence[RoutingRow],
) -> list[dict[str, Any]]:
    per_shape: dict[str, list[AllocationRow]] = defaultdict(list)
    for row in rows:
        per_shape[row.shape].append(row)
    tenants: dict[str, set[str]] = defaultdict(set)
    for route in routing:
        if route.requests_per_s > 0:
            tenants[route.shape].add(route.tenant)
    entries = []
    for shape, shape_rows in sorted(per_shape.items()):
        sized = sizing[(region, shape)]
        first = shape_rows[0]
        model = sized.model or _model_of(snapshot.problem, shape)
        serving = _serving(snapshot, shape, model, first)
        zones: dict[str, int] = defaultdict(int)
        for r in shape_rows:
            zones[r.zone] += r.replicas
        entries.append(
            {
                "shape": shape,
                "model": model,
                "accelerator": first.accelerator,
                "gpus_per_replica": first.gpus_per_replica,
                "replicas": sized.replicas,
                "zones": dict(zones),
                "cost_per_hour": sum(r.cost_per_hour for r in shape_rows),
                "standing_floor": sized.standing_floor,
                "max_replicas": sized.max_replicas,
                "inflight_target_per_replica": sized.inflight_target_per_replica,
                "zone_bounds": {
                    zone: {
                        "replicas": count,
                        "floor": sized.zone_floors.get(zone, count),
                        "max_replicas": max(count, sized.zone_max_replicas.get(zone, count)),
                    }
                    for zone, count in sorted(zones.items())
                },
                "tenants": sorted(tenants.get(shape, ())),
                "serving": serving.as_dict(),
            }
        )
    return entries


def _tenant_routing(rows: Sequence[RoutingRow]) -> list[dict[str, Any]]:
    per_tenant: dict[str, list[RoutingRow]] = defaultdict(list)
    for row in rows:
        per_tenant[row.tenant].append(row)
    return [
        {
            "tenant": tenant,
            "requests_per_s": sum(r.requests_per_s for r in tenant_rows),
            "demands": [
                {"demand": r.demand, "shape": r.shape, "requests_per_s": r.requests_per_s}
                for r in sorted(tenant_rows, key=lambda r: (r.demand, r.shape))
            ],
        }
        for tenant, tenant_rows in sorted(per_tenant.items())
    ]
