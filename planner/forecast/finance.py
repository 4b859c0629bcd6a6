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

Units: prices in currency per GPU-hour (any one currency); hours are whole UTC hours given as
epoch seconds of their start; months are calendar months in UTC ("2025-04"). Peak tokens per
minute by month (``tokens_per_minute_by_month``) use the seeds' chain through
``planner.capacity.workload.tokens_per_minute``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from planner.capacity import _checks
from planner.capacity.workload import tokens_per_minute
from planner.errors import PlannerInputError
from planner.forecast.demand import HOUR_S, Forecast, IntArray, check_timestamps

PoolKey = tuple[str, str]
"""(region, GPU type): the unit a reservation is bought in."""


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
    m = math.floor(hours * Fraction(reserved) / Fraction(on_demand)) + 1
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
) -> FinanceProjection:
    """Replica-hours, GPU-hours and cost by month, region and GPU type over an hourly horizon.

    ``timestamps`` are the consecutive hours of the horizon (epoch seconds of each hour's start)
    and every pool's ``replicas`` has one count per hour. ``prices`` gives each (region, GPU
    type) its on-demand and reserved price per GPU-hour. Each (region, GPU type) reserves the
    least-cost number of GPUs over the whole horizon (``optimal_commitment``) unless
    ``commitment`` names its level in GPUs (0 buys everything on demand). The reservation's
    fee falls on every hour of the horizon, so each month pays for its own hours.
    """
    hours = _check_hours(timestamps)
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

    months = month_labels(hours)
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
