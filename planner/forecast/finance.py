"""Finance projection: replica-hours, GPU-hours and cost by month, region and GPU type.

Capacity planning hands finance its numbers: how many replica-hours of which accelerator, in
which region, month by month, and how much of it to commit to (reserved capacity, paid every
hour whether used or not) against buying on demand. The input is the hourly count of required
replicas of each pool (a region, a GPU type and a replica shape in GPUs), from a forecast
through a sizing function (``replicas_from_forecast``) or given outright.

Reservations are counted in GPUs of one type in one region, shared by every replica shape
there (a 4-GPU replica uses four reserved GPUs), and hold for the whole horizon. The rule that
sets them (``optimal_commitment``): reserve the k-th GPU exactly when it is needed in more than
r/o of the hours, r the reserved and o the on-demand price per GPU-hour. Proof: with G_t the
GPUs needed in hour t of T and K reserved, the cost is

    C(K) = r·K·T + o·Σ_t max(0, G_t − K),

and since max(0, G − K) − max(0, G − K − 1) is 1 when G ≥ K + 1 and 0 otherwise,

    C(K + 1) − C(K) = r·T − o·N(K + 1),   N(k) = #{t : G_t ≥ k}.

N(k) never increases with k, so these differences never decrease: C is convex in K. Adding the
k-th GPU lowers the cost exactly when N(k)/T > r/o, so the least-cost commitment is the largest
k with N(k)/T > r/o (zero if there is none); ties, N(k)/T = r/o, cost the same either way and are
left on demand. Equivalently K* is the m-th largest G_t, m = ⌊T·r/o⌋ + 1 (zero when m > T): a
GPU needed at least m hours is worth reserving. With r ≥ o nothing is worth reserving.

Months ahead (``rolling_peak``, ``size_days_by_solve``): a plan is sized for the peak of its
re-plan horizon (``Forecast.peak``: the p99 hour of the week ahead), and the fleet re-plans
every day, so the replicas running on day D are the placement re-solved at the peak of the week
starting on D, warm-started from the plan in force; consecutive days whose least and greatest
demand solve to the same fleet share it (proof at ``size_days_by_solve``).

Showback (``showback_split``): a pool's cost splits into the share each tenant's load uses (its
replica-hours at the target utilisation) and the idle headroom left over (floors, burst,
rounding), which is shared out in proportion to the load.

The price of each promise (``promise_ladder``): the same problem re-solved one promise lighter
at a time (zone survival, then N+1, then burst); the cost difference between two rungs is the
price of the promise dropped between them, shared among the demands by the load each promised
(``promise_weights``).

Units: prices in currency per GPU-hour (any one currency); hours are whole UTC hours given as
epoch seconds of their start; months are calendar months in UTC ("2025-04"), weeks ISO weeks
starting on Monday ("2025-W14"), days UTC dates ("2025-04-01"), quarters calendar quarters in
UTC ("2025-Q2": April to June). Peak tokens per minute by
month (``tokens_per_minute_by_month``) use the seeds' chain through
``planner.capacity.workload.tokens_per_minute``.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from planner.capacity import _checks
from planner.capacity.workload import tokens_per_minute
from planner.errors import PlannerInputError
from planner.forecast.demand import HOUR_S, FloatArray, Forecast, IntArray, check_timestamps

PoolKey = tuple[str, str]
"""(region, GPU type): the unit a reservation is bought in."""

Period = Literal["day", "week", "month", "quarter"]
PERIODS: tuple[Period, ...] = ("day", "week", "month", "quarter")
DAY_S = 24 * HOUR_S
# Hours in an average month (8,760 / 12): what a promise's $/h costs "per month".
HOURS_PER_MONTH = 730


# -- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuPrice:
    """Prices of one GPU type in one region, currency per GPU-hour.

    ``reserved`` is the effective hourly rate of a commitment (a term's fee spread over its
    hours), paid for every hour of the horizon whether the GPU is busy or not.
    """

    on_demand: float
    reserved: float


@dataclass(frozen=True, eq=False)
class PoolDemand:
    """Required replicas of one shape in one region, hour by hour.

    ``replicas[i]`` is the whole number of replicas needed in hour i of the projection's
    timestamps; each replica holds ``gpus_per_replica`` GPUs of ``gpu_type``.
    """

    region: str
    gpu_type: str
    gpus_per_replica: int
    replicas: npt.ArrayLike


def replicas_from_forecast(forecast: Forecast, q: float, size: Callable[[float], int]) -> IntArray:
    """Replicas needed in each forecast hour: ``size`` applied to the band at quantile ``q``.

    ``size`` maps a rate (requests/s, the forecast's unit) to a whole number of replicas, for
    example a ``planner.capacity.sizing.replicas_needed`` with the workload's tokens per request
    and the replica's benchmarked throughput bound in. Sizing for a high quantile buys the
    headroom the band says the demand may need.
    """
    level = _checks.quantile_level("q", q)
    rates = forecast.quantile(level)
    # Hours of equal demand (a flat forecast, idle nights) need sizing once.
    sized: dict[float, int] = {}
    out = np.empty(rates.size, dtype=np.int64)
    for i, rate in enumerate(rates.tolist()):
        if rate not in sized:
            sized[rate] = _replica_count(size(rate), rate)
        out[i] = sized[rate]
    return out


def _replica_count(value: object, rate: float) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise PlannerInputError("size", f"must return a whole number, got {value!r} at {rate!r}")
    count = int(value)
    if count < 0:
        raise PlannerInputError("size", f"must return zero or more, got {count!r} at {rate!r}")
    return count


# -- the reservation rule -----------------------------------------------------------------------


def _gpu_counts(name: str, gpus_needed: npt.ArrayLike) -> IntArray:
    try:
        counts = np.asarray(gpus_needed, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PlannerInputError(name, f"must be an array of whole numbers ({exc})") from exc
    if counts.ndim != 1:
        raise PlannerInputError(name, f"must be one-dimensional, got shape {counts.shape}")
    if not np.all(np.isfinite(counts)):
        raise PlannerInputError(name, "must hold finite numbers only (no NaN or infinity)")
    if np.any(counts < 0):
        raise PlannerInputError(name, "counts must be zero or more")
    if np.any(counts != np.floor(counts)):
        raise PlannerInputError(name, "counts must be whole numbers")
    return counts.astype(np.int64)


def _prices(
    reserved_name: str, reserved_price: float, on_demand_name: str, on_demand_price: float
) -> tuple[float, float]:
    return (
        _checks.positive(reserved_name, reserved_price),
        _checks.positive(on_demand_name, on_demand_price),
    )


def optimal_commitment(
    gpus_needed: npt.ArrayLike, reserved_price: float, on_demand_price: float
) -> int:
    """GPUs to reserve for least total cost: the largest k needed in more than r/o of the hours.

    ``gpus_needed`` is the hourly count of GPUs (whole, ≥ 0) over the horizon the commitment
    covers; prices per GPU-hour, > 0. See the module docstring for the proof. The threshold is
    computed in exact rational arithmetic, so a tie (N(k)/T = r/o exactly) is never broken by
    rounding: it stays on demand.
    """
    counts = _gpu_counts("gpus_needed", gpus_needed)
    reserved, on_demand = _prices(
        "reserved_price", reserved_price, "on_demand_price", on_demand_price
    )
    return _optimal_level(counts, reserved, on_demand)


def _optimal_level(counts: IntArray, reserved: float, on_demand: float) -> int:
    hours = int(counts.size)
    # N(k) > T·r/o  ⇔  N(k) ≥ ⌊T·r/o⌋ + 1 = m, since N(k) is a whole number.
    m = math.floor(hours * _as_written(reserved) / _as_written(on_demand)) + 1
    if m > hours:
        return 0
    # The m-th largest count: every k up to it is needed in at least m hours.
    return int(np.partition(counts, hours - m)[hours - m])


def reservation_cost(
    gpus_needed: npt.ArrayLike, commitment: int, reserved_price: float, on_demand_price: float
) -> float:
    """Total cost of a horizon with ``commitment`` GPUs reserved: r·K·T + o·Σ max(0, G_t − K).

    Currency, for prices per GPU-hour; ``gpus_needed`` as for ``optimal_commitment``.
    """
    counts = _gpu_counts("gpus_needed", gpus_needed)
    level = _checks.non_negative_int("commitment", commitment)
    reserved, on_demand = _prices(
        "reserved_price", reserved_price, "on_demand_price", on_demand_price
    )
    overflow = int(np.sum(np.maximum(counts - level, 0)))
    return reserved * level * counts.size + on_demand * overflow


# -- reserved, on demand and spot ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MixHours:
    """Each hour's GPUs by how they are bought, for a reservation of ``reserved`` GPUs.

    ``reserved_used[t]`` of the hour's GPUs run on the reservation, ``on_demand[t]`` on demand,
    ``spot[t]`` on spot; the three add up to the hour's need. ``reserved_idle[t]`` reserved
    GPUs are paid for and not needed.
    """

    reserved: int
    reserved_used: IntArray
    on_demand: IntArray
    spot: IntArray
    reserved_idle: IntArray


def _mix_series(
    gpus_needed: npt.ArrayLike, interruptible: npt.ArrayLike | None
) -> tuple[IntArray, IntArray]:
    total = _gpu_counts("gpus_needed", gpus_needed)
    if interruptible is None:
        return total, np.zeros_like(total)
    spare = _gpu_counts("interruptible", interruptible)
    if spare.shape != total.shape or np.any(spare > total):
        raise PlannerInputError(
            "interruptible", "must have one count per hour, each at most that hour's GPUs needed"
        )
    return total, spare


def _spot_rate(spot_price: float | None, on_demand: float) -> float:
    """The price interruptible GPUs beyond the reservation pay: spot, or on demand when there
    is no spot price or it is dearer."""
    if spot_price is None:
        return on_demand
    return min(_checks.non_negative("spot_price", spot_price), on_demand)


def _as_written(price: float) -> Fraction:
    """A price as the decimal it was written as (0.01 is 1/100, not the float nearest it), so
    that a tie in dollars stays a tie."""
    return Fraction(repr(float(price)))


def optimal_mix(
    gpus_needed: npt.ArrayLike,
    interruptible: npt.ArrayLike | None,
    *,
    reserved_price: float,
    on_demand_price: float,
    spot_price: float | None,
) -> int:
    """GPUs to reserve for least total cost when interruptible demand may run on spot.

    ``gpus_needed[t]`` is the hour's GPUs (whole, ≥ 0) and ``interruptible[t]`` (≤ it; None:
    none) the part of them that may be reclaimed without breaking a promise; the rest, the
    firm part F_t = G_t − I_t, runs on reserved or on-demand GPUs only. Spot capacity can be
    taken back at any time, so it never covers a firm GPU. Prices per GPU-hour: r reserved,
    o on demand, s spot (None: no spot; a spot price above on demand counts as on demand).

    With K reserved GPUs an hour costs o·max(0, F_t − K) + s·max(0, G_t − max(K, F_t)): the
    reservation serves the firm GPUs first, then interruptible ones; firm GPUs beyond it go on
    demand, interruptible ones on spot. The total, C(K) = r·K·T + Σ_t (that), has

        C(K + 1) − C(K) = r·T − [(o − s)·N_F(K + 1) + s·N_G(K + 1)],

    N_F(k) = #{t : F_t ≥ k}, N_G(k) = #{t : G_t ≥ k}: the (K + 1)-th reserved GPU saves o in
    an hour where it serves a firm GPU and s where it serves an interruptible one. The
    bracket never increases with k (o ≥ s ≥ 0), so C is convex and the least-cost K is the
    largest k whose bracket exceeds r·T (0 if none; a tie stays off the reservation). With
    no spot price s = o and the rule is ``optimal_commitment``'s: N_G(k) > T·r/o. Compared in
    exact rational arithmetic, as there.
    """
    total, spare = _mix_series(gpus_needed, interruptible)
    reserved, on_demand = _prices(
        "reserved_price", reserved_price, "on_demand_price", on_demand_price
    )
    spot = _spot_rate(spot_price, on_demand)
    hours = int(total.size)
    if hours == 0:
        return 0
    firm = np.sort(total - spare)
    every = np.sort(total)
    r, o, sp = _as_written(reserved), _as_written(on_demand), _as_written(spot)
    fee = r * hours

    def saves(k: int) -> bool:
        n_firm = hours - int(np.searchsorted(firm, k, side="left"))
        n_all = hours - int(np.searchsorted(every, k, side="left"))
        return (o - sp) * n_firm + sp * n_all > fee

    # The largest k in [0, max G] that saves (saves(k) holds for every k up to it).
    lo, hi = 0, int(every[-1])
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if saves(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def mix_hours(
    gpus_needed: npt.ArrayLike, interruptible: npt.ArrayLike | None, reserved: int
) -> MixHours:
    """Each hour's GPUs split over a reservation of ``reserved`` GPUs, on demand and spot by
    ``optimal_mix``'s rule: the reservation serves firm GPUs first, firm GPUs beyond it go on
    demand and interruptible ones beyond it on spot. Give ``interruptible`` None (or zeros)
    where no spot price is stored: then everything beyond the reservation is on demand."""
    total, spare = _mix_series(gpus_needed, interruptible)
    level = _checks.non_negative_int("reserved", reserved)
    firm = total - spare
    used = np.minimum(total, level)
    return MixHours(
        reserved=level,
        reserved_used=used,
        on_demand=np.maximum(firm - level, 0),
        spot=np.maximum(total - np.maximum(firm, level), 0),
        reserved_idle=level - used,
    )


# -- the projection -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spend:
    """Usage and cost of a slice of the projection; adds up across slices.

    GPU-hours: ``gpu_hours`` needed in all = ``reserved_used_gpu_hours`` (served by the
    reservation) + ``on_demand_gpu_hours``; ``reserved_gpu_hours`` are paid for, used or idle.
    Costs in currency: ``cost_all_on_demand`` buys every needed GPU-hour on demand;
    ``cost_reserved`` + ``cost_on_demand`` is the cost with the reservation.
    """

    replica_hours: int
    gpu_hours: int
    reserved_gpu_hours: int
    reserved_used_gpu_hours: int
    on_demand_gpu_hours: int
    cost_all_on_demand: float
    cost_reserved: float
    cost_on_demand: float

    @property
    def cost_with_reservation(self) -> float:
        """Reserved fee plus on-demand overflow."""
        return self.cost_reserved + self.cost_on_demand

    @property
    def saving(self) -> float:
        """All-on-demand cost less the cost with the reservation (negative: it costs more)."""
        return self.cost_all_on_demand - self.cost_with_reservation

    @property
    def idle_reserved_gpu_hours(self) -> int:
        """Reserved GPU-hours paid for and not needed."""
        return self.reserved_gpu_hours - self.reserved_used_gpu_hours

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            replica_hours=self.replica_hours + other.replica_hours,
            gpu_hours=self.gpu_hours + other.gpu_hours,
            reserved_gpu_hours=self.reserved_gpu_hours + other.reserved_gpu_hours,
            reserved_used_gpu_hours=self.reserved_used_gpu_hours + other.reserved_used_gpu_hours,
            on_demand_gpu_hours=self.on_demand_gpu_hours + other.on_demand_gpu_hours,
            cost_all_on_demand=self.cost_all_on_demand + other.cost_all_on_demand,
            cost_reserved=self.cost_reserved + other.cost_reserved,
            cost_on_demand=self.cost_on_demand + other.cost_on_demand,
        )


_NO_SPEND = Spend(0, 0, 0, 0, 0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class CostLine:
    """One calendar month of one region's GPU type: its hours in the horizon and its spend."""

    month: str
    region: str
    gpu_type: str
    hours: int
    reserved_gpus: int
    spend: Spend


