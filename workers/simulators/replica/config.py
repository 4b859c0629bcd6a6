"""The simulated replica's configuration: model name, aggregate speeds, limits, prefix cache and
stream interval (``ReplicaConfig``), and its command-line form.

Units: tokens, tokens per second, seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from planner.errors import PlannerInputError


@dataclass(frozen=True)
class ReplicaConfig:
    """The simulated replica's model name, speeds and limits.

    ``prefill_tokens_per_s`` and ``decode_tokens_per_s`` are the replica's aggregate rates (what
    a ``CapacityFigure`` records); ``max_sequence_share`` in (0, 1] is the largest fraction of
    the engine one sequence can use (1: a lone sequence gets the whole engine).
    ``prefix_cache_tokens`` 0 turns the prefix cache off. ``stream_interval_s`` is how often
    decoded tokens are sent between the first token and the last.
    """

    model: str = "headroom-sim"
    prefill_tokens_per_s: float = 4000.0
    decode_tokens_per_s: float = 160.0
    max_concurrency: int = 8
    max_sequence_share: float = 1.0
    max_model_len: int = 32_768
    prefix_cache_tokens: int = 1 << 20
    block_tokens: int = 16
    stream_interval_s: float = 0.02

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise PlannerInputError("model", f"must be a non-empty string, got {self.model!r}")
        for name in ("prefill_tokens_per_s", "decode_tokens_per_s", "stream_interval_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise PlannerInputError(name, f"must be a finite number > 0, got {value!r}")
        share = self.max_sequence_share
        if not isinstance(share, int | float) or not 0 < share <= 1:
            raise PlannerInputError("max_sequence_share", f"must be in (0, 1], got {share!r}")
        for name, least in (
            ("max_concurrency", 1),
            ("max_model_len", 2),
            ("prefix_cache_tokens", 0),
            ("block_tokens", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise PlannerInputError(name, f"must be a whole number >= {least}, got {value!r}")

    @classmethod
    def fifo_slots(
        cls,
        slots: int,
        prefill_tokens_per_s: float,
        decode_tokens_per_s: float,
        **options: Any,
    ) -> ReplicaConfig:
        """A replica of aggregate rates whose ``slots`` sequences never slow each other down.

        Each admitted request runs at 1/slots of the rates, so it takes
        ``request_cost(prompt, output, prefill/slots, decode/slots)`` seconds and the replica is
        the planner's FIFO queue with ``servers = slots``.
        """
        return cls(
            prefill_tokens_per_s=prefill_tokens_per_s,
            decode_tokens_per_s=decode_tokens_per_s,
            max_concurrency=slots,
            max_sequence_share=1.0 / slots,
            **options,
        )

    def argv(self) -> list[str]:
        """The command-line options that give this configuration."""
        return [
            f"--model={self.model}",
            f"--prefill-tokens-per-s={self.prefill_tokens_per_s!r}",
            f"--decode-tokens-per-s={self.decode_tokens_per_s!r}",
            f"--max-concurrency={self.max_concurrency}",
            f"--max-sequence-share={self.max_sequence_share!r}",
            f"--max-model-len={self.max_model_len}",
            f"--prefix-cache-tokens={self.prefix_cache_tokens}",
            f"--block-tokens={self.block_tokens}",
            f"--stream-interval-s={self.stream_interval_s!r}",
        ]
