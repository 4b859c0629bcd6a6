"""The what-if page through Django's test client: submit, wait with progress (the page polls
the job), then the preview; the page's refusals carry the API's statuses."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.plans import whatif_jobs
from controlplane.plans.models import WhatIfJob
from controlplane.plans.whatif_jobs import whatif_drain
from tests.controlplane.conftest import make_user
from tests.controlplane.plans_helpers import load_support_assistant, run_replan

pytestmark = pytest.mark.django_db

SURGE = {
    "tenant": "nordlicht-versicherung",
    "traffic_factor": "60",
    "prompt_tokens_delta": "0",
    "do": "preview",
}


class FakeChild:
    def __init__(self) -> None:
        self.kicks = 0

    def kick(self) -> None:
        self.kicks += 1


@pytest.fixture
def pool(settings: Any, monkeypatch: pytest.MonkeyPatch) -> FakeChild:
    load_support_assistant()
    assert run_replan().plan is not None
    settings.HEADROOM_ISOLATE_TASKS = True
    child = FakeChild()
    monkeypatch.setattr(whatif_jobs, "_POOL", child)
    return child


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_submit_then_poll_then_the_preview(
    pool: FakeChild, django_capture_on_commit_callbacks: Any
) -> None:
    client = _client(make_user("viewer", VIEWER))
    with django_capture_on_commit_callbacks(execute=True):
        submitted = client.post("/what-if/", SURGE)
    assert submitted.status_code == 303
    job = WhatIfJob.objects.get()
    assert submitted["Location"] == f"/what-if/?job={job.pk}"
    assert pool.kicks == 1 and job.status == WhatIfJob.Status.QUEUED

    waiting = client.get(submitted["Location"]).content.decode()
    assert f'data-poll="/what-if/jobs/{job.pk}/"' in waiting
    assert "Queued: next to be solved." in waiting
    assert '<meta http-equiv="refresh" content="2">' in waiting  # without JavaScript
    # The form keeps the change asked for.
    assert 'value="60.0"' in waiting or 'value="60"' in waiting
    assert "Demand would become unserved" not in waiting

    progress = client.get(f"/what-if/jobs/{job.pk}/").json()
    assert progress == {
        "id": job.pk,
        "status": "queued",
        "done": False,
        "queue_position": 0,
        "message": "Queued: next to be solved.",
    }
    assert whatif_drain() == 1
    progress = client.get(f"/what-if/jobs/{job.pk}/").json()
    assert progress["done"] is True and progress["status"] == "succeeded"

    shown = client.get(submitted["Location"]).content.decode()
    assert "data-poll" not in shown and "http-equiv" not in shown
    assert "Demand would become unserved" in shown
    assert "nordlicht-versicherung/" in shown


def test_a_queued_job_says_how_many_are_ahead(pool: FakeChild) -> None:
    first = _client(make_user("a", VIEWER)).post("/what-if/", SURGE)
    assert first.status_code == 303
    client = _client(make_user("b", FINANCE))
    second = client.post("/what-if/", SURGE)
    body = client.get(second["Location"]).content.decode()
    assert "Queued: 1 what-if ahead of this one." in body


def test_a_failed_job_shows_its_reason(pool: FakeChild, settings: Any) -> None:
    client = _client(make_user("viewer", VIEWER))
    submitted = client.post("/what-if/", SURGE)
    job = WhatIfJob.objects.get()
    WhatIfJob.objects.filter(pk=job.pk).update(change={**job.change, "tenant": "gone"})
    whatif_drain()
    body = client.get(submitted["Location"]).content.decode()
    assert "No tenant named" in body and "gone" in body
    assert client.get(f"/what-if/jobs/{job.pk}/").json()["status"] == "failed"


def test_the_page_refuses_over_the_bounds_with_429_and_retry_after(
    pool: FakeChild, settings: Any
) -> None:
    settings.HEADROOM_WHATIF_VIEWER_PER_HOUR = 1
    client = _client(make_user("viewer", VIEWER))
    assert client.post("/what-if/", SURGE).status_code == 303
    whatif_drain()
    refused = client.post("/what-if/", SURGE)
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert "what-ifs an hour" in refused.content.decode()


def test_another_users_job_is_not_found_but_a_policy_admin_sees_it(pool: FakeChild) -> None:
    submitted = _client(make_user("viewer", VIEWER)).post("/what-if/", SURGE)
    job = WhatIfJob.objects.get()
    other = _client(make_user("other", VIEWER))
    assert other.get(submitted["Location"]).status_code == 404
    assert other.get(f"/what-if/jobs/{job.pk}/").status_code == 404
    admin = _client(make_user("admin", POLICY_ADMIN))
    assert admin.get(submitted["Location"]).status_code == 200
    for bad in ("abc", "9" * 19, "-1"):
        assert other.get(f"/what-if/?job={bad}").status_code == 404
    assert other.get("/what-if/jobs/" + "9" * 19 + "/").status_code == 404