@dataclass(frozen=True)
class Commitment:
    """GPUs reserved for a region's GPU type over the whole horizon.

    ``optimal`` is true when the level came from the least-cost rule rather than being given;
    ``break_even`` is r/o, the share of hours above which a GPU is worth reserving.
    """

    region: str
    gpu_type: str
    gpus: int
    optimal: bool
    break_even: float


@dataclass(frozen=True)
class FinanceProjection:
    """Cost lines by month, region and GPU type, and the commitments they were priced with."""

    lines: tuple[CostLine, ...]
    commitments: tuple[Commitment, ...]

    def total(
        self, *, month: str | None = None, region: str | None = None, gpu_type: str | None = None
    ) -> Spend:
        """Sum of the lines matching every filter given (all lines with none)."""
        spend = _NO_SPEND
        for line in self.lines:
            if month is not None and line.month != month:
                continue
            if region is not None and line.region != region:
                continue
            if gpu_type is not None and line.gpu_type != gpu_type:
                continue
            spend = spend + line.spend
        return spend

    @property
    def months(self) -> tuple[str, ...]:
        """Calendar months of the horizon, in order."""
        return tuple(sorted({line.month for line in self.lines}))


def month_labels(timestamps: npt.ArrayLike) -> npt.NDArray[np.str_]:
    """UTC calendar month ("2025-04") of each epoch-second timestamp."""
    seconds = check_timestamps("timestamps", timestamps).astype(np.int64)
    return seconds.astype("datetime64[s]").astype("datetime64[M]").astype(str)


