"""Telemetry in the admin: every role with admin access views it, nobody edits what the
pipeline wrote, and policy-admin acknowledges drift alerts from the list."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.core.roles import POLICY_ADMIN, VIEWER
from controlplane.plans.impact import pool_drift_alerts_price
from controlplane.telemetry import derive
from controlplane.telemetry.models import (
    DriftAlert,
    ObservedWorkload,
    ProfileDerivation,
    TelemetryPull,
    TelemetrySeries,
)
from tests.controlplane.conftest import make_user
from tests.controlplane.telemetry_fakes import (
    make_fleet,
    make_plannable,
    steady,
    store,
    traffic_samples,
)

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
W = 300
MODELS = (TelemetryPull, ProfileDerivation, ObservedWorkload, TelemetrySeries, DriftAlert)


@pytest.fixture(autouse=True)
def _setup(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.HEADROOM_TELEMETRY_BUCKET_S = W
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 100
    make_plannable(make_fleet(("northwind", "eu-west")))
    TelemetryPull.objects.create(window_start=T0, window_end=T0 + timedelta(hours=2), bucket_s=W)
    for hour, prompt in ((0, 1500.0), (1, 2700.0)):
        start = T0 + timedelta(hours=hour)
        bucket = steady(requests_per_s=8, bucket_s=W, prompt_mean=prompt, output_mean=100)
        store(traffic_samples("northwind", "chat-70b", "eu-west", start, W, [bucket] * 12), W)
        run = derive.workload_profiles_derive(
            window_start=start, window_end=start + timedelta(hours=1)
        )
        # As the pipeline does after a derivation: the pool's drift priced by re-solving.
        pool_drift_alerts_price(derivation=run)


def _client(role: str) -> Client:
    client = Client()
    client.force_login(make_user(f"{role}-staff", role, staff=True))
    return client


def _url(model: type, view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


@pytest.mark.parametrize(
    ("role", "model"),
    [(VIEWER, m) for m in MODELS] + [(POLICY_ADMIN, DriftAlert), (POLICY_ADMIN, TelemetryPull)],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_roles_view_lists_and_records_but_add_nothing(role: str, model: type) -> None:
    client = _client(role)
    assert client.get(_url(model, "changelist")).status_code == 200
    record = model.objects.first()
    response = client.get(_url(model, "change", record.pk))
    assert response.status_code == 200
    assert b'name="_save"' not in response.content  # read-only: no save button
    assert client.get(_url(model, "add")).status_code == 403


def test_alert_list_shows_the_replica_impact() -> None:
    response = _client(POLICY_ADMIN).get(_url(DriftAlert, "changelist"))
    assert "+3 (12 → 15)" in response.content.decode()


def test_policy_admin_acknowledges_from_the_list() -> None:
    alert = DriftAlert.objects.get()
    response = _client(POLICY_ADMIN).post(
        _url(DriftAlert, "changelist"),
        {"action": "acknowledge", "_selected_action": [alert.pk]},
        follow=True,
    )
    assert "Acknowledged 1 alert(s)." in response.content.decode()
    alert.refresh_from_db()
    assert alert.status == DriftAlert.Status.ACKNOWLEDGED
    assert alert.acknowledged_by is not None
    assert alert.acknowledged_by.username == f"{POLICY_ADMIN}-staff"


def test_a_viewer_has_no_acknowledge_action() -> None:
    alert = DriftAlert.objects.get()
    client = _client(VIEWER)
    assert b"Acknowledge selected alerts" not in client.get(_url(DriftAlert, "changelist")).content
    client.post(
        _url(DriftAlert, "changelist"), {"action": "acknowledge", "_selected_action": [alert.pk]}
    )
    alert.refresh_from_db()
    assert alert.status == DriftAlert.Status.OPEN
