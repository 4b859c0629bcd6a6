"""Drift alerts: the seeds' Friday review (mean prompt 1,500 → 2,700 tokens at a flat 8 req/s
needs 15 replicas instead of 12 at the 70% target), de-duplication, resolution, the other
kinds, and acknowledgement through the API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.fleet.models import CapacityFigure, WorkloadClass, ZoneInventory
from controlplane.plans import services as plan_services
from controlplane.plans.impact import pool_drift_alerts_price
from controlplane.policies.models import Tenant, WorkloadProfile
from controlplane.telemetry import derive, drift
from controlplane.telemetry.models import DriftAlert, PoolDriftAlert, ProfileDerivation
from tests.controlplane.telemetry_fakes import (
    Fleet,
    make_fleet,
    make_plannable,
    steady,
    store,
    traffic_samples,
)

pytestmark = pytest.mark.django_db

MONDAY = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
W = 300
HOUR = timedelta(hours=1)


@pytest.fixture
def fleet(settings: Any) -> Fleet:
    """The telemetry fleet made plannable: three zones of 64 GPUs in each region, and the
    seeds' 2-GPU replica (4,000 / 160 tokens/s) as the only shape with a capacity figure, so
    the worked numbers are the seeds' (``test_a_cheaper_shape_prices_the_drift`` puts the
    4-GPU figure back)."""
    settings.HEADROOM_TELEMETRY_BUCKET_S = W
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 100
    settings.HEADROOM_DEFAULT_TARGET_UTILIZATION = 0.7
    settings.HEADROOM_REPLAN_TIME_LIMIT_S = 5
    return make_plannable(make_fleet(("northwind", "eu-west"), ("fabrikam", "eu-west")))


def _hour(
    start: datetime,
    *,
    tenant: str = "northwind",
    rate: float = 8.0,
    prompt: float = 1500.0,
    output: float = 100.0,
    hit_rate: float = 0.0,
) -> ProfileDerivation:
    """Store an hour of steady traffic for one tenant in eu-west and derive from it."""
    bucket = steady(
        requests_per_s=rate, bucket_s=W, prompt_mean=prompt, output_mean=output, hit_rate=hit_rate
    )
    store(traffic_samples(tenant, "chat-70b", "eu-west", start, W, [bucket] * 12), W)
    return derive_and_price(start)


def derive_and_price(start: datetime) -> ProfileDerivation:
    """Derive the hour from ``start`` and price the pool drifts it changed, as the pipeline
    does after a derivation."""
    run = derive.workload_profiles_derive(window_start=start, window_end=start + HOUR)
    pool_drift_alerts_price(derivation=run)
    return run


def test_friday_review_raises_a_prompt_drift_alert_with_three_more_replicas(fleet: Fleet) -> None:
    first = _hour(MONDAY)
    assert (first.profiles_created, first.alerts_raised) == (1, 0)
    # Wednesday: retrieval top-4 → top-8, 1,200 more prompt tokens, the same 8 req/s.
    wednesday = MONDAY + timedelta(days=2)
    run = _hour(wednesday, prompt=2700.0)
    assert (run.profiles_created, run.alerts_raised) == (1, 1)

    alert = DriftAlert.objects.get()
    assert alert.kind == DriftAlert.Kind.PROMPT_MEAN
    assert alert.status == DriftAlert.Status.OPEN
    assert (alert.baseline_value, alert.current_value) == (pytest.approx(1500), pytest.approx(2700))
    assert (alert.tenant.name, alert.region.name, alert.model.name) == (
        "northwind",
        "eu-west",
        "chat-70b",
    )
    # 8 × (1500/4000 + 100/160) = 8 replica-s/s → 12 at 0.7; 8 × 1.3 = 10.4 → 15: the
    # placement solved with the profile before and after (24 → 30 GPUs at $4.10/GPU-h).
    assert (alert.replicas_before, alert.replicas_after, alert.replica_delta) == (12, 15, 3)
    assert alert.shape == fleet.shape
    assert alert.target_utilization == pytest.approx(0.7)
    assert alert.pool_share == pytest.approx(1.0)
    assert alert.message == (
        "mean prompt length 1,500 → 2,700 tokens (+80%) for northwind on chat-70b in eu-west: "
        f"100% of the pool's drift (#{alert.pool_alert_id}): +3 replicas in eu-west (12 → 15 × "
        "chat-70b/gpu80x2); the re-plan goes from 24 GPUs at $98.40/h to 30 GPUs at $123.00/h "
        "(+$24.60/h)"
    )
    pool = PoolDriftAlert.objects.get()
    assert alert.pool_alert == pool and pool.raised_by == run
    assert (pool.replicas_before, pool.replicas_after, pool.replica_delta) == (12, 15, 3)
    assert (pool.gpus_before, pool.gpus_after) == (24, 30)
    assert (pool.cost_per_hour_before, pool.cost_per_hour_after) == (
        pytest.approx(98.40),
        pytest.approx(123.00),
    )
    assert pool.pricing == PoolDriftAlert.Pricing.PRICED
    assert [t["tenant"] for t in pool.tenants] == ["northwind"]
    assert pool.tenants[0]["alerts"] == [alert.pk]
    assert (pool.tenants[0]["load_before"], pool.tenants[0]["load_after"]) == (
        pytest.approx(8.0),
        pytest.approx(10.4),
    )
    assert alert.baseline_profile is not None and alert.baseline_profile.version == 1
    assert alert.current_profile is not None and alert.current_profile.version == 2
    assert alert.first_seen_at == alert.last_seen_at == wednesday + HOUR


def test_an_open_alert_is_updated_not_repeated_and_resolves_when_the_change_is_undone(
    fleet: Fleet,
) -> None:
    _hour(MONDAY)
    _hour(MONDAY + 2 * HOUR, prompt=2700.0)
    # Still 2,700: no new version, the open alert is seen again.
    same = _hour(MONDAY + 4 * HOUR, prompt=2700.0)
    assert (same.profiles_unchanged, same.alerts_raised, same.alerts_updated) == (1, 0, 1)
    # Worse: 3,000 tokens. Still one alert, against the same baseline.
    worse = _hour(MONDAY + 6 * HOUR, prompt=3000.0)
    assert (worse.profiles_created, worse.alerts_raised, worse.alerts_updated) == (1, 0, 1)
    alert = DriftAlert.objects.get()
    assert alert.occurrences == 3
    assert (alert.baseline_value, alert.current_value) == (pytest.approx(1500), pytest.approx(3000))
    # 8 × (3000/4000 + 0.625) = 11 → 16 replicas.
    assert (alert.replicas_before, alert.replicas_after) == (12, 16)
    assert alert.current_profile is not None and alert.current_profile.version == 3
    assert alert.last_seen_at == MONDAY + 7 * HOUR

    # Retrieval back to top-4: the alert resolves; nothing new is raised.
    back = _hour(MONDAY + 8 * HOUR, prompt=1500.0)
    assert (back.alerts_resolved, back.alerts_raised) == (1, 0)
    alert.refresh_from_db()
    assert alert.status == DriftAlert.Status.RESOLVED
    assert alert.resolved_at == MONDAY + 9 * HOUR
    # The pool's drift is over with it.
    pool = PoolDriftAlert.objects.get()
    assert pool.status == DriftAlert.Status.RESOLVED and pool.resolved_at == MONDAY + 9 * HOUR
    assert pool.occurrences == 3 and pool.changed_by == back
    assert pool.message.endswith(": resolved (every tenant back within its thresholds)")
    # A new drift later is a new alert (the resolved one is history), in a new pool drift.
    _hour(MONDAY + 10 * HOUR, prompt=2700.0)
    assert DriftAlert.objects.filter(status=DriftAlert.Status.OPEN).count() == 1
    assert DriftAlert.objects.count() == 2
    assert PoolDriftAlert.objects.filter(status=DriftAlert.Status.OPEN).count() == 1
    assert PoolDriftAlert.objects.count() == 2


def test_a_drift_seen_again_unchanged_is_not_solved_again(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    solves: list[object] = []
    solve = plan_services._solve

    def counted(*args: Any, **kwargs: Any) -> Any:
        solves.append(args)
        return solve(*args, **kwargs)

    # The pricing solves as the re-plan does, through its solver (and the replay's rounds).
    monkeypatch.setattr(plan_services, "_solve", counted)
    _hour(MONDAY)
    _hour(MONDAY + 2 * HOUR, prompt=2700.0)
    priced = len(solves)
    assert priced >= 2  # before and after, each with its replay's re-solves
    first = PoolDriftAlert.objects.get()
    # The same figures an hour later: the alert is seen again, its price stands unsolved.
    _hour(MONDAY + 4 * HOUR, prompt=2700.0)
    assert len(solves) == priced
    pool = PoolDriftAlert.objects.get()
    assert pool.pricing == PoolDriftAlert.Pricing.PRICED and pool.inputs_hash == first.inputs_hash
    assert pool.priced_at is not None and first.priced_at is not None
    assert pool.priced_at > first.priced_at
    assert "+3 replicas" in DriftAlert.objects.get().message


def test_a_solver_failure_leaves_the_drift_unpriced_not_the_pipeline_stopped(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("solver crashed")

    _hour(MONDAY)
    monkeypatch.setattr(plan_services, "_solve", broken)
    run = _hour(MONDAY + HOUR, prompt=2700.0)  # prices, and must not raise
    assert run.alerts_raised == 1
    pool = PoolDriftAlert.objects.get()
    assert pool.pricing == PoolDriftAlert.Pricing.FAILED
    assert pool.pricing_error == "pricing failed: RuntimeError: solver crashed"
    assert DriftAlert.objects.get().message.endswith(
        "replica impact unknown (pricing failed: RuntimeError: solver crashed)"
    )


def test_a_cheaper_shape_prices_the_drift(fleet: Fleet) -> None:
    # The 4-GPU replica back: 7,600 / 380 tokens/s, 0.46 replica-s a 1,500-token request
    # (1.84 GPU-s against the 2-GPU replica's 2.0). The plan mixes: 5 × 4-GPU carry
    # 5 × 0.7 / 0.4605 = 7.6 req/s, one 2-GPU replica the rest: 22 GPUs, where sizing on the
    # smallest shape said 24. At 2,700 tokens (0.618 and 1.3 replica-s) 30 GPUs either way.
    big = fleet.model.shapes.get(gpus_per_replica=4)
    CapacityFigure.objects.create(
        shape=big, prefill_tokens_per_s=7600, decode_tokens_per_s=380, max_concurrency=48
    )
    _hour(MONDAY)
    _hour(MONDAY + HOUR, prompt=2700.0)
    pool = PoolDriftAlert.objects.get()
    assert (pool.gpus_before, pool.gpus_after) == (22, 30)
    assert pool.cost_per_hour_before == pytest.approx(22 * 4.1)
    assert pool.cost_per_hour_after == pytest.approx(30 * 4.1)
    # 22 GPUs take both shapes (five 4-GPU and one 2-GPU replica, or an equal-cost mix).
    shapes = {row["shape"] for row in pool.pools if row["replicas_before"]}
    assert shapes == {"chat-70b/gpu80x2", "chat-70b/gpu80x4"}
    # Replicas of different shapes are counted, not sized as one: no single shape to name.
    alert = DriftAlert.objects.get()
    assert alert.shape is None and alert.target_utilization is None
    assert f"(#{pool.pk}): " in alert.message and "22 GPUs at $90.20/h" in alert.message


def test_a_shortage_shows_as_unserved_demand(fleet: Fleet) -> None:
    # Four GPUs a zone in eu-west: six replicas, 6 × 0.7 = 4.2 replica-s/s, and the tenants
    # may not spill to us-east. 8 req/s of 1.0 replica-s needs 12; of 1.3, 15.
    ZoneInventory.objects.filter(zone__region=fleet.eu).update(gpus_available=4)
    _hour(MONDAY)
    _hour(MONDAY + HOUR, prompt=2700.0)
    pool = PoolDriftAlert.objects.get()
    assert (pool.replicas_before, pool.replicas_after) == (6, 6)
    # Unserved: 8 − 4.2 / 1.0 = 3.8 req/s before, 8 − 4.2 / 1.3 = 4.77 after.
    assert pool.unserved_before == pytest.approx(3.8, abs=1e-4)
    assert pool.unserved_after == pytest.approx(8 - 4.2 / 1.3, abs=1e-4)
    assert pool.message.endswith("leaving 3.80 → 4.77 req/s unserved")


def test_small_changes_raise_nothing(fleet: Fleet) -> None:
    _hour(MONDAY)
    run = _hour(MONDAY + HOUR, prompt=1700.0, output=110.0)  # +13%, +10%: under 25%
    assert run.profiles_created == 1 and run.alerts_raised == 0
    assert not DriftAlert.objects.exists()


def test_thresholds_come_from_settings(fleet: Fleet, settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_DRIFT_PROMPT_MEAN = 0.10
    _hour(MONDAY)
    run = _hour(MONDAY + HOUR, prompt=1700.0)
    assert run.alerts_raised == 1
    alert = DriftAlert.objects.get()
    assert alert.threshold == pytest.approx(0.10)
    assert "(+13%)" in alert.message


def test_output_length_and_cache_hit_rate_drift(fleet: Fleet) -> None:
    _hour(MONDAY, hit_rate=0.35)
    _hour(MONDAY + HOUR, output=150.0, hit_rate=0.10)
    alerts = {a.kind: a for a in DriftAlert.objects.all()}
    assert set(alerts) == {DriftAlert.Kind.OUTPUT_MEAN, DriftAlert.Kind.CACHE_HIT_RATE}
    cache = alerts[DriftAlert.Kind.CACHE_HIT_RATE]
    assert (cache.baseline_value, cache.current_value) == (pytest.approx(0.35), pytest.approx(0.10))
    # One pool drift holds both: before, 8 × (1500 × 0.65/4000 + 100/160) = 6.95 replica-s/s
    # → 10 replicas; after, 8 × (1500 × 0.9/4000 + 150/160) = 10.2 → 15. (Priced one alert at
    # a time, each against a pool where the other figure had already drifted, they read
    # 14 → 15 and 11 → 15: neither said what the change costs.)
    assert (cache.replicas_before, cache.replicas_after) == (10, 15)
    output = alerts[DriftAlert.Kind.OUTPUT_MEAN]
    assert (output.replicas_before, output.replicas_after) == (10, 15)
    assert cache.pool_alert == output.pool_alert
    assert cache.message.startswith("prefix-cache hit rate 35% → 10% (-25 points)")
    assert alerts[DriftAlert.Kind.OUTPUT_MEAN].message.startswith(
        "mean output length 100 → 150 tokens (+50%)"
    )


def test_a_tenants_share_of_the_pools_tokens(fleet: Fleet) -> None:
    _hour(MONDAY, tenant="northwind", rate=4.0)
    _hour(MONDAY, tenant="fabrikam", rate=4.0)
    # fabrikam triples its traffic: its share of eu-west's tokens goes from 50% to 75%.
    _hour(MONDAY + HOUR, tenant="fabrikam", rate=12.0)
    alert = DriftAlert.objects.get()
    assert alert.kind == DriftAlert.Kind.TOKEN_SHARE and alert.tenant.name == "fabrikam"
    assert (alert.baseline_value, alert.current_value) == (pytest.approx(0.5), pytest.approx(0.75))
    # 8 replica-s/s → 12; 16 → 23.
    assert (alert.replicas_before, alert.replicas_after) == (12, 23)


def test_everyone_growing_alike_moves_no_tenants_share(fleet: Fleet) -> None:
    for tenant, rate in (("northwind", 6.0), ("fabrikam", 2.0)):
        bucket = steady(requests_per_s=rate, bucket_s=W, prompt_mean=1500, output_mean=100)
        store(traffic_samples(tenant, "chat-70b", "eu-west", MONDAY, W, [bucket] * 12), W)
    derive.workload_profiles_derive(window_start=MONDAY, window_end=MONDAY + HOUR)
    later = MONDAY + 2 * HOUR
    for tenant, rate in (("northwind", 6.0), ("fabrikam", 2.0)):
        bucket = steady(requests_per_s=rate, bucket_s=W, prompt_mean=2700, output_mean=100)
        store(traffic_samples(tenant, "chat-70b", "eu-west", later, W, [bucket] * 12), W)
    run = derive_and_price(later)
    assert run.alerts_raised == 2
    assert set(DriftAlert.objects.values_list("kind", flat=True)) == {DriftAlert.Kind.PROMPT_MEAN}
    # One pool drift sums both: 8 replica-s/s → 12 replicas, 8 × 1.3 = 10.4 → 15. (Each alert
    # priced its own tenant against a pool where the other had already drifted, and read
    # 13 → 15 and 14 → 15: parts of +2 and +1 that add to no figure the plan pays.)
    impact = {
        a.tenant.name: (a.replicas_before, a.replicas_after, a.pool_share)
        for a in DriftAlert.objects.all()
    }
    # Shares of the load change: northwind 6 × 0.3 = 1.8 of 2.4 replica-s/s, fabrikam 0.6.
    assert impact == {
        "northwind": (12, 15, pytest.approx(0.75)),
        "fabrikam": (12, 15, pytest.approx(0.25)),
    }
    pool = PoolDriftAlert.objects.get()
    assert pool.message.startswith(
        "drift of chat-70b in eu-west (2 tenants: fabrikam 25%, northwind 75%): +3 replicas"
    )


def test_declared_profiles_count_in_the_pool_until_telemetry_replaces_them(fleet: Fleet) -> None:
    policy = WorkloadClass.objects.create(name="policy-question")
    figures = {
        "peak_requests_per_s": 1.0,
        "prompt_tokens_p50": 1100,
        "prompt_tokens_mean": 1500,
        "prompt_tokens_p95": 4000,
        "prompt_tokens_p99": 6900,
        "output_tokens_p50": 70,
        "output_tokens_mean": 100,
        "output_tokens_p95": 280,
        "output_tokens_p99": 500,
    }
    # fabrikam's declared 1 req/s stays in the pool; northwind's declared 20 req/s gives way
    # to what telemetry measures of northwind.
    for name, rate in (("fabrikam", 1.0), ("northwind", 20.0)):
        WorkloadProfile.objects.create(
            tenant=Tenant.objects.get(name=name),
            model=fleet.model,
            workload_class=policy,
            **{**figures, "peak_requests_per_s": rate},
        )
    _hour(MONDAY)
    _hour(MONDAY + HOUR, prompt=2700.0)
    alert = DriftAlert.objects.get()
    # (8 + 1) × 1.0 = 9 → 13 replicas; 8 × 1.3 + 1 = 11.4 → 17.
    assert (alert.replicas_before, alert.replicas_after) == (13, 17)


def test_no_capacity_figure_still_alerts_without_an_impact(fleet: Fleet) -> None:
    for shape in fleet.model.shapes.all():
        shape.figures.all().delete()
    _hour(MONDAY)
    _hour(MONDAY + HOUR, prompt=2700.0)
    alert = DriftAlert.objects.get()
    assert alert.replicas_before is None and alert.replica_delta is None
    assert alert.message.endswith(
        "replica impact unknown (no shape of chat-70b has a capacity figure)"
    )
    pool = PoolDriftAlert.objects.get()
    assert pool.pricing == PoolDriftAlert.Pricing.FAILED and pool.replica_delta is None
    assert pool.pricing_error == "no shape of chat-70b has a capacity figure"


def test_the_api_shows_the_pool_drift_and_each_tenants_share(
    fleet: Fleet, api_client_for: Any
) -> None:
    _hour(MONDAY)
    _hour(MONDAY + HOUR, prompt=2700.0)
    pool = PoolDriftAlert.objects.get()
    alert = DriftAlert.objects.get()
    client = api_client_for(VIEWER)
    body = client.get(f"/api/telemetry/alerts/{alert.pk}/").json()
    assert (body["pool_alert"], body["pool_share"]) == (pool.pk, pytest.approx(1.0))
    listed = client.get("/api/telemetry/pool-alerts/", {"region__name": "eu-west"}).json()
    assert [row["id"] for row in listed["results"]] == [pool.pk]
    row = listed["results"][0]
    assert (row["model"], row["region"], row["status"], row["pricing"]) == (
        "chat-70b",
        "eu-west",
        "open",
        "priced",
    )
    assert (row["replicas_before"], row["replicas_after"], row["replica_delta"]) == (12, 15, 3)
    assert (row["gpus_before"], row["gpus_after"]) == (24, 30)
    assert row["cost_per_hour_delta"] == pytest.approx(6 * 4.1)
    assert row["tenant_alerts"] == [alert.pk]
    assert row["tenants"][0]["tenant"] == "northwind"
    assert row["pools"][0]["shape"] == "chat-70b/gpu80x2"
    assert row["message"] == pool.message
    # Read-only: no one writes a pool drift through the API.
    assert (
        api_client_for(POLICY_ADMIN).delete(f"/api/telemetry/pool-alerts/{pool.pk}/").status_code
        == 405
    )


# -- acknowledgement --------------------------------------------------------------------------------


@pytest.fixture
def alert(fleet: Fleet) -> DriftAlert:
    _hour(MONDAY)
    _hour(MONDAY + HOUR, prompt=2700.0)
    return DriftAlert.objects.get()


def test_policy_admin_acknowledges_through_the_api(alert: DriftAlert, api_client_for: Any) -> None:
    url = f"/api/telemetry/alerts/{alert.pk}/acknowledge/"
    response = api_client_for(POLICY_ADMIN).post(url)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "acknowledged"
    assert body["acknowledged_by"] == "admin-user"
    assert body["replica_delta"] == 3
    alert.refresh_from_db()
    assert alert.acknowledged_at is not None
    # The change is in the alert's audit history, with who did it.
    latest = alert.history.order_by("-history_date", "-history_id").first()
    assert latest is not None and latest.history_user is not None
    assert latest.history_user.username == "admin-user"
    # Twice changes nothing.
    assert (
        api_client_for(POLICY_ADMIN).post(url).json()["acknowledged_at"] == body["acknowledged_at"]
    )


@pytest.mark.parametrize("role", [FINANCE, VIEWER, "no-role", "anonymous"])
def test_other_roles_cannot_acknowledge(alert: DriftAlert, api_client_for: Any, role: str) -> None:
    response = api_client_for(role).post(f"/api/telemetry/alerts/{alert.pk}/acknowledge/")
    assert response.status_code in (401, 403)
    alert.refresh_from_db()
    assert alert.status == DriftAlert.Status.OPEN


def test_an_acknowledged_alert_keeps_being_updated(alert: DriftAlert, admin_user: Any) -> None:
    drift.drift_alert_acknowledge(alert=alert, user=admin_user)
    _hour(MONDAY + 2 * HOUR, prompt=3000.0)
    alert.refresh_from_db()
    assert alert.status == DriftAlert.Status.ACKNOWLEDGED
    assert alert.current_value == pytest.approx(3000) and alert.occurrences == 2
    assert DriftAlert.objects.count() == 1


def test_a_resolved_alert_cannot_be_acknowledged(alert: DriftAlert, api_client_for: Any) -> None:
    _hour(MONDAY + 2 * HOUR, prompt=1500.0)
    response = api_client_for(POLICY_ADMIN).post(f"/api/telemetry/alerts/{alert.pk}/acknowledge/")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid" and "status" in error["fields"]
