"""Binding sentences: what holds a plan where it is, in words an operator can act on.

Two kinds. For a demand left (partly) unserved: what holds it back (no region it may use,
no GPUs for its model there, a zone promise that needs two zones, or simply too few GPUs in
the regions it may use, with the numbers). For the replicas that are planned: which row
sets each region and shape's count (a row binds when one replica fewer would break it:
capacity, N+1, zone loss of a named zone, concurrency) and which zones' inventory is used up.
"""

from __future__ import annotations

from collections import defaultdict

from planner.capacity._checks import ceil_count
from planner.placement.model import Instance, Plan, block_loads


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def _list(names: list[str] | tuple[str, ...], limit: int = 6) -> str:
    names = list(names)
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


def _replicas_for(load: float, promised: float, zonal: float, conc: float, zones: int) -> int:
    """Fewest replicas that carry these loads (in replicas) spread over ``zones`` zones."""
    need = max(ceil_count(load), ceil_count(conc), ceil_count(promised) + 1 if promised > 0 else 0)
    if zonal > 0:
        if zones < 2:
            return 0
        survive = ceil_count(zonal)
        # Evenly spread: N − ceil(N / zones) = floor(N (zones − 1) / zones) ≥ survive, so the
        # fewest is N = ceil(survive × zones / (zones − 1)), in whole numbers (counting up to
        # it would take as many steps as there are replicas: billions for a large demand).
        n = -(-survive * zones // (zones - 1))
        need = max(need, n)
    return need


def unserved_sentences(instance: Instance, plan: Plan) -> list[str]:
    """One sentence per demand with unserved requests: what holds it back."""
    problem = instance.problem
    used: dict[tuple[str, str], int] = defaultdict(int)
    for (z, s), n in plan.replicas.items():
        shape = problem.shape(s)
        used[(z, shape.accelerator)] += n * shape.gpus
    out: list[str] = []
    for di, demand in enumerate(instance.demands):
        rate = demand.planned_requests_per_s
        served = instance.served(di, plan)
        left = max(0.0, 1.0 - served) * rate
        if left <= 0:
            continue
        who = (
            f"demand {demand.id} (tenant {demand.tenant}, priority {demand.priority}): "
            f"{_fmt(left)} of {_fmt(rate)} requests/s unserved"
        )
        regions = problem.serving_regions(demand)
        shapes = [s for s in instance.shapes if s.model == demand.model]
        if not regions:
            if demand.home_region not in demand.allowed_regions and demand.max_spill_rtt_ms is None:
                why = (
                    f"its home {demand.home_region} is not among its allowed regions "
                    f"({_list(demand.allowed_regions)}) and it may not spill"
                )
            else:
                why = (
                    f"no allowed region ({_list(demand.allowed_regions)}) is within its spill "
                    f"limit of {_fmt(demand.max_spill_rtt_ms or 0.0)} ms of {demand.home_region}"
                )
            out.append(f"{who}: {why}")
            continue
        accelerators = sorted({s.accelerator for s in shapes})
        eligible = [s for s in shapes if problem.ineligible_reason(demand, s) is None]
        if not eligible:
            out.append(
                f"{who}: no shape of {demand.model} can meet its p95 TTFT objective at any "
                f"load ({'; '.join(str(problem.ineligible_reason(demand, s)) for s in shapes)})"
            )
            continue
        if not instance.routes_of[di]:
            out.append(
                f"{who}: no zone of {_list(regions)} holds enough "
                f"{'/'.join(accelerators)} GPUs for one replica of {demand.model}"
            )
            continue
        if demand.promise == "zone":
            two_zone = [
                r
                for r in regions
                for s in shapes
                if sum(
                    1
                    for z in instance.zones_of[r]
                    if problem.inventory_gpus(z, s.accelerator) >= s.gpus
                )
                >= 2
            ]
            if not two_zone:
                out.append(
                    f"{who}: a zone promise needs {demand.model} in two zones of a region, and "
                    f"no region it may use ({_list(regions)}) holds GPUs for it in two zones"
                )
                continue
        out.append(f"{who}: {_shortage(instance, di, left, regions, used)}")
    return out


def _shortage(
    instance: Instance,
    di: int,
    left: float,
    regions: tuple[str, ...],
    used: dict[tuple[str, str], int],
) -> str:
    """Why a demand with routes is short: the GPUs it would need against what is there."""
    problem = instance.problem
    # The route that needs the fewest GPUs for the whole demand shows the smallest ask.
    best: tuple[int, str, str] | None = None
    for ri in instance.routes_of[di]:
        route = instance.routes[ri]
        shape = problem.shape(route.shape)
        zonal = route.load if route.promise_level >= 2 else 0.0
        promised = route.load if route.promise_level >= 1 else 0.0
        zones = len(instance.zones_of[route.region])
        replicas = _replicas_for(route.load, promised, zonal, route.concurrency, zones)
        gpus = replicas * shape.gpus
        if best is None or (gpus, shape.accelerator, route.region) < best:
            best = (gpus, shape.accelerator, route.region)
    assert best is not None
    gpus, accelerator, _ = best
    zone_names = [z for r in regions for z in instance.zones_of[r]]
    there = sum(problem.inventory_gpus(z, accelerator) for z in zone_names)
    busy = sum(used.get((z, accelerator), 0) for z in zone_names)
    where = "its allowed regions" if len(regions) > 1 else "its region"
    return (
        f"serving it in full needs about {gpus} {accelerator} GPUs in {where} "
        f"({_list(regions)}); {there} are there and {busy} are in use"
    )


def block_sentences(instance: Instance, plan: Plan) -> list[str]:
    """Per planned region and shape, the rows that set its replica count; used-up inventory."""
    problem = instance.problem
    per_block: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    used: dict[tuple[str, str], int] = defaultdict(int)
    for (z, s), n in plan.replicas.items():
        if n > 0:
            per_block[(problem.region_of_zone(z), s)][z] = n
            shape = problem.shape(s)
            used[(z, shape.accelerator)] += n * shape.gpus
    loads = block_loads(instance, plan, plan.share)
    out: list[str] = []
    for (region, shape_name), zones in sorted(per_block.items()):
        shape = problem.shape(shape_name)
        n_total = sum(zones.values())
        load, promised, zonal, conc = loads.get((region, shape_name), (0.0, 0.0, 0.0, 0.0))
        where = f"{shape_name} in {region}"
        util = f"{shape.target_utilization:.0%}"
        if zonal > 0:
            biggest = max(zones.values())
            if n_total - biggest - zonal < 1:
                lost = sorted(z for z, n in zones.items() if n == biggest)
                out.append(
                    f"zone loss {_list(lost)} for {where}: losing {lost[0]} leaves "
                    f"{n_total - biggest} replicas for {_fmt(zonal)} replicas of zone-promised "
                    f"load at {util}"
                )
        if promised > 0 and n_total - 1 - promised < 1:
            out.append(
                f"N+1 for {where}: {n_total} replicas keep {_fmt(promised)} replicas of "
                f"promised load at {util} with one replica lost"
            )
        if n_total - load < 1:
            out.append(
                f"capacity for {where}: {n_total} replicas carry {_fmt(load)} replicas of load "
                f"at {util}"
            )
        if shape.max_concurrency is not None and conc > 0 and n_total - conc < 1:
            out.append(
                f"concurrency for {where}: {n_total} replicas × {_fmt(shape.max_concurrency)} "
                f"sequences hold {_fmt(conc * shape.max_concurrency)} requests in flight"
            )
        if load == 0 and n_total > 0:
            out.append(f"{where}: {n_total} replicas carry no load (kept from the previous plan)")
    smallest: dict[str, int] = {}
    for each in instance.shapes:
        smallest[each.accelerator] = min(smallest.get(each.accelerator, each.gpus), each.gpus)
    for (z, acc), gpus in sorted(used.items()):
        total = problem.inventory_gpus(z, acc)
        if total - gpus < smallest.get(acc, 1):
            out.append(f"inventory {z} {acc}: {gpus} of {total} GPUs in use")
    return out


def binding_sentences(instance: Instance, plan: Plan) -> list[str]:
    """Unserved demand and what holds it back first, then the rows that bind the plan."""
    return unserved_sentences(instance, plan) + block_sentences(instance, plan)