def check_period(name: str, period: object) -> Period:
    """``period`` if it is one of ``PERIODS``; else a ``PlannerInputError`` naming ``name``."""
    for kind in PERIODS:
        if period == kind:
            return kind
    raise PlannerInputError(name, f"must be one of {', '.join(PERIODS)}, got {period!r}")


def period_starts(timestamps: npt.ArrayLike, period: Period) -> IntArray:
    """Epoch seconds of the start of the UTC day, ISO week (Monday), month or quarter (January,
    April, July, October) of each timestamp."""
    kind = check_period("period", period)
    seconds = check_timestamps("timestamps", timestamps).astype(np.int64)
    days = seconds // DAY_S
    if kind == "day":
        return days * DAY_S
    if kind == "week":
        # Epoch day 0 (1970-01-01) was a Thursday: Monday is 3 days earlier in the week.
        return (days - (days + 3) % 7) * DAY_S
    months = seconds.astype("datetime64[s]").astype("datetime64[M]")
    if kind == "quarter":
        # Months since 1970-01, which began a quarter: back to the quarter's first month.
        index = months.astype(np.int64)
        months = (index - index % 3).astype("datetime64[M]")
    return months.astype("datetime64[s]").astype(np.int64)


def period_label(start: int, period: Period) -> str:
    """The label of the period starting at ``start`` (epoch s): "2025-04-01", "2025-W14",
    "2025-04", "2025-Q2"."""
    kind = check_period("period", period)
    moment = datetime.fromtimestamp(int(start), tz=UTC)
    if kind == "day":
        return moment.strftime("%Y-%m-%d")
    if kind == "week":
        year, week, _ = moment.isocalendar()
        return f"{year:04d}-W{week:02d}"
    if kind == "quarter":
        return f"{moment.year:04d}-Q{(moment.month - 1) // 3 + 1}"
    return moment.strftime("%Y-%m")


