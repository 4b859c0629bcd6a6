"""The deployment manifests are well-formed and consistent with the code they run."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path.name, doc))
    return docs


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {})
    pods = []
    if "template" in spec:
        pods.append(spec["template"]["spec"])
    if doc["kind"] == "RayCluster":
        pods.append(spec["headGroupSpec"]["template"]["spec"])
        pods += [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    return [c for pod in pods for c in pod.get("containers", [])]


def test_every_document_names_kind_version_and_namespace() -> None:
    docs = _documents()
    assert docs
    for name, doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), name
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "headroom", (name, doc["metadata"])


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_env_references_point_at_defined_config_and_secrets() -> None:
    docs = _documents()
    config_maps = {d["metadata"]["name"]: d["data"] for _, d in docs if d["kind"] == "ConfigMap"}
    secrets = {d["metadata"]["name"]: d["stringData"] for _, d in docs if d["kind"] == "Secret"}
    for name, doc in docs:
        for container in _containers(doc):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in config_maps, name
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets, name
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets[ref["name"]], (name, ref)


def test_production_settings_are_all_provided() -> None:
    docs = _documents()
    provided = set()
    for _, doc in docs:
        provided |= set(doc.get("data", {})) | set(doc.get("stringData", {}))
    for variable in ("DEBUG", "SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "ALLOWED_HOSTS"):
        assert variable in provided, variable


@pytest.mark.parametrize(
    "module, attribute",
    [("controlplane.wsgi", "application"), ("workers.celery", "app")],
)
def test_commands_name_real_entry_points(module: str, attribute: str) -> None:
    commands = " ".join(
        " ".join(c.get("command", [])) for _, doc in _documents() for c in _containers(doc)
    )
    assert module.split(".")[0] in commands
    assert hasattr(importlib.import_module(module), attribute)


def test_beat_is_a_single_replica_that_never_overlaps() -> None:
    beat = next(d for _, d in _documents() if d["metadata"]["name"] == "headroom-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"
