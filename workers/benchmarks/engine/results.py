"""What an engine benchmark run measured, as plain data: the prefill and decode points, the
whole result, and how throughput is read off them (roofline fractions, where decode stops
scaling). No torch.

Units: tokens, bytes, FLOP, seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PrefillPoint:
    prompt_length: int
    batch: int
    tokens: int
    seconds: float
    tokens_per_s: float
    flops: float
    achieved_flops: float
    roofline_fraction: float
    above_roofline: bool
    repeats_s: list[float]


@dataclass(frozen=True)
class DecodePoint:
    context_length: int
    batch: int
    step_seconds: float
    tokens_per_s: float
    bytes_per_step: float
    achieved_bytes_per_s: float
    roofline_fraction: float
    above_roofline: bool
    cuda_graph: bool
    repeats_s: list[float]


@dataclass
class EngineResult:
    """Everything a run measured. ``figure`` is what becomes the capacity figure."""

    model: dict[str, Any]
    device: str
    devices: int
    dtype: str
    parameters: int
    weight_bytes: int
    kv_bytes_per_token: float
    free_bytes: float
    reserve_bytes_per_device: float
    kv_pool_bytes: float
    max_concurrency: int
    roofline: dict[str, Any]
    plan: dict[str, Any]
    prefill: list[PrefillPoint]
    decode: list[DecodePoint]
    decode_saturation_batch: dict[str, int | None]
    figure: dict[str, Any]
    hardware: dict[str, Any]
    software: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def roofline_fraction(achieved: float, peak: float) -> tuple[float, bool]:
    """achieved / peak in (0, 1]; True when it had to be clipped to 1."""
    value = achieved / peak
    return (1.0, True) if value > 1.0 else (value, False)


def saturation_batch(points: Sequence[tuple[int, float]], threshold: float) -> int | None:
    """The first batch whose doubling gains less than ``threshold`` in throughput, confirmed
    by the next doubling where one was measured (one noisy point does not end the scaling).

    ``points``: (batch, tokens/s) in increasing batch order; only steps where a batch is twice
    the one before count. None: throughput still scaled at the largest batch measured.
    """
    rates = dict(points)

    def flat(batch: int) -> bool:
        doubled = rates.get(2 * batch)
        return doubled is not None and doubled < rates[batch] * (1.0 + threshold)

    for batch, _ in points:
        if flat(batch) and (4 * batch not in rates or flat(2 * batch)):
            return batch
    return None
