"""Every manifest in ``deploy/`` and every object the Kubernetes sink emits, validated strictly
against the Kubernetes OpenAPI schemas and KubeRay's and KEDA's own CRDs (``validation``), with
the network closed: the schemas are read from the installed package and from
``../shared/schemas/crds/`` beside the repository only.

The emitted objects cover the example scenario (``docs/scenarios/support-assistant.yaml``,
re-planned and delivered through the sink, as an operator's cluster would receive them) and
the 200-tenant, 12-region generated fleet that ``benchmarks/bench_replan.py`` plans (its plan
built here by the greedy baseline, since the objects depend on the plan's shape, not on which
solver found it), each with HorizontalPodAutoscalers and with KEDA ScaledObjects.
"""

from __future__ import annotations

import os
import re
import socket
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from controlplane.emission import services
from controlplane.emission.models import AllocationSink
from controlplane.emission.payload import (
    AllocationRow,
    PlanSnapshot,
    RoutingRow,
    ShapeServing,
    region_documents,
)
from controlplane.emission.sinks import kubernetes
from controlplane.emission.sinks.kubernetes import ClusterSettings, region_manifests
from planner.placement.generator import generate_problem
from planner.placement.greedy import greedy_plan
from planner.placement.problem import parse_problem
from tests.controlplane.plans_helpers import load_support_assistant, run_replan
from tests.deploy.validation import CRD_MISSING, CRDS, KUBERNETES_VERSION, all_errors

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
EMISSION_DOC = REPO / "docs" / "emission.md"
DOC_REGION = "eu-west"
DOC_START = "<!-- emitted: the Kubernetes sink's file for eu-west; regenerate, do not edit -->\n"
DOC_END = "<!-- /emitted -->"
HPA = ClusterSettings(namespace="inference", image="vllm/vllm-openai:v0.11.0", metric="m")
KEDA = ClusterSettings(
    namespace="inference",
    image="vllm/vllm-openai:v0.11.0",
    metric="m",
    autoscaler="keda",
    prometheus_url="http://prometheus.monitoring.svc:9090",
    env_secret="hf-token",
)


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Validation reads no schema from the network: any outbound connection fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"network access during schema validation: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


def deploy_objects() -> list[dict[str, Any]]:
    objects = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return objects


def test_every_deploy_manifest_is_valid() -> None:
    objects = deploy_objects()
    kinds = Counter(o["kind"] for o in objects)
    assert kinds["RayCluster"] == 1 and kinds["Deployment"] >= 4 and kinds["Job"] == 1
    assert all_errors(objects) == []


