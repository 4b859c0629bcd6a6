"""A plan's state in words, for the banner at the top of its page: read from ``Plan.state``
and the plan's decisions, never from the sentence stored when the plan was made (which says
"awaiting approval" for ever, even after the plan was rejected or superseded)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from controlplane.plans.diff import serves_less
from controlplane.plans.models import Plan, PlanDecision
from controlplane.plans.selectors import plan_solution
from controlplane.plans.services import replay_misses
from controlplane.telemetry.models import PULL_PARTIAL, RunStatus, TelemetryPull


@dataclass(frozen=True)
class StateBanner:
    """What the plan's state means now. ``tone`` is the banner's class: ``ok`` (active),
    ``warn`` (awaiting a decision), ``bad`` (rejected or failed), empty (history)."""

    state: str
    tone: str
    headline: str
    details: list[str] = field(default_factory=list)


def _when(at: datetime | None) -> str:
    return f"{timezone.localtime(at):%Y-%m-%d %H:%M}" if at is not None else "an unknown time"


def held_because(plan: Plan) -> str:
    """Why the planner held the plan for approval, from its documents ("" when it did not):
    the replay missed an objective, or it left demand more unserved than the plan before."""
    misses = replay_misses(plan_solution(plan))
    if misses:
        return misses
    diff = plan.diff or {}
    if serves_less(diff):
        count = len(diff.get("newly_unserved", []))
        return (
            f"it leaves {count} demand{'s' if count != 1 else ''} more unserved than plan "
            f"v{diff['against_version']}"
        )
    return ""


def _decision(decisions: Sequence[PlanDecision], action: str) -> PlanDecision | None:
    """The newest decision of ``action`` (``decisions`` newest first, as the model orders)."""
    return next((d for d in decisions if d.action == action), None)


def _by(decision: PlanDecision | None, fallback: str) -> str:
    if decision is not None and decision.actor is not None:
        return decision.actor.get_username()
    return fallback or "an unknown user"


def _reason(decision: PlanDecision | None) -> str:
    return f": “{decision.reason}”" if decision is not None and decision.reason else ""


def plan_successor(plan: Plan) -> Plan | None:
    """The plan that superseded ``plan``: the first one activated after it (one query)."""
    if plan.activated_at is None:
        return None
    return (
        Plan.objects.filter(activated_at__gt=plan.activated_at)
        .only("pk", "version", "activated_at")
        .order_by("activated_at", "version")
        .first()
    )


def plan_state_banner(
    plan: Plan,
    *,
    decisions: Sequence[PlanDecision],
    active_version: int | None,
    newest_version: int | None,
) -> StateBanner:
    """The banner for ``plan`` in its current state. ``decisions`` are its decisions newest
    first with their actors; ``active_version`` and ``newest_version`` the fleet's now."""
    state = plan.state
    held = held_because(plan)
    stays = (
        f"Plan v{active_version} stays the active plan."
        if active_version is not None and active_version != plan.version
        else "No plan is active."
    )
    if state == Plan.State.AWAITING_APPROVAL:
        details = [f"The planner held it because {held}." if held else ""]
        if newest_version is not None and newest_version != plan.version:
            details.append(
                f"v{newest_version} is newer; only the newest plan can be approved, so this "
                "one can no longer be."
            )
        else:
            details.append("A policy admin must approve or reject it.")
        details.append(stays)
        return StateBanner(state, "warn", "Awaiting approval", [d for d in details if d])
    if state == Plan.State.REJECTED:
        decision = _decision(decisions, PlanDecision.Action.REJECTED)
        by = _by(decision, plan.rejected_by.get_username() if plan.rejected_by else "")
        at = decision.decided_at if decision is not None else plan.rejected_at
        details = [f"It was held for approval because {held}." if held else "", stays]
        return StateBanner(
            state,
            "bad",
            f"Rejected by {by} on {_when(at)}{_reason(decision)}",
            [d for d in details if d],
        )
    approved = _decision(decisions, PlanDecision.Action.APPROVED)
    approval = ""
    if approved is not None or plan.approved_by is not None:
        by = _by(approved, plan.approved_by.get_username() if plan.approved_by else "")
        at = approved.decided_at if approved is not None else plan.activated_at
        approval = f"Approved by {by} on {_when(at)}{_reason(approved)}."
        if held:
            approval = f"It was held for approval because {held}. {approval}"
    made = str((plan.explanation or {}).get("decision", ""))
    if state == Plan.State.ACTIVE:
        why = approval or made
        return StateBanner(
            state, "ok", f"Active since {_when(plan.activated_at)}", [why] if why else []
        )
    if state == Plan.State.SUPERSEDED:
        successor = plan_successor(plan)
        if successor is not None:
            headline = f"Superseded by v{successor.version} on {_when(successor.activated_at)}"
            span = (
                f"It was active from {_when(plan.activated_at)} to {_when(successor.activated_at)}."
            )
        else:
            headline = "Superseded"
            span = f"It was active from {_when(plan.activated_at)}."
        return StateBanner(state, "", headline, [d for d in (span, approval) if d])
    if plan.solver_status == Plan.SolverStatus.INVALID:
        message = (plan_solution(plan).message or "").strip()
        return StateBanner(
            state,
            "bad",
            "Failed: the placement problem was invalid",
            [d for d in (message, f"Never activated. {stays}") if d],
        )
    return StateBanner(state, "", "Proposed: not activated", [stays])


