"""Engine benchmark: what one replica of a model sustains on the hardware it runs on.

The model is a Llama-style decoder built from the model's dimensions with random weights
(nothing is downloaded): token embedding, per layer RMSNorm → attention (rotary position
embeddings, grouped-query attention through ``torch.nn.functional.scaled_dot_product_attention``)
→ RMSNorm → SwiGLU MLP, each with a residual, then a final RMSNorm and the output projection.
bf16 on GPU, float32 on CPU.

Measured (``run_benchmark``):

- **Prefill** tokens/s across prompt lengths: ``batch × length`` prompt tokens in one forward
  pass (the batch fills a token budget), logits for the last position only, as serving engines
  compute them. FLOPs ≈ 2 × matmul parameters × tokens + causal attention
  (2 × batch × heads × length² × head dim per layer, the half of QKᵀ and AV a causal mask
  keeps), as a fraction of the peak FLOP/s.
- **Decode** tokens/s across batch sizes at the workload's context lengths, with a real
  preallocated KV cache: each step embeds one token per sequence, writes its keys and values
  into the cache at the current position, attends over the cache, computes the logits and
  picks the next token (greedy). On one GPU the step is captured once as a CUDA graph and
  replayed; on CPU (and across several GPUs) it runs eagerly. Bytes read per step ≈ weights +
  the batch's KV cache, as a fraction of the peak memory bandwidth. The batch at which decode
  stops scaling is the first batch whose doubling gains less than ``scaling_threshold`` (10 %).
- **Max concurrency**: sequences of the workload's length whose KV cache fits in the memory
  left after the weights (``planner.capacity.memory``); on GPU the free memory is measured
  after the weights are loaded, less the runtime reserve per device.

Timing: warm-up runs first; on GPU CUDA events around the work (all devices synchronized when
the layers span several), on CPU ``time.perf_counter``; several repeats, median.

The roofline: on GPU the accelerator's peak figures (× devices) when given, else measured; on
CPU measured on the host (the best matmul FLOP/s and copy bandwidth over a few sizes). A
fraction above 1 means the measured peak was not a ceiling (e.g. a working set that fits in a
CPU cache): it is reported as 1 and the point is flagged.

Several GPUs: the layers are split across the devices and run one after the other (no tensor
parallelism); the figures are then a lower bound on what a tensor-parallel runtime sustains.

CLI: ``python -m workers.benchmarks.engine --preset llama-3-8b --accelerator h200 --device cuda``
(``--help`` for the rest). Units: tokens, seconds, bytes, FLOP.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from planner.capacity import memory

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


# -- the model ------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, **factory: Any) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In float32: squares of bf16 activations lose too much precision.
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


def rotary_tables(
    dims: ModelDims, positions: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position × frequency, (positions, head_dim), halves repeated."""
    half = dims.head_dim // 2
    freqs = 1.0 / (
        dims.rope_theta ** (torch.arange(half, device=device, dtype=torch.float32) / half)
    )
    angles = torch.outer(torch.arange(positions, device=device, dtype=torch.float32), freqs)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (…, T, head_dim) by the angles of its positions (cos/sin: (T, head_dim))."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@dataclass
class KVCache:
    """One layer's keys and values: (batch, kv_heads, positions, head_dim) each."""

    k: torch.Tensor
    v: torch.Tensor


