"""Replica memory: weights, KV per token, the KV pool, context and sequences that fit."""

from __future__ import annotations

import pytest

from planner.capacity.memory import (
    GB,
    MIB,
    context_tokens_that_fit,
    kv_bytes_per_token,
    kv_pool_bytes,
    max_concurrent_sequences,
    shape_fits,
    weight_bytes,
)
from planner.errors import PlannerInputError

WEIGHTS_70B = 140 * GB


def test_weight_bytes() -> None:
    # 70 billion parameters at 2 bytes: 140 GB. 8 billion at 16/8/4 bits: 16, 8 and 4 GB.
    assert weight_bytes(70e9, 2) == WEIGHTS_70B
    assert [weight_bytes(8e9, b) / GB for b in (2, 1, 0.5)] == [16, 8, 4]


def test_kv_bytes_per_token_from_model_dimensions() -> None:
    # K and V, per layer, per KV head, per head dimension, per element.
    assert kv_bytes_per_token(80, 8, 128) == 2 * 80 * 8 * 128 * 2
    assert kv_bytes_per_token(80, 8, 128) / MIB == pytest.approx(0.3125)
    assert kv_bytes_per_token(32, 8, 128, bytes_per_element=1) == 65_536


def test_kv_pool_of_the_two_and_four_gpu_replicas() -> None:
    # 140 GB on 80 GB GPUs with 6 GB reserve each: 2 GPUs leave 4 GB each, 8 GB of pool;
    # 4 GPUs leave 39 GB each, 156 GB: twice the hardware, nearly 20 times the room.
    two = kv_pool_bytes(80 * GB, 2, WEIGHTS_70B, 6 * GB)
    four = kv_pool_bytes(80 * GB, 4, WEIGHTS_70B, 6 * GB)
    assert two == pytest.approx(8 * GB)
    assert four == pytest.approx(156 * GB)
    assert four / two == pytest.approx(19.5)
    assert shape_fits(80 * GB, 2, WEIGHTS_70B, 6 * GB)
    # One GPU cannot hold the model at all.
    assert kv_pool_bytes(80 * GB, 1, WEIGHTS_70B, 6 * GB) < 0
    assert not shape_fits(80 * GB, 1, WEIGHTS_70B, 6 * GB)


def test_context_tokens_that_fit() -> None:
    # At 0.25 MiB per token: 8 GB holds about 30,500 tokens, 156 GB about 595,000.
    assert context_tokens_that_fit(8 * GB, 0.25 * MIB) == 30_517
    assert context_tokens_that_fit(156 * GB, 0.25 * MIB) == pytest.approx(595_000, rel=0.001)
    assert context_tokens_that_fit(-4 * GB, 0.25 * MIB) == 0


def test_sequences_that_fit() -> None:
    # 1,600-token sequences: 19 fit in the 2-GPU replica's pool, 371 in the 4-GPU one.
    assert max_concurrent_sequences(8 * GB, 1600, 0.25 * MIB) == 19
    assert max_concurrent_sequences(156 * GB, 1600, 0.25 * MIB) == 371
    assert max_concurrent_sequences(0.0, 1600, 0.25 * MIB) == 0


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: weight_bytes(0, 2), "parameters"),
        (lambda: weight_bytes(70e9, -2), "bytes_per_parameter"),
        (lambda: kv_bytes_per_token(0, 8, 128), "layers"),
        (lambda: kv_bytes_per_token(80, 8, 128.5), "head_dim"),  # type: ignore[arg-type]
        (lambda: kv_bytes_per_token(80, 8, 128, 0), "bytes_per_element"),
        (lambda: kv_pool_bytes(80 * GB, 0, WEIGHTS_70B, 6 * GB), "gpus"),
        (lambda: kv_pool_bytes(80 * GB, 2, -1.0, 6 * GB), "weight_bytes_total"),
        (lambda: kv_pool_bytes(80 * GB, 2, WEIGHTS_70B, -6 * GB), "reserve_bytes_per_gpu"),
        (lambda: kv_pool_bytes(float("nan"), 2, WEIGHTS_70B, 6 * GB), "gpu_memory_bytes"),
        (lambda: context_tokens_that_fit(8 * GB, 0), "kv_bytes_per_token"),
        (lambda: context_tokens_that_fit(float("nan"), MIB), "kv_pool"),
        (lambda: max_concurrent_sequences(8 * GB, 0, MIB), "tokens_per_sequence"),
    ],
)
def test_invalid_arguments_are_named(call: object, argument: str) -> None:
    assert callable(call)
    with pytest.raises(PlannerInputError) as caught:
        call()
    assert caught.value.argument == argument
