"""Strict validation of Kubernetes objects, offline.

- Built-in kinds against the Kubernetes OpenAPI schemas that ``kubernetes-validate`` ships in
  its package (``kubernetes_validate/kubernetes-json-schema/v<version>-local-strict``), strict:
  an unknown field is an error, as ``kubectl apply --validate=strict`` makes it.
- Custom resources against their CRDs' OpenAPI v3 schemas, vendored in ``schemas/`` (see
  ``schemas/README.md`` for where each comes from), with ``jsonschema``. A CRD schema allows
  unknown fields unless it says otherwise (the API server prunes them); here every object
  schema that lists its properties is closed, so a misspelt field fails the test instead of
  vanishing on apply. Fields marked ``x-kubernetes-preserve-unknown-fields`` stay open.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

KUBERNETES_VERSION = "1.33.0"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
CRD_SCHEMAS = {
    ("ray.io/v1", "RayCluster"): "kuberay-v1.7.0-raycluster.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda-v2.20.2-scaledobject.json",
}


def _closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object listing properties."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {key: _closed(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / CRD_SCHEMAS[(api_version, kind)]).read_text())
    closed = _closed(schema)
    # metadata is "type: object" in a CRD; the API server checks it as ObjectMeta.
    validator_class = jsonschema.validators.validator_for(
        closed, default=jsonschema.Draft7Validator
    )
    validator_class.check_schema(closed)
    return validator_class(closed)


def object_errors(obj: Mapping[str, Any]) -> list[str]:
    """Why the API server would refuse ``obj`` (empty when it would accept it)."""
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    if key in CRD_SCHEMAS:
        errors = sorted(crd_validator(*key).iter_errors(dict(obj)), key=lambda e: list(e.path))
        problems = [f"{where}: {'.'.join(map(str, e.path))}: {e.message}" for e in errors]
        metadata = obj.get("metadata", {})
        if not isinstance(metadata, Mapping) or not metadata.get("name"):
            problems.append(f"{where}: metadata.name is required")
        return problems
    validator = kubernetes_validator(*key)
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
