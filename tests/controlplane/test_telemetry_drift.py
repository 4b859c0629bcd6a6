"""Drift alerts: the seeds' Friday review (mean prompt 1,500 → 2,700 tokens at a flat 8 req/s
needs 15 replicas instead of 12 at the 70% target), de-duplication, resolution, the other
kinds, and acknowledgement through the API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.fleet.models import WorkloadClass
from controlplane.policies.models import Tenant, WorkloadProfile
from controlplane.telemetry import services
from controlplane.telemetry.models import DriftAlert, ProfileDerivation
from tests.controlplane.telemetry_fakes import Fleet, make_fleet, steady, store, traffic_samples

pytestmark = pytest.mark.django_db

MONDAY = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
W = 300
HOUR = timedelta(hours=1)


@pytest.fixture
def fleet(settings: Any) -> Fleet:
    settings.HEADROOM_TELEMETRY_BUCKET_S = W
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 100
    settings.HEADROOM_DEFAULT_TARGET_UTILIZATION = 0.7
    return make_fleet(("northwind", "eu-west"), ("fabrikam", "eu-west"))


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
    return services.workload_profiles_derive(window_start=start, window_end=start + HOUR)


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
    # 8 × (1500/4000 + 100/160) = 8 replica-s/s → 12 at 0.7; 8 × 1.3 = 10.4 → 15.
    assert (alert.replicas_before, alert.replicas_after, alert.replica_delta) == (12, 15, 3)
    assert alert.shape == fleet.shape
    assert alert.target_utilization == pytest.approx(0.7)
    assert alert.message == (
        "mean prompt length 1,500 → 2,700 tokens (+80%) for northwind on chat-70b in eu-west: "
        "+3 replicas in eu-west at the 70% target (12 → 15 × chat-70b/gpu80x2)"
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
    # A new drift later is a new alert (the resolved one is history).
    _hour(MONDAY + 10 * HOUR, prompt=2700.0)
    assert DriftAlert.objects.filter(status=DriftAlert.Status.OPEN).count() == 1
    assert DriftAlert.objects.count() == 2


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
    # Each alert prices its own figure at the current rate. After: 8 × (1500 × 0.9/4000 +
    # 150/160) = 10.2 → 15. The cache alert's before keeps the new outputs: 8 × (1500 ×
    # 0.65/4000 + 150/160) = 9.45 → 14; the output alert's keeps the new hit rate:
    # 8 × (1500 × 0.9/4000 + 100/160) = 7.7 → 11.
    assert (cache.replicas_before, cache.replicas_after) == (14, 15)
    output = alerts[DriftAlert.Kind.OUTPUT_MEAN]
    assert (output.replicas_before, output.replicas_after) == (11, 15)
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
    services.workload_profiles_derive(window_start=MONDAY, window_end=MONDAY + HOUR)
    later = MONDAY + 2 * HOUR
    for tenant, rate in (("northwind", 6.0), ("fabrikam", 2.0)):
        bucket = steady(requests_per_s=rate, bucket_s=W, prompt_mean=2700, output_mean=100)
        store(traffic_samples(tenant, "chat-70b", "eu-west", later, W, [bucket] * 12), W)
    run = services.workload_profiles_derive(window_start=later, window_end=later + HOUR)
    assert run.alerts_raised == 2
    assert set(DriftAlert.objects.values_list("kind", flat=True)) == {DriftAlert.Kind.PROMPT_MEAN}
    # Each alert carries its own tenant's part against the pool as it is now (8 × 1.3 = 10.4
    # replica-s/s: 15 replicas): northwind back at 1,500 tokens leaves 6 + 2.6 = 8.6 (13),
    # fabrikam back leaves 7.8 + 2 = 9.8 (14).
    impact = {
        a.tenant.name: (a.replicas_before, a.replicas_after) for a in DriftAlert.objects.all()
    }
    assert impact == {"northwind": (13, 15), "fabrikam": (14, 15)}


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
    assert "replica impact unknown" in alert.message


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
    services.drift_alert_acknowledge(alert=alert, user=admin_user)
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
