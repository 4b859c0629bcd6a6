"""File and Kubernetes sinks: the files they write, atomically and idempotently, the manifests'
replicas, autoscaler bounds and behaviour (parsed back with PyYAML), and the kubectl call."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.db import transaction

from controlplane.emission import services
from controlplane.emission.models import AllocationSink, OutboxEntry
from controlplane.emission.sinks import Delivery, Outcome, files, kubernetes, safe_name
from controlplane.plans.models import Plan
from tests.controlplane.emission_support import files_sink, kubernetes_sink, make_plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(settings: Any, tmp_path: Path) -> Path:
    settings.HEADROOM_EMISSION_ROOT = str(tmp_path)
    return tmp_path


def emit(plan: Plan) -> None:
    with transaction.atomic():
        services.outbox_enqueue_for_plan(plan=plan)
    report = services.outbox_dispatch()
    assert report.failed == report.retrying == 0, report.errors


def manifests(path: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The file's objects by kind, shape (model for a Service) and zone."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    keyed = {}
    for d in documents:
        notes = d["metadata"]["annotations"]
        if d["kind"] == "Service":
            keyed[(d["kind"], notes["headroom.io/model"], "")] = d
        else:
            keyed[(d["kind"], notes["headroom.io/shape"], notes["headroom.io/zone"])] = d
    return keyed


# -- JSON files ------------------------------------------------------------------------------


def test_files_sink_writes_one_json_file_per_region(root: Path) -> None:
    files_sink("out/prod")
    emit(make_plan(5))
    folder = root / "out" / "prod"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "ap.json",
        "eu.json",
        "us.json",
    ]
    eu = json.loads((folder / "eu.json").read_text())
    assert eu == OutboxEntry.objects.get(region="eu").payload
    assert eu["plan"]["version"] == 5 and eu["region"] == "eu"
    # No temporary file is left behind.
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_files_sink_is_idempotent_and_never_rolls_a_region_back(root: Path) -> None:
    sink = files_sink()
    emit(make_plan(1))
    path = root / "allocations" / "eu.json"
    written = path.read_bytes()
    mtime = path.stat().st_mtime_ns

    entry = OutboxEntry.objects.get(region="eu")
    delivery = Delivery(entry.idempotency_key, "eu", entry.payload)
    again = files.deliver(sink, delivery)
    assert (again.outcome, again.detail) == (Outcome.DELIVERED, "eu.json unchanged")
    assert path.read_bytes() == written and path.stat().st_mtime_ns == mtime

    emit(make_plan(2, state=Plan.State.PROPOSED, scale=2))
    assert json.loads(path.read_text())["plan"]["version"] == 2
    # A late retry of plan 1 is acknowledged but leaves plan 2 in place.
    late = files.deliver(sink, delivery)
    assert late.outcome is Outcome.DELIVERED and "already holds plan v2" in late.detail
    assert json.loads(path.read_text())["plan"]["version"] == 2


def test_files_sink_replaces_by_rename(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = files_sink()
    emit(make_plan(1))
    path = root / "allocations" / "us.json"
    before = path.read_bytes()
    # A crash between writing the temporary file and the rename leaves the old file whole.
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("crash")))
    result = files.deliver(
        sink, Delivery("k", "us", {"plan": {"version": 9}, "region": "us", "shapes": []})
    )
    assert result.outcome is Outcome.RETRY and "crash" in result.error
    assert path.read_bytes() == before
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_region_names_that_are_not_file_stems_are_sanitised(root: Path) -> None:
    sink = files_sink()
    result = files.deliver(
        sink, Delivery("k", "eu/../../etc", {"plan": {"version": 1}, "region": "eu/../../etc"})
    )
    assert result.outcome is Outcome.DELIVERED
    (written,) = [p for p in (root / "allocations").iterdir() if p.suffix == ".json"]
    assert written.name == f"{safe_name('eu/../../etc')}.json"
    assert written.name.startswith("eu-etc-")


@pytest.mark.parametrize(
    "directory", ["", "/etc", "../outside", "a/../../b", ".hidden", "a\\b", "a//b/."]
)
def test_sink_directories_stay_under_the_emission_root(directory: str) -> None:
    sink = AllocationSink(kind=AllocationSink.Kind.FILES, name="x", directory=directory)
    with pytest.raises(ValidationError) as error:
        sink.full_clean()
    assert "directory" in error.value.message_dict


# -- Kubernetes ------------------------------------------------------------------------------


def test_kubernetes_sink_writes_a_vllm_deployment_and_autoscaler_per_zone(root: Path) -> None:
    kubernetes_sink()
    emit(make_plan(4))
    folder = root / "manifests"
    assert sorted(p.name for p in folder.glob("*.yaml")) == ["ap.yaml", "eu.yaml", "us.yaml"]

    # Each document stands alone: no YAML anchors or aliases between shared sub-mappings.
    assert "&id" not in (folder / "eu.yaml").read_text()
    us = manifests(folder / "us.yaml")
    assert set(us) == {
        (kind, "m/gpu80x1", zone)
        for kind in ("Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget")
        for zone in ("us-a", "us-b")
    } | {("Service", "m", "")}
    deployment = us[("Deployment", "m/gpu80x1", "us-a")]
    assert deployment["apiVersion"] == "apps/v1"
    assert deployment["metadata"]["namespace"] == "inference"
    # The autoscaler owns the live count: a delivery never resets it.
    assert "replicas" not in deployment["spec"]
    labels = deployment["metadata"]["labels"]
    assert labels["headroom.io/plan-version"] == "4" and labels["headroom.io/model"] == "m"
    assert labels["tenants.headroom.io/globex"] == "served"
    pod = deployment["spec"]["template"]["spec"]
    # A new plan must not restart pods: no plan or tenant label on the template.
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert "headroom.io/plan-version" not in template_labels
    assert not [k for k in template_labels if k.startswith("tenants.")]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/vllm:0.8"
    assert container["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert container["args"][:6] == [
        "--model",
        "org/m-instruct",
        "--served-model-name",
        "m",
        "--tensor-parallel-size",
        "1",
    ]
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["resources"] == {
        "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
        "limits": {"memory": "32Gi", "nvidia.com/gpu": 1},
    }
    assert pod["volumes"][0]["emptyDir"]["medium"] == "Memory"
    assert container["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-a"]},
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]},
    ]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert template_labels.items() >= selector.items()

    hpa = us[("HorizontalPodAutoscaler", "m/gpu80x1", "us-a")]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    # The seeds' floor of 12 is 6 per zone; us-a's 20 GPUs hold 20 one-GPU replicas.
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (6, 20)
    assert hpa["spec"]["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "vllm_requests_in_flight"},
                "target": {"type": "AverageValue", "averageValue": "3500m"},
            },
        }
    ]
    assert hpa["spec"]["behavior"] == {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 60}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 600,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
        },
    }
    budget = us[("PodDisruptionBudget", "m/gpu80x1", "us-a")]["spec"]
    assert budget == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    service = us[("Service", "m", "")]["spec"]
    assert service["selector"] == {
        "headroom.io/region": "us",
        "headroom.io/model": "m",
        "app.kubernetes.io/managed-by": "headroom",
    }


def test_kubernetes_zone_floors_keep_the_zone_promise_and_a_shape_without_a_target_is_pinned(
    root: Path,
) -> None:
    kubernetes_sink()
    emit(make_plan(4))
    eu = manifests(root / "manifests" / "eu.yaml")
    # Un-bursted 8 replica-s/s with a zone promise: 18 standing, 6 per zone, so that losing
    # any zone leaves 12 = ceil(8 / 0.7). eu-a also holds the batch shape's 6 GPUs.
    bounds = {
        zone: (
            eu[("HorizontalPodAutoscaler", "m/gpu80x1", zone)]["spec"]["minReplicas"],
            eu[("HorizontalPodAutoscaler", "m/gpu80x1", zone)]["spec"]["maxReplicas"],
        )
        for zone in ("eu-a", "eu-b", "eu-c")
    }
    assert bounds == {"eu-a": (6, 34), "eu-b": (6, 40), "eu-c": (6, 40)}
    batch = eu[("Deployment", "m/gpu80x2", "eu-a")]
    container = batch["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert container["args"][4:6] == ["--tensor-parallel-size", "2"]
    # No routed demand of the batch shape gives a residence time: a pinned autoscaler.
    pinned = eu[("HorizontalPodAutoscaler", "m/gpu80x2", "eu-a")]["spec"]
    assert (pinned["minReplicas"], pinned["maxReplicas"]) == (3, 3) and "metrics" not in pinned
    assert batch["metadata"]["annotations"]["headroom.io/autoscaling"].startswith("pinned")
    names = {d["metadata"]["name"] for (kind, *_), d in eu.items() if kind == "Deployment"}
    assert len(names) == 4 and all(len(n) <= 63 and n == n.lower() for n in names)


def test_kubernetes_sink_can_emit_keda_scaled_objects(root: Path) -> None:
    sink = kubernetes_sink()
    sink.autoscaler = AllocationSink.Autoscaler.KEDA
    sink.prometheus_url = "http://prometheus.monitoring.svc:9090"
    sink.full_clean()
    sink.save()
    emit(make_plan(4))
    us = manifests(root / "manifests" / "us.yaml")
    assert ("HorizontalPodAutoscaler", "m/gpu80x1", "us-a") not in us
    scaled = us[("ScaledObject", "m/gpu80x1", "us-a")]
    name = us[("Deployment", "m/gpu80x1", "us-a")]["metadata"]["name"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (6, 20)
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["serverAddress"] == "http://prometheus.monitoring.svc:9090"
    assert trigger["metadata"]["threshold"] == "3.500"
    query = trigger["metadata"]["query"]
    assert "vllm:num_requests_running{" in query and "vllm:num_requests_waiting{" in query
    # The Deployment's pods by the labels their template carries, as the scrape job copies
    # them onto every series; never by a pattern on pod names.
    labels = us[("Deployment", "m/gpu80x1", "us-a")]["spec"]["selector"]["matchLabels"]
    assert "pod" not in query and name not in query
    for key, series_label in kubernetes.SERIES_LABELS.items():
        assert f'{series_label}="{labels[key]}"' in query
    assert 'namespace="inference"' in query
    # KEDA copies these labels onto its own HPA unless told not to; pruning would delete it.
    excluded = scaled["metadata"]["annotations"]["scaledobject.keda.sh/hpa-excluded-labels"]
    assert "app.kubernetes.io/managed-by" in excluded
    keda_sink = AllocationSink(
        kind=AllocationSink.Kind.KUBERNETES,
        name="keda-without-prometheus",
        directory="m",
        namespace="ns",
        container_image="vllm/vllm-openai:v0.11.0",
        autoscaler=AllocationSink.Autoscaler.KEDA,
    )
    with pytest.raises(ValidationError) as error:
        keda_sink.full_clean()
    assert "prometheus_url" in error.value.message_dict


def test_kubernetes_empty_region_file_has_no_objects_and_names_its_plan(root: Path) -> None:
    kubernetes_sink()
    emit(make_plan(4))
    text = (root / "manifests" / "ap.yaml").read_text()
    assert text.startswith("# headroom-allocation plan-version=4 region=ap")
    assert [d for d in yaml.safe_load_all(text) if d is not None] == []


def test_kubernetes_file_is_rewritten_whole_and_never_rolled_back(root: Path) -> None:
    sink = kubernetes_sink()
    emit(make_plan(1))
    path = root / "manifests" / "us.yaml"
    entry = OutboxEntry.objects.get(region="us")
    emit(make_plan(2, state=Plan.State.PROPOSED, scale=2))
    key = ("HorizontalPodAutoscaler", "m/gpu80x1", "us-a")
    assert manifests(path)[key]["metadata"]["annotations"]["headroom.io/plan-replicas"] == "18"
    late = kubernetes.deliver(sink, Delivery(entry.idempotency_key, "us", entry.payload))
    assert "already holds plan v2" in late.detail
    assert manifests(path)[key]["metadata"]["labels"]["headroom.io/plan-version"] == "2"


def _fake_kubectl(folder: Path, exit_code: int = 0) -> Path:
    """A kubectl stand-in that records its arguments, one call per line."""
    script = folder / "kubectl"
    log = folder / "kubectl.log"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n'
        + ('echo "connection refused" >&2\n' if exit_code else "")
        + f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_kubectl_applies_with_prune_over_the_regions_labels(
    root: Path, settings: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bin_dir = tmp_path_factory.mktemp("bin")
    settings.HEADROOM_KUBECTL = str(_fake_kubectl(bin_dir))
    sink = kubernetes_sink(apply=True)
    sink.kubectl_context = "eu-cluster"
    sink.save()
    emit(make_plan(4))
    calls = sorted((bin_dir / "kubectl.log").read_text().splitlines())
    assert len(calls) == 3
    (ap,) = [c for c in calls if "delete" in c]
    assert ap.startswith(
        "--context eu-cluster delete services,deployments.apps,"
        "horizontalpodautoscalers.autoscaling,poddisruptionbudgets.policy "
    )
    assert "--selector headroom.io/region=ap,app.kubernetes.io/managed-by=headroom" in ap
    (us,) = [c for c in calls if "us.yaml" in c]
    assert f"apply --filename {root / 'manifests' / 'us.yaml'} --prune" in us
    assert "--selector headroom.io/region=us,app.kubernetes.io/managed-by=headroom" in us
    for kind in (
        "core/v1/Service",
        "apps/v1/Deployment",
        "autoscaling/v2/HorizontalPodAutoscaler",
        "policy/v1/PodDisruptionBudget",
    ):
        assert f"--prune-allowlist={kind}" in us
    assert "ScaledObject" not in us


def test_kubectl_failure_is_retried_and_a_missing_kubectl_fails(
    root: Path, settings: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bin_dir = tmp_path_factory.mktemp("bin")
    settings.HEADROOM_KUBECTL = str(_fake_kubectl(bin_dir, exit_code=1))
    kubernetes_sink(apply=True)
    with transaction.atomic():
        services.outbox_enqueue_for_plan(plan=make_plan(4))
    report = services.outbox_dispatch()
    assert report.retrying == 3
    entry = OutboxEntry.objects.get(region="eu")
    assert entry.status == "pending" and "connection refused" in entry.last_error

    settings.HEADROOM_KUBECTL = str(bin_dir / "no-such-kubectl")
    sink = AllocationSink.objects.get()
    result = kubernetes.deliver(sink, Delivery("k", "eu", entry.payload))
    assert result.outcome is Outcome.FAILED and "kubectl not found" in result.error


def test_kubernetes_sink_needs_namespace_and_image() -> None:
    sink = AllocationSink(
        kind=AllocationSink.Kind.KUBERNETES, name="k", directory="m", namespace="Bad_NS"
    )
    with pytest.raises(ValidationError) as error:
        sink.full_clean()
    assert {"namespace", "container_image"} <= set(error.value.message_dict)


def test_safe_names_are_dns_labels_and_distinct() -> None:
    assert safe_name("eu-west") == "eu-west"
    a, b = safe_name("m/gpu80x1"), safe_name("m-gpu80x1")
    assert a != b and b == "m-gpu80x1"
    long = safe_name("x" * 100, 52)
    assert len(long) <= 52
    assert kubernetes.milli_quantity(3.5) == "3500m"
    assert kubernetes.milli_quantity(0.0001) == "1m"


def test_keda_query_of_a_63_character_deployment_selects_its_pods_by_labels(root: Path) -> None:
    """Kubernetes names a Deployment's pods ``<replicaset>-<5 chars>`` with the ReplicaSet's
    name cut to 58 characters first: for a 63-character Deployment the pod name keeps none of
    the ``-<hash>-<suffix>`` a name pattern would look for. The query selects on labels."""
    sink = kubernetes_sink()
    sink.autoscaler = AllocationSink.Autoscaler.KEDA
    sink.prometheus_url = "http://prometheus.monitoring.svc:9090"
    sink.save()
    emit(make_plan(4))
    document = dict(OutboxEntry.objects.get(region="us").payload)
    shape = dict(document["shapes"][0])
    zone = next(iter(shape["zone_bounds"]))
    long_shape = "s" * (63 - len(zone) - 1)
    shape["shape"] = long_shape
    document["shapes"] = [shape]
    cluster = kubernetes.ClusterSettings.of(sink)
    objects = kubernetes.region_manifests(document, cluster)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    scaled = next(o for o in objects if o["kind"] == "ScaledObject")
    name = deployment["metadata"]["name"]
    assert name == f"{long_shape}-{zone}" and len(name) == 63
    assert scaled["metadata"]["name"] == name
    pod = (f"{name}-7d9f8c6b5f-")[:58] + "x2k9q"  # what the ReplicaSet controller makes
    old_pattern = f"{name}-[a-z0-9]+-[a-z0-9]+"
    assert not re.fullmatch(old_pattern, pod)
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    # The series a pod of this Deployment exposes, as the scrape job labels it.
    series = {"namespace": "inference", "pod": pod} | {
        kubernetes.SERIES_LABELS[k]: v for k, v in selector.items()
    }
    matchers = dict(re.findall(r'([a-z_]+)="([^"]*)"', query.split("}")[0]))
    assert matchers and all(series[k] == v for k, v in matchers.items())
    assert set(matchers) == {"namespace", *kubernetes.SERIES_LABELS.values()}
    # Another zone's Deployment of the same shape does not match.
    assert selector[kubernetes.ZONE_LABEL] == matchers["headroom_zone"] == zone
