"""What-if: the plan a policy or workload change to one tenant would lead to, without storing it.

``whatif_preview`` builds the placement problem exactly as a re-plan would (``replan_inputs``)
with the tenant's policy change applied inside a transaction that is rolled back, so the
problem comes from the same builder and the same validation as a saved change; then scales
the tenant's demands for the workload part of the change (traffic × k, prompt tokens added),
solves it with the active plan as ``previous``, and compares the result with the plan for the
unchanged inputs (the active plan when its inputs hash is the current one, else a solve of the
unchanged problem). Nothing is stored: no plan, no run, no history row. Given a time limit,
each solve gets at most what is left of it and a preview past it raises ``WhatIfTimeLimit``.

Asked for from the web or the API, a preview runs as a job off the web worker
(``controlplane.plans.whatif_jobs``); ``whatif_validate`` checks a change at once, before it
is queued, and ``result_as_dict`` / ``result_from_dict`` store the result on the job's row.

``whatif_apply`` saves the policy part (residency regions, tier, spill permission) through
``tenant_save``, the service behind the admin and the API. Traffic and prompt length describe what a tenant sends;
they are measured by telemetry, not set, so they are preview-only.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from controlplane.core.roles import POLICY_ADMIN, user_roles
from controlplane.fleet.models import Region
from controlplane.plans import selectors
from controlplane.plans.conf import replan_settings
from controlplane.plans.diff import PlanDocuments, plan_diff
from controlplane.plans.problem import problem_with_demands
from controlplane.plans.services import Actor, ReplanInputs, _solve, replan_inputs, with_previous
from controlplane.policies.models import Tenant, Tier
from controlplane.policies.services import tenant_save
from planner.placement.footprint import footprint

# Largest traffic multiplier a what-if takes: beyond it the question is a different fleet.
MAX_TRAFFIC_FACTOR = 100.0
MAX_PROMPT_DELTA = 1_000_000


@dataclass(frozen=True)
class WhatIfChange:
    """A change to one tenant: None leaves a part as it is.

    ``residency_regions``: the region names its data may be served in (its residency list);
    ``tier``: the tier's name (its SLO, failure promise and priority come with it);
    ``spill_allowed``: whether its traffic may be served outside the home region (the tenant's
    spill permission); ``max_spill_rtt_ms``: the largest round trip spill may add (needed when
    spill is allowed and the tenant has none);
    ``traffic_factor``: requests/s × k; ``prompt_tokens_delta``: tokens added to each request's
    prompt (negative to remove; a prompt never goes below 1 token).
    """

    tenant: str
    residency_regions: tuple[str, ...] | None = None
    tier: str | None = None
    traffic_factor: float = 1.0
    prompt_tokens_delta: float = 0.0
    spill_allowed: bool | None = None
    max_spill_rtt_ms: float | None = None

    @property
    def changes_policy(self) -> bool:
        return (
            self.residency_regions is not None
            or self.tier is not None
            or self.spill_allowed is not None
            or self.max_spill_rtt_ms is not None
        )


@dataclass(frozen=True)
class RegionChange:
    region: str
    replicas_before: int
    replicas_after: int
    gpus_before: int
    gpus_after: int
    cost_before: float
    cost_after: float

    @property
    def replica_change(self) -> int:
        return self.replicas_after - self.replicas_before

    @property
    def cost_change(self) -> float:
        return self.cost_after - self.cost_before


@dataclass(frozen=True)
class NewlyUnserved:
    demand: str
    tenant: str
    before: float
    after: float
    reason: str


@dataclass(frozen=True)
class WhatIfResult:
    """The preview: per region replicas, GPUs and $/h before and after, the total $/h change,
    demand that would become (more) unserved with why, and how each side was solved."""

    change: WhatIfChange
    baseline: str
    baseline_status: str
    status: str
    gap: float | None
    cost_before: float
    cost_after: float
    regions: list[RegionChange]
    newly_unserved: list[NewlyUnserved]
    unserved_before: float
    unserved_after: float
    demands: list[str]
    warnings: list[str] = field(default_factory=list)

    @property
    def cost_change(self) -> float:
        return self.cost_after - self.cost_before


class _Rollback(Exception):
    """Raised inside the preview's transaction to undo the tenant change."""


class WhatIfTimeLimit(Exception):
    """The preview ran past its time limit; the message says so in words."""


