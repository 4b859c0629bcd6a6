"""The KEDA ScaledObject's query, run by the real Prometheus binary over series labelled as the
shipped scrape job labels a pod's series, for Deployments with 63-character names.

Kubernetes names a Deployment's pods ``<replicaset>-<5 random>`` after cutting the ReplicaSet's
name (``<deployment>-<hash>``) to 58 characters, so the pods of such a Deployment keep neither
the hash nor the hyphens a pod-name pattern would need. Two zones of one shape are served here,
each by pods that expose vLLM's request gauges; Prometheus scrapes them with the target labels
``deploy/prometheus/scrape-vllm.yaml``'s relabelling gives (namespace, pod, and the Headroom
labels copied from the pod template's labels), and each ScaledObject's query must sum its own
zone's pods, and only those. Skipped when no ``prometheus`` binary is on PATH (CI installs it).
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.db import transaction
from prometheus_client import Gauge

from controlplane.emission import services
from controlplane.emission.models import AllocationSink, OutboxEntry
from controlplane.emission.sinks import kubernetes
from tests.controlplane.emission_support import kubernetes_sink, make_plan
from tests.workers.engine_expositions import Engine, serve_exposition
from tests.workers.live_services import PROMETHEUS, free_port, start_prometheus, stop, wait_for_url

REPO = Path(__file__).resolve().parents[2]
SCRAPE = REPO / "deploy" / "prometheus" / "scrape-vllm.yaml"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db,
    pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary on PATH (CI installs it)"),
]


class Pod(Engine):
    """One vLLM pod's request gauges (vllm/v1/metrics/loggers.py: labels model_name, engine)."""

    def __init__(self, model: str, running: int, waiting: int) -> None:
        super().__init__(model)
        labels = ["model_name", "engine"]
        Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
              labels, registry=self.registry).labels(model, "0").set(running)  # fmt: skip
        Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
              labels, registry=self.registry).labels(model, "0").set(waiting)  # fmt: skip

    def serve(self, request: Any) -> None:
        return

    def set_state(self, running: int, waiting: int) -> None:
        return


def pod_name(deployment: str, template_hash: str, suffix: str) -> str:
    """The name the ReplicaSet controller gives a pod (generateName cut to 58 characters)."""
    return f"{deployment}-{template_hash}-"[:58] + suffix


def scrape_labels(namespace: str, pod: str, pod_labels: dict[str, str]) -> dict[str, str]:
    """The target labels the shipped scrape job's relabelling writes for a pod."""
    meta = {"__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_name": pod}
    for key, value in pod_labels.items():
        meta["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
    (job,) = yaml.safe_load(SCRAPE.read_text())["scrape_configs"]
    out = {}
    for rule in job["relabel_configs"]:
        if rule.get("action", "replace") != "replace":
            continue
        (source,) = rule["source_labels"]
        if source in meta:
            out[rule["target_label"]] = meta[source]
    return out


def instant(prom_url: str, query: str) -> list[dict[str, Any]]:
    url = f"{prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as answer:
        body = json.loads(answer.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


@pytest.fixture
def long_names(settings: Any, tmp_path: Path) -> list[dict[str, Any]]:
    """The objects of one region with a shape whose Deployments have 63-character names."""
    settings.HEADROOM_EMISSION_ROOT = str(tmp_path)
    sink = kubernetes_sink()
    sink.autoscaler = AllocationSink.Autoscaler.KEDA
    sink.prometheus_url = "http://prometheus.monitoring.svc:9090"
    sink.save()
    with transaction.atomic():
        services.outbox_enqueue_for_plan(plan=make_plan(4))
    document = dict(OutboxEntry.objects.get(region="eu").payload)
    shape = dict(next(s for s in document["shapes"] if len(s["zone_bounds"]) >= 2))
    zones = sorted(shape["zone_bounds"])[:2]
    longest = max(len(z) for z in zones)
    shape["shape"] = "s" * (63 - longest - 1)
    shape["zone_bounds"] = {z: shape["zone_bounds"][z] for z in zones}
    document["shapes"] = [shape]
    return kubernetes.region_manifests(document, kubernetes.ClusterSettings.of(sink))


@pytest.fixture
def prometheus(
    long_names: list[dict[str, Any]], tmp_path: Path
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    deployments = [o for o in long_names if o["kind"] == "Deployment"]
    pods: list[tuple[Pod, dict[str, str]]] = []
    # Zone 1: two pods (5 + 2 and 3 + 0 in flight); zone 2: one pod (4 + 0).
    loads = [[(5, 2), (3, 0)], [(4, 0)]]
    for deployment, zone_loads in zip(deployments, loads, strict=True):
        name = deployment["metadata"]["name"]
        template = deployment["spec"]["template"]["metadata"]["labels"]
        for i, (running, waiting) in enumerate(zone_loads):
            pod = pod_name(name, "7d9f8c6b5f", f"x2k9{i}")
            labels = scrape_labels(deployment["metadata"]["namespace"], pod, template)
            pods.append((Pod("chat-70b", running, waiting), labels))
    ports = [free_port() for _ in pods]
    stoppers = [serve_exposition(p, port) for (p, _), port in zip(pods, ports, strict=True)]
    prom_port = free_port()
    prom = start_prometheus(
        port=prom_port,
        workdir=tmp_path,
        targets=[(port, labels) for (_, labels), port in zip(pods, ports, strict=True)],
    )
    prom_url = f"http://127.0.0.1:{prom_port}"
    try:
        wait_for_url(prom_url + "/-/ready", 30, prom)
        deadline = time.time() + 30
        while time.time() < deadline:
            if len(instant(prom_url, "vllm:num_requests_running")) == len(pods):
                break
            time.sleep(0.5)
        yield prom_url, long_names
    finally:
        stop(prom)
        for stopper in stoppers:
            stopper()


def test_each_scaled_object_sums_its_own_zones_pods_for_63_character_names(
    prometheus: tuple[str, list[dict[str, Any]]],
) -> None:
    prom_url, objects = prometheus
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    scaled = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ScaledObject"}
    assert len(deployments) == 2
    assert all(len(d["metadata"]["name"]) == 63 for d in deployments)
    answers = []
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        query = scaled[name]["spec"]["triggers"][0]["metadata"]["query"]
        (result,) = instant(prom_url, query)
        answers.append(float(result["value"][1]))
        # What a pod-name pattern would have matched: nothing, the zone stuck at its floor.
        pattern = f'sum(vllm:num_requests_running{{pod=~"{name}-[a-z0-9]+-[a-z0-9]+"}})'
        assert instant(prom_url, pattern) == []
    assert answers == [10.0, 4.0]
