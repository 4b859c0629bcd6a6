"""The read-only API base: every read-only endpoint refuses NUL, orders stably and caps a
page, telemetry's included (it lacked all three)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from controlplane.core.api import RecordPagination
from controlplane.core.roles import VIEWER
from controlplane.telemetry.models import TelemetryPull

READ_ONLY_LISTS = [
    "/api/plans/",
    "/api/plans/runs/",
    "/api/telemetry/pulls/",
    "/api/telemetry/derivations/",
    "/api/telemetry/alerts/",
    "/api/emission/outbox/",
    "/api/benchmarks/runs/",
]

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url", READ_ONLY_LISTS)
def test_read_only_lists_share_the_guard_and_the_cap(url: str, api_client_for: Any) -> None:
    client = api_client_for(VIEWER)
    listing = client.get(url)
    assert listing.status_code == 200, listing.content
    nul = client.get(url, {"status": "open\x00"})
    assert nul.status_code == 400
    assert "NUL" in str(nul.json())


def test_telemetry_pages_are_bounded_and_ties_ordered_by_id(
    api_client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    moment = datetime(2026, 3, 2, 9, tzinfo=UTC)
    pulls = [
        TelemetryPull.objects.create(
            started_at=moment, window_start=moment, window_end=moment, bucket_s=300
        )
        for _ in range(3)
    ]
    monkeypatch.setattr(RecordPagination, "max_limit", 2)
    client = api_client_for(VIEWER)
    # A page larger than the cap is refused, not silently cut to it.
    too_large = client.get("/api/telemetry/pulls/?ordering=started_at&limit=50")
    assert too_large.status_code == 400
    assert "limit" in too_large.json()["error"]["fields"]
    body = client.get("/api/telemetry/pulls/?ordering=started_at&limit=2").json()
    assert body["count"] == 3
    assert [row["id"] for row in body["results"]] == [pulls[0].pk, pulls[1].pk]
    assert "limit=2" in body["next"]
