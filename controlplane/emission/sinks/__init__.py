"""Sinks: where one outbox row's document is delivered, and what came of it.

Each sink module exposes ``deliver(sink, delivery) -> DeliveryResult`` and never raises for a
failure it can name: the outcome says whether the dispatcher should retry (the destination is
down, slow, or asked for later) or give up (the destination refused the request, or the sink is
misconfigured). ``deliver`` below picks the module by the sink's kind.
"""

from __future__ import annotations

from controlplane.emission.models import AllocationSink
from controlplane.emission.sinks import files, kubernetes, litellm_config, webhook
from controlplane.emission.sinks.base import (
    Delivery,
    DeliveryResult,
    Outcome,
    canonical_json,
    region_lock,
    safe_name,
    write_atomically,
)

__all__ = [
    "Delivery",
    "DeliveryResult",
    "Outcome",
    "canonical_json",
    "deliver",
    "files",
    "kubernetes",
    "litellm_config",
    "region_lock",
    "safe_name",
    "webhook",
    "write_atomically",
]


def deliver(sink: AllocationSink, delivery: Delivery) -> DeliveryResult:
    """Deliver through the module for the sink's kind."""
    if sink.kind == AllocationSink.Kind.WEBHOOK:
        return webhook.deliver(sink, delivery)
    if sink.kind == AllocationSink.Kind.FILES:
        return files.deliver(sink, delivery)
    if sink.kind == AllocationSink.Kind.KUBERNETES:
        return kubernetes.deliver(sink, delivery)
    if sink.kind == AllocationSink.Kind.LITELLM:
        return litellm_config.deliver(sink, delivery)
    return DeliveryResult(Outcome.FAILED, error=f"unknown sink kind {sink.kind!r}")
