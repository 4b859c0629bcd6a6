"""From forecast to demand: the request rates a re-plan sizes for.

The placement problem's demands come from the workload profiles (``problem_export``). This step
replaces each demand's ``requests_per_s`` by the forecast where there is history, and builds
the two extra problems at the band's low and high edges that each plan prices.

- **History.** Request rates per (tenant, model, region) come from telemetry through
  :func:`rate_history`. A group of demands of one tenant and model from one origin region (its
  workload classes) is fitted as one series with ``planner.forecast.fit_demand``; the group's
  class mix stays as the profiles declare it, and each demand is scaled by
  forecast peak / declared total.
- **No history, or too little** (fewer hours than the forecast needs): the declared workload
  profile stands, unchanged: the demand is exactly what ``problem_export`` wrote.
- **Quantile per tier.** A group is sized for the peak, over the horizon, of its tier's
  ``forecast_quantile`` of the band (``Forecast.peak``: the p99 hour of each week of that
  quantile); the band's low and high edges (settings) give the two pricing problems.
- **Telemetry profiles stand for the whole pool.** Where a tenant has a telemetry-derived
  profile for a model and origin region, that profile measures all its traffic there, so the
  declared (per-class) profiles of the same group are left out; counting both would plan the
  traffic twice.
- **Pools telemetry cannot split.** A telemetry profile that names ``pool_tenants`` measured
  a pool whose tenants the serving metrics cannot tell apart (no gateway, no request log): it
  is the pool's whole demand, so the other named tenants' demands for the same model and
  region are left out, and the plan's notes say so.
- **Stable inputs.** The forecast starts at the start of the current UTC day and the history
  ends there, so re-plans within a day see the same forecast and, with nothing else changed,
  the same inputs hash (no new plan version).

Rates are requests/s; a demand sized from history carries a ``forecast`` field (extra fields
are allowed by ``placement-v1``) saying how: source, quantile, declared rate, band edges,
hours of history, weekly growth, and the lasting level shifts the fit re-levelled at (where
it found any).
"""

from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from controlplane.plans.conf import ReplanSettings
from controlplane.policies.models import Tier, WorkloadProfile
from controlplane.telemetry.selectors import request_rate_history
from planner.errors import PlannerInputError
from planner.forecast import HOURS_PER_WEEK, LevelShift, fit_demand

# (tenant, model, region) → (timestamps in UTC epoch seconds, requests/s at each).
RateHistory = Mapping[tuple[str, str, str], tuple[Sequence[float], Sequence[float]]]

SOURCE_DECLARED = "declared"
SOURCE_TELEMETRY = "telemetry"
# Significant digits kept of a forecast rate: the problem document stays readable and its hash
# does not depend on the last bits of a float.
RATE_DIGITS = 6
# The quantile of a demand whose tier the database no longer has (the tier field's default).
DEFAULT_QUANTILE = 0.9


def rate_history(*, start: datetime, end: datetime) -> RateHistory:
    """Request-rate history in [start, end) per (tenant, model, region), from the telemetry
    store (``controlplane.telemetry.selectors.request_rate_history``)."""
    history: RateHistory = request_rate_history(start=start, end=end)
    return history


def forecast_anchor(now: datetime) -> datetime:
    """Where the history ends and the forecast starts: the start of ``now``'s UTC day."""
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class DemandForecast:
    """The demands sized for re-planning, and what the band's edges would need.

    ``problem`` has each tier's quantile; ``low`` and ``high`` the same problem at the band's
    edges (None where no demand has history: the edges are then the planned problem itself).
    ``quantiles`` maps tier name to the quantile it is sized for; ``sources`` counts demands by
    where their rate came from; ``notes`` are sentences for the plan's explanation.
    """

    problem: dict[str, Any]
    low: dict[str, Any] | None
    high: dict[str, Any] | None
    anchor: datetime
    horizon_hours: int
    band_low: float
    band_high: float
    quantiles: dict[str, float]
    sources: dict[str, int]
    notes: list[str] = field(default_factory=list)
    #: The demand ids counted in ``sources``, by source (each list sorted).
    demand_sources: dict[str, list[str]] = field(default_factory=dict)

    def band_summary(self) -> dict[str, Any]:
        """The plan's ``forecast_band`` document, before the edges' costs are added."""
        return {
            "anchor": self.anchor.isoformat(),
            "horizon_hours": self.horizon_hours,
            "quantiles": dict(sorted(self.quantiles.items())),
            "sources": dict(sorted(self.sources.items())),
            "demand_sources": {k: sorted(v) for k, v in sorted(self.demand_sources.items())},
            "low": {"quantile": self.band_low},
            "high": {"quantile": self.band_high},
        }


