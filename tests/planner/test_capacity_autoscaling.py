"""Autoscaling: the HPA rule, its behaviour (windows and policies), readiness and spikes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from planner.capacity.autoscaling import (
    HorizontalAutoscaler,
    HpaBehavior,
    HpaSpec,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
    hpa_desired_replicas,
    readiness_delay,
    spike_timeline,
)
from planner.errors import PlannerInputError

# The seeds' manifest: 3.5 in flight per replica, 12..40 replicas, scale up 100% per 60 s at
# once, scale down 1 replica per 300 s on the highest recommendation of the last 600 s.
SEED_SPEC = HpaSpec(
    target_metric=3.5,
    min_replicas=12,
    max_replicas=40,
    behavior=HpaBehavior(
        scale_up=ScalingRules(0, (ScalingPolicy(PolicyType.PERCENT, 100, 60),)),
        scale_down=ScalingRules(600, (ScalingPolicy(PolicyType.PODS, 1, 300),)),
    ),
)


def test_hpa_rule_from_the_seeds() -> None:
    # Target 70% of 5 = 3.5 in flight per replica; 12 replicas seeing 8 each: ceil(27.4) = 28.
    assert hpa_desired_replicas(12, 8, 3.5) == 28
    # Close to the 29 replicas the token arithmetic gives for 20 req/s.


def test_tolerance_band() -> None:
    assert hpa_desired_replicas(12, 3.8, 3.5) == 12  # 8.6% over target: inside the 10% band
    assert hpa_desired_replicas(12, 3.2, 3.5) == 12  # 8.6% under
    assert hpa_desired_replicas(12, 3.9, 3.5) == 14  # 11.4% over: ceil(13.4)
    assert hpa_desired_replicas(12, 3.8, 3.5, tolerance=0.0) == 14
    assert hpa_desired_replicas(12, 1.0, 3.5) == 4


def _run(
    spec: HpaSpec, load: Callable[[float], float], start: int, until_s: float
) -> list[tuple[float, int]]:
    """Step the controller every 15 s; ``load`` is total in-flight requests at time t."""
    hpa = HorizontalAutoscaler(spec)
    replicas, t, trace = start, 0.0, []
    while t <= until_s:
        decision = hpa.step(t, replicas, load(t) / replicas)
        replicas = decision.desired_replicas
        trace.append((t, replicas))
        t += 15.0
    return trace


def test_seed_manifest_scales_up_within_the_percent_policy() -> None:
    hpa = HorizontalAutoscaler(SEED_SPEC)
    first = hpa.step(0, 12, 8.0)
    assert first.metric_replicas == 28
    assert first.stabilized_replicas == 28
    # 100% per 60 s allows doubling from 12: 24 now, the rest once the period has passed.
    assert first.desired_replicas == 24
    assert first.reason == "ScaleUpLimit"
    second = hpa.step(15, 24, 96 / 24)
    assert second.metric_replicas == 28
    assert second.desired_replicas == 24
    third = hpa.step(60, 24, 96 / 24)
    assert third.desired_replicas == 28
    assert third.reason == "DesiredWithinRange"


def test_seed_manifest_scales_down_slowly_after_the_window() -> None:
    # 96 requests in flight until t = 90 s, then 30: the metric asks for 12 at once, but
    # scale-down acts on the highest recommendation of the last 600 s, then one replica per
    # 300 s.
    trace = dict(_run(SEED_SPEC, lambda t: 96.0 if t < 90 else 30.0, start=12, until_s=1400))
    assert trace[0] == 24 and trace[60] == 28 and trace[75] == 28
    # The last recommendation of 28 (t = 75) is 600 s old, and out of the window, at t = 675.
    assert all(trace[t] == 28 for t in trace if 60 <= t < 675)
    assert trace[675] == 27
    assert all(trace[t] == 27 for t in trace if 675 <= t < 975)
    assert trace[975] == 26
    assert trace[1275] == 25


def test_default_behaviour_policies_and_select() -> None:
    # Defaults: scale up by the larger of 100% and 4 replicas per 15 s.
    hpa = HorizontalAutoscaler(HpaSpec(target_metric=3.5, min_replicas=1, max_replicas=100))
    assert hpa.step(0, 12, 8.0).desired_replicas == 24
    # Select Min takes the smaller limit: 4 replicas.
    cautious = HpaSpec(
        target_metric=3.5,
        min_replicas=1,
        max_replicas=100,
        behavior=HpaBehavior(
            scale_up=ScalingRules(
                0,
                (
                    ScalingPolicy(PolicyType.PERCENT, 100, 15),
                    ScalingPolicy(PolicyType.PODS, 4, 15),
                ),
                SelectPolicy.MIN,
            )
        ),
    )
    assert HorizontalAutoscaler(cautious).step(0, 12, 8.0).desired_replicas == 16


def test_default_scale_down_waits_five_minutes_then_goes_all_the_way() -> None:
    spec = HpaSpec(target_metric=3.5, min_replicas=2, max_replicas=100)
    trace = dict(_run(spec, lambda t: 70.0 if t < 30 else 14.0, start=20, until_s=400))
    assert trace[0] == 20
    assert all(trace[t] == 20 for t in trace if t < 315)  # highest of the last 300 s
    assert trace[315] == 4  # 100% per 15 s allows the whole drop: ceil(20 × 0.7 / 3.5)


def test_bounds_and_disabled_direction() -> None:
    hpa = HorizontalAutoscaler(SEED_SPEC)
    above = hpa.step(0, 50, 1.0)
    assert above.desired_replicas == 40 and above.reason == "AboveMax"
    assert HorizontalAutoscaler(SEED_SPEC).step(0, 5, 1.0).desired_replicas == 12
    # A metric that wants more than max stops at max.
    capped = HorizontalAutoscaler(SEED_SPEC).step(0, 30, 20.0)
    assert capped.desired_replicas == 40 and capped.reason == "TooManyReplicas"
    frozen = HpaSpec(
        target_metric=3.5,
        min_replicas=1,
        max_replicas=40,
        behavior=HpaBehavior(scale_down=ScalingRules(0, (), SelectPolicy.DISABLED)),
    )
    assert HorizontalAutoscaler(frozen).step(0, 20, 0.5).desired_replicas == 20


def test_readiness_delay_and_the_spike() -> None:
    delay = readiness_delay(
        {"metrics and decision": 30, "node": 60, "image pull": 40, "weights": 30, "warm-up": 10}
    )
    assert delay == 170
    spike = spike_timeline(20, 12, delay, scaled_serving_rps=29, max_wait_s=10)
    assert spike.deficit_rps == 8
    assert spike.backlog_requests == 1360
    assert spike.last_wait_s == pytest.approx(113, abs=0.5)
    assert spike.drain_s == pytest.approx(151, abs=0.5)
    assert spike.cleared_at_s == pytest.approx(321, abs=0.5)
    # A queue that lets no request wait more than 10 s holds about 120 and sheds ≈ 1,240.
    assert spike.queue_cap_requests == pytest.approx(120)
    assert spike.shed_requests == pytest.approx(1240)
    # First-come-first-served with the new capacity counted, the longest wait is 68 s, for
    # the request arriving at t = 102 s: still far beyond any chat timeout.
    assert spike.worst_wait_s == pytest.approx(68)


def test_standing_headroom_shrinks_the_spike() -> None:
    # A standing 18 replicas: a deficit of 2 req/s, 340 requests, ~19 s for the last.
    spike = spike_timeline(20, 18, 170)
    assert spike.deficit_rps == 2
    assert spike.backlog_requests == pytest.approx(340)
    assert spike.last_wait_s == pytest.approx(19, abs=0.5)
    assert spike.drain_s is None and spike.shed_requests == 0
    # Enough standing capacity and there is nothing to queue.
    calm = spike_timeline(20, 29, 170, scaled_serving_rps=29)
    assert calm.backlog_requests == 0 and calm.drain_s == 0 and calm.worst_wait_s == 0


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: hpa_desired_replicas(0, 8, 3.5), "current_replicas"),
        (lambda: hpa_desired_replicas(12, -8, 3.5), "current_metric"),
        (lambda: hpa_desired_replicas(12, 8, 0), "target_metric"),
        (lambda: hpa_desired_replicas(12, 8, 3.5, tolerance=1.0), "tolerance"),
        (lambda: HpaSpec(3.5, 12, 10), "max_replicas"),
        (lambda: HpaSpec(3.5, 0, 10), "min_replicas"),
        (lambda: ScalingPolicy(PolicyType.PODS, 0, 60), "value"),
        (lambda: ScalingPolicy(PolicyType.PODS, 1, 3600), "period_s"),
        (
            lambda: ScalingRules(-1, (ScalingPolicy(PolicyType.PODS, 1, 60),)),
            "stabilization_window_s",
        ),
        (lambda: ScalingRules(0, ()), "policies"),
        (lambda: HorizontalAutoscaler(SEED_SPEC).step(0, 12, float("nan")), "current_metric"),
        (lambda: readiness_delay({"pull": -40}), "phases[pull]"),
        (lambda: readiness_delay({}), "phases"),
        (lambda: spike_timeline(20, 0, 170), "serving_rps"),
        (lambda: spike_timeline(-20, 12, 170), "arrival_rps"),
        (lambda: spike_timeline(20, 12, 170, scaled_serving_rps=20), "scaled_serving_rps"),
        (lambda: spike_timeline(20, 12, 170, max_wait_s=-1), "max_wait_s"),
    ],
)
def test_invalid_arguments_are_named(call: object, argument: str) -> None:
    assert callable(call)
    with pytest.raises(PlannerInputError) as caught:
        call()
    assert caught.value.argument == argument


def test_time_must_not_run_backwards() -> None:
    hpa = HorizontalAutoscaler(SEED_SPEC)
    hpa.step(30, 12, 3.5)
    with pytest.raises(PlannerInputError) as caught:
        hpa.step(15, 12, 3.5)
    assert caught.value.argument == "now_s"
