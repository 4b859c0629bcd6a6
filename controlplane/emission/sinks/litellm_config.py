"""LiteLLM sink: the region's gateway configuration, ``<directory>/<region>.yaml``.

A LiteLLM proxy started with this file (``litellm --config <region>.yaml``) splits each
tenant's traffic for a model the way the plan does: one ``model_list`` entry (a LiteLLM
"deployment") per destination of the demands whose home region this is, grouped under the
model name ``<tenant>/<model>``, each with its ``weight``, under ``router_settings.
routing_strategy: simple-shuffle``, which picks a deployment of the group at random in
proportion to ``weight`` (LiteLLM ``router_strategy/simple_shuffle.py``).

- A self-hosted pool (a region and model the plan routes the demand to; every shape of the
  model in that region sits behind one endpoint) is ``hosted_vllm/<model>`` at the sink's
  ``endpoint_template`` (by default the Kubernetes sink's Service for the region and model).
- A hosted provider is ``<provider>/<the provider's model id>`` at its ``api_base``, both
  from the sink's ``hosted_endpoints`` entry for that provider, with ``api_key:
  os.environ/<NAME>``: LiteLLM reads the key from the proxy's environment; no secret is
  written. A provider the plan uses without an entry fails the delivery (naming it), since a
  file without it would send its share elsewhere.

``weight`` is an integer (LiteLLM types it ``int``): the destination's share of the group's
served traffic in parts per ``WEIGHT_TOTAL``, rounded so that a group's weights add up to
exactly ``WEIGHT_TOTAL`` and no destination the plan uses gets 0. ``rpm`` and ``tpm`` are the
plan's share for that destination (planned units, × burst, rounded up): ``simple-shuffle``
ignores them while ``weight`` is set, and LiteLLM enforces them only with
``optional_pre_call_checks: ["enforce_model_rate_limits"]``.

Written like the Kubernetes sink: atomically, under the region's lock, never over a newer plan
version (read from the header comment).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from controlplane.emission.models import DEFAULT_ENDPOINT_TEMPLATE
from controlplane.emission.sinks.base import (
    Delivery,
    DeliveryResult,
    Outcome,
    header_version,
    safe_name,
    write_newest,
)

if TYPE_CHECKING:
    from controlplane.emission.models import AllocationSink

# The parts a model group's weights add up to.
WEIGHT_TOTAL = 10_000
ROUTING_STRATEGY = "simple-shuffle"
SELF_HOSTED_PROVIDER = "hosted_vllm"
# The Kubernetes sink's name length for objects (its Service names).
_NAME_LENGTH = 63
_HEADER = re.compile(rb"^# headroom-litellm plan-version=(\d+) ")


class GatewayConfigError(ValueError):
    """The document cannot be rendered with this sink's settings (a provider without an
    endpoint entry): nothing a retry would change."""


@dataclass(frozen=True)
class Endpoints:
    """Where the deployments point: the sink's settings, read once."""

    template: str = DEFAULT_ENDPOINT_TEMPLATE
    namespace: str = "default"
    hosted: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, sink: AllocationSink) -> Endpoints:
        return cls(
            template=sink.endpoint_template or DEFAULT_ENDPOINT_TEMPLATE,
            namespace=sink.namespace or "default",
            hosted=dict(sink.hosted_endpoints or {}),
        )

    def pool_base(self, region: str, model: str) -> str:
        return self.template.format(
            region=region,
            model=model,
            service=safe_name(f"{region}-{model}", _NAME_LENGTH),
            namespace=self.namespace,
        )


def api_key_env(provider: str) -> str:
    """The default environment variable of a provider's key: ``HOSTED_API_API_KEY`` for
    ``hosted-api``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", provider).strip("_").upper() + "_API_KEY"


def integer_weights(shares: Sequence[float], total: int = WEIGHT_TOTAL) -> list[int]:
    """``shares`` (non-negative, any scale) as whole parts of ``total``: largest remainders,
    so they add up to ``total``; a positive share never rounds to 0."""
    whole = sum(shares)
    if whole <= 0 or not shares:
        return [0 for _ in shares]
    exact = [s / whole * total for s in shares]
    parts = [max(1, math.floor(x)) if s > 0 else 0 for s, x in zip(shares, exact, strict=True)]
    order = sorted(range(len(shares)), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
    left = total - sum(parts)
    for i in order:
        if left <= 0:
            break
        if shares[i] > 0:
            parts[i] += 1
            left -= 1
    # Only the floor of 1 can overshoot: take it back from the largest parts.
    for i in sorted(range(len(parts)), key=lambda i: (-parts[i], i)):
        if left >= 0:
            break
        if parts[i] > 1:
            parts[i] -= 1
            left += 1
    return parts


@dataclass
class _Target:
    """One destination of a model group, summed over the group's demands."""

    order: tuple[Any, ...]
    params: dict[str, Any]
    info: dict[str, Any]
    requests_per_s: float = 0.0
    tokens_per_minute: float = 0.0