def period_end(start: int, period: Period) -> int:
    """Epoch seconds of the end (exclusive) of the period starting at ``start``."""
    kind = check_period("period", period)
    if kind == "day":
        return int(start) + DAY_S
    if kind == "week":
        return int(start) + 7 * DAY_S
    moment = datetime.fromtimestamp(int(start), tz=UTC)
    index = moment.year * 12 + moment.month - 1 + (3 if kind == "quarter" else 1)
    return int(datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC).timestamp())


def period_labels(timestamps: npt.ArrayLike, period: Period) -> npt.NDArray[np.str_]:
    """The label (``period_label``) of the day, ISO week, month or quarter of each timestamp."""
    starts = period_starts(timestamps, period)
    names = {int(start): period_label(int(start), period) for start in np.unique(starts)}
    return np.array([names[int(start)] for start in starts], dtype=np.str_)


def _check_hours(timestamps: npt.ArrayLike) -> IntArray:
    ts = check_timestamps("timestamps", timestamps)
    if ts.size == 0:
        raise PlannerInputError("timestamps", "the horizon must hold at least one hour")
    if np.any(ts % HOUR_S != 0) or np.any(np.diff(ts) != HOUR_S):
        raise PlannerInputError(
            "timestamps", "must be consecutive whole UTC hours (epoch seconds, 3,600 apart)"
        )
    return ts.astype(np.int64)


