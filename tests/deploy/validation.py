"""Strict validation of Kubernetes objects, offline.

- Built-in kinds against the Kubernetes OpenAPI schemas that ``kubernetes-validate`` ships in
  its package (``kubernetes_validate/kubernetes-json-schema/v<version>-local-strict``), strict:
  an unknown field is an error, as ``kubectl apply --validate=strict`` makes it.
- Custom resources (KubeRay's RayCluster, KEDA's ScaledObject) against the projects' own
  CustomResourceDefinitions, unmodified upstream copies in ``../shared/schemas/crds/``
  relative to the repository root (its README names each release: KEDA v2.20.2, KubeRay
  v1.7.0), with ``jsonschema``: the ``openAPIV3Schema`` of the version the object's
  ``apiVersion`` names, read as the API server does with strict field validation: every
  object schema that lists its properties and does not preserve unknown fields refuses
  others (the server would prune them silently, and a misspelt field should fail a test
  rather than vanish on apply), and the object's own metadata is checked as a Kubernetes
  ``ObjectMeta``. Without that folder the custom resources cannot be checked: a test that
  validates one skips, with ``CRD_MISSING`` as the reason.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

KUBERNETES_VERSION = "1.33.0"
REPO = Path(__file__).resolve().parents[2]
CRDS = REPO.parent / "shared" / "schemas" / "crds"
CRD_FILES = {
    ("ray.io", "RayCluster"): "ray.io_rayclusters.yaml",
    ("keda.sh", "ScaledObject"): "keda.sh_scaledobjects.yaml",
}
CRD_MISSING = (
    ""
    if all((CRDS / name).is_file() for name in CRD_FILES.values())
    else f"the upstream CRDs are not in {CRDS} (../shared/schemas/crds/ beside the repository)"
)
_OBJECT_META = {
    "$ref": "https://kubernetes.io/api/_definitions.json#/$defs/"
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
}


def _strict(node: Any) -> Any:
    """An ``openAPIV3Schema`` with unknown fields refused wherever the API server would prune
    them: object schemas that list properties, do not preserve unknown fields and say
    nothing of additional ones."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    """The strict schema of one custom resource version, from its upstream CRD."""
    group, _, version = api_version.partition("/")
    crd = yaml.safe_load((CRDS / CRD_FILES[(group, kind)]).read_text())
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["names"]["kind"] == kind
    served = [v for v in crd["spec"]["versions"] if v["name"] == version]
    if not served:
        names = ", ".join(v["name"] for v in crd["spec"]["versions"])
        raise ValueError(f"{kind}: the CRD serves {names}, not {version!r}")
    schema: dict[str, Any] = _strict(copy.deepcopy(served[0]["schema"]["openAPIV3Schema"]))
    schema["properties"]["metadata"] = _OBJECT_META
    schema["properties"]["apiVersion"] = {"const": api_version}
    schema["properties"]["kind"] = {"const": kind}
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
    return schema


def _is_custom(api_version: str, kind: str) -> bool:
    return (api_version.partition("/")[0], kind) in CRD_FILES


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema = crd_schema(api_version, kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=_definitions() @ Registry())


def object_errors(obj: Mapping[str, Any]) -> list[str]:
    """Why the API server would refuse ``obj`` (empty when it would accept it)."""
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    if _is_custom(*key) and CRD_MISSING:
        pytest.skip(f"{key[1]} cannot be validated: {CRD_MISSING}")
    validator = crd_validator(*key) if _is_custom(*key) else kubernetes_validator(*key)
    return [
        f"{where}: {'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in sorted(validator.iter_errors(dict(obj)), key=lambda e: list(e.absolute_path))
    ]


@cache
def _definitions() -> Resource[Any]:
    return Resource.from_contents(
        schema_contents(f"{_SCHEMA_DIR}/_definitions.json", KUBERNETES_VERSION)
    )


_SCHEMA_DIR = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"


@cache
def kubernetes_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    """The strict schema of one built-in kind, as ``kubernetes_validate.validate(...,
    strict=True)`` loads it (same files, same draft), kept for the next object of that kind:
    parsing the definitions for every object would make the fleet's hundreds slow."""
    # rbac.authorization.k8s.io/v1 → rbac-v1; apps/v1 → apps-v1; v1 → v1.
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = schema_contents(
            f"{_SCHEMA_DIR}/{kind.lower()}-{group_version}.json", KUBERNETES_VERSION
        )
    except FileNotFoundError as error:
        raise kubernetes_validate.SchemaNotFoundError(
            version=KUBERNETES_VERSION, kind=kind, api_version=api_version
        ) from error
    registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
    registry = _definitions() @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def all_errors(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    return [problem for obj in objects for problem in object_errors(obj)]