def plan_banner(plan: Plan) -> StateBanner:
    """``plan_state_banner`` with the plan's decisions and the fleet's active and newest
    versions read here (three queries)."""
    active = Plan.objects.filter(state=Plan.State.ACTIVE).values_list("version", flat=True).first()
    newest = Plan.objects.order_by("-version").values_list("version", flat=True).first()
    return plan_state_banner(
        plan,
        decisions=list(plan.decisions.select_related("actor")),
        active_version=active,
        newest_version=newest,
    )


@dataclass(frozen=True)
class SizingNotice:
    """How many of the plan's demands were sized from declared profiles rather than the
    telemetry forecast; ``expected`` when telemetry had been pulled (samples stored) before
    the plan was made, so the fallback is a fault to look into, not the normal start."""

    declared: int
    telemetry: int
    expected: bool
    last_pull_at: datetime | None
    bucket_s: int | None

    @property
    def tone(self) -> str:
        return "warn" if self.expected and self.telemetry == 0 else ""

    @property
    def sentence(self) -> str:
        total = self.declared + self.telemetry
        if self.telemetry == 0:
            head = f"Every demand ({total}) was sized from its declared workload profile"
        else:
            head = (
                f"{self.declared} of {total} demands were sized from their declared workload "
                "profiles (no rate history or too little for the forecast), the others from "
                "telemetry"
            )
        if not self.expected:
            return f"{head}: no telemetry had been pulled when it was made."
        return (
            f"{head}, though telemetry had been pulled (last at {_when(self.last_pull_at)}, "
            f"{self.bucket_s} s buckets): check that the pull and the re-plan read the same "
            "series (the demand notes below say why each group fell back)."
        )


def plan_sizing(plan: Plan) -> SizingNotice | None:
    """The plan's fallback to declared profiles, if any demand fell back (one query)."""
    sources = (plan.forecast_band or {}).get("sources") or {}
    declared = int(sources.get("declared", 0))
    if declared <= 0:
        return None
    pull = (
        TelemetryPull.objects.filter(
            status__in=(RunStatus.SUCCEEDED, PULL_PARTIAL),
            samples_stored__gt=0,
            started_at__lte=plan.created_at,
        )
        .only("pk", "finished_at", "started_at", "bucket_s")
        .order_by("-started_at", "-pk")
        .first()
    )
    return SizingNotice(
        declared=declared,
        telemetry=int(sources.get("telemetry", 0)),
        expected=pull is not None,
        last_pull_at=(pull.finished_at or pull.started_at) if pull is not None else None,
        bucket_s=pull.bucket_s if pull is not None else None,
    )