def project_costs(
    timestamps: npt.ArrayLike,
    pools: Sequence[PoolDemand],
    prices: Mapping[PoolKey, GpuPrice],
    *,
    commitment: Mapping[PoolKey, int] | None = None,
    period: Period = "month",
) -> FinanceProjection:
    """Replica-hours, GPU-hours and cost by month, region and GPU type over an hourly horizon.

    ``timestamps`` are the consecutive hours of the horizon (epoch seconds of each hour's start)
    and every pool's ``replicas`` has one count per hour. ``prices`` gives each (region, GPU
    type) its on-demand and reserved price per GPU-hour. Each (region, GPU type) reserves the
    least-cost number of GPUs over the whole horizon (``optimal_commitment``) unless
    ``commitment`` names its level in GPUs (0 buys everything on demand). The reservation's
    fee falls on every hour of the horizon, so each month pays for its own hours. ``period``
    labels the lines by day, ISO week, month or quarter (the ``month`` field then holds that
    label).
    """
    hours = _check_hours(timestamps)
    kind = check_period("period", period)
    items = tuple(pools)
    _checks.non_empty("pools", items)
    wanted = {} if commitment is None else dict(commitment)

    gpus_by_key: dict[PoolKey, IntArray] = {}
    replicas_by_key: dict[PoolKey, IntArray] = {}
    shapes: set[tuple[str, str, int]] = set()
    for i, pool in enumerate(items):
        name = f"pools[{i}]"
        per_replica = _checks.positive_int(f"{name}.gpus_per_replica", pool.gpus_per_replica)
        shape = (pool.region, pool.gpu_type, per_replica)
        if shape in shapes:
            raise PlannerInputError(name, f"duplicate pool {shape!r}; add its replicas into one")
        shapes.add(shape)
        replicas = _gpu_counts(f"{name}.replicas", pool.replicas)
        if replicas.size != hours.size:
            raise PlannerInputError(
                f"{name}.replicas",
                f"must have one count per hour ({hours.size}), got {replicas.size}",
            )
        key = (pool.region, pool.gpu_type)
        zero = np.zeros(hours.size, dtype=np.int64)
        gpus_by_key[key] = gpus_by_key.get(key, zero) + replicas * per_replica
        replicas_by_key[key] = replicas_by_key.get(key, zero) + replicas

    for key in wanted:
        if key not in gpus_by_key:
            raise PlannerInputError("commitment", f"no pool in {key!r} to reserve for")

    months = period_labels(hours, kind)
    month_names = sorted(set(months.tolist()))
    lines: list[CostLine] = []
    commitments: list[Commitment] = []
    for key in sorted(gpus_by_key):
        region, gpu_type = key
        if key not in prices:
            raise PlannerInputError("prices", f"no price for GPU type {gpu_type!r} in {region!r}")
        price = prices[key]
        name = f"prices[{region}/{gpu_type}]"
        reserved, on_demand = _prices(
            f"{name}.reserved", price.reserved, f"{name}.on_demand", price.on_demand
        )
        gpus = gpus_by_key[key]
        if key in wanted:
            level = _checks.non_negative_int(f"commitment[{region}/{gpu_type}]", wanted[key])
        else:
            level = _optimal_level(gpus, reserved, on_demand)
        commitments.append(
            Commitment(
                region=region,
                gpu_type=gpu_type,
                gpus=level,
                optimal=key not in wanted,
                break_even=reserved / on_demand,
            )
        )
        for month in month_names:
            in_month = months == month
            needed = gpus[in_month]
            served = np.minimum(needed, level)
            overflow = int(np.sum(needed - served))
            gpu_hours = int(np.sum(needed))
            month_hours = int(np.sum(in_month))
            lines.append(
                CostLine(
                    month=month,
                    region=region,
                    gpu_type=gpu_type,
                    hours=month_hours,
                    reserved_gpus=level,
                    spend=Spend(
                        replica_hours=int(np.sum(replicas_by_key[key][in_month])),
                        gpu_hours=gpu_hours,
                        reserved_gpu_hours=level * month_hours,
                        reserved_used_gpu_hours=int(np.sum(served)),
                        on_demand_gpu_hours=overflow,
                        cost_all_on_demand=on_demand * gpu_hours,
                        cost_reserved=reserved * level * month_hours,
                        cost_on_demand=on_demand * overflow,
                    ),
                )
            )
    lines.sort(key=lambda line: (line.month, line.region, line.gpu_type))
    return FinanceProjection(lines=tuple(lines), commitments=tuple(commitments))


# -- months ahead: the plan scaled by the forecast ---------------------------------------------


