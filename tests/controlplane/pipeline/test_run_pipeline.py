"""``manage.py run_pipeline``: the whole job on the embedded defaults, against the fleet
simulator started in-process. Hourly buckets keep it quick: two weeks of history are then
about 250,000 samples."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from controlplane.emission.models import AllocationSink, OutboxEntry
from controlplane.pipeline import services as pipeline_services
from controlplane.plans.models import Plan
from controlplane.policies.models import WorkloadProfile
from controlplane.telemetry.models import (
    DriftAlert,
    PoolDriftAlert,
    ProfileDerivation,
    RunStatus,
    TelemetryPull,
)
from controlplane.telemetry.selectors import unpulled_windows
from tests.controlplane.plans_helpers import load_support_assistant

pytestmark = pytest.mark.django_db

REGIONS = ("eu-west", "us-east")


@pytest.fixture
def quick(settings: Any, tmp_path: Path) -> Path:
    settings.HEADROOM_TELEMETRY_BUCKET_S = 3600
    settings.HEADROOM_EMISSION_ROOT = str(tmp_path)
    settings.HEADROOM_PROMETHEUS_RETRIES = 0
    load_support_assistant()
    return tmp_path


def _run(*args: str) -> str:
    out = StringIO()
    call_command("run_pipeline", *args, stdout=out)
    return out.getvalue()


def test_the_pipeline_pulls_derives_replans_emits_and_prints_the_allocations(
    quick: Path,
) -> None:
    output = _run()

    # Drift: the Friday review's prompt growth for every tenant and region, priced.
    alerts = DriftAlert.objects.all()
    assert alerts.count() == 7
    for alert in alerts:
        assert alert.kind == DriftAlert.Kind.PROMPT_MEAN and alert.status == DriftAlert.Status.OPEN
        assert alert.current_value - alert.baseline_value == pytest.approx(1200, rel=0.1)
        assert alert.replicas_before is not None and alert.replicas_after is not None
        assert f"#{alert.pk} [open] mean prompt length" in output
        assert alert.pool_alert is not None and alert.pool_share is not None
    # One priced drift per pool, printed with the re-plan's cost change.
    pools = PoolDriftAlert.objects.all()
    assert {(p.region.name, p.pricing) for p in pools} == {
        ("eu-west", "priced"),
        ("us-east", "priced"),
    }
    for pool in pools:
        assert f"#{pool.pk} [priced] drift of chat-70b in {pool.region.name}" in output
        # Both pools' drifts are reverted together for "before", so each alert's dollars are
        # the whole re-plan's change (the plan below costs what they say "after").
        assert pool.drift_pools == 2
        assert "the re-plan (with the drift of 2 pools) goes from" in pool.message
    assert ProfileDerivation.objects.count() == 2
    assert WorkloadProfile.objects.filter(source=WorkloadProfile.Source.TELEMETRY).count() == 14

    # The plan: sized from the forecast of the pulled history, active, triggered by the drift.
    plan = Plan.objects.get()
    assert plan.state == Plan.State.ACTIVE and plan.trigger == Plan.Trigger.DRIFT
    assert plan.forecast_band["sources"] == {"declared": 0, "telemetry": 7}
    for demand in plan.problem["demands"]:
        assert demand["forecast"]["source"] == "telemetry"
        assert demand["forecast"]["history_hours"] >= 336
    assert "demands sized from telemetry 7, declared 0" in output
    assert {row.region for row in plan.allocations.all()} == set(REGIONS)
    for pool in pools:
        assert pool.cost_per_hour_after == pytest.approx(plan.cost_per_hour)
        assert pool.gpus_after == sum(
            r.replicas * r.gpus_per_replica for r in plan.allocations.all()
        )
        assert f"to {pool.gpus_after} GPUs at ${plan.cost_per_hour:,.2f}/h" in pool.message

    # The region allocations, as `replan` prints them: per region GPUs and cost, then zone ×
    # shape × replicas.
    for region in REGIONS:
        rows = plan.allocations.filter(region=region)
        cost = sum(r.cost_per_hour for r in rows)
        gpus = sum(r.replicas * r.gpus_per_replica for r in rows)
        assert f"{region}: {gpus} GPUs, {cost:.2f} $/h" in output
        for row in rows:
            assert f"  {row.zone} × {row.shape} × {row.replicas} " in output

    # Emitted to a files sink created for it, one document per region.
    sink = AllocationSink.objects.get()
    assert (sink.kind, sink.name) == (AllocationSink.Kind.FILES, "local-files")
    for region in REGIONS:
        document = json.loads((quick / "allocations" / f"{region}.json").read_text())
        assert document["plan"]["version"] == plan.version
    assert set(OutboxEntry.objects.values_list("status", flat=True)) == {"delivered"}
    assert re.search(r"Pulled .*: \d+ windows, [\d,]+ samples stored", output)


def test_running_it_again_changes_nothing(quick: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both runs lay out their windows from one moment, half past the last hour: a second run
    # that began after the hour turned would rightly find a new hour to pull.
    moment = math.floor(time.time() / 3600) * 3600 - 1800.0
    monkeypatch.setattr(pipeline_services, "wall_clock", lambda: moment)
    _run()
    pulls, samples = TelemetryPull.objects.count(), WorkloadProfile.objects.count()

    again = _run()

    assert "Pulled: nothing new" in again
    assert "derived before" in again
    assert "inputs unchanged since plan v1; no new plan" in again
    assert TelemetryPull.objects.count() == pulls
    assert WorkloadProfile.objects.count() == samples
    assert ProfileDerivation.objects.count() == 2
    assert DriftAlert.objects.count() == 7 and Plan.objects.count() == 1
    assert OutboxEntry.objects.count() == 2 and AllocationSink.objects.count() == 1
    assert "us-east:" in again and "eu-west:" in again


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--drift-hours-ago", "0"], "--drift-hours-ago must be a positive number of hours"),
        (["--history-days", "-3"], "--history-days must be a positive number of days"),
        (["--history-days", "1", "--drift-hours-ago", "30"], "must lie within --history-days"),
        (["--weekly-growth", "-1"], "--weekly-growth must be a number above -1"),
        (["--timeout", "-5"], "--timeout must be zero or more seconds"),
        (["--prometheus-url", "ftp://example"], "--prometheus-url must be an http(s) URL"),
        (["--scenario", "no/such/file.yaml"], "--scenario:"),
    ],
)
def test_bad_options_exit_with_status_2(quick: Path, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=re.escape(message)) as error:
        _run(*args)
    assert error.value.returncode == 2
    assert not Plan.objects.exists()


def test_a_bucket_width_the_simulator_cannot_serve_exits_with_status_2(
    quick: Path, settings: Any
) -> None:
    settings.HEADROOM_TELEMETRY_BUCKET_S = 7
    with pytest.raises(CommandError, match="divides a day") as error:
        _run()
    assert error.value.returncode == 2


def test_an_unreachable_prometheus_fails_the_run_with_status_1(quick: Path) -> None:
    with pytest.raises(
        CommandError, match=re.escape("failed: Prometheus at http://127.0.0.1:9")
    ) as error:
        _run("--prometheus-url", "http://127.0.0.1:9")
    assert error.value.returncode == 1
    assert not Plan.objects.exists()


def test_only_what_no_successful_pull_covered_is_pulled_again() -> None:
    t0 = datetime(2026, 3, 2, tzinfo=UTC)

    def pulled(lo: int, hi: int, status: str = RunStatus.SUCCEEDED, bucket_s: int = 300) -> None:
        TelemetryPull.objects.create(
            window_start=t0 + timedelta(hours=lo),
            window_end=t0 + timedelta(hours=hi),
            bucket_s=bucket_s,
            status=status,
        )

    pulled(-2, 1)  # reaches before the start
    pulled(2, 4)
    pulled(3, 5)  # overlaps the one before
    pulled(5, 6, status=RunStatus.FAILED)
    pulled(6, 7, bucket_s=60)  # another width
    pulled(8, 12)  # reaches past the end

    gaps = unpulled_windows(bucket_s=300, start=t0, end=t0 + timedelta(hours=10))

    hours = [((lo - t0) / timedelta(hours=1), (hi - t0) / timedelta(hours=1)) for lo, hi in gaps]
    assert hours == [(1, 2), (5, 8)]
    assert unpulled_windows(bucket_s=300, start=t0, end=t0 + timedelta(hours=1)) == []
