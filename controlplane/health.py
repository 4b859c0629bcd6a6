"""Health endpoints for probes: ``/healthz`` (the process answers) and ``/readyz`` (it can
reach its database).

A kubelet probes a pod at its own IP address and sends that address as the Host header, which
``ALLOWED_HOSTS`` (the public host names) rightly refuses: every ordinary request from such a
Host gets 400. This middleware sits first in ``MIDDLEWARE``, before the security middleware's
HTTPS redirect and the common middleware's Host check, and answers GET and HEAD on these two
paths alone, and only when the Host is an IP address (a probe's) or an allowed host name. Every
other request goes on to Django's checks unchanged: ``ALLOWED_HOSTS`` stays what it was.

Liveness does no I/O, so a database outage makes pods unready, not restarted. While the
database is unreachable ``/readyz`` answers 503 with the ``Retry-After`` the API's 503s carry
(``controlplane.core.outage``). The broker is not a readiness dependency: reads go on without
it, and a request that needs to queue work answers 503 itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host

from controlplane.core.outage import log_outage, retry_after_s

LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"
PATHS = (LIVENESS_PATH, READINESS_PATH)


def _is_ip_literal(host: str) -> bool:
    """Whether ``host`` (a Host header without its port) is an IPv4 or IPv6 address."""
    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") else host)
    except ValueError:
        return False
    return True


def probe_host_allowed(raw_host: str) -> bool:
    """A probe's Host: an IP address (any port), or a host ``ALLOWED_HOSTS`` admits."""
    domain, _port = split_domain_port(raw_host)
    if not domain:
        return False
    if _is_ip_literal(domain):
        return True
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return validate_host(domain, allowed)


def database_ready() -> bool:
    """One round trip to the default database."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        log_outage(exc, "checking readiness")
        return False
    return True


class HealthCheckMiddleware:
    """Answers the two probe paths before any other middleware runs (see the module doc)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (
            request.path_info in PATHS
            and request.method in ("GET", "HEAD")
            and probe_host_allowed(request.META.get("HTTP_HOST", ""))
        ):
            if request.path_info == READINESS_PATH and not database_ready():
                response = _plain(503, "database unreachable\n")
                response["Retry-After"] = str(retry_after_s())
                return response
            return _plain(200, "ok\n")
        return self.get_response(request)


def _plain(status: int, text: str) -> HttpResponse:
    response = HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-store"
    return response
