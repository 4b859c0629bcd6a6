"""Fields that allow zero refuse NaN and infinity as firmly as negative numbers."""

from __future__ import annotations

import math

import pytest
from django.core.exceptions import ValidationError

from controlplane.fleet.models import RegionLink, ReplicaShape
from controlplane.policies.models import Tenant, WorkloadProfile

FIELDS = [
    (RegionLink, "rtt_ms"),
    (ReplicaShape, "runtime_reserve_gb_per_gpu"),
    (Tenant, "max_spill_rtt_ms"),
    (WorkloadProfile, "peak_requests_per_s"),
]


@pytest.mark.parametrize("model, field", FIELDS)
@pytest.mark.parametrize(
    "value, message",
    [
        (math.nan, "Must be a finite number."),
        (math.inf, "Must be a finite number."),
        (-1.0, "Must be at least 0"),
    ],
)
def test_non_negative_fields_refuse_nonsense(
    model: type, field: str, value: float, message: str
) -> None:
    with pytest.raises(ValidationError) as excinfo:
        model._meta.get_field(field).run_validators(value)
    assert any(text.startswith(message) for text in excinfo.value.messages)


@pytest.mark.parametrize("model, field", FIELDS)
def test_non_negative_fields_accept_zero(model: type, field: str) -> None:
    model._meta.get_field(field).run_validators(0.0)
