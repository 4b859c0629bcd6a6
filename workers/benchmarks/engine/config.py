"""What the engine benchmark measures, as plain data: the model's dimensions (and presets), the
hardware's ceiling (data-sheet rooflines), the workload's lengths and the plan of points, and the
FLOP and byte counts of a prefill pass and a decode step. No torch: the control plane and the
command line build these without it.

Units: tokens, bytes, FLOP, seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from planner.capacity import memory

GB = memory.GB


GB = memory.GB


class EngineBenchmarkError(RuntimeError):
    """The benchmark cannot run here (no CUDA device, not enough memory, …)."""


# -- the model's dimensions ---------------------------------------------------------------------


@dataclass(frozen=True)
class ModelDims:
    """A Llama-style decoder's architecture."""

    layers: int
    hidden_size: int
    intermediate_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    rope_theta: float = 500_000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in (
            "layers",
            "hidden_size",
            "intermediate_size",
            "attention_heads",
            "kv_heads",
            "head_dim",
            "vocab_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be a whole number ≥ 1, got {value!r}")
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attention_heads: {self.attention_heads} is not a multiple of the "
                f"{self.kv_heads} KV heads"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"head_dim: rotary embeddings need an even head dim, not {self.head_dim}"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ModelDims:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def q_size(self) -> int:
        return self.attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_matmul_parameters(self) -> int:
        """Weights one layer multiplies by: q, k, v, o projections and the SwiGLU MLP."""
        attention = self.hidden_size * (self.q_size + 2 * self.kv_size) + self.q_size * (
            self.hidden_size
        )
        return attention + 3 * self.hidden_size * self.intermediate_size

    @property
    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def parameters(self) -> int:
        """All parameters: layers (with their two norms), embedding, final norm, output
        projection (not tied to the embedding)."""
        per_layer = self.layer_matmul_parameters + 2 * self.hidden_size
        return self.layers * per_layer + 2 * self.embedding_parameters + self.hidden_size

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        return memory.kv_bytes_per_token(
            self.layers, self.kv_heads, self.head_dim, bytes_per_element
        )


PRESETS: dict[str, ModelDims] = {
    # Meta Llama 3 8B's architecture.
    "llama-3-8b": ModelDims(
        layers=32,
        hidden_size=4096,
        intermediate_size=14336,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        vocab_size=128256,
    ),
    # Meta Llama 3 70B's architecture.
    "llama-3-70b": ModelDims(
        layers=80,
        hidden_size=8192,
        intermediate_size=28672,
        attention_heads=64,
        kv_heads=8,
        head_dim=128,
        vocab_size=128256,
    ),
    # 44 M parameters: big enough that a CPU's decode reads its weights from memory, not
    # cache (docs/benchmarks.md records a run).
    "small": ModelDims(
        layers=4,
        hidden_size=512,
        intermediate_size=1408,
        attention_heads=8,
        kv_heads=2,
        head_dim=64,
        vocab_size=32000,
    ),
    # Small enough for a CPU in seconds: the tests' model.
    "tiny": ModelDims(
        layers=2,
        hidden_size=64,
        intermediate_size=128,
        attention_heads=4,
        kv_heads=2,
        head_dim=16,
        vocab_size=256,
    ),
}


# -- the hardware's ceiling -----------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    """Peak compute (FLOP/s) and memory bandwidth (bytes/s) of all devices of the run."""

    peak_flops: float
    memory_bytes_per_s: float
    source: str

    def __post_init__(self) -> None:
        for name in ("peak_flops", "memory_bytes_per_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: must be a positive number, got {value!r}")


@dataclass(frozen=True)
class AcceleratorSpec:
    """Data-sheet figures of one GPU: dense bf16 TFLOP/s, memory TB/s, memory GB."""

    name: str
    peak_tflops: float
    memory_tbps: float
    memory_gb: float

    def roofline(self, devices: int) -> Roofline:
        return Roofline(
            peak_flops=self.peak_tflops * 1e12 * devices,
            memory_bytes_per_s=self.memory_tbps * 1e12 * devices,
            source=f"{self.name} data sheet × {devices}",
        )


ACCELERATORS: dict[str, AcceleratorSpec] = {
    "h200": AcceleratorSpec("h200", peak_tflops=989.0, memory_tbps=4.8, memory_gb=141.0),
    "h100": AcceleratorSpec("h100", peak_tflops=989.0, memory_tbps=3.35, memory_gb=80.0),
    "a100": AcceleratorSpec("a100", peak_tflops=312.0, memory_tbps=2.039, memory_gb=80.0),
}


