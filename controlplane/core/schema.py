"""The OpenAPI schema tells the truth about errors, nulls and bounds, at one depth.

``HeadroomAutoSchema`` is ``DEFAULT_SCHEMA_CLASS``. Every operation it describes documents,
besides its successes, each error status the API can answer it with, all with the one error
body (``components/schemas/Error``, see ``controlplane/api/errors.py``):

- 400: validation (a body, a query or a header the operation reads) or a malformed request
  (a refused Host, NUL in a query parameter), on every operation;
- 401 (with ``WWW-Authenticate``) on every operation (credentials the API does not know are
  refused even where none are needed), 403 on every operation that needs them;
- 404 on every operation: no such record on a detail route, and on any route an unknown
  ``?format=`` (DRF answers it with 404) or a report that needs an active plan;
- 406 on every operation: an ``Accept`` header no renderer of the view satisfies;
- 409 on every write: a delete of a record still referenced, or a write that collided with a
  concurrent one on a unique rule;
- 412 and 428 where the operation takes ``If-Match`` (optimistic concurrency), and 304 (no
  body) where it takes ``If-None-Match``;
- 414 and 431 on every operation: the web server (``controlplane.serving``) refuses a request
  line or headers over its limits before the API reads them;
- 415 on every operation with a body: a media type no parser of the view reads;
- 429 (with ``Retry-After``) where the view is throttled;
- 503 (with ``Retry-After``) on every operation: a dependency (the database, the broker) is
  down; retry after the given seconds.

A status an operation's own ``extend_schema`` already documents keeps its description there;
only its body schema is made the error body, so every error status has one shape.

Nulls: a read-only field whose source crosses a nullable relation (``approved_by`` of a plan
no one approved) is ``nullable`` in the schema, as the response is.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers
from rest_framework.fields import Field
from rest_framework.views import APIView

from controlplane.core import validators
from controlplane.core.filters import BIGINT_MAX, BIGINT_MIN
from controlplane.core.serializers import StrictFieldsMixin

ERROR_MEDIA_TYPE = "application/json"

RETRY_AFTER = {
    "schema": {"type": "integer", "minimum": 0},
    "description": "Seconds to wait before trying again.",
}
WWW_AUTHENTICATE = {
    "schema": {"type": "string"},
    "description": "The authentication scheme to use: `Token`.",
}


class ErrorDetailSerializer(serializers.Serializer[Any]):
    code = serializers.CharField(
        help_text="What went wrong, for programs: invalid, parse_error, not_authenticated, "
        "authentication_failed, permission_denied, not_found, not_acceptable, protected, "
        "conflict, precondition_failed, precondition_required, unsupported_media_type, "
        "throttled, locked_out, unavailable, ..."
    )
    message = serializers.CharField(help_text="What went wrong, for people.")
    # The contract's key. The metaclass collects declared fields off the class, so this does
    # not shadow ``Serializer.fields`` at run time; the stubs only see the class attribute.
    fields = serializers.DictField(  # type: ignore[assignment]
        child=serializers.JSONField(),
        required=False,
        help_text="400 invalid: each offending field (or non_field_errors) and its messages; "
        "403 permission_denied on a tenant key's write: each field only operators change.",
    )
    referenced_by = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        required=False,
        help_text="409 protected: each kind of record still referring here, and their ids.",
    )


class ErrorSerializer(serializers.Serializer[Any]):
    """The one error body of the API."""

    error = ErrorDetailSerializer()


# What each status means, for the operations that do not describe it themselves.
_DESCRIPTIONS = {
    "400": "Validation failed (`invalid`, naming each field) or the request is malformed "
    "(`parse_error`, `bad_request`).",
    "401": "No credentials, or credentials the API does not know.",
    "403": "The caller's roles do not allow this (a tenant key: the endpoint, or the fields "
    "named in `fields`, are the operators').",
    "404": "No such record, an unknown `?format=`, or nothing to report yet.",
    "406": "No representation the `Accept` header allows.",
    "409": "A record still referenced by others cannot be deleted (`protected`), or the write "
    "collided with a concurrent one (`conflict`); reload and retry.",
    "412": "`If-Match` names an older revision: nothing changed. GET the record again.",
    "414": "The request line is longer than the server accepts (4,094 bytes by default): send "
    "fewer or shorter query parameters.",
    "415": "The body's media type is not one the operation reads.",
    "428": "`If-Match` is required: send the ETag from your last GET of the record.",
    "429": "Too many requests: wait for `Retry-After` seconds.",
    "431": "The request's headers are over the server's limits (by default 100 headers, "
    "8,190 bytes each).",
    "503": "A dependency (database or broker) is unavailable: retry after `Retry-After` seconds.",
}
_UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}

# The bounds each of the shared model validators enforces: (minimum, exclusive, maximum,
# exclusive); None where it sets none.
Bounds = tuple[float | None, bool, float | None, bool]
_VALIDATOR_BOUNDS: tuple[tuple[Any, Bounds], ...] = (
    (validators.positive, (0, True, None, False)),
    (validators.non_negative, (0, False, None, False)),
    (validators.fraction_open_closed, (0, True, 1, False)),
    (validators.fraction_closed, (0, False, 1, False)),
    (validators.quantile_open, (0, True, 1, True)),
    (validators.at_least_one, (1, False, None, False)),
)
# Query text may not hold NUL (QueryGuardMixin refuses it).
_NO_NUL = "^[^\\u0000]*$"


def _tighten(schema: dict[str, Any], bounds: Bounds) -> None:
    """Narrow ``schema``'s minimum and maximum to ``bounds`` where these are stricter."""
    low, low_exclusive, high, high_exclusive = bounds
    if low is not None:
        current = schema.get("minimum")
        if current is None or low > current or (low == current and low_exclusive):
            schema["minimum"] = low
            if low_exclusive:
                schema["exclusiveMinimum"] = True
    if high is not None:
        current = schema.get("maximum")
        if current is None or high < current or (high == current and high_exclusive):
            schema["maximum"] = high
            if high_exclusive:
                schema["exclusiveMaximum"] = True


