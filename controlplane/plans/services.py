"""Re-planning: build the placement problem, solve it, store the plan, decide its activation.

A re-plan is a ``ReplanRun`` row (a job): ``replan_request`` creates it and enqueues the task
once the creating transaction commits; ``replan_execute`` runs it. Running one:

1. **Status guard.** Only a queued or running run is executed, so a retried or redelivered
   task of a finished run does nothing.
2. **Lock.** The run claims the planner lock (``lock.py``), a database row claimed by
   conditional UPDATE with an expiry: at most one re-plan runs at a time across processes and
   machines. A run that cannot claim it is SKIPPED (or waits, with ``wait_s``). A claim that
   expired belonged to a worker that died; taking it over marks that worker's run failed.
3. **Inputs.** ``problem_export`` builds the placement problem from policies, profiles and
   capacity figures; ``demand.demand_forecast`` sizes each demand for its tier's quantile of
   the forecast band. The inputs hash is the SHA-256 of the canonical problem JSON (without
   ``previous``). The same hash as the newest plan makes no new plan (UNCHANGED).
4. **Solve** with the active plan's replicas as ``previous`` (least change breaks ties), then
   twice more with a shorter time limit at the band's low and high edges, for their cost.
5. **Store** in one transaction, after checking that this run still holds the lock and is
   still running and that the newest plan still has another hash: the plan with its
   allocations and routing, its diff against the active plan, its binding constraints (stale
   figures included) and explanation. A plan that leaves some demand more unserved than the
   active plan waits for approval; any other valid plan is activated at once.

A worker killed between steps 3 and 5 leaves the run RUNNING and the lock claimed by
``run:<id>``; the redelivered task (``acks_late``) gets the claim back, solves again and
stores one plan. Ordinary errors mark the run FAILED and release the lock.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from controlplane.core.outage import on_fresh_connection
from controlplane.core.roles import POLICY_ADMIN, user_roles
from controlplane.core.schedule import ScheduledTask
from controlplane.core.tasks import job_send_on_commit
from controlplane.plans import lock, selectors
from controlplane.plans.conf import ReplanSettings, replan_settings
from controlplane.plans.demand import (
    SOURCE_DECLARED,
    DemandForecast,
    demand_forecast,
    history_window,
    planned_requests_per_s,
    rate_history,
)
from controlplane.plans.diff import PlanDocuments, plan_diff, serves_less
from controlplane.plans.explanation import plan_explanation, stale_sentences
from controlplane.plans.models import Plan, PlanAllocation, PlanDecision, PlanRouting, ReplanRun
from controlplane.plans.problem import (
    problem_demand_ids,
    problem_export,
    problem_shape_names,
    problem_with_demands,
    problem_zone_names,
)
from controlplane.plans.selectors import Demand, Problem, ProblemInvalid, Solution
from controlplane.plans.signals import plan_activated
from controlplane.policies.models import WorkloadProfile
from controlplane.telemetry import traces
from controlplane.telemetry.models import DriftAlert, RequestTrace
from controlplane.telemetry.selectors import last_pull_with_samples
from planner import placement
from planner.errors import PlannerInputError
from planner.placement import verified
from planner.placement.replay import Traffic

logger = logging.getLogger(__name__)

Actor = AbstractBaseUser | AnonymousUser

REPLAN_TASK = "headroom.plans.replan"
# Runs in these states may still be executed; any other state is final.
OPEN_STATUSES = (ReplanRun.Status.QUEUED, ReplanRun.Status.RUNNING)
# How often a run waiting for the lock tries again, seconds.
LOCK_POLL_S = 0.5
# How the error of a run that failed for a stated reason begins: no demand, a problem the
# planner finds invalid, or inputs the planner refuses (naming the field). Any other failure
# is unexpected: it is logged with its traceback and recorded as "<exception type>: ...".
NOTHING_TO_PLAN = "Nothing to plan:"
PROBLEM_INVALID = "The placement problem is invalid:"
INPUTS_REFUSED = "The planning inputs are outside what the planner can use:"
TELEMETRY_MISSING = "Telemetry is required but missing:"
STATED_FAILURES = (NOTHING_TO_PLAN, PROBLEM_INVALID, INPUTS_REFUSED, TELEMETRY_MISSING)


class LockLost(Exception):
    """The run's claim on the planner lock expired and another run took it over."""


