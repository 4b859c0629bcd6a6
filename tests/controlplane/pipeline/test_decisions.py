"""The decisions the scheduled path and ``run_pipeline`` share: which window to derive after a
pull, and whether a derivation re-plans."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.pipeline import services as pipeline
from controlplane.pipeline import tasks
from controlplane.telemetry.conf import telemetry_settings
from controlplane.telemetry.models import ProfileDerivation, RunStatus, TelemetryPull

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
T0 = datetime(2025, 3, 7, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _settings(settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_BUCKET_S = 300
    settings.HEADROOM_TELEMETRY_PROFILE_WINDOW_S = 3600
    settings.HEADROOM_TELEMETRY_DERIVE_AFTER_PULL = True


def _pulled(end: datetime, samples: int = 10) -> TelemetryPull:
    return TelemetryPull.objects.create(
        window_start=end - timedelta(minutes=5),
        window_end=end,
        bucket_s=300,
        status=RunStatus.SUCCEEDED,
        samples_stored=samples,
    )


def test_a_pull_derives_the_window_ending_at_it_once() -> None:
    first = _pulled(T0 + HOUR + timedelta(minutes=5))
    assert pipeline.after_pull(pull=first) == (
        T0 + timedelta(minutes=5),
        T0 + HOUR + timedelta(minutes=5),
    )
    ProfileDerivation.objects.create(
        window_start=T0 + timedelta(minutes=5),
        window_end=T0 + HOUR + timedelta(minutes=5),
        status=RunStatus.SUCCEEDED,
    )
    # The same pull delivered again (or the hourly derivation): nothing new to derive.
    assert pipeline.after_pull(pull=first) is None
    assert pipeline.due_derivation_window() is None
    later = _pulled(T0 + 2 * HOUR)
    assert pipeline.after_pull(pull=later) == (T0 + HOUR, T0 + 2 * HOUR)


def test_a_failed_derivation_is_tried_again_and_an_empty_pull_derives_nothing() -> None:
    pull = _pulled(T0 + HOUR)
    ProfileDerivation.objects.create(window_start=T0, window_end=T0 + HOUR, status=RunStatus.FAILED)
    assert pipeline.after_pull(pull=pull) == (T0, T0 + HOUR)
    assert pipeline.after_pull(pull=_pulled(T0 + HOUR, samples=0)) is None


def test_the_command_and_the_schedule_derive_the_same_window() -> None:
    # The command pulls up to the last whole hour; the schedule's window ending at that pull
    # is the command's last window.
    conf = telemetry_settings()
    end = pipeline.on_the_hour(T0 + HOUR + timedelta(minutes=37), bucket_s=conf.bucket_s)
    assert end == T0 + HOUR
    _pulled(end)
    assert pipeline.derivation_window(end=end, conf=conf) == pipeline.due_derivation_window()
    # The simulated drift may start inside the window: the command's last window starts there.
    split = T0 + timedelta(minutes=30)
    assert pipeline.derivation_window(end=end, conf=conf, not_before=split) == (split, end)


def test_the_hourly_derivation_skips_a_window_derived_before() -> None:
    _pulled(T0 + HOUR)
    ProfileDerivation.objects.create(
        window_start=T0, window_end=T0 + HOUR, status=RunStatus.SUCCEEDED
    )
    result = tasks.derive_profiles.apply().get()
    assert result == {"derivation": None, "status": "skipped", "replan_run": None}
    assert ProfileDerivation.objects.count() == 1
