"""Finance settings, read at call time with ``controlplane.core.conf`` (the Django setting of
the same name, else the environment variable, else the default below; a malformed value is an
error).

- ``HEADROOM_FINANCE_MAX_SOLVES`` (1,000): the most placement solves one snapshot's sizing may
  run, over its three quantiles together (``planner.forecast.finance.size_days_by_solve``),
  the sizing quantile first, then the band's low and high edges.
  Past it a run of days not yet proven takes the fleet of its busiest day (an upper bound) and
  the snapshot says so in its notes.
- ``HEADROOM_FINANCE_SOLVE_TIME_LIMIT_S`` (the re-plan's band limit,
  ``HEADROOM_REPLAN_BAND_TIME_LIMIT_S``, 1.5): time limit of each of those solves, seconds.
- ``HEADROOM_FINANCE_REPORT_CACHE_BYTES`` (33,554,432: 32 MiB): the most bytes of stored
  reports one process keeps parsed in memory; the least recently read go first.
- ``HEADROOM_FINANCE_MAX_REPORTS`` (200): the most stored reports kept per snapshot; storing
  one more deletes the least recently read.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.core.conf import setting_int, setting_number
from controlplane.plans.conf import replan_settings


@dataclass(frozen=True)
class FinanceSettings:
    """Checked finance settings (units in the names)."""

    max_solves: int
    solve_time_limit_s: float
    report_cache_bytes: int
    max_reports: int


def finance_settings() -> FinanceSettings:
    """The current finance settings, checked."""
    band_limit = replan_settings().band_time_limit_s
    return FinanceSettings(
        max_solves=setting_int("HEADROOM_FINANCE_MAX_SOLVES", 1000, positive=True),
        solve_time_limit_s=setting_number(
            "HEADROOM_FINANCE_SOLVE_TIME_LIMIT_S", band_limit, positive=True
        ),
        report_cache_bytes=setting_int(
            "HEADROOM_FINANCE_REPORT_CACHE_BYTES", 32 * 1024 * 1024, positive=True
        ),
        max_reports=setting_int("HEADROOM_FINANCE_MAX_REPORTS", 200, positive=True),
    )
