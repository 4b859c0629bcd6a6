"""Telemetry tasks: pull serving metrics from Prometheus, derive workload profiles.

Thin by design: the work is in ``controlplane.telemetry`` (``pull``, ``derive``, ``drift``).
Beat runs them on the schedule ``manage.py install_schedule`` creates (editable in the admin).

The pipeline: a pull that stored new samples enqueues a derivation (over the default profile
window, which ends at the newest pulled bucket) unless ``HEADROOM_TELEMETRY_DERIVE_AFTER_PULL``
is off; a derivation that raised drift alerts requests a re-plan (trigger ``drift``) unless
``HEADROOM_REPLAN_ON_DRIFT`` is off. The decisions are the services'.

A pull that meets Prometheus down, slow or answering garbage has already saved a failed
``TelemetryPull`` report and stored nothing; the task is then retried with exponential backoff
(about 30 s, 60 s, 120 s … capped at 15 minutes, with jitter), five times. A refused query
(``PrometheusQueryError``) is a configuration error and is not retried.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from controlplane.plans.impact import pool_drift_alerts_price
from controlplane.plans.services import replan_for_drift
from controlplane.telemetry.derive import derivation_follows_pull, workload_profiles_derive
from controlplane.telemetry.drift import drift_alerts_raised
from controlplane.telemetry.prometheus import PrometheusBadResponse, PrometheusUnavailable
from controlplane.telemetry.pull import telemetry_pull
from workers.celery import app

PULL_MAX_RETRIES = 5


def _moment(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    parsed = parse_datetime(value)
    if parsed is None or parsed.tzinfo is None:
        raise ValueError(f"{name} must be an ISO 8601 date-time with a time zone, got {value!r}")
    return parsed


@app.task(
    bind=True,
    name="headroom.telemetry.pull",
    autoretry_for=(PrometheusUnavailable, PrometheusBadResponse),
    retry_backoff=30,
    retry_backoff_max=900,
    retry_jitter=True,
    max_retries=PULL_MAX_RETRIES,
)
def pull(
    self: Any, window_start: str | None = None, window_end: str | None = None
) -> dict[str, Any]:
    """Pull a window (ISO 8601 bounds; by default the buckets since the last pull)."""
    report = telemetry_pull(
        window_start=_moment(window_start, "window_start"),
        window_end=_moment(window_end, "window_end"),
        attempt=int(self.request.retries) + 1,
        task_id=str(self.request.id or ""),
    )
    summary = report.summary()
    summary["derivation_enqueued"] = derivation_follows_pull(pull=report)
    if summary["derivation_enqueued"]:
        derive_profiles.delay()
    return summary


@app.task(name="headroom.telemetry.derive_profiles")
def derive_profiles(
    window_start: str | None = None, window_end: str | None = None
) -> dict[str, Any]:
    """Derive workload profiles and drift alerts (by default over the profile window), price
    each pool's drift by re-solving the placement; new drift alerts request a re-plan, whose
    run id the result gives (None: none requested)."""
    run = workload_profiles_derive(
        window_start=_moment(window_start, "window_start"),
        window_end=_moment(window_end, "window_end"),
    )
    priced = pool_drift_alerts_price(derivation=run)
    replan = replan_for_drift(alerts=drift_alerts_raised(derivation=run))
    return {
        **run.summary(),
        "pool_alerts_priced": [alert.pk for alert in priced],
        "replan_run": replan.pk if replan is not None else None,
    }
