"""The policy endpoints keep the API contract (see ``api_harness``), plus tenant rules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile
from tests.controlplane.api_harness import (
    APITest,
    ConditionalEndpointContract,
    EndpointContract,
    error_fields,
    profile_figures,
)

Payloads = Iterator[tuple[dict[str, Any], str]]


class TestTiers(ConditionalEndpointContract):
    basename = "tier"
    model = Tier

    def make(self) -> Tier:
        return self.records.tier()

    def create_payload(self) -> dict[str, Any]:
        return {
            "name": self.records.name("gold"),
            "p95_ttft_slo_s": 0.8,
            "failure_promise": "zone",
            "priority": 0,
            "target_utilization": 0.65,
            "burst_factor": 1.5,
        }

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"p95_ttft_slo_s": 1.2, "failure_promise": "n+1"}

    def invalid_payloads(self) -> Payloads:
        yield {**self.create_payload(), "burst_factor": 0.5}, "burst_factor"
        yield {**self.create_payload(), "target_utilization": 0}, "target_utilization"
        yield {**self.create_payload(), "failure_promise": "always"}, "failure_promise"


class TestTenants(ConditionalEndpointContract):
    basename = "tenant"
    model = Tenant

    def make(self) -> Tenant:
        return self.records.tenant()

    def create_payload(self) -> dict[str, Any]:
        home = self.records.region()
        spare = self.records.region(geography=home.geography)
        return {
            "name": self.records.name("acme"),
            "display_name": "Acme Support",
            "tier": self.records.tier().pk,
            "home_region": home.pk,
            "residency_geography": home.geography_id,
            "residency_regions": [home.pk, spare.pk],
            "spill_allowed": True,
            "max_spill_rtt_ms": 40.0,
            "fair_share_weight": 2.0,
        }

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"display_name": "Renamed", "fair_share_weight": 3.0}

    def invalid_payloads(self) -> Payloads:
        payload = self.create_payload()
        yield {**payload, "spill_allowed": True, "max_spill_rtt_ms": None}, "max_spill_rtt_ms"
        foreign = self.records.region()
        yield {**payload, "residency_regions": [foreign.pk]}, "residency_regions"
        yield {**payload, "residency_geography": foreign.geography_id}, "home_region"
        home = self.records.region(geography=foreign.geography)
        without_home = {**payload, "home_region": home.pk, "residency_geography": None}
        yield {**without_home, "residency_regions": [foreign.pk]}, "residency_regions"
        yield {**payload, "tier": 987654}, "tier"
        yield {**payload, "residency_regions": "all"}, "residency_regions"

    def test_residency_rules_checked_on_update_against_current_regions(
        self, api_client_for: Any
    ) -> None:
        client = api_client_for("policy-admin")
        home = self.records.region()
        tenant = self.records.tenant(home_region=home, residency_regions=(home,))
        elsewhere = self.records.region(geography=home.geography)
        # Moving the home region outside the stored region list breaks the rule.
        response = client.patch(
            self.detail_url(tenant),
            {"home_region": elsewhere.pk},
            format="json",
            HTTP_IF_MATCH=tenant.etag,
        )
        assert response.status_code == 400
        (message,) = error_fields(response)["residency_regions"]
        assert f"The home region {elsewhere.name} must be one of the residency regions" in message
        tenant.refresh_from_db()
        assert tenant.home_region_id == home.pk

    def test_residency_region_change_is_one_history_entry_with_ids(
        self, api_client_for: Any
    ) -> None:
        client = api_client_for("policy-admin")
        home = self.records.region()
        added = self.records.region(geography=home.geography)
        tenant = self.records.tenant(home_region=home, residency_regions=(home,))
        rows_before = tenant.history.count()
        response = client.patch(
            self.detail_url(tenant),
            {"residency_regions": [home.pk, added.pk], "display_name": "Both"},
            format="json",
            HTTP_IF_MATCH=tenant.etag,
        )
        assert response.status_code == 200, response.json()
        assert sorted(response.json()["residency_regions"]) == sorted([home.pk, added.pk])
        assert tenant.history.count() == rows_before + 1
        newest = client.get(self.history_url(tenant)).json()["results"][0]
        changes = {c["field"]: (c["before"], c["after"]) for c in newest["changes"]}
        assert changes["residency_regions"] == ([home.pk], sorted([home.pk, added.pk]))
        assert changes["display_name"] == ("", "Both")
        assert (newest["user"], newest["revision"]) == ("admin-user", 2)

    def test_filters_by_tier_home_region_and_residency(self, api_client_for: Any) -> None:
        client = api_client_for("viewer")
        gold = self.records.tier()
        home = self.records.region()
        resident = self.records.tenant(
            tier=gold,
            home_region=home,
            residency_geography=home.geography,
            residency_regions=(home,),
        )
        other = self.records.tenant()

        def names(**params: Any) -> list[str]:
            response = client.get(self.list_url(), params)
            assert response.status_code == 200, response.json()
            return [t["name"] for t in response.json()["results"]]

        assert names(tier=gold.pk) == [resident.name]
        assert names(home_region=home.pk) == [resident.name]
        assert names(residency_geography=home.geography_id) == [resident.name]
        assert names(residency_region=home.pk) == [resident.name]
        assert names(search=other.name) == [other.name]
        assert names(ordering="-name") == sorted([resident.name, other.name], reverse=True)
        response = client.get(self.list_url(), {"tier": "gold"})
        assert response.status_code == 400
        assert "tier" in error_fields(response)

    def test_list_shows_quota_and_regions(self, api_client_for: Any) -> None:
        client = api_client_for("finance")
        home = self.records.region()
        tenant = self.records.tenant(home_region=home, residency_regions=(home,))
        quota = self.records.quota(tenant=tenant)
        body = client.get(self.list_url()).json()["results"][0]
        assert body["residency_regions"] == [home.pk]
        assert body["quota"]["id"] == quota.pk
        assert body["quota"]["etag"] == quota.etag
        assert client.get(self.detail_url(self.records.tenant())).json()["quota"] is None

    def test_the_etag_covers_the_nested_quota(self, api_client_for: Any) -> None:
        client = api_client_for("policy-admin")
        tenant = self.records.tenant()
        quota = self.records.quota(tenant=tenant)
        first = client.get(self.detail_url(tenant))
        tag = first["ETag"]
        assert client.get(self.detail_url(tenant), HTTP_IF_NONE_MATCH=tag).status_code == 304
        changed = client.patch(
            f"/api/tenant-quotas/{quota.pk}/",
            {"budget_rate_replica_s_per_s": 3.0},
            format="json",
            HTTP_IF_MATCH=quota.etag,
        )
        assert changed.status_code == 200, changed.json()
        again = client.get(self.detail_url(tenant), HTTP_IF_NONE_MATCH=tag)
        assert again.status_code == 200
        assert again.json()["quota"]["budget_rate_replica_s_per_s"] == 3.0
        assert again["ETag"] != tag
        # A write carrying the tag read before the quota changed is stale too.
        stale = client.patch(
            self.detail_url(tenant), {"display_name": "x"}, format="json", HTTP_IF_MATCH=tag
        )
        assert stale.status_code == 412


class TestTenantListQueries(APITest):
    """The tenant list costs the same number of queries for 3 tenants as for 30."""

    def _tenants(self, count: int) -> None:
        tier = self.records.tier()
        home = self.records.region()
        spare = self.records.region(geography=home.geography)
        for _ in range(count):
            tenant = self.records.tenant(
                tier=tier,
                home_region=home,
                residency_geography=home.geography,
                residency_regions=(home, spare),
            )
            self.records.quota(tenant=tenant)

    def _queries(self, client: Any) -> int:
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/api/tenants/")
        assert response.status_code == 200
        return len(queries)

    def test_query_count_constant(self, api_client_for: Any) -> None:
        client = api_client_for("viewer")
        self._tenants(3)
        client.get("/api/tenants/")  # the first request also looks up the user's roles
        three = self._queries(client)
        self._tenants(27)
        thirty = self._queries(client)
        assert Tenant.objects.count() == 30
        assert three == thirty
        # count, page of tenants joined with their quotas, prefetch of residency regions
        assert thirty == 3


class TestTenantQuotas(ConditionalEndpointContract):
    basename = "tenant-quota"
    model = TenantQuota

    def make(self) -> TenantQuota:
        return self.records.quota()

    def create_payload(self) -> dict[str, Any]:
        return {
            "tenant": self.records.tenant().pk,
            "budget_rate_replica_s_per_s": 4.0,
            "budget_burst_replica_s": 120.0,
            "tokens_per_minute_limit": 200_000,
            "tokens_per_minute_burst": 400_000,
        }

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"tokens_per_minute_limit": 250_000, "tokens_per_minute_burst": 500_000}

    def invalid_payloads(self) -> Payloads:
        payload = self.create_payload()
        yield {**payload, "tokens_per_minute_burst": 1000}, "tokens_per_minute_burst"
        yield {**payload, "budget_burst_replica_s": 1.0}, "budget_burst_replica_s"
        existing = self.records.quota()
        yield {**payload, "tenant": existing.tenant_id}, "tenant"
        yield {**payload, "tokens_per_minute_limit": 2**64}, "tokens_per_minute_limit"


class TestWorkloadProfiles(EndpointContract):
    basename = "workload-profile"
    model = WorkloadProfile

    def make(self) -> WorkloadProfile:
        return self.records.profile()

    def create_payload(self) -> dict[str, Any]:
        return {
            "tenant": self.records.tenant().pk,
            "model": self.records.llm_model().pk,
            "workload_class": self.records.workload_class().pk,
            "version": 1,
            "source": "declared",
            **profile_figures(),
            "prefix_cache_hit_rate": 0.3,
            "residence_s": 4.0,
        }

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"peak_requests_per_s": 20.0, "prefix_cache_hit_rate": 0.5}

    def invalid_payloads(self) -> Payloads:
        payload = self.create_payload()
        yield {**payload, "prompt_tokens_p95": 100.0}, "prompt_tokens_p95"
        yield {**payload, "output_tokens_p99": 200.0}, "output_tokens_p99"
        yield {**payload, "prefix_cache_hit_rate": 1.5}, "prefix_cache_hit_rate"
        existing = self.records.profile()
        duplicate = {
            **payload,
            "tenant": existing.tenant_id,
            "model": existing.model_id,
            "workload_class": existing.workload_class_id,
            "version": existing.version,
        }
        yield duplicate, "non_field_errors"
