"""What a new plan changes against the active one, from the two plans' documents.

Pure functions over the typed problem and solution of two plans (``PlanDocuments``; no
database), so a diff can be recomputed from any two stored plans. The diff lists:

- ``replicas``: each (zone, shape) whose replica count changed, with before, after and the
  change; ``replicas_added`` / ``replicas_removed`` and ``gpus_added`` / ``gpus_removed`` total
  the increases and decreases;
- ``cost_per_hour``: before, after and the change, dollars per hour;
- ``routing_changed``: demands whose traffic moved between regions or shapes, compared as
  shares of the demand's planned rate, so a demand that only grew is not "moved";
- ``demands_added`` / ``demands_removed``: demand ids only one of the plans has;
- ``newly_unserved``: demands with more requests/s left unserved than before (before is 0 for a
  demand the old plan did not have), and the unserved totals.

``serves_less(diff)`` is the activation rule: a plan that leaves any demand more unserved than
the active plan does waits for approval.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.plans.models import Plan
from controlplane.plans.selectors import (
    Problem,
    ProblemInvalid,
    Solution,
    plan_problem_or_error,
    plan_solution,
    read_problem,
    read_solution,
)

# A demand's routing changed when some (region, shape) share of its planned rate moved by
# more than this: 0.1% of the demand, well above solver noise, well below any real move.
ROUTING_SHARE_TOLERANCE = 1e-3
# Unserved requests/s must grow by more than this × max(1, the demand's planned rate) to count.
UNSERVED_TOLERANCE = 1e-6


@dataclass(frozen=True)
class PlanDocuments:
    """One plan, typed: the problem it solved (None when that problem was invalid) and its
    solution."""

    problem: Problem | None
    solution: Solution

    @classmethod
    def read(cls, problem: Mapping[str, Any], solution: Mapping[str, Any]) -> PlanDocuments:
        """The two stored documents, read (``controlplane.plans.selectors``)."""
        typed = read_solution(solution)
        try:
            parsed: Problem | None = read_problem(problem)
        except ProblemInvalid:
            parsed = None
        return cls(parsed, typed)

    @classmethod
    def of(cls, plan: Plan) -> PlanDocuments:
        """A stored plan's documents, typed."""
        return cls(plan_problem_or_error(plan)[0], plan_solution(plan))


def _zone_regions(problem: Problem | None) -> dict[str, str]:
    return {z: r.name for r in problem.regions for z in r.zones} if problem else {}


def _shape_gpus(problem: Problem | None) -> dict[str, int]:
    return {s.name: s.gpus for s in problem.shapes} if problem else {}


def _replicas(solution: Solution | None) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for row in solution.replicas if solution else ():
        key = (row.zone, row.shape)
        out[key] = out.get(key, 0) + row.replicas
    return out


def _planned_rates(problem: Problem | None) -> dict[str, float]:
    """Planned requests/s of each demand: requests_per_s × burst."""
    return {d.id: d.planned_requests_per_s for d in problem.demands} if problem else {}


def _routing_shares(
    solution: Solution | None, planned: Mapping[str, float]
) -> dict[str, dict[tuple[str, str], float]]:
    """Per demand, the share of its planned rate each (region, shape) serves."""
    shares: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    for row in solution.routing if solution else ():
        rate = planned.get(row.demand, 0.0)
        if rate <= 0:
            continue
        key = (row.region, row.shape)
        shares[row.demand][key] = shares[row.demand].get(key, 0.0) + row.requests_per_s / rate
    return shares


def _unserved(solution: Solution | None) -> dict[str, tuple[float, str, int]]:
    """Unserved requests/s per demand, with its tenant and priority."""
    out: dict[str, tuple[float, str, int]] = {}
    for row in solution.unserved if solution else ():
        previous = out.get(row.demand, (0.0, "", 0))[0]
        out[row.demand] = (previous + row.requests_per_s, row.tenant, row.priority)
    return out


def _share_rows(shares: Mapping[tuple[str, str], float]) -> list[dict[str, Any]]:
    return [
        {"region": region, "shape": shape, "share": round(share, 6)}
        for (region, shape), share in sorted(shares.items())
        if share > 0
    ]


def _demand_info(problem: Problem | None) -> dict[str, tuple[str, int]]:
    return {d.id: (d.tenant, d.priority) for d in problem.demands} if problem else {}