@dataclass(frozen=True)
class _Deadline:
    """What is left of a preview's time limit (None: no limit), on ``clock``."""

    limit_s: float | None
    clock: Callable[[], float]
    start: float

    def remaining_s(self) -> float | None:
        if self.limit_s is None:
            return None
        return self.limit_s - (self.clock() - self.start)

    def check(self, step: str) -> None:
        left = self.remaining_s()
        if left is not None and left <= 0:
            assert self.limit_s is not None
            raise WhatIfTimeLimit(
                f"The preview ran past its time limit of {self.limit_s:g} s ({step}); "
                "try a smaller change, or ask an operator to raise HEADROOM_WHATIF_TIME_LIMIT_S."
            )

    def solve_limit_s(self, configured: float) -> float:
        """The solver's limit: the configured one, or what is left when that is less (a
        solve stopped at its limit returns its best plan, ``feasible``)."""
        left = self.remaining_s()
        return configured if left is None else max(0.1, min(configured, left))


def _tenant(name: str) -> Tenant:
    tenant = Tenant.objects.select_related("tier", "home_region").filter(name=name).first()
    if tenant is None:
        raise ValidationError({"tenant": f"No tenant named {name!r}."})
    return tenant


def _regions(names: Sequence[str]) -> list[Region]:
    found = {r.name: r for r in Region.objects.filter(name__in=list(names))}
    unknown = sorted(set(names) - set(found))
    if unknown:
        raise ValidationError({"residency_regions": f"Unknown regions: {', '.join(unknown)}."})
    return [found[n] for n in sorted(found)]


def _apply_policy(tenant: Tenant, change: WhatIfChange, reason: str = "") -> Tenant:
    """Save the policy part of ``change`` on ``tenant`` through the admin's service;
    ``reason`` becomes the history row's change reason."""
    if reason:
        tenant._change_reason = reason  # type: ignore[attr-defined]
    if change.tier is not None:
        tier = Tier.objects.filter(name=change.tier).first()
        if tier is None:
            raise ValidationError({"tier": f"No tier named {change.tier!r}."})
        tenant.tier = tier
    if change.spill_allowed is not None:
        tenant.spill_allowed = change.spill_allowed
    if change.max_spill_rtt_ms is not None:
        tenant.max_spill_rtt_ms = change.max_spill_rtt_ms
    regions = None if change.residency_regions is None else _regions(change.residency_regions)
    return tenant_save(tenant=tenant, residency_regions=regions)


def _check_workload(change: WhatIfChange) -> None:
    if not (0 <= change.traffic_factor <= MAX_TRAFFIC_FACTOR):
        raise ValidationError(
            {"traffic_factor": f"Give a factor between 0 and {MAX_TRAFFIC_FACTOR:g}."}
        )
    if abs(change.prompt_tokens_delta) > MAX_PROMPT_DELTA:
        raise ValidationError(
            {"prompt_tokens_delta": f"Give at most {MAX_PROMPT_DELTA:,} tokens either way."}
        )


def _changed_inputs(change: WhatIfChange) -> ReplanInputs:
    """The re-plan's inputs with the tenant's policy change applied, then rolled back."""
    result: list[ReplanInputs] = []
    try:
        with transaction.atomic():
            _apply_policy(_tenant(change.tenant), change)
            result.append(replan_inputs())
            raise _Rollback
    except _Rollback:
        pass
    return result[0]


def _scaled(problem: Mapping[str, Any], change: WhatIfChange) -> dict[str, Any]:
    def scale(demand: Mapping[str, Any]) -> Mapping[str, Any]:
        if demand.get("tenant") != change.tenant:
            return demand
        out = dict(demand)
        out["requests_per_s"] = float(demand["requests_per_s"]) * change.traffic_factor
        out["prompt_tokens"] = max(1.0, float(demand["prompt_tokens"]) + change.prompt_tokens_delta)
        return out

    return problem_with_demands(problem, scale)


