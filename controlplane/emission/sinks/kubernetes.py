"""Kubernetes sink: per region one YAML file, ``<directory>/<region>.yaml``, holding for each
shape in the region a Deployment and a HorizontalPodAutoscaler; optionally applied with kubectl.

- The Deployment runs the plan's replicas of the shape (the burst-sized count, ready before the
  burst arrives), spread evenly over the zones the plan uses, each pod asking for the shape's
  GPUs.
- The autoscaler (``autoscaling/v2``) keeps between the standing floor and the ceiling the
  region's inventory allows (see ``payload``), targets the in-flight requests per pod
  (``HEADROOM_HPA_METRIC``, a metrics adapter must provide it) at the shape's target
  utilisation, and scales as the seeds prescribe: up at once (no stabilisation window, at most
  doubling per minute), down slowly (a 600 s window acting on the recent maximum, one pod per
  5 minutes). A shape whose routed demands give no residence time has no in-flight target; its
  Deployment is written without an autoscaler, and an annotation says why.

The file is rewritten whole on every delivery, so a shape the plan dropped disappears from it;
with ``kubectl_apply`` the sink applies the file with ``--prune`` over this region's labels
(an empty region is cleared with ``kubectl delete`` on the same labels).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from controlplane.emission.conf import emission_settings
from controlplane.emission.sinks import (
    Delivery,
    DeliveryResult,
    Outcome,
    region_lock,
    safe_name,
    write_atomically,
)

if TYPE_CHECKING:
    from controlplane.emission.models import AllocationSink

MANAGED_BY = "headroom"
REGION_LABEL = "headroom.io/region"
SHAPE_LABEL = "headroom.io/shape"
ZONE_KEY = "topology.kubernetes.io/zone"
GPU_RESOURCE = "nvidia.com/gpu"
# Deployment names stay short enough for the ReplicaSet and pod suffixes Kubernetes appends.
NAME_LENGTH = 52
# The asymmetric behaviour of the seeds' autoscaler sketch: fast up, slow down.
SCALE_UP = {
    "stabilizationWindowSeconds": 0,
    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 60}],
}
SCALE_DOWN = {
    "stabilizationWindowSeconds": 600,
    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
}
PRUNE_KINDS = ("apps/v1/Deployment", "autoscaling/v2/HorizontalPodAutoscaler")
_HEADER = re.compile(rb"^# headroom-allocation plan-version=(\d+)")


def milli_quantity(value: float) -> str:
    """A Kubernetes quantity in thousandths: 3.5 → '3500m' (at least '1m')."""
    return f"{max(1, round(value * 1000))}m"


def region_path(directory: Path, region: str) -> Path:
    return directory / f"{safe_name(region)}.yaml"


def region_selector(region: str) -> str:
    return f"{REGION_LABEL}={safe_name(region)},app.kubernetes.io/managed-by={MANAGED_BY}"


def region_manifests(
    document: Mapping[str, Any],
    *,
    namespace: str,
    image: str,
    metric: str,
    idempotency_key: str = "",
) -> list[dict[str, Any]]:
    """The Deployment and autoscaler of every shape in one region's allocation document."""
    region = str(document["region"])
    version = int(document["plan"]["version"])
    manifests: list[dict[str, Any]] = []
    for shape in document["shapes"]:
        name = safe_name(f"{region}-{shape['shape']}", NAME_LENGTH)
        selector = {REGION_LABEL: safe_name(region), SHAPE_LABEL: safe_name(shape["shape"])}
        labels = {
            **selector,
            "app.kubernetes.io/name": safe_name(shape["model"] or shape["shape"]),
            "app.kubernetes.io/component": "model-server",
            "app.kubernetes.io/managed-by": MANAGED_BY,
        }
        zones = dict(shape["zones"])
        target = shape["inflight_target_per_replica"]
        annotations = {
            "headroom.io/plan-version": str(version),
            "headroom.io/region": region,
            "headroom.io/shape": shape["shape"],
            "headroom.io/accelerator": shape["accelerator"],
            "headroom.io/zones": ",".join(f"{z}={n}" for z, n in sorted(zones.items())),
            "headroom.io/standing-floor": str(shape["standing_floor"]),
        }
        if idempotency_key:
            annotations["headroom.io/idempotency-key"] = idempotency_key
        if target is None:
            annotations["headroom.io/autoscaling"] = (
                "none: no routed demand gives a residence time, so there is no in-flight target"
            )
        manifests.append(
            _deployment(name, namespace, labels, selector, annotations, shape, image, zones)
        )
        if target is not None:
            manifests.append(
                _autoscaler(name, namespace, labels, annotations, shape, metric, float(target))
            )
    return manifests


