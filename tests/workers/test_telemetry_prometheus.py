"""End to end with the real Prometheus binary: it scrapes the fleet simulator (built from the
support-assistant scenario) every second; the pipeline pulls 5-second buckets, derives
profiles whose mean prompt matches the simulator's, and after the simulator's Friday-review
prompt growth raises drift alerts with their replica impact.

Both processes are started by the test on free loopback ports, with a temporary config and
data directory, and stopped at the end. Skipped when no ``prometheus`` binary is on PATH (CI
installs one).
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controlplane.plans.impact import pool_drift_alerts_price
from controlplane.policies.models import WorkloadProfile
from controlplane.scenarios.services import scenario_load
from controlplane.telemetry.derive import workload_profiles_derive
from controlplane.telemetry.models import DriftAlert, ObservedWorkload, RunStatus
from controlplane.telemetry.pull import telemetry_pull
from tests.workers.live_services import (
    PROMETHEUS,
    free_port,
    start_fleetsim,
    start_prometheus,
    stop,
    wait_for_scrapes,
    wait_for_url,
)
from workers.simulators.fleet import fleet_from_scenario

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "docs" / "scenarios" / "support-assistant.yaml"
BUCKET_S = 5
# A fleet 100 times the scenario's (same load per replica): a 20-second window then holds
# thousands of requests per tenant, so sample means sit within a few percent of the truth.
RATE_SCALE = 100
MEASURE_S = 3 * BUCKET_S

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary on PATH (CI installs it)"),
]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(fleet simulator URL, Prometheus URL), both serving."""
    sim_port, prom_port = free_port(), free_port()
    sim_url, prom_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{prom_port}"
    sim = start_fleetsim(port=sim_port, scenario=SCENARIO, rate_scale=RATE_SCALE)
    prom = start_prometheus(port=prom_port, target_port=sim_port, workdir=tmp_path)
    try:
        wait_for_url(sim_url + "/healthz", 30, sim)
        wait_for_url(prom_url + "/-/ready", 30, prom)
        wait_for_scrapes(prom_url, 30)
        yield sim_url, prom_url
    finally:
        stop(prom)
        stop(sim)


def _grid(moment: float) -> datetime:
    """The bucket boundary at or before a unix time."""
    return datetime.fromtimestamp(math.floor(moment / BUCKET_S) * BUCKET_S, tz=UTC)


def _pull_and_derive(since: float, until: float) -> None:
    """Pull and derive the whole buckets between two unix times."""
    start, end = _grid(since + BUCKET_S), _grid(until)
    pull = telemetry_pull(window_start=start, window_end=end)
    assert pull.status == RunStatus.SUCCEEDED, pull.error
    assert pull.samples_stored > 0
    assert pull.unknown_labels == [], pull.unknown_labels
    run = workload_profiles_derive(window_start=start, window_end=end)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.unknown_labels == [] and run.skipped == [], run.skipped
    # As the pipeline does after a derivation: each pool's drift priced by re-solving.
    pool_drift_alerts_price(derivation=run)


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


@pytest.mark.django_db
def test_prometheus_scrapes_the_fleet_and_the_pipeline_sees_the_friday_review(
    stack: tuple[str, str], settings: Any
) -> None:
    sim_url, prom_url = stack
    settings.HEADROOM_PROMETHEUS_URL = prom_url
    settings.HEADROOM_TELEMETRY_BUCKET_S = BUCKET_S
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 50
    scenario_load(path=SCENARIO)
    spec = fleet_from_scenario(SCENARIO)
    expected = {
        (s.tenant, s.region): math.fsum(c.share * c.prompt_mean for c in s.classes)
        for s in spec.streams
    }

    # Before: let Prometheus collect a few whole buckets (plus 2 s for the last scrapes).
    began = time.time()
    _sleep_until(_grid(began).timestamp() + BUCKET_S + MEASURE_S + 2)
    _pull_and_derive(began, time.time() - 2)
    profiles = WorkloadProfile.objects.filter(source=WorkloadProfile.Source.TELEMETRY)
    assert {(p.tenant.name, p.region.name) for p in profiles if p.region} == set(expected)
    precise = 0
    for observed in ObservedWorkload.objects.select_related("profile"):
        want = expected[(observed.tenant, observed.region)]
        assert observed.profile is not None and observed.profile.version == 1
        assert observed.profile.prompt_tokens_mean == pytest.approx(observed.prompt_tokens_mean)
        assert observed.prefix_cache_hit_rate == pytest.approx(0.35, abs=0.02)
        assert observed.ttft_p95_s is not None and observed.residence_s is not None
        # Prompt lengths are heavy-tailed (σ ≈ 2,100 tokens over the mix): a stream with
        # 2,000 requests has a standard error of about 3%, so 10% is a wide margin; the
        # smallest streams get a looser one.
        if observed.requests >= 2000:
            assert observed.prompt_tokens_mean == pytest.approx(want, rel=0.10), observed
            precise += 1
        else:
            assert observed.prompt_tokens_mean == pytest.approx(want, rel=0.25), observed
    assert precise >= 2

    # Friday review: retrieval top-8 adds 1,200 prompt tokens to every request.
    request = urllib.request.Request(
        sim_url + "/drift", data=json.dumps({"extra_prompt_tokens": 1200}).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
    drifted = time.time()
    _sleep_until(_grid(drifted).timestamp() + BUCKET_S + MEASURE_S + 2)
    _pull_and_derive(drifted, time.time() - 2)

    alerts = DriftAlert.objects.filter(kind=DriftAlert.Kind.PROMPT_MEAN)
    assert {(a.tenant.name, a.region.name) for a in alerts} == set(expected)
    for alert in alerts:
        want = expected[(alert.tenant.name, alert.region.name)]
        assert alert.current_value == pytest.approx(want + 1200, rel=0.15)
        assert alert.status == DriftAlert.Status.OPEN
        # Each pool's drift is priced: its tenants ask more of the plan, which buys more
        # replicas or, where the zones are full, leaves more unserved.
        pool = alert.pool_alert
        assert pool is not None and pool.pricing == "priced", alert.message
        assert sum(t["load_after"] - t["load_before"] for t in pool.tenants) > 0
        assert (pool.replica_delta or 0) > 0 or (pool.unserved_after or 0) > (
            pool.unserved_before or 0
        ), pool.message
        assert "of the pool's drift" in alert.message
        assert f" in {alert.region.name} (" in alert.message
    # Output lengths, cache hits and each tenant's share of its pool did not move.
    assert set(DriftAlert.objects.values_list("kind", flat=True)) == {DriftAlert.Kind.PROMPT_MEAN}
