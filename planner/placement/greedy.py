"""Greedy baseline plan: the seeds' sizing sheet applied region by region, no optimisation.

For every region and model, the demands served there are sized on one shape with the
seeds' ``replicas_needed`` (``planner.capacity.sizing``, work in replica-seconds per
second): capacity at target utilisation, one spare (N+1) where a demand promises it,
survive-a-zone headroom where a demand promises "zone", and enough replicas for the
concurrency check; then rounded up to equal replicas in every zone of the
region. Among the model's shapes the cheapest one that the remaining inventory holds is
taken. Nothing spills: a demand is served in its home region, or in its first allowed
region if the home is not allowed. Where inventory runs short the plan keeps what fits and
serves demands in priority order, equal fractions within a priority, leaving the rest
unserved.

This is what an operator would do by hand with the seeds' arithmetic; the benchmark
reports the solver's saving against it. It reads the problem with the verifier's reader,
not the solver's model code.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.capacity.sizing import replicas_needed
from planner.errors import PlannerInputError
from planner.placement.problem import SOLUTION_FORMAT
from planner.placement.verify import (
    SpecDemand,
    SpecProblem,
    SpecShape,
    cost_per_request,
    read_spec_problem,
)

# A served fraction this close to 1 is 1: the shortfall is floating-point rounding.
_FULL = 1.0 - 1e-9


@dataclass
class _Option:
    """One shape sized for one region's demands of one model."""

    shape: SpecShape
    per_zone: int  # replicas in every zone of the region
    served: dict[str, float]  # demand id → requests/s served
    unserved_by_priority: tuple[float, ...]
    cost_per_hour: float
    notes: list[str] = field(default_factory=list)