def _deployment(
    name: str,
    namespace: str,
    labels: dict[str, str],
    selector: dict[str, str],
    annotations: dict[str, str],
    shape: Mapping[str, Any],
    image: str,
    zones: Mapping[str, int],
) -> dict[str, Any]:
    pod_labels = {**selector, "app.kubernetes.io/managed-by": MANAGED_BY}
    gpus = int(shape["gpus_per_replica"])
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "replicas": int(shape["replicas"]),
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": ZONE_KEY,
                                                "operator": "In",
                                                "values": sorted(zones),
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": ZONE_KEY,
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": selector},
                        }
                    ],
                    "containers": [
                        {
                            "name": "model-server",
                            "image": image,
                            "env": [
                                {"name": "HEADROOM_MODEL", "value": str(shape["model"])},
                                {"name": "HEADROOM_SHAPE", "value": str(shape["shape"])},
                            ],
                            "resources": {
                                "limits": {GPU_RESOURCE: gpus},
                                "requests": {GPU_RESOURCE: gpus},
                            },
                        }
                    ],
                },
            },
        },
    }


def _autoscaler(
    name: str,
    namespace: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    shape: Mapping[str, Any],
    metric: str,
    target: float,
) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": int(shape["standing_floor"]),
            "maxReplicas": int(shape["max_replicas"]),
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric},
                        "target": {"type": "AverageValue", "averageValue": milli_quantity(target)},
                    },
                }
            ],
            "behavior": {"scaleUp": SCALE_UP, "scaleDown": SCALE_DOWN},
        },
    }


def render(document: Mapping[str, Any], manifests: Sequence[Mapping[str, Any]]) -> bytes:
    """The file: a header naming the plan version (read back by the version check), then the
    manifests as a multi-document YAML stream."""
    header = (
        f"# headroom-allocation plan-version={int(document['plan']['version'])} "
        f"region={document['region']}\n"
        "# Written by Headroom on plan activation; edits are overwritten.\n"
    )
    body = yaml.safe_dump_all(manifests, sort_keys=False, explicit_start=True) if manifests else ""
    return (header + body).encode("utf-8")


def written_version(path: Path) -> int | None:
    try:
        with open(path, "rb") as handle:
            match = _HEADER.match(handle.readline())
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _kubectl(sink: AllocationSink, path: Path, region: str, empty: bool) -> DeliveryResult | None:
    """Apply (or, for an empty region, clear) with kubectl; None when it succeeded."""
    command = [emission_settings().kubectl]
    if sink.kubectl_context:
        command += ["--context", sink.kubectl_context]
    selector = region_selector(region)
    if empty:
        command += [
            "delete",
            "deployments.apps,horizontalpodautoscalers.autoscaling",
            "--namespace",
            sink.namespace,
            "--selector",
            selector,
            "--ignore-not-found",
        ]
    else:
        command += ["apply", "--filename", str(path), "--prune", "--selector", selector]
        command += [f"--prune-allowlist={kind}" for kind in PRUNE_KINDS]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=sink.timeout_s, check=False
        )
    except FileNotFoundError:
        return DeliveryResult(Outcome.FAILED, error=f"kubectl not found: {command[0]!r}")
    except subprocess.TimeoutExpired:
        return DeliveryResult(Outcome.RETRY, error=f"kubectl timed out after {sink.timeout_s} s")
    if done.returncode != 0:
        # The cluster may be unreachable or mid-upgrade: retry; the error is kept for people.
        message = (done.stderr or done.stdout).strip()[-1000:]
        return DeliveryResult(
            Outcome.RETRY, error=f"kubectl exited with {done.returncode}: {message}"
        )
    return None


def deliver(sink: AllocationSink, delivery: Delivery) -> DeliveryResult:
    try:
        directory = sink.resolved_directory()
    except ValueError as exc:
        return DeliveryResult(Outcome.FAILED, error=str(exc))
    manifests = region_manifests(
        delivery.payload,
        namespace=sink.namespace,
        image=sink.container_image,
        metric=emission_settings().hpa_metric,
        idempotency_key=delivery.idempotency_key,
    )
    data = render(delivery.payload, manifests)
    path = region_path(directory, delivery.region)
    try:
        with region_lock(directory, safe_name(delivery.region)):
            newer = written_version(path)
            if newer is not None and newer > delivery.plan_version:
                return DeliveryResult(
                    Outcome.DELIVERED,
                    detail=f"{path.name} already holds plan v{newer}; left unchanged",
                )
            changed = write_atomically(path, data)
            if sink.kubectl_apply:
                failure = _kubectl(sink, path, delivery.region, empty=not manifests)
                if failure is not None:
                    return failure
    except OSError as exc:
        return DeliveryResult(Outcome.RETRY, error=f"cannot write {path}: {exc}")
    action = "wrote" if changed else "unchanged:"
    applied = " and applied it" if sink.kubectl_apply else ""
    return DeliveryResult(Outcome.DELIVERED, detail=f"{action} {path.name}{applied}")
