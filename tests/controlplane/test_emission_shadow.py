"""Shadow mode per region: an activated plan is stored and diffed against what a sink last
delivered to the region, and nothing is sent there; the other regions are actuated as
before. Finance holds nothing a shadow region was never sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from controlplane.core.roles import VIEWER
from controlplane.emission import services
from controlplane.emission.models import OutboxEntry, ShadowDiff
from controlplane.fleet.models import Geography, Region
from controlplane.plans.models import Plan
from tests.controlplane.emission_support import GPU_HOUR, activate, files_sink, make_plan

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _emission_root(settings: Any, tmp_path: Path) -> None:
    settings.HEADROOM_EMISSION_ROOT = str(tmp_path)


def regions(shadow: str = "") -> None:
    for name in ("eu", "us", "ap"):
        geo, _ = Geography.objects.get_or_create(name=name)
        Region.objects.update_or_create(
            name=name,
            defaults={
                "geography": geo,
                "actuation": Region.Actuation.SHADOW
                if name == shadow
                else Region.Actuation.ACTUATE,
            },
        )


def test_a_shadow_region_gets_a_stored_diff_and_its_sink_receives_nothing(
    tmp_path: Path,
) -> None:
    regions()
    files_sink()
    first = make_plan(1, state=Plan.State.PROPOSED)
    activate(first)
    assert services.outbox_dispatch().delivered == 3  # eu, us, ap actuated
    delivered = {p.name: p.read_bytes() for p in (tmp_path / "allocations").glob("*.json")}

    Region.objects.filter(name="eu").update(actuation=Region.Actuation.SHADOW)
    second = make_plan(2, state=Plan.State.PROPOSED, scale=2)
    rows = activate(second)

    # The plan is stored and active; eu gets no outbox row, the others do.
    assert Plan.objects.get(pk=second.pk).state == Plan.State.ACTIVE
    assert sorted(r.region for r in rows) == ["ap", "us"]
    report = services.outbox_dispatch()
    assert report.delivered == 2
    assert (tmp_path / "allocations" / "eu.json").read_bytes() == delivered["eu.json"]
    assert (tmp_path / "allocations" / "us.json").read_bytes() != delivered["us.json"]

    # The diff: against plan v1, which the sink acknowledged for eu.
    diff = ShadowDiff.objects.get(plan=second, region="eu")
    assert diff.delivered_plan_id == first.pk
    before = sum(a.replicas for a in first.allocations.filter(region="eu"))
    after = sum(a.replicas for a in second.allocations.filter(region="eu"))
    assert (diff.delivered_replicas, diff.planned_replicas) == (before, after) == (30, 60)
    gpus_before = sum(
        a.replicas * a.gpus_per_replica for a in first.allocations.filter(region="eu")
    )
    assert (diff.delivered_gpus, diff.planned_gpus) == (gpus_before, 2 * gpus_before)
    assert diff.cost_change_per_hour == pytest.approx(GPU_HOUR * gpus_before)
    assert diff.changed and all(r["planned"] == 2 * r["delivered"] for r in diff.rows)
    assert not ShadowDiff.objects.filter(region__in=["us", "ap"]).exists()


def test_a_shadow_region_never_delivered_is_diffed_against_nothing_and_no_sink_is_needed() -> None:
    regions(shadow="eu")
    plan = make_plan(1, state=Plan.State.PROPOSED)
    assert activate(plan) == []  # no sink configured
    diff = ShadowDiff.objects.get(plan=plan, region="eu")
    assert diff.delivered_plan is None and diff.delivered_replicas == 0
    assert diff.planned_replicas == 30 and diff.changed
    # Activating again records nothing new.
    services.outbox_enqueue_for_plan(plan=plan)
    assert ShadowDiff.objects.filter(plan=plan).count() == 1


def test_rows_queued_before_a_region_went_shadow_wait_unsent() -> None:
    regions()
    files_sink()
    activate(make_plan(1, state=Plan.State.PROPOSED))
    Region.objects.filter(name="us").update(actuation=Region.Actuation.SHADOW)
    assert services.outbox_dispatch().delivered == 2
    waiting = OutboxEntry.objects.get(region="us")
    assert waiting.status == OutboxEntry.Status.PENDING
    Region.objects.filter(name="us").update(actuation=Region.Actuation.ACTUATE)
    assert services.outbox_dispatch().delivered == 1


def test_finance_holds_nothing_a_shadow_region_was_never_sent() -> None:
    from controlplane.finance import selectors
    from controlplane.finance.services import held_segments

    regions()
    files_sink()
    first = make_plan(1, state=Plan.State.PROPOSED)
    activate(first)
    services.outbox_dispatch()
    Region.objects.filter(name="eu").update(actuation=Region.Actuation.SHADOW)
    second = make_plan(2, state=Plan.State.PROPOSED, scale=2)
    activate(second)
    services.outbox_dispatch()
    timeline = selectors.plan_activation_timeline(before=timezone.now())
    segments = held_segments(timeline, end_ts=int(timezone.now().timestamp()) + 3600)
    eu = [s for s in segments if s.region == "eu"]
    # eu keeps holding what was delivered (v1); us moved to v2.
    assert [s.plan.version for s in eu] == [1]
    assert [s.plan.version for s in segments if s.region == "us"][-1] == 2


def test_the_fleet_overview_shows_what_a_shadow_region_would_change(
    role_users: dict[str, User | None],
) -> None:
    regions(shadow="eu")
    plan = make_plan(1, state=Plan.State.PROPOSED)
    activate(plan)
    client = Client()
    client.force_login(role_users[VIEWER])  # type: ignore[arg-type]
    page = client.get("/").content.decode()
    assert 'id="shadow"' in page
    section = page[page.index('id="shadow"') : page.index('id="jobs"')]
    assert "<h3>eu</h3>" in section and "<h3>us</h3>" not in section
    assert "would change +30 replicas (+33 GPUs, +66.00 $/h) against nothing delivered yet" in (
        section
    )


def test_the_api_lists_the_shadow_diffs_to_every_role(
    role_users: dict[str, User | None],
) -> None:
    from rest_framework.test import APIClient

    regions(shadow="eu")
    plan = make_plan(4, state=Plan.State.PROPOSED)
    activate(plan)
    client = APIClient()
    client.force_authenticate(role_users[VIEWER])
    body = client.get("/api/emission/shadow-diffs/?plan_version=4").json()
    (diff,) = body["results"]
    assert diff["region"] == "eu" and diff["plan_version"] == 4
    assert diff["delivered_plan_version"] is None and diff["changed"] is True
    assert diff["planned_replicas"] == 30 and len(diff["rows"]) == 4  # 3 zones x 1 GPU, 1 x 2
    assert client.get("/api/emission/shadow-diffs/?plan_version=x").status_code == 400
