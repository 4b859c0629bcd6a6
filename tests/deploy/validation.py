"""Strict validation of Kubernetes objects, offline.

- Built-in kinds against the Kubernetes OpenAPI schemas that ``kubernetes-validate`` ships in
  its package (``kubernetes_validate/kubernetes-json-schema/v<version>-local-strict``), strict:
  an unknown field is an error, as ``kubectl apply --validate=strict`` makes it.
- Custom resources (KubeRay's RayCluster, KEDA's ScaledObject) against the schemas in
  ``schemas/`` (``schemas/README.md`` says what each covers and which release it follows),
  with ``jsonschema``; their pod templates, object metadata and autoscaler behaviour refer to
  the same Kubernetes definitions, so those parts are checked as strictly as built-in kinds.
  Unknown fields are errors there too: the API server would prune them silently, and a
  misspelt field should fail a test rather than vanish on apply.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

KUBERNETES_VERSION = "1.33.0"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
CRD_SCHEMAS = {
    ("ray.io/v1", "RayCluster"): "ray.io-v1-raycluster.yaml",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh-v1alpha1-scaledobject.yaml",
}


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema = yaml.safe_load((SCHEMAS / CRD_SCHEMAS[(api_version, kind)]).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=_definitions() @ Registry())


def object_errors(obj: Mapping[str, Any]) -> list[str]:
    """Why the API server would refuse ``obj`` (empty when it would accept it)."""
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    validator = crd_validator(*key) if key in CRD_SCHEMAS else kubernetes_validator(*key)
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
