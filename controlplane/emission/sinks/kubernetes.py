"""Kubernetes sink: per region one YAML file, ``<directory>/<region>.yaml``, that a cluster with
the NVIDIA device plugin and stock vLLM runs as it is; optionally applied with kubectl.

Per shape in the region, and per zone the plan places it in:

- a **Deployment** (``apps/v1``) of vLLM's OpenAI server (``python3 -m
  vllm.entrypoints.openai.api_server``, the stock image's own entry point) with ``--model``
  (the shape's model path), ``--served-model-name`` (the model's name in Headroom, what
  clients ask for), ``--tensor-parallel-size`` (the shape's GPUs), ``--max-model-len`` where
  the shape sets it and the shape's extra arguments; port 8000 (vLLM's default, named
  ``http``); startup, readiness and liveness probes on vLLM's ``/health``; ``nvidia.com/gpu``
  limits and CPU/memory requests; an in-memory ``/dev/shm`` for the tensor-parallel workers;
  required node affinity on the zone and on the GPU product label (``gpu_node_label``, NVIDIA
  GPU feature discovery's ``nvidia.com/gpu.product`` by default);
- its autoscaler: a **HorizontalPodAutoscaler** (``autoscaling/v2``) on the per-pod metric
  prometheus-adapter serves from vLLM's ``vllm:num_requests_running`` +
  ``vllm:num_requests_waiting`` (``deploy/prometheus-adapter/rules.yaml``), or, with
  ``autoscaler = keda``, a KEDA **ScaledObject** with a Prometheus trigger on the same sum;
  ``minReplicas`` is the zone's floor, ``maxReplicas`` its ceiling from inventory;
- a **PodDisruptionBudget** (``policy/v1``, ``maxUnavailable: 1``) so a node drain takes a
  zone's replicas one at a time.

and per model a **Service** selecting that model's pods in the region, port 80 → ``http``.

Why one Deployment per zone rather than one per region with topology spread: spread
constraints act only when pods are scheduled. An autoscaler scaling down picks the pods to
remove without regard to zones, and a PodDisruptionBudget guards against evictions, not
against scale-down; after a quiet night one zone could hold every replica, and losing it would
break the survive-a-zone promise. A Deployment per zone with its own floor keeps each zone's
share at all times.

The live replica count belongs to the autoscaler: Deployments are written without
``spec.replicas`` (the first apply starts one pod, the autoscaler raises it to the floor at
once), so a delivery moves the floor and the ceiling and never resets the count the
autoscaler chose. A shape with no in-flight target gets a pinned autoscaler (floor = ceiling
= the plan's replicas in the zone), which keeps the count without a metric.

Names checked against the projects' sources: vLLM ``vllm/entrypoints/openai/api_server.py``
(``__main__``, ``/health`` in ``vllm/entrypoints/serve/instrumentator/health.py``),
``vllm/entrypoints/openai/cli_args.py`` (``--host``, ``--port`` default 8000),
``vllm/engine/arg_utils.py`` (``--model``, ``--served-model-name``, ``--tensor-parallel-size``,
``--max-model-len``), ``vllm/v1/metrics/loggers.py`` (the two gauges); KEDA v2.20
``pkg/scalers/prometheus_scaler.go`` (trigger metadata) and ``controllers/keda/hpa.go`` (the
HPA it creates copies the ScaledObject's labels unless excluded).

The file is rewritten whole on every delivery, so an object the plan dropped disappears from
it; with ``kubectl_apply`` the sink applies it with ``--prune`` over this region's labels (an
empty region is cleared with ``kubectl delete`` on the same labels).
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from controlplane.emission.conf import emission_settings
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

MANAGED_BY = "headroom"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
REGION_LABEL = "headroom.io/region"
SHAPE_LABEL = "headroom.io/shape"
ZONE_LABEL = "headroom.io/zone"
MODEL_LABEL = "headroom.io/model"
PLAN_LABEL = "headroom.io/plan-version"
TENANT_LABEL_PREFIX = "tenants.headroom.io/"
ZONE_KEY = "topology.kubernetes.io/zone"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_GPU_NODE_LABEL = "nvidia.com/gpu.product"
CONTAINER = "vllm"
VLLM_COMMAND = ("python3", "-m", "vllm.entrypoints.openai.api_server")
VLLM_PORT = 8000
HEALTH_PATH = "/health"
# KEDA copies a ScaledObject's labels onto the HPA it creates; without this exclusion that HPA
# would carry our region selector and the next ``apply --prune`` would delete it.
KEDA_EXCLUDED_LABELS = "scaledobject.keda.sh/hpa-excluded-labels"
# Object names are DNS labels: KEDA writes a ScaledObject's name into a label value of the HPA
# it creates. Nothing selects pods by name, so the pod names Kubernetes truncates do not matter.
NAME_LENGTH = 63
# Weights load for minutes before /health answers: the startup probe allows 30 minutes, and
# the liveness probe starts counting only after it passed.
STARTUP_PERIOD_S = 10
STARTUP_FAILURES = 180
# Tensor-parallel workers exchange through shared memory; 8 GiB per GPU, counted in the pod's
# memory.
SHM_GIB_PER_GPU = 8
# The asymmetric behaviour of the seeds' autoscaler sketch: fast up, slow down.
SCALE_UP = {
    "stabilizationWindowSeconds": 0,
    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 60}],
}
SCALE_DOWN = {
    "stabilizationWindowSeconds": 600,
    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
}
HPA_KINDS = (
    "core/v1/Service",
    "apps/v1/Deployment",
    "autoscaling/v2/HorizontalPodAutoscaler",
    "policy/v1/PodDisruptionBudget",
)
KEDA_KIND = "keda.sh/v1alpha1/ScaledObject"
_HEADER = re.compile(rb"^# headroom-allocation plan-version=(\d+)")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class ClusterSettings:
    """What a Kubernetes sink adds to the documents: where and how its cluster runs them."""

    namespace: str
    image: str
    metric: str
    autoscaler: str = "hpa"
    prometheus_url: str = ""
    gpu_node_label: str = DEFAULT_GPU_NODE_LABEL
    cpu_per_gpu: float = 4.0
    memory_gib_per_gpu: float = 32.0
    env_secret: str = ""

    @classmethod
    def of(cls, sink: AllocationSink) -> ClusterSettings:
        return cls(
            namespace=sink.namespace,
            image=sink.container_image,
            metric=emission_settings().hpa_metric,
            autoscaler=sink.autoscaler,
            prometheus_url=sink.prometheus_url,
            gpu_node_label=sink.gpu_node_label,
            cpu_per_gpu=sink.cpu_per_gpu,
            memory_gib_per_gpu=sink.memory_gib_per_gpu,
            env_secret=sink.env_secret,
        )

    @property
    def prune_kinds(self) -> tuple[str, ...]:
        return (*HPA_KINDS, KEDA_KIND) if self.autoscaler == "keda" else HPA_KINDS


def milli_quantity(value: float) -> str:
    """A Kubernetes quantity in thousandths: 3.5 → '3500m' (at least '1m')."""
    return f"{max(1, round(value * 1000))}m"


def cpu_quantity(cores: float) -> str:
    """CPU cores as Kubernetes writes them: 8 → '8', 2.5 → '2500m'."""
    milli = max(1, round(cores * 1000))
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


class _PlainDumper(yaml.SafeDumper):
    """Writes every mapping out in full: no YAML anchors and aliases where two objects share a
    sub-mapping, so each document reads (and diffs) on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def label_value(text: str) -> str:
    """``text`` as a label value: kept when it is one, else a DNS label with a digest."""
    return text if _LABEL_VALUE.match(text) else safe_name(text)


