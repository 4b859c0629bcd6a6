"""End to end, the whole job pipeline on real services: a real Prometheus scrapes the fleet
simulator every second; a real Celery worker on Redis pulls telemetry, derives profiles, sees the
Friday review's prompt growth as drift, re-plans and emits the new plan to a webhook receiver;
the test asserts on what the receiver got and on what the database holds.

Runs only with ``HEADROOM_E2E=1``, a Redis at 127.0.0.1:6379 (database 13, emptied) and a
``prometheus`` binary on PATH (CI has all three). Everything but the receiver runs in
subprocesses on a SQLite file of its own: migrate, load the support-assistant scenario, add the
webhook sink, start the simulator (100 times the scenario's fleet, 5-second buckets, as in
``test_telemetry_prometheus``), Prometheus and a worker. The test then drives the worker only
through the broker:

1. baseline: a pull (which derives profiles) and a re-plan; the receiver gets plan v1;
2. ``POST /drift`` (1,200 more prompt tokens per request), three fresh buckets, one pull: the
   worker derives, raises prompt-growth alerts, re-plans (trigger ``drift``), activates and
   emits plan v2, with more GPUs in both regions.

About a minute and a half.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.workers.live_services import (
    PROMETHEUS,
    free_port,
    manage,
    redis_up,
    start_fleetsim,
    start_prometheus,
    stop,
    wait_for_scrapes,
    wait_for_url,
)
from workers.simulators.webhook_receiver import Delivery, WebhookReceiver

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "docs" / "scenarios" / "support-assistant.yaml"
BROKER = "redis://127.0.0.1:6379/13"
SECRET = "e2e-pipeline-webhook-secret-0123456789"
BUCKET_S = 5
# The simulator serves 100 times the scenario's fleet (enough requests per 5-second bucket for
# sample means within a few percent); the test gives the zones 100 times the GPUs to match.
RATE_SCALE = 100
MEASURE_S = 3 * BUCKET_S
REGIONS = {"eu-west", "us-east"}

T = TypeVar("T")


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("HEADROOM_E2E") != "1", reason="set HEADROOM_E2E=1"),
    pytest.mark.skipif(not redis_up(), reason="no Redis at 127.0.0.1:6379"),
    pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary on PATH (CI installs it)"),
]


@dataclass
class Stack:
    sim_url: str
    prom_url: str
    database: Path
    env: dict[str, str]
    worker_log: Path
    receiver: WebhookReceiver


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    import redis

    redis.Redis.from_url(BROKER).flushdb()
    sim_port, prom_port = free_port(), free_port()
    sim_url, prom_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{prom_port}"
    database = tmp_path / "e2e.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "CELERY_"))}
    env.update(
        DATABASE_URL=f"sqlite:///{database}",
        HEADROOM_VAR_DIR=str(tmp_path),
        CELERY_BROKER_URL=BROKER,
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        LOG_LEVEL="INFO",
        HEADROOM_PROMETHEUS_URL=prom_url,
        HEADROOM_TELEMETRY_BUCKET_S=str(BUCKET_S),
        HEADROOM_TELEMETRY_MIN_REQUESTS="50",
        # The derivation after a pull covers the pulled buckets and no earlier ones.
        HEADROOM_TELEMETRY_PROFILE_WINDOW_S=str(MEASURE_S),
        HEADROOM_TELEMETRY_DERIVE_AFTER_PULL="true",
        HEADROOM_REPLAN_ON_DRIFT="true",
        HEADROOM_REPLAN_TIME_LIMIT_S="5",
    )
    processes: list[subprocess.Popen[bytes]] = []
    worker_log = tmp_path / "worker.log"
    with WebhookReceiver(secret=SECRET) as receiver:
        try:
            manage(env, "migrate", "--noinput", "--verbosity", "0")
            manage(env, "load_scenario", str(SCENARIO))
            manage(env, "shell", "-c", _setup_code(receiver.url))
            processes.append(
                start_fleetsim(port=sim_port, scenario=SCENARIO, rate_scale=RATE_SCALE)
            )
            processes.append(
                start_prometheus(port=prom_port, target_port=sim_port, workdir=tmp_path)
            )
            with worker_log.open("wb") as out:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "celery", "-A", "workers", "worker",
                         "--pool", "solo", "--without-heartbeat", "--without-gossip",
                         "--without-mingle", "--loglevel", "INFO"],
                        cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                    )
                )  # fmt: skip
            wait_for_url(sim_url + "/healthz", 30, processes[0])
            wait_for_url(prom_url + "/-/ready", 30, processes[1])
            wait_for_scrapes(prom_url, 30)
            yield Stack(sim_url, prom_url, database, env, worker_log, receiver)
        finally:
            for process in reversed(processes):
                stop(process)


def _setup_code(url: str) -> str:
    """Zones with the GPUs of a fleet RATE_SCALE times the scenario's, and the webhook sink."""
    return (
        "from django.db.models import F\n"
        "from controlplane.fleet.models import ZoneInventory\n"
        "from controlplane.emission.models import AllocationSink\n"
        f"ZoneInventory.objects.update(gpus_available=F('gpus_available') * {RATE_SCALE})\n"
        f"sink = AllocationSink(kind='webhook', name='e2e-receiver', url={url!r}, "
        f"secret={SECRET!r}, timeout_s=10)\n"
        "sink.full_clean()\n"
        "sink.save()\n"
    )


# -- driving and observing --------------------------------------------------------------------