def _zones_needed(
    shape: SpecShape, demands: Sequence[SpecDemand], zones: int
) -> tuple[int, list[str]]:
    """Replicas per zone (equal in every zone) for ``demands`` on ``shape``, and why."""
    u = shape.target_utilization
    work = [d.planned_rate * cost_per_request(d, shape) for d in demands]
    total = sum(work)
    promised = sum(w for w, d in zip(work, demands, strict=True) if d.promise_level >= 1)
    zonal = sum(w for w, d in zip(work, demands, strict=True) if d.promise_level >= 2)
    needs: list[int] = [replicas_needed(total, 1.0, u)]
    if promised > 0:
        needs.append(replicas_needed(promised, 1.0, u) + 1)
    if zonal > 0 and zones > 1:
        needs.append(replicas_needed(zonal, 1.0, u, zones=zones))
    in_flight = sum(d.planned_rate * d.residence_s for d in demands if d.residence_s is not None)
    notes: list[str] = []
    if shape.max_concurrency is not None and in_flight > 0:
        if shape.max_concurrency == 0:
            notes.append(f"{shape.name} holds no concurrent requests")
        else:
            needs.append(replicas_needed(in_flight, float(shape.max_concurrency), 1.0))
    return -(-max(needs) // zones), notes


def _fill(
    shape: SpecShape, demands: Sequence[SpecDemand], per_zone: int, zones: int
) -> dict[str, float]:
    """Requests/s of each demand that ``per_zone`` replicas in each of ``zones`` zones carry.

    Priorities are served in order; inside one, every demand gets the same fraction of its
    planned rate, raised until a constraint binds (those demands stop, the rest go on).
    """
    n_total = per_zone * zones
    u = shape.target_utilization
    # Constraint slack in its own unit, and each demand's coefficient per request/s.
    slack: dict[str, float] = {
        "capacity": u * n_total,
        "n+1": u * (n_total - 1) if n_total >= 1 else 0.0,
        "zone": u * (n_total - per_zone),
    }
    if shape.max_concurrency is not None:
        slack["concurrency"] = float(shape.max_concurrency * n_total)

    def coefficients(demand: SpecDemand) -> dict[str, float]:
        c = cost_per_request(demand, shape)
        out = {"capacity": c}
        if demand.promise_level >= 1:
            out["n+1"] = c
        if demand.promise_level >= 2:
            out["zone"] = c
        if "concurrency" in slack and demand.residence_s is not None:
            out["concurrency"] = demand.residence_s
        return {k: v for k, v in out.items() if v > 0}

    served: dict[str, float] = {d.id: 0.0 for d in demands}
    for priority in sorted({d.priority for d in demands}):
        active = [d for d in demands if d.priority == priority and d.planned_rate > 0]
        fraction = 0.0
        coef = {d.id: coefficients(d) for d in active}
        while active:
            step = 1.0 - fraction
            for name, room in slack.items():
                use = sum(d.planned_rate * coef[d.id].get(name, 0.0) for d in active)
                if use > 0:
                    step = min(step, max(0.0, room) / use)
            fraction += step
            for name in slack:
                slack[name] -= step * sum(
                    d.planned_rate * coef[d.id].get(name, 0.0) for d in active
                )
            for d in active:
                served[d.id] += step * d.planned_rate
            if fraction >= _FULL:
                for d in active:
                    served[d.id] = d.planned_rate
                break
            # Demands touching a constraint with no room left stop here; the others go on.
            tight = {name for name, room in slack.items() if room <= 1e-12 * max(1.0, n_total)}
            remaining = [d for d in active if not tight.intersection(coef[d.id])]
            if len(remaining) == len(active):
                break
            active = remaining
    return served


def _option(
    spec: SpecProblem,
    region: str,
    shape: SpecShape,
    demands: Sequence[SpecDemand],
    available: Mapping[tuple[str, str], int],
    priorities: Sequence[int],
) -> _Option:
    zones = spec.regions[region].zones
    wanted, notes = _zones_needed(shape, demands, len(zones))
    room = min(available.get((z, shape.accelerator), 0) for z in zones) // shape.gpus
    per_zone = min(wanted, room)
    if per_zone < wanted:
        notes.append(
            f"inventory of {shape.accelerator} in {region} holds {per_zone} of {wanted} "
            f"{shape.name} replicas per zone"
        )
    served = _fill(shape, demands, per_zone, len(zones)) if per_zone > 0 else {}
    missing: dict[int, float] = defaultdict(float)
    for d in demands:
        missing[d.priority] += d.planned_rate - served.get(d.id, 0.0)
    cost = per_zone * len(zones) * spec.gpu_hour_price(region, shape)
    return _Option(
        shape=shape,
        per_zone=per_zone,
        served=served,
        unserved_by_priority=tuple(max(0.0, missing[p]) for p in priorities),
        cost_per_hour=cost,
        notes=notes,
    )


def _home(spec: SpecProblem, demand: SpecDemand) -> str | None:
    """The one region the baseline serves ``demand`` in, or None if none may."""
    if demand.home_region in demand.allowed_regions:
        return demand.home_region
    for region in demand.allowed_regions:
        if spec.may_serve(demand, region):
            return region
    return None


def greedy_plan(problem: Mapping[str, Any]) -> dict[str, Any]:
    """A placement-solution/v1 dict built by the seeds' per-region sizing (see module doc).

    Status is ``feasible`` (a baseline proves nothing about optimality; ``gap`` is null) or
    ``invalid`` with ``message`` naming the field for a problem the contract rejects.
    """
    started = time.perf_counter()
    try:
        spec = read_spec_problem(problem)
    except PlannerInputError as error:
        return {
            "format": SOLUTION_FORMAT,
            "status": "invalid",
            "message": str(error),
            "solve_seconds": time.perf_counter() - started,
        }

    available: dict[tuple[str, str], int] = dict(spec.inventory)
    groups: dict[tuple[str, str], list[SpecDemand]] = defaultdict(list)
    binding: list[str] = []
    unserved: dict[str, float] = {}
    for demand in spec.demands.values():
        region = _home(spec, demand)
        if region is None:
            unserved[demand.id] = demand.planned_rate
            binding.append(f"{demand.id}: no allowed region is reachable without spill")
            continue
        groups[(region, demand.model)].append(demand)

    # Most important groups take inventory first; ties by size, then name, for determinism.
    def order(key: tuple[str, str]) -> tuple[int, float, str, str]:
        members = groups[key]
        return (min(d.priority for d in members), -sum(d.planned_rate for d in members), *key)

    replicas: dict[tuple[str, str], int] = {}
    routing: list[dict[str, Any]] = []
    for key in sorted(groups, key=order):
        region, model = key
        members = groups[key]
        priorities = sorted({d.priority for d in members})
        options = [
            _option(spec, region, shape, members, available, priorities)
            for shape in spec.shapes_of_model(model)
        ]
        if not options:
            for d in members:
                unserved[d.id] = d.planned_rate
            continue
        best = min(options, key=lambda o: (o.unserved_by_priority, o.cost_per_hour, o.shape.name))
        shape = best.shape
        if best.per_zone > 0:
            for zone in spec.regions[region].zones:
                replicas[(zone, shape.name)] = best.per_zone
                available[(zone, shape.accelerator)] -= best.per_zone * shape.gpus
        for d in members:
            rate = best.served.get(d.id, 0.0)
            if rate > 0:
                routing.append(
                    {"demand": d.id, "region": region, "shape": shape.name, "requests_per_s": rate}
                )
            if d.planned_rate - rate > 0:
                unserved[d.id] = d.planned_rate - rate
        if any(best.unserved_by_priority):
            binding.extend(best.notes)

    replica_rows = [
        {"zone": zone, "shape": shape_name, "replicas": count}
        for (zone, shape_name), count in replicas.items()
    ]
    cost = sum(
        count * spec.gpu_hour_price(spec.region_of_zone[zone], spec.shapes[shape_name])
        for (zone, shape_name), count in replicas.items()
    )
    return {
        "format": SOLUTION_FORMAT,
        "status": "feasible",
        "cost_per_hour": cost,
        "unserved_requests_per_s": sum(unserved.values()),
        "solve_seconds": time.perf_counter() - started,
        "gap": None,
        "replicas": replica_rows,
        "routing": routing,
        "unserved": [{"demand": d, "requests_per_s": u} for d, u in unserved.items()],
        "binding": binding,
    }
