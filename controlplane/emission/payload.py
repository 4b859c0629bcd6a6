"""The per-region allocation document every sink receives, built from a plan snapshot.

Pure functions over plain rows (no database), so the document's arithmetic reads and tests
like the seeds' worked examples. Per region and shape the document carries, besides the plan's
replicas, what an autoscaler needs:

- the **standing floor**, the **ceiling**, the **in-flight target per replica** and the
  per-zone floors and ceilings: ``planner.placement.bounds`` (pure functions of the plan's
  typed problem and rows, where the arithmetic and its tests live).
- **serving**: how a cluster starts the shape (image, what vLLM loads, tensor-parallel size,
  max model length, extra arguments, the GPU product node label), from the shape's records
  at activation; and the tenants the shape serves in the region.
- **routing weights**: per demand whose home region it is, the fraction of its served traffic
  each self-hosted pool (region and shape) and each hosted provider takes, for the gateway in
  front of the region (``routing_weights``; the LiteLLM sink renders them).

Units: requests/s for rates, replica-seconds for request costs, seconds for residence, $/hour
for costs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controlplane.plans.selectors import Problem
from planner.placement.bounds import (
    AllocationRow,
    RoutingRow,
    ShapeSizing,
    fixed_sizing,
)
from planner.placement.bounds import shape_sizing as plan_bounds

__all__ = [
    "FORMAT",
    "AllocationRow",
    "HostedRouteRow",
    "PlanSnapshot",
    "RoutingRow",
    "ShapeServing",
    "ShapeSizing",
    "region_documents",
    "regions_of",
    "routing_weights",
    "shape_sizing",
]

FORMAT = "headroom-allocation/v1"


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
class HostedRouteRow:
    """Requests/s of one demand the plan sends to a hosted provider (planned units, × burst),
    the tokens per minute of the provider's quota they take and their $/hour."""

    demand: str
    provider: str
    requests_per_s: float
    tokens_per_minute: float
    cost_per_hour: float


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
    # The plan's problem, typed; None when it could not be read (``problem_error`` says why).
    problem: Problem | None
    allocations: tuple[AllocationRow, ...]
    routing: tuple[RoutingRow, ...]
    serving: Mapping[str, ShapeServing] = field(default_factory=dict)
    # Tenant → its quota's budget refill rate, replica-seconds per second (no entry: no quota).
    quota_replica_s_per_s: Mapping[str, float] = field(default_factory=dict)
    problem_error: str = ""
    # What the plan sends to hosted providers, and leaves unserved (demand → requests/s).
    hosted: tuple[HostedRouteRow, ...] = ()
    unserved: Mapping[str, float] = field(default_factory=dict)
    # Why the plan's solution could not be read ('' when it was): no routing weights then.
    solution_error: str = ""


def regions_of(snapshot: PlanSnapshot) -> list[str]:
    """Every region the documents go to: the problem's regions (a region the plan leaves
    empty gets an empty document, so its consumers scale down) and any region a row names."""
    names = [r.name for r in snapshot.problem.regions] if snapshot.problem else []
    names.extend(a.region for a in snapshot.allocations)
    names.extend(r.region for r in snapshot.routing)
    return sorted(set(names))


def shape_sizing(snapshot: PlanSnapshot) -> tuple[dict[tuple[str, str], ShapeSizing], str]:
    """Sizing per (region, shape) with replicas (``planner.placement.bounds``), and a note
    ('' when all went well).

    A plan whose stored problem cannot be read (it always can, for plans the planner made)
    still emits: every floor and ceiling is then the plan's own replica count and the note
    says why.
    """
    if snapshot.problem is None:
        reason = snapshot.problem_error or "it is missing"
        return (
            fixed_sizing(snapshot.allocations),
            f"the plan's problem could not be read ({reason}); bounds fixed at the plan",
        )
    return (
        plan_bounds(
            snapshot.problem,
            snapshot.allocations,
            snapshot.routing,
            snapshot.quota_replica_s_per_s,
        ),
        "",
    )


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

    weights = routing_weights(snapshot)
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
            "routing_weights": weights.get(region, []),
            "total_replicas": sum(a.replicas for a in rows),
            "total_gpus": sum(a.replicas * a.gpus_per_replica for a in rows),
            "total_cost_per_hour": sum(a.cost_per_hour for a in rows),
            "sizing_note": note,
        }
    return documents


def _model_of(problem: Problem | None, shape: str) -> str:
    """The shape's model as the plan's problem names it ('' if it does not)."""
    for row in problem.shapes if problem else ():
        if row.name == shape:
            return row.model
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


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def routing_weights(snapshot: PlanSnapshot) -> dict[str, list[dict[str, Any]]]:
    """Per region, the routing weights of the demands whose home region it is.

    A demand's traffic enters at its home region's gateway, which splits it: to each
    self-hosted pool (a region and shape the plan routes it to, possibly another region) and
    to each hosted provider, in proportion to the requests/s the plan gives each. ``weight``
    is that share of the demand's *served* traffic, so a demand's weights sum to 1; what the
    plan leaves unserved is stated beside them, not weighted. Needs the plan's problem (home
    regions, models, tokens per request) and solution (hosted rows): without either, no
    weights at all rather than weights that miss a destination.
    """
    problem = snapshot.problem
    if problem is None or snapshot.solution_error:
        return {}
    providers = {p.name: p for p in problem.hosted}
    pools: dict[str, list[RoutingRow]] = defaultdict(list)
    for route in snapshot.routing:
        if route.requests_per_s > 0:
            pools[route.demand].append(route)
    hosted: dict[str, list[HostedRouteRow]] = defaultdict(list)
    for row in snapshot.hosted:
        if row.requests_per_s > 0:
            hosted[row.demand].append(row)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for demand in sorted(problem.demands, key=lambda d: d.id):
        own_pools = sorted(pools.get(demand.id, ()), key=lambda r: (r.region, r.shape))
        own_hosted = sorted(hosted.get(demand.id, ()), key=lambda h: h.provider)
        unserved = snapshot.unserved.get(demand.id, 0.0)
        served = sum(r.requests_per_s for r in own_pools) + sum(
            h.requests_per_s for h in own_hosted
        )
        if served <= 0 and unserved <= 0:
            continue
        targets: list[dict[str, Any]] = [
            {
                "kind": "pool",
                "region": r.region,
                "shape": r.shape,
                "requests_per_s": r.requests_per_s,
                "weight": _share(r.requests_per_s, served),
            }
            for r in own_pools
        ]
        for h in own_hosted:
            known = providers.get(h.provider)
            targets.append(
                {
                    "kind": "hosted",
                    "provider": h.provider,
                    "region": known.region if known is not None else "",
                    "requests_per_s": h.requests_per_s,
                    "tokens_per_minute": h.tokens_per_minute,
                    "cost_per_hour": h.cost_per_hour,
                    "weight": _share(h.requests_per_s, served),
                }
            )
        out[demand.home_region].append(
            {
                "demand": demand.id,
                "tenant": demand.tenant,
                "model": demand.model,
                "tokens_per_request": demand.tokens_per_request,
                "served_requests_per_s": served,
                "unserved_requests_per_s": unserved,
                "targets": targets,
            }
        )
    return dict(out)
