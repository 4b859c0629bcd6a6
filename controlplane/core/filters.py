"""Filters that refuse a value they cannot read, instead of ignoring it.

django-filter reads a boolean filter through Django's ``NullBooleanSelect``, which maps any
value it does not know (``?enabled=maybe``) to "no filter", so a typo lists everything. Every
filter set, declared or built from ``filterset_fields``, uses ``StrictFilterSet``, whose
boolean filters accept ``true``/``false`` (and ``1``/``0``) and answer anything else with 400,
and whose filters on whole-number columns take whole numbers only.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.db import models
from django_filters.rest_framework import DjangoFilterBackend
from django_filters.rest_framework import FilterSet as RestFilterSet

_TRUE = {"true", "1"}
_FALSE = {"false", "0"}


class StrictBooleanField(forms.NullBooleanField):
    # A plain text widget hands over the raw value: NullBooleanSelect maps what it does not
    # know to None before the field could refuse it.
    widget = forms.TextInput
    default_error_messages = {"invalid": "Use true or false, not %(value)r."}

    # The stubs give NullBooleanField BooleanField's "-> bool"; Django's own returns None too.
    def to_python(self, value: Any) -> bool | None:  # type: ignore[override]
        if value in (None, ""):
            return None
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise forms.ValidationError(
            self.error_messages["invalid"], code="invalid", params={"value": value}
        )


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


# A filter on a whole-number column reads a whole number inside the database's bigint: a
# fraction (``?bucket_s=1.5``) would match nothing silently, and a larger number would not fit
# the query's parameter (a database error).
BIGINT_MIN = -(2**63)
BIGINT_MAX = 2**63 - 1


class StrictIntegerField(forms.IntegerField):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", BIGINT_MIN)
        kwargs.setdefault("max_value", BIGINT_MAX)
        super().__init__(*args, **kwargs)


class StrictIntegerFilter(django_filters.NumberFilter):
    # A NumberFilter still (the schema reads it as a number filter), over a whole-number field;
    # the stubs pin NumberFilter's field to DecimalField.
    field_class = StrictIntegerField  # type: ignore[assignment]


_INTEGER_FIELDS = (
    models.IntegerField,
    models.BigIntegerField,
    models.SmallIntegerField,
    models.PositiveIntegerField,
    models.PositiveBigIntegerField,
    models.PositiveSmallIntegerField,
    models.AutoField,
    models.BigAutoField,
)


class StrictFilterSet(RestFilterSet):
    FILTER_DEFAULTS = {
        **RestFilterSet.FILTER_DEFAULTS,
        models.BooleanField: {"filter_class": StrictBooleanFilter},
        **{field: {"filter_class": StrictIntegerFilter} for field in _INTEGER_FIELDS},
    }


class StrictFilterBackend(DjangoFilterBackend):
    """``DEFAULT_FILTER_BACKENDS``: filter sets built from ``filterset_fields`` are strict too."""

    filterset_base = StrictFilterSet
