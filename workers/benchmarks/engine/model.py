"""The engine benchmark's model: a Llama-style decoder with random weights, in PyTorch.

Token embedding, per layer RMSNorm → attention (rotary position embeddings, grouped-query
attention through ``torch.nn.functional.scaled_dot_product_attention``) → RMSNorm → SwiGLU MLP,
each with a residual, then a final RMSNorm and the output projection. Layers may be split over
several devices (run one after the other). Prefill computes the logits of the last position
only; decode writes into a preallocated KV cache (``KVCache``).

Units: tokens, elements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from workers.benchmarks.engine.config import ModelDims


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
