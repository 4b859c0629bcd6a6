"""The error contract's codes by HTTP status: one vocabulary for every layer that answers.

DRF's exceptions, the API error middleware (``controlplane.core.errors``) and the web server's
own protocol errors (``controlplane.serving``) all name a status with these codes. This module
imports no Django: gunicorn's master reads it before Django is set up.
"""

from __future__ import annotations

# The codes DRF's own exceptions use for the same statuses, so a client sees one vocabulary.
CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "request_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    417: "expectation_failed",
    429: "throttled",
    431: "headers_too_large",
    500: "server_error",
    501: "not_implemented",
    502: "bad_gateway",
    503: "unavailable",
}


def error_code(status: int) -> str:
    """The code of ``status``; ``error`` for a status the contract does not name."""
    return CODES.get(status, "error")
