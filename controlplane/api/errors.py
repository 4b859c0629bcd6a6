"""One error contract for the API.

Every error body is ``{"error": {"code": ..., "message": ..., ...}}``:

- 400 ``invalid``: validation failed; ``fields`` maps each offending field (or
  ``non_field_errors``) to its messages. Django's ``ValidationError`` raised by a model's
  ``full_clean()`` in a service becomes the same 400.
- 409 ``protected``: a delete refused because other records still point at this one;
  ``referenced_by`` maps each referencing kind of record to the ids that point here.
- 409 ``conflict``: a write collided with a concurrent one on a unique rule; retry.
- 412 ``precondition_failed`` / 428 ``precondition_required``: optimistic concurrency
  (see ``concurrency.py``).
- 503 ``unavailable``: the database or the broker could not be reached
  (``controlplane.core.outage``); ``Retry-After`` says when to try again. Nothing was
  changed, except that a job whose task could not be queued is recorded failed, saying so.
- 403 ``permission_denied``: the caller may not do this; a tenant key's write that changes
  an operator's field also has ``fields``, naming each such field.
- 401, 403, 404, 405, 415, 429: DRF's own exceptions, in the same shape.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, IntegrityError
from django.db.models import Model, ProtectedError, RestrictedError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.core.outage import dependency_down, dependency_message, log_outage, retry_after_s

# How many referencing records a "protected" message names before it summarises.
_NAMED_REFERENCES = 5


class RecordInUse(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The record is still referenced by other records."
    default_code = "protected"

    def __init__(self, message: str, referenced_by: dict[str, list[Any]]) -> None:
        super().__init__(message)
        self.referenced_by = referenced_by


class WriteConflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = (
        "The change collided with another change to the same records (a unique rule or a "
        "reference no longer holds). Reload and try again."
    )
    default_code = "conflict"


class DependencyDown(exceptions.APIException):
    """The database or the broker is unreachable: 503 with ``Retry-After`` (DRF sets the
    header from ``wait``)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "A service this request needs is unreachable. Try again later."
    default_code = "unavailable"

    def __init__(self, message: str, wait: int) -> None:
        super().__init__(message)
        self.wait = wait


def _record_in_use(exc: ProtectedError | RestrictedError) -> RecordInUse:
    objects = exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects
    by_kind: dict[str, list[Model]] = defaultdict(list)
    for obj in objects:
        by_kind[str(obj._meta.verbose_name_plural)].append(obj)
    parts = []
    for kind, records in sorted(by_kind.items()):
        records.sort(key=lambda r: r.pk)
        names = ", ".join(str(r) for r in records[:_NAMED_REFERENCES])
        more = (
            f" and {len(records) - _NAMED_REFERENCES} more"
            if len(records) > _NAMED_REFERENCES
            else ""
        )
        noun = kind if len(records) > 1 else str(records[0]._meta.verbose_name)
        parts.append(f"{len(records)} {noun} ({names}{more})")
    message = (
        f"Cannot delete: still referenced by {'; '.join(parts)}. "
        "Delete those records or point them elsewhere first."
    )
    return RecordInUse(message, {kind: [r.pk for r in rs] for kind, rs in by_kind.items()})


def _translate(exc: Exception) -> Exception:
    """Map Django and database exceptions to the API exception that names the client's error."""
    if isinstance(exc, DjangoValidationError):
        detail = as_serializer_error(exc)
        # Django files record-wide errors under "__all__"; DRF under "non_field_errors".
        if NON_FIELD_ERRORS in detail:
            key = api_settings.NON_FIELD_ERRORS_KEY
            detail[key] = [*detail.get(key, []), *detail.pop(NON_FIELD_ERRORS)]
        return exceptions.ValidationError(detail)
    if isinstance(exc, Http404):
        return exceptions.NotFound(*exc.args)
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied(*exc.args)
    if isinstance(exc, ProtectedError | RestrictedError):
        return _record_in_use(exc)
    if dependency_down(exc) is not None:
        return DependencyDown(dependency_message(exc), retry_after_s())
    if isinstance(exc, IntegrityError):
        # Validation checks unique rules and references first; reaching the database's own
        # constraint means a concurrent writer got there between the check and the write.
        return WriteConflict()
    if isinstance(exc, DataError):
        # A value the serializers let through but the database column refuses.
        return exceptions.ValidationError(
            {"non_field_errors": ["A value is out of range or malformed for storage."]}
        )
    return exc


def _first_message(detail: Any) -> str:
    """The first message in a (possibly nested) error detail, for the one-line summary."""
    while isinstance(detail, list | dict) and detail:
        detail = detail[0] if isinstance(detail, list) else next(iter(detail.values()))
    return str(detail) if detail else "invalid"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if dependency_down(exc) is not None:
        request = context.get("request")
        log_outage(
            exc, f"answering {getattr(request, 'method', '')} {getattr(request, 'path', '')}"
        )
    exc = _translate(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        detail = response.data
        fields = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        first = next(iter(fields), "non_field_errors")
        response.data = {
            "error": {
                "code": "invalid",
                "message": f"invalid value for {first}: {_first_message(fields.get(first))}",
                "fields": fields,
            }
        }
    elif isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        body: dict[str, Any] = {
            "code": codes if isinstance(codes, str) else "error",
            "message": str(exc.detail),
        }
        if isinstance(exc, RecordInUse):
            body["referenced_by"] = exc.referenced_by
        denied = getattr(exc, "fields", None)
        if isinstance(exc, exceptions.PermissionDenied) and isinstance(denied, dict):
            # A tenant key's write naming fields only operators change (core.api).
            body["fields"] = denied
        response.data = {"error": body}
    return response
