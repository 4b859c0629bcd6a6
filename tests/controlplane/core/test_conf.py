"""The one settings reader: the same rules for every app's settings."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from controlplane.benchmarks.conf import benchmark_settings
from controlplane.core import conf
from controlplane.emission.conf import emission_settings
from controlplane.plans.conf import replan_settings
from controlplane.telemetry.conf import telemetry_settings


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "1e999"])
def test_every_app_refuses_non_finite_numbers(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    for name, read in [
        ("HEADROOM_BENCHMARK_TIMEOUT_S", benchmark_settings),
        ("HEADROOM_EMISSION_CLAIM_S", emission_settings),
        ("HEADROOM_REPLAN_TIME_LIMIT_S", replan_settings),
        ("HEADROOM_PROMETHEUS_TIMEOUT_S", telemetry_settings),
    ]:
        monkeypatch.setenv(name, raw)
        with pytest.raises(ImproperlyConfigured, match=f"{name} must be a finite number"):
            read()
        monkeypatch.delenv(name)


def test_whole_numbers_bounds_and_blank_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_EMISSION_BATCH", "2.5")
    with pytest.raises(ImproperlyConfigured, match="HEADROOM_EMISSION_BATCH must be a whole"):
        emission_settings()
    monkeypatch.setenv("HEADROOM_EMISSION_BATCH", "0")
    with pytest.raises(ImproperlyConfigured, match="must be at least 1, got '0'"):
        emission_settings()
    monkeypatch.setenv("HEADROOM_EMISSION_BATCH", "  ")
    assert emission_settings().batch == 100
    monkeypatch.setenv("HEADROOM_TELEMETRY_LAG_S", "-1")
    with pytest.raises(ImproperlyConfigured, match="HEADROOM_TELEMETRY_LAG_S must be zero or more"):
        telemetry_settings()


def test_a_django_setting_wins_over_the_environment_and_is_checked(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    monkeypatch.setenv("HEADROOM_REPLAN_SOLVER_WORKERS", "8")
    settings.HEADROOM_REPLAN_SOLVER_WORKERS = 3
    assert replan_settings().solver_workers == 3
    settings.HEADROOM_REPLAN_SOLVER_WORKERS = True
    with pytest.raises(ImproperlyConfigured, match="must be a number, got True"):
        replan_settings()


def test_booleans_and_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_X", "")
    assert conf.envbool("HEADROOM_X", True) is False  # DEBUG= turns debugging off
    monkeypatch.setenv("HEADROOM_X", " Yes ")
    assert conf.envbool("HEADROOM_X", False) is True
    monkeypatch.setenv("HEADROOM_BENCHMARK_DEVICE", "tpu")
    with pytest.raises(ImproperlyConfigured, match="must be one of gpu, cpu, got 'tpu'"):
        benchmark_settings()
    monkeypatch.setenv("HEADROOM_BENCHMARK_DEVICE", " CPU ")
    assert benchmark_settings().device == "cpu"