# -- inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplanInputs:
    """What a re-plan solves: the problem (demands sized from the forecast), its hash, the
    forecast with its band problems, the stale capacity figures and the export's warnings."""

    problem: dict[str, Any]
    inputs_hash: str
    forecast: DemandForecast
    stale_figures: list[dict[str, Any]]
    warnings: list[str]
    #: ``problem`` read as the planner's typed ``Problem``; None when it is invalid (the
    #: re-plan still stores it, with the solver's reason, as an invalid plan).
    parsed: Problem | None = None


def problem_inputs_hash(problem: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``problem`` without ``previous``.

    ``previous`` (the active plan's replicas) only breaks ties between equally good plans; it
    is not an input to what is needed, and hashing it would make every activation change the
    next re-plan's hash.
    """
    body = {k: v for k, v in problem.items() if k != "previous"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def replan_inputs(
    *,
    now: datetime | None = None,
    settings: ReplanSettings | None = None,
    replace: Mapping[int, WorkloadProfile] | None = None,
) -> ReplanInputs:
    """Build the placement problem a re-plan at ``now`` solves, from the database.

    ``replace`` (profile id → a profile standing in for it) builds it with other figures for
    some demands, as ``problem_export`` does: the problem before a drift.
    """
    now = now or timezone.now()
    settings = settings or replan_settings()
    warnings: list[str] = []
    exported = problem_export(warn=warnings.append, replace=replace)
    start, end = history_window(now=now, settings=settings)
    forecast = demand_forecast(
        problem=exported, now=now, settings=settings, history=rate_history(start=start, end=end)
    )
    problem = forecast.problem
    try:
        parsed: Problem | None = selectors.read_problem(problem)
    except ProblemInvalid:
        parsed = None
    shape_names = [s.name for s in parsed.shapes] if parsed else problem_shape_names(problem)
    return ReplanInputs(
        problem=problem,
        inputs_hash=problem_inputs_hash(problem),
        forecast=forecast,
        stale_figures=selectors.stale_figures(shape_names=shape_names),
        warnings=warnings,
        parsed=parsed,
    )


def with_previous(problem: Mapping[str, Any], active: Plan | None) -> dict[str, Any]:
    """``problem`` with the active plan's replicas as ``previous``, keeping only the rows whose
    zone and shape the problem still has (a zone gone down, a shape removed would make the
    problem invalid)."""
    out = dict(problem)
    if active is None:
        return out
    zones = set(problem_zone_names(problem))
    shapes = set(problem_shape_names(problem))
    out["previous"] = [
        {"zone": row.zone, "shape": row.shape, "replicas": row.replicas}
        for row in active.allocations.all()
        if row.zone in zones and row.shape in shapes
    ]
    return out


# -- requesting and running -------------------------------------------------------------------


def replan_request(
    *, trigger: str, user: Actor | None = None, enqueue: bool = True, reason: str = ""
) -> ReplanRun:
    """Create a queued re-plan run and, with ``enqueue``, enqueue its task when the transaction
    commits (without ``enqueue`` the caller runs it with ``replan_execute``). ``reason`` says
    why beyond the trigger (the drift alerts behind a drift re-plan); the plan's explanation
    repeats it.

    Without a broker the task runs in-process at commit (the embedded default), so the run has
    finished when this returns outside a transaction.
    """
    with transaction.atomic():
        run = ReplanRun(trigger=trigger, requested_by=_recorded(user), reason=reason)
        run.full_clean()
        run.save()
        if enqueue:
            # Sent at commit (a worker must see the row); a broker down then fails the run
            # with the reason and raises BrokerUnavailable (the API's 503).
            job_send_on_commit(ReplanRun, run.pk, REPLAN_TASK, run.pk)
    return run


def drift_reason(alerts: Sequence[DriftAlert]) -> str:
    """The reason of a drift re-plan: the alerts' ids and messages."""
    noun = "alert" if len(alerts) == 1 else "alerts"
    ids = ", ".join(f"#{alert.pk}" for alert in alerts)
    return f"Drift {noun} {ids}: " + "; ".join(alert.message for alert in alerts)


def replan_execute(*, run_id: int, wait_s: float = 0.0) -> ReplanRun | None:
    """Run the re-plan ``run_id`` (see the module docstring); returns the run as it ended.

    ``wait_s`` is how long to wait for a running re-plan to release the lock before this one
    is SKIPPED (0: skip at once). None when the run does not exist (a task for a deleted run).
    Never raises for an ordinary failure: the run is marked FAILED with the error.
    """
    settings = replan_settings()
    run = ReplanRun.objects.filter(pk=run_id).first()
    if run is None:
        logger.warning("re-plan run %s does not exist; nothing to do", run_id)
        return None
    if run.status not in OPEN_STATUSES:
        return run
    holder = lock.lock_holder_for_run(run.pk)
    claim = _claim(holder=holder, settings=settings, wait_s=wait_s)
    if not claim.claimed:
        until = f" until {claim.expires_at:%Y-%m-%d %H:%M:%S} UTC" if claim.expires_at else ""
        _finish(
            run_id=run.pk,
            status=ReplanRun.Status.SKIPPED,
            error=f"Another re-plan ({claim.held_by}) holds the planner lock{until}.",
        )
        run.refresh_from_db()
        return run
    if claim.taken_over_from:
        _abandon(holder=claim.taken_over_from, by=holder)
    open_run = ReplanRun.objects.filter(pk=run.pk, status__in=OPEN_STATUSES)
    started = lock.retry_when_locked(
        lambda: open_run.update(
            status=ReplanRun.Status.RUNNING, started_at=timezone.now(), attempts=F("attempts") + 1
        )
    )
    if not started:  # finished meanwhile by another delivery of the same run
        lock.lock_release(holder=holder)
        run.refresh_from_db()
        return run
    try:
        _replan(run=run, holder=holder, settings=settings)
    except PlannerInputError as exc:
        # A figure the planner refuses (it names the field): a stated reason, not a crash.
        logger.warning("re-plan run %s refused its inputs: %s", run.pk, exc)
        _finish(run_id=run.pk, status=ReplanRun.Status.FAILED, error=f"{INPUTS_REFUSED} {exc}")
        lock.lock_release(holder=holder)
    except Exception as exc:
        logger.exception("re-plan run %s failed", run.pk)
        _finish(run_id=run.pk, status=ReplanRun.Status.FAILED, error=f"{type(exc).__name__}: {exc}")
        lock.lock_release(holder=holder)
    except (KeyboardInterrupt, SystemExit):
        _finish(run_id=run.pk, status=ReplanRun.Status.FAILED, error="Interrupted.")
        lock.lock_release(holder=holder)
        raise
    else:
        lock.lock_release(holder=holder)
    run.refresh_from_db()
    return run


def _claim(*, holder: str, settings: ReplanSettings, wait_s: float) -> lock.Claim:
    deadline = time.monotonic() + wait_s
    while True:
        claim = lock.lock_claim(holder=holder, ttl_s=settings.lock_ttl_s)
        if claim.claimed or time.monotonic() >= deadline:
            return claim
        time.sleep(min(LOCK_POLL_S, max(0.0, deadline - time.monotonic())))


def _finish(*, run_id: int, status: str, error: str = "", plan: Plan | None = None) -> bool:
    """Close an open run; False when it was already closed (by another delivery)."""
    open_run = ReplanRun.objects.filter(pk=run_id, status__in=OPEN_STATUSES)
    # On a new connection if the database restarted under the run: the failure is recorded.
    return bool(
        on_fresh_connection(
            lambda: lock.retry_when_locked(
                lambda: open_run.update(
                    status=status, finished_at=timezone.now(), error=error, plan=plan
                )
            )
        )
    )


def _abandon(*, holder: str, by: str) -> None:
    """Mark the run of an expired claim failed: its worker died without finishing it."""
    prefix = "run:"
    if not holder.startswith(prefix) or not holder[len(prefix) :].isdigit():
        return
    _finish(
        run_id=int(holder[len(prefix) :]),
        status=ReplanRun.Status.FAILED,
        error=f"Abandoned: its claim on the planner lock expired and {by} took it over.",
    )


def _renew(*, holder: str, settings: ReplanSettings) -> None:
    if not lock.lock_renew(holder=holder, ttl_s=settings.lock_ttl_s):
        raise LockLost(f"{holder} no longer holds the planner lock; another re-plan took it over")


def _solve(
    problem: Mapping[str, Any], *, time_limit_s: float, settings: ReplanSettings
) -> dict[str, Any]:
    return placement.solve(
        problem,
        time_limit_s=time_limit_s,
        workers=settings.solver_workers,
        seed=settings.solver_seed,
    )


def demand_traffic(problem: Mapping[str, Any]) -> dict[str, Traffic]:
    """The request logs a re-plan replays: each demand that names a stored ``request_trace``
    (a telemetry profile with an imported log), as ``planner.placement.replay.Traffic``."""
    try:
        demands = selectors.read_problem(problem).demands
    except ProblemInvalid:  # an invalid problem is not solved, so nothing is replayed
        return {}
    ids = {
        d.request_trace: d.id
        for d in demands
        if isinstance(d.request_trace, int) and not isinstance(d.request_trace, bool)
    }
    out: dict[str, Traffic] = {}
    for trace in RequestTrace.objects.filter(pk__in=ids):
        arrival, prompt, output = traces.decode(trace.arrays)
        if arrival.shape[0] == 0:
            continue
        out[ids[trace.pk]] = Traffic(
            arrival_s=arrival,
            prompt_tokens=prompt,
            output_tokens=output,
            requests_per_s=float(trace.peak_requests_per_s),
        )
    return out


def solve_and_verify(
    problem: Mapping[str, Any], *, settings: ReplanSettings
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Solve ``problem``; with ``replay_verify``, replay it against each demand's arrivals
    and re-solve with raised loads until it holds (``planner.placement.verified``). Returns
    the problem as solved (raised bursts in it) and the solution, whose ``verification``
    holds the replay's verdicts."""
    if not settings.replay_verify:
        solved = selectors.read_solution(
            _solve(problem, time_limit_s=settings.time_limit_s, settings=settings)
        )
        off = {"replayed": False, "holds": None, "disabled": True}
        return dict(problem), dataclasses.replace(solved, verification=off).to_json()
    result = verified.solve_verified(
        problem,
        demand_traffic(problem),
        seed=settings.solver_seed,
        max_rounds=settings.replay_max_rounds,
        time_limit_s=settings.time_limit_s,
        solver=lambda document, limit_s: _solve(document, time_limit_s=limit_s, settings=settings),
    )
    solved = selectors.read_solution(result.solution)
    if solved.is_invalid:
        return result.problem, solved.to_json()
    return result.problem, dataclasses.replace(solved, verification=result.verification()).to_json()


def _replan(*, run: ReplanRun, holder: str, settings: ReplanSettings) -> None:
    inputs = replan_inputs(settings=settings)
    if not (inputs.parsed.demands if inputs.parsed else problem_demand_ids(inputs.problem)):
        # With no demand the solver returns an "optimal" plan of 0 replicas; activating it
        # would scale the fleet to nothing without anyone deciding so.
        _finish(run_id=run.pk, status=ReplanRun.Status.FAILED, error=nothing_to_plan(inputs))
        return
    missing = telemetry_missing(inputs, settings=settings)
    if missing:
        _finish(run_id=run.pk, status=ReplanRun.Status.FAILED, error=missing)
        return
    newest = selectors.plan_newest()
    if newest is not None and newest.inputs_hash == inputs.inputs_hash:
        _finish(run_id=run.pk, status=ReplanRun.Status.UNCHANGED, plan=newest)
        return
    problem = with_previous(inputs.problem, selectors.plan_active())
    problem, solution = solve_and_verify(problem, settings=settings)
    _renew(holder=holder, settings=settings)
    band = _band(inputs.forecast, problem, solution, settings)
    _renew(holder=holder, settings=settings)
    with transaction.atomic():
        if not lock.lock_held_by(holder=holder, for_update=True):
            raise LockLost(f"{holder} lost the planner lock before storing its plan")
        current = ReplanRun.objects.select_for_update().get(pk=run.pk)
        if current.status != ReplanRun.Status.RUNNING:
            return  # another delivery of this run finished it
        newest = selectors.plan_newest()
        if newest is not None and newest.inputs_hash == inputs.inputs_hash:
            _finish(run_id=run.pk, status=ReplanRun.Status.UNCHANGED, plan=newest)
            return
        plan = plan_store(run=current, inputs=inputs, problem=problem, solution=solution, band=band)
        if plan.solver_status == Plan.SolverStatus.INVALID:
            _finish(
                run_id=run.pk,
                status=ReplanRun.Status.FAILED,
                error=f"{PROBLEM_INVALID} {solution.get('message', '?')}",
                plan=plan,
            )
        else:
            _finish(run_id=run.pk, status=ReplanRun.Status.SUCCEEDED, plan=plan)


def telemetry_missing(
    inputs: ReplanInputs, *, settings: ReplanSettings, now: datetime | None = None
) -> str:
    """Why the re-plan may not size demands from declared profiles, or "" when it may: with
    ``HEADROOM_REPLAN_REQUIRE_TELEMETRY`` on, once a telemetry pull has stored samples, every
    demand must be sized from telemetry (the error names those that are not)."""
    declared = inputs.forecast.demand_sources.get(SOURCE_DECLARED, [])
    if not settings.require_telemetry or not declared:
        return ""
    pull = last_pull_with_samples(before=now or timezone.now())
    if pull is None:
        return ""
    shown = ", ".join(declared[:20]) + (
        f" and {len(declared) - 20} more" if len(declared) > 20 else ""
    )
    return (
        f"{TELEMETRY_MISSING} {len(declared)} of {len(inputs.problem.get('demands', []))} "
        f"demands have no telemetry rate history to size them from (or too little for the "
        f"forecast): {shown}. Telemetry was last pulled at "
        f"{(pull.finished_at or pull.started_at):%Y-%m-%d %H:%M} UTC ({pull.bucket_s} s "
        "buckets). HEADROOM_REPLAN_REQUIRE_TELEMETRY is on, so no plan was made from their "
        "declared profiles: check that the pull covers these tenants, models and regions."
    )


def nothing_to_plan(inputs: ReplanInputs) -> str:
    """Why a problem without demands makes no plan, with the export's warnings."""
    text = (
        f"{NOTHING_TO_PLAN} no tenant has a workload profile for a model with a measured shape, "
        "so there is no demand to size; no plan was made. Load a scenario or add profiles."
    )
    if inputs.warnings:
        text += " " + "; ".join(inputs.warnings[:5])
        if len(inputs.warnings) > 5:
            text += f"; and {len(inputs.warnings) - 5} more"
        text += "."
    return text


def with_replay_raises(
    edge: Mapping[str, Any], verified_problem: Mapping[str, Any]
) -> dict[str, Any]:
    """A band edge's problem with the loads the plan's replay raised raised alike (the same
    factor on each demand's burst) and the shapes it excluded excluded, so that the edges
    price the same latency promise as the plan instead of the linear model's alone."""
    raised = {
        d.id: d
        for d in selectors.read_problem(verified_problem).demands
        if d.burst_before_replay is not None or d.excluded_shapes
    }
    if not raised:
        return dict(edge)
    return problem_with_demands(edge, lambda row: _raise_like(row, raised))


def _raise_like(row: Mapping[str, Any], raised: Mapping[str, Demand]) -> Mapping[str, Any]:
    """An edge's demand row with its verified twin's replay raise and exclusions."""
    verified_row = raised.get(str(row.get("id")))
    if verified_row is None:
        return row
    out = dict(row)
    if verified_row.burst_before_replay is not None:
        factor = verified_row.burst / verified_row.burst_before_replay
        out["burst"] = float(f"{float(row.get('burst', 1.0)) * factor:.6g}")
    if verified_row.excluded_shapes:
        out["excluded_shapes"] = list(verified_row.excluded_shapes)
    return out


def _band(
    forecast: DemandForecast,
    problem: Mapping[str, Any],
    solution: Mapping[str, Any],
    settings: ReplanSettings,
) -> dict[str, Any]:
    """The ``forecast_band`` document: quantiles per tier and the cost per hour of the band's
    low and high edges (each solved with the shorter band time limit, starting from the plan's
    replicas). Where no demand has history the edges are the planned problem itself and its
    solution is reused."""
    band = forecast.band_summary()
    planned = selectors.read_solution(solution)
    if planned.is_invalid:
        return band
    edges = (("low", forecast.low), ("high", forecast.high))
    for edge, edge_problem in edges:
        if edge_problem is None:
            edge_solution = planned
        else:
            # The plan's own replicas as the previous plan: the solver starts from them, so
            # within the short limit the low edge (less demand, which the plan's replicas
            # already carry) is not priced above the plan, and the high edge starts near it.
            warm = [
                {"zone": r.zone, "shape": r.shape, "replicas": r.replicas}
                for r in planned.replicas
                if r.replicas > 0
            ]
            edge_solution = selectors.read_solution(
                _solve(
                    {**with_replay_raises(edge_problem, problem), "previous": warm},
                    time_limit_s=settings.band_time_limit_s,
                    settings=settings,
                )
            )
        band[edge].update(
            {
                # False: no demand has rate history, the edge is the planned problem itself.
                "solved": edge_problem is not None,
                "cost_per_hour": edge_solution.cost_per_hour,
                "unserved_requests_per_s": edge_solution.unserved_requests_per_s,
                "planned_requests_per_s": planned_requests_per_s(edge_problem or problem),
                "solver_status": edge_solution.status,
                "gap": edge_solution.gap,
            }
        )
    return band


# -- storing ----------------------------------------------------------------------------------


def plan_store(
    *,
    run: ReplanRun,
    inputs: ReplanInputs,
    problem: dict[str, Any],
    solution: dict[str, Any],
    band: dict[str, Any],
) -> Plan:
    """Store a solved plan with its allocations and routing, and decide its activation.

    Must run inside the transaction that holds the planner lock. The plan is compared with
    the active plan: one that leaves some demand more unserved waits for approval; any other
    valid plan is activated; an invalid problem's plan stays proposed.
    """
    version = (Plan.objects.aggregate(top=Max("version"))["top"] or 0) + 1
    active = selectors.plan_active(for_update=True)
    typed = selectors.read_solution(solution)
    invalid = typed.is_invalid
    # A valid plan's problem is the one its solution solved: it always reads.
    typed_problem = None if invalid else selectors.read_problem(problem)
    diff = plan_diff(
        before=PlanDocuments.of(active) if active else None,
        after=PlanDocuments(typed_problem, typed),
        before_version=active.version if active else None,
    )
    if invalid:
        state, decision = Plan.State.PROPOSED, "Not activated: the problem was invalid."
    elif replay_misses(typed):
        state = Plan.State.AWAITING_APPROVAL
        decision = (
            f"Awaiting approval: {replay_misses(typed)}; re-solving with raised loads did not "
            "close it. A policy admin must approve it."
        )
    elif serves_less(diff):
        state = Plan.State.AWAITING_APPROVAL
        decision = (
            f"Awaiting approval: it leaves {len(diff['newly_unserved'])} demands more unserved "
            f"than active plan v{diff['against_version']}; a policy admin must approve it."
        )
    elif active is None:
        state, decision = Plan.State.PROPOSED, "Activated: the first plan."
    else:
        state = Plan.State.PROPOSED
        decision = f"Activated: serves every demand at least as well as plan v{active.version}."
    planned = (
        sum(d.planned_requests_per_s for d in typed_problem.demands)
        if typed_problem is not None
        else planned_requests_per_s(problem)
    )
    binding = [*typed.binding, *stale_sentences(inputs.stale_figures)]
    plan = Plan(
        version=version,
        inputs_hash=inputs.inputs_hash,
        state=state,
        solver_status=typed.status,
        trigger=run.trigger,
        problem=problem,
        solution=solution,
        explanation=plan_explanation(
            version=version,
            problem=typed_problem,
            solution=typed,
            planned_requests_per_s=planned,
            diff=diff,
            stale=inputs.stale_figures,
            forecast=inputs.forecast,
            warnings=inputs.warnings,
            decision=decision,
            trigger=trigger_sentence(run),
        ),
        cost_per_hour=None if invalid else float(typed.cost_per_hour or 0.0),
        gap=None if invalid else float(typed.gap or 0.0),
        solve_seconds=float(typed.solve_seconds or 0.0),
        planned_requests_per_s=planned,
        unserved_requests_per_s=0.0 if invalid else float(typed.unserved_requests_per_s or 0.0),
        binding=binding,
        stale_figures=inputs.stale_figures,
        forecast_band=band,
        diff=diff,
        created_by=run.requested_by,
    )
    plan.full_clean()
    plan.save()
    if typed_problem is not None:
        _store_rows(plan=plan, problem=typed_problem, solution=typed)
        if state == Plan.State.PROPOSED:
            plan = plan_activate(plan=plan)
    return plan


def replay_misses(solution: Solution) -> str:
    """A sentence naming the tenants whose replay misses their TTFT objective; empty when
    the plan was not replayed or holds."""
    verification = solution.verification or {}
    if not verification.get("replayed") or verification.get("holds"):
        return ""
    missing = [v for v in verification.get("tenants", []) if v.get("holds") is False]
    named = ", ".join(
        f"{v['tenant']} (p95 TTFT {_seconds(v.get('worst_p95_ttft_s'))} with "
        f"{v['worst_scenario']}, objective {v['ttft_slo_s']:g} s)"
        for v in missing[:3]
    )
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    return f"replayed arrivals miss the p95 TTFT objective of {len(missing)} tenants: {named}{more}"


def _seconds(value: object) -> str:
    return f"{value:.2f} s" if isinstance(value, int | float) else "unbounded (never served)"


def trigger_sentence(run: ReplanRun) -> str:
    """What requested the run, for the explanation: its trigger, then its reason if any."""
    text = f"Trigger: {Plan.Trigger(run.trigger).label}."
    return f"{text} {run.reason}" if run.reason else text


def _store_rows(*, plan: Plan, problem: Problem, solution: Solution) -> None:
    allocations = []
    for row in solution.replicas:
        if row.replicas <= 0:
            continue
        shape = problem.shape(row.shape)
        region = problem.region(problem.region_of_zone(row.zone))
        price = problem.accelerator(shape.accelerator).price_per_gpu_hour
        allocations.append(
            PlanAllocation(
                plan=plan,
                region=region.name,
                zone=row.zone,
                shape=row.shape,
                accelerator=shape.accelerator,
                gpus_per_replica=shape.gpus,
                replicas=row.replicas,
                cost_per_hour=row.replicas * shape.gpus * price * region.price_multiplier,
            )
        )
    PlanAllocation.objects.bulk_create(allocations)
    tenants = {d.id: d.tenant for d in problem.demands}
    PlanRouting.objects.bulk_create(
        PlanRouting(
            plan=plan,
            demand=row.demand,
            tenant=tenants.get(row.demand, ""),
            region=row.region,
            shape=row.shape,
            requests_per_s=float(row.requests_per_s),
        )
        for row in solution.routing
    )


# -- activation, approval, rejection ----------------------------------------------------------


def plan_activate(*, plan: Plan, user: Actor | None = None) -> Plan:
    """Make ``plan`` the active plan: the active one becomes superseded, and ``plan_activated``
    is sent in the same transaction (the pipeline hands the plan to emission's outbox there).

    ``user`` is recorded as the approver. Refuses a plan that was rejected, superseded or made
    from an invalid problem (``ValidationError``). Activating the active plan changes nothing.
    """
    with transaction.atomic():
        plan = Plan.objects.select_for_update().get(pk=plan.pk)
        if plan.state == Plan.State.ACTIVE:
            return plan
        if plan.state not in (Plan.State.PROPOSED, Plan.State.AWAITING_APPROVAL):
            raise ValidationError(
                {"state": f"A {plan.get_state_display()} plan cannot be activated."}
            )
        if plan.solver_status == Plan.SolverStatus.INVALID:
            raise ValidationError({"state": "A plan of an invalid problem cannot be activated."})
        # Lock the active row first: of two activations at once, the second waits and then
        # supersedes the first (the partial unique constraint holds in between).
        list(Plan.objects.select_for_update().filter(state=Plan.State.ACTIVE))
        Plan.objects.filter(state=Plan.State.ACTIVE).exclude(pk=plan.pk).update(
            state=Plan.State.SUPERSEDED
        )
        plan.state = Plan.State.ACTIVE
        plan.activated_at = timezone.now()
        if _recorded(user) is not None:
            plan.approved_by = _recorded(user)
        plan.full_clean()
        plan.save(update_fields=["state", "activated_at", "approved_by"])
        plan_activated.send(sender=Plan, plan=plan)
    return plan


def _recorded(user: Actor | None) -> User | None:
    """The user to record as author or decider: None for no user or an anonymous one."""
    # Every signed-in user is a stored User (the project keeps Django's user model).
    return user if isinstance(user, User) else None


def _require_policy_admin(user: Actor | None, action: str) -> None:
    if POLICY_ADMIN not in user_roles(user):
        raise PermissionDenied(f"Only a {POLICY_ADMIN} may {action} a plan.")


def _require_decidable(plan: Plan, action: str) -> None:
    if plan.state != Plan.State.AWAITING_APPROVAL:
        raise ValidationError(
            {
                "state": f"Only a plan awaiting approval can be {action}; v{plan.version} is "
                f"{plan.get_state_display()}."
            }
        )


def _record_decision(*, plan: Plan, action: str, user: Actor | None, reason: str) -> None:
    decision = PlanDecision(plan=plan, action=action, actor=_recorded(user), reason=reason.strip())
    decision.full_clean()
    decision.save()


def plan_approve(*, plan: Plan, user: Actor | None, reason: str = "") -> Plan:
    """A policy admin approves a plan awaiting approval: it becomes the active plan.

    Only the newest plan can be approved: an older one was compared with an active plan that
    may have changed since, and would undo newer decisions. The decision, with ``user`` and
    ``reason``, is recorded in the plan's history (``PlanDecision``).
    """
    _require_policy_admin(user, "approve")
    with transaction.atomic():
        plan = Plan.objects.select_for_update().get(pk=plan.pk)
        _require_decidable(plan, "approved")
        newest = selectors.plan_newest()
        if newest is not None and newest.pk != plan.pk:
            raise ValidationError(
                {
                    "state": f"v{plan.version} is not the newest plan (v{newest.version} is); "
                    "approve or re-plan from the newest."
                }
            )
        plan = plan_activate(plan=plan, user=user)
        _record_decision(plan=plan, action=PlanDecision.Action.APPROVED, user=user, reason=reason)
        return plan


def plan_reject(*, plan: Plan, user: Actor | None, reason: str = "") -> Plan:
    """A policy admin rejects a plan awaiting approval; the active plan stays. The decision,
    with ``user`` and ``reason``, is recorded in the plan's history (``PlanDecision``)."""
    _require_policy_admin(user, "reject")
    with transaction.atomic():
        plan = Plan.objects.select_for_update().get(pk=plan.pk)
        _require_decidable(plan, "rejected")
        plan.state = Plan.State.REJECTED
        plan.rejected_at = timezone.now()
        plan.rejected_by = _recorded(user)
        plan.full_clean()
        plan.save(update_fields=["state", "rejected_at", "rejected_by"])
        _record_decision(plan=plan, action=PlanDecision.Action.REJECTED, user=user, reason=reason)
    return plan


# -- schedule -------------------------------------------------------------------------------------

REPLAN_SCHEDULE_NAME = "plans: re-plan"
REPLAN_SCHEDULED_TASK = "headroom.plans.replan_scheduled"
REPLAN_EVERY_S = 3600


def replan_schedule() -> tuple[ScheduledTask, ...]:
    """The hourly re-plan (also created by migration ``plans.0004``)."""
    return (
        ScheduledTask(
            REPLAN_SCHEDULE_NAME,
            REPLAN_SCHEDULED_TASK,
            REPLAN_EVERY_S,
            "Re-plan from policies, forecast peaks and capacity figures; unchanged inputs make "
            "no new plan.",
        ),
    )
