"""What an operator reads about a plan: a headline, each region's replicas, what is left
unserved, what binds, which figures are stale, how demand was sized, and why the plan was or
was not activated. Built once when the plan is stored and kept with it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.plans.demand import DemandForecast
from controlplane.plans.diff import diff_lines
from controlplane.plans.selectors import Problem, Solution
from planner.placement.explain import explain


def stale_sentences(stale: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per stale capacity figure, for ``binding`` and the explanation."""
    return [
        f"Stale capacity figure: {row['shape']} was last measured {row['measured_at'][:10]} "
        f"({row['age_days']:g} days ago, limit {row['max_age_days']} days); the replica counts "
        f"of this shape rest on it. Re-measure the shape before trusting them."
        for row in stale
    ]


def _region_lines(problem: Problem, solution: Solution) -> list[dict[str, Any]]:
    zone_region = {z: r.name for r in problem.regions for z in r.zones}
    shapes = {s.name: s for s in problem.shapes}
    rows: dict[str, list[str]] = defaultdict(list)
    gpus: dict[str, int] = defaultdict(int)
    for row in solution.replicas:
        region = zone_region.get(row.zone, "?")
        shape = shapes.get(row.shape)
        count = row.replicas * (shape.gpus if shape else 0)
        gpus[region] += count
        rows[region].append(
            f"{row.zone}: {row.replicas} × {row.shape} "
            f"({count} {shape.accelerator if shape else '?'})"
        )
    return [
        {"region": region, "gpus": gpus[region], "allocations": lines}
        for region, lines in sorted(rows.items())
    ]


def _planner_account(problem: Problem, solution: Solution) -> list[str]:
    """The planner's own account of the plan (``planner.placement.explain``): the plan in one
    line, each tenant's shortfall, the binding rows. The price of each promise is left out:
    it costs two more solves, which a re-plan's time budget does not hold."""
    return explain(problem, solution.to_json(), promise_prices=False).lines()


def verification_sentences(verification: Mapping[str, Any]) -> list[str]:
    """The replay's verdict in sentences: the headline, each demand that misses, each demand
    whose load was raised to hold, and the rounds it took."""
    if not verification.get("replayed"):
        if verification.get("disabled"):
            return ["Not replayed: replay verification is off (HEADROOM_REPLAY_VERIFY)."]
        return ["Not replayed: no demand has a TTFT objective."]
    demands = verification.get("demands", [])
    tenants = verification.get("tenants", [])
    judged = [v for v in tenants if v.get("holds") is not None]
    logs = sum(1 for v in demands if v.get("source") == "request log")
    rounds = verification.get("rounds", [])
    if verification.get("holds"):
        head = (
            f"Replay holds: all {len(judged)} tenants with an objective keep their p95 TTFT "
            "in every failure their promise covers"
        )
    else:
        missing = [v for v in judged if v.get("holds") is False]
        head = f"Replay misses: {len(missing)} of {len(judged)} tenants miss their p95 TTFT"
    lines = [
        f"{head} ({len(demands)} demands: {logs} replayed from request logs, "
        f"{len(demands) - logs} from synthesised arrivals; {len(rounds)} "
        f"solve{'s' if len(rounds) != 1 else ''})."
    ]
    for v in tenants:
        if v.get("holds") is False:
            worst = v.get("worst_p95_ttft_s")
            shown = f"{worst:.2f} s" if isinstance(worst, int | float) else "unbounded"
            lines.append(
                f"{v['tenant']}: p95 TTFT {shown} with {v['worst_scenario']}, objective "
                f"{v['ttft_slo_s']:g} s."
            )
    for demand, raised in sorted(verification.get("raised", {}).items()):
        lines.append(
            f"{demand}: load raised from burst {raised['burst_before']:g} to "
            f"{raised['burst']:g} so that its replay holds."
        )
    for short in verification.get("shortfalls", []):
        if short.get("needed_live") is None:
            lines.append(
                f"{short['shape']} in {short['region']} ({short['scenario']}): no number of "
                "replicas holds its demands' p95 TTFT (the prefill alone is too slow)."
            )
    return lines


def plan_explanation(
    *,
    version: int,
    problem: Problem | None,
    solution: Solution,
    planned_requests_per_s: float,
    diff: Mapping[str, Any],
    stale: Sequence[Mapping[str, Any]],
    forecast: DemandForecast,
    warnings: Sequence[str],
    decision: str,
    trigger: str = "",
) -> dict[str, Any]:
    """The explanation document of plan ``version`` (JSON-serialisable); ``trigger`` says
    what requested the re-plan (``services.trigger_sentence``); ``problem`` is None when it
    was invalid (the solution then says why)."""
    if problem is None or solution.is_invalid:
        headline = f"Plan v{version}: the problem was invalid: {solution.message or '?'}"
    else:
        gpus = sum(r["gpus"] for r in _region_lines(problem, solution))
        unserved = float(solution.unserved_requests_per_s or 0.0)
        served = (
            f"all {planned_requests_per_s:.2f} req/s planned served"
            if unserved <= 0
            else f"{unserved:.2f} of {planned_requests_per_s:.2f} req/s planned left unserved"
        )
        headline = (
            f"Plan v{version}: {len(solution.replicas)} allocations, {gpus} GPUs, "
            f"{float(solution.cost_per_hour or 0.0):.2f} $/h; {served}."
        )
    sources = forecast.sources
    if sources.get("telemetry"):
        sizing = (
            f"{sources['telemetry']} demands sized from the request-rate forecast (peak of the "
            f"tier's quantile over {forecast.horizon_hours} h from {forecast.anchor:%Y-%m-%d}), "
            f"{sources.get('declared', 0)} from declared workload profiles."
        )
    else:
        sizing = "Every demand is sized from its declared workload profile (no rate history)."
    out: dict[str, Any] = {
        "headline": headline,
        "decision": decision,
        "regions": _region_lines(problem, solution) if problem is not None else [],
        "unserved": [
            f"{row.demand} (tenant {row.tenant}, priority "
            f"{row.priority}): {float(row.requests_per_s):.3g} req/s"
            for row in solution.unserved
        ],
        "binding": list(solution.binding),
        "stale_figures": stale_sentences(stale),
        "demand": [sizing, *forecast.notes],
        "changes": diff_lines(diff),
        "warnings": list(warnings),
    }
    if problem is not None and not solution.is_invalid:
        out["planner"] = _planner_account(problem, solution)
        out["excluded_shapes"] = [
            f"{row.shape} is not eligible for {row.demand}: {row.reason}."
            for row in solution.excluded_shapes or ()
        ]
        out["verification"] = verification_sentences(solution.verification or {})
    if trigger:
        out["trigger"] = trigger
    return out
