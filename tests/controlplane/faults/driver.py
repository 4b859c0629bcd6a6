"""The fault cases run against the private PostgreSQL of ``test_private_services.py``, in a
process of their own (``python -m tests.controlplane.faults.driver CASE``) whose
``DATABASE_URL`` names that cluster. Each case restarts or stops the cluster itself at the
moment it needs, then prints what it found as one JSON line, which the test checks.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import django

django.setup()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.db import close_old_connections, connection  # noqa: E402
from django.db.models import Count  # noqa: E402
from django.test import Client  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from controlplane.core.outage import DATABASE_ERRORS  # noqa: E402
from controlplane.core.roles import VIEWER  # noqa: E402
from controlplane.pipeline.recovery import jobs_recover  # noqa: E402
from controlplane.plans import services  # noqa: E402
from controlplane.plans.models import Plan, PlannerLock  # noqa: E402
from controlplane.telemetry.models import TelemetryPull, TelemetrySample  # noqa: E402
from controlplane.telemetry.prometheus import RangeAnswer, RangeSeries  # noqa: E402
from controlplane.telemetry.pull import telemetry_pull  # noqa: E402
from tests.controlplane.faults.support import PrivatePostgres  # noqa: E402

BUCKET_S = 60
WINDOW_BUCKETS = 10


class FakePrometheus:
    """Answers every range query with one series (one value per step); a histogram's bucket
    query gets no series. ``on_first_query`` runs before the first answer."""

    def __init__(self, on_first_query: Callable[[], None] | None = None) -> None:
        self.on_first_query = on_first_query

    def query_range_answer(
        self, query: str, *, start: float, end: float, step_s: int
    ) -> RangeAnswer:
        if self.on_first_query is not None:
            hook, self.on_first_query = self.on_first_query, None
            hook()
        if "_bucket" in query:
            return RangeAnswer(series=[])
        steps = round((end - start) / step_s)
        points = tuple((start + i * step_s, 1.0) for i in range(steps + 1))
        labels = {"tenant": "acme", "model_name": "faults-model", "region": "faults-region"}
        return RangeAnswer(series=[RangeSeries(labels=labels, points=points)])


def _window() -> tuple[datetime, datetime]:
    end = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    return end - timedelta(seconds=BUCKET_S * WINDOW_BUCKETS), end


def _pull_row(pull_id: int) -> dict[str, Any]:
    row = TelemetryPull.objects.get(pk=pull_id)
    return {"status": row.status, "error": row.error, "samples_stored": row.samples_stored}


def case_pull(pg: PrivatePostgres) -> dict[str, Any]:
    """PostgreSQL restarted while the pull fetches; then the window pulled again, twice."""
    start, end = _window()
    before = set(TelemetryPull.objects.values_list("pk", flat=True))
    raised = ""
    try:
        telemetry_pull(window_start=start, window_end=end, client=FakePrometheus(pg.restart))
    except DATABASE_ERRORS as exc:
        raised = type(exc).__name__
    (first,) = set(TelemetryPull.objects.values_list("pk", flat=True)) - before
    stored_after_failure = TelemetrySample.objects.filter(
        bucket_start__gte=start, bucket_start__lt=end
    ).count()
    again = telemetry_pull(window_start=start, window_end=end, client=FakePrometheus())
    repeat = telemetry_pull(window_start=start, window_end=end, client=FakePrometheus())
    samples = TelemetrySample.objects.filter(bucket_start__gte=start, bucket_start__lt=end)
    duplicated = (
        samples.values("series", "bucket_start").annotate(n=Count("pk")).filter(n__gt=1).count()
    )
    return {
        "raised": raised,
        "failed_pull": _pull_row(first),
        "stored_after_failure": stored_after_failure,
        "second_pull": _pull_row(again.pk),
        "third_pull": _pull_row(repeat.pk),
        "samples": samples.count(),
        "series": samples.values("series").distinct().count(),
        "buckets": samples.values("bucket_start").distinct().count(),
        "duplicated": duplicated,
    }


def case_replan(pg: PrivatePostgres) -> dict[str, Any]:
    """PostgreSQL restarted during the solve of a re-plan; then a re-plan without a fault."""
    real_solve = services._solve
    state = {"restarted": False}

    def solve_across_a_restart(*args: Any, **kwargs: Any) -> Any:
        if not state["restarted"]:
            state["restarted"] = True
            pg.restart()
        return real_solve(*args, **kwargs)

    services._solve = solve_across_a_restart  # type: ignore[assignment]
    plans_before = Plan.objects.count()
    run = services.replan_request(trigger=Plan.Trigger.API, enqueue=False)
    failed = services.replan_execute(run_id=run.pk)
    assert failed is not None
    plans_after_failure = Plan.objects.count()
    services._solve = real_solve
    retry = services.replan_request(trigger=Plan.Trigger.API, enqueue=False)
    done = services.replan_execute(run_id=retry.pk)
    assert done is not None
    plans = [
        {"id": p.pk, "allocations": p.allocations.count(), "runs": p.runs.count()}
        for p in Plan.objects.order_by("pk")
    ]
    return {
        "restarted": state["restarted"],
        "failed_run": {"status": failed.status, "error": failed.error, "plan": failed.plan_id},
        "plans_before": plans_before,
        "plans_after_failure": plans_after_failure,
        "retried_run": {"status": done.status, "error": done.error, "plan": done.plan_id},
        "plans": plans,
        "lock_holders": list(
            PlannerLock.objects.exclude(holder="").values_list("holder", flat=True)
        ),
    }


def case_api(pg: PrivatePostgres) -> dict[str, Any]:
    """The API and /readyz while PostgreSQL is down, and after it is back."""
    user, _ = User.objects.get_or_create(username="faults-viewer")
    user.groups.add(Group.objects.get_or_create(name=VIEWER)[0])
    client = APIClient()
    client.force_authenticate(user=user)

    def answer() -> dict[str, Any]:
        # What a server does at the start of each request (the test client leaves it out):
        # a connection the outage broke is closed, and the request opens a new one.
        close_old_connections()
        api = client.get("/api/plans/")
        ready = Client().get("/readyz", HTTP_HOST="10.1.2.3")
        body = api.json()
        return {
            "status": api.status_code,
            "retry_after": api.get("Retry-After"),
            "code": body.get("error", {}).get("code") if isinstance(body, dict) else None,
            "readyz": ready.status_code,
            "readyz_retry_after": ready.get("Retry-After"),
        }

    pg.stop()
    try:
        down = answer()
    finally:
        pg.start()
    return {"down": down, "up": answer()}


def case_enqueue(pg: PrivatePostgres) -> dict[str, Any]:
    """Two re-plans requested through the broker (no worker is running yet)."""
    runs = [services.replan_request(trigger=Plan.Trigger.API) for _ in range(2)]
    return {"runs": [r.pk for r in runs]}


def case_recover(pg: PrivatePostgres) -> dict[str, Any]:
    """The recovery sweep as it would run five minutes and a second from now."""
    report = jobs_recover(now=datetime.now(tz=UTC) + timedelta(seconds=301))
    return report.summary()


CASES = {
    "pull": case_pull,
    "replan": case_replan,
    "api": case_api,
    "enqueue": case_enqueue,
    "recover": case_recover,
}


if __name__ == "__main__":
    result = CASES[sys.argv[1]](PrivatePostgres.from_env())
    connection.close()
    print(json.dumps(result, default=str))
