"""The audit trail of API changes: stored rows name the acting user, the endpoint shows them."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from controlplane.policies.models import Tier
from tests.controlplane.api_harness import APITest


class TestAuditHistory(APITest):
    def test_api_change_stores_acting_user_and_before_after(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        tier = self.records.tier(p95_ttft_slo_s=1.0, priority=3)
        response = client.patch(
            f"/api/tiers/{tier.pk}/",
            {"p95_ttft_slo_s": 0.5, "priority": 1},
            format="json",
            HTTP_IF_MATCH=tier.etag,
        )
        assert response.status_code == 200, response.json()

        newest, previous = Tier.history.filter(id=tier.pk).order_by("-history_id")[:2]
        assert newest.history_user == User.objects.get(username="admin-user")
        assert newest.history_type == "~"
        delta = newest.diff_against(previous)
        assert {(c.field, c.old, c.new) for c in delta.changes} == {
            ("p95_ttft_slo_s", 1.0, 0.5),
            ("priority", 3, 1),
        }

    def test_history_endpoint_pages_keep_each_entrys_before_values(
        self, api_client_for: Any
    ) -> None:
        client = api_client_for("policy-admin")
        tier = self.records.tier(priority=0)
        for priority in (1, 2, 3):
            tier.refresh_from_db()
            response = client.patch(
                f"/api/tiers/{tier.pk}/",
                {"priority": priority},
                format="json",
                HTTP_IF_MATCH=tier.etag,
            )
            assert response.status_code == 200

        entries = []
        for offset in range(4):
            page = client.get(f"/api/tiers/{tier.pk}/history/", {"limit": 1, "offset": offset})
            assert page.json()["count"] == 4
            entries.extend(page.json()["results"])
        assert [e["kind"] for e in entries] == ["changed", "changed", "changed", "created"]
        assert [e["revision"] for e in entries] == [4, 3, 2, 1]
        priority_changes = [
            next(c for c in e["changes"] if c["field"] == "priority") for e in entries
        ]
        assert [(c["before"], c["after"]) for c in priority_changes] == [
            (2, 3),
            (1, 2),
            (0, 1),
            (None, 0),
        ]
        # Records made outside a request carry no user; the API's changes carry theirs.
        assert [e["user"] for e in entries] == ["admin-user"] * 3 + [None]

    def test_history_of_a_record_that_never_existed_is_404(self, api_client_for: Any) -> None:
        response = api_client_for("viewer").get("/api/tiers/4242/history/")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"

    def test_viewer_reads_history_but_no_role_cannot(self, api_client_for: Any) -> None:
        tier = self.records.tier()
        assert api_client_for("viewer").get(f"/api/tiers/{tier.pk}/history/").status_code == 200
        assert api_client_for("no-role").get(f"/api/tiers/{tier.pk}/history/").status_code == 403