def rolling_peak(
    rates: npt.ArrayLike, *, hours: int, window: int, step: int = 24, within: float = 0.99
) -> FloatArray:
    """The rate each of ``hours`` hours is sized for when the fleet re-plans every ``step``
    hours for the peak of the ``window`` hours ahead.

    Hour h belongs to re-plan k = h // step, which sizes for the ``within`` percentile of
    ``rates[k·step : k·step + window]`` (``Forecast.peak``'s rule: the p99 hour of a week by
    default). ``rates`` (requests/s, hourly, ≥ 0) must reach ``window`` hours past the last
    re-plan's start, so every window is whole.
    """
    count = _checks.positive_int("hours", hours)
    size = _checks.positive_int("window", window)
    every = _checks.positive_int("step", step)
    pct = _checks.utilization("within", within)
    series = np.asarray(rates, dtype=np.float64)
    if series.ndim != 1 or not np.all(np.isfinite(series)) or np.any(series < 0):
        raise PlannerInputError("rates", "must be a one-dimensional array of finite rates ≥ 0")
    replans = math.ceil(count / every)
    needed = (replans - 1) * every + size
    if series.size < needed:
        raise PlannerInputError(
            "rates",
            f"must hold {needed} hours ({count} sized, a {size}-hour window), got {series.size}",
        )
    windows = np.lib.stride_tricks.sliding_window_view(series[:needed], size)[::every]
    peaks = np.quantile(windows, pct, axis=1)
    return np.repeat(peaks, every)[:count].astype(np.float64)


@dataclass(frozen=True)
class Sizing:
    """The fleet one solve sizes for one demand vector.

    ``replicas``: (zone, shape, replicas) with replicas > 0, sorted; ``routing``: (demand,
    region, shape, share), the share of the demand's rate sent to that region's shape;
    ``cost_per_hour`` in currency. ``exact`` is true when the solve proved its plan optimal and
    left nothing unserved: only then does the bracketing rule below hold.
    """

    replicas: tuple[tuple[str, str, int], ...]
    routing: tuple[tuple[str, str, str, float], ...]
    cost_per_hour: float
    exact: bool


@dataclass(frozen=True)
class DaySizing:
    """Which ``Sizing`` each day is given (``day[i]`` indexes ``sizings``), the solves it took,
    and whether every day's fleet is the one its own solve gives (``exact``; false when the
    solve budget ran out or a solve stopped short of optimal: then a day may carry the fleet of
    a day with more demand, an upper bound)."""

    day: tuple[int, ...]
    sizings: tuple[Sizing, ...]
    solves: int
    exact: bool


def sizing_from_solution(solution: Mapping[str, Any]) -> Sizing:
    """A ``placement-solution/v1``'s fleet as a ``Sizing``: its replicas, each demand's routed
    shares, its cost; exact when the solve proved it optimal with nothing unserved."""
    routed: dict[str, float] = defaultdict(float)
    for row in solution.get("routing", []):
        routed[row["demand"]] += float(row["requests_per_s"])
    routing = tuple(
        sorted(
            (
                str(row["demand"]),
                str(row["region"]),
                str(row["shape"]),
                float(row["requests_per_s"]) / routed[row["demand"]],
            )
            for row in solution.get("routing", [])
            if routed[row["demand"]] > 0 and float(row["requests_per_s"]) > 0
        )
    )
    replicas = tuple(
        sorted(
            (str(r["zone"]), str(r["shape"]), int(r["replicas"]))
            for r in solution.get("replicas", [])
            if int(r["replicas"]) > 0
        )
    )
    return Sizing(
        replicas=replicas,
        routing=routing,
        cost_per_hour=float(solution.get("cost_per_hour") or 0.0),
        exact=solution.get("status") == "optimal"
        and float(solution.get("unserved_requests_per_s") or 0.0) <= 1e-9,
    )


SolveCache = dict[bytes, tuple[FloatArray, Sizing]]
"""Solves by demand vector (its bytes): the vector and its ``Sizing``; shared between calls."""


