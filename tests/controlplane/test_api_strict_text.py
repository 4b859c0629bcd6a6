"""Text fields take text: a JSON number or boolean where the schema says string is a 400
naming the field, never stored as its digits; and request bodies are documented as JSON only
(what the API fuzz sends), while the browsable API's forms still work."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator

from controlplane.core.roles import POLICY_ADMIN
from controlplane.fleet.models import AcceleratorType, Geography, WorkloadClass
from controlplane.plans.whatif_api import WhatIfRequestSerializer

pytestmark = pytest.mark.django_db

ACCELERATOR = {
    "name": "gpu80",
    "memory_gb": 80,
    "peak_bf16_tflops": 990,
    "memory_tbps": 3.35,
    "on_demand_price_per_gpu_hour": 4.1,
    "reserved_price_per_gpu_hour": 2.7,
}


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/geographies/", {"name": 5}, "name"),
        ("/api/workload-classes/", {"name": 12}, "name"),
        ("/api/workload-classes/", {"name": "chat", "description": True}, "description"),
        ("/api/accelerators/", {**ACCELERATOR, "name": 80}, "name"),
        (
            "/api/emission/sinks/",
            {"name": 3, "kind": "files", "directory": "/tmp/headroom-sink"},
            "name",
        ),
    ],
)
@pytest.mark.parametrize("value", ["number", "boolean", "list"])
def test_a_number_for_a_text_field_is_a_400_naming_it(
    api_client_for: Any, url: str, body: dict[str, Any], field: str, value: str
) -> None:
    sent = dict(body)
    sent[field] = {"number": 5, "boolean": False, "list": ["a"]}[value]
    response = api_client_for(POLICY_ADMIN).post(url, sent, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == [field], response.json()
    assert not Geography.objects.exists() and not WorkloadClass.objects.exists()
    assert not AcceleratorType.objects.exists()


def test_a_form_still_sends_text(api_client_for: Any) -> None:
    """The browsable API posts forms: every field arrives as text, and a name of digits is
    a name."""
    response = api_client_for(POLICY_ADMIN).post(
        "/api/workload-classes/", {"name": "q4", "description": "5"}, format="multipart"
    )
    assert response.status_code == 201, response.content
    assert WorkloadClass.objects.get(name="q4").description == "5"


def test_a_what_if_names_its_tenant_and_tier_in_text() -> None:
    for body, field in (
        ({"tenant": 7}, "tenant"),
        ({"tenant": "t", "tier": 2}, "tier"),
        ({"tenant": "t", "residency_regions": [1]}, "residency_regions"),
    ):
        serializer = WhatIfRequestSerializer(data=body)
        assert not serializer.is_valid()
        assert field in serializer.errors, serializer.errors


def test_request_bodies_are_documented_as_json_only() -> None:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    media: set[str] = set()
    for path in schema["paths"].values():
        for operation in path.values():
            if isinstance(operation, dict) and "requestBody" in operation:
                media.update(operation["requestBody"]["content"])
    assert media == {"application/json"}
    assert reverse("workload-class-list") == "/api/workload-classes/"