def region_path(directory: Path, region: str) -> Path:
    return directory / f"{safe_name(region)}.yaml"


def region_selector(region: str) -> str:
    return f"{REGION_LABEL}={safe_name(region)},{MANAGED_BY_LABEL}={MANAGED_BY}"


def deployment_name(shape: str, zone: str) -> str:
    """One shape in one zone (zone names are unique across regions)."""
    return safe_name(f"{shape}-{zone}", NAME_LENGTH)


def vllm_args(serving: Mapping[str, Any]) -> list[str]:
    """vLLM's OpenAI server arguments for one replica of a shape."""
    args = [
        "--model",
        str(serving["model_path"]),
        "--served-model-name",
        str(serving["served_model_name"]),
        "--tensor-parallel-size",
        str(int(serving["tensor_parallel_size"])),
        "--host",
        "0.0.0.0",
        "--port",
        str(VLLM_PORT),
    ]
    if serving.get("max_model_len"):
        args += ["--max-model-len", str(int(serving["max_model_len"]))]
    return args + [str(a) for a in serving.get("extra_args") or ()]


# The series labels the scrape job in deploy/prometheus/scrape-vllm.yaml copies from each pod's
# labels: pod label → series label.
SERIES_LABELS = {
    REGION_LABEL: "headroom_region",
    SHAPE_LABEL: "headroom_shape",
    ZONE_LABEL: "headroom_zone",
}


