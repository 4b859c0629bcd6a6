"""Placement problems shared by more than one test module."""

from __future__ import annotations

from typing import Any


def shared_inventory_problem() -> dict[str, Any]:
    """Two models whose cheap shapes, each alone, fit the zones' g80 GPUs; together not."""

    def shape(model: str, accelerator: str, gpus: int) -> dict[str, Any]:
        return {
            "name": f"{model}/{accelerator}x{gpus}",
            "model": model,
            "accelerator": accelerator,
            "gpus": gpus,
            "prefill_tokens_per_s": 1000.0,
            "decode_tokens_per_s": 100.0,
        }

    def demand(model: str, rate: float) -> dict[str, Any]:
        return {
            "id": f"t/{model}",
            "tenant": "t",
            "model": model,
            "home_region": "r",
            "requests_per_s": rate,
            "prompt_tokens": 0,
            "output_tokens": 100,
        }

    return {
        "target_utilization": 0.7,
        "regions": [{"name": "r", "zones": ["r-a", "r-b"]}],
        "accelerators": [
            {"name": "g80", "price_per_gpu_hour": 2.0},
            {"name": "g2", "price_per_gpu_hour": 5.0},
        ],
        "inventory": [
            {"zone": "r-a", "accelerator": "g80", "gpus": 8},
            {"zone": "r-b", "accelerator": "g80", "gpus": 8},
            {"zone": "r-a", "accelerator": "g2", "gpus": 16},
            {"zone": "r-b", "accelerator": "g2", "gpus": 16},
        ],
        "shapes": [
            shape("m1", "g80", 2),
            shape("m1", "g2", 1),
            shape("m2", "g80", 2),
            shape("m2", "g2", 1),
        ],
        # 5 and 4 replicas of load: 18 g80 GPUs uncoupled, 16 in the region.
        "demands": [demand("m1", 3.5), demand("m2", 2.8)],
    }
