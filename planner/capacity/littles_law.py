"""Little's law: how much work is in flight, for the whole system and stage by stage.

In a stable system the mean number inside equals the arrival rate times the mean time each
item spends there, L = λ × W. It holds for any boundary, so it is applied per stage (gateway,
retrieval, tools, model) and per replica. It sizes connection pools, worker counts, queue limits
and the sequences a replica must hold; it says nothing about whether the accelerators keep up,
nothing about the tail, and nothing while the queue is growing (arrivals ≠ departures).

The per-replica KV check turns in-flight sequences into memory: sequences × tokens per sequence
× KV bytes per token, against the replica's KV pool (``planner.capacity.memory``).

Units: requests/s, seconds, requests (or sequences), tokens, bytes.

Every public function raises ``PlannerInputError`` naming the argument for negative or
non-finite rates, times and sizes, shares outside [0, 1], headroom below 1, and empty stage
lists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.capacity import _checks


def in_flight(arrival_rate: float, time_in_system_s: float) -> float:
    """L = λ × W: mean requests in flight for arrival rate λ (req/s) and mean residence W (s).

    20 req/s × 5 s = 100 in flight; if W drifts to 8 s, 160 at the same rate. For streamed
    answers W runs to the last token, not the first.
    """
    lam = _checks.non_negative("arrival_rate", arrival_rate)
    w = _checks.non_negative("time_in_system_s", time_in_system_s)
    return lam * w


def concurrency_with_headroom(
    arrival_rate: float, time_in_system_s: float, headroom: float
) -> float:
    """In-flight requests (Little's law) times a headroom multiplier ≥ 1.

    12 req/s × 4.5 s = 54.0 average concurrency; × 1.4 headroom = a target of 75.6. A
    concurrency target, not a replica count.
    """
    room = _checks.at_least_one("headroom", headroom)
    return in_flight(arrival_rate, time_in_system_s) * room


@dataclass(frozen=True)
class Stage:
    """One stage of the request path and the mean time a request spends in it.

    ``seconds`` is the time for requests that use the stage; ``share`` is the fraction of
    requests that use it (an order-lookup tool taking 2 s for 15% of requests).
    """

    name: str
    seconds: float
    share: float = 1.0

    @property
    def mean_seconds(self) -> float:
        """Mean time in the stage averaged over all requests: seconds × share (2 × 0.15 = 0.3)."""
        return self.seconds * self.share


@dataclass(frozen=True)
class StageOccupancy:
    """Mean time and mean in-flight population of one stage."""

    name: str
    mean_seconds: float
    in_flight: float


@dataclass(frozen=True)
class StageSplit:
    """Little's law stage by stage: per-stage occupancy and the totals they add up to."""

    stages: tuple[StageOccupancy, ...]
    time_in_system_s: float
    in_flight: float


def stage_in_flight(arrival_rate: float, stages: Sequence[Stage]) -> StageSplit:
    """Apply L = λ × W to each stage; the stage populations sum to the whole system's.

    20 req/s through gateway 0.1 s, retrieval 0.4 s, tool 2 s for 15% (0.3 s) and model 4.2 s:
    2 + 8 + 6 + 84 = 100 in flight over 5.0 s.
    """
    lam = _checks.non_negative("arrival_rate", arrival_rate)
    items = tuple(stages)
    _checks.non_empty("stages", items)
    occupancies = []
    for stage in items:
        _checks.non_negative(f"stages[{stage.name}].seconds", stage.seconds)
        _checks.probability(f"stages[{stage.name}].share", stage.share)
        occupancies.append(
            StageOccupancy(
                name=stage.name,
                mean_seconds=stage.mean_seconds,
                in_flight=in_flight(lam, stage.mean_seconds),
            )
        )
    return StageSplit(
        stages=tuple(occupancies),
        time_in_system_s=math.fsum(o.mean_seconds for o in occupancies),
        in_flight=math.fsum(o.in_flight for o in occupancies),
    )


@dataclass(frozen=True)
class KvCheck:
    """KV memory the in-flight sequences of one replica need, against its KV pool."""

    sequences: float
    tokens: float
    demand_bytes: float
    pool_bytes: float

    @property
    def fill(self) -> float:
        """Demand as a fraction of the pool (above 1: the runtime preempts and recomputes)."""
        return self.demand_bytes / self.pool_bytes

    @property
    def fits(self) -> bool:
        """Whether the demand fits in the pool."""
        return self.demand_bytes <= self.pool_bytes


def replica_kv_check(
    in_flight_sequences: float,
    tokens_per_sequence: float,
    kv_bytes_per_token: float,
    kv_pool_bytes: float,
) -> KvCheck:
    """Sequences × tokens per sequence × KV bytes per token, against the KV pool (bytes).

    84 sequences in the model stage over 12 replicas is 7 each; at 1,600 tokens and 0.25 MB per
    token (400 MB a sequence) they need 2.8 GB whether or not compute has room. Friday review:
    3.3 in flight × 1,600 tokens fill 17% of an 8 GB pool at 0.25 MiB/token; 10.7 × 2,800,
    98%.
    """
    sequences = _checks.non_negative("in_flight_sequences", in_flight_sequences)
    tokens = _checks.non_negative("tokens_per_sequence", tokens_per_sequence)
    per_token = _checks.positive("kv_bytes_per_token", kv_bytes_per_token)
    pool = _checks.positive("kv_pool_bytes", kv_pool_bytes)
    return KvCheck(
        sequences=sequences,
        tokens=sequences * tokens,
        demand_bytes=sequences * tokens * per_token,
        pool_bytes=pool,
    )
