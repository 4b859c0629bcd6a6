"""What a pool's drift costs, priced the way the plan will pay it.

A pool's drift (``telemetry.PoolDriftAlert``) sums every active drift alert of its tenants.
Its price is the placement solved twice with what a re-plan solves (``replan_inputs``: the
problem builder, the forecast, the active plan as ``previous``, the re-plan's time limit,
workers and seed): once with the profiles as they stand, once with each drifting profile of
every active pool drift replaced by what stood before its drift
(``telemetry.drift.pool_drift_baselines``). The difference, read with
``planner.placement.footprint``, is replicas per region and shape, GPUs and $/h of the whole
plan (the re-plan's change); each pool alert takes its own pool's replicas from it, and each
of its drifting tenants' share is its part of the change in the load its demands from the
pool ask of the plan (replica-seconds per second).

Pricing the tenants one at a time, against a pool where everyone else has already drifted,
on one shape at burst 1 without failure promises, said "+0 replicas" to each of five tenants
whose drift together cost three. Solving the whole problem twice counts every tenant, tier
burst, promise and shape the re-plan counts; the "after" solve is the re-plan's own.

``pool_drift_alerts_price`` prices the pool alerts a derivation changed; the pipeline calls
it after the derivation commits and before it requests the re-plan.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from controlplane.plans import selectors
from controlplane.plans.conf import ReplanSettings, replan_settings
from controlplane.plans.services import replan_inputs, solve_and_verify, with_previous
from controlplane.policies.models import WorkloadProfile
from controlplane.telemetry.drift import (
    PoolImpact,
    TenantShare,
    pool_drift_alerts_active,
    pool_drift_alerts_to_price,
    pool_drift_baselines,
    pool_drift_price_stands,
    pool_drift_priced,
    pool_drift_unpriced,
)
from controlplane.telemetry.models import PoolDriftAlert, ProfileDerivation
from planner.placement.footprint import Footprint, footprint, footprint_change

logger = logging.getLogger(__name__)

# Below this change of the tenants' summed load (replica-s/s) no share is meaningful.
_NO_CHANGE = 1e-9


class DriftNotPriced(Exception):
    """A pool's drift cannot be priced; the message says why, for the operator."""


@dataclass(frozen=True)
class DriftSolves:
    """The re-plan's problem before and after every active drift, solved, and read."""

    inputs_hash: str
    problems: tuple[dict[str, Any], dict[str, Any]]
    footprints: tuple[Footprint, Footprint]
    unserved: tuple[float, float]
    statuses: tuple[str, str]


def drift_solves(
    *,
    baselines: Mapping[int, WorkloadProfile],
    known_hash: str = "",
    now: datetime | None = None,
    settings: ReplanSettings | None = None,
) -> DriftSolves | str:
    """Solve the re-plan's problem with ``baselines`` (a current profile's id → the profile
    that stood before) in place and as it stands.

    Returns the inputs hash alone, unsolved, when it is ``known_hash`` (the drift was priced on
    these very problems). Raises ``DriftNotPriced`` for a problem the solver calls invalid.
    """
    settings = settings or replan_settings()
    after = replan_inputs(now=now, settings=settings)
    before = replan_inputs(now=now, settings=settings, replace=baselines)
    digest = hashlib.sha256(f"{before.inputs_hash}:{after.inputs_hash}".encode()).hexdigest()
    if digest == known_hash:
        return digest
    active = selectors.plan_active()
    solved = []
    solutions = []
    for edge in (before, after):
        # Solved as the re-plan solves: verified by replay, loads raised until it holds, so
        # the alert's "after" is what the re-plan will pay.
        problem, solution = solve_and_verify(with_previous(edge.problem, active), settings=settings)
        typed = selectors.read_solution(solution)
        if typed.is_invalid:
            raise DriftNotPriced(f"the placement problem is invalid: {typed.message or '?'}")
        solved.append(problem)
        solutions.append(solution)
    problems = (solved[0], solved[1])
    return DriftSolves(
        inputs_hash=digest,
        problems=problems,
        footprints=(footprint(problems[0], solutions[0]), footprint(problems[1], solutions[1])),
        unserved=(
            float(solutions[0].get("unserved_requests_per_s", 0.0)),
            float(solutions[1].get("unserved_requests_per_s", 0.0)),
        ),
        statuses=(str(solutions[0].get("status")), str(solutions[1].get("status"))),
    )


