"""Argument checks and the one rounding rule shared by the capacity modules.

Every public function in ``planner.capacity`` validates its arguments with these helpers, so a
bad value always raises ``PlannerInputError`` naming the argument, and NaN or infinity never
slip through a comparison that happens to be false for them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from planner.errors import PlannerInputError

# Relative tolerance for rounding a count up. Capacity ratios such as 8.4 / 0.7 (the 12-replica
# fleet's planning capacity back to replicas) are whole numbers on paper but 12.000000000000002
# in binary floating point; a plain ceil would buy a replica for rounding noise. A quotient within one part in a billion of an integer is taken to
# be that integer. Real demand never carries that precision, so nothing real is rounded away.
CEIL_REL_TOL = 1e-9


def ceil_count(value: float) -> int:
    """Smallest whole count covering ``value``, ignoring float noise below ``CEIL_REL_TOL``.

    A positive value always needs at least one: the tolerance never rounds demand away.
    """
    nearest = round(value)
    if abs(value - nearest) <= CEIL_REL_TOL * max(1.0, abs(value)) and (nearest > 0 or value <= 0):
        return int(nearest)
    return math.ceil(value)


def _number(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlannerInputError(name, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise PlannerInputError(name, f"must be a finite number, got {value!r}")
    return float(value)


def finite(name: str, value: float) -> float:
    """``value`` as a float; any finite number."""
    return _number(name, value)


def positive(name: str, value: float) -> float:
    """``value`` as a float; must be finite and > 0."""
    if _number(name, value) <= 0:
        raise PlannerInputError(name, f"must be a positive number, got {value!r}")
    return float(value)


def non_negative(name: str, value: float) -> float:
    """``value`` as a float; must be finite and >= 0."""
    if _number(name, value) < 0:
        raise PlannerInputError(name, f"must be zero or more, got {value!r}")
    return float(value)


def at_least_one(name: str, value: float) -> float:
    """A multiplier such as a peak factor, burst factor or headroom: finite and >= 1."""
    if _number(name, value) < 1:
        raise PlannerInputError(name, f"must be at least 1, got {value!r}")
    return float(value)


def utilization(name: str, value: float) -> float:
    """A planning utilisation target: in (0, 1]."""
    v = _number(name, value)
    if not 0 < v <= 1:
        raise PlannerInputError(name, f"must be in (0, 1], got {value!r}")
    return v


def probability(name: str, value: float) -> float:
    """A share or hit rate: in [0, 1]."""
    v = _number(name, value)
    if not 0 <= v <= 1:
        raise PlannerInputError(name, f"must be in [0, 1], got {value!r}")
    return v


def quantile_level(name: str, value: float) -> float:
    """A quantile level such as 0.95: in the open interval (0, 1)."""
    v = _number(name, value)
    if not 0 < v < 1:
        raise PlannerInputError(name, f"must be in (0, 1), got {value!r}")
    return v


def positive_int(name: str, value: int) -> int:
    """A count of at least one (replicas, servers, zones, GPUs)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlannerInputError(name, f"must be a whole number, got {value!r}")
    if value < 1:
        raise PlannerInputError(name, f"must be at least 1, got {value!r}")
    return value


def non_negative_int(name: str, value: int) -> int:
    """A count that may be zero (spares)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlannerInputError(name, f"must be a whole number, got {value!r}")
    if value < 0:
        raise PlannerInputError(name, f"must be zero or more, got {value!r}")
    return value


def non_empty(name: str, items: Mapping[str, float] | tuple[object, ...]) -> None:
    """A mapping or tuple that must hold at least one entry."""
    if len(items) == 0:
        raise PlannerInputError(name, "must not be empty")