def in_flight_query(namespace: str, selector: Mapping[str, str]) -> str:
    """PromQL for the requests in a Deployment's pods, running plus queued (vLLM's gauges).

    The pods are selected by the labels the Deployment's pod template carries (its
    ``selector``: region, shape and zone), which the scrape job copies onto every series
    (``SERIES_LABELS``), never by a pattern on pod names: Kubernetes truncates a pod's name
    to 63 characters, so a long Deployment name loses the ``-<hash>-<suffix>`` a pattern
    would need. The values are label values (letters, digits, '-', '_', '.'), none of them
    special in a PromQL string.
    """
    matchers = [f'namespace="{namespace}"'] + [
        f'{SERIES_LABELS[key]}="{value}"' for key, value in sorted(selector.items())
    ]
    labels = ",".join(matchers)
    return (
        f"sum(vllm:num_requests_running{{{labels}}}) + sum(vllm:num_requests_waiting{{{labels}}})"
    )


def region_manifests(
    document: Mapping[str, Any], cluster: ClusterSettings, *, idempotency_key: str = ""
) -> list[dict[str, Any]]:
    """Every object one region's allocation document asks of its cluster."""
    region = str(document["region"])
    version = int(document["plan"]["version"])
    manifests: list[dict[str, Any]] = []
    models: dict[str, list[str]] = {}
    for shape in document["shapes"]:
        serving = dict(shape["serving"])
        model = str(shape["model"] or serving["served_model_name"])
        models.setdefault(model, []).append(str(shape["shape"]))
        tenants = [str(t) for t in shape.get("tenants", [])]
        target = shape["inflight_target_per_replica"]
        for zone, bounds in sorted(shape["zone_bounds"].items()):
            name = deployment_name(str(shape["shape"]), zone)
            selector = {
                REGION_LABEL: safe_name(region),
                SHAPE_LABEL: safe_name(str(shape["shape"])),
                ZONE_LABEL: label_value(zone),
            }
            pod_labels = {
                **selector,
                MODEL_LABEL: label_value(model),
                "app.kubernetes.io/name": "vllm",
                "app.kubernetes.io/component": "model-server",
                MANAGED_BY_LABEL: MANAGED_BY,
            }
            # Plan and tenant labels live on the objects, never on the pod template: changing
            # the template restarts every pod, and a new plan must not.
            labels = {
                **pod_labels,
                PLAN_LABEL: str(version),
                **{f"{TENANT_LABEL_PREFIX}{safe_name(t)}": "served" for t in tenants},
            }
            annotations = {
                "headroom.io/plan-version": str(version),
                "headroom.io/region": region,
                "headroom.io/shape": str(shape["shape"]),
                "headroom.io/zone": zone,
                "headroom.io/accelerator": str(shape["accelerator"]),
                "headroom.io/tenants": ",".join(tenants),
                "headroom.io/plan-replicas": str(bounds["replicas"]),
                "headroom.io/zone-floor": str(bounds["floor"]),
                "headroom.io/standing-floor": str(shape["standing_floor"]),
            }
            if idempotency_key:
                annotations["headroom.io/idempotency-key"] = idempotency_key
            if target is None:
                annotations["headroom.io/autoscaling"] = (
                    "pinned: no routed demand gives a residence time, so there is no in-flight "
                    "target; the autoscaler keeps the plan's replicas"
                )
            meta = {
                "name": name,
                "namespace": cluster.namespace,
                "labels": labels,
                "annotations": annotations,
            }
            manifests.append(_deployment(meta, selector, pod_labels, serving, zone, cluster))
            floor = int(bounds["floor"])
            ceiling = max(floor, int(bounds["max_replicas"]))
            if target is None:
                plan = int(bounds["replicas"])
                manifests.append(_pinned_autoscaler(meta, plan))
            elif cluster.autoscaler == "keda":
                manifests.append(
                    _scaled_object(meta, selector, floor, ceiling, float(target), cluster)
                )
            else:
                manifests.append(_autoscaler(meta, floor, ceiling, float(target), cluster.metric))
            manifests.append(_disruption_budget(meta, selector))
    for model, shapes in sorted(models.items()):
        manifests.append(_service(region, model, shapes, version, cluster))
    return manifests


