"""Finance settings, read at call time with ``controlplane.core.conf`` (the Django setting of
the same name, else the environment variable, else the default below; a malformed value is an
error).

- ``HEADROOM_FINANCE_MAX_SOLVES`` (1,000): the most placement solves one snapshot's sizing may
  run, over its three quantiles together (``planner.forecast.finance.size_days_by_solve``),
  half for the sizing quantile, half of the rest for the band's low edge, the remainder for its
  high edge. Past it each day of a run not yet proven takes the cheapest fleet solved for a
  demand at least its own (an upper bound), and the snapshot says so in its notes.
- ``HEADROOM_FINANCE_SOLVE_BUDGET_S`` (300): the most seconds those solves may take together;
  past it, as past the count.
- ``HEADROOM_FINANCE_SOLVE_TIME_LIMIT_S`` (the re-plan's band limit,
  ``HEADROOM_REPLAN_BAND_TIME_LIMIT_S``, 1.5): time limit of each of those solves, seconds.
- ``HEADROOM_FINANCE_REPORT_CACHE_BYTES`` (8,388,608: 8 MiB): the most stored reports one
  process keeps parsed in memory, counted in bytes of their JSON; the least recently read go
  first. A report larger than a quarter of it is parsed for its request and not kept.
- ``HEADROOM_FINANCE_REPORT_STORE_BYTES`` (8,388,608: 8 MiB) and ``HEADROOM_FINANCE_MAX_REPORTS``
  (200): the most bytes (of JSON) and the most rows of stored reports, over all snapshots;
  storing one more evicts the least recently read. A report larger than a quarter of the
  bytes is computed for its request and not stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.core.conf import setting_int, setting_number
from controlplane.plans.conf import replan_settings


@dataclass(frozen=True)
class FinanceSettings:
    """Checked finance settings (units in the names)."""

    max_solves: int
    solve_budget_s: float
    solve_time_limit_s: float
    report_cache_bytes: int
    report_store_bytes: int
    max_reports: int


def finance_settings() -> FinanceSettings:
    """The current finance settings, checked."""
    band_limit = replan_settings().band_time_limit_s
    return FinanceSettings(
        max_solves=setting_int("HEADROOM_FINANCE_MAX_SOLVES", 1000, positive=True),
        solve_budget_s=setting_number("HEADROOM_FINANCE_SOLVE_BUDGET_S", 300.0, positive=True),
        solve_time_limit_s=setting_number(
            "HEADROOM_FINANCE_SOLVE_TIME_LIMIT_S", band_limit, positive=True
        ),
        report_cache_bytes=setting_int(
            "HEADROOM_FINANCE_REPORT_CACHE_BYTES", 8 * 1024 * 1024, positive=True
        ),
        report_store_bytes=setting_int(
            "HEADROOM_FINANCE_REPORT_STORE_BYTES", 8 * 1024 * 1024, positive=True
        ),
        max_reports=setting_int("HEADROOM_FINANCE_MAX_REPORTS", 200, positive=True),
    )
