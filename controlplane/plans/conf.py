"""Re-planning settings, read at call time.

Each value comes from the Django setting of the same name when the settings module defines it
(tests override them with pytest-django's ``settings``), else from the environment variable of
that name, else the default below. A value that is present but malformed is an error.

- ``HEADROOM_REPLAN_TIME_LIMIT_S`` (6): time limit of the solve a plan is made from, seconds.
- ``HEADROOM_REPLAN_BAND_TIME_LIMIT_S`` (1.5): time limit of each of the two extra solves at the
  forecast band's low and high edges, seconds (they only price the band).
- ``HEADROOM_REPLAN_SOLVER_WORKERS`` (2) and ``HEADROOM_REPLAN_SOLVER_SEED`` (0): passed to the
  MIP solver; a fixed pair gives the same plan for the same problem.
- ``HEADROOM_PLANNER_LOCK_TTL_S`` (900): how long a re-plan's claim on the planner lock holds
  without being renewed. A claim older than this belongs to a worker that died and may be
  taken over, so it must exceed the longest re-plan (the three time limits plus reading and
  storing); the re-plan renews its claim between steps.
- ``HEADROOM_FORECAST_BAND_LOW`` (0.1) and ``HEADROOM_FORECAST_BAND_HIGH`` (0.99): quantiles of
  the band's low and high edges that each plan prices, in (0, 1), low below high.
- ``HEADROOM_FORECAST_HORIZON_HOURS`` (168): hours ahead a re-plan sizes for; the peak of the
  forecast band over them is planned.
- ``HEADROOM_FORECAST_HISTORY_DAYS`` (56): days of request-rate history the forecast is fitted
  to.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T", int, float)


@dataclass(frozen=True)
class ReplanSettings:
    """Checked re-planning settings (units in the names)."""

    time_limit_s: float
    band_time_limit_s: float
    solver_workers: int
    solver_seed: int
    lock_ttl_s: float
    band_low: float
    band_high: float
    horizon_hours: int
    history_days: int


def _read(name: str, cast: Callable[[Any], T], default: T) -> T:
    if hasattr(settings, name):
        raw: Any = getattr(settings, name)
    else:
        raw = os.environ.get(name)
        if raw is None or raw.strip() == "":
            return default
    try:
        value = cast(raw)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc
    if isinstance(value, float) and not math.isfinite(value):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {raw!r}")
    return value


def _positive(name: str, value: T) -> T:
    if value <= 0:
        raise ImproperlyConfigured(f"{name} must be greater than zero, got {value!r}")
    return value


def _quantile(name: str, value: float) -> float:
    if not 0 < value < 1:
        raise ImproperlyConfigured(f"{name} must be in (0, 1), got {value!r}")
    return value


def replan_settings() -> ReplanSettings:
    """The current re-planning settings, checked."""
    low = _quantile("HEADROOM_FORECAST_BAND_LOW", _read("HEADROOM_FORECAST_BAND_LOW", float, 0.1))
    high = _quantile(
        "HEADROOM_FORECAST_BAND_HIGH", _read("HEADROOM_FORECAST_BAND_HIGH", float, 0.99)
    )
    if low >= high:
        raise ImproperlyConfigured(
            f"HEADROOM_FORECAST_BAND_LOW ({low}) must be below HEADROOM_FORECAST_BAND_HIGH ({high})"
        )
    seed = _read("HEADROOM_REPLAN_SOLVER_SEED", int, 0)
    if seed < 0:
        raise ImproperlyConfigured(f"HEADROOM_REPLAN_SOLVER_SEED must be 0 or more, got {seed}")
    return ReplanSettings(
        time_limit_s=_positive(
            "HEADROOM_REPLAN_TIME_LIMIT_S", _read("HEADROOM_REPLAN_TIME_LIMIT_S", float, 6.0)
        ),
        band_time_limit_s=_positive(
            "HEADROOM_REPLAN_BAND_TIME_LIMIT_S",
            _read("HEADROOM_REPLAN_BAND_TIME_LIMIT_S", float, 1.5),
        ),
        solver_workers=_positive(
            "HEADROOM_REPLAN_SOLVER_WORKERS", _read("HEADROOM_REPLAN_SOLVER_WORKERS", int, 2)
        ),
        solver_seed=seed,
        lock_ttl_s=_positive(
            "HEADROOM_PLANNER_LOCK_TTL_S", _read("HEADROOM_PLANNER_LOCK_TTL_S", float, 900.0)
        ),
        band_low=low,
        band_high=high,
        horizon_hours=_positive(
            "HEADROOM_FORECAST_HORIZON_HOURS", _read("HEADROOM_FORECAST_HORIZON_HOURS", int, 168)
        ),
        history_days=_positive(
            "HEADROOM_FORECAST_HISTORY_DAYS", _read("HEADROOM_FORECAST_HISTORY_DAYS", int, 56)
        ),
    )
