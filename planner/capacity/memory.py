"""Replica memory: weights, KV cache per token, the KV pool that is left, context that fits.

Units: bytes throughout (decimal GB = 1e9 bytes where a function says GB).
"""

from __future__ import annotations

import math

from planner.errors import PlannerInputError

GB = 1_000_000_000
MIB = 1024 * 1024


def _positive(name: str, value: float) -> None:
    if not (value > 0) or math.isinf(value):
        raise PlannerInputError(name, f"must be a positive number, got {value!r}")


def _non_negative(name: str, value: float) -> None:
    if not (value >= 0) or math.isinf(value):
        raise PlannerInputError(name, f"must be zero or more, got {value!r}")


def weight_bytes(parameters: float, bytes_per_parameter: float) -> float:
    """Bytes of model weights: parameters × bytes per parameter (70e9 × 2 = 140 GB)."""
    _positive("parameters", parameters)
    _positive("bytes_per_parameter", bytes_per_parameter)
    return parameters * bytes_per_parameter


def kv_bytes_per_token(
    layers: int, kv_heads: int, head_dim: int, bytes_per_element: float = 2.0
) -> float:
    """KV-cache bytes one token occupies: 2 (K and V) × layers × KV heads × head dim × bytes."""
    _positive("layers", layers)
    _positive("kv_heads", kv_heads)
    _positive("head_dim", head_dim)
    _positive("bytes_per_element", bytes_per_element)
    return 2.0 * layers * kv_heads * head_dim * bytes_per_element


def kv_pool_bytes(
    gpu_memory_bytes: float,
    gpus: int,
    weight_bytes_total: float,
    reserve_bytes_per_gpu: float,
) -> float:
    """KV pool of a tensor-parallel replica: per GPU, memory − weights/gpus − reserve; × gpus.

    Negative when the weights and reserve do not fit; callers that need a valid shape check
    ``shape_fits`` first. Seeds: 140 GB on 2 × 80 GB with 6 GB reserve → 8 GB; on 4 → 156 GB.
    """
    _positive("gpu_memory_bytes", gpu_memory_bytes)
    _positive("gpus", gpus)
    _non_negative("weight_bytes_total", weight_bytes_total)
    _non_negative("reserve_bytes_per_gpu", reserve_bytes_per_gpu)
    free_per_gpu = gpu_memory_bytes - weight_bytes_total / gpus - reserve_bytes_per_gpu
    return free_per_gpu * gpus


def shape_fits(
    gpu_memory_bytes: float, gpus: int, weight_bytes_total: float, reserve_bytes_per_gpu: float
) -> bool:
    """Whether weights plus runtime reserve leave a positive KV pool."""
    return kv_pool_bytes(gpu_memory_bytes, gpus, weight_bytes_total, reserve_bytes_per_gpu) > 0


def context_tokens_that_fit(kv_pool: float, kv_bytes_per_token_: float) -> int:
    """Tokens of live context the KV pool holds (8 GB at 0.25 MiB/token → 30,517)."""
    _positive("kv_bytes_per_token", kv_bytes_per_token_)
    if kv_pool <= 0:
        return 0
    return int(kv_pool // kv_bytes_per_token_)