def _deployment(
    meta: Mapping[str, Any],
    selector: Mapping[str, str],
    pod_labels: Mapping[str, str],
    serving: Mapping[str, Any],
    zone: str,
    cluster: ClusterSettings,
) -> dict[str, Any]:
    gpus = int(serving["tensor_parallel_size"])
    memory_gib = math.ceil(cluster.memory_gib_per_gpu * gpus)
    cpu = cpu_quantity(cluster.cpu_per_gpu * gpus)

    def probe(period_s: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": HEALTH_PATH, "port": "http"},
            "timeoutSeconds": 5,
            "periodSeconds": period_s,
            "failureThreshold": failures,
        }

    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": str(serving.get("image") or cluster.image),
        "command": list(VLLM_COMMAND),
        "args": vllm_args(serving),
        "ports": [{"name": "http", "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "startupProbe": probe(STARTUP_PERIOD_S, STARTUP_FAILURES),
        "readinessProbe": probe(10, 3),
        "livenessProbe": probe(30, 5),
        "resources": {
            "requests": {"cpu": cpu, "memory": f"{memory_gib}Gi", GPU_RESOURCE: gpus},
            "limits": {"memory": f"{memory_gib}Gi", GPU_RESOURCE: gpus},
        },
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if cluster.env_secret:
        container["envFrom"] = [{"secretRef": {"name": cluster.env_secret, "optional": True}}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": dict(meta),
        "spec": {
            # No "replicas": the autoscaler owns the live count (see the module docstring).
            "selector": {"matchLabels": dict(selector)},
            # A new pod is ready before an old one goes: the zone never drops below its count.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {"labels": dict(pod_labels)},
                "spec": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": ZONE_KEY, "operator": "In", "values": [zone]},
                                            {
                                                "key": cluster.gpu_node_label,
                                                "operator": "In",
                                                "values": [str(serving["gpu_product"])],
                                            },
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    # GPU nodes are commonly tainted so that only GPU pods land on them.
                    "tolerations": [
                        {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    # In-flight requests finish before the server stops.
                    "terminationGracePeriodSeconds": 120,
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "dshm",
                            "emptyDir": {
                                "medium": "Memory",
                                "sizeLimit": f"{SHM_GIB_PER_GPU * gpus}Gi",
                            },
                        }
                    ],
                },
            },
        },
    }


def _target_ref(meta: Mapping[str, Any]) -> dict[str, str]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": str(meta["name"])}


def _autoscaler(
    meta: Mapping[str, Any], floor: int, ceiling: int, target: float, metric: str
) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": dict(meta),
        "spec": {
            "scaleTargetRef": _target_ref(meta),
            "minReplicas": floor,
            "maxReplicas": ceiling,
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


def _pinned_autoscaler(meta: Mapping[str, Any], replicas: int) -> dict[str, Any]:
    # Floor = ceiling: the controller holds the count within its bounds before it reads any
    # metric, so none is given (the default CPU target never moves a pinned count).
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": dict(meta),
        "spec": {
            "scaleTargetRef": _target_ref(meta),
            "minReplicas": replicas,
            "maxReplicas": replicas,
        },
    }


