"""Re-planning settings, read at call time.

Read with ``controlplane.core.conf`` (the Django setting of the same name, else the
environment variable, else the default below; a malformed value is an error).

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
- ``HEADROOM_REPLAN_REQUIRE_TELEMETRY`` (false): once a telemetry pull has stored samples, a
  re-plan in which any demand would be sized from its declared profile (no telemetry rate
  history for it, or too little) fails its run naming those demands, instead of planning from
  the declared figures. Off by default: the embedded quick start plans from declared profiles.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

from controlplane.core.conf import setting_bool, setting_int, setting_number


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
    #: Replay each plan against its demands' arrivals and re-solve until it holds their TTFT
    #: objectives (``planner.placement.verified``), at most this many re-solves.
    replay_verify: bool = True
    replay_max_rounds: int = 4
    #: Fail a re-plan that would size a demand from its declared profile once telemetry has
    #: been pulled (``HEADROOM_REPLAN_REQUIRE_TELEMETRY``).
    require_telemetry: bool = False


def _quantile(name: str, default: float) -> float:
    value = setting_number(name, default)
    if not 0 < value < 1:
        raise ImproperlyConfigured(f"{name} must be in (0, 1), got {value!r}")
    return value


def replan_settings() -> ReplanSettings:
    """The current re-planning settings, checked."""
    low = _quantile("HEADROOM_FORECAST_BAND_LOW", 0.1)
    high = _quantile("HEADROOM_FORECAST_BAND_HIGH", 0.99)
    if low >= high:
        raise ImproperlyConfigured(
            f"HEADROOM_FORECAST_BAND_LOW ({low}) must be below HEADROOM_FORECAST_BAND_HIGH ({high})"
        )
    return ReplanSettings(
        time_limit_s=setting_number("HEADROOM_REPLAN_TIME_LIMIT_S", 6.0, positive=True),
        band_time_limit_s=setting_number("HEADROOM_REPLAN_BAND_TIME_LIMIT_S", 1.5, positive=True),
        solver_workers=setting_int("HEADROOM_REPLAN_SOLVER_WORKERS", 2, positive=True),
        solver_seed=setting_int("HEADROOM_REPLAN_SOLVER_SEED", 0, minimum=0),
        lock_ttl_s=setting_number("HEADROOM_PLANNER_LOCK_TTL_S", 900.0, positive=True),
        band_low=low,
        band_high=high,
        horizon_hours=setting_int("HEADROOM_FORECAST_HORIZON_HOURS", 168, positive=True),
        history_days=setting_int("HEADROOM_FORECAST_HISTORY_DAYS", 56, positive=True),
        replay_verify=setting_bool("HEADROOM_REPLAY_VERIFY", True),
        replay_max_rounds=setting_int("HEADROOM_REPLAY_MAX_ROUNDS", 4, minimum=0),
        require_telemetry=setting_bool("HEADROOM_REPLAN_REQUIRE_TELEMETRY", False),
    )
