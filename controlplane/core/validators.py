"""Field validators shared by every app's models.

Migrations name these by their old paths (``controlplane.fleet.models._positive`` and the
like); those modules keep aliases, so old migrations still load.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator

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


# -- bounds -----------------------------------------------------------------------------------
# Every numeric fleet and policy figure has a range that a real fleet stays inside; together
# the ranges keep every product the planner forms (rate × burst × tokens / throughput, GPUs ×
# price × multiplier) finite and within what its solver handles. The model fields carry them
# as ``MinValueValidator``/``MaxValueValidator``, so the admin, the API (DRF copies them into
# the serializer), the OpenAPI schema (``minimum``/``maximum``) and the scenario loader refuse
# the same values, and the field's help text says the range.


@dataclass(frozen=True)
class Bounds:
    """A closed range ``[low, high]`` of a figure, with its unit for the help text."""

    low: float
    high: float
    unit: str = ""

    @property
    def validators(self) -> list[Callable[[Any], None]]:
        """Finite, then at least ``low`` and at most ``high`` (NaN fails ``finite``: it
        compares false with both ends)."""
        unit = f" {self.unit}" if self.unit else ""
        return [
            finite,
            MinValueValidator(self.low, message=f"Must be at least {number(self.low)}{unit}."),
            MaxValueValidator(self.high, message=f"Must be at most {number(self.high)}{unit}."),
        ]

    def help(self, text: str = "") -> str:
        """``text`` followed by the range, e.g. "p95 TTFT, seconds. From 0.01 to 600 s."."""
        unit = f" {self.unit}" if self.unit else ""
        sentence = f"From {number(self.low)} to {number(self.high)}{unit}."
        return f"{text} {sentence}" if text else sentence


def number(value: float) -> str:
    """``2000000`` → ``2,000,000``; ``0.01`` → ``0.01``; ``1e-06`` → ``0.000001``."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.12f}".rstrip("0")


# Shared ranges (each model names its own where nothing is shared).
TOKENS_PER_REQUEST = Bounds(1, 10_000_000, "tokens")  # the longest contexts served today
UTILIZATION_TARGET = Bounds(0.05, 1)
SHARE = Bounds(0, 1)
RTT_MS = Bounds(0, 1000, "ms")  # the longest inter-region round trips are ~300 ms
GPU_COUNT = Bounds(0, 100_000, "GPUs")  # the largest single clusters
GPU_PRICE_PER_HOUR = Bounds(0.01, 500, "$ per GPU-hour")
PRICE_MULTIPLIER = Bounds(0.1, 10)
