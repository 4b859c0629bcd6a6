"""Records the benchmark tests share: a tiny model the engine benchmark runs on a CPU in
seconds, a shape of it on one GPU, a workload profile, and a fake engine runner.

This module holds no test; it is named like the benchmark tests so that it sits with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone

from controlplane.benchmarks.conf import BenchmarkSettings
from controlplane.fleet.models import (
    AcceleratorType,
    CapacityFigure,
    Geography,
    LlmModel,
    Region,
    ReplicaShape,
    WorkloadClass,
)
from controlplane.policies.models import Tenant, Tier, WorkloadProfile


@dataclass
class BenchFleet:
    region: Region
    accelerator: AcceleratorType
    model: LlmModel
    shape: ReplicaShape
    tenant: Tenant
    workload_class: WorkloadClass


def _saved(obj: Any) -> Any:
    obj.full_clean()
    obj.save()
    return obj


def make_bench_fleet(*, architecture: bool = True) -> BenchFleet:
    """A tiny Llama-shaped model (2 layers, hidden 64, 4 heads, 2 KV heads, head dim 16,
    vocabulary 256) on one 80 GB GPU, with one tenant sending it short prompts."""
    geography = _saved(Geography(name="eu"))
    region = _saved(Region(name="eu-west", geography=geography))
    accelerator = _saved(
        AcceleratorType(
            name="h100-80gb",
            memory_gb=80,
            peak_bf16_tflops=989,
            memory_tbps=3.35,
            on_demand_price_per_gpu_hour=4.0,
            reserved_price_per_gpu_hour=2.5,
        )
    )
    dims: dict[str, int] = (
        {"hidden_size": 64, "intermediate_size": 128, "attention_heads": 4, "vocab_size": 256}
        if architecture
        else {}
    )
    model = _saved(
        LlmModel(
            name="tiny-llama",
            parameters_billions=0.0001,
            layers=2,
            kv_heads=2,
            head_dim=16,
            **dims,
        )
    )
    shape = _saved(
        ReplicaShape(
            name="tiny-llama-h100x1",
            model=model,
            accelerator=accelerator,
            gpus_per_replica=1,
            runtime_version="vllm-0.6.3",
        )
    )
    tier = _saved(Tier(name="gold", p95_ttft_slo_s=0.8))
    tenant = _saved(Tenant(name="acme", tier=tier, home_region=region))
    workload_class = _saved(WorkloadClass(name="chat"))
    make_profile(tenant=tenant, model=model, workload_class=workload_class, version=1)
    return BenchFleet(region, accelerator, model, shape, tenant, workload_class)


def make_profile(
    *, tenant: Tenant, model: LlmModel, workload_class: WorkloadClass, version: int
) -> WorkloadProfile:
    """A short-prompt profile (mean 40 prompt, 12 output tokens)."""
    return _saved(
        WorkloadProfile(
            tenant=tenant,
            model=model,
            workload_class=workload_class,
            version=version,
            peak_requests_per_s=5,
            prompt_tokens_p50=32,
            prompt_tokens_mean=40,
            prompt_tokens_p95=64,
            prompt_tokens_p99=96,
            output_tokens_p50=10,
            output_tokens_mean=12,
            output_tokens_p95=24,
            output_tokens_p99=32,
        )
    )


def make_figure(
    shape: ReplicaShape, *, age_days: float = 1.0, provenance: Mapping[str, Any] | None = None
) -> CapacityFigure:
    """A whole-mix figure measured ``age_days`` ago."""
    return _saved(
        CapacityFigure(
            shape=shape,
            prefill_tokens_per_s=4000,
            decode_tokens_per_s=160,
            max_concurrency=32,
            measured_at=timezone.now() - timedelta(days=age_days),
            source=CapacityFigure.Source.MANUAL,
            provenance=dict(provenance or {}),
        )
    )


@dataclass
class FakeRunner:
    """An engine runner that answers with fixed figures (or raises), recording its jobs."""

    figure: dict[str, Any] = field(
        default_factory=lambda: {
            "prefill_tokens_per_s": 12000.0,
            "decode_tokens_per_s": 900.0,
            "max_concurrency": 48,
        }
    )
    error: Exception | None = None
    jobs: list[Mapping[str, Any]] = field(default_factory=list)

    def __call__(self, job: Mapping[str, Any], conf: BenchmarkSettings) -> Mapping[str, Any]:
        self.jobs.append(job)
        if self.error is not None:
            raise self.error
        return {
            "figure": dict(self.figure),
            "hardware": {"gpu": "Fake GPU", "gpus": job["gpus"]},
            "software": {"torch": "0", "ray": "0", "python": "3", "cuda": None},
            "prefill": [],
            "decode": [],
        }
