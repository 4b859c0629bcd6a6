"""Emission in the admin: policy-admin edits sinks with a write-only secret, other roles only
look; outbox rows are read-only pages with their attempt log, and failed rows can be retried."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client
from django.urls import reverse

from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.emission import services
from controlplane.emission.models import AllocationSink, OutboxEntry
from tests.controlplane.conftest import make_user
from tests.controlplane.emission_support import SECRET, files_sink, make_plan

pytestmark = pytest.mark.django_db

SINK_ADD = "admin:emission_allocationsink_add"
NEW_SECRET = "rotated-secret-0123456789abcdef"


def client_for(user: User | None) -> Client:
    assert user is not None
    client = Client()
    client.force_login(user)
    return client


def sink_form(**changes: Any) -> dict[str, Any]:
    return {
        "name": "hook",
        "kind": "webhook",
        "enabled": "on",
        "timeout_s": "10",
        "url": "https://hooks.example/allocations",
        "secret": SECRET,
        "directory": "",
        "namespace": "default",
        "container_image": "",
        # The Kubernetes fields' defaults, as the add form renders them.
        "autoscaler": "hpa",
        "prometheus_url": "",
        "gpu_node_label": "nvidia.com/gpu.product",
        "cpu_per_gpu": "4",
        "memory_gib_per_gpu": "32",
        "env_secret": "",
        "kubectl_context": "",
        **changes,
    }


def test_policy_admin_creates_a_sink_and_the_secret_is_never_rendered(
    role_users: dict[str, User | None],
) -> None:
    client = client_for(role_users[POLICY_ADMIN])
    response = client.post(reverse(SINK_ADD), sink_form())
    assert response.status_code == 302, response.context["adminform"].form.errors
    sink = AllocationSink.objects.get(name="hook")
    assert sink.secret == SECRET
    page = client.get(reverse("admin:emission_allocationsink_change", args=[sink.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert SECRET not in html
    assert sink.secret_hint in html
    listing = client.get(reverse("admin:emission_allocationsink_changelist")).content.decode()
    assert SECRET not in listing and sink.secret_hint in listing
    history = client.get(reverse("admin:emission_allocationsink_history", args=[sink.pk]))
    assert SECRET not in history.content.decode()
    version = sink.history.first()  # type: ignore[attr-defined]
    past = client.get(
        reverse("admin:emission_allocationsink_simple_history", args=[sink.pk, version.pk])
    )
    assert past.status_code == 200
    assert SECRET not in past.content.decode()


def test_an_empty_secret_field_keeps_the_secret_and_a_new_one_replaces_it(
    role_users: dict[str, User | None],
) -> None:
    client = client_for(role_users[POLICY_ADMIN])
    sink = AllocationSink.objects.create(
        kind="webhook", name="hook", url="https://hooks.example/a", secret=SECRET
    )
    url = reverse("admin:emission_allocationsink_change", args=[sink.pk])
    assert client.post(url, sink_form(secret="", timeout_s="12")).status_code == 302
    sink.refresh_from_db()
    assert (sink.secret, sink.timeout_s) == (SECRET, 12.0)
    assert client.post(url, sink_form(secret=NEW_SECRET)).status_code == 302
    sink.refresh_from_db()
    assert sink.secret == NEW_SECRET
    # Clearing the secret of a webhook is refused by the model's rule.
    refused = client.post(url, sink_form(secret="", clear_secret="on"))
    assert refused.status_code == 200
    assert "secret" in refused.context["adminform"].form.errors
    sink.refresh_from_db()
    assert sink.secret == NEW_SECRET


@pytest.mark.parametrize("role", [FINANCE, VIEWER])
def test_other_roles_see_sinks_but_cannot_change_them(role: str) -> None:
    user = make_user(f"{role}-staff", role, staff=True)
    client = client_for(user)
    sink = AllocationSink.objects.create(
        kind="webhook", name="hook", url="https://hooks.example/a", secret=SECRET
    )
    url = reverse("admin:emission_allocationsink_change", args=[sink.pk])
    page = client.get(url)
    assert page.status_code == 200
    assert SECRET not in page.content.decode()
    assert client.post(url, sink_form(timeout_s="99")).status_code == 403
    assert client.get(reverse(SINK_ADD)).status_code == 403
    version = sink.history.first()  # type: ignore[attr-defined]
    past = client.get(
        reverse("admin:emission_allocationsink_simple_history", args=[sink.pk, version.pk])
    )
    assert SECRET not in past.content.decode()
    sink.refresh_from_db()
    assert sink.timeout_s == 10.0


@pytest.fixture
def failed_rows(settings: Any, tmp_path: Path) -> list[OutboxEntry]:
    settings.HEADROOM_EMISSION_ROOT = str(tmp_path)
    files_sink()
    with transaction.atomic():
        rows = services.outbox_enqueue_for_plan(plan=make_plan(2))
    services.outbox_dispatch()
    OutboxEntry.objects.filter(region="eu").update(
        status=OutboxEntry.Status.FAILED, last_error="HTTP 400"
    )
    return rows


def test_outbox_pages_are_read_only_with_the_attempt_log(
    role_users: dict[str, User | None], failed_rows: list[OutboxEntry]
) -> None:
    client = client_for(role_users[POLICY_ADMIN])
    listing = client.get(reverse("admin:emission_outboxentry_changelist"))
    assert listing.status_code == 200
    assert "HTTP 400" in listing.content.decode()
    entry = OutboxEntry.objects.get(region="us")
    url = reverse("admin:emission_outboxentry_change", args=[entry.pk])
    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert entry.idempotency_key in html and "delivered" in html
    assert 'name="_save"' not in html
    assert client.post(url, {"status": "pending"}).status_code == 403
    assert client.get(reverse("admin:emission_outboxentry_add")).status_code == 403
    entry.refresh_from_db()
    assert entry.status == "delivered"


def test_retry_action_requeues_failed_rows_only(
    role_users: dict[str, User | None], failed_rows: list[OutboxEntry]
) -> None:
    client = client_for(role_users[POLICY_ADMIN])
    response = client.post(
        reverse("admin:emission_outboxentry_changelist"),
        {"action": "retry_now", "_selected_action": [r.pk for r in failed_rows]},
        follow=True,
    )
    assert response.status_code == 200
    text = response.content.decode()
    assert "1 queued again." in text and "2 skipped" in text
    assert dict(OutboxEntry.objects.values_list("region", "status")) == {
        "ap": "delivered",
        "eu": "pending",
        "us": "delivered",
    }


def test_viewers_cannot_retry(failed_rows: list[OutboxEntry]) -> None:
    client = client_for(make_user("viewer-staff", VIEWER, staff=True))
    listing = client.get(reverse("admin:emission_outboxentry_changelist"))
    assert listing.status_code == 200
    assert "retry_now" not in listing.content.decode()
    client.post(
        reverse("admin:emission_outboxentry_changelist"),
        {"action": "retry_now", "_selected_action": [r.pk for r in failed_rows]},
    )
    assert OutboxEntry.objects.get(region="eu").status == "failed"
