"""The main job's output, checked document by document: ``run_pipeline`` on the example
scenario (as ``make run`` runs it, telemetry from the fleet simulator) with a JSON files sink
and a Kubernetes sink. Every region's document must carry what a cluster needs to run the plan:
an autoscaler per Deployment with the zone's floor, the model name, the tensor-parallel size.

Telemetry means are never whole numbers: this is the path on which the allocation documents
once fell back to floor = ceiling = the plan, with no autoscaler and no model."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from controlplane.emission.models import AllocationSink, OutboxEntry
from controlplane.fleet.models import ReplicaShape
from controlplane.plans.models import Plan
from tests.controlplane.plans_helpers import load_support_assistant
from tests.deploy.validation import all_errors

pytestmark = pytest.mark.django_db


@pytest.fixture
def emitted(settings: Any, tmp_path: Path) -> Path:
    """The main job run once, emitting to files and Kubernetes manifests under ``tmp_path``."""
    settings.HEADROOM_TELEMETRY_BUCKET_S = 3600  # hourly buckets keep two weeks quick
    settings.HEADROOM_EMISSION_ROOT = str(tmp_path)
    settings.HEADROOM_PROMETHEUS_RETRIES = 0
    load_support_assistant()
    for sink in (
        AllocationSink(kind=AllocationSink.Kind.FILES, name="files", directory="documents"),
        AllocationSink(
            kind=AllocationSink.Kind.KUBERNETES,
            name="cluster",
            directory="manifests",
            namespace="inference",
            container_image="vllm/vllm-openai:v0.11.0",
        ),
    ):
        sink.full_clean()
        sink.save()
    call_command("run_pipeline", stdout=StringIO())
    return tmp_path


def _objects(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_the_main_job_emits_what_a_cluster_needs_for_every_region(emitted: Path) -> None:
    # One run of the job (about a minute) serves both checks.
    _documents_size_the_autoscalers_from_the_plan(emitted)
    _manifests_run_vllm_with_an_autoscaler_per_zone(emitted)


def _documents_size_the_autoscalers_from_the_plan(emitted: Path) -> None:
    plan = Plan.objects.get(state=Plan.State.ACTIVE)
    # The plan was sized from telemetry, whose token means are fractional.
    assert any(not float(d["prompt_tokens"]).is_integer() for d in plan.problem["demands"]), (
        "the main job's problem should carry telemetry means"
    )
    assert set(OutboxEntry.objects.values_list("status", flat=True)) == {"delivered"}
    regions = sorted({a.region for a in plan.allocations.all()})
    assert regions == ["eu-west", "us-east"]
    shapes = {s.name: s for s in ReplicaShape.objects.select_related("model")}
    for region in regions:
        document = json.loads((emitted / "documents" / f"{region}.json").read_text())
        assert document["sizing_note"] == "", document["sizing_note"]
        assert document["shapes"], region
        for entry in document["shapes"]:
            record = shapes[entry["shape"]]
            assert entry["model"] == record.model.name == "chat-70b"
            assert entry["serving"]["tensor_parallel_size"] == record.gpus_per_replica
            assert entry["serving"]["model_path"] == "meta-llama/Llama-3.3-70B-Instruct"
            assert entry["inflight_target_per_replica"] is not None
            assert 1 <= entry["standing_floor"] <= entry["replicas"] <= entry["max_replicas"]
            bounds = entry["zone_bounds"]
            assert {z: b["replicas"] for z, b in bounds.items()} == entry["zones"]
            for zone_bounds in bounds.values():
                assert 1 <= zone_bounds["floor"] <= zone_bounds["replicas"]
                assert zone_bounds["replicas"] <= zone_bounds["max_replicas"]
            assert sum(b["floor"] for b in bounds.values()) >= entry["standing_floor"]


def _manifests_run_vllm_with_an_autoscaler_per_zone(emitted: Path) -> None:
    plan = Plan.objects.get(state=Plan.State.ACTIVE)
    gpus = {s.name: s.gpus_per_replica for s in ReplicaShape.objects.all()}
    zones_used = {(a.region, a.shape, a.zone) for a in plan.allocations.all() if a.replicas}
    seen: set[tuple[str, str, str]] = set()
    for region in ("eu-west", "us-east"):
        document = json.loads((emitted / "documents" / f"{region}.json").read_text())
        floors = {
            (entry["shape"], zone): b["floor"]
            for entry in document["shapes"]
            for zone, b in entry["zone_bounds"].items()
        }
        objects = _objects(emitted / "manifests" / f"{region}.yaml")
        deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
        autoscalers = {
            o["spec"]["scaleTargetRef"]["name"]: o
            for o in objects
            if o["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")
        }
        assert deployments and set(autoscalers) == set(deployments), region
        assert all_errors(objects) == []
        for name, deployment in deployments.items():
            notes = deployment["metadata"]["annotations"]
            shape, zone = notes["headroom.io/shape"], notes["headroom.io/zone"]
            seen.add((region, shape, zone))
            (container,) = deployment["spec"]["template"]["spec"]["containers"]
            args = container["args"]
            assert args[args.index("--served-model-name") + 1] == "chat-70b"
            assert args[args.index("--tensor-parallel-size") + 1] == str(gpus[shape])
            assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus[shape]
            hpa = autoscalers[name]
            assert hpa["kind"] == "HorizontalPodAutoscaler"
            assert hpa["spec"]["minReplicas"] == floors[(shape, zone)]
            assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == (
                "vllm_requests_in_flight"
            )
            assert "replicas" not in deployment["spec"]
    assert seen == zones_used
