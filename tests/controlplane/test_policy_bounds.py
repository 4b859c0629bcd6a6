"""Every numeric fleet and policy figure has a realistic range: the model refuses a value
beyond it (so the admin and the scenario loader do), the API answers 400 naming the field,
the OpenAPI schema publishes it as ``minimum``/``maximum``, and the help text states it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import models
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from controlplane.api.urls import router
from controlplane.core.roles import POLICY_ADMIN
from controlplane.fleet import models as fleet_models
from controlplane.policies import models as policy_models
from controlplane.policies.models import Tier
from tests.controlplane.api_harness import Records
from tests.controlplane.bounds_support import BoundedField, bounded_fields, endpoint_models

FIELDS = bounded_fields()
FIELD_IDS = [str(f) for f in FIELDS]

# A record of each endpoint that has bounded fields, with its optional figures filled in so
# that setting one of them is an update of a value, not of an empty field.
MAKERS: dict[str, Callable[[Records], models.Model]] = {
    "region": lambda r: r.region(),
    "region-link": lambda r: r.region_link(),
    "hosted-provider": lambda r: r.hosted_provider(rpm_limit=60_000),
    "accelerator": lambda r: r.accelerator(),
    "inventory": lambda r: r.inventory(),
    "model": lambda r: r.llm_model(
        hidden_size=4096, intermediate_size=14336, attention_heads=32, vocab_size=128256
    ),
    "shape": lambda r: r.shape(max_model_len=8192, target_utilization=0.7),
    "capacity-figure": lambda r: r.figure(knee_requests_per_s=4.0),
    "tier": lambda r: r.tier(),
    "tenant": lambda r: r.tenant(spill_allowed=True, max_spill_rtt_ms=40.0),
    "tenant-quota": lambda r: r.quota(
        tokens_per_minute_limit=100_000, tokens_per_minute_burst=200_000
    ),
    "workload-profile": lambda r: r.profile(residence_s=3.0),
}


def _beyond(field: BoundedField) -> list[float]:
    """A value just below the range and one just above it."""
    below = field.low - 1 if field.whole or field.low == 0 else field.low / 2
    above = field.high + 1 if field.whole else field.high * 1.5
    return [below, above]


def test_every_numeric_fleet_and_policy_field_has_bounds_and_states_them() -> None:
    """No numeric column is left open-ended: each has a lower and an upper bound (the
    revision, which the database counts, and relations excepted), and its help text says
    the range."""
    unbounded = []
    for module in (fleet_models, policy_models):
        for model in vars(module).values():
            if not (isinstance(model, type) and issubclass(model, models.Model)):
                continue
            if model._meta.abstract or model.__module__ != module.__name__:
                continue
            for field in model._meta.concrete_fields:
                numeric = isinstance(field, models.FloatField | models.IntegerField)
                if not numeric or field.primary_key or field.is_relation or not field.editable:
                    continue
                kinds = {type(v).__name__ for v in field.validators}
                if not {"MinValueValidator", "MaxValueValidator"} <= kinds:
                    unbounded.append(f"{model.__name__}.{field.name}")
                elif "From " not in str(field.help_text):
                    unbounded.append(f"{model.__name__}.{field.name} (help text)")
    assert unbounded == []


def test_the_bounded_fields_cover_every_numeric_endpoint_field() -> None:
    assert {f.basename for f in FIELDS} == set(MAKERS)
    assert set(MAKERS) <= set(endpoint_models())
    named = {str(f) for f in FIELDS}
    assert {
        "tier.burst_factor",
        "tier.p95_ttft_slo_s",
        "tenant-quota.tokens_per_minute_limit",
        "workload-profile.prompt_tokens_p99",
        "inventory.gpus_available",
        "accelerator.on_demand_price_per_gpu_hour",
        "shape.gpus_per_replica",
        "capacity-figure.max_concurrency",
        "region.price_multiplier",
    } <= named


@pytest.mark.parametrize("field", FIELDS, ids=FIELD_IDS)
def test_the_model_accepts_each_bound_and_refuses_just_beyond(field: BoundedField) -> None:
    model_field = field.model._meta.get_field(field.name)
    for value in (field.low, field.high):
        model_field.run_validators(int(value) if field.whole else value)
    for value in _beyond(field):
        with pytest.raises(ValidationError, match=r"Must be at (least|most)"):
            model_field.run_validators(int(value) if field.whole else value)
    for value in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValidationError):
            model_field.run_validators(value)


@pytest.mark.django_db
@pytest.mark.parametrize("field", FIELDS, ids=FIELD_IDS)
def test_the_api_refuses_a_value_beyond_the_range_with_a_400_naming_the_field(
    field: BoundedField, api_client_for: Callable[[str], APIClient]
) -> None:
    record = MAKERS[field.basename](Records())
    client = api_client_for(POLICY_ADMIN)
    url = reverse(f"{field.basename}-detail", args=[record.pk])
    before = client.get(url).json()
    hostile: list[Any] = [*_beyond(field), "inf", "nan", "-inf", 1e308, 10**30]
    for value in hostile:
        response = client.patch(url, {field.name: value}, format="json", HTTP_IF_MATCH="*")
        assert response.status_code == 400, (value, response.content)
        error = response.json()["error"]
        assert error["code"] == "invalid"
        assert field.name in error["fields"], (value, error)
    after = client.get(url).json()
    assert after == before


@pytest.mark.django_db
def test_the_burst_factor_of_1e308_is_refused_and_the_tier_kept(
    api_client_for: Callable[[str], APIClient],
) -> None:
    """The write that once made every later re-plan fail with an OverflowError."""
    tier = Records().tier(burst_factor=1.5)
    client = api_client_for(POLICY_ADMIN)
    url = reverse("tier-detail", args=[tier.pk])

    response = client.patch(url, {"burst_factor": 1e308}, format="json", HTTP_IF_MATCH="*")

    assert response.status_code == 400
    assert response.json()["error"]["fields"]["burst_factor"] == [
        "Ensure this value is less than or equal to 10."
    ]
    tier.refresh_from_db()
    assert tier.burst_factor == 1.5
    assert Tier.history.filter(id=tier.pk).count() == 1  # type: ignore[attr-defined]


def test_the_schema_publishes_each_range_as_minimum_and_maximum() -> None:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    serializers = {
        basename: viewset.serializer_class.__name__.removesuffix("Serializer")
        for _prefix, viewset, basename in router.registry
    }
    for field in FIELDS:
        for component in (serializers[field.basename], "Patched" + serializers[field.basename]):
            published = components[component]["properties"][field.name]
            assert (published.get("minimum"), published.get("maximum")) == (
                field.low,
                field.high,
            ), f"{component}.{field.name}"
            assert "From " in published.get("description", ""), f"{component}.{field.name}"
