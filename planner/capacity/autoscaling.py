"""Autoscaling: the HPA replica rule and its behaviour, readiness delay and traffic spikes.

An autoscaler is a control loop whose actuator is slow: a model replica takes minutes to be
scheduled, pulled, loaded and warmed. This module reproduces the Kubernetes Horizontal Pod
Autoscaler's arithmetic (desired = ceil(current × metric / target), a tolerance band,
per-direction stabilisation windows and rate-limiting policies) and the spike timeline that
shows what happens to traffic that arrives before new replicas are ready.

Units: seconds for times and windows, requests/s for rates, requests for backlogs, replicas for
counts; the metric and its target share whatever unit the metric has (in-flight requests per
replica in the seeds).

Every public function and spec dataclass raises ``PlannerInputError`` naming the argument for
negative or non-finite metrics, rates and times, non-positive targets, replica counts below one,
min above max, policies with non-positive values or periods, a tolerance outside [0, 1), time
running backwards, and a backlog that could never drain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from planner.capacity import _checks
from planner.errors import PlannerInputError

# Kubernetes' HPA validation bounds: a policy period of at most 30 minutes, a stabilisation
# window of at most an hour.
_MAX_POLICY_PERIOD_S = 1800
_MAX_STABILIZATION_WINDOW_S = 3600


def hpa_desired_replicas(
    current_replicas: int,
    current_metric: float,
    target_metric: float,
    tolerance: float = 0.1,
) -> int:
    """The HPA rule: ceil(current × metric / target), unless within the tolerance band.

    When |metric/target − 1| ≤ tolerance the current count is kept, so noise near the target
    does not cause constant changes (Kubernetes' default tolerance is 10%). 12 replicas
    observing 8 in-flight requests each against a target of 3.5: ceil(27.4) = 28.
    """
    current = _checks.positive_int("current_replicas", current_replicas)
    metric = _checks.non_negative("current_metric", current_metric)
    target = _checks.positive("target_metric", target_metric)
    band = _checks.non_negative("tolerance", tolerance)
    if band >= 1:
        raise PlannerInputError("tolerance", f"must be below 1, got {tolerance!r}")
    ratio = metric / target
    if abs(ratio - 1.0) <= band:
        return current
    return _checks.ceil_count(current * ratio)


# -- behaviour ----------------------------------------------------------------------------------


class PolicyType(StrEnum):
    """How a scaling policy limits change per period."""

    PODS = "Pods"
    """At most ``value`` replicas added (or removed) per period."""
    PERCENT = "Percent"
    """At most ``value`` percent of the replicas at the start of the period."""


class SelectPolicy(StrEnum):
    """Which of several policies applies."""

    MAX = "Max"
    """The policy that allows the largest change (the Kubernetes default)."""
    MIN = "Min"
    """The policy that allows the smallest change."""
    DISABLED = "Disabled"
    """No scaling in this direction."""


@dataclass(frozen=True)
class ScalingPolicy:
    """One rate limit: ``value`` replicas (or percent) per ``period_s`` seconds."""

    type: PolicyType
    value: int
    period_s: int

    def __post_init__(self) -> None:
        _checks.positive_int("value", self.value)
        _checks.positive_int("period_s", self.period_s)
        if self.period_s > _MAX_POLICY_PERIOD_S:
            raise PlannerInputError(
                "period_s", f"must be at most {_MAX_POLICY_PERIOD_S} s, got {self.period_s!r}"
            )


@dataclass(frozen=True)
class ScalingRules:
    """Behaviour in one direction: a stabilisation window and rate-limiting policies."""

    stabilization_window_s: float
    policies: tuple[ScalingPolicy, ...]
    select_policy: SelectPolicy = SelectPolicy.MAX

    def __post_init__(self) -> None:
        window = _checks.non_negative("stabilization_window_s", self.stabilization_window_s)
        if window > _MAX_STABILIZATION_WINDOW_S:
            raise PlannerInputError(
                "stabilization_window_s",
                f"must be at most {_MAX_STABILIZATION_WINDOW_S} s, got {window!r}",
            )
        if not self.policies and self.select_policy is not SelectPolicy.DISABLED:
            raise PlannerInputError("policies", "at least one policy is needed unless disabled")


# Kubernetes' defaults: scale up at once, by doubling or 4 replicas per 15 s, whichever is more;
# scale down on the highest recommendation of the last 5 minutes, by up to everything per 15 s.
DEFAULT_SCALE_UP = ScalingRules(
    stabilization_window_s=0,
    policies=(ScalingPolicy(PolicyType.PERCENT, 100, 15), ScalingPolicy(PolicyType.PODS, 4, 15)),
)
DEFAULT_SCALE_DOWN = ScalingRules(
    stabilization_window_s=300,
    policies=(ScalingPolicy(PolicyType.PERCENT, 100, 15),),
)


@dataclass(frozen=True)
class HpaBehavior:
    """Scale-up and scale-down rules (the HPA ``behavior`` field)."""

    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN


@dataclass(frozen=True)
class HpaSpec:
    """An HPA on one per-replica metric: target, replica bounds, behaviour and tolerance.

    The seeds' manifest: target 3.5 in-flight requests per replica, 12 to 40 replicas, scale up
    by 100% per 60 s with no stabilisation, scale down by one replica per 300 s on the highest
    recommendation of the last 600 s.
    """

    target_metric: float
    min_replicas: int
    max_replicas: int
    behavior: HpaBehavior = field(default_factory=HpaBehavior)
    tolerance: float = 0.1

    def __post_init__(self) -> None:
        _checks.positive("target_metric", self.target_metric)
        _checks.positive_int("min_replicas", self.min_replicas)
        _checks.positive_int("max_replicas", self.max_replicas)
        if self.max_replicas < self.min_replicas:
            raise PlannerInputError(
                "max_replicas",
                f"must be at least min_replicas {self.min_replicas}, got {self.max_replicas}",
            )
        band = _checks.non_negative("tolerance", self.tolerance)
        if band >= 1:
            raise PlannerInputError("tolerance", f"must be below 1, got {self.tolerance!r}")


@dataclass(frozen=True)
class HpaDecision:
    """One reconcile step: the metric's proposal, after stabilisation, after rate limits."""

    metric_replicas: int
    stabilized_replicas: int
    desired_replicas: int
    reason: str


def _changed_within(events: list[tuple[float, int]], now_s: float, period_s: float) -> int:
    return sum(change for at, change in events if at > now_s - period_s)


class HorizontalAutoscaler:
    """The HPA control loop for one target, with its recommendation and scaling history.

    Call ``step`` once per reconcile (every 15 s in Kubernetes) with the current replica count
    and the metric's per-replica average; it returns the replica count to set and remembers
    what it recommended and changed, which the windows and policies need. The arithmetic
    follows the Kubernetes controller: scale-down acts on the highest recommendation in its
    stabilisation window and scale-up on the lowest in its own (0 s by default, so at once);
    a policy's limit is measured from the replica count at the start of its period; Percent
    rounds up when adding and down when removing, computed in whole numbers so no float noise
    changes a count.
    """

    def __init__(self, spec: HpaSpec) -> None:
        self.spec = spec
        self._recommendations: list[tuple[float, int]] = []
        self._scale_ups: list[tuple[float, int]] = []
        self._scale_downs: list[tuple[float, int]] = []
        self._last_step_s: float | None = None

    def step(self, now_s: float, current_replicas: int, current_metric: float) -> HpaDecision:
        """Decide the replica count at time ``now_s`` (seconds, non-decreasing between calls)."""
        now = _checks.finite("now_s", now_s)
        if self._last_step_s is not None and now < self._last_step_s:
            raise PlannerInputError(
                "now_s", f"time went backwards: {now!r} after {self._last_step_s!r}"
            )
        current = _checks.positive_int("current_replicas", current_replicas)
        _checks.non_negative("current_metric", current_metric)
        spec = self.spec
        self._last_step_s = now
        # Outside its bounds the controller moves straight to the bound, as Kubernetes does.
        if current > spec.max_replicas:
            return self._apply(now, current, current, current, spec.max_replicas, "AboveMax")
        if current < spec.min_replicas:
            return self._apply(now, current, current, current, spec.min_replicas, "BelowMin")

        proposal = hpa_desired_replicas(current, current_metric, spec.target_metric, spec.tolerance)
        stabilized = self._stabilize(now, current, proposal)
        self._recommendations.append((now, proposal))
        self._forget(now)

        desired, reason = stabilized, "DesiredWithinRange"
        if stabilized > current:
            limit = max(current, self._scale_up_limit(now, current))
            allowed = min(spec.max_replicas, limit)
            if stabilized > allowed:
                reason = "ScaleUpLimit" if limit < spec.max_replicas else "TooManyReplicas"
                desired = allowed
        elif stabilized < current:
            limit = min(current, self._scale_down_limit(now, current))
            allowed = max(spec.min_replicas, limit)
            if stabilized < allowed:
                reason = "ScaleDownLimit" if limit > spec.min_replicas else "TooFewReplicas"
                desired = allowed
        return self._apply(now, current, proposal, stabilized, desired, reason)

    def _apply(
        self, now: float, current: int, proposal: int, stabilized: int, desired: int, reason: str
    ) -> HpaDecision:
        if desired > current:
            self._scale_ups.append((now, desired - current))
        elif desired < current:
            self._scale_downs.append((now, current - desired))
        return HpaDecision(
            metric_replicas=proposal,
            stabilized_replicas=stabilized,
            desired_replicas=desired,
            reason=reason,
        )

    def _stabilize(self, now: float, current: int, proposal: int) -> int:
        behavior = self.spec.behavior
        up_cutoff = now - behavior.scale_up.stabilization_window_s
        down_cutoff = now - behavior.scale_down.stabilization_window_s
        # Scaling up needs every recent recommendation to agree (the lowest); scaling down
        # acts only on the highest recent one, so a brief dip never removes replicas.
        up = min([proposal, *(r for at, r in self._recommendations if at > up_cutoff)])
        down = max([proposal, *(r for at, r in self._recommendations if at > down_cutoff)])
        return min(max(current, up), down)

    def _period_start(self, now: float, current: int, period_s: float) -> int:
        added = _changed_within(self._scale_ups, now, period_s)
        removed = _changed_within(self._scale_downs, now, period_s)
        return current - added + removed

    def _scale_up_limit(self, now: float, current: int) -> int:
        rules = self.spec.behavior.scale_up
        if rules.select_policy is SelectPolicy.DISABLED:
            return current
        limits = []
        for policy in rules.policies:
            start = self._period_start(now, current, policy.period_s)
            if policy.type is PolicyType.PODS:
                limits.append(start + policy.value)
            else:
                limits.append(-(-start * (100 + policy.value) // 100))  # ceil, exactly
        return max(limits) if rules.select_policy is SelectPolicy.MAX else min(limits)

    def _scale_down_limit(self, now: float, current: int) -> int:
        rules = self.spec.behavior.scale_down
        if rules.select_policy is SelectPolicy.DISABLED:
            return current
        limits = []
        for policy in rules.policies:
            start = self._period_start(now, current, policy.period_s)
            if policy.type is PolicyType.PODS:
                limits.append(start - policy.value)
            else:
                limits.append(start * max(0, 100 - policy.value) // 100)  # floor, exactly
        # The largest change when scaling down is the lowest count.
        return min(limits) if rules.select_policy is SelectPolicy.MAX else max(limits)

    def _forget(self, now: float) -> None:
        """Drop history no window or period can reach any more."""
        behavior = self.spec.behavior
        horizon = max(
            behavior.scale_up.stabilization_window_s,
            behavior.scale_down.stabilization_window_s,
            *(p.period_s for p in behavior.scale_up.policies),
            *(p.period_s for p in behavior.scale_down.policies),
        )
        cutoff = now - horizon
        self._recommendations = [(at, r) for at, r in self._recommendations if at > cutoff]
        self._scale_ups = [(at, c) for at, c in self._scale_ups if at > cutoff]
        self._scale_downs = [(at, c) for at, c in self._scale_downs if at > cutoff]


# -- readiness and spikes -----------------------------------------------------------------------


def readiness_delay(phases: Mapping[str, float]) -> float:
    """Seconds from the spike until new replicas serve: the sum of the scale-out phases.

    Metrics and decision 30 s, node provisioning 60 s, image pull 40 s, weight load 30 s and
    warm-up 10 s: new replicas serve from t = 170 s.
    """
    _checks.non_empty("phases", phases)
    return sum(_checks.non_negative(f"phases[{name}]", s) for name, s in phases.items())


@dataclass(frozen=True)
class SpikeTimeline:
    """What a step in traffic does before and after new replicas become ready.

    ``last_wait_s`` is the backlog at readiness divided by the standing capacity: the wait the
    queue implies at that moment, if only the standing fleet served it. ``worst_wait_s`` is the
    longest first-come-first-served wait of any request once the new capacity is counted (a
    fluid model: the queue drains at the standing rate until readiness, at the scaled rate
    after); it needs ``scaled_serving_rps``. Shedding assumes the cap is enforced from the
    start, so that ``shed_requests`` plus ``queue_cap_requests`` is the backlog.
    """

    deficit_rps: float
    backlog_requests: float
    last_wait_s: float
    worst_wait_s: float | None
    drain_s: float | None
    cleared_at_s: float | None
    queue_cap_requests: float | None
    shed_requests: float


def spike_timeline(
    arrival_rps: float,
    serving_rps: float,
    readiness_delay_s: float,
    scaled_serving_rps: float | None = None,
    max_wait_s: float | None = None,
) -> SpikeTimeline:
    """Trace a step to ``arrival_rps`` against a fleet completing ``serving_rps`` at saturation.

    deficit = arrival − serving; backlog = deficit × readiness delay; the last request waits
    backlog / serving; after readiness the scaled fleet drains the backlog at
    (scaled − arrival) per second. A queue capped at ``max_wait_s`` of waiting holds
    max_wait × serving requests and sheds the rest.

    8 → 20 req/s against 12 req/s for 170 s: 1,360 requests; the last waits 113 s; at 29 req/s
    after readiness the backlog drains in 151 s (until t ≈ 321 s); a 10 s cap holds 120 and
    sheds ≈ 1,240. A standing 18 replicas: 340 requests, ≈ 19 s.
    """
    arrival = _checks.non_negative("arrival_rps", arrival_rps)
    serving = _checks.positive("serving_rps", serving_rps)
    delay = _checks.non_negative("readiness_delay_s", readiness_delay_s)
    deficit = max(0.0, arrival - serving)
    backlog = deficit * delay

    worst_wait = drain = cleared_at = None
    if scaled_serving_rps is not None:
        scaled = _checks.positive("scaled_serving_rps", scaled_serving_rps)
        if backlog > 0 and scaled <= arrival:
            raise PlannerInputError(
                "scaled_serving_rps",
                f"{scaled!r} req/s never drains a backlog while {arrival!r} req/s arrive",
            )
        drain = backlog / (scaled - arrival) if backlog > 0 else 0.0
        cleared_at = delay + drain
        # The wait peaks for the request arriving when the backlog ahead of it would just be
        # served at the standing rate by readiness: t* = serving × delay / arrival, where its
        # wait is deficit × t* / serving = deficit × delay / arrival.
        worst_wait = deficit * delay / arrival if arrival > 0 else 0.0

    cap: float | None = None
    shed = 0.0
    if max_wait_s is not None:
        cap = _checks.non_negative("max_wait_s", max_wait_s) * serving
        shed = max(0.0, backlog - cap)

    return SpikeTimeline(
        deficit_rps=deficit,
        backlog_requests=backlog,
        last_wait_s=backlog / serving,
        worst_wait_s=worst_wait,
        drain_s=drain,
        cleared_at_s=cleared_at,
        queue_cap_requests=cap,
        shed_requests=shed,
    )
