"""What-if previews run as jobs off the request: bounded per user and in total, rate-limited
for viewers, within a time limit; the API answers 202 with the job and serves its status.

Times are virtual: the services take ``now`` and a ``clock``; nothing here waits.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.core.jobs import JobStatus
from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.plans import whatif_jobs
from controlplane.plans.models import Plan, WhatIfJob
from controlplane.plans.whatif import WhatIfChange, WhatIfTimeLimit, result_from_dict
from controlplane.plans.whatif_jobs import (
    EXPIRY_GRACE_S,
    WhatIfRefused,
    whatif_drain,
    whatif_expire,
    whatif_job_for,
    whatif_run,
    whatif_submit,
)
from controlplane.policies.models import Tenant
from tests.controlplane.conftest import make_user
from tests.controlplane.plans_helpers import load_support_assistant, run_replan

pytestmark = pytest.mark.django_db

TENANT = "nordlicht-versicherung"
SURGE = {"tenant": TENANT, "traffic_factor": 60}


@pytest.fixture
def fleet() -> None:
    load_support_assistant()
    run = run_replan()
    assert run.plan is not None, run.error


class FakeChild:
    """Stands in for the bounded pool of child processes: records the kicks."""

    def __init__(self) -> None:
        self.kicks = 0

    def kick(self) -> None:
        self.kicks += 1


@pytest.fixture
def isolated(settings: Any, monkeypatch: pytest.MonkeyPatch) -> FakeChild:
    """The embedded default: solves go to child processes (recorded here, not started)."""
    settings.HEADROOM_ISOLATE_TASKS = True
    child = FakeChild()
    monkeypatch.setattr(whatif_jobs, "_POOL", child)
    return child


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _viewers() -> Any:
    for n in itertools.count():
        yield make_user(f"viewer-{n}", VIEWER)


def test_the_api_answers_202_with_the_queued_job_and_the_solve_runs_off_the_request(
    fleet: None, isolated: FakeChild, django_capture_on_commit_callbacks: Any
) -> None:
    viewer = make_user("v", VIEWER)
    with django_capture_on_commit_callbacks(execute=True):
        response = _client(viewer).post("/api/plans/what-ifs/", SURGE, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "queued" and body["result"] is None
    assert body["queue_position"] == 0
    assert response["Location"] == f"/api/plans/what-ifs/{body['id']}/"
    # The request handed the solve to the pool and solved nothing itself.
    assert isolated.kicks == 1
    assert WhatIfJob.objects.get().status == JobStatus.QUEUED
    # What a child process does: drain the queue.
    assert whatif_drain() == 1
    polled = _client(viewer).get(response["Location"])
    assert polled.status_code == 200
    job = polled.json()
    assert job["status"] == "succeeded" and job["error"] == ""
    assert job["requested_by"] == "v"
    assert job["result"]["newly_unserved"], job["result"]
    assert job["result"]["newly_unserved"][0]["tenant"] == TENANT
    assert job["result"]["cost_change"] == pytest.approx(
        job["result"]["cost_after"] - job["result"]["cost_before"]
    )
    # The preview stores no plan.
    assert Plan.objects.count() == 1


def test_without_isolation_the_task_drains_the_queue_in_process(
    fleet: None, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        job = whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    result = result_from_dict(job.result)
    assert result.change.tenant == TENANT and not result.newly_unserved


def test_a_bad_change_is_a_400_naming_the_field_and_queues_nothing(fleet: None) -> None:
    client = _client(make_user("v", VIEWER))
    for body, field in [
        ({"tenant": "nobody"}, "tenant"),
        ({"tenant": TENANT, "traffic_factor": 1000}, "traffic_factor"),
        ({"tenant": TENANT, "traffic_factor": "NaN"}, "traffic_factor"),
        ({"tenant": TENANT, "tier": "platinum"}, "tier"),
        ({"tenant": TENANT, "residency_regions": ["mars"]}, "residency_regions"),
        ({"tenant": TENANT, "speed": 2}, "speed"),
    ]:
        response = client.post("/api/plans/what-ifs/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert field in response.json()["error"]["fields"], (body, response.json())
    assert not WhatIfJob.objects.exists()


def test_a_tenant_key_cannot_ask(fleet: None) -> None:
    from tests.controlplane.tenant_key_support import issue_key, key_client

    client = key_client(issue_key(Tenant.objects.get(name=TENANT)))
    assert client.post("/api/plans/what-ifs/", SURGE, format="json").status_code == 403


def test_a_job_is_read_by_whoever_asked_and_by_policy_admins(
    fleet: None, isolated: FakeChild
) -> None:
    asker, other = make_user("asker", VIEWER), make_user("other", FINANCE)
    admin = make_user("admin", POLICY_ADMIN)
    job = whatif_submit(change=WhatIfChange(tenant=TENANT), user=asker)
    url = f"/api/plans/what-ifs/{job.pk}/"
    assert _client(asker).get(url).status_code == 200
    assert _client(admin).get(url).status_code == 200
    assert _client(other).get(url).status_code == 404
    assert APIClient().get(url).status_code == 401


def test_per_user_bound_refuses_the_next_with_429_and_retry_after(
    fleet: None, isolated: FakeChild, settings: Any
) -> None:
    settings.HEADROOM_WHATIF_PER_USER = 2
    analyst = make_user("analyst", FINANCE)
    client = _client(analyst)
    for _ in range(2):
        assert client.post("/api/plans/what-ifs/", SURGE, format="json").status_code == 202
    refused = client.post("/api/plans/what-ifs/", SURGE, format="json")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert "2 what-ifs queued or running" in refused.json()["error"]["message"]
    # Someone else is not held up by this user's bound.
    assert (
        _client(make_user("b", FINANCE))
        .post("/api/plans/what-ifs/", SURGE, format="json")
        .status_code
        == 202
    )
    # Once one of the analyst's is solved, the analyst may ask again.
    assert whatif_drain() == 3
    assert client.post("/api/plans/what-ifs/", SURGE, format="json").status_code == 202


def test_total_bounds_one_solve_at_a_time_in_order_and_a_full_queue_is_a_503(
    fleet: None, isolated: FakeChild, settings: Any
) -> None:
    settings.HEADROOM_WHATIF_WORKERS = 1
    settings.HEADROOM_WHATIF_QUEUE = 3
    viewers = _viewers()
    jobs = [whatif_submit(change=WhatIfChange(tenant=TENANT), user=next(viewers)) for _ in "abc"]
    refused = _client(next(viewers)).post("/api/plans/what-ifs/", SURGE, format="json")
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "busy"
    assert int(refused["Retry-After"]) >= 1
    # One claim at a time: while the first runs, no second is claimed.
    first = whatif_jobs._claim()
    assert first is not None and first.pk == jobs[0].pk
    assert whatif_jobs._claim() is None
    assert [whatif_jobs.queue_position(WhatIfJob.objects.get(pk=j.pk)) for j in jobs] == [
        None,
        0,
        1,
    ]
    whatif_run(job=first)
    # The running one finished: the rest are solved oldest first.
    assert whatif_drain() == 2
    finished = list(WhatIfJob.objects.order_by("started_at", "pk").values_list("pk", "status"))
    assert finished == [(j.pk, JobStatus.SUCCEEDED) for j in jobs]


def test_a_viewer_is_rate_limited_per_hour_with_retry_after(
    fleet: None, isolated: FakeChild, settings: Any
) -> None:
    settings.HEADROOM_WHATIF_VIEWER_PER_HOUR = 3
    settings.HEADROOM_WHATIF_PER_USER = 10
    viewer, analyst = make_user("viewer", VIEWER), make_user("analyst", FINANCE)
    start = timezone.now()
    for minute in range(3):
        whatif_submit(
            change=WhatIfChange(tenant=TENANT),
            user=viewer,
            now=start + timedelta(minutes=minute),
        )
    with pytest.raises(WhatIfRefused) as refused:
        whatif_submit(
            change=WhatIfChange(tenant=TENANT), user=viewer, now=start + timedelta(minutes=10)
        )
    assert not refused.value.busy
    # The oldest of the hour's three ages out 50 minutes later.
    assert refused.value.retry_after_s == 50 * 60
    assert "3 what-ifs an hour" in refused.value.message
    # A finance user is not rate-limited.
    for minute in range(4):
        whatif_submit(
            change=WhatIfChange(tenant=TENANT),
            user=analyst,
            now=start + timedelta(minutes=minute),
        )
    # An hour after the first, the viewer may ask again.
    whatif_submit(
        change=WhatIfChange(tenant=TENANT), user=viewer, now=start + timedelta(minutes=61)
    )


def test_the_api_answers_the_viewer_rate_with_429(
    fleet: None, isolated: FakeChild, settings: Any
) -> None:
    settings.HEADROOM_WHATIF_VIEWER_PER_HOUR = 1
    client = _client(make_user("viewer", VIEWER))
    assert client.post("/api/plans/what-ifs/", SURGE, format="json").status_code == 202
    whatif_drain()
    refused = client.post("/api/plans/what-ifs/", SURGE, format="json")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "throttled"
    assert 3500 <= int(refused["Retry-After"]) <= 3600


class SteppingClock:
    """A virtual clock that moves ``step_s`` each time it is read."""

    def __init__(self, step_s: float) -> None:
        self.now = 0.0
        self.step_s = step_s

    def __call__(self) -> float:
        self.now += self.step_s
        return self.now


def test_a_preview_past_its_time_limit_fails_with_a_clear_message(
    fleet: None, isolated: FakeChild, settings: Any
) -> None:
    settings.HEADROOM_WHATIF_TIME_LIMIT_S = 10
    job = whatif_submit(change=WhatIfChange(tenant=TENANT, traffic_factor=2), user=None)
    claimed = whatif_jobs._claim()
    assert claimed is not None
    # Each step seems to take 6 virtual seconds: the second check is past the limit.
    ended = whatif_run(job=claimed, clock=SteppingClock(6.0))
    assert ended.pk == job.pk
    assert ended.status == JobStatus.FAILED
    assert "ran past its time limit of 10 s" in ended.error
    assert ended.result is None and ended.finished_at is not None


def test_the_time_limit_alarm_stops_a_preview_inside_a_step(
    fleet: None, isolated: FakeChild, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.HEADROOM_WHATIF_TIME_LIMIT_S = 5

    def stuck(**kwargs: Any) -> Any:
        # What the alarm raises when the limit passes inside a step.
        raise WhatIfTimeLimit("Stopped: the preview ran past its time limit of 5 s.")

    monkeypatch.setattr(whatif_jobs, "whatif_preview", stuck)
    whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
    claimed = whatif_jobs._claim()
    assert claimed is not None
    ended = whatif_run(job=claimed)
    assert ended.status == JobStatus.FAILED
    assert ended.error == "Stopped: the preview ran past its time limit of 5 s."


def test_a_job_whose_process_died_is_failed_past_its_limit_when_read(
    fleet: None, isolated: FakeChild, settings: Any
) -> None:
    settings.HEADROOM_WHATIF_TIME_LIMIT_S = 60
    viewer = make_user("viewer", VIEWER)
    job = whatif_submit(change=WhatIfChange(tenant=TENANT), user=viewer)
    claimed = whatif_jobs._claim()
    assert claimed is not None and claimed.started_at is not None
    # Its process ends without a word; within the limit and grace it still reads running.
    assert whatif_expire(now=claimed.started_at + timedelta(seconds=60 + EXPIRY_GRACE_S)) == 0
    WhatIfJob.objects.filter(pk=job.pk).update(
        started_at=timezone.now() - timedelta(seconds=60 + EXPIRY_GRACE_S + 1)
    )
    read = whatif_job_for(user=viewer, job_id=job.pk)
    assert read is not None and read.status == JobStatus.FAILED
    assert "ran past its time limit of 60 s" in read.error
    # A finished job is not rewritten when its late process reports back.
    whatif_jobs._finish(read, status=JobStatus.SUCCEEDED, result={})
    read.refresh_from_db()
    assert read.status == JobStatus.FAILED


def test_a_job_left_queued_past_the_queue_timeout_is_failed(
    fleet: None, isolated: FakeChild, settings: Any
) -> None:
    settings.HEADROOM_WHATIF_QUEUE_TIMEOUT_S = 300
    job = whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
    assert whatif_expire(now=job.created_at + timedelta(seconds=299)) == 0
    assert whatif_expire(now=job.created_at + timedelta(seconds=301)) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "Not started within 300 s" in job.error


def test_a_submit_fails_overdue_jobs_first_and_counts_its_place_in_one_query(
    fleet: None,
    isolated: FakeChild,
    settings: Any,
    django_assert_max_num_queries: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """A burst of submits waits on each other's statements (they are serialized), so a
    submit takes its bounds, its queue position and the overdue check from one count; the
    expiry runs only when that count finds an overdue job."""
    settings.HEADROOM_WHATIF_QUEUE_TIMEOUT_S = 300
    viewers = _viewers()
    stale = whatif_submit(change=WhatIfChange(tenant=TENANT), user=next(viewers))
    WhatIfJob.objects.filter(pk=stale.pk).update(created_at=timezone.now() - timedelta(seconds=301))
    waiting = whatif_submit(change=WhatIfChange(tenant=TENANT), user=next(viewers))
    stale.refresh_from_db()
    assert stale.status == JobStatus.FAILED and "Not started within 300 s" in stale.error
    # The stale job was failed before the count: one queued job is ahead of the next.
    client = _client(next(viewers))
    # Authentication is forced here; a token adds its one lookup in production. Where the
    # database has row locks, the submits serialize on one (a statement more).
    limit = 6 + int(connection.features.has_select_for_update)
    with django_assert_max_num_queries(limit), django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/plans/what-ifs/", SURGE, format="json")
    assert response.status_code == 202, response.content
    assert response.json()["queue_position"] == 1
    job = WhatIfJob.objects.get(pk=response.json()["id"])
    assert whatif_jobs.queue_position(job) == 1  # counted afresh from the rows
    assert waiting.pk != job.pk  # the stale job was failed, the waiting one is ahead
    assert isolated.kicks == 1  # the one submit whose commit this test ran


def test_a_tenant_deleted_after_the_check_fails_the_job_naming_it(
    fleet: None, isolated: FakeChild
) -> None:
    job = whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
    WhatIfJob.objects.filter(pk=job.pk).update(change={**job.change, "tenant": "gone"})
    assert whatif_drain() == 1
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "No tenant named 'gone'" in job.error


def test_the_job_response_validates_against_the_schema(
    fleet: None, isolated: FakeChild, django_capture_on_commit_callbacks: Any
) -> None:
    from drf_spectacular.generators import SchemaGenerator

    from tests.controlplane.test_api_schema_truth import _validator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    operation = schema["paths"]["/api/plans/what-ifs/"]["post"]
    assert {"202", "400", "429", "503"} <= set(operation["responses"])
    assert "Retry-After" in operation["responses"]["429"]["headers"]
    client = _client(make_user("v", VIEWER))
    with django_capture_on_commit_callbacks(execute=True):
        queued = client.post("/api/plans/what-ifs/", SURGE, format="json")
    validator = _validator(schema, "/api/plans/what-ifs/", "post", "202")
    assert not list(validator.iter_errors(queued.json()))
    whatif_drain()
    done = client.get(queued["Location"]).json()
    assert done["status"] == "succeeded"
    validator = _validator(schema, "/api/plans/what-ifs/{id}/", "get", "200")
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(done)]
    assert not errors, errors


def test_a_burst_of_kicks_starts_one_drainer_across_web_processes(
    fleet: None, settings: Any
) -> None:
    settings.HEADROOM_WHATIF_WORKERS = 1
    # Nothing queued: no child.
    assert whatif_jobs._drainer_args() is None
    whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
    first = whatif_jobs._drainer_args()
    assert first is not None and first[:2] == [None, True]
    # Every other web process's kick finds the lease held: no second child.
    assert whatif_jobs._drainer_args() is None
    # The child drains, releases its lease, and the next kick may start one again.
    lease = whatif_jobs.Lease(name=first[2], holder=first[3])
    assert whatif_drain(lease=lease) == 1
    assert whatif_jobs._drainer_args() is None  # nothing queued
    whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
    assert whatif_jobs._drainer_args() is not None


def test_a_lapsed_lease_is_taken_over_and_a_dead_childs_lease_is_freed(
    fleet: None, settings: Any
) -> None:
    settings.HEADROOM_WHATIF_WORKERS = 1
    whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
    args = whatif_jobs._drainer_args()
    assert args is not None
    later = timezone.now() + timedelta(seconds=whatif_jobs.LEASE_START_S + 1)
    assert whatif_jobs._lease_take(now=later) is not None
    # The pool reports a child that died: its lease is freed (if it still holds it).
    taken = whatif_jobs._lease_take(now=later + timedelta(days=1))
    assert taken is not None
    whatif_jobs._drainer_ended([None, True, taken.name, taken.holder], "killed")
    assert whatif_jobs._drainer_args() is not None


def test_a_drainer_takes_its_lease_again_for_a_job_queued_while_it_finished(
    fleet: None, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.HEADROOM_WHATIF_WORKERS = 1
    whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
    args = whatif_jobs._drainer_args()
    assert args is not None
    lease = whatif_jobs.Lease(name=args[2], holder=args[3])
    real_claim = whatif_jobs._claim
    claims: list[int] = []

    def claim(**kwargs: Any) -> Any:
        job = real_claim(**kwargs)
        claims.append(0 if job is None else job.pk)
        if job is None and len(claims) == 2:
            # A submit lands after this drainer found nothing and before it let go.
            whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
        return job

    monkeypatch.setattr(whatif_jobs, "_claim", claim)
    assert whatif_drain(lease=lease) == 2
    assert not WhatIfJob.objects.filter(status=JobStatus.QUEUED).exists()
    # And it let go of its lease at the end.
    assert whatif_jobs._lease_take() is not None


def test_a_drainer_at_the_bound_stops_instead_of_spinning(fleet: None, settings: Any) -> None:
    settings.HEADROOM_WHATIF_WORKERS = 1
    # A job whose process died is still "running" (within its limit); another waits.
    stuck = whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
    assert whatif_jobs._claim() is not None
    waiting = whatif_submit(change=WhatIfChange(tenant=TENANT), user=None)
    lease = whatif_jobs._lease_take()
    assert lease is not None
    assert whatif_drain(lease=lease) == 0
    assert WhatIfJob.objects.get(pk=waiting.pk).status == JobStatus.QUEUED
    assert WhatIfJob.objects.get(pk=stuck.pk).status == JobStatus.RUNNING
    # Once the dead one is past its limit, the next drainer fails it and solves the other.
    WhatIfJob.objects.filter(pk=stuck.pk).update(
        started_at=timezone.now() - timedelta(seconds=60 + EXPIRY_GRACE_S + 1)
    )
    assert whatif_drain() == 1
    assert WhatIfJob.objects.get(pk=waiting.pk).status == JobStatus.SUCCEEDED
    assert WhatIfJob.objects.get(pk=stuck.pk).status == JobStatus.FAILED


def test_the_alarm_stops_a_step_in_the_main_thread_and_is_cleared_after() -> None:
    import signal
    import threading
    import time

    with pytest.raises(WhatIfTimeLimit, match=r"time limit of 0\.05 s"):
        with whatif_jobs._alarm(0.05):
            time.sleep(30)  # a step that would not end on its own
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    # Off the main thread (a web server's thread) there is no alarm to set: nothing happens.
    outcome: list[str] = []

    def elsewhere() -> None:
        with whatif_jobs._alarm(0.01):
            outcome.append("ran")

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(10)
    assert outcome == ["ran"]