def _rounded(value: float) -> float:
    return float(f"{value:.{RATE_DIGITS}g}")


def _profile_sources() -> dict[str, str]:
    """Source (declared or telemetry) of each current profile, by the demand id the export
    gives it (``tenant/model/class``, ``@region`` when the profile names its origin)."""
    return {demand_id: p.source for demand_id, p in _current_profiles().items()}


def _current_profiles() -> dict[str, WorkloadProfile]:
    """Each current profile, by the demand id the export gives it."""
    current: dict[tuple[int, int, int, int | None], WorkloadProfile] = {}
    profiles = WorkloadProfile.objects.select_related(
        "tenant", "model", "workload_class", "region"
    ).order_by("tenant_id", "model_id", "workload_class_id", "region_id", "-version")
    for profile in profiles:
        key = (profile.tenant_id, profile.model_id, profile.workload_class_id, profile.region_id)
        current.setdefault(key, profile)
    out: dict[str, WorkloadProfile] = {}
    for profile in current.values():
        demand_id = f"{profile.tenant.name}/{profile.model.name}/{profile.workload_class.name}"
        if profile.region is not None:
            demand_id += f"@{profile.region.name}"
        out[demand_id] = profile
    return out


def _pool_wide(demands: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """``demands`` without those a pool-wide telemetry profile already counts, and a note per
    such pool."""
    profiles = _current_profiles()
    covered: set[tuple[str, str, str]] = set()
    notes = []
    for demand_id, profile in sorted(profiles.items()):
        if profile.source != SOURCE_TELEMETRY or not profile.pool_tenants:
            continue
        region = profile.region.name if profile.region else profile.tenant.home_region.name
        others = [name for name in profile.pool_tenants if name != profile.tenant.name]
        covered.update((name, profile.model.name, region) for name in others)
        notes.append(
            f"pool {profile.model.name} in {region}: telemetry cannot tell tenants "
            f"{', '.join(profile.pool_tenants)} apart; planned as one demand ({demand_id})"
        )
    kept = [d for d in demands if (d["tenant"], d["model"], d["home_region"]) not in covered]
    return kept, notes


@dataclass(frozen=True)
class GroupForecast:
    """One group's forecast: peak requests/s over the horizon at each quantile asked for, and
    what the fit saw (observed hours, weekly growth, lasting level shifts, whether the history
    sufficed)."""

    peaks: dict[float, float]
    sufficient_history: bool
    history_hours: int
    weekly_growth: float
    level_shifts: tuple[LevelShift, ...] = ()


# Fits by (digest of the series, declared rate, forecast start, hours, quantiles). The history
# window ends at the start of the day, so every re-plan of a day sees the same series: a
# worker re-planning hourly fits each group once a day. Bounded; oldest entries leave first.
_FORECASTS: OrderedDict[tuple[Any, ...], GroupForecast] = OrderedDict()
FORECAST_CACHE_SIZE = 4096


def group_forecast(
    series: tuple[Sequence[float], Sequence[float]],
    *,
    declared_rate: float,
    start: float,
    hours: int,
    levels: tuple[float, ...],
) -> GroupForecast:
    """Fit one group's rate history and take the peak, over ``hours`` from ``start`` (epoch
    s), of each quantile in ``levels`` (``Forecast.peak``: the p99 hour of each week; the
    highest week). Raises ``PlannerInputError`` for a history the forecast refuses."""
    timestamps = np.asarray(series[0], dtype=np.float64)
    rates = np.asarray(series[1], dtype=np.float64)
    digest = hashlib.sha256(timestamps.tobytes() + b"|" + rates.tobytes()).hexdigest()
    key = (digest, declared_rate, start, hours, levels)
    cached = _FORECASTS.get(key)
    if cached is not None:
        _FORECASTS.move_to_end(key)
        return cached
    model = fit_demand(timestamps, rates, declared_rate=declared_rate)
    forecast = model.forecast(start, hours)
    window = min(HOURS_PER_WEEK, hours)
    result = GroupForecast(
        peaks={q: float(forecast.peak(q, window=window).max()) for q in levels},
        sufficient_history=model.sufficient_history,
        history_hours=model.history_hours,
        weekly_growth=model.weekly_growth,
        level_shifts=model.level_shifts,
    )
    _FORECASTS[key] = result
    while len(_FORECASTS) > FORECAST_CACHE_SIZE:
        _FORECASTS.popitem(last=False)
    return result


def demand_forecast(
    *,
    problem: Mapping[str, Any],
    now: datetime,
    settings: ReplanSettings,
    history: RateHistory | None,
) -> DemandForecast:
    """Size ``problem``'s demands from the forecast (see the module docstring).

    ``problem`` is not changed; the returned problems are copies. ``history`` is what
    :func:`rate_history` returned for the window ending at :func:`forecast_anchor` (None or
    empty: the declared profiles stand).
    """
    anchor = forecast_anchor(now)
    planned = copy.deepcopy(dict(problem))
    quantiles = {tier.name: tier.forecast_quantile for tier in Tier.objects.all()}
    notes: list[str] = []

    demands: list[dict[str, Any]] = list(planned.get("demands", []))
    demands, pool_notes = _pool_wide(demands)
    if pool_notes:
        notes += pool_notes
        planned["demands"] = demands
    sources = _profile_sources()
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for demand in demands:
        groups[(demand["tenant"], demand["model"], demand["home_region"])].append(demand)
    dropped: list[str] = []
    for key, members in groups.items():
        if any(sources.get(d["id"]) == SOURCE_TELEMETRY for d in members):
            kept = [d for d in members if sources.get(d["id"]) == SOURCE_TELEMETRY]
            dropped += [d["id"] for d in members if d not in kept]
            groups[key] = kept
    if dropped:
        notes.append(
            f"{len(dropped)} declared demands left out where telemetry profiles measure the "
            f"same tenant, model and region: {', '.join(sorted(dropped))}"
        )
        dropped_ids = set(dropped)
        demands = [d for d in demands if d["id"] not in dropped_ids]
        planned["demands"] = demands

    low_rates: dict[str, float] = {}
    high_rates: dict[str, float] = {}
    counts = {SOURCE_DECLARED: 0, SOURCE_TELEMETRY: 0}
    by_source: dict[str, list[str]] = {SOURCE_DECLARED: [], SOURCE_TELEMETRY: []}
    start = anchor.timestamp()
    for key, members in sorted(groups.items()):
        series = history.get(key) if history else None
        if series is None or not members:
            counts[SOURCE_DECLARED] += len(members)
            by_source[SOURCE_DECLARED] += [d["id"] for d in members]
            continue
        declared_total = sum(float(d["requests_per_s"]) for d in members)
        q = quantiles.get(str(members[0].get("tier", "")), DEFAULT_QUANTILE)
        try:
            fitted = group_forecast(
                series,
                declared_rate=declared_total,
                start=start,
                hours=settings.horizon_hours,
                levels=(q, settings.band_low, settings.band_high),
            )
        except PlannerInputError as exc:
            notes.append(f"{'/'.join(key)}: history refused by the forecast ({exc}); declared")
            counts[SOURCE_DECLARED] += len(members)
            by_source[SOURCE_DECLARED] += [d["id"] for d in members]
            continue
        if not fitted.sufficient_history:
            counts[SOURCE_DECLARED] += len(members)
            by_source[SOURCE_DECLARED] += [d["id"] for d in members]
            continue
        counts[SOURCE_TELEMETRY] += len(members)
        by_source[SOURCE_TELEMETRY] += [d["id"] for d in members]
        for demand in members:
            declared = float(demand["requests_per_s"])
            # The profiles' class mix splits the forecast; with no declared rate at all the
            # group's demands share it equally.
            share = declared / declared_total if declared_total > 0 else 1.0 / len(members)
            rate = {level: _rounded(peak * share) for level, peak in fitted.peaks.items()}
            demand["requests_per_s"] = rate[q]
            low_rates[demand["id"]] = rate[settings.band_low]
            high_rates[demand["id"]] = rate[settings.band_high]
            demand["forecast"] = {
                "source": SOURCE_TELEMETRY,
                "quantile": q,
                "declared_requests_per_s": declared,
                "low_requests_per_s": rate[settings.band_low],
                "high_requests_per_s": rate[settings.band_high],
                "history_hours": fitted.history_hours,
                "weekly_growth": round(fitted.weekly_growth, 6),
            }
            if fitted.level_shifts:
                # The lasting steps the history showed, re-levelled rather than read as growth.
                demand["forecast"]["level_shifts"] = [
                    {
                        "at": datetime.fromtimestamp(shift.at, tz=UTC).isoformat(),
                        "factor": round(shift.factor, 4),
                    }
                    for shift in fitted.level_shifts
                ]
    if history:
        planned_keys = set(groups)
        unplanned = sorted("/".join(k) for k in history if k not in planned_keys)
        if unplanned:
            notes.append(
                f"telemetry without a workload profile (no token shape to plan with): "
                f"{', '.join(unplanned)}"
            )

    low = high = None
    if low_rates:
        low, high = _at_rates(planned, low_rates), _at_rates(planned, high_rates)
    return DemandForecast(
        problem=planned,
        low=low,
        high=high,
        anchor=anchor,
        horizon_hours=settings.horizon_hours,
        band_low=settings.band_low,
        band_high=settings.band_high,
        quantiles=quantiles,
        sources=counts,
        notes=notes,
        demand_sources={k: sorted(v) for k, v in by_source.items()},
    )


def plan_demand_sources(
    band: Mapping[str, Any] | None, problem: Mapping[str, Any] | None
) -> dict[str, list[str]]:
    """Which of a plan's demands were sized from declared profiles and which from telemetry,
    by source (ids sorted): from the plan's forecast band, or for a plan stored before the
    band listed them, from its problem (a telemetry-sized demand carries ``forecast``)."""
    stored = (band or {}).get("demand_sources")
    if isinstance(stored, Mapping):
        return {
            SOURCE_DECLARED: sorted(str(d) for d in stored.get(SOURCE_DECLARED, [])),
            SOURCE_TELEMETRY: sorted(str(d) for d in stored.get(SOURCE_TELEMETRY, [])),
        }
    out: dict[str, list[str]] = {SOURCE_DECLARED: [], SOURCE_TELEMETRY: []}
    for demand in (problem or {}).get("demands", []):
        forecast = demand.get("forecast") or {}
        source = SOURCE_TELEMETRY if forecast.get("source") == SOURCE_TELEMETRY else SOURCE_DECLARED
        out[source].append(str(demand["id"]))
    return {k: sorted(v) for k, v in out.items()}


def history_window(*, now: datetime, settings: ReplanSettings) -> tuple[datetime, datetime]:
    """[start, end) of the rate history a re-plan at ``now`` fits its forecast to."""
    end = forecast_anchor(now)
    return end - timedelta(days=settings.history_days), end


def _at_rates(problem: Mapping[str, Any], rates: Mapping[str, float]) -> dict[str, Any]:
    """A copy of ``problem`` with the demands in ``rates`` at those requests/s."""
    out = copy.deepcopy(dict(problem))
    for demand in out.get("demands", []):
        if demand["id"] in rates:
            demand["requests_per_s"] = rates[demand["id"]]
    return out


def planned_requests_per_s(problem: Mapping[str, Any]) -> float:
    """Σ requests_per_s × burst over the problem's demands (requests/s)."""
    return sum(
        float(d["requests_per_s"]) * float(d.get("burst", 1.0)) for d in problem.get("demands", [])
    )
