"""A small activated plan for the emission tests, built like the seeds' sizing examples.

Three regions. In ``eu`` the tenant acme's chat (8 requests/s of 100 output tokens at 100
tokens/s, so 1 replica-second each; burst 1.5; zone promise; 5 s in the system) runs on 27
one-GPU replicas, 9 per zone, and its batch job (2 requests/s, no residence time given) on 3
two-GPU replicas. In ``us`` globex's search, the seeds' own example (8 requests/s, burst 1.5,
no promise), runs on 18 replicas over two zones. ``ap`` gets nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.emission.models import AllocationSink
from controlplane.fleet.models import AcceleratorType, LlmModel, ReplicaShape
from controlplane.plans.models import Plan, PlanAllocation, PlanRouting

GPU_HOUR = 2.0
SECRET = "s3cret-for-tests-0123456789abcdef"

PROBLEM: dict[str, Any] = {
    "format": "placement-problem/v1",
    "target_utilization": 0.7,
    "regions": [
        {"name": "eu", "geo": "eu", "zones": ["eu-a", "eu-b", "eu-c"]},
        {"name": "us", "geo": "us", "zones": ["us-a", "us-b"]},
        {"name": "ap", "geo": "ap", "zones": ["ap-a"]},
    ],
    "accelerators": [{"name": "gpu80", "memory_gb": 80, "price_per_gpu_hour": GPU_HOUR}],
    "inventory": [
        {"zone": "eu-a", "accelerator": "gpu80", "gpus": 40},
        {"zone": "eu-b", "accelerator": "gpu80", "gpus": 40},
        {"zone": "eu-c", "accelerator": "gpu80", "gpus": 40},
        {"zone": "us-a", "accelerator": "gpu80", "gpus": 20},
        {"zone": "us-b", "accelerator": "gpu80", "gpus": 20},
        {"zone": "ap-a", "accelerator": "gpu80", "gpus": 8},
    ],
    "shapes": [
        {
            "name": "m/gpu80x1",
            "model": "m",
            "accelerator": "gpu80",
            "gpus": 1,
            "prefill_tokens_per_s": 4000,
            "decode_tokens_per_s": 100,
            "max_concurrency": 32,
        },
        {
            "name": "m/gpu80x2",
            "model": "m",
            "accelerator": "gpu80",
            "gpus": 2,
            "prefill_tokens_per_s": 8000,
            "decode_tokens_per_s": 200,
        },
    ],
    "rtt_ms": [{"from": "eu", "to": "us", "ms": 90}],
    "demands": [
        {
            "id": "acme/chat",
            "tenant": "acme",
            "model": "m",
            "home_region": "eu",
            "allowed_regions": ["eu"],
            "requests_per_s": 8.0,
            "burst": 1.5,
            "prompt_tokens": 0,
            "output_tokens": 100,
            "residence_s": 5.0,
            "promise": "zone",
        },
        {
            "id": "acme/batch",
            "tenant": "acme",
            "model": "m",
            "home_region": "eu",
            "allowed_regions": ["eu"],
            "requests_per_s": 2.0,
            "prompt_tokens": 0,
            "output_tokens": 200,
        },
        {
            "id": "globex/search",
            "tenant": "globex",
            "model": "m",
            "home_region": "us",
            "allowed_regions": ["us"],
            "requests_per_s": 8.0,
            "burst": 1.5,
            "prompt_tokens": 0,
            "output_tokens": 100,
            "residence_s": 5.0,
        },
    ],
}

# (region, zone, shape, gpus per replica, replicas)
ALLOCATIONS = [
    ("eu", "eu-a", "m/gpu80x1", 1, 9),
    ("eu", "eu-b", "m/gpu80x1", 1, 9),
    ("eu", "eu-c", "m/gpu80x1", 1, 9),
    ("eu", "eu-a", "m/gpu80x2", 2, 3),
    ("us", "us-a", "m/gpu80x1", 1, 9),
    ("us", "us-b", "m/gpu80x1", 1, 9),
]
# (demand, tenant, region, shape, planned requests/s)
ROUTING = [
    ("acme/chat", "acme", "eu", "m/gpu80x1", 12.0),
    ("acme/batch", "acme", "eu", "m/gpu80x2", 2.0),
    ("globex/search", "globex", "us", "m/gpu80x1", 12.0),
]


def solution() -> dict[str, Any]:
    """The placement-solution/v1 document of the rows above."""
    cost = sum(GPU_HOUR * gpus * n for _, _, _, gpus, n in ALLOCATIONS)
    return {
        "format": "placement-solution/v1",
        "status": "optimal",
        "cost_per_hour": cost,
        "unserved_requests_per_s": 0.0,
        "replicas": [{"zone": z, "shape": s, "replicas": n} for _, z, s, _, n in ALLOCATIONS],
        "routing": [
            {"demand": d, "region": r, "shape": s, "requests_per_s": x} for d, _, r, s, x in ROUTING
        ],
        "unserved": [],
        "binding": [],
    }


def shape_records() -> None:
    """The fleet records of the plan's two shapes: how a cluster starts them."""
    gpu, _ = AcceleratorType.objects.get_or_create(
        name="gpu80",
        defaults={
            "memory_gb": 80,
            "peak_bf16_tflops": 312,
            "memory_tbps": 2.0,
            "on_demand_price_per_gpu_hour": GPU_HOUR,
            "reserved_price_per_gpu_hour": GPU_HOUR,
            "gpu_product": "NVIDIA-A100-SXM4-80GB",
        },
    )
    model, _ = LlmModel.objects.get_or_create(
        name="m",
        defaults={"parameters_billions": 8, "layers": 32, "kv_heads": 8, "head_dim": 128},
    )
    for name, gpus in (("m/gpu80x1", 1), ("m/gpu80x2", 2)):
        ReplicaShape.objects.get_or_create(
            name=name,
            defaults={
                "model": model,
                "accelerator": gpu,
                "gpus_per_replica": gpus,
                "model_path": "org/m-instruct",
                "max_model_len": 8192,
                "extra_args": ["--enable-prefix-caching"],
            },
        )