def size_days_by_solve(
    rates: npt.ArrayLike,
    solve: Callable[[FloatArray], Sizing],
    *,
    max_solves: int,
    cache: SolveCache | None = None,
    stop: Callable[[], bool] | None = None,
) -> DaySizing:
    """The fleet for each day: the placement re-solved at that day's demand, with fewer solves.

    ``rates[d, j]`` is demand j's rate (requests/s, ≥ 0) day d is sized for (the rolling peak
    of its band at the sizing quantile); ``solve(vector)`` re-solves the placement with the
    demands at ``vector`` (warm-started from the plan in force: its replicas as ``previous``).

    The rule that saves solves, for a run of consecutive days with componentwise least demand
    L and greatest U: if the solves at L and U give the same replicas, every day of the run
    gets them. Proof, for a day d with L ≤ d ≤ U and both solves exact: a plan that serves d
    serves L (less load, the same promises), so opt(d) ≥ opt(L) = c; the replicas solved for U
    serve d (its routes scaled down), so opt(d) ≤ c. They are therefore cost-optimal at d, and
    among the cost-optimal plans at d (a subset of those at L, which contains them) they are
    the closest to ``previous``, since they are at L: exactly what the solve at d returns, up
    to the solver's ties. Otherwise the run is halved, down to single days. Identical days are
    solved once (``cache``, which may hold solves of earlier calls).

    After ``max_solves`` new solves (or once ``stop()`` is true, a time budget say), each day
    of a run still unproven takes the cheapest
    fleet solved for a demand at least its own in every component (U's at worst): it serves
    the day, so it is an upper bound, and the result is not ``exact``.
    """
    matrix = np.asarray(rates, dtype=np.float64)
    if matrix.ndim != 2 or not np.all(np.isfinite(matrix)) or np.any(matrix < 0):
        raise PlannerInputError("rates", "must be a days × demands array of finite rates ≥ 0")
    budget = _checks.positive_int("max_solves", max_solves)
    known: SolveCache = {} if cache is None else cache
    days = matrix.shape[0]
    index: dict[int, int] = {}  # id of a Sizing → its place in ``sizings``
    sizings: list[Sizing] = []
    new = 0
    exact = True

    def place(sizing: Sizing) -> int:
        found = index.get(id(sizing))
        if found is None:
            found = index[id(sizing)] = len(sizings)
            sizings.append(sizing)
        return found

    def solved(vector: FloatArray) -> Sizing:
        nonlocal new
        key = vector.tobytes()
        found = known.get(key)
        if found is None:
            sizing = solve(vector.copy())
            if not isinstance(sizing, Sizing):
                raise PlannerInputError("solve", f"must return a Sizing, got {sizing!r}")
            new += 1
            found = known[key] = (vector.copy(), sizing)
        return found[1]

    def bounded(day: FloatArray, upper: Sizing) -> Sizing:
        best = upper
        for vector, sizing in known.values():
            if sizing.cost_per_hour < best.cost_per_hour and np.all(vector >= day):
                best = sizing
        return best

    out = [-1] * days
    # Runs to settle, (−length, start, stop) of consecutive days: the longest first, so that a
    # budget running out leaves runs of even length over the horizon.
    todo = [(-days, 0, days)] if days else []
    while todo:
        _, lo, hi = heapq.heappop(todo)
        run = matrix[lo:hi]
        top, bottom = run.max(axis=0), run.min(axis=0)
        spent = new >= budget or (stop is not None and stop())
        if spent and top.tobytes() not in known:
            # Out of solves: the cheapest known fleet that serves each day.
            exact = False
            fallback = min(
                (s for v, s in known.values() if np.all(v >= top)),
                key=lambda s: s.cost_per_hour,
                default=None,
            )
            if fallback is None:
                fallback = solved(top)
            for d in range(lo, hi):
                out[d] = place(bounded(matrix[d], fallback))
            continue
        upper = solved(top)
        if hi - lo == 1:
            out[lo] = place(upper)
            exact = exact and upper.exact
            continue
        lower = upper if top.tobytes() == bottom.tobytes() else solved(bottom)
        same = lower.replicas == upper.replicas
        if lower is upper or (same and lower.exact and upper.exact):
            out[lo:hi] = [place(upper)] * (hi - lo)
            exact = exact and upper.exact
            continue
        mid = (lo + hi) // 2
        heapq.heappush(todo, (lo - mid, lo, mid))
        heapq.heappush(todo, (mid - hi, mid, hi))
    return DaySizing(day=tuple(out), sizings=tuple(sizings), solves=new, exact=exact)


# -- showback: cost per tenant, idle headroom shared by load ------------------------------------


@dataclass(frozen=True, eq=False)
class ShowbackSplit:
    """Pool costs split over the tenant loads they serve (currency).

    ``direct[i]`` is what load i uses, ``shared[i]`` its part of its pool's idle headroom;
    ``idle[p]`` is pool p's headroom in all and ``unallocated[p]`` the part of it that no load
    was there to share (a pool kept up by its floor alone). For every pool, Σ direct + Σ shared
    + unallocated = its cost.
    """

    direct: FloatArray
    shared: FloatArray
    idle: FloatArray
    unallocated: FloatArray


def showback_split(
    cost: npt.ArrayLike,
    replica_hours: npt.ArrayLike,
    used_replica_hours: npt.ArrayLike,
    pool: npt.ArrayLike,
) -> ShowbackSplit:
    """Split each pool's ``cost`` over ``replica_hours`` by the replica-hours its loads used.

    Load i ran in pool ``pool[i]`` and used ``used_replica_hours[i]`` (requests × replica-seconds
    per request ÷ target utilisation ÷ 3,600). It pays ``cost × used / replica_hours``
    directly; what no load used (idle headroom: the floors, the burst headroom, rounding up to
    whole replicas) is shared in proportion to each load's use. Where the loads add up to more
    than the pool holds (busier than its target utilisation), the whole cost is split by load
    and nothing is idle. Where no load ran, the whole cost is idle and unallocated.
    """
    costs = _non_negative_vector("cost", cost)
    held = _non_negative_vector("replica_hours", replica_hours)
    used = _non_negative_vector("used_replica_hours", used_replica_hours)
    where = np.asarray(pool, dtype=np.int64)
    if held.size != costs.size:
        raise PlannerInputError("replica_hours", f"must have one value per pool ({costs.size})")
    if where.shape != used.shape or np.any(where < 0) or np.any(where >= costs.size):
        raise PlannerInputError("pool", "must give each load the index of a pool")
    load = np.bincount(where, weights=used, minlength=costs.size)
    # The larger of held and load divides: a pool busier than its target is split by load.
    base = np.maximum(held, load)
    with np.errstate(divide="ignore", invalid="ignore"):
        # used / base is at most 1 (base ≥ the pool's load ≥ one load's use), so the ratio
        # stays finite however small both are.
        direct = np.where(base[where] > 0, costs[where] * (used / base[where]), 0.0)
        idle = costs - np.bincount(where, weights=direct, minlength=costs.size)
        idle = np.where(load > 0, np.maximum(idle, 0.0), costs)
        shared = np.where(load[where] > 0, idle[where] * (used / load[where]), 0.0)
    unallocated = np.where(load > 0, 0.0, costs)
    return ShowbackSplit(direct=direct, shared=shared, idle=idle, unallocated=unallocated)