def _hosted_params(
    endpoints: Endpoints, provider: str, model: str, *, tenant: str
) -> dict[str, Any]:
    entry = endpoints.hosted.get(provider)
    if entry is None:
        raise GatewayConfigError(
            f"the plan sends part of {tenant}'s {model} traffic to hosted provider "
            f"{provider!r}, which has no entry in the sink's hosted_endpoints"
        )
    model_id = dict(entry.get("models") or {}).get(model, model)
    params: dict[str, Any] = {"model": f"{entry['provider']}/{model_id}"}
    if entry.get("api_base"):
        params["api_base"] = entry["api_base"]
    params["api_key"] = f"os.environ/{entry.get('api_key_env') or api_key_env(provider)}"
    return params


def gateway_config(document: Mapping[str, Any], endpoints: Endpoints) -> dict[str, Any]:
    """The LiteLLM proxy configuration of one region document's ``routing_weights``.

    One model group per tenant and model (the demands of one tenant on one model add up);
    inside it one deployment per destination. A group the plan serves nothing of gets no
    entry (LiteLLM needs a deployment to pick). Raises ``GatewayConfigError`` for a hosted
    provider without an endpoint entry.
    """
    groups: dict[str, dict[tuple[str, ...], _Target]] = defaultdict(dict)
    for demand in document.get("routing_weights") or ():
        tenant, model = str(demand["tenant"]), str(demand["model"])
        group = f"{tenant}/{model}"
        tokens = float(demand.get("tokens_per_request") or 0.0)
        for target in demand["targets"]:
            rate = float(target["requests_per_s"])
            if rate <= 0:
                continue
            if target["kind"] == "hosted":
                provider = str(target["provider"])
                key: tuple[str, ...] = ("hosted", provider)
                found = groups[group].get(key)
                if found is None:
                    found = groups[group][key] = _Target(
                        order=(1, provider),
                        params=_hosted_params(endpoints, provider, model, tenant=tenant),
                        info={
                            "headroom_target": "hosted",
                            "headroom_provider": provider,
                            "headroom_region": str(target.get("region") or ""),
                        },
                    )
                found.tokens_per_minute += float(target.get("tokens_per_minute") or 0.0)
            else:
                region = str(target["region"])
                key = ("pool", region)
                found = groups[group].get(key)
                if found is None:
                    found = groups[group][key] = _Target(
                        order=(0, region),
                        params={
                            "model": f"{SELF_HOSTED_PROVIDER}/{model}",
                            "api_base": endpoints.pool_base(region, model),
                        },
                        info={"headroom_target": "pool", "headroom_region": region},
                    )
                found.tokens_per_minute += rate * 60.0 * tokens
            found.requests_per_s += rate
    model_list: list[dict[str, Any]] = []
    for group, targets in sorted(groups.items()):
        ordered = sorted(targets.values(), key=lambda t: t.order)
        weights = integer_weights([t.requests_per_s for t in ordered])
        for target, weight in zip(ordered, weights, strict=True):
            where = target.info.get("headroom_provider") or target.info["headroom_region"]
            model_list.append(
                {
                    "model_name": group,
                    "litellm_params": {
                        **target.params,
                        "weight": weight,
                        "rpm": max(1, math.ceil(target.requests_per_s * 60.0 - 1e-9)),
                        "tpm": max(1, math.ceil(target.tokens_per_minute - 1e-9)),
                    },
                    "model_info": {
                        "id": f"{group}@{target.info['headroom_target']}:{where}",
                        **target.info,
                        "headroom_requests_per_s": target.requests_per_s,
                    },
                }
            )
    return {"model_list": model_list, "router_settings": {"routing_strategy": ROUTING_STRATEGY}}


def render(document: Mapping[str, Any], config: Mapping[str, Any]) -> bytes:
    """The file: a header naming the plan version (read back by the version check), then the
    configuration."""
    header = (
        f"# headroom-litellm plan-version={int(document['plan']['version'])} "
        f"region={document['region']}\n"
        "# Written by Headroom on plan activation; edits are overwritten.\n"
    )
    body = yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=False)
    return (header + body).encode("utf-8")


def region_path(directory: Path, region: str) -> Path:
    return directory / f"{safe_name(region)}.yaml"


def written_version(path: Path) -> int | None:
    return header_version(path, _HEADER)


def deliver(sink: AllocationSink, delivery: Delivery) -> DeliveryResult:
    try:
        directory = sink.resolved_directory()
    except ValueError as exc:
        return DeliveryResult(Outcome.FAILED, error=str(exc))
    try:
        config = gateway_config(delivery.payload, Endpoints.of(sink))
    except GatewayConfigError as exc:
        return DeliveryResult(Outcome.FAILED, error=f"cannot build the LiteLLM config: {exc}")
    except (KeyError, TypeError, ValueError) as exc:
        return DeliveryResult(Outcome.FAILED, error=f"cannot build the LiteLLM config: {exc!r}")
    data = render(delivery.payload, config)
    path = region_path(directory, delivery.region)
    return write_newest(
        directory=directory,
        delivery=delivery,
        path=path,
        data=data,
        written_version=written_version,
    )