def pool_impact(
    *,
    alert: PoolDriftAlert,
    baselines: Mapping[int, WorkloadProfile],
    solves: DriftSolves,
    pools: int,
) -> PoolImpact:
    """One pool's part of ``solves``: its model's replicas in its region, the whole plan's
    GPUs and $/h, and its drifting tenants' shares (``baselines``: the pool's own)."""
    model, region = alert.model.name, alert.region.name
    if not any(shape["model"] == model for shape in solves.problems[1]["shapes"]):
        raise DriftNotPriced(f"no shape of {model} has a capacity figure")
    old, new = solves.footprints
    tenants = sorted({profile.tenant.name for profile in baselines.values()})
    return PoolImpact(
        inputs_hash=solves.inputs_hash,
        pools=footprint_change(old, new),
        replicas_before=old.replicas_of(model=model, region=region),
        replicas_after=new.replicas_of(model=model, region=region),
        gpus_before=old.gpus,
        gpus_after=new.gpus,
        cost_per_hour_before=old.cost_per_hour,
        cost_per_hour_after=new.cost_per_hour,
        unserved_before=solves.unserved[0],
        unserved_after=solves.unserved[1],
        tenants=_shares(tenants, model, region, solves.problems, old, new),
        drift_pools=pools,
        solver=solves.statuses,
    )


def _shares(
    tenants: list[str],
    model: str,
    region: str,
    problems: tuple[dict[str, Any], dict[str, Any]],
    old: Footprint,
    new: Footprint,
) -> tuple[TenantShare, ...]:
    """Each tenant's load on the plan (its demands of ``model`` from ``region``) before and
    after, and its share of the summed change."""
    demands: dict[str, set[str]] = defaultdict(set)
    for problem in problems:
        for demand in selectors.read_problem(problem).demands:
            if demand.model == model and demand.home_region == region and demand.tenant in tenants:
                demands[demand.tenant].add(demand.id)
    loads = {
        tenant: (
            math.fsum(old.demand_load.get(d, 0.0) for d in demands[tenant]),
            math.fsum(new.demand_load.get(d, 0.0) for d in demands[tenant]),
        )
        for tenant in tenants
    }
    total = math.fsum(after - before for before, after in loads.values())
    return tuple(
        TenantShare(
            tenant=tenant,
            load_before=before,
            load_after=after,
            share=(after - before) / total if abs(total) > _NO_CHANGE else None,
        )
        for tenant, (before, after) in loads.items()
    )


def pool_drift_alerts_price(
    *, derivation: ProfileDerivation, settings: ReplanSettings | None = None
) -> list[PoolDriftAlert]:
    """Price the pool drifts after ``derivation`` (see the module docstring); returns the
    active pool alerts, priced.

    Nothing is solved unless the derivation changed a pool's drift. Then every active pool
    drift is priced from one pair of solves, the re-plan's problem with all of them reverted
    and as it stands, so each pool alert's "the re-plan goes from … to …" is the whole
    re-plan's change and the pools' replicas add up within it. A pool that cannot be priced
    is recorded as such, with the reason; the others are still priced.
    """
    if not pool_drift_alerts_to_price(derivation=derivation):
        return []
    alerts = pool_drift_alerts_active()
    baselines = {alert.pk: pool_drift_baselines(alert=alert) for alert in alerts}
    everything = {pk: p for found in baselines.values() for pk, p in found.items()}
    # One hash for the whole pair: every active pool was priced on it, or it is solved anew.
    known = {alert.inputs_hash for alert in alerts}
    priced_before = all(alert.replicas_after is not None for alert in alerts)
    now = timezone.now()
    try:
        solves = drift_solves(
            baselines=everything,
            known_hash=known.pop() if len(known) == 1 and priced_before else "",
            settings=settings,
        )
    except DriftNotPriced as exc:
        for alert in alerts:
            pool_drift_unpriced(alert=alert, reason=str(exc), now=now)
        return alerts
    except Exception as exc:
        # The price informs the operator; a solver failure must not stop the derivation's
        # re-plan, which the pipeline requests next. It is logged and recorded as unpriced.
        logger.exception("pricing the pool drifts of derivation %s failed", derivation.pk)
        for alert in alerts:
            pool_drift_unpriced(
                alert=alert, reason=f"pricing failed: {type(exc).__name__}: {exc}", now=now
            )
        return alerts
    for alert in alerts:
        if not baselines[alert.pk]:
            pool_drift_unpriced(
                alert=alert, reason="the profiles before the drift are gone", now=now
            )
        elif isinstance(solves, str):
            pool_drift_price_stands(alert=alert, now=now)
        else:
            try:
                impact = pool_impact(
                    alert=alert, baselines=baselines[alert.pk], solves=solves, pools=len(alerts)
                )
            except DriftNotPriced as exc:
                pool_drift_unpriced(alert=alert, reason=str(exc), now=now)
            else:
                pool_drift_priced(alert=alert, impact=impact, now=now)
    return alerts
