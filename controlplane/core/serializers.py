"""Strict parsing for every write: unknown fields, booleans posing as numbers, and fractional,
boolean or string ids are refused with a 400 naming the field, instead of being dropped or
coerced.

DRF on its own drops a field it does not know (a misspelt option is silently ignored),
accepts ``true`` as the number 1.0, and looks ``"tier": 1.5`` (or the string ``"1"``) up as
tier 1. Write serializers inherit ``StrictFieldsMixin``; model serializers get the strict field types through
``StrictModelSerializer``'s field mapping.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.http import QueryDict
from rest_framework import serializers


class StrictFieldsMixin:
    """Refuse keys that name no field of the serializer (read-only fields are known: a body
    read from the API can be sent back)."""

    unknown_message = "Unknown field."

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            known = self.fields  # type: ignore[attr-defined]
            unknown = sorted(str(key) for key in data if key not in known)
            if unknown:
                raise serializers.ValidationError({key: [self.unknown_message] for key in unknown})
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictFloatField(serializers.FloatField):
    """A number; ``true``/``false`` are not numbers."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """``true`` or ``false``; not ``1``, ``"yes"`` or ``"true"`` (DRF alone takes those)."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictCharField(serializers.CharField):
    """Text; a number or a boolean is not text (DRF alone would store ``3`` as ``"3"``)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictPrimaryKeyRelatedField(serializers.PrimaryKeyRelatedField[Any]):
    """An id is a whole number: not ``1.5``, not ``true``, and not ``"1"`` (a string) in JSON.

    A form (the browsable API's HTML forms, ``multipart`` or ``x-www-form-urlencoded``) can
    only send text, so there the id's digits are read as the number they spell.
    """

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str) and self._from_form():
            text = data.strip()
            if not (text.isascii() and text.isdigit()) or len(text) > 19:
                self.fail("incorrect_type", data_type="str")
            data = int(text)
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("incorrect_type", data_type=type(data).__name__)
        if isinstance(data, float):
            if not data.is_integer():
                self.fail("incorrect_type", data_type="float")
            data = int(data)
        return super().to_internal_value(data)

    def _from_form(self) -> bool:
        return isinstance(getattr(self.root, "initial_data", None), QueryDict)


class StrictSlugField(serializers.SlugField):
    """A slug; a number is not one (DRF alone would store ``3`` as ``"3"``)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictModelSerializer(StrictFieldsMixin, serializers.ModelSerializer[Any]):
    # Text columns take text only: a JSON number or boolean for a name, a description or an
    # image reference is a 400 naming the field, not stored as its digits.
    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.FloatField: StrictFloatField,
        models.CharField: StrictCharField,
        models.TextField: StrictCharField,
        models.SlugField: StrictSlugField,
    }
    serializer_related_field = StrictPrimaryKeyRelatedField


def read_only_by(slug_field: str = "name") -> serializers.SlugRelatedField[Any]:
    """A related record shown by its name (or ``slug_field``), read-only."""
    return serializers.SlugRelatedField(slug_field=slug_field, read_only=True)
