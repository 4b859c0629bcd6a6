"""Field validators shared by every app's models.

Migrations name these by their old paths (``controlplane.fleet.models._positive`` and the
like); those modules keep aliases, so old migrations still load.
"""

from __future__ import annotations

import math

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9._/-]*$",
    "Use lower-case letters, digits and . _ / - (starting with a letter or digit).",
)


def finite(value: float) -> None:
    """Refuse NaN and infinity: NaN compares false with every bound, so range checks alone
    let it through (a YAML scenario can spell ``.nan`` and ``.inf``)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError("Must be a finite number.")


def positive(value: float) -> None:
    finite(value)
    if value is None or value <= 0:
        raise ValidationError("Must be greater than zero.")


def non_negative(value: float) -> None:
    finite(value)
    if value is None or value < 0:
        raise ValidationError("Must be zero or more.")


def fraction_open_closed(value: float) -> None:
    """A utilisation target: in (0, 1]."""
    if value is None or not (0 < value <= 1):
        raise ValidationError("Must be greater than 0 and at most 1.")


def fraction_closed(value: float) -> None:
    """A share or rate: in [0, 1]."""
    if value is None or not (0 <= value <= 1):
        raise ValidationError("Must be between 0 and 1.")


def quantile_open(value: float) -> None:
    """A forecast quantile: in (0, 1), both ends excluded (0 and 1 are no band's edge)."""
    if value is None or not (0 < value < 1):
        raise ValidationError("Must be greater than 0 and less than 1.")


def at_least_one(value: float) -> None:
    finite(value)
    if value is None or value < 1:
        raise ValidationError("Must be at least 1 (1.0 = no burst).")