def test_the_cached_validator_agrees_with_kubernetes_validate() -> None:
    for obj in deploy_objects():
        if obj["kind"] == "RayCluster":
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    broken = next(o for o in deploy_objects() if o["kind"] == "StatefulSet")
    broken["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    assert all_errors([broken])
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_a_misspelt_custom_resource_field_is_caught() -> None:
    ray = next(o for o in deploy_objects() if o["kind"] == "RayCluster")
    ray["spec"]["workerGroupSpecs"][0]["maxReplica"] = 3
    assert any("maxReplica" in problem for problem in all_errors([ray]))
    # Inside the pod template the CRD carries (KubeRay's copy of the PodSpec) as well.
    ray = next(o for o in deploy_objects() if o["kind"] == "RayCluster")
    ray["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "x"
    assert any("imagePullPolcy" in problem for problem in all_errors([ray]))


def _scaled_object() -> dict[str, Any]:
    meta = {"name": "m-gpu80x1-eu-a", "namespace": "inference", "labels": {}, "annotations": {}}
    selector = {
        kubernetes.REGION_LABEL: "eu",
        kubernetes.SHAPE_LABEL: "m",
        kubernetes.ZONE_LABEL: "a",
    }
    return kubernetes._scaled_object(meta, selector, 1, 4, 3.5, KEDA)


def test_the_upstream_crds_are_read_and_enforced() -> None:
    """The schemas are KEDA's and KubeRay's own files, unmodified (byte for byte as the
    README lists them), and what their CRDs say is enforced: KEDA's trigger metadata holds
    strings only, a trigger needs its type, unknown fields are refused at any depth."""
    readme = (CRDS / "README.md").read_text() if (CRDS / "README.md").is_file() else ""
    if CRD_MISSING:
        pytest.skip(CRD_MISSING)
    assert "v2.20.2" in readme and "v1.7.0" in readme
    assert not (REPO / "tests" / "deploy" / "schemas").exists()
    scaled = _scaled_object()
    assert all_errors([scaled]) == []
    wrong_type = _scaled_object()
    wrong_type["spec"]["triggers"][0]["metadata"]["threshold"] = 3.5
    problems = all_errors([wrong_type])
    assert any("metadata.threshold: 3.5 is not of type 'string'" in p for p in problems)
    no_type = _scaled_object()
    del no_type["spec"]["triggers"][0]["type"]
    assert any("'type' is a required property" in p for p in all_errors([no_type]))
    misspelt = _scaled_object()
    misspelt["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behaviour"] = {}
    assert any("behaviour" in p for p in all_errors([misspelt]))
    bad_meta = _scaled_object()
    bad_meta["metadata"]["labels"] = {"a": 1}
    assert any("metadata.labels.a" in p for p in all_errors([bad_meta]))


@pytest.mark.django_db
def test_objects_emitted_for_the_example_scenario_are_valid(settings: Any, tmp_path: Path) -> None:
    settings.HEADROOM_EMISSION_ROOT = str(tmp_path)
    load_support_assistant()
    # The sinks as docs/emission.md shows them: HPA first (its id is 1 in the documented file).
    for name, extra in (
        ("hpa", {}),
        (
            "keda",
            {"autoscaler": "keda", "prometheus_url": "http://prometheus.monitoring.svc:9090"},
        ),
    ):
        sink = AllocationSink(
            kind=AllocationSink.Kind.KUBERNETES,
            name=name,
            directory=name,
            namespace="inference",
            container_image="vllm/vllm-openai:v0.11.0",
            env_secret="hf-token",
            **extra,
        )
        sink.full_clean()
        sink.save()
    assert run_replan().plan is not None
    report = services.outbox_dispatch()
    assert report.failed == report.retrying == 0, report.errors
    for name, autoscaler in (("hpa", "HorizontalPodAutoscaler"), ("keda", "ScaledObject")):
        objects = [
            d
            for path in sorted((tmp_path / name).glob("*.yaml"))
            for d in yaml.safe_load_all(path.read_text())
            if d
        ]
        kinds = Counter(o["kind"] for o in objects)
        assert kinds["Deployment"] >= 2 and kinds[autoscaler] == kinds["Deployment"], kinds
        assert kinds["PodDisruptionBudget"] == kinds["Deployment"] and kinds["Service"] >= 1
        assert all_errors(objects) == []
    _check_the_documented_region((tmp_path / "hpa" / f"{DOC_REGION}.yaml").read_text())


def _check_the_documented_region(emitted: str) -> None:
    """docs/emission.md shows this file as the sink wrote it (the sink's id normalised).
    ``HEADROOM_WRITE_DOCS=1`` rewrites the block instead of comparing."""
    emitted = re.sub(r"sink-\d+", "sink-1", emitted)
    block = f"{DOC_START}```yaml\n{emitted}```\n{DOC_END}"
    text = EMISSION_DOC.read_text()
    pattern = re.compile(re.escape(DOC_START) + r".*?" + re.escape(DOC_END), re.S)
    assert pattern.search(text), "docs/emission.md lost its emitted-YAML markers"
    if os.environ.get("HEADROOM_WRITE_DOCS") == "1":
        EMISSION_DOC.write_text(pattern.sub(lambda _: block, text))
        return
    assert pattern.search(text).group(0) == block, (  # type: ignore[union-attr]
        "docs/emission.md's example is out of date: run "
        "HEADROOM_WRITE_DOCS=1 pytest tests/deploy/test_schemas.py -k example_scenario"
    )


def _generated_fleet_documents() -> dict[str, dict[str, Any]]:
    # The fleet benchmarks/bench_replan.py plans (its default seed is 0).
    problem = generate_problem(tenants=200, regions=12, zones_per_region=3, gpu_types=3, seed=0)
    solution = greedy_plan(problem)
    assert solution["status"] == "feasible"
    region_of = {z: r["name"] for r in problem["regions"] for z in r["zones"]}
    shapes = {s["name"]: s for s in problem["shapes"]}
    price = {a["name"]: a["price_per_gpu_hour"] for a in problem["accelerators"]}
    tenant = {d["id"]: d.get("tenant", d["id"]) for d in problem["demands"]}
    allocations = tuple(
        AllocationRow(
            region=region_of[row["zone"]],
            zone=row["zone"],
            shape=row["shape"],
            accelerator=shapes[row["shape"]]["accelerator"],
            gpus_per_replica=shapes[row["shape"]]["gpus"],
            replicas=row["replicas"],
            cost_per_hour=row["replicas"]
            * shapes[row["shape"]]["gpus"]
            * price[shapes[row["shape"]]["accelerator"]],
        )
        for row in solution["replicas"]
    )
    routing = tuple(
        RoutingRow(
            demand=row["demand"],
            tenant=tenant[row["demand"]],
            region=row["region"],
            shape=row["shape"],
            requests_per_s=row["requests_per_s"],
        )
        for row in solution["routing"]
    )
    serving = {
        name: ShapeServing(
            image="",
            model_path=f"org/{shape['model']}",
            served_model_name=shape["model"],
            tensor_parallel_size=shape["gpus"],
            max_model_len=8192,
            extra_args=("--enable-prefix-caching",),
            gpu_product=shape["accelerator"].upper(),
        )
        for name, shape in shapes.items()
    }
    moment = datetime(2026, 12, 1, tzinfo=UTC)
    snapshot = PlanSnapshot(
        plan_id=1,
        version=1,
        inputs_hash="0" * 64,
        created_at=moment,
        activated_at=moment,
        problem=parse_problem(problem),
        allocations=allocations,
        routing=routing,
        serving=serving,
    )
    return region_documents(snapshot)


@pytest.mark.parametrize("cluster", [HPA, KEDA], ids=["hpa", "keda"])
def test_objects_emitted_for_the_200_tenant_fleet_are_valid(cluster: ClusterSettings) -> None:
    documents = _generated_fleet_documents()
    assert len(documents) == 12
    objects = [
        obj
        for region, document in sorted(documents.items())
        for obj in region_manifests(document, cluster, idempotency_key=f"k:{region}")
    ]
    kinds = Counter(o["kind"] for o in objects)
    assert kinds["Deployment"] >= 24, kinds
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), "two objects of one kind share a name"
    assert all_errors(objects) == []