def _non_negative_vector(name: str, values: npt.ArrayLike) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or not np.all(np.isfinite(array)) or np.any(array < 0):
        raise PlannerInputError(name, "must be a one-dimensional array of finite values ≥ 0")
    return array


# -- the price of each promise ------------------------------------------------------------------

PromiseRung = Literal["planned", "without-zone-survival", "without-n+1", "without-burst"]
PROMISE_RUNGS: tuple[PromiseRung, ...] = (
    "planned",
    "without-zone-survival",
    "without-n+1",
    "without-burst",
)
# The promise whose price is the step from the rung before to this one.
RUNG_PROMISE: Mapping[PromiseRung, str] = {
    "without-zone-survival": "zone",
    "without-n+1": "n+1",
    "without-burst": "burst",
}


def promise_weights(planned_load: float, *, burst: float, promise_level: int) -> dict[str, float]:
    """How much of each promise's price a demand carries: its share of the promised load.

    ``planned_load`` is the demand's planned load in replicas' worth (routed requests × burst
    × replica-seconds per request ÷ target utilisation). Zone survival is carried by
    zone-promised load, N+1 by load promised N+1 or zone (both keep a spare replica), the burst
    headroom by the burst's part of the load, load × (1 − 1 / burst). A promise's price shared
    by these weights adds up, over every demand, to the fleet's price.
    """
    load = _checks.non_negative("planned_load", planned_load)
    factor = _checks.at_least_one("burst", burst)
    level = _checks.non_negative_int("promise_level", promise_level)
    return {
        "zone": load if level >= 2 else 0.0,
        "n+1": load if level >= 1 else 0.0,
        "burst": load * (1.0 - 1.0 / factor),
    }


def promise_ladder(
    problem: Mapping[str, Any], *, demands: Collection[str] | None = None
) -> tuple[tuple[PromiseRung, dict[str, Any]], ...]:
    """The problem one promise lighter at a time, for pricing each promise by re-solving.

    Rungs, each keeping the one before's relaxations: ``planned`` (as given);
    ``without-zone-survival`` (promise "zone" becomes "n+1": still a spare replica, no longer
    a zone's worth); ``without-n+1`` (every promise "none"); ``without-burst`` (burst 1: sized
    for the expected peak alone). ``demands`` names the demand ids relaxed (None: all), so one
    tier's or tenant's promises can be priced with everyone else's held. ``previous`` is
    dropped: a rung is priced on its own, not near the running plan. The seeds' sizing example
    (8 requests/s, 100 tokens/s a replica at 70%, burst 1.5, three zones) gives 27, 19, 18 and
    12 replicas.
    """
    wanted = None if demands is None else set(demands)
    base = copy.deepcopy({k: v for k, v in problem.items() if k != "previous"})
    rungs: list[tuple[PromiseRung, dict[str, Any]]] = [("planned", copy.deepcopy(base))]
    current = base
    for rung in PROMISE_RUNGS[1:]:
        current = copy.deepcopy(current)
        for demand in current.get("demands", []):
            if wanted is not None and demand.get("id") not in wanted:
                continue
            if rung == "without-zone-survival" and demand.get("promise") == "zone":
                demand["promise"] = "n+1"
            elif rung == "without-n+1":
                demand["promise"] = "none"
            elif rung == "without-burst":
                demand["burst"] = 1.0
        rungs.append((rung, current))
    return tuple(rungs)


# -- tokens per minute for quotas ---------------------------------------------------------------


@dataclass(frozen=True)
class MonthlyTpm:
    """A month's peak request rate (requests/s) from the band and its tokens per minute."""

    month: str
    peak_rps: float
    peak_tpm: float


def tokens_per_minute_by_month(
    forecast: Forecast, q: float, tokens_per_request: float, within: float = 1.0
) -> tuple[MonthlyTpm, ...]:
    """Peak tokens per minute in each calendar month of a forecast, for quota requests.

    The month's peak is the ``within`` percentile (1 = the maximum) of the hourly values of
    the band at quantile ``q``; TPM = peak × 60 × tokens per request, the seeds' chain. The
    band is of hourly means: multiply by the workload's sub-hour peak factor, and add headroom
    (``planner.capacity.workload.tpm_plan``), before asking a provider for quota.
    """
    band = forecast.quantile(q)
    pct = _checks.utilization("within", within)
    tokens = _checks.non_negative("tokens_per_request", tokens_per_request)
    months = month_labels(forecast.timestamps)
    out = []
    for month in sorted(set(months.tolist())):
        peak = float(np.quantile(band[months == month], pct))
        out.append(MonthlyTpm(month=month, peak_rps=peak, peak_tpm=tokens_per_minute(peak, tokens)))
    return tuple(out)
