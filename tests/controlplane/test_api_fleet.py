"""The fleet endpoints keep the API contract (see ``api_harness``), plus their own filters."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane.fleet.models import (
    AcceleratorType,
    CapacityFigure,
    Geography,
    LlmModel,
    Region,
    RegionLink,
    ReplicaShape,
    WorkloadClass,
    Zone,
    ZoneInventory,
)
from tests.controlplane.api_harness import APITest, EndpointContract, an_hour_ago, error_fields

Payloads = Iterator[tuple[dict[str, Any], str]]


class TestGeographies(EndpointContract):
    basename = "geography"
    model = Geography

    def make(self) -> Geography:
        return self.records.geography()

    def create_payload(self) -> dict[str, Any]:
        return {"name": self.records.name("geo"), "description": "European Union"}

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"description": "changed"}

    def invalid_payloads(self) -> Payloads:
        yield {"name": "Not A Slug"}, "name"
        existing = self.records.geography()
        yield {"name": existing.name}, "name"


class TestRegions(EndpointContract):
    basename = "region"
    model = Region

    def make(self) -> Region:
        return self.records.region()

    def create_payload(self) -> dict[str, Any]:
        geography = self.records.geography()
        return {"name": self.records.name("r"), "geography": geography.pk, "price_multiplier": 1.1}

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"price_multiplier": 0.9}

    def invalid_payloads(self) -> Payloads:
        yield {**self.create_payload(), "price_multiplier": 0}, "price_multiplier"
        yield {**self.create_payload(), "geography": 987654}, "geography"
        yield {**self.create_payload(), "geography": "eu"}, "geography"


class TestZones(EndpointContract):
    basename = "zone"
    model = Zone

    def make(self) -> Zone:
        return self.records.zone()

    def create_payload(self) -> dict[str, Any]:
        return {"name": self.records.name("z"), "region": self.records.region().pk, "state": "up"}

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"state": "degraded"}

    def invalid_payloads(self) -> Payloads:
        yield {**self.create_payload(), "state": "sideways"}, "state"
        yield {**self.create_payload(), "region": None}, "region"


class TestRegionLinks(EndpointContract):
    basename = "region-link"
    model = RegionLink

    def make(self) -> RegionLink:
        return self.records.region_link()

    def create_payload(self) -> dict[str, Any]:
        a, b = self.records.region(), self.records.region()
        return {"region_a": a.pk, "region_b": b.pk, "rtt_ms": 95.0}

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"rtt_ms": 120.0}

    def invalid_payloads(self) -> Payloads:
        region = self.records.region()
        yield {"region_a": region.pk, "region_b": region.pk, "rtt_ms": 1.0}, "region_b"
        link = self.records.region_link()
        reverse = {"region_a": link.region_b_id, "region_b": link.region_a_id, "rtt_ms": 1.0}
        yield reverse, "region_b"
        same = {"region_a": link.region_a_id, "region_b": link.region_b_id, "rtt_ms": 1.0}
        yield same, "non_field_errors"
        yield {**self.create_payload(), "rtt_ms": -5}, "rtt_ms"


class TestAccelerators(EndpointContract):
    basename = "accelerator"
    model = AcceleratorType

    def make(self) -> AcceleratorType:
        return self.records.accelerator()

    def create_payload(self) -> dict[str, Any]:
        return {
            "name": self.records.name("h100"),
            "memory_gb": 80.0,
            "peak_bf16_tflops": 989.0,
            "memory_tbps": 3.35,
            "on_demand_price_per_gpu_hour": 4.5,
            "reserved_price_per_gpu_hour": 2.9,
            "gpu_product": "NVIDIA-H100-80GB-HBM3",
        }

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {
            "on_demand_price_per_gpu_hour": 5.0,
            "spot_price_per_gpu_hour": 1.2,
            "gpu_product": "NVIDIA-H100-SXM5-80GB",
        }

    def invalid_payloads(self) -> Payloads:
        payload = self.create_payload()
        yield {**payload, "reserved_price_per_gpu_hour": 9.0}, "reserved_price_per_gpu_hour"
        yield {**payload, "spot_price_per_gpu_hour": 9.0}, "spot_price_per_gpu_hour"
        yield {**payload, "spot_price_per_gpu_hour": -0.5}, "spot_price_per_gpu_hour"
        yield {**payload, "memory_gb": -80}, "memory_gb"
        # Not a Kubernetes label value: a node selector on it could never match.
        yield {**payload, "gpu_product": "NVIDIA H100"}, "gpu_product"


class TestInventory(EndpointContract):
    basename = "inventory"
    model = ZoneInventory

    def make(self) -> ZoneInventory:
        return self.records.inventory()

    def create_payload(self) -> dict[str, Any]:
        zone, gpu = self.records.zone(), self.records.accelerator()
        return {"zone": zone.pk, "accelerator": gpu.pk, "gpus_available": 64}

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"gpus_available": 32}

    def invalid_payloads(self) -> Payloads:
        yield {**self.create_payload(), "gpus_available": -1}, "gpus_available"
        existing = self.records.inventory()
        duplicate = {"zone": existing.zone_id, "accelerator": existing.accelerator_id}
        yield {**duplicate, "gpus_available": 8}, "non_field_errors"


class TestModels(EndpointContract):
    basename = "model"
    model = LlmModel

    def make(self) -> LlmModel:
        return self.records.llm_model()

    def create_payload(self) -> dict[str, Any]:
        return {
            "name": self.records.name("llama"),
            "parameters_billions": 70.0,
            "bytes_per_parameter": 2.0,
            "layers": 80,
            "kv_heads": 8,
            "head_dim": 128,
            "kv_bytes_per_element": 2.0,
        }

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"bytes_per_parameter": 1.0}

    def invalid_payloads(self) -> Payloads:
        yield {**self.create_payload(), "layers": 0}, "layers"
        yield {**self.create_payload(), "parameters_billions": "seventy"}, "parameters_billions"

    def test_derived_memory_figures(self, api_client_for: Any) -> None:
        client = api_client_for("viewer")
        model = self.records.llm_model(parameters_billions=70.0, layers=80, kv_heads=8)
        body = client.get(self.detail_url(model)).json()
        assert body["weight_bytes"] == pytest.approx(140e9)
        # 2 (K and V) × 80 layers × 8 heads × 128 dims × 2 bytes = 327,680 bytes per token.
        assert body["kv_bytes_per_token"] == pytest.approx(327_680)


class TestShapes(EndpointContract):
    basename = "shape"
    model = ReplicaShape

    def make(self) -> ReplicaShape:
        return self.records.shape()

    def create_payload(self) -> dict[str, Any]:
        model, gpu = self.records.llm_model(), self.records.accelerator()
        return {
            "name": self.records.name("shape"),
            "model": model.pk,
            "accelerator": gpu.pk,
            "gpus_per_replica": 2,
            "runtime_reserve_gb_per_gpu": 6.0,
            "target_utilization": 0.75,
            "runtime_version": "vllm-0.8",
            "container_image": "vllm/vllm-openai:v0.11.0",
            "model_path": "meta-llama/Llama-3.3-70B-Instruct",
            "max_model_len": 4096,
            "extra_args": ["--enable-prefix-caching", "--gpu-memory-utilization=0.92"],
        }

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"gpus_per_replica": 4, "extra_args": ["--enable-chunked-prefill"]}

    def invalid_payloads(self) -> Payloads:
        huge = self.records.llm_model(parameters_billions=140.0)
        payload = {**self.create_payload(), "model": huge.pk, "gpus_per_replica": 1}
        yield payload, "gpus_per_replica"
        yield {**self.create_payload(), "target_utilization": 1.5}, "target_utilization"
        # The sink sets these from the shape's own fields; a second value would fight them.
        for flag in ("--model=x", "--tensor-parallel-size", "--max_model_len=8", "--port=9"):
            yield {**self.create_payload(), "extra_args": [flag]}, "extra_args"
        yield {**self.create_payload(), "extra_args": "--enable-prefix-caching"}, "extra_args"
        yield {**self.create_payload(), "extra_args": [""]}, "extra_args"
        yield {**self.create_payload(), "container_image": "vllm openai"}, "container_image"
        yield {**self.create_payload(), "model_path": "models/a\tb"}, "model_path"
        yield {**self.create_payload(), "max_model_len": 0}, "max_model_len"

    def test_max_model_len_beyond_the_kv_pool_is_refused_with_the_reason(
        self, api_client_for: Any
    ) -> None:
        # Seeds: 70B on 2 × 80 GB with 6 GB reserve keeps an 8 GB pool, 24,414 tokens.
        client = api_client_for("policy-admin")
        model = self.records.llm_model(parameters_billions=70.0, layers=80, kv_heads=8)
        gpu = self.records.accelerator(memory_gb=80.0)
        payload = {
            **self.create_payload(),
            "model": model.pk,
            "accelerator": gpu.pk,
            "max_model_len": 32768,
        }
        response = client.post(self.list_url(), payload, format="json")
        assert response.status_code == 400
        (message,) = error_fields(response)["max_model_len"]
        assert "32,768 tokens do not fit" in message and "at most 24,414" in message
        payload["max_model_len"] = 24414
        assert client.post(self.list_url(), payload, format="json").status_code == 201

    def test_shape_that_leaves_no_kv_pool_is_refused_with_the_reason(
        self, api_client_for: Any
    ) -> None:
        client = api_client_for("policy-admin")
        huge = self.records.llm_model(name="big-140", parameters_billions=140.0)
        payload = {**self.create_payload(), "model": huge.pk, "gpus_per_replica": 1}
        response = client.post(self.list_url(), payload, format="json")
        assert response.status_code == 400
        (message,) = error_fields(response)["gpus_per_replica"]
        assert "280.0 GB of weights per GPU" in message
        assert "no room is left for the KV cache" in message

    def test_kv_pool_and_context_from_the_seed_example(self, api_client_for: Any) -> None:
        # Seeds: 140 GB of weights on 2 × 80 GB with 6 GB reserve leaves an 8 GB KV pool.
        client = api_client_for("finance")
        model = self.records.llm_model(parameters_billions=70.0, layers=80, kv_heads=8)
        gpu = self.records.accelerator(memory_gb=80.0)
        shape = self.records.shape(model=model, accelerator=gpu, gpus_per_replica=2)
        body = client.get(self.detail_url(shape)).json()
        assert body["kv_pool_gb"] == pytest.approx(8.0)
        assert body["context_tokens"] == 8_000_000_000 // 327_680

    def test_filter_by_model_and_accelerator(self, api_client_for: Any) -> None:
        client = api_client_for("viewer")
        shape = self.records.shape()
        self.records.shape()
        for params in ({"model": shape.model_id}, {"accelerator": shape.accelerator_id}):
            ids = [s["id"] for s in client.get(self.list_url(), params).json()["results"]]
            assert ids == [shape.pk]


class TestWorkloadClasses(EndpointContract):
    basename = "workload-class"
    model = WorkloadClass

    def make(self) -> WorkloadClass:
        return self.records.workload_class()

    def create_payload(self) -> dict[str, Any]:
        return {"name": self.records.name("policy-qa"), "description": "short answers"}

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"description": "long summaries"}

    def invalid_payloads(self) -> Payloads:
        yield {"name": ""}, "name"
        yield {"name": "x" * 65}, "name"


class TestCapacityFigures(EndpointContract):
    basename = "capacity-figure"
    model = CapacityFigure

    def make(self) -> CapacityFigure:
        return self.records.figure()

    def create_payload(self) -> dict[str, Any]:
        shape, cls = self.records.shape(), self.records.workload_class()
        return {
            "shape": shape.pk,
            "workload_class": cls.pk,
            "prefill_tokens_per_s": 24_000.0,
            "decode_tokens_per_s": 3_100.0,
            "max_concurrency": 96,
            "knee_requests_per_s": 7.5,
            "measured_at": an_hour_ago(),
            "source": "engine-benchmark",
            "provenance": {"run": "bench-42", "engine": {"name": "vllm", "version": "0.8.1"}},
        }

    def update_payload(self, record: Any) -> dict[str, Any]:
        return {"knee_requests_per_s": 6.0, "source": "endpoint-load-test"}

    def invalid_payloads(self) -> Payloads:
        future = (timezone.now() + timedelta(days=2)).isoformat()
        yield {**self.create_payload(), "measured_at": future}, "measured_at"
        yield {**self.create_payload(), "provenance": ["not", "an", "object"]}, "provenance"
        yield {**self.create_payload(), "provenance": {"a": "nul\x00"}}, "provenance"
        deep: Any = 1
        for _ in range(40):
            deep = [deep]
        yield {**self.create_payload(), "provenance": {"deep": deep}}, "provenance"
        yield {**self.create_payload(), "source": "rumour"}, "source"
        yield {**self.create_payload(), "max_concurrency": 0}, "max_concurrency"

    def test_filters_by_shape_class_and_staleness(self, api_client_for: Any) -> None:
        client = api_client_for("finance")
        fresh = self.records.figure()
        old = self.records.figure(
            shape=fresh.shape,
            workload_class=self.records.workload_class(),
            measured_at=timezone.now() - timedelta(days=400),
        )
        other = self.records.figure()

        def ids(**params: Any) -> set[int]:
            response = client.get(self.list_url(), params)
            assert response.status_code == 200, response.json()
            return {f["id"] for f in response.json()["results"]}

        assert ids(shape=fresh.shape_id) == {fresh.pk, old.pk}
        assert ids(workload_class=old.workload_class_id) == {old.pk}
        assert ids(stale="true") == {old.pk}
        assert ids(stale="false") == {fresh.pk, other.pk}
        body = client.get(self.detail_url(old)).json()
        assert body["is_stale"] is True
        assert client.get(self.list_url(), {"stale": "perhaps"}).status_code == 400
        assert client.get(self.list_url(), {"shape": 987654}).status_code == 400


class TestFleetQueries(APITest):
    """Filters and protected deletes across fleet endpoints."""

    def test_zone_filters_by_region_state_and_geography(self, api_client_for: Any) -> None:
        records = self.records
        client = api_client_for("viewer")
        region = records.region()
        up = records.zone(region=region)
        down = records.zone(region=region, state="down")
        elsewhere = records.zone(state="down")

        def names(**params: Any) -> list[str]:
            response = client.get("/api/zones/", params)
            assert response.status_code == 200, response.json()
            return [z["name"] for z in response.json()["results"]]

        assert names(region=region.pk) == sorted([up.name, down.name])
        assert names(state="down") == sorted([down.name, elsewhere.name])
        assert names(geography=region.geography_id) == sorted([up.name, down.name])
        assert names(region=region.pk, state="down") == [down.name]
        assert names(ordering="-name") == sorted([up.name, down.name, elsewhere.name], reverse=True)
        assert names(search=down.name) == [down.name]
        response = client.get("/api/zones/", {"state": "sideways"})
        assert response.status_code == 400
        assert "state" in error_fields(response)

    def test_region_delete_refused_while_referenced_names_the_references(
        self, api_client_for: Any
    ) -> None:
        records = self.records
        client = api_client_for("policy-admin")
        region = records.region()
        zone = records.zone(region=region)
        tenant = records.tenant(home_region=region)
        response = client.delete(f"/api/regions/{region.pk}/")
        assert response.status_code == 409
        error = response.json()["error"]
        assert error["code"] == "protected"
        assert f"1 tenant ({tenant.name}); 1 zone ({zone.name})" in error["message"]
        assert error["referenced_by"] == {"zones": [zone.pk], "tenants": [tenant.pk]}
        assert Region.objects.filter(pk=region.pk).exists()

    def test_region_link_filter_matches_either_end(self, api_client_for: Any) -> None:
        records = self.records
        client = api_client_for("viewer")
        hub = records.region()
        outgoing = records.region_link(region_a=hub)
        incoming = records.region_link(region_b=hub)
        records.region_link()
        response = client.get("/api/region-links/", {"region": hub.pk})
        assert {link["id"] for link in response.json()["results"]} == {outgoing.pk, incoming.pk}