class Attention(nn.Module):
    def __init__(self, dims: ModelDims, **factory: Any) -> None:
        super().__init__()
        self.dims = dims
        self.wq = nn.Linear(dims.hidden_size, dims.q_size, bias=False, **factory)
        self.wk = nn.Linear(dims.hidden_size, dims.kv_size, bias=False, **factory)
        self.wv = nn.Linear(dims.hidden_size, dims.kv_size, bias=False, **factory)
        self.wo = nn.Linear(dims.q_size, dims.hidden_size, bias=False, **factory)

    def _project(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        d = self.dims
        q = self.wq(x).view(b, t, d.attention_heads, d.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, d.kv_heads, d.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, d.kv_heads, d.head_dim).transpose(1, 2)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Causal attention over the whole sequence x (B, T, C), from position 0; with a
        cache, its keys and values are stored at positions 0 … T−1."""
        b, t, _ = x.shape
        q, k, v = self._project(x, cos, sin)
        if cache is not None:
            cache.k[:b, :, :t].copy_(k)
            cache.v[:b, :, :t].copy_(v)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        projected: torch.Tensor = self.wo(out.transpose(1, 2).reshape(b, t, self.dims.q_size))
        return projected

    def decode(
        self,
        x: torch.Tensor,
        position: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        cache: KVCache,
    ) -> torch.Tensor:
        """One new token per sequence, x (B, 1, C), at ``position`` (a 1-element tensor, so
        that a CUDA graph can replay the step at the next position). Its keys and values go
        into the cache; attention covers the cache where ``mask`` (1, 1, 1, positions) is
        true. The query heads that share a KV head are laid along the query axis, so the
        cache is read as it is, never copied per head."""
        b = x.shape[0]
        d = self.dims
        q, k, v = self._project(x, cos, sin)
        cache.k.index_copy_(2, position, k)
        cache.v.index_copy_(2, position, v)
        group = d.attention_heads // d.kv_heads
        q = q.reshape(b, d.kv_heads, group, d.head_dim)
        out = F.scaled_dot_product_attention(q, cache.k, cache.v, attn_mask=mask)
        projected: torch.Tensor = self.wo(out.reshape(b, 1, d.q_size))
        return projected


class MLP(nn.Module):
    def __init__(self, dims: ModelDims, **factory: Any) -> None:
        super().__init__()
        self.gate = nn.Linear(dims.hidden_size, dims.intermediate_size, bias=False, **factory)
        self.up = nn.Linear(dims.hidden_size, dims.intermediate_size, bias=False, **factory)
        self.down = nn.Linear(dims.intermediate_size, dims.hidden_size, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down(F.silu(self.gate(x)) * self.up(x))
        return out


class DecoderLayer(nn.Module):
    def __init__(self, dims: ModelDims, **factory: Any) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(dims.hidden_size, dims.norm_eps, **factory)
        self.attention = Attention(dims, **factory)
        self.mlp_norm = RMSNorm(dims.hidden_size, dims.norm_eps, **factory)
        self.mlp = MLP(dims, **factory)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, cache)
        out: torch.Tensor = x + self.mlp(self.mlp_norm(x))
        return out

    def decode(
        self,
        x: torch.Tensor,
        position: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        cache: KVCache,
    ) -> torch.Tensor:
        x = x + self.attention.decode(self.attention_norm(x), position, cos, sin, mask, cache)
        out: torch.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


class Decoder(nn.Module):
    """The whole model. ``devices``: where each layer lives (layers split evenly, in order);
    the embedding sits on the first device, the final norm and output projection on the last.
    """

    def __init__(
        self,
        dims: ModelDims,
        devices: Sequence[torch.device],
        dtype: torch.dtype,
        *,
        max_positions: int,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not devices:
            raise ValueError("devices: give at least one device")
        self.dims = dims
        self.dtype = dtype
        self.devices = list(devices)
        self.layer_devices = [
            self.devices[i * len(self.devices) // dims.layers] for i in range(dims.layers)
        ]
        first, last = self.devices[0], self.devices[-1]
        # Each part is built on its own device in the run's dtype: an 8B model never exists in
        # float32 or on the host. (Building on the meta device and moving would skip the
        # default initialisation, but the meta normal_ pulls in the compiler stack: seconds.)
        self.embed = nn.Embedding(dims.vocab_size, dims.hidden_size, device=first, dtype=dtype)
        self.layers = nn.ModuleList(
            DecoderLayer(dims, device=device, dtype=dtype) for device in self.layer_devices
        )
        self.norm = RMSNorm(dims.hidden_size, dims.norm_eps, device=last, dtype=dtype)
        self.lm_head = nn.Linear(
            dims.hidden_size, dims.vocab_size, bias=False, device=last, dtype=dtype
        )
        self._init_weights(seed)
        self.max_positions = max_positions
        self.rotary = {
            device: rotary_tables(dims, max_positions, device, dtype) for device in self.devices
        }

    @torch.no_grad()
    def _init_weights(self, seed: int) -> None:
        # Small normal weights (std 0.02, as Llama checkpoints are initialised) keep random
        # activations finite through every layer; the values do not change the work done.
        for index, parameter in enumerate(self.parameters()):
            if parameter.ndim == 1:
                parameter.fill_(1.0)
                continue
            generator = torch.Generator(device=parameter.device).manual_seed(seed + index)
            parameter.normal_(0.0, 0.02, generator=generator)

    @property
    def weight_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())

    def new_cache(self, batch: int, positions: int) -> list[KVCache]:
        """A zeroed KV cache for ``batch`` sequences of up to ``positions`` tokens."""
        d = self.dims
        caches = []
        for device in self.layer_devices:
            shape = (batch, d.kv_heads, positions, d.head_dim)
            caches.append(
                KVCache(
                    torch.zeros(shape, dtype=self.dtype, device=device),
                    torch.zeros(shape, dtype=self.dtype, device=device),
                )
            )
        return caches

    def forward(
        self,
        tokens: torch.Tensor,
        cache: Sequence[KVCache] | None = None,
        *,
        last_only: bool = True,
    ) -> torch.Tensor:
        """Prefill: tokens (B, T) from position 0 → logits (B, V) of the last position, or
        (B, T, V) of every position without ``last_only``. With a cache, the keys and values
        of positions 0 … T−1 are stored in it."""
        t = tokens.shape[1]
        if t > self.max_positions:
            raise ValueError(f"tokens: {t} positions, the model was built for {self.max_positions}")
        x = self.embed(tokens.to(self.devices[0]))
        for index, (layer, device) in enumerate(zip(self.layers, self.layer_devices, strict=True)):
            cos, sin = self.rotary[device]
            x = layer(x.to(device), cos[:t], sin[:t], cache[index] if cache else None)
        x = self.norm(x.to(self.devices[-1]))
        logits: torch.Tensor = self.lm_head(x[:, -1] if last_only else x)
        return logits.float()

    def decode_step(
        self,
        tokens: torch.Tensor,
        position: torch.Tensor,
        cache: Sequence[KVCache],
    ) -> torch.Tensor:
        """One decode step: tokens (B,) at ``position`` (a 1-element long tensor on the first
        device) → logits (B, V); then, in place, the next tokens (greedy) go into ``tokens``
        and ``position`` advances by one. Everything stays on the devices and keeps its shape,
        so a CUDA graph of one step replays a whole decode."""
        positions = cache[0].k.shape[2]
        x = self.embed(tokens).unsqueeze(1)
        local: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]
        local = {}
        for device in self.devices:
            pos = position.to(device)
            cos, sin = self.rotary[device]
            mask = (torch.arange(positions, device=device) <= pos).view(1, 1, 1, positions)
            local[device] = (pos, cos.index_select(0, pos), sin.index_select(0, pos), mask)
        for layer, device, layer_cache in zip(self.layers, self.layer_devices, cache, strict=True):
            pos, cos, sin, mask = local[device]
            x = cast(DecoderLayer, layer).decode(x.to(device), pos, cos, sin, mask, layer_cache)
        projected: torch.Tensor = self.lm_head(self.norm(x.to(self.devices[-1]))[:, -1])
        logits = projected.float()
        tokens.copy_(logits.argmax(dim=-1).to(tokens.device))
        position.add_(1)
        return logits


# -- timing ---------------------------------------------------------------------------------------


def _synchronize(devices: Sequence[torch.device]) -> None:
    for device in devices:
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def time_calls(
    fn: Callable[[], object],
    devices: Sequence[torch.device],
    *,
    warmup: int,
    repeats: int,
    before: Callable[[], object] | None = None,
) -> list[float]:
    """Seconds per call of ``fn``, ``repeats`` times after ``warmup`` untimed calls.

    ``before`` runs untimed before each call (resetting state). One CUDA device: CUDA events
    around the call on its stream; several devices: all synchronized, then wall time; CPU:
    ``time.perf_counter``.
    """
    for _ in range(warmup):
        if before is not None:
            before()
        fn()
    _synchronize(devices)
    single_cuda = len(devices) == 1 and devices[0].type == "cuda"
    out = []
    for _ in range(repeats):
        if before is not None:
            before()
        if single_cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1000.0)
        else:
            _synchronize(devices)
            began = time.perf_counter()
            fn()
            _synchronize(devices)
            out.append(time.perf_counter() - began)
    return out


def measure_roofline(device: torch.device, dtype: torch.dtype) -> Roofline:
    """The device's ceiling as measured: the best matmul FLOP/s and the best copy bandwidth
    (bytes read + written per second) over a few sizes, so that a cache-resident working set
    meets a cache-resident peak."""
    gpu = device.type == "cuda"
    sizes = (1024, 4096, 8192) if gpu else (128, 256, 512, 1024)
    best_flops = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        seconds = min(time_calls(partial(torch.matmul, a, b), [device], warmup=1, repeats=5))
        best_flops = max(best_flops, 2.0 * n**3 / seconds)
    mib = 1024 * 1024
    byte_sizes = (64 * mib, 256 * mib, 1024 * mib) if gpu else (256 * 1024, 4 * mib, 64 * mib)
    best_bandwidth = 0.0
    for size in byte_sizes:
        src = torch.ones(size // 4, device=device, dtype=torch.float32)
        dst = torch.empty_like(src)
        seconds = min(time_calls(partial(dst.copy_, src), [device], warmup=1, repeats=5))
        best_bandwidth = max(best_bandwidth, 2.0 * size / seconds)
    return Roofline(best_flops, best_bandwidth, f"measured on {device.type}")


# -- results --------------------------------------------------------------------------------------


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


def _fraction(achieved: float, peak: float) -> tuple[float, bool]:
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


def hardware_info(devices: Sequence[torch.device]) -> dict[str, Any]:
    """The GPU name and count, or the CPU model and thread count."""
    if devices[0].type == "cuda":
        props = torch.cuda.get_device_properties(devices[0])
        return {
            "gpu": props.name,
            "gpus": len(devices),
            "gpu_memory_bytes": int(props.total_memory),
            "compute_capability": f"{props.major}.{props.minor}",
        }
    return {"cpu": cpu_model(), "cpu_threads": torch.get_num_threads(), "gpus": 0}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def software_info() -> dict[str, Any]:
    """torch, Ray, Python and CUDA versions (None where absent)."""
    try:
        import ray

        ray_version: str | None = str(ray.__version__)
    except ImportError:
        ray_version = None
    cuda = torch.cuda.is_available()
    cudnn = torch.backends.cudnn.version() if cuda else None  # type: ignore[no-untyped-call]
    return {
        "torch": str(torch.__version__),
        "ray": ray_version,
        "python": platform.python_version(),
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "platform": platform.platform(),
    }


def host_available_bytes() -> float:
    """Memory the host can still give (MemAvailable), bytes."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    pages = os.sysconf("SC_AVPHYS_PAGES") if hasattr(os, "sysconf") else 0
    return float(pages * os.sysconf("SC_PAGE_SIZE")) if pages else 0.0


# -- the benchmark --------------------------------------------------------------------------------


def _devices(device: str, gpus: int) -> list[torch.device]:
    if device == "cpu":
        return [torch.device("cpu")]
    if device != "cuda":
        raise ValueError(f"device: 'cuda' or 'cpu', not {device!r}")
    if not torch.cuda.is_available():
        raise EngineBenchmarkError(
            "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); run on a GPU worker"
        )
    count = torch.cuda.device_count()
    wanted = max(1, gpus)
    if count < wanted:
        raise EngineBenchmarkError(f"the shape needs {wanted} GPUs, {count} are visible")
    return [torch.device("cuda", i) for i in range(wanted)]


def _free_bytes(devices: Sequence[torch.device]) -> float:
    if devices[0].type == "cuda":
        torch.cuda.empty_cache()
        return float(sum(torch.cuda.mem_get_info(d)[0] for d in devices))
    return host_available_bytes()


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _release(devices: Sequence[torch.device]) -> None:
    if devices[0].type == "cuda":
        torch.cuda.empty_cache()


def run_benchmark(
    dims: ModelDims,
    workload: Workload,
    *,
    device: str = "cpu",
    gpus: int = 1,
    roofline: Roofline | None = None,
    reserve_bytes_per_device: float = 0.0,
    plan: BenchmarkPlan | None = None,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> EngineResult:
    """Measure ``dims`` on ``device`` (``cuda`` with ``gpus`` GPUs, or ``cpu``).

    ``roofline`` defaults to one measured on the device. ``reserve_bytes_per_device`` is
    memory per GPU the runtime keeps (activations, graphs), subtracted from the free memory
    before the KV-bound concurrency; it is not applied on CPU. Raises ``EngineBenchmarkError``
    when no CUDA device is visible or the weights do not fit.
    """
    began = time.perf_counter()
    say = log or (lambda message: None)
    devices = _devices(device, gpus)
    gpu = devices[0].type == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    plan = plan or BenchmarkPlan.for_workload(workload, device)
    notes: list[str] = []
    if gpu and len(devices) > 1:
        notes.append(
            f"layers split across {len(devices)} GPUs and run in sequence (no tensor "
            "parallelism): a lower bound on a tensor-parallel runtime"
        )
    if roofline is None:
        say("measuring the roofline")
        measured = measure_roofline(devices[0], dtype)
        roofline = replace(
            measured,
            peak_flops=measured.peak_flops * len(devices),
            memory_bytes_per_s=measured.memory_bytes_per_s * len(devices),
        )
    max_positions = max(max(plan.prompt_lengths), max(plan.context_lengths) + plan.decode_steps)
    torch.manual_seed(seed)
    say(f"building {dims.parameters / 1e9:.3f} B parameters on {len(devices)} × {devices[0].type}")
    try:
        model = Decoder(dims, devices, dtype, max_positions=max_positions, seed=seed)
    except Exception as exc:
        if _is_oom(exc):
            raise EngineBenchmarkError(
                f"the weights do not fit on {len(devices)} device(s)"
            ) from exc
        raise
    model.eval()
    element = torch.empty((), dtype=dtype).element_size()
    kv_per_token = dims.kv_bytes_per_token(element)
    weight_bytes = model.weight_bytes
    free = _free_bytes(devices)
    reserve = reserve_bytes_per_device if gpu else 0.0
    pool = free - reserve * len(devices)
    max_concurrency = memory.max_concurrent_sequences(pool, plan.sequence_tokens, kv_per_token)
    if max_concurrency < 1:
        notes.append("the KV pool left after the weights and reserve holds no whole sequence")

    def kv_bound(context: int) -> int:
        return memory.max_concurrent_sequences(pool, context + plan.decode_steps, kv_per_token)

    with torch.inference_mode():
        prefill = _measure_prefill(model, plan, roofline, devices, say)
        decode, saturation = _measure_decode(model, plan, roofline, devices, kv_bound, say, notes)

    figure = _figure(plan, prefill, decode, saturation, max_concurrency)
    say("done")
    return EngineResult(
        model=asdict(dims),
        device=devices[0].type,
        devices=len(devices),
        dtype=str(dtype).removeprefix("torch."),
        parameters=dims.parameters,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_per_token,
        free_bytes=free,
        reserve_bytes_per_device=reserve,
        kv_pool_bytes=pool,
        max_concurrency=max_concurrency,
        roofline=asdict(roofline),
        plan=asdict(plan),
        prefill=prefill,
        decode=decode,
        decode_saturation_batch={str(c): b for c, b in saturation.items()},
        figure=figure,
        hardware=hardware_info(devices),
        software=software_info(),
        notes=notes,
        seconds=time.perf_counter() - began,
    )


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


def _measure_prefill(
    model: Decoder,
    plan: BenchmarkPlan,
    roofline: Roofline,
    devices: Sequence[torch.device],
    say: Callable[[str], None],
) -> list[PrefillPoint]:
    points = []
    generator = torch.Generator().manual_seed(1)
    for length in plan.prompt_lengths:
        batch = max(1, plan.prefill_token_budget // length)
        while True:
            tokens = torch.randint(model.dims.vocab_size, (batch, length), generator=generator).to(
                devices[0]
            )
            try:
                times = time_calls(
                    partial(model, tokens),
                    devices,
                    warmup=plan.warmup,
                    repeats=plan.repeats,
                )
                break
            except Exception as exc:
                if not _is_oom(exc) or batch == 1:
                    raise
                del tokens
                _release(devices)
                batch //= 2
        seconds = statistics.median(times)
        flops = prefill_flops(model.dims, batch, length)
        fraction, above = _fraction(flops / seconds, roofline.peak_flops)
        point = PrefillPoint(
            prompt_length=length,
            batch=batch,
            tokens=batch * length,
            seconds=seconds,
            tokens_per_s=batch * length / seconds,
            flops=flops,
            achieved_flops=flops / seconds,
            roofline_fraction=fraction,
            above_roofline=above,
            repeats_s=times,
        )
        say(
            f"prefill {length:>6} × {batch:<4} {point.tokens_per_s:12,.0f} tokens/s "
            f"({fraction:.1%} of peak FLOP/s)"
        )
        points.append(point)
        _release(devices)
    return points


def _decode_runner(
    model: Decoder,
    batch: int,
    context: int,
    steps: int,
    devices: Sequence[torch.device],
    use_graph: bool,
) -> tuple[Callable[[], object], Callable[[], object], list[Any]]:
    """(run ``steps`` decode steps, reset to ``context``, things to free) for one point."""
    cache = model.new_cache(batch, context + steps)
    tokens = torch.zeros(batch, dtype=torch.long, device=devices[0])
    position = torch.full((1,), context, dtype=torch.long, device=devices[0])

    def reset() -> None:
        # Back to the first step: every timed run decodes the same tokens at the same positions.
        position.fill_(context)
        tokens.zero_()

    if not use_graph:

        def eager() -> None:
            for _ in range(steps):
                model.decode_step(tokens, position, cache)

        return eager, reset, [cache, tokens, position]

    # Warm up on a side stream before capture, as CUDA graph capture requires.
    stream = torch.cuda.Stream(devices[0])  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream(devices[0]))
    with torch.cuda.stream(stream):
        for _ in range(2):
            reset()
            model.decode_step(tokens, position, cache)
    torch.cuda.current_stream(devices[0]).wait_stream(stream)
    reset()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model.decode_step(tokens, position, cache)

    def replay() -> None:
        for _ in range(steps):
            graph.replay()

    return replay, reset, [cache, tokens, position, graph]


def _measure_decode(
    model: Decoder,
    plan: BenchmarkPlan,
    roofline: Roofline,
    devices: Sequence[torch.device],
    kv_bound: Callable[[int], int],
    say: Callable[[str], None],
    notes: list[str],
) -> tuple[list[DecodePoint], dict[int, int | None]]:
    gpu = devices[0].type == "cuda"
    use_graph = gpu and len(devices) == 1 and plan.cuda_graphs
    element = torch.empty((), dtype=model.dtype).element_size()
    points: list[DecodePoint] = []
    saturation: dict[int, int | None] = {}
    for context in plan.context_lengths:
        limit = min(plan.max_batch, kv_bound(context))
        if limit < 1:
            notes.append(f"decode at context {context}: not one sequence fits in the KV pool")
            saturation[context] = None
            continue
        batches = []
        batch = 1
        while batch <= limit:
            batches.append(batch)
            batch *= 2
        series: list[tuple[int, float]] = []
        for batch in batches:
            try:
                run, reset, held = _decode_runner(
                    model, batch, context, plan.decode_steps, devices, use_graph
                )
                times = time_calls(
                    run, devices, warmup=plan.warmup, repeats=plan.repeats, before=reset
                )
            except Exception as exc:
                if not _is_oom(exc):
                    raise
                notes.append(f"decode at context {context}: out of memory at batch {batch}")
                _release(devices)
                break
            del held, run, reset
            step = statistics.median(times) / plan.decode_steps
            # The attended context grows by one per step: its mean over the timed steps.
            mean_context = context + (plan.decode_steps - 1) / 2 + 1
            moved = decode_bytes_per_step(model.dims, batch, mean_context, element)
            fraction, above = _fraction(moved / step, roofline.memory_bytes_per_s)
            point = DecodePoint(
                context_length=context,
                batch=batch,
                step_seconds=step,
                tokens_per_s=batch / step,
                bytes_per_step=moved,
                achieved_bytes_per_s=moved / step,
                roofline_fraction=fraction,
                above_roofline=above,
                cuda_graph=use_graph,
                repeats_s=[t / plan.decode_steps for t in times],
            )
            say(
                f"decode  ctx {context:>6} batch {batch:<4} {point.tokens_per_s:12,.0f} tokens/s "
                f"({fraction:.1%} of peak bandwidth)"
            )
            points.append(point)
            series.append((batch, point.tokens_per_s))
            _release(devices)
        saturation[context] = saturation_batch(series, plan.scaling_threshold)
    return points, saturation


def _figure(
    plan: BenchmarkPlan,
    prefill: Sequence[PrefillPoint],
    decode: Sequence[DecodePoint],
    saturation: Mapping[int, int | None],
    max_concurrency: int,
) -> dict[str, Any]:
    """The capacity figure: prefill tokens/s at the workload's mean prompt; decode tokens/s
    at its mean context and the batch where decode stops scaling (the largest batch measured
    when it never stopped), never above the KV-bound concurrency; that concurrency."""
    at_prompt = [p for p in prefill if p.prompt_length == plan.figure_prompt_length]
    if not at_prompt:
        raise EngineBenchmarkError("no prefill point at the workload's prompt length")
    at_context = [d for d in decode if d.context_length == plan.figure_context_length]
    if not at_context:
        raise EngineBenchmarkError(
            f"no decode point at the workload's context ({plan.figure_context_length} tokens): "
            "the KV pool holds no such sequence"
        )
    knee = saturation.get(plan.figure_context_length)
    candidates = [d for d in at_context if knee is None or d.batch <= knee]
    chosen = max(candidates, key=lambda d: d.batch)
    return {
        "prefill_tokens_per_s": at_prompt[0].tokens_per_s,
        "decode_tokens_per_s": chosen.tokens_per_s,
        "max_concurrency": max_concurrency,
        "prompt_length": plan.figure_prompt_length,
        "context_length": plan.figure_context_length,
        "decode_batch": chosen.batch,
        "decode_saturation_batch": knee,
        "prefill_roofline_fraction": at_prompt[0].roofline_fraction,
        "decode_roofline_fraction": chosen.roofline_fraction,
    }


def run_job(job: Mapping[str, Any], log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run a job as the control plane describes it (plain data: ``model`` dimensions,
    ``workload`` lengths, ``device``, ``gpus``, ``reserve_bytes_per_device``, ``accelerator``
    peak figures or None) and return the result as plain data."""
    dims = ModelDims.from_mapping(job["model"])
    workload = Workload.from_mapping(job["workload"])
    device = str(job.get("device", "cpu"))
    gpus = int(job.get("gpus", 0) or 0)
    accelerator = job.get("accelerator")
    roofline = None
    if accelerator and device == "cuda":
        spec = AcceleratorSpec(
            name=str(accelerator["name"]),
            peak_tflops=float(accelerator["peak_tflops"]),
            memory_tbps=float(accelerator["memory_tbps"]),
            memory_gb=float(accelerator.get("memory_gb", 0.0)),
        )
        roofline = spec.roofline(max(1, gpus))
    plan = None
    if job.get("plan"):
        plan = BenchmarkPlan.from_mapping(job["plan"])
    result = run_benchmark(
        dims,
        workload,
        device=device,
        gpus=max(1, gpus),
        roofline=roofline,
        reserve_bytes_per_device=float(job.get("reserve_bytes_per_device", 0.0)),
        plan=plan,
        log=log,
    )
    return result.to_dict()


# -- command line ---------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workers.benchmarks.engine",
        description="Measure prefill and decode throughput of a Llama-style model with random "
        "weights, and its KV-bound concurrency, against the hardware roofline.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--accelerator", choices=sorted(ACCELERATORS), help="data-sheet roofline")
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when visible")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per replica (default 1)")
    parser.add_argument("--prompt-tokens", type=int, default=1024, help="mean prompt")
    parser.add_argument("--prompt-tokens-p95", type=int, help="default: 2 × the mean")
    parser.add_argument("--output-tokens", type=int, default=256, help="mean output")
    parser.add_argument("--output-tokens-p95", type=int, help="default: 2 × the mean")
    parser.add_argument(
        "--reserve-gb", type=float, default=6.0, help="runtime reserve per GPU, decimal GB"
    )
    parser.add_argument("--max-batch", type=int, help="largest decode batch tried")
    parser.add_argument("--repeats", type=int, help="timed repeats per point")
    parser.add_argument("--no-cuda-graphs", action="store_true", help="decode eagerly on GPU")
    parser.add_argument("--ray", action="store_true", help="run as a Ray task asking for --gpus")
    parser.add_argument("--ray-address", help="Ray cluster address (default: a local Ray)")
    parser.add_argument("--output", type=Path, help="write the full result as JSON here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    workload = Workload(
        prompt_tokens_mean=args.prompt_tokens,
        prompt_tokens_p95=args.prompt_tokens_p95 or 2 * args.prompt_tokens,
        output_tokens_mean=args.output_tokens,
        output_tokens_p95=args.output_tokens_p95 or 2 * args.output_tokens,
    )
    plan = BenchmarkPlan.for_workload(workload, device)
    changes: dict[str, Any] = {}
    if args.max_batch:
        changes["max_batch"] = args.max_batch
    if args.repeats:
        changes["repeats"] = args.repeats
    if args.no_cuda_graphs:
        changes["cuda_graphs"] = False
    plan = replace(plan, **changes)
    spec = ACCELERATORS[args.accelerator] if args.accelerator else None
    job: dict[str, Any] = {
        "model": asdict(PRESETS[args.preset]),
        "workload": asdict(workload),
        "device": device,
        "gpus": args.gpus if device == "cuda" else 0,
        "reserve_bytes_per_device": args.reserve_gb * GB,
        "accelerator": asdict(spec) if spec else None,
        "plan": asdict(plan),
    }
    if args.ray:
        from workers.benchmarks import ray_runner

        result = ray_runner.run_engine_job(job, address=args.ray_address)
    else:
        result = run_job(job, log=lambda message: print(message, file=sys.stderr, flush=True))
    text = json.dumps(result, indent=2, default=str)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    print(json.dumps({"preset": args.preset, **result["figure"]}, indent=2))
    print(
        f"hardware: {result['hardware']}; software: torch {result['software']['torch']}, "
        f"cuda {result['software']['cuda']}; {result['seconds']:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