def _scaled_object(
    meta: Mapping[str, Any],
    selector: Mapping[str, str],
    floor: int,
    ceiling: int,
    target: float,
    cluster: ClusterSettings,
) -> dict[str, Any]:
    annotations = {
        **meta["annotations"],
        KEDA_EXCLUDED_LABELS: f"{MANAGED_BY_LABEL},{REGION_LABEL}",
    }
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {**meta, "annotations": annotations},
        "spec": {
            "scaleTargetRef": _target_ref(meta),
            "minReplicaCount": floor,
            "maxReplicaCount": ceiling,
            "pollingInterval": 15,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleUp": SCALE_UP, "scaleDown": SCALE_DOWN}
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    # AverageValue: KEDA divides the sum by the pods, as the HPA does.
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": cluster.prometheus_url,
                        "query": in_flight_query(cluster.namespace, selector),
                        "threshold": f"{target:.3f}",
                    },
                }
            ],
        },
    }


def _disruption_budget(meta: Mapping[str, Any], selector: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": dict(meta),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(selector)}},
    }


def _service(
    region: str, model: str, shapes: Sequence[str], version: int, cluster: ClusterSettings
) -> dict[str, Any]:
    selector = {
        REGION_LABEL: safe_name(region),
        MODEL_LABEL: label_value(model),
        MANAGED_BY_LABEL: MANAGED_BY,
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": safe_name(f"{region}-{model}", NAME_LENGTH),
            "namespace": cluster.namespace,
            "labels": {**selector, PLAN_LABEL: str(version)},
            "annotations": {
                "headroom.io/region": region,
                "headroom.io/model": model,
                "headroom.io/shapes": ",".join(sorted(shapes)),
            },
        },
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
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
    body = (
        yaml.dump_all(manifests, Dumper=_PlainDumper, sort_keys=False, explicit_start=True)
        if manifests
        else ""
    )
    return (header + body).encode("utf-8")


def written_version(path: Path) -> int | None:
    return header_version(path, _HEADER)


def kubectl_command(
    sink: AllocationSink, cluster: ClusterSettings, path: Path, region: str, *, empty: bool
) -> list[str]:
    """The kubectl command that applies (or, for an empty region, clears) one region."""
    command = [emission_settings().kubectl]
    if sink.kubectl_context:
        command += ["--context", sink.kubectl_context]
    selector = region_selector(region)
    if empty:
        resources = ",".join(_resource(kind) for kind in cluster.prune_kinds)
        return [
            *command,
            "delete",
            resources,
            "--namespace",
            cluster.namespace,
            "--selector",
            selector,
            "--ignore-not-found",
        ]
    command += ["apply", "--filename", str(path), "--prune", "--selector", selector]
    return command + [f"--prune-allowlist={kind}" for kind in cluster.prune_kinds]


def _resource(kind: str) -> str:
    """'apps/v1/Deployment' → 'deployments.apps'; 'core/v1/Service' → 'services'."""
    group, _version, name = kind.split("/")
    plural = name.lower() + ("es" if name.endswith("s") else "s")
    return plural if group == "core" else f"{plural}.{group}"


def _kubectl(
    sink: AllocationSink, cluster: ClusterSettings, path: Path, region: str, empty: bool
) -> DeliveryResult | None:
    """Apply (or clear) with kubectl; None when it succeeded."""
    command = kubectl_command(sink, cluster, path, region, empty=empty)
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
    cluster = ClusterSettings.of(sink)
    try:
        manifests = region_manifests(
            delivery.payload, cluster, idempotency_key=delivery.idempotency_key
        )
    except (KeyError, TypeError, ValueError) as exc:
        # A document from before the serving fields existed, or a malformed one: nothing a
        # retry would change.
        return DeliveryResult(Outcome.FAILED, error=f"cannot build manifests: {exc!r}")
    data = render(delivery.payload, manifests)
    path = region_path(directory, delivery.region)

    def apply() -> DeliveryResult | None:
        if not sink.kubectl_apply:
            return None
        return _kubectl(sink, cluster, path, delivery.region, empty=not manifests)

    return write_newest(
        directory=directory,
        delivery=delivery,
        path=path,
        data=data,
        written_version=written_version,
        after_write=apply,
        done=" and applied it" if sink.kubectl_apply else "",
    )
