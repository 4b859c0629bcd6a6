"""Captive-region bounds: the integer floors of each region, carried into a part's LP.

A part spans many regions only through demands that may spill; most demands can only be
served in one region. Those captive demands cost their region at least the optimum of
the region's own small MIP (rounding, N+1 and zone-loss floors included), so the row
``Σ_{blocks of r} price · N ≥ that optimum`` is valid for the whole part once everyone is
to be served. The part's LP bound then starts from the regions' integer costs rather than
from fractional replicas (measured in docs/placement.md).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence

from planner.placement.linear import BackendName, make_backend
from planner.placement.model import Part, PlacementModel


def _sub_model(
    model: PlacementModel, regions: frozenset[str], demands: Sequence[int]
) -> PlacementModel:
    cells = tuple(c for c in model.part.cells if c[0] in regions)
    return PlacementModel(
        model.instance,
        Part(cells=cells, demands=tuple(demands)),
        coupled=model.coupled,
        places=model.places,
    )


def _least_cost_bound(
    sub: PlacementModel, *, time_limit_s: float, workers: int, seed: int, backend: BackendName
) -> float | None:
    """A proven lower bound on the cost of serving every demand of ``sub`` (its optimum if
    the solve finishes); None if the solve proved nothing."""
    solver = make_backend(sub.lm, backend, workers=workers, seed=seed)
    for v in sub.v.values():
        solver.set_upper_bound(v, 0.0)
    outcome = solver.solve(
        sub.cost_objective(), maximize=False, time_limit_s=time_limit_s, hint=None
    )
    return outcome.objective if outcome.proven_optimal else outcome.bound


def captive_bounds(
    model: PlacementModel,
    *,
    deadline: float,
    workers: int,
    seed: int,
    backend: BackendName,
) -> list[tuple[frozenset[str], float]]:
    """(region, least cost of its captive demands) for each region with captive demands.

    Valid only while every demand of the part is to be served in full.
    """
    instance = model.instance
    regions = sorted({c[0] for c in model.part.cells})
    if len(regions) < 2:
        return []
    captive: dict[str, list[int]] = defaultdict(list)
    for di in model.demands:
        where = {instance.routes[ri].region for ri in instance.routes_of[di]}
        if len(where) == 1:
            captive[next(iter(where))].append(di)
    out: list[tuple[frozenset[str], float]] = []
    for i, r in enumerate(regions):
        if not captive[r]:
            continue
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        sub = _sub_model(model, frozenset([r]), captive[r])
        bound = _least_cost_bound(
            sub,
            time_limit_s=left / (len(regions) - i),
            workers=workers,
            seed=seed,
            backend=backend,
        )
        if bound is not None and bound > 0:
            out.append((frozenset([r]), bound))
    return out


def bound_rows(
    model: PlacementModel, bounds: Sequence[tuple[frozenset[str], float]]
) -> list[tuple[list[tuple[int, float]], float]]:
    """The rows ``Σ_{blocks in group} price · N ≥ bound`` (a hair below, for float noise)."""
    rows: list[tuple[list[tuple[int, float]], float]] = []
    for group, bound in bounds:
        terms = [
            term
            for (r, _s), b in sorted(model.blocks.items())
            if r in group
            for term in b.count_terms(b.price)
        ]
        if terms:
            rows.append((terms, bound * (1 - 1e-9) - 1e-9))
    return rows
