"""The bounded numeric fields of the record endpoints, read from the models and serializers
themselves, for the bounds tests and the re-plan property test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from controlplane.api.urls import router


@dataclass(frozen=True)
class BoundedField:
    """A writable numeric field of one endpoint and the range its model field allows."""

    basename: str
    model: type[models.Model]
    name: str
    low: float
    high: float
    whole: bool  # an integer column

    def __str__(self) -> str:
        return f"{self.basename}.{self.name}"


def _limit(field: models.Field[Any, Any], kind: type) -> float | None:
    return next((v.limit_value for v in field.validators if isinstance(v, kind)), None)


def endpoint_models() -> dict[str, type[models.Model]]:
    """Each record endpoint's basename and model."""
    return {
        basename: viewset.serializer_class.Meta.model
        for _prefix, viewset, basename in router.registry
    }


def bounded_fields() -> list[BoundedField]:
    """Every writable numeric field of every record endpoint, with its model's bounds."""
    out = []
    for _prefix, viewset, basename in router.registry:
        serializer = viewset.serializer_class()
        model = serializer.Meta.model
        for name, field in serializer.fields.items():
            if field.read_only:
                continue
            try:
                model_field = model._meta.get_field(name)
            except FieldDoesNotExist:
                continue
            if model_field.is_relation or not isinstance(
                model_field, models.FloatField | models.IntegerField
            ):
                continue
            low, high = (
                _limit(model_field, MinValueValidator),
                _limit(model_field, MaxValueValidator),
            )
            assert low is not None and high is not None, f"{basename}.{name} has no bounds"
            out.append(
                BoundedField(
                    basename=basename,
                    model=model,
                    name=name,
                    low=low,
                    high=high,
                    whole=isinstance(model_field, models.IntegerField),
                )
            )
    return out
