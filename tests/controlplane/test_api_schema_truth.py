"""The OpenAPI schema tells the truth: every operation documents the errors it can answer with
the one error body, bounds are in it, and real responses validate against it.

The fuzz (``tests/fuzz/run_schemathesis.sh``, in CI) finds what the schema and the server
disagree on; these tests keep the structural promises in the normal suite.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from controlplane.benchmarks.models import BenchmarkRun
from controlplane.core.roles import POLICY_ADMIN, VIEWER
from controlplane.fleet.models import ReplicaShape
from tests.controlplane.conftest import make_user
from tests.controlplane.plans_helpers import load_support_assistant, run_replan
from tests.controlplane.tenant_key_support import issue_key, key_client, two_tenant_world

ERROR_REF = {"$ref": "#/components/schemas/Error"}
UNSAFE = {"put", "patch", "post", "delete"}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    generated: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return generated


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    ]


def _error_body(response: dict[str, Any]) -> Any:
    return response.get("content", {}).get("application/json", {}).get("schema")


def test_every_operation_documents_its_errors_with_the_error_body(
    schema: dict[str, Any],
) -> None:
    operations = _operations(schema)
    assert len(operations) > 100
    for path, method, operation in operations:
        where = f"{method.upper()} {path}"
        responses = operation["responses"]
        parameters = operation.get("parameters", [])
        expected = {"400", "401", "404", "406", "414", "431", "503"}
        if operation.get("security"):
            expected.add("403")
        if "requestBody" in operation:
            expected.add("415")
        if method in UNSAFE:
            expected.add("409")
        if any(p["in"] == "header" and p["name"] == "If-Match" for p in parameters):
            expected |= {"412", "428"}
        assert expected <= set(responses), (where, sorted(expected - set(responses)))
        for code, response in responses.items():
            if code >= "400":
                assert _error_body(response) == ERROR_REF, (where, code)
                assert response["description"], (where, code)
        retry_after = responses["503"]["headers"]["Retry-After"]
        assert retry_after["required"] is True, where
        assert "WWW-Authenticate" in responses["401"]["headers"], where


def test_revisioned_records_document_their_preconditions(schema: dict[str, Any]) -> None:
    for name in ("tiers", "tenants", "tenant-quotas", "benchmarks/endpoints"):
        item = schema["paths"][f"/api/{name}/{{id}}/"]
        for method in ("put", "patch", "delete"):
            assert {"412", "428"} <= set(item[method]["responses"]), (name, method)
        assert "304" in item["get"]["responses"], name
        assert "ETag" in item["get"]["responses"]["200"]["headers"], name
        # Records without ETags have no preconditions to document.
    assert "412" not in schema["paths"]["/api/zones/{id}/"]["put"]["responses"]


def test_throttled_operations_document_429_with_retry_after(schema: dict[str, Any]) -> None:
    token = schema["paths"]["/api/auth/token/"]["post"]["responses"]["429"]
    assert "Retry-After" in token["headers"]
    assert "429" not in schema["paths"]["/api/zones/"]["get"]["responses"]


def test_error_body_schema_is_the_error_contract(schema: dict[str, Any]) -> None:
    error = schema["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]
    detail = schema["components"]["schemas"]["ErrorDetail"]
    assert set(detail["required"]) == {"code", "message"}
    assert {"fields", "referenced_by"} <= set(detail["properties"])


def test_pagination_and_query_bounds_are_in_the_schema(schema: dict[str, Any]) -> None:
    for path, _method, operation in _operations(schema):
        for parameter in operation.get("parameters", []):
            if parameter["name"] == "limit":
                assert parameter["schema"]["minimum"] == 1, path
                assert parameter["schema"]["maximum"] == 1000, path
            if parameter["name"] == "offset":
                assert parameter["schema"]["minimum"] == 0, path
                assert parameter["schema"]["maximum"] == 10**15, path
    forecast = schema["paths"]["/api/finance/forecast/"]["get"]["parameters"]
    horizon = next(p for p in forecast if p["name"] == "horizon")
    assert horizon["schema"]["minimum"] == 1


def test_model_validators_bounds_are_in_the_schema(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    memory = components["AcceleratorType"]["properties"]["memory_gb"]
    # Greater than zero: an exclusive 0, or a positive minimum.
    assert memory["minimum"] > 0 or (memory["minimum"], memory.get("exclusiveMinimum")) == (0, True)
    target = components["ReplicaShape"]["properties"]["target_utilization"]
    assert target["maximum"] == 1
    assert target["minimum"] > 0 or (target["minimum"], target.get("exclusiveMinimum")) == (0, True)


def test_strict_bodies_refuse_unknown_fields_in_the_schema(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    for name in ("Zone", "PatchedZone", "Tenant", "BenchmarkRequest", "PlanDecision"):
        assert components[name]["additionalProperties"] is False, name


def test_query_text_is_documented_without_nul(schema: dict[str, Any]) -> None:
    search = next(
        p for p in schema["paths"]["/api/zones/"]["get"]["parameters"] if p["name"] == "search"
    )
    assert search["schema"]["pattern"] == "^[^\\u0000]*$"


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["", "xml", "yaml"])
def test_a_format_no_renderer_writes_is_a_400_naming_format(
    api_client_for: Any, value: str
) -> None:
    response = api_client_for(VIEWER).get(f"/api/zones/?format={value}")
    assert response.status_code == 400
    assert "format" in response.json()["error"]["fields"]
    assert api_client_for(VIEWER).get("/api/zones/?format=json").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/telemetry/pulls/", "bucket_s=1.5"),
        ("/api/telemetry/pulls/", "bucket_s=9223372036854775808"),
        ("/api/emission/outbox/", "plan_version=-9223372036854775809"),
        ("/api/tenants/", "tier=9223372036854775808"),
    ],
)
def test_a_whole_number_filter_refuses_fractions_and_numbers_past_bigint(
    api_client_for: Any, path: str, query: str
) -> None:
    response = api_client_for(VIEWER).get(f"{path}?{query}")
    assert response.status_code == 400, response.content
    assert query.split("=")[0] in response.json()["error"]["fields"]


@pytest.mark.django_db
def test_a_multipart_body_without_parts_is_a_400(api_client_for: Any) -> None:
    response = api_client_for(POLICY_ADMIN).generic(
        "POST",
        "/api/plans/replan/",
        b"--d5bda3b8\r\n.exe--d5bda3b8--\r\n",
        content_type="multipart/form-data; boundary=d5bda3b8",
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "parse_error"


def test_filters_allow_an_empty_value_and_blank_or_pattern_is_any_of(
    schema: dict[str, Any],
) -> None:
    parameters = {p["name"]: p for p in schema["paths"]["/api/tenants/"]["get"]["parameters"]}
    assert parameters["residency_region"]["allowEmptyValue"] is True
    assert "allowEmptyValue" not in parameters["limit"]
    gpu_product = schema["components"]["schemas"]["AcceleratorType"]["properties"]["gpu_product"]
    assert "oneOf" not in gpu_product
    assert {"type": "string", "maxLength": 0} in gpu_product["anyOf"]


class TestPagination:
    @pytest.mark.parametrize(
        "query",
        [
            "limit=abc",
            "limit=0",
            "limit=1001",
            "limit=-1",
            "limit=1.5",
            "offset=-1",
            f"offset={10**15 + 1}",
            f"offset={2**63}",
        ],
    )
    def test_a_page_parameter_out_of_bounds_is_a_400_naming_it(
        self, api_client_for: Any, query: str
    ) -> None:
        response = api_client_for(VIEWER).get(f"/api/zones/?{query}")
        assert response.status_code == 400, response.content
        name = query.split("=")[0]
        assert name in response.json()["error"]["fields"]

    def test_a_page_in_bounds_is_served(self, api_client_for: Any) -> None:
        response = api_client_for(VIEWER).get("/api/zones/?limit=1000&offset=0")
        assert response.status_code == 200
        assert response.json()["count"] == 0


# --- real responses against the schema ---------------------------------------------------


def _json_schema(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable`` and exclusive bounds spelled as JSON Schema, recursively."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _json_schema(value) for key, value in node.items()}
    # OpenAPI 3.0's boolean exclusive bounds are numbers in JSON Schema.
    for bound in ("Minimum", "Maximum"):
        if converted.pop(f"exclusive{bound}", False) is True:
            converted[f"exclusive{bound}"] = converted.pop(bound.lower())
    if converted.pop("nullable", False):
        if "type" in converted and "enum" not in converted:
            converted["type"] = [converted["type"], "null"]
        else:
            return {"anyOf": [converted, {"type": "null"}]}
    return converted


def _validator(schema: dict[str, Any], path: str, method: str, code: str) -> Any:
    content = schema["paths"][path][method]["responses"][code]["content"]
    body = content["application/json"]["schema"]
    document = {
        **_json_schema(body),
        "components": _json_schema(copy.deepcopy(schema["components"])),
    }
    return jsonschema.Draft202012Validator(document)


def _path_for(template: str, pk: int) -> str:
    return template.replace("{id}", str(pk))


def _validate_every_get(schema: dict[str, Any], client: APIClient) -> tuple[int, set[str]]:
    """GET every JSON operation (a detail route with the first row of its list) and validate
    the 200 bodies against the schema; how many were checked, and the fields seen null."""
    nulls_seen: set[str] = set()
    checked = 0
    for path, method, operation in _operations(schema):
        if method != "get" or "200" not in operation["responses"]:
            continue
        if "{" in path and not path.endswith("/{id}/"):
            continue
        content = operation["responses"]["200"].get("content", {})
        if "application/json" not in content:
            continue
        if path.endswith("/{id}/"):
            listing = client.get(path.removesuffix("{id}/"))
            if listing.status_code != 200 or not listing.json().get("results"):
                continue
            url = _path_for(path, listing.json()["results"][0]["id"])
        else:
            url = path
        response = client.get(url)
        if response.status_code in (403, 404):  # not this caller's to read, or nothing yet
            continue
        assert response.status_code == 200, (url, response.content[:300])
        validator = _validator(schema, path, method, "200")
        errors = [
            f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(response.json())
        ]
        assert not errors, (url, errors[:5])
        nulls_seen |= _null_fields(response.json())
        checked += 1
    return checked, nulls_seen


@pytest.mark.django_db
def test_real_responses_validate_against_the_schema(schema: dict[str, Any]) -> None:
    """Every GET of the example scenario with an active plan, a plan proposed by nobody and
    decided by nobody, and a benchmark run nobody asked for: the fields that are null in
    these rows (who approved, who rejected, who requested) must be nullable in the schema."""
    load_support_assistant()
    run = run_replan()
    assert run.plan is not None, run.error
    BenchmarkRun.objects.create(
        shape=ReplicaShape.objects.order_by("pk").first(),
        trigger=BenchmarkRun.Trigger.SCHEDULE,
        reason="fresh figures",
    )
    client = APIClient()
    client.force_authenticate(make_user("schema-viewer", VIEWER))
    checked, nulls_seen = _validate_every_get(schema, client)
    assert checked > 40
    # The rows above do hold the nulls the schema must allow.
    assert {"approved_by", "rejected_by", "requested_by"} <= nulls_seen


@pytest.mark.django_db
def test_a_tenant_keys_responses_validate_against_the_schema(schema: dict[str, Any]) -> None:
    """The same walk with a tenant key, over two tenants and an active plan: the cut-down
    views a key gets (a plan without the documents that speak of every tenant) are still the
    documented shape."""
    world = two_tenant_world()
    checked, _ = _validate_every_get(schema, key_client(issue_key(world.own.tenant)))
    assert checked > 20
    active = key_client(issue_key(world.own.tenant, name="second")).get("/api/plans/active/")
    assert active.status_code == 200
    assert "binding" not in active.json()


def _null_fields(body: Any) -> set[str]:
    found: set[str] = set()
    rows = body.get("results", [body]) if isinstance(body, dict) else body
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict):
            found |= {key for key, value in row.items() if value is None}
    return found