def parameters_of(operation: dict[str, Any]) -> list[dict[str, Any]]:
    parameters: list[dict[str, Any]] = operation.get("parameters", [])
    return parameters


def _is_throttled(view: APIView) -> bool:
    if view.throttle_classes:
        return True
    return type(view).get_throttles is not APIView.get_throttles


def _crosses_nullable_relation(field: Field[Any, Any, Any, Any]) -> bool:
    """Whether a read-only field's value comes through a relation that may be empty."""
    parent = getattr(field, "parent", None)
    model = getattr(getattr(parent, "Meta", None), "model", None)
    attrs = getattr(field, "source_attrs", None) or [field.field_name]
    for attr in attrs:
        if model is None:
            return False
        try:
            model_field = model._meta.get_field(attr)
        except Exception:  # not a model field (a property, a method): nothing to read
            return False
        if model_field.is_relation and model_field.null:
            return True
        if not isinstance(model_field, models.ForeignKey | models.OneToOneField):
            return False
        model = model_field.related_model
    return False


class HeadroomAutoSchema(AutoSchema):
    def _insert_field_validators(self, field: Any, schema: dict[str, Any]) -> None:
        # drf-spectacular's private hooks are unannotated.
        super()._insert_field_validators(field, schema)  # type: ignore[no-untyped-call]
        # drf-spectacular offers a blank string beside a pattern with oneOf, but a pattern that
        # matches "" too makes "" match both: either will do.
        if any(option == {"type": "string", "maxLength": 0} for option in schema.get("oneOf", [])):
            schema["anyOf"] = schema.pop("oneOf")
        if schema.get("type") in ("integer", "number"):
            for validator in field.validators:
                for function, bounds in _VALIDATOR_BOUNDS:
                    # Identity: Django's validator classes compare by value, and are unhashable.
                    if validator is function:
                        _tighten(schema, bounds)

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        mapped: dict[str, Any] = super()._map_basic_serializer(  # type: ignore[no-untyped-call]
            serializer, direction
        )
        # Strict serializers refuse a field they do not have; their responses hold only theirs.
        if isinstance(serializer, StrictFieldsMixin) or (
            isinstance(serializer, type) and issubclass(serializer, StrictFieldsMixin)
        ):
            mapped["additionalProperties"] = False
        # Fields some callers do not get (a serializer's ``schema_optional_fields``) are
        # documented but not required.
        optional = set(getattr(serializer, "schema_optional_fields", ()))
        if optional and "required" in mapped:
            mapped["required"] = [name for name in mapped["required"] if name not in optional]
            if not mapped["required"]:
                del mapped["required"]
        return mapped

    def _get_serializer_field_meta(
        self, field: Field[Any, Any, Any, Any], direction: str
    ) -> dict[str, Any]:
        meta: dict[str, Any] = super()._get_serializer_field_meta(  # type: ignore[no-untyped-call]
            field, direction
        )
        if field.read_only and not meta.get("nullable") and _crosses_nullable_relation(field):
            meta["nullable"] = True
        return meta

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation: dict[str, Any] | None = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        # Filters, search and ordering read an empty value as "no filter".
        filters = {p["name"] for p in self._get_filter_parameters()}  # type: ignore[no-untyped-call]
        for parameter in parameters_of(operation):
            schema = parameter.get("schema", {})
            if parameter["in"] == "query" and parameter["name"] in filters:
                parameter["allowEmptyValue"] = True
            if parameter["in"] == "query" and schema.get("type") == "string":
                if "enum" not in schema and "pattern" not in schema:
                    schema["pattern"] = _NO_NUL
            if parameter["in"] == "query" and schema.get("type") == "integer":
                # Whole-number filters read a bigint (core.filters.StrictIntegerField).
                schema.setdefault("minimum", BIGINT_MIN)
                schema.setdefault("maximum", BIGINT_MAX)
        responses: dict[str, Any] = operation["responses"]
        for code in self._error_statuses(operation):
            response = responses.setdefault(code, {"description": _DESCRIPTIONS[code]})
            if not response.get("description"):
                response["description"] = _DESCRIPTIONS[code]
            response["content"] = {ERROR_MEDIA_TYPE: {"schema": self._error_schema()}}
            headers = response.setdefault("headers", {})
            if code == "429":
                headers.setdefault("Retry-After", RETRY_AFTER)
            if code == "503":
                headers.setdefault("Retry-After", {**RETRY_AFTER, "required": True})
            if code == "401":
                headers.setdefault("WWW-Authenticate", WWW_AUTHENTICATE)
            if not headers:
                del response["headers"]
        if any(
            p["in"] == "header" and p["name"] == "If-None-Match" for p in parameters_of(operation)
        ):
            responses.setdefault(
                "304", {"description": "Not modified: `If-None-Match` names the current revision."}
            )
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _error_schema(self) -> dict[str, Any]:
        component = self.resolve_serializer(ErrorSerializer, "response")
        ref: dict[str, Any] = component.ref
        return ref

    def _error_statuses(self, operation: dict[str, Any]) -> list[str]:
        codes = {"400", "401", "404", "406", "414", "431", "503"}
        parameters = parameters_of(operation)
        if operation.get("security"):
            codes.add("403")
        if "requestBody" in operation:
            codes.add("415")
        if self.method in _UNSAFE:
            codes.add("409")
        if any(p["in"] == "header" and p["name"].lower() == "if-match" for p in parameters):
            codes |= {"412", "428"}
        if _is_throttled(self.view):
            codes.add("429")
        # A status the operation documents itself is an error too, and gets the error body.
        codes |= {code for code in operation["responses"] if code >= "400"}
        return sorted(codes)
