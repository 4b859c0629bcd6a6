"""One error shape for everything under /api/, whatever produced the error.

DRF's exception handler (``controlplane.api.errors``) shapes the errors its views raise. What
happens outside a DRF view — a path no route matches, a Host the site refuses, an exception a
view does not handle, a response a plain Django view writes — would otherwise reach an API
client as an HTML page. This middleware, near the top of the stack, gives those the same
``{"error": {"code": ..., "message": ...}}`` body, with the status and headers kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus

from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger(__name__)

API_PREFIX = "/api/"

# The codes DRF's own exceptions use for the same statuses, so a client sees one vocabulary.
_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "throttled",
    500: "server_error",
    502: "bad_gateway",
    503: "unavailable",
}
_MESSAGES = {
    400: "The request was refused (a malformed request or a Host this site does not serve).",
    404: "No such resource. The API's root, /api/, lists what there is.",
    500: "The server failed to answer this request; the failure is logged. Try again later.",
}
# Headers of the original response worth keeping on the replacement.
_KEPT_HEADERS = ("Retry-After", "Allow", "WWW-Authenticate", "Vary")


def _is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").split(";", 1)[0].strip().endswith("json")


def api_error(status: int, message: str | None = None) -> JsonResponse:
    """The error contract's body for ``status``, with a message a person can act on."""
    code = _CODES.get(status, "error")
    text = message or _MESSAGES.get(status) or HTTPStatus(status).phrase
    return JsonResponse({"error": {"code": code, "message": text}}, status=status)


class ApiErrorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            not request.path.startswith(API_PREFIX)
            or response.status_code < 400
            or _is_json(response)
            or getattr(response, "streaming", False)
        ):
            return response
        replacement = api_error(response.status_code)
        for header in _KEPT_HEADERS:
            if header in response:
                replacement[header] = response[header]
        return replacement

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """An exception no view handled: logged with its traceback, answered as JSON 500.

        Django's 404 and permission exceptions are left to Django, which turns them into
        their own statuses (and ``__call__`` then reshapes the body).
        """
        if not request.path.startswith(API_PREFIX):
            return None
        if isinstance(exception, Http404 | PermissionDenied | SuspiciousOperation):
            return None
        log.error(
            "unhandled error answering %s %s", request.method, request.path, exc_info=exception
        )
        return api_error(500)
