"""The error contract: every refusal is a 4xx in one shape that says what to fix."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DataError, IntegrityError
from django.test import override_settings
from rest_framework.test import APIRequestFactory

from controlplane.api.errors import exception_handler
from controlplane.api.viewsets import TierViewSet
from controlplane.policies.models import Tier
from tests.controlplane.api_harness import APITest, error_fields


def _handled(exc: Exception) -> Any:
    request = APIRequestFactory().post("/api/tenants/")
    response = exception_handler(exc, {"request": request, "view": None})
    assert response is not None
    return response


def test_database_constraint_race_is_409_conflict() -> None:
    response = _handled(IntegrityError("duplicate key value violates unique constraint"))
    assert response.status_code == 409
    assert response.data["error"]["code"] == "conflict"


def test_value_the_database_refuses_is_400() -> None:
    response = _handled(DataError("value out of range"))
    assert response.status_code == 400
    assert "non_field_errors" in response.data["error"]["fields"]


class TestErrorContract(APITest):
    def test_bodies_that_are_not_json_records(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        plain = client.post("/api/geographies/", data=b"name=eu", content_type="text/plain")
        assert plain.status_code == 415
        assert plain.json()["error"]["code"] == "unsupported_media_type"
        broken = client.post(
            "/api/geographies/", data=b'{"name": ', content_type="application/json"
        )
        assert broken.status_code == 400
        assert broken.json()["error"]["code"] == "parse_error"
        overflow = client.post(
            "/api/regions/", data=b'{"price_multiplier": 1e999}', content_type="application/json"
        )
        assert overflow.status_code == 400
        assert "out of range" in overflow.json()["error"]["message"]
        listing = client.post("/api/geographies/", [{"name": "eu"}], format="json")
        assert listing.status_code == 400
        assert "non_field_errors" in error_fields(listing)

    def test_wrong_types_name_each_field(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        response = client.post(
            "/api/accelerators/",
            {"name": 7.5, "memory_gb": "lots", "peak_bf16_tflops": None, "memory_tbps": [3]},
            format="json",
        )
        assert response.status_code == 400
        fields = error_fields(response)
        assert {"memory_gb", "peak_bf16_tflops", "memory_tbps"} <= set(fields)
        assert response.json()["error"]["message"].startswith("invalid value for ")

    def test_figures_the_planner_cannot_use_are_400_not_500(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        model, gpu = self.records.llm_model(), self.records.accelerator()
        response = client.post(
            "/api/shapes/",
            {
                "name": "absurd-reserve",
                "model": model.pk,
                "accelerator": gpu.pk,
                "gpus_per_replica": 1,
                "runtime_reserve_gb_per_gpu": 1e300,
            },
            format="json",
        )
        # The field's own range refuses it before the cross-field planning check is reached.
        assert response.status_code == 400
        assert "less than or equal to" in error_fields(response)["runtime_reserve_gb_per_gpu"][0]

    def test_protected_delete_of_a_tier_in_use_is_409(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        tenant = self.records.tenant()
        tier = tenant.tier
        response = client.delete(f"/api/tiers/{tier.pk}/", HTTP_IF_MATCH=tier.etag)
        assert response.status_code == 409
        assert response.json()["error"]["referenced_by"] == {"tenants": [tenant.pk]}
        assert Tier.objects.filter(pk=tier.pk).exists()

    def test_if_match_star_overwrites_whatever_the_revision(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        tier = self.records.tier()
        tier.save()  # revision 2: an ETag read before this would be stale
        response = client.patch(
            f"/api/tiers/{tier.pk}/", {"priority": 9}, format="json", HTTP_IF_MATCH="*"
        )
        assert response.status_code == 200
        tier.refresh_from_db()
        assert (tier.priority, tier.revision) == (9, 3)

    def test_new_tenant_with_regions_history_shows_creation_then_regions(
        self, api_client_for: Any
    ) -> None:
        client = api_client_for("policy-admin")
        home = self.records.region()
        response = client.post(
            "/api/tenants/",
            {
                "name": "globex",
                "tier": self.records.tier().pk,
                "home_region": home.pk,
                "residency_regions": [home.pk],
            },
            format="json",
        )
        assert response.status_code == 201, response.json()
        history = client.get(f"/api/tenants/{response.json()['id']}/history/").json()
        assert [e["kind"] for e in history["results"]] == ["changed", "created"]
        added = history["results"][0]["changes"]
        assert added == [{"field": "residency_regions", "before": [], "after": [home.pk]}]
        assert {e["user"] for e in history["results"]} == {"admin-user"}


class TestOneErrorShapeOutsideViews(APITest):
    """What no DRF view shaped still reaches an API client in the error contract."""

    def test_no_such_route_is_a_json_404(self, api_client_for: Any) -> None:
        for path in ("/api/no-such-thing/", "/api/tenants/not-a-number/x/"):
            response = api_client_for("viewer").get(path)
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "not_found"

    @override_settings(DEBUG=True)
    def test_no_such_route_is_json_in_debug_mode_too(self, api_client_for: Any) -> None:
        response = api_client_for("viewer").get("/api/no-such-thing/")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"

    def test_a_refused_host_is_a_json_400(self, api_client_for: Any) -> None:
        response = api_client_for("viewer").get("/api/tenants/", HTTP_HOST="evil.example")
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "bad_request"

    def test_an_unhandled_exception_is_a_json_500_and_is_logged(
        self, api_client_for: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
    ) -> None:
        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(TierViewSet, "list", broken)
        response = api_client_for("viewer").get("/api/tiers/")
        assert response.status_code == 500
        body = response.json()
        assert body["error"]["code"] == "server_error"
        assert "disk on fire" not in body["error"]["message"]  # internals stay in the log
        assert any("disk on fire" in str(r.exc_info) for r in caplog.records if r.exc_info)

    def test_pages_outside_the_api_keep_their_html(self, api_client_for: Any) -> None:
        response = api_client_for("viewer").get("/no-such-page/")
        assert response.status_code == 404
        assert not response["Content-Type"].startswith("application/json")


class TestLoneSurrogates(APITest):
    """JSON may carry "\\ud800"; UTF-8 cannot. Such text is a 400 naming its field, never a 500."""

    def _post(self, client: Any, path: str, body: str) -> Any:
        return client.post(path, data=body.encode("ascii"), content_type="application/json")

    def test_in_a_choice_field(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        body = '{"name": "gold", "p95_ttft_slo_s": 1.0, "failure_promise": "\\ud800"}'
        response = self._post(client, "/api/tiers/", body)
        assert response.status_code == 400
        assert "lone surrogate" in error_fields(response)["failure_promise"][0]

    def test_in_a_text_field_and_nested(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        response = self._post(client, "/api/geographies/", '{"name": "eu\\udfff"}')
        assert response.status_code == 400
        assert "name" in error_fields(response)
        nested = self._post(client, "/api/tiers/", '{"name": "t", "tags": ["ok", "\\ud83d"]}')
        assert nested.status_code == 400
        assert "tags[1]" in error_fields(nested)

    def test_a_whole_character_written_as_a_surrogate_pair_is_fine(
        self, api_client_for: Any
    ) -> None:
        client = api_client_for("policy-admin")
        response = self._post(client, "/api/geographies/", '{"name": "eu-\\ud83d\\ude00"}')
        assert response.status_code in (201, 400)
        if response.status_code == 400:  # the name's own rules may refuse an emoji...
            assert "lone surrogate" not in str(response.json())  # ...but not as a surrogate


class TestStrictInput(APITest):
    """What DRF would drop or coerce is refused, naming the field."""

    def test_an_unknown_field_is_refused_not_dropped(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        response = client.post(
            "/api/geographies/", {"name": "eu", "descripton": "typo"}, format="json"
        )
        assert response.status_code == 400
        assert error_fields(response) == {"descripton": ["Unknown field."]}
        tier = self.records.tier()
        patch = client.patch(
            f"/api/tiers/{tier.pk}/", {"priorty": 3}, format="json", HTTP_IF_MATCH=tier.etag
        )
        assert patch.status_code == 400
        assert "priorty" in error_fields(patch)
        tier.refresh_from_db()
        assert tier.revision == 1  # nothing written

    def test_read_only_fields_sent_back_are_not_unknown(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        created = client.post("/api/geographies/", {"name": "eu"}, format="json").json()
        body = {**created, "description": "Europe"}
        response = client.put(f"/api/geographies/{created['id']}/", body, format="json")
        assert response.status_code == 200, response.json()

    def test_a_boolean_is_not_a_number(self, api_client_for: Any) -> None:
        region = self.records.region()
        response = api_client_for("policy-admin").patch(
            f"/api/regions/{region.pk}/", {"price_multiplier": True}, format="json"
        )
        assert response.status_code == 400
        assert "price_multiplier" in error_fields(response)

    def test_an_id_is_a_whole_number(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        geography = self.records.geography()
        for bad in (geography.pk + 0.5, True):
            response = client.post(
                "/api/regions/", {"name": "r-x", "geography": bad}, format="json"
            )
            assert response.status_code == 400, bad
            assert "geography" in error_fields(response)
        whole = client.post(
            "/api/regions/", {"name": "r-y", "geography": float(geography.pk)}, format="json"
        )
        assert whole.status_code == 201, whole.json()

    def test_a_boolean_filter_refuses_what_it_cannot_read(self, api_client_for: Any) -> None:
        client = api_client_for("viewer")
        for path in ("/api/emission/sinks/", "/api/benchmarks/endpoints/"):
            refused = client.get(path, {"enabled": "maybe"})
            assert refused.status_code == 400, path
            assert "enabled" in error_fields(refused)
            for good in ("true", "false", "1", "0", "True"):
                assert client.get(path, {"enabled": good}).status_code == 200
