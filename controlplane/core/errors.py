"""One error shape for everything under /api/, whatever produced the error.

DRF's exception handler (``controlplane.api.errors``) shapes the errors its views raise. What
happens outside a DRF view — a path no route matches, a Host the site refuses, an exception a
view does not handle, a response a plain Django view writes — would otherwise reach an API
client as an HTML page. This middleware, near the top of the stack, gives those the same
``{"error": {"code": ..., "message": ...}}`` body, with the status and headers kept.

A dependency down (``controlplane.core.outage``: the database or the broker unreachable) is 503
``unavailable`` with ``Retry-After``, whether a view or another middleware met it: an
exception raised outside any view reaches this middleware only as Django's 500 page, so the
``got_request_exception`` signal notes the outage on the request first.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.core.signals import got_request_exception
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from controlplane.core.error_codes import error_code
from controlplane.core.outage import (
    dependency_down,
    dependency_message,
    log_outage,
    retry_after_s,
)

log = logging.getLogger(__name__)

API_PREFIX = "/api/"

_MESSAGES = {
    400: "The request was refused (a malformed request or a Host this site does not serve).",
    404: "No such resource. The API's root, /api/, lists what there is.",
    500: "The server failed to answer this request; the failure is logged. Try again later.",
}
# Headers of the original response worth keeping on the replacement.
_KEPT_HEADERS = ("Retry-After", "Allow", "WWW-Authenticate", "Vary")
# Set on a request when an exception raised while answering it named a dependency down.
_OUTAGE_ATTR = "_headroom_outage"


def _is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").split(";", 1)[0].strip().endswith("json")


def api_error(status: int, message: str | None = None) -> JsonResponse:
    """The error contract's body for ``status``, with a message a person can act on."""
    code = error_code(status)
    text = message or _MESSAGES.get(status) or HTTPStatus(status).phrase
    return JsonResponse({"error": {"code": code, "message": text}}, status=status)


def unavailable(message: str) -> JsonResponse:
    """503 ``unavailable`` with ``Retry-After``: a dependency is down."""
    response = api_error(503, message)
    response["Retry-After"] = str(retry_after_s())
    return response


def _note_outage(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """Django is about to answer an unhandled exception with 500: remember a dependency
    outage on the request, so that ``ApiErrorMiddleware`` answers 503 instead."""
    # The signal is sent while the exception is being handled; it does not pass it along.
    exc = sys.exc_info()[1]
    if request is None or exc is None or dependency_down(exc) is None:
        return
    setattr(request, _OUTAGE_ATTR, exc)


got_request_exception.connect(_note_outage, dispatch_uid="headroom-api-outage")


class ApiErrorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        outage = getattr(request, _OUTAGE_ATTR, None)
        if outage is not None and request.path.startswith(API_PREFIX):
            log_outage(outage, f"answering {request.method} {request.path}")
            return unavailable(dependency_message(outage))
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
        if dependency_down(exception) is not None:
            log_outage(exception, f"answering {request.method} {request.path}")
            return unavailable(dependency_message(exception))
        log.error(
            "unhandled error answering %s %s", request.method, request.path, exc_info=exception
        )
        return api_error(500)
