"""Replica memory: weights, KV cache per token, the KV pool that is left, context that fits.

A replica's GPUs hold the model weights (split across them by tensor parallelism), a runtime
reserve per GPU, and whatever is left: the KV pool, which holds the attention keys and values
of every live token. The pool, not compute, usually caps how many sequences a replica runs.

Units: bytes throughout (decimal GB = 1e9 bytes where a function says GB; MiB = 2^20 bytes).

Every public function raises ``PlannerInputError`` naming the argument for non-positive model
dimensions, GPU counts, memory sizes or bytes per element, and for negative or non-finite
weights, reserves and token counts.
"""

from __future__ import annotations

from planner.capacity import _checks

GB = 1_000_000_000
MIB = 1024 * 1024


def weight_bytes(parameters: float, bytes_per_parameter: float) -> float:
    """Bytes of model weights: parameters × bytes per parameter (70e9 × 2 = 140 GB).

    8e9 parameters: 16 GB at 16-bit (2 bytes), 8 GB at 8-bit, 4 GB at 4-bit (0.5 bytes).
    """
    count = _checks.positive("parameters", parameters)
    per_parameter = _checks.positive("bytes_per_parameter", bytes_per_parameter)
    return count * per_parameter


def kv_bytes_per_token(
    layers: int, kv_heads: int, head_dim: int, bytes_per_element: float = 2.0
) -> float:
    """KV-cache bytes one token occupies: 2 (K and V) × layers × KV heads × head dim × bytes.

    80 layers × 8 KV heads × 128 dims at 2 bytes: 327,680 bytes (0.3125 MiB) per token.
    """
    n_layers = _checks.positive_int("layers", layers)
    heads = _checks.positive_int("kv_heads", kv_heads)
    dim = _checks.positive_int("head_dim", head_dim)
    per_element = _checks.positive("bytes_per_element", bytes_per_element)
    return 2.0 * n_layers * heads * dim * per_element


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
    memory = _checks.positive("gpu_memory_bytes", gpu_memory_bytes)
    count = _checks.positive_int("gpus", gpus)
    weights = _checks.non_negative("weight_bytes_total", weight_bytes_total)
    reserve = _checks.non_negative("reserve_bytes_per_gpu", reserve_bytes_per_gpu)
    free_per_gpu = memory - weights / count - reserve
    return free_per_gpu * count


def shape_fits(
    gpu_memory_bytes: float, gpus: int, weight_bytes_total: float, reserve_bytes_per_gpu: float
) -> bool:
    """Whether weights plus runtime reserve leave a positive KV pool."""
    return kv_pool_bytes(gpu_memory_bytes, gpus, weight_bytes_total, reserve_bytes_per_gpu) > 0


def context_tokens_that_fit(kv_pool: float, kv_bytes_per_token_: float) -> int:
    """Tokens of live context the KV pool holds (8 GB at 0.25 MiB/token → 30,517).

    A pool of zero or less (a shape that does not fit) holds none.
    """
    per_token = _checks.positive("kv_bytes_per_token", kv_bytes_per_token_)
    pool = _checks.finite("kv_pool", kv_pool)
    if pool <= 0:
        return 0
    return int(pool // per_token)


def max_concurrent_sequences(
    kv_pool: float, tokens_per_sequence: float, kv_bytes_per_token_: float
) -> int:
    """Whole sequences of a given length the KV pool holds at once.

    The memory bound on a replica's concurrency: 30,517 tokens of pool hold 19 sequences of
    1,600 tokens (8 GB at 0.25 MiB/token), the 156 GB pool 371.
    """
    length = _checks.positive("tokens_per_sequence", tokens_per_sequence)
    tokens = context_tokens_that_fit(kv_pool, kv_bytes_per_token_)
    return int(tokens // length)