def _send(name: str, **kwargs: Any) -> None:
    """Send a task by name through the broker, as beat or another service would."""
    from celery import Celery

    sender = Celery("e2e-sender", broker=BROKER)
    try:
        sender.send_task(name, kwargs=kwargs)
    finally:
        sender.close()


def _query(database: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(database, timeout=30) as db:
        return db.execute(sql, args).fetchall()


def _log(stack: Stack) -> str:
    text = stack.worker_log.read_text(errors="replace") if stack.worker_log.exists() else ""
    return "\n--- worker log (last 15,000 characters) ---\n" + text[-15000:]


def _until(stack: Stack, what: str, check: Callable[[], T | None], timeout_s: float) -> T:
    """Poll ``check`` until it gives something other than None; fail with the worker's log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen within {timeout_s} s" + _log(stack))


def _grid(moment: float) -> datetime:
    return datetime.fromtimestamp(math.floor(moment / BUCKET_S) * BUCKET_S, tz=UTC)


def _pull_fresh_buckets(stack: Stack, since: float) -> None:
    """Wait for MEASURE_S of whole buckets after ``since`` (plus 2 s for the last scrapes) and
    send the pull task for exactly those buckets."""
    start = _grid(since + BUCKET_S)
    end_at = start.timestamp() + MEASURE_S
    time.sleep(max(0.0, end_at + 2 - time.time()))
    end = _grid(end_at)
    _send("headroom.telemetry.pull", window_start=start.isoformat(), window_end=end.isoformat())


def _derivations(stack: Stack) -> list[tuple[Any, ...]]:
    return _query(
        stack.database,
        "SELECT id, status, error, profiles_created, alerts_raised FROM telemetry_profilederivation"
        " ORDER BY id",
    )


def _finished_derivation(stack: Stack) -> tuple[Any, ...] | None:
    rows = [row for row in _derivations(stack) if row[1] != "running"]
    return rows[0] if rows else None


def _deliveries(receiver: WebhookReceiver, version: int) -> dict[str, Delivery] | None:
    """The plan version's delivery per region, once every region has one."""
    found = {d.region: d for d in receiver.deliveries.values() if d.plan_version == version}
    return found if set(found) == REGIONS else None


def _drift_plan(database: Path) -> tuple[int, str] | None:
    rows = _query(
        database, "SELECT version, state FROM plans_plan WHERE trigger = 'drift' ORDER BY version"
    )
    return (int(rows[-1][0]), str(rows[-1][1])) if rows else None


def _gpus(delivery: Delivery) -> int:
    return int(delivery.document["total_gpus"])


def test_prompt_growth_flows_from_prometheus_to_a_re_plan_and_the_webhook(stack: Stack) -> None:
    receiver, database = stack.receiver, stack.database

    # 1. Baseline: a pull, which derives the first telemetry profiles (no drift: no re-plan).
    _pull_fresh_buckets(stack, time.time())
    derivation = _until(stack, "the baseline derivation", lambda: _finished_derivation(stack), 60)
    assert derivation[1] == "succeeded", f"derivation failed: {derivation[2]}" + _log(stack)
    assert derivation[3] > 0 and derivation[4] == 0, derivation
    assert _query(database, "SELECT count(*) FROM plans_replanrun") == [(0,)]
    _send("headroom.plans.replan_scheduled")
    first = _until(stack, "delivery of plan v1", lambda: _deliveries(receiver, 1), 90)

    # 2. The Friday review: 1,200 more prompt tokens on every request, then one pull.
    request = urllib.request.Request(
        stack.sim_url + "/drift",
        data=json.dumps({"extra_prompt_tokens": 1200}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
    _pull_fresh_buckets(stack, time.time())
    version, state = _until(stack, "a drift re-plan", lambda: _drift_plan(database), 90)
    assert (version, state) == (2, "active"), _log(stack)
    second = _until(stack, "delivery of plan v2", lambda: _deliveries(receiver, 2), 60)

    # What the receiver got: every request signed correctly, one delivery per plan and region
    # under its own idempotency key, and more GPUs in both drifted pools.
    requests = receiver.requests
    assert requests and all(r.status == 200 for r in requests), requests
    keys = [d.idempotency_key for d in receiver.deliveries.values()]
    assert len(keys) == len(set(keys)) == 2 * len(REGIONS)
    for region in REGIONS:
        assert first[region].idempotency_key != second[region].idempotency_key
        assert f"plan-v2:{region}:" in second[region].idempotency_key
        assert _gpus(second[region]) > _gpus(first[region]), (
            region,
            first[region].document["allocations"],
            second[region].document["allocations"],
        )
        assert receiver.latest[region].plan_version == 2

    # What the database holds: prompt-growth alerts for every stream's pool, the drift run
    # naming them, and plan v2 triggered by drift with that reason in its explanation.
    alerts = _query(
        database,
        "SELECT a.id, t.name, r.name FROM telemetry_driftalert a"
        " JOIN policies_tenant t ON t.id = a.tenant_id JOIN fleet_region r ON r.id = a.region_id"
        " WHERE a.kind = 'prompt-mean' AND a.status = 'open'",
    )
    assert {row[2] for row in alerts} == REGIONS, alerts
    runs = _query(
        database, "SELECT status, reason, plan_id FROM plans_replanrun WHERE trigger = 'drift'"
    )
    assert len(runs) == 1 and runs[0][0] == "succeeded", runs
    for alert_id, _, _ in alerts:
        assert f"#{alert_id}" in runs[0][1]
    explanation = json.loads(
        _query(database, "SELECT explanation FROM plans_plan WHERE version = 2")[0][0]
    )
    assert explanation["trigger"].startswith("Trigger: drift alert. Drift alerts #")