# -- what to measure ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """The prompt and output lengths a shape serves, tokens."""

    prompt_tokens_mean: int
    prompt_tokens_p95: int
    output_tokens_mean: int
    output_tokens_p95: int

    def __post_init__(self) -> None:
        for name in asdict(self):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be a whole number of tokens ≥ 1, got {value!r}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Workload:
        return cls(**{name: round(float(data[name])) for name in cls.__dataclass_fields__})

    @property
    def context_tokens(self) -> int:
        """Mean context while decoding: the prompt plus half the answer."""
        return self.prompt_tokens_mean + self.output_tokens_mean // 2

    @property
    def context_tokens_p95(self) -> int:
        return max(self.context_tokens, self.prompt_tokens_p95 + self.output_tokens_p95 // 2)

    @property
    def sequence_tokens(self) -> int:
        """Tokens a sequence holds in the KV cache when its answer is done (mean)."""
        return self.prompt_tokens_mean + self.output_tokens_mean


@dataclass(frozen=True)
class BenchmarkPlan:
    """The points to measure and how.

    ``prefill_token_budget``: prompt tokens per prefill pass (batch × length). ``max_batch``:
    the largest decode batch tried (the KV-bound concurrency caps it too). ``decode_steps``:
    steps per timed decode run. ``max_context``: context lengths are capped here.
    """

    prompt_lengths: tuple[int, ...]
    context_lengths: tuple[int, ...]
    figure_prompt_length: int
    figure_context_length: int
    sequence_tokens: int
    prefill_token_budget: int
    max_batch: int
    decode_steps: int
    warmup: int
    repeats: int
    scaling_threshold: float = 0.10
    cuda_graphs: bool = True

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> BenchmarkPlan:
        """The plan from plain data (``asdict`` of a plan, lists for tuples)."""
        return cls(
            prompt_lengths=tuple(int(n) for n in data["prompt_lengths"]),
            context_lengths=tuple(int(n) for n in data["context_lengths"]),
            figure_prompt_length=int(data["figure_prompt_length"]),
            figure_context_length=int(data["figure_context_length"]),
            sequence_tokens=int(data["sequence_tokens"]),
            prefill_token_budget=int(data["prefill_token_budget"]),
            max_batch=int(data["max_batch"]),
            decode_steps=int(data["decode_steps"]),
            warmup=int(data["warmup"]),
            repeats=int(data["repeats"]),
            scaling_threshold=float(data.get("scaling_threshold", 0.10)),
            cuda_graphs=bool(data.get("cuda_graphs", True)),
        )

    @classmethod
    def for_workload(
        cls, workload: Workload, device: str, *, max_context: int | None = None
    ) -> BenchmarkPlan:
        """A plan for ``workload`` on ``cuda`` or ``cpu``: prompts at 128, 512, 2048 … below
        the p95 prompt plus the mean and p95 themselves; decode at the mean and p95 context."""
        gpu = device == "cuda"
        cap = max_context or (32768 if gpu else 4096)
        mean_prompt = min(workload.prompt_tokens_mean, cap)
        p95_prompt = min(workload.prompt_tokens_p95, cap)
        ladder = [n for n in (128, 512, 2048, 8192) if n < p95_prompt]
        context = min(workload.context_tokens, cap)
        context_p95 = min(workload.context_tokens_p95, cap)
        return cls(
            prompt_lengths=tuple(sorted({*ladder, mean_prompt, p95_prompt})),
            context_lengths=tuple(sorted({context, context_p95})),
            figure_prompt_length=mean_prompt,
            figure_context_length=context,
            sequence_tokens=workload.sequence_tokens,
            prefill_token_budget=16384 if gpu else 1024,
            max_batch=512 if gpu else 16,
            decode_steps=32 if gpu else 8,
            warmup=3 if gpu else 1,
            repeats=7 if gpu else 3,
        )


# -- what a pass costs ----------------------------------------------------------------------------


def prefill_flops(dims: ModelDims, batch: int, length: int) -> float:
    """FLOPs of one prefill pass: 2 × matmul parameters × tokens through the layers, the
    output projection for the last position of each sequence, and causal attention
    (QKᵀ and AV over the lower triangle: 2 × batch × heads × length² × head dim per layer)."""
    tokens = batch * length
    layers = 2.0 * dims.layers * dims.layer_matmul_parameters * tokens
    head = 2.0 * dims.embedding_parameters * batch
    attention = 2.0 * dims.layers * batch * dims.attention_heads * length**2 * dims.head_dim
    return layers + head + attention


def decode_bytes_per_step(
    dims: ModelDims, batch: int, context: float, bytes_per_element: int
) -> float:
    """Bytes a decode step reads: every weight but the embedding table (of which only the
    batch's rows), and the keys and values of ``context`` tokens per sequence."""
    weights = (dims.parameters - dims.embedding_parameters) * bytes_per_element
    rows = batch * dims.hidden_size * bytes_per_element
    return weights + rows + batch * context * dims.kv_bytes_per_token(bytes_per_element)