def plan_diff(
    *, before: PlanDocuments | None, after: PlanDocuments, before_version: int | None = None
) -> dict[str, Any]:
    """The changes from ``before`` (the active plan; None when there is none) to ``after``.

    Requests/s are in planned units (``requests_per_s × burst``), dollars per hour for cost.
    """
    old_problem = before.problem if before else None
    old_solution = before.solution if before else None
    regions = {**_zone_regions(old_problem), **_zone_regions(after.problem)}
    gpus = {**_shape_gpus(old_problem), **_shape_gpus(after.problem)}

    old_replicas, new_replicas = _replicas(old_solution), _replicas(after.solution)
    replica_rows = []
    added = removed = gpus_added = gpus_removed = 0
    for zone, shape in sorted(set(old_replicas) | set(new_replicas)):
        was, now = old_replicas.get((zone, shape), 0), new_replicas.get((zone, shape), 0)
        if was == now:
            continue
        change = now - was
        replica_rows.append(
            {
                "region": regions.get(zone, ""),
                "zone": zone,
                "shape": shape,
                "before": was,
                "after": now,
                "change": change,
            }
        )
        per_replica = gpus.get(shape, 0)
        if change > 0:
            added += change
            gpus_added += change * per_replica
        else:
            removed -= change
            gpus_removed -= change * per_replica

    old_planned, new_planned = _planned_rates(old_problem), _planned_rates(after.problem)
    old_shares = _routing_shares(old_solution, old_planned)
    new_shares = _routing_shares(after.solution, new_planned)
    routing_changed = []
    for demand in sorted(set(old_planned) & set(new_planned)):
        was_shares, now_shares = old_shares.get(demand, {}), new_shares.get(demand, {})
        keys = set(was_shares) | set(now_shares)
        if any(
            abs(was_shares.get(k, 0.0) - now_shares.get(k, 0.0)) > ROUTING_SHARE_TOLERANCE
            for k in keys
        ):
            routing_changed.append(
                {
                    "demand": demand,
                    "before": _share_rows(was_shares),
                    "after": _share_rows(now_shares),
                }
            )

    old_unserved, new_unserved = _unserved(old_solution), _unserved(after.solution)
    info = _demand_info(after.problem)
    newly_unserved = []
    for demand, (rate, tenant, priority) in sorted(new_unserved.items()):
        unserved_before = old_unserved.get(demand, (0.0, "", 0))[0]
        if rate - unserved_before > UNSERVED_TOLERANCE * max(1.0, new_planned.get(demand, 0.0)):
            tenant_name, demand_priority = info.get(demand, (tenant, priority))
            newly_unserved.append(
                {
                    "demand": demand,
                    "tenant": tenant or tenant_name,
                    "priority": demand_priority,
                    "before": unserved_before,
                    "after": rate,
                }
            )

    old_cost = float((old_solution.cost_per_hour if old_solution else None) or 0.0)
    new_cost = float(after.solution.cost_per_hour or 0.0)
    old_total_unserved = sum(r for r, _, _ in old_unserved.values())
    new_total_unserved = sum(r for r, _, _ in new_unserved.values())
    return {
        "against_version": before_version,
        "replicas": replica_rows,
        "replicas_added": added,
        "replicas_removed": removed,
        "gpus_added": gpus_added,
        "gpus_removed": gpus_removed,
        "cost_per_hour": {"before": old_cost, "after": new_cost, "change": new_cost - old_cost},
        "routing_changed": routing_changed,
        "demands_added": sorted(set(new_planned) - set(old_planned)),
        "demands_removed": sorted(set(old_planned) - set(new_planned)),
        "newly_unserved": newly_unserved,
        "unserved_requests_per_s": {
            "before": old_total_unserved,
            "after": new_total_unserved,
            "change": new_total_unserved - old_total_unserved,
        },
    }


def serves_less(diff: Mapping[str, Any]) -> bool:
    """Whether the new plan leaves some demand more unserved than the plan it was compared
    with: such a plan is kept but waits for a policy admin's approval."""
    return diff.get("against_version") is not None and bool(diff.get("newly_unserved"))


def diff_lines(diff: Mapping[str, Any]) -> list[str]:
    """The diff in sentences an operator reads (cost, replicas, moves, newly unserved)."""
    against = diff.get("against_version")
    if against is None:
        return ["No active plan to compare with: every replica is new."]
    cost = diff["cost_per_hour"]
    lines = [
        f"Against active plan v{against}: cost {cost['before']:.2f} → {cost['after']:.2f} $/h "
        f"({cost['change']:+.2f}); replicas +{diff['replicas_added']} / "
        f"-{diff['replicas_removed']} (GPUs +{diff['gpus_added']} / -{diff['gpus_removed']})."
    ]
    for row in diff["replicas"]:
        lines.append(
            f"  {row['zone']} {row['shape']}: {row['before']} → {row['after']} ({row['change']:+d})"
        )
    if diff["routing_changed"]:
        moved = ", ".join(row["demand"] for row in diff["routing_changed"])
        lines.append(f"Routing changed for {len(diff['routing_changed'])} demands: {moved}.")
    if diff["demands_added"]:
        lines.append(f"New demands: {', '.join(diff['demands_added'])}.")
    if diff["demands_removed"]:
        lines.append(f"Demands no longer planned: {', '.join(diff['demands_removed'])}.")
    for row in diff["newly_unserved"]:
        lines.append(
            f"Newly unserved: {row['demand']} (priority {row['priority']}) "
            f"{row['before']:.3g} → {row['after']:.3g} req/s."
        )
    return lines
