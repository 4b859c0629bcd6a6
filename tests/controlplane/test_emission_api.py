"""Emission API: sinks keep the record-endpoint contract (any role reads, policy-admin
writes), their secret is write-only everywhere (responses and history), and the outbox is
readable by every role with a retry of failed rows for policy-admin."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.db.models import Model
from django.urls import reverse

from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.emission import services
from controlplane.emission.models import AllocationSink, OutboxEntry
from controlplane.emission.urls import router
from tests.controlplane.api_harness import (
    ANONYMOUS,
    NO_ROLE,
    APITest,
    EndpointContract,
    _normalise,
    error_fields,
)
from tests.controlplane.emission_support import SECRET, files_sink, make_plan

OTHER_SECRET = "another-webhook-secret-abcdefghij"


class TestSinkEndpoint(EndpointContract):
    basename = "allocation-sink"
    model = AllocationSink

    def make(self) -> Model:
        sink = AllocationSink(
            kind=AllocationSink.Kind.WEBHOOK,
            name=self.records.name("hook"),
            url="https://hooks.example/allocations",
            secret=SECRET,
        )
        sink.full_clean()
        sink.save()
        return sink

    def create_payload(self) -> dict[str, Any]:
        return {
            "kind": "webhook",
            "name": self.records.name("hook"),
            "url": "https://hooks.example/new",
            "secret": SECRET,
            "timeout_s": 5.0,
        }

    def update_payload(self, record: Model) -> dict[str, Any]:
        return {"enabled": False, "timeout_s": 7.5}

    def invalid_payloads(self) -> Iterator[tuple[dict[str, Any], str]]:
        hook = self.create_payload()
        yield {**hook, "url": ""}, "url"
        yield {**hook, "url": "ftp://hooks.example/x"}, "url"
        yield {**hook, "secret": "short"}, "secret"
        yield {**hook, "timeout_s": 0}, "timeout_s"
        yield {**hook, "timeout_s": 301}, "timeout_s"
        yield {**hook, "kind": "carrier-pigeon"}, "kind"
        yield {"kind": "files", "name": self.records.name("files")}, "directory"
        yield {"kind": "files", "name": self.records.name("f"), "directory": "../up"}, "directory"
        yield (
            {
                "kind": "kubernetes",
                "name": self.records.name("k8s"),
                "directory": "manifests",
                "namespace": "inference",
            },
            "container_image",
        )
        k8s = {
            "kind": "kubernetes",
            "name": self.records.name("k8s"),
            "directory": "manifests",
            "namespace": "inference",
            "container_image": "vllm/vllm-openai:v0.11.0",
        }
        yield {**k8s, "autoscaler": "keda"}, "prometheus_url"
        yield {**k8s, "autoscaler": "vpa"}, "autoscaler"
        yield {**k8s, "gpu_node_label": "not a label"}, "gpu_node_label"
        yield {**k8s, "cpu_per_gpu": 0}, "cpu_per_gpu"
        yield {**k8s, "memory_gib_per_gpu": 0.5}, "memory_gib_per_gpu"
        yield {**k8s, "env_secret": "Bad_Name"}, "env_secret"
        existing = self.make()
        yield {**hook, "name": existing.name}, "name"  # type: ignore[attr-defined]

    # The harness finds views in the record router; these live under /api/emission/.
    def _view(self) -> Any:
        return next(view for _, view, name in router.registry if name == self.basename)

    # The harness's round trip compares every sent field with what comes back: the secret
    # never comes back, so these two compare everything else and check the secret apart.
    def test_create_then_retrieve_round_trip(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        payload = self.create_payload()
        created = client.post(self.list_url(), payload, format="json")
        assert created.status_code == 201, created.json()
        fetched = client.get(self.detail_url(created.json()["id"])).json()
        for name, value in payload.items():
            if name != "secret":
                assert _normalise(fetched[name]) == _normalise(value), name
        assert "secret" not in fetched
        assert (fetched["secret_set"], fetched["secret_hint"]) == (True, "••••••••" + SECRET[-4:])
        assert AllocationSink.objects.get(pk=fetched["id"]).secret == SECRET

    def test_only_policy_admins_see_the_secrets_last_characters(self, api_client_for: Any) -> None:
        record = self.make()
        for role in ("viewer", "finance"):
            fetched = api_client_for(role).get(self.detail_url(record)).json()
            assert (fetched["secret_set"], fetched["secret_hint"]) == (True, ""), role
            listed = api_client_for(role).get(self.list_url()).json()["results"]
            assert {row["secret_hint"] for row in listed} == {""}, role

    def test_put_replaces_and_patch_changes_only_named_fields(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        record = self.make()
        current = client.get(self.detail_url(record)).json()
        writable = {
            name: current[name]
            for name, field in self._serializer().fields.items()
            if not field.read_only and name != "secret"
        }
        put = client.put(self.detail_url(record), {**writable, "timeout_s": 3.0}, format="json")
        assert put.status_code == 200, put.json()
        assert put.json()["timeout_s"] == 3.0
        record.refresh_from_db()
        assert record.secret == SECRET, "a PUT without the secret keeps it"  # type: ignore[attr-defined]
        patch = client.patch(self.detail_url(record), {"enabled": False}, format="json")
        assert patch.status_code == 200
        assert {k: v for k, v in patch.json().items() if k not in ("enabled", "updated_at")} == {
            k: v for k, v in put.json().items() if k not in ("enabled", "updated_at")
        }


class TestSinkSecret(APITest):
    def test_the_secret_never_appears_in_any_response(self, api_client_for: Any) -> None:
        admin = api_client_for(POLICY_ADMIN)
        created = admin.post(
            reverse("allocation-sink-list"),
            {"kind": "webhook", "name": "h", "url": "https://x.example/", "secret": SECRET},
            format="json",
        )
        assert created.status_code == 201
        pk = created.json()["id"]
        changed = admin.patch(
            reverse("allocation-sink-detail", args=[pk]), {"secret": OTHER_SECRET}, format="json"
        )
        assert changed.status_code == 200
        assert AllocationSink.objects.get(pk=pk).secret == OTHER_SECRET
        for role in (POLICY_ADMIN, FINANCE, VIEWER):
            client = api_client_for(role)
            for url in (
                reverse("allocation-sink-list"),
                reverse("allocation-sink-detail", args=[pk]),
                reverse("allocation-sink-history", args=[pk]),
            ):
                response = client.get(url)
                assert response.status_code == 200
                text = response.content.decode()
                assert SECRET not in text and OTHER_SECRET not in text, (role, url)
        history = admin.get(reverse("allocation-sink-history", args=[pk])).json()["results"]
        assert all(c["field"] != "secret" for entry in history for c in entry["changes"])
        # The rotation's entry lists no field (the secret is left out) but says what happened.
        rotated, made = history
        assert (rotated["kind"], rotated["changes"], rotated["change_reason"]) == (
            "changed",
            [],
            "secret rotated",
        )
        assert made["change_reason"] is None

    def test_the_history_says_when_the_secret_was_rotated(self, api_client_for: Any) -> None:
        admin = api_client_for(POLICY_ADMIN)
        sink = AllocationSink.objects.create(
            kind=AllocationSink.Kind.WEBHOOK, name="w", url="https://x.example/", secret=SECRET
        )
        url = reverse("allocation-sink-detail", args=[sink.pk])
        # A rotation along with another change: both said; then a change leaving the secret.
        assert (
            admin.patch(url, {"secret": OTHER_SECRET, "timeout_s": 7}, format="json").status_code
            == 200
        )
        assert admin.patch(url, {"timeout_s": 8}, format="json").status_code == 200
        history = admin.get(reverse("allocation-sink-history", args=[sink.pk])).json()["results"]
        reasons = [(e["change_reason"], [c["field"] for c in e["changes"]]) for e in history]
        assert reasons[:2] == [(None, ["timeout_s"]), ("secret rotated", ["timeout_s"])]
        assert history[2]["kind"] == "created" and history[2]["change_reason"] is None
        # Sending the same secret again is no rotation.
        assert admin.patch(url, {"secret": OTHER_SECRET}, format="json").status_code == 200
        latest = admin.get(reverse("allocation-sink-history", args=[sink.pk])).json()["results"][0]
        assert latest["change_reason"] is None

    def test_a_weak_secret_on_update_is_refused(self, api_client_for: Any) -> None:
        admin = api_client_for(POLICY_ADMIN)
        sink = AllocationSink.objects.create(
            kind="webhook", name="h", url="https://x.example/", secret=SECRET
        )
        response = admin.patch(
            reverse("allocation-sink-detail", args=[sink.pk]), {"secret": "tiny"}, format="json"
        )
        assert response.status_code == 400
        assert "secret" in error_fields(response)
        sink.refresh_from_db()
        assert sink.secret == SECRET


@pytest.fixture
def emitted(settings: Any, tmp_path: Path) -> list[OutboxEntry]:
    settings.HEADROOM_EMISSION_ROOT = str(tmp_path)
    files_sink()
    with transaction.atomic():
        rows = services.outbox_enqueue_for_plan(plan=make_plan(6))
    services.outbox_dispatch()
    return rows


READ_STATUS = {POLICY_ADMIN: 200, FINANCE: 200, VIEWER: 200, NO_ROLE: 403, ANONYMOUS: 401}


class TestOutboxEndpoint(APITest):
    @pytest.mark.parametrize("role", list(READ_STATUS))
    def test_every_role_reads_the_outbox_and_only_policy_admin_retries(
        self, role: str, api_client_for: Any, emitted: list[OutboxEntry]
    ) -> None:
        client = api_client_for(role)
        entry = emitted[0]
        OutboxEntry.objects.filter(pk=entry.pk).update(status=OutboxEntry.Status.FAILED)
        assert client.get(reverse("outbox-entry-list")).status_code == READ_STATUS[role]
        assert (
            client.get(reverse("outbox-entry-detail", args=[entry.pk])).status_code
            == READ_STATUS[role]
        )
        retry = client.post(reverse("outbox-entry-retry", args=[entry.pk]))
        expected = {POLICY_ADMIN: 200, ANONYMOUS: 401}.get(role, 403)
        assert retry.status_code == expected
        entry.refresh_from_db()
        assert entry.status == ("pending" if role == POLICY_ADMIN else "failed")

    def test_outbox_rows_cannot_be_written_through_the_api(
        self, api_client_for: Any, emitted: list[OutboxEntry]
    ) -> None:
        admin = api_client_for(POLICY_ADMIN)
        entry = emitted[0]
        detail = reverse("outbox-entry-detail", args=[entry.pk])
        assert admin.post(reverse("outbox-entry-list"), {}, format="json").status_code == 405
        assert admin.patch(detail, {"status": "delivered"}, format="json").status_code == 405
        assert admin.delete(detail).status_code == 405
        assert OutboxEntry.objects.filter(pk=entry.pk).exists()

    def test_list_filters_and_detail_shows_the_attempt_log(
        self, api_client_for: Any, emitted: list[OutboxEntry]
    ) -> None:
        client = api_client_for(VIEWER)
        listing = client.get(reverse("outbox-entry-list"), {"status": "delivered"}).json()
        assert listing["count"] == 3
        row = listing["results"][0]
        assert (row["plan_version"], row["sink_name"], row["status"]) == (6, "files", "delivered")
        eu = next(e for e in emitted if e.region == "eu")
        detail = client.get(reverse("outbox-entry-detail", args=[eu.pk])).json()
        assert detail["payload"]["region"] == "eu"
        assert [a["outcome"] for a in detail["attempt_log"]] == ["delivered"]
        assert client.get(reverse("outbox-entry-list"), {"plan_version": 6}).json()["count"] == 3
        assert client.get(reverse("outbox-entry-list"), {"region": "ap"}).json()["count"] == 1
        bad = client.get(reverse("outbox-entry-list"), {"status": "nonsense"})
        assert bad.status_code == 400 and "status" in error_fields(bad)

    def test_retrying_a_delivered_row_is_a_400_in_the_error_contract(
        self, api_client_for: Any, emitted: list[OutboxEntry]
    ) -> None:
        response = api_client_for(POLICY_ADMIN).post(
            reverse("outbox-entry-retry", args=[emitted[0].pk])
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid"
        assert "status" in error_fields(response)

    def test_hostile_queries_never_5xx(
        self, api_client_for: Any, emitted: list[OutboxEntry]
    ) -> None:
        client = api_client_for(VIEWER)
        for params in (
            {"sink": "x"},
            {"plan": "99999999999999999999999"},
            {"ordering": "payload,-nonsense"},
            {"search": "\x00"},
            {"limit": "-1"},
            {"plan_version": "1e400"},
        ):
            response = client.get(reverse("outbox-entry-list"), params)
            assert response.status_code < 500, (params, response.status_code)
        assert client.get("/api/emission/outbox/" + "9" * 40 + "/").status_code == 404
        body = json.loads(client.get(reverse("outbox-entry-detail", args=[10**9])).content)
        assert body["error"]["code"] == "not_found"


class TestSinkInUse(APITest):
    def test_a_sink_with_outbox_rows_cannot_be_deleted_only_disabled(
        self, api_client_for: Any, emitted: list[OutboxEntry]
    ) -> None:
        admin = api_client_for(POLICY_ADMIN)
        sink = emitted[0].sink
        url = reverse("allocation-sink-detail", args=[sink.pk])
        refused = admin.delete(url)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "protected"
        assert admin.patch(url, {"enabled": False}, format="json").status_code == 200
        with transaction.atomic():
            plan = make_plan(7, state="proposed")
            assert services.outbox_enqueue_for_plan(plan=plan) == []
