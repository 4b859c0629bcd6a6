"""The scheduled links of the chain: pull telemetry, derive workload profiles.

Thin by design: the work is in ``controlplane.telemetry`` (``pull``, ``derive``), the decisions of what
follows in ``controlplane.pipeline.services``. Beat runs both on the schedule
``manage.py install_schedule`` creates (editable in the admin); the task names are those beat
entries name.

A pull that stored new samples enqueues a derivation of the window ``after_pull`` names (the
profile window ending at the newest pulled bucket, unless derived before); a derivation that
raised drift alerts requests a re-plan (``after_derivation``). The hourly derivation without
bounds derives that same window, and nothing when it was derived already.

A pull that meets Prometheus down, slow or answering garbage has already saved a failed
``TelemetryPull`` report and stored nothing; the task is then retried with exponential backoff
(about 30 s, 60 s, 120 s … capped at 15 minutes, with jitter), five times. A refused query
(``PrometheusQueryError``) is a configuration error and is not retried. A pull that met the
database down (restarted under it) is retried the same way; it stored nothing (one
transaction) and its report says why it failed, when the database came back in time to write
it (``controlplane.core.outage.on_fresh_connection``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime

from controlplane.celery import app
from controlplane.core.outage import DATABASE_ERRORS
from controlplane.core.schedule import beat_tick_claim
from controlplane.core.tasks import task_send
from controlplane.pipeline import services as pipeline
from controlplane.pipeline.recovery import RECOVER_TASK, jobs_recover
from controlplane.telemetry.derive import workload_profiles_derive
from controlplane.telemetry.prometheus import PrometheusBadResponse, PrometheusUnavailable
from controlplane.telemetry.pull import DERIVE_TASK, PULL_TASK, telemetry_pull

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
    name=PULL_TASK,
    autoretry_for=(PrometheusUnavailable, PrometheusBadResponse, *DATABASE_ERRORS),
    retry_backoff=30,
    retry_backoff_max=settings.HEADROOM_MAX_RETRY_COUNTDOWN_S,
    retry_jitter=True,
    max_retries=PULL_MAX_RETRIES,
)
def pull(
    self: Any, window_start: str | None = None, window_end: str | None = None
) -> dict[str, Any]:
    """Pull a window (ISO 8601 bounds; by default the buckets since the last pull). A repeat
    of a beat tick already taken pulls nothing (``beat_tick_claim``)."""
    if self.request.retries == 0 and not beat_tick_claim(self.request):
        return {"pull": None, "status": "duplicate tick", "derivation_enqueued": False}
    report = telemetry_pull(
        window_start=_moment(window_start, "window_start"),
        window_end=_moment(window_end, "window_end"),
        attempt=int(self.request.retries) + 1,
        task_id=str(self.request.id or ""),
    )
    summary = report.summary()
    window = pipeline.after_pull(pull=report)
    summary["derivation_enqueued"] = window is not None
    if window is not None:
        task_send(DERIVE_TASK, window[0].isoformat(), window[1].isoformat())
    return summary


@app.task(bind=True, name=DERIVE_TASK)
def derive_profiles(
    self: Any, window_start: str | None = None, window_end: str | None = None
) -> dict[str, Any]:
    """Derive workload profiles and drift alerts over [window_start, window_end) (by default
    the window ``after_pull`` would name; nothing when that was derived before). Each pool's
    drift is priced; new drift alerts request a re-plan, whose run id the result gives (None:
    none requested). A repeat of a beat tick already taken derives nothing."""
    if not beat_tick_claim(self.request):
        return {"derivation": None, "status": "duplicate tick", "replan_run": None}
    start, end = _moment(window_start, "window_start"), _moment(window_end, "window_end")
    if start is None and end is None:
        due = pipeline.due_derivation_window()
        if due is None:
            return {"derivation": None, "status": "skipped", "replan_run": None}
        start, end = due
    run = workload_profiles_derive(window_start=start, window_end=end)
    replan = pipeline.after_derivation(derivation=run)
    return {**run.summary(), "replan_run": replan.pk if replan is not None else None}


@app.task(name=RECOVER_TASK)
def recover_jobs() -> dict[str, Any]:
    """The recovery sweep (``controlplane.pipeline.recovery``): re-send the tasks of jobs
    queued for long, fail jobs queued or running past their limits."""
    return jobs_recover().summary()
