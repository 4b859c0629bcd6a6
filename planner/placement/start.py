"""A quick constructive plan: the seeds' rounded-up sizing, one demand at a time.

The solver starts from it (as a hint, and as the plan to return if a time limit strikes
before the solver finds anything better), so a valid problem always gets a plan.

Demands go most important first and, within a priority, largest first. Each takes the
route (region, shape) that adds the least cost to the plan: the replicas its load needs on
top of what the shape already has there, with N+1 and zone loss, rounded up, spread evenly
over the zones (so a zone loss costs the least), within the inventory left. A demand no
route can take whole is left unserved; the solver does the finer work of partial service.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from planner.capacity._checks import ceil_count
from planner.placement.model import Instance, Plan, Route, Site


def _grow(
    counts: Mapping[str, int],
    caps: Mapping[str, int],
    loads: tuple[float, float, float, float],
) -> dict[str, int] | None:
    """Replicas to add per zone so ``counts`` carries ``loads``; None if the caps forbid.

    ``loads`` are (load, promised load, zone-promised load, concurrency) in replicas. Adding
    to the emptiest zone with room is what raises ``N − max zone`` fastest, so the result is
    the fewest replicas for these zones.
    """
    load, promised, zonal, conc = loads
    need = max(ceil_count(load), ceil_count(conc), ceil_count(promised) + 1 if promised > 0 else 0)
    survive = ceil_count(zonal) if zonal > 0 else None
    n = dict(counts)
    zones_with_room = [z for z in n if caps[z] > 0]
    if survive is not None and len(zones_with_room) < 2:
        return None
    adds: dict[str, int] = {}
    total = sum(n.values())
    while True:
        biggest = max(n.values(), default=0)
        if total >= need and (survive is None or total - biggest >= survive):
            return adds
        room = [z for z in n if n[z] < caps[z]]
        if not room:
            return None
        z = min(room, key=lambda k: (n[k], k))
        n[z] += 1
        adds[z] = adds.get(z, 0) + 1
        total += 1


def constructive_plan(
    instance: Instance,
    places: Mapping[tuple[str, str], Site],
    *,
    keep: Mapping[tuple[str, str], int] | None = None,
    demands: Collection[int] | None = None,
    regions: Collection[str] | None = None,
) -> Plan:
    """A plan that satisfies every hard row of the spec; ``keep`` seeds it with replicas.

    With ``keep`` (a previous plan) those replicas stay, as far as the inventory allows,
    and demands fill them first; that start is what plan stability wants. Replicas the
    routed load does not need are dropped at the end (kept ones last). ``demands`` and
    ``regions`` restrict the plan to some demands and to routes into some regions.
    """
    problem = instance.problem
    remaining: dict[tuple[str, str], int] = {}
    for site in places.values():
        for z in site.n_ub:
            key = (z, site.shape.accelerator)
            remaining[key] = problem.inventory_gpus(*key)
    counts: dict[tuple[str, str], dict[str, int]] = {
        key: dict.fromkeys(site.n_ub, 0) for key, site in places.items()
    }
    if keep:
        for (z, s), wanted in sorted(keep.items()):
            key = (problem.region_of_zone(z), s)
            kept_site = places.get(key)
            if kept_site is None or z not in kept_site.n_ub:
                continue
            acc = (z, kept_site.shape.accelerator)
            take = min(wanted, remaining[acc] // kept_site.shape.gpus)
            counts[key][z] = take
            remaining[acc] -= take * kept_site.shape.gpus
    loads: dict[tuple[str, str], tuple[float, float, float, float]] = {}
    share: dict[int, float] = {}

    def caps_of(site: Site, key: tuple[str, str]) -> dict[str, int]:
        return {
            z: counts[key][z] + remaining[(z, site.shape.accelerator)] // site.shape.gpus
            for z in site.n_ub
        }

    def with_route(key: tuple[str, str], route: Route) -> tuple[float, float, float, float]:
        old = loads.get(key, (0.0, 0.0, 0.0, 0.0))
        return (
            old[0] + route.load,
            old[1] + (route.load if route.promise_level >= 1 else 0.0),
            old[2] + (route.load if route.promise_level >= 2 else 0.0),
            old[3] + route.concurrency,
        )

    def size(di: int) -> float:
        return min((instance.routes[ri].load for ri in instance.routes_of[di]), default=0.0)

    chosen = range(len(instance.demands)) if demands is None else demands
    order = sorted(
        (di for di in chosen if instance.routes_of[di]),
        key=lambda di: (instance.demands[di].priority, -size(di), instance.demands[di].id),
    )
    for di in order:
        best: tuple[float, float, str, str] | None = None
        best_move: tuple[int, dict[str, int]] | None = None
        for ri in instance.routes_of[di]:
            route = instance.routes[ri]
            if regions is not None and route.region not in regions:
                continue
            key = (route.region, route.shape)
            site = places[key]
            adds = _grow(counts[key], caps_of(site, key), with_route(key, route))
            if adds is None:
                continue
            rank = (sum(adds.values()) * site.price, route.rtt_ms, route.region, route.shape)
            if best is None or rank < best:
                best, best_move = rank, (ri, adds)
        if best_move is None:
            continue  # unserved: nothing can take the whole demand
        ri, adds = best_move
        route = instance.routes[ri]
        key = (route.region, route.shape)
        site = places[key]
        for z, k in adds.items():
            counts[key][z] += k
            remaining[(z, site.shape.accelerator)] -= k * site.shape.gpus
        loads[key] = with_route(key, route)
        share[ri] = 1.0
    for key, per_zone in counts.items():
        _trim(per_zone, loads.get(key, (0.0, 0.0, 0.0, 0.0)), keep or {}, key[1])
    placed = {
        (z, s): n for (_r, s), per_zone in counts.items() for z, n in per_zone.items() if n > 0
    }
    return Plan(replicas=placed, share=share)


def _trim(
    counts: dict[str, int],
    loads: tuple[float, float, float, float],
    keep: Mapping[tuple[str, str], int],
    shape: str,
) -> None:
    """Drop replicas the loads do not need (kept ones last), one at a time, in place."""
    while True:
        candidates = sorted(
            (z for z in counts if counts[z] > 0),
            key=lambda z: (-(counts[z] - keep.get((z, shape), 0)), -counts[z], z),
        )
        for z in candidates:
            counts[z] -= 1
            if _grow(counts, dict(counts), loads) == {}:
                break
            counts[z] += 1
        else:
            return