def make_plan(version: int = 1, *, state: str = Plan.State.ACTIVE, scale: int = 1) -> Plan:
    """The plan above as version ``version``; ``scale`` multiplies every replica count (a
    different plan with the same regions). The shapes' fleet records are created with it."""
    shape_records()
    plan = Plan.objects.create(
        version=version,
        inputs_hash=f"{version:064x}",
        state=state,
        solver_status=Plan.SolverStatus.OPTIMAL,
        problem=PROBLEM,
        solution=solution(),
        cost_per_hour=solution()["cost_per_hour"] * scale,
        activated_at=timezone.now() if state == Plan.State.ACTIVE else None,
    )
    PlanAllocation.objects.bulk_create(
        PlanAllocation(
            plan=plan,
            region=region,
            zone=zone,
            shape=shape,
            accelerator="gpu80",
            gpus_per_replica=gpus,
            replicas=n * scale,
            cost_per_hour=GPU_HOUR * gpus * n * scale,
        )
        for region, zone, shape, gpus, n in ALLOCATIONS
    )
    PlanRouting.objects.bulk_create(
        PlanRouting(plan=plan, demand=d, tenant=t, region=r, shape=s, requests_per_s=x)
        for d, t, r, s, x in ROUTING
    )
    return plan


def webhook_sink(url: str, *, name: str = "hook", timeout_s: float = 5.0) -> AllocationSink:
    sink = AllocationSink(
        kind=AllocationSink.Kind.WEBHOOK, name=name, url=url, secret=SECRET, timeout_s=timeout_s
    )
    sink.full_clean()
    sink.save()
    return sink


def files_sink(directory: str = "allocations", *, name: str = "files") -> AllocationSink:
    sink = AllocationSink(kind=AllocationSink.Kind.FILES, name=name, directory=directory)
    sink.full_clean()
    sink.save()
    return sink


def kubernetes_sink(
    directory: str = "manifests", *, name: str = "k8s", apply: bool = False
) -> AllocationSink:
    sink = AllocationSink(
        kind=AllocationSink.Kind.KUBERNETES,
        name=name,
        directory=directory,
        namespace="inference",
        container_image="registry.example/vllm:0.8",
        kubectl_apply=apply,
    )
    sink.full_clean()
    sink.save()
    return sink


def activate(plan: Plan) -> list[Any]:
    """What ``plan_activate`` does, as far as emission is concerned: the plan becomes the
    active one and its outbox rows are written in the same transaction."""
    from controlplane.emission import services

    with transaction.atomic():
        Plan.objects.filter(state=Plan.State.ACTIVE).exclude(pk=plan.pk).update(
            state=Plan.State.SUPERSEDED
        )
        plan.state = Plan.State.ACTIVE
        plan.activated_at = timezone.now()
        plan.save()
        return services.outbox_enqueue_for_plan(plan=plan)
