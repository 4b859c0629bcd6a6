"""Pool signal alerts: the engines' p95 inter-token latency, p95 queue time and KV-cache
capacity of a pool against what the active plan assumed of them.

The Friday review's pool (five tenants on 12 replicas of the 2-GPU replica, 4,000 prompt /
160 output tokens/s, 12 sequences at once, prompts of 1,500 and outputs of 100 tokens): the
figure's inter-token latency is 12 / 160 = 75 ms, and its 12 sequences of 1,600 tokens need
19,200 tokens of KV cache per replica. The pool's engines report as vLLM does: no tenant
label, their latency histograms and their cache configuration.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from controlplane.core.roles import VIEWER
from controlplane.plans.assumptions import pool_assumptions, pool_signal_alerts_check
from controlplane.plans.models import Plan
from controlplane.plans.services import replan_execute, replan_request
from controlplane.scenarios.services import scenario_load
from controlplane.telemetry import derive, metrics
from controlplane.telemetry.conf import telemetry_settings
from controlplane.telemetry.models import DriftAlert, PoolSignalAlert, ProfileDerivation
from controlplane.telemetry.storage import SeriesKey
from tests.controlplane.telemetry_fakes import steady, store, traffic_samples
from tests.controlplane.test_drift_friday_review import FRIDAY_REVIEW, MONDAY, RATE, TENANTS, W

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
BUCKETS = 12  # an hour of 5-minute buckets
TOKENS = 1000.0  # inter-token latencies observed per bucket (one per output token)
REQUESTS = RATE * len(TENANTS) * W  # queue times observed per bucket

FAST_ITL = {"0.025": 0.2, "0.05": 0.9, "0.075": 1.0, "+Inf": 1.0}  # p95 62.5 ms
SLOW_ITL = {"0.05": 0.0, "0.075": 0.1, "0.1": 0.5, "0.15": 0.9, "0.2": 1.0, "+Inf": 1.0}  # 175 ms
SHORT_QUEUE = {"0.1": 0.9, "0.3": 1.0, "+Inf": 1.0}  # p95 0.2 s
LONG_QUEUE = {"0.3": 0.5, "0.5": 0.8, "1.0": 0.9, "2.5": 1.0, "+Inf": 1.0}  # p95 1.75 s


def engine_samples(
    start: datetime,
    *,
    itl: Mapping[str, float],
    queue: Mapping[str, float],
    kv_tokens: float,
) -> dict[SeriesKey, dict[datetime, float]]:
    """An hour of the pool's engine series (no tenant label, as vLLM's): the latency
    histograms (cumulative shares of each bucket's observations) and the KV capacity."""
    out: dict[SeriesKey, dict[datetime, float]] = {}

    def put(metric: str, at: datetime, value: float, le: str = "") -> None:
        out.setdefault(SeriesKey("", "chat-70b", "eu-west", "", metric, le), {})[at] = value

    for i in range(BUCKETS):
        at = start + timedelta(seconds=i * W)
        for family, shares, n, mean in (
            (metrics.ITL_HIST, itl, TOKENS, 0.1),
            (metrics.QUEUE_HIST, queue, REQUESTS, 0.5),
        ):
            for le, share in shares.items():
                put(family + "_bucket", at, share * n, le)
            put(family + "_count", at, n)
            put(family + "_sum", at, mean * n)
        put(metrics.KV_CAPACITY, at, kv_tokens)
    return out


def _hour(start: datetime, *, slow: bool, kv_tokens: float = 24_320.0) -> ProfileDerivation:
    """An hour of the five tenants' steady traffic and of the pool's engines, derived."""
    bucket = steady(requests_per_s=RATE, bucket_s=W, prompt_mean=1500.0, output_mean=100.0)
    for tenant in TENANTS:
        store(traffic_samples(tenant, "chat-70b", "eu-west", start, W, [bucket] * BUCKETS), W)
    engines = engine_samples(
        start,
        itl=SLOW_ITL if slow else FAST_ITL,
        queue=LONG_QUEUE if slow else SHORT_QUEUE,
        kv_tokens=kv_tokens,
    )
    store(engines, W)
    return derive.workload_profiles_derive(window_start=start, window_end=start + HOUR)


@pytest.fixture
def planned(settings: Any) -> Plan:
    """The Friday review's fleet, a healthy Monday hour derived and the plan made from it."""
    settings.HEADROOM_TELEMETRY_BUCKET_S = W
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 100
    settings.HEADROOM_DEFAULT_TARGET_UTILIZATION = 0.7
    settings.HEADROOM_REPLAN_TIME_LIMIT_S = 5
    settings.HEADROOM_REPLAN_BAND_TIME_LIMIT_S = 1
    scenario_load(data=copy.deepcopy(FRIDAY_REVIEW))
    monday = _hour(MONDAY, slow=False)
    queued = replan_request(trigger=Plan.Trigger.COMMAND, enqueue=False)
    run = replan_execute(run_id=queued.pk)
    assert run is not None and run.plan is not None, run and run.error
    assert pool_signal_alerts_check(derivation=monday) == []
    return run.plan


def _active() -> dict[str, PoolSignalAlert]:
    return {a.kind: a for a in PoolSignalAlert.objects.filter(status__in=PoolSignalAlert.ACTIVE)}


def test_the_plan_assumes_the_figures_latency_and_the_kv_its_concurrency_needs(
    planned: Plan,
) -> None:
    (shape,) = pool_assumptions(plan=planned)[("chat-70b", "eu-west")]
    assert (shape.shape, shape.replicas) == ("chat-70b/gpu80x2", 12)
    assert shape.itl_s == pytest.approx(12 / 160)
    assert shape.context_tokens == pytest.approx(1600)
    assert shape.kv_tokens_needed == pytest.approx(19_200)


def test_slow_engines_raise_one_alert_per_signal_updated_while_they_last_then_resolved(
    planned: Plan,
) -> None:
    tuesday = MONDAY + timedelta(days=1)
    slow = _hour(tuesday, slow=True, kv_tokens=15_000.0)
    touched = pool_signal_alerts_check(derivation=slow)
    alerts = _active()
    assert sorted(alerts) == sorted(PoolSignalAlert.Kind.values)
    assert {a.pk for a in touched} == {a.pk for a in alerts.values()}
    # No tenant's figures moved: these are the pool's, not a drift of any tenant.
    assert not DriftAlert.objects.exists()

    itl = alerts[PoolSignalAlert.Kind.ITL_P95]
    assert itl.measured_value == pytest.approx(0.175)
    assert itl.reference_value == pytest.approx(0.075)
    assert (itl.threshold, itl.window_s, itl.shape.name if itl.shape else None) == (
        0.25,
        3600,
        "chat-70b/gpu80x2",
    )
    assert itl.raised_by == slow and itl.occurrences == 1
    assert itl.first_seen_at == tuesday + HOUR
    assert itl.message == (
        "p95 inter-token latency of chat-70b in eu-west 175 ms over the last hour, +133% "
        "against the capacity figure's 75 ms (chat-70b/gpu80x2: 12 sequences at 160 "
        "tokens/s): the engines decode slower than the plan assumed"
    )
    queue = alerts[PoolSignalAlert.Kind.QUEUE_TIME_P95]
    assert queue.measured_value == pytest.approx(1.75)
    assert queue.message == (
        "p95 queue time of chat-70b in eu-west 1.75 s over the last hour, against at most "
        "1.00 s: requests wait before they run"
    )
    kv = alerts[PoolSignalAlert.Kind.KV_CAPACITY]
    assert kv.measured_value == pytest.approx(15_000)
    assert kv.reference_value == pytest.approx(19_200)
    assert kv.figures["plan"] == planned.version
    assert kv.message == (
        "KV-cache capacity of chat-70b in eu-west 15,000 tokens per engine over the last "
        "hour, -22% against the 19,200 the capacity figure's 12 sequences of 1,600 tokens "
        "need (chat-70b/gpu80x2: 12 sequences at 160 tokens/s): the KV-bound concurrency is "
        "9.4, not 12"
    )

    # Still slow an hour later: the same alerts, seen twice, none added.
    again = _hour(tuesday + HOUR, slow=True, kv_tokens=15_000.0)
    pool_signal_alerts_check(derivation=again)
    assert {k: a.pk for k, a in _active().items()} == {k: a.pk for k, a in alerts.items()}
    assert all(a.occurrences == 2 and a.changed_by == again for a in _active().values())
    assert PoolSignalAlert.objects.count() == 3

    # Healthy again: each resolves, saying why.
    healthy = _hour(tuesday + 2 * HOUR, slow=False)
    resolved = pool_signal_alerts_check(derivation=healthy)
    assert len(resolved) == 3 and not _active()
    for alert in PoolSignalAlert.objects.all():
        assert alert.status == DriftAlert.Status.RESOLVED
        assert alert.resolved_at == tuesday + 3 * HOUR
        assert alert.message.endswith(": resolved (back within its threshold)")
    assert PoolSignalAlert.objects.get(kind="itl-p95").measured_value == pytest.approx(0.0625)


def test_thresholds_are_settings(planned: Plan, settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_DRIFT_QUEUE_TIME_P95_S = 2.0
    settings.HEADROOM_TELEMETRY_DRIFT_ITL_P95 = 2.0
    settings.HEADROOM_TELEMETRY_DRIFT_KV_CAPACITY = 0.25
    slow = _hour(MONDAY + timedelta(days=1), slow=True, kv_tokens=15_000.0)
    # 175 ms is +133% (under +200%), 1.75 s under 2 s, 15,000 tokens -22% (within 25%).
    assert pool_signal_alerts_check(derivation=slow) == []
    settings.HEADROOM_TELEMETRY_DRIFT_KV_CAPACITY = "a lot"
    with pytest.raises(ImproperlyConfigured, match="HEADROOM_TELEMETRY_DRIFT_KV_CAPACITY"):
        telemetry_settings()


def test_without_an_active_plan_only_the_queue_time_is_checked(planned: Plan) -> None:
    Plan.objects.filter(pk=planned.pk).update(state=Plan.State.SUPERSEDED)
    slow = _hour(MONDAY + timedelta(days=1), slow=True, kv_tokens=15_000.0)
    (alert,) = pool_signal_alerts_check(derivation=slow)
    assert alert.kind == PoolSignalAlert.Kind.QUEUE_TIME_P95


def test_the_api_lists_pool_signal_alerts_to_every_role(planned: Plan, api_client_for: Any) -> None:
    pool_signal_alerts_check(derivation=_hour(MONDAY + timedelta(days=1), slow=True))
    listed = api_client_for(VIEWER).get("/api/telemetry/pool-signal-alerts/", {"kind": "itl-p95"})
    assert listed.status_code == 200
    (row,) = listed.json()["results"]
    assert (row["model"], row["region"], row["shape"], row["status"]) == (
        "chat-70b",
        "eu-west",
        "chat-70b/gpu80x2",
        "open",
    )
    assert row["measured_value"] == pytest.approx(0.175)
    assert row["figures"]["shapes"][0]["itl_s"] == pytest.approx(0.075)
    # KV capacity 24,320 tokens holds the 19,200 the figure needs: no alert.
    assert not PoolSignalAlert.objects.filter(kind="kv-capacity").exists()
