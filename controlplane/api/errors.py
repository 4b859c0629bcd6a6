"""One error contract for the API.

Every error body is ``{"error": {"code": ..., "message": ..., "fields": {...}}}``; validation
errors are 400 and name each field. Django's ``ValidationError`` raised by a model's
``full_clean()`` in a service is turned into the same 400.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(as_serializer_error(exc))
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
                "message": f"invalid value for {first}",
                "fields": fields,
            }
        }
    elif isinstance(exc, exceptions.APIException):
        response.data = {
            "error": {
                "code": exc.get_codes() if isinstance(exc.get_codes(), str) else "error",
                "message": str(exc.detail),
            }
        }
    return response