def _by_region(documents: PlanDocuments) -> dict[str, tuple[int, int, float]]:
    """Replicas, GPUs and $/h per region, from the solution's pools
    (``planner.placement.footprint``); none for a plan whose problem was invalid."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])
    if documents.problem is None:
        return {}
    for pool in footprint(documents.problem, documents.solution.to_json()).pools:
        out[pool.region][0] += pool.replicas
        out[pool.region][1] += pool.gpus
        out[pool.region][2] += pool.cost_per_hour
    return {k: (int(v[0]), int(v[1]), float(v[2])) for k, v in out.items()}


def unserved_reasons(binding: Sequence[str]) -> dict[str, str]:
    """Why each unserved demand is short, by demand id, from the planner's binding sentences
    (``demand <id> (tenant …, priority …): <x> of <y> requests/s unserved: <why>``;
    ``planner.placement.binding.unserved_sentences``): the part after "unserved: "."""
    out: dict[str, str] = {}
    marker = " unserved: "
    for sentence in binding:
        if sentence.startswith("demand ") and " (" in sentence:
            demand = sentence[len("demand ") : sentence.index(" (")]
            why = sentence.split(marker, 1)[1] if marker in sentence else sentence
            out.setdefault(demand, why[:1].upper() + why[1:])
    return out


def whatif_validate(*, change: WhatIfChange) -> None:
    """Check ``change`` as the preview would, without solving: the workload ranges, the tenant,
    and the policy part saved inside a transaction that is rolled back (``tenant_save``'s
    validation). Raises ``ValidationError`` naming the field."""
    _check_workload(change)
    tenant = _tenant(change.tenant)
    if change.changes_policy:
        try:
            with transaction.atomic():
                _apply_policy(tenant, change)
                raise _Rollback
        except _Rollback:
            pass


def whatif_preview(
    *,
    change: WhatIfChange,
    time_limit_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> WhatIfResult:
    """Re-solve with ``change`` applied and compare; stores nothing (see the module docstring).

    Raises ``ValidationError`` naming the field for an unknown tenant, tier or region, a
    residency list the tenant's rules refuse, or a workload change out of range; with
    ``time_limit_s`` (seconds on ``clock``), ``WhatIfTimeLimit`` when the preview runs past it.
    """
    deadline = _Deadline(limit_s=time_limit_s, clock=clock, start=clock())
    _check_workload(change)
    _tenant(change.tenant)
    settings = replan_settings()
    current = replan_inputs(settings=settings)
    deadline.check("building the problem")
    active = selectors.plan_active()
    if active is not None and active.inputs_hash == current.inputs_hash:
        base = PlanDocuments.of(active)
        baseline, baseline_status = f"active plan v{active.version}", active.solver_status
    else:
        problem = with_previous(current.problem, active)
        base = PlanDocuments.read(
            problem,
            _solve(
                problem,
                time_limit_s=deadline.solve_limit_s(settings.time_limit_s),
                settings=settings,
            ),
        )
        baseline = "the current inputs, re-solved (no active plan was made from them)"
        baseline_status = base.solution.status
        deadline.check("solving the unchanged inputs")
    changed = _changed_inputs(change) if change.changes_policy else current
    problem = _scaled(with_previous(changed.problem, active), change)
    deadline.check("building the changed problem")
    after = PlanDocuments.read(
        problem,
        _solve(
            problem, time_limit_s=deadline.solve_limit_s(settings.time_limit_s), settings=settings
        ),
    )
    deadline.check("solving the changed problem")
    solution = after.solution
    if after.problem is None or solution.is_invalid:
        raise ValidationError(
            {"__all__": f"The changed problem is invalid: {solution.message or '?'}"}
        )
    diff = plan_diff(before=base, after=after)
    reasons = unserved_reasons(solution.binding)
    before_rows = _by_region(base)
    after_rows = _by_region(after)
    regions = [
        RegionChange(
            region=name,
            replicas_before=before_rows.get(name, (0, 0, 0.0))[0],
            replicas_after=after_rows.get(name, (0, 0, 0.0))[0],
            gpus_before=before_rows.get(name, (0, 0, 0.0))[1],
            gpus_after=after_rows.get(name, (0, 0, 0.0))[1],
            cost_before=before_rows.get(name, (0, 0, 0.0))[2],
            cost_after=after_rows.get(name, (0, 0, 0.0))[2],
        )
        for name in sorted(set(before_rows) | set(after_rows))
    ]
    return WhatIfResult(
        change=change,
        baseline=baseline,
        baseline_status=baseline_status,
        status=solution.status,
        gap=solution.gap,
        cost_before=float(base.solution.cost_per_hour or 0.0),
        cost_after=float(solution.cost_per_hour or 0.0),
        regions=regions,
        newly_unserved=[
            NewlyUnserved(
                demand=row["demand"],
                tenant=row["tenant"],
                before=float(row["before"]),
                after=float(row["after"]),
                reason=reasons.get(row["demand"], ""),
            )
            for row in diff["newly_unserved"]
        ],
        unserved_before=float(diff["unserved_requests_per_s"]["before"]),
        unserved_after=float(diff["unserved_requests_per_s"]["after"]),
        demands=sorted(d.id for d in after.problem.demands if d.tenant == change.tenant),
        warnings=list(changed.warnings),
    )


def change_as_dict(change: WhatIfChange) -> dict[str, Any]:
    """``change`` as JSON-ready fields (the job row's ``change``)."""
    out = asdict(change)
    if change.residency_regions is not None:
        out["residency_regions"] = list(change.residency_regions)
    return out


def change_from_dict(data: Mapping[str, Any]) -> WhatIfChange:
    regions = data.get("residency_regions")
    return WhatIfChange(
        tenant=str(data["tenant"]),
        residency_regions=None if regions is None else tuple(str(r) for r in regions),
        tier=None if data.get("tier") is None else str(data["tier"]),
        traffic_factor=float(data.get("traffic_factor", 1.0)),
        prompt_tokens_delta=float(data.get("prompt_tokens_delta", 0.0)),
        spill_allowed=None if data.get("spill_allowed") is None else bool(data["spill_allowed"]),
        max_spill_rtt_ms=(
            None if data.get("max_spill_rtt_ms") is None else float(data["max_spill_rtt_ms"])
        ),
    )


def result_as_dict(result: WhatIfResult) -> dict[str, Any]:
    """``result`` as JSON-ready fields, with the changes (after - before) spelled out."""
    out = asdict(result)
    out["change"] = change_as_dict(result.change)
    out["cost_change"] = result.cost_change
    for row, region in zip(out["regions"], result.regions, strict=True):
        row["replica_change"] = region.replica_change
        row["cost_change"] = region.cost_change
    return out


def result_from_dict(data: Mapping[str, Any]) -> WhatIfResult:
    """The result ``result_as_dict`` stored (derived fields are recomputed)."""
    region_fields = RegionChange.__dataclass_fields__
    unserved_fields = NewlyUnserved.__dataclass_fields__
    return WhatIfResult(
        change=change_from_dict(data["change"]),
        baseline=str(data["baseline"]),
        baseline_status=str(data["baseline_status"]),
        status=str(data["status"]),
        gap=None if data.get("gap") is None else float(data["gap"]),
        cost_before=float(data["cost_before"]),
        cost_after=float(data["cost_after"]),
        regions=[
            RegionChange(**{k: v for k, v in row.items() if k in region_fields})
            for row in data["regions"]
        ],
        newly_unserved=[
            NewlyUnserved(**{k: v for k, v in row.items() if k in unserved_fields})
            for row in data["newly_unserved"]
        ],
        unserved_before=float(data["unserved_before"]),
        unserved_after=float(data["unserved_after"]),
        demands=[str(d) for d in data["demands"]],
        warnings=[str(w) for w in data.get("warnings", [])],
    )


def whatif_apply(*, change: WhatIfChange, user: Actor | None) -> Tenant:
    """Save the policy part of ``change`` (a policy admin only) through ``tenant_save``; the
    next re-plan plans for it. Traffic and prompt changes are not saved (see the module)."""
    if POLICY_ADMIN not in user_roles(user):
        raise PermissionDenied(f"Only a {POLICY_ADMIN} may change a tenant's policy.")
    if not change.changes_policy:
        raise ValidationError(
            {
                "__all__": "Nothing to save: only residency, tier and spill are policy; traffic "
                "and prompt length are what-ifs about the workload."
            }
        )
    tenant = _tenant(change.tenant)
    same_tier = change.tier is None or change.tier == tenant.tier.name
    same_regions = change.residency_regions is None or sorted(change.residency_regions) == sorted(
        r.name for r in tenant.residency_regions.all()
    )
    same_spill = (
        change.spill_allowed is None or change.spill_allowed == tenant.spill_allowed
    ) and (change.max_spill_rtt_ms is None or change.max_spill_rtt_ms == tenant.max_spill_rtt_ms)
    if same_tier and same_regions and same_spill:
        raise ValidationError({"__all__": "Nothing to save: the tenant already has this policy."})
    with transaction.atomic():
        return _apply_policy(_tenant(change.tenant), change, reason="Saved from a what-if preview.")
