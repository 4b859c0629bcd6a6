"""Reads for plans: the active and newest plans, a plan's typed problem and solution, the
capacity figures a problem rests on, and a plan's summary for the terminal.

A plan stores its problem and solution as the JSON documents of ``docs/placement-format.md``
(``Plan.problem``, ``Plan.solution``). Everything outside this app reads them through
``plan_problem`` and ``plan_solution`` here, as the planner's typed ``Problem`` and
``Solution``; the import contract "Only controlplane.plans reads the placement documents"
(pyproject.toml) keeps the other apps off the planner's parsers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from controlplane.fleet.models import ReplicaShape
from controlplane.fleet.selectors import planning_figures
from controlplane.plans.models import Plan, ReplanRun
from planner.errors import PlannerInputError
from planner.placement.problem import Demand, Problem, ProblemInvalid, parse_problem
from planner.placement.solution import (
    ReplicaRow,
    RouteRow,
    Solution,
    SolutionInvalid,
    UnservedRow,
    parse_solution,
)

__all__ = [
    "Demand",
    "Problem",
    "ProblemInvalid",
    "ReplicaRow",
    "RouteRow",
    "Solution",
    "SolutionInvalid",
    "UnservedRow",
    "plan_active",
    "plan_problem",
    "plan_problem_or_error",
    "plan_solution",
    "read_problem",
    "read_solution",
]

# A plan's stored documents: hundreds of kilobytes each on a large fleet. Reads that show a
# plan's figures, or whose derived values are memoised per plan (``core.memo``), defer them;
# a deferred field is read on its first access.
PLAN_DOCUMENTS = ("problem", "solution", "explanation", "diff", "binding")


# What of a stored plan changes after it is written: its state, its decision and who made it
# (and those users' names, which the API shows). Everything else a plan's detail shows (its
# figures, documents, allocations and routing) is written with the plan and never changes.
PLAN_DECISION = (
    "state",
    "activated_at",
    "approved_by__username",
    "rejected_at",
    "rejected_by__username",
    "created_by__username",
)


def plan_detail_key(**filters: Any) -> tuple[int, datetime, tuple[Any, ...]] | None:
    """The first plan ``filters`` select, as one small row: its id, its creation time and
    ``PLAN_DECISION``; together they name what its detail shows. None if none is selected."""
    row = Plan.objects.filter(**filters).order_by("pk").values("pk", "created_at", *PLAN_DECISION)
    found = row.first()
    if found is None:
        return None
    return found["pk"], found["created_at"], tuple(found[name] for name in PLAN_DECISION)


def plan_active(*, for_update: bool = False) -> Plan | None:
    """The active plan, if any. ``for_update`` locks its row until the end of the transaction."""
    rows = Plan.objects.filter(state=Plan.State.ACTIVE)
    if for_update:
        rows = rows.select_for_update()
    return rows.first()


def _parsed(plan: Plan, name: str, parse: Any) -> Any:
    """``parse`` of the plan's document ``name``, kept on the instance while the document is
    the same object (a stored document is hundreds of kilobytes on a large fleet)."""
    document = getattr(plan, name)
    cache: dict[str, tuple[object, Any]] = plan.__dict__.setdefault("_typed_documents", {})
    held = cache.get(name)
    if held is not None and held[0] is document:
        return held[1]
    parsed = parse(document)
    cache[name] = (document, parsed)
    return parsed


def read_problem(document: object) -> Problem:
    """A problem document (one the plans app built, or a variant of a plan's) read as the
    planner's typed ``Problem``; raises ``ProblemInvalid`` naming the field."""
    return parse_problem(document)


def read_solution(document: object) -> Solution:
    """A solution document (``planner.placement.solve``'s) read as a typed ``Solution``;
    raises ``SolutionInvalid`` naming the field."""
    return parse_solution(document)


def plan_problem(plan: Plan) -> Problem:
    """The problem ``plan`` solved, typed. Raises ``ProblemInvalid`` naming the field when the
    stored document is not a valid problem (a plan the planner made always has one)."""
    problem: Problem = _parsed(plan, "problem", parse_problem)
    return problem


def plan_problem_or_error(plan: Plan) -> tuple[Problem | None, str]:
    """The plan's typed problem, or None and why it could not be read."""
    try:
        return plan_problem(plan), ""
    except PlannerInputError as error:
        return None, str(error)


def plan_solution(plan: Plan) -> Solution:
    """The plan's solution, typed. Raises ``SolutionInvalid`` naming the field when the stored
    document is not a solution."""
    solution: Solution = _parsed(plan, "solution", parse_solution)
    return solution


def active_problem() -> Problem | None:
    """The active plan's typed problem (None: no plan is active)."""
    plan = plan_active()
    return None if plan is None else plan_problem(plan)


def active_solution() -> Solution | None:
    """The active plan's typed solution (None: no plan is active)."""
    plan = plan_active()
    return None if plan is None else plan_solution(plan)


def plan_newest() -> Plan | None:
    """The plan with the highest version: the one a new re-plan's inputs are compared with."""
    return Plan.objects.order_by("-version").first()


def plan_list() -> QuerySet[Plan]:
    return Plan.objects.select_related("created_by", "approved_by", "rejected_by").order_by(
        "-version"
    )


def plan_detail_queryset() -> QuerySet[Plan]:
    """Plans in full as the API shows them: everything but the solved problem (the largest
    document, which the detail does not include)."""
    return plan_list().prefetch_related("allocations", "routing").defer("problem")


def replan_run_list() -> QuerySet[ReplanRun]:
    return ReplanRun.objects.select_related("requested_by", "plan").order_by("-created_at", "-pk")


def stale_figures(*, shape_names: Iterable[str]) -> list[dict[str, Any]]:
    """The capacity figures older than ``HEADROOM_CAPACITY_MAX_AGE_DAYS`` among those the
    placement problem's shapes were built from, one entry per shape (oldest first).

    The figure of each shape is the one planning uses (``fleet.selectors.planning_figures``),
    the one the problem was built from, so the flag names exactly the measurement the plan
    rests on.
    """
    shapes = {shape.pk: shape for shape in ReplicaShape.objects.filter(name__in=set(shape_names))}
    out = []
    for shape_id, figure in planning_figures(shape_ids=shapes).items():
        shape = shapes[shape_id]
        if not figure.is_stale:
            continue
        out.append(
            {
                "shape": shape.name,
                "figure": figure.pk,
                "workload_class": (
                    figure.workload_class.name if figure.workload_class is not None else None
                ),
                "measured_at": figure.measured_at.isoformat(),
                "age_days": round(figure.age.total_seconds() / 86400, 1),
                "max_age_days": settings.HEADROOM_CAPACITY_MAX_AGE_DAYS,
                "source": figure.source,
            }
        )
    out.sort(key=lambda row: (row["measured_at"], row["shape"]))
    return out


def plan_summary(plan: Plan) -> str:
    """The plan for the terminal: state, cost, per region its allocations (zone × shape ×
    replicas), unserved demand, binding constraints and stale figures."""
    lines = [
        f"Plan v{plan.version} ({plan.get_state_display()}, solver {plan.solver_status}, "
        f"trigger {plan.trigger}), inputs {plan.inputs_hash[:12]}",
    ]
    if plan.solver_status == Plan.SolverStatus.INVALID:
        lines.append(f"  The problem was invalid: {plan_solution(plan).message or '?'}")
        return "\n".join(lines)
    gap = f", gap {plan.gap:.2%}" if plan.gap else ""
    lines.append(
        f"Cost: {plan.cost_per_hour or 0.0:.2f} $/h; solved in {plan.solve_seconds or 0.0:.2f} s"
        f"{gap}; planned {plan.planned_requests_per_s:.2f} req/s, unserved "
        f"{plan.unserved_requests_per_s:.2f} req/s"
    )
    band = plan.forecast_band or {}
    low, high = band.get("low", {}), band.get("high", {})
    if "cost_per_hour" in low and "cost_per_hour" in high:
        lines.append(
            f"Forecast band: {low['cost_per_hour']:.2f} $/h at q={low['quantile']:g}, "
            f"{high['cost_per_hour']:.2f} $/h at q={high['quantile']:g}"
        )
    by_region: dict[str, list[Any]] = defaultdict(list)
    for row in plan.allocations.all():
        by_region[row.region].append(row)
    if not by_region:
        lines.append("No replicas.")
    for region, rows in sorted(by_region.items()):
        gpus = sum(r.replicas * r.gpus_per_replica for r in rows)
        cost = sum(r.cost_per_hour for r in rows)
        lines.append(f"{region}: {gpus} GPUs, {cost:.2f} $/h")
        for r in rows:
            lines.append(
                f"  {r.zone} × {r.shape} × {r.replicas} ({r.replicas * r.gpus_per_replica} "
                f"{r.accelerator})"
            )
    unserved = plan_solution(plan).unserved
    if unserved:
        lines.append("Unserved:")
        for missed in unserved:
            lines.append(
                f"  {missed.demand} (priority {missed.priority}): {missed.requests_per_s:.3g} req/s"
            )
    if plan.binding:
        lines.append("Binding:")
        lines += [f"  {sentence}" for sentence in plan.binding]
    if plan.diff:
        approval = plan.explanation.get("decision") if plan.explanation else None
        if approval:
            lines.append(f"Decision: {approval}")
    return "\n".join(lines)
