"""Who is asking: the real client address behind trusted proxies, and login lockouts.

Every place that keys a limit on the client (login lockouts on the admin, the API's session
login and the token endpoint; DRF throttles) asks ``client_address``. ``X-Forwarded-For`` is
read only when the connection comes from a trusted proxy (``HEADROOM_TRUSTED_PROXIES``,
addresses or networks): a client that talks to Headroom directly cannot choose its own address
by sending the header.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _address(raw: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    value = raw.strip()
    if value.startswith("[") and "]" in value:  # "[::1]:443"
        value = value[1 : value.index("]")]
    elif value.count(":") == 1:  # "203.0.113.9:51234"
        value = value.split(":", 1)[0]
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def _trusted(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, proxies: Sequence[Network]
) -> bool:
    return any(address in network for network in proxies)


def client_address(request: HttpRequest, proxies: Sequence[Network] | None = None) -> str:
    """The address of the client that sent ``request``.

    The peer address (``REMOTE_ADDR``) unless the peer is a trusted proxy; then the
    ``X-Forwarded-For`` chain is read from the right (each proxy appends the address it heard
    from), skipping trusted proxies, and the first address that is not one is the client. A
    chain that holds nothing readable leaves the peer address.
    """
    trusted = settings.HEADROOM_TRUSTED_PROXIES if proxies is None else proxies
    peer = str(request.META.get("REMOTE_ADDR", "") or "")
    peer_address = _address(peer)
    if peer_address is None or not _trusted(peer_address, trusted):
        return peer
    forwarded = str(request.META.get("HTTP_X_FORWARDED_FOR", "") or "")
    for hop in reversed(forwarded.split(",")):
        address = _address(hop)
        if address is None:
            # A hop no proxy of ours would write: everything left of it is the client's word.
            break
        if not _trusted(address, trusted):
            return str(address)
    return peer


def client_address_for_axes(request: HttpRequest) -> str:
    """``AXES_CLIENT_IP_CALLABLE``: django-axes keys its lockouts on the same address."""
    return client_address(request)


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any
) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: 429 with ``Retry-After``; the API's error shape under /api/."""
    cool_off = settings.AXES_COOLOFF_TIME
    retry_after = max(1, math.ceil(cool_off.total_seconds())) if cool_off else None
    message = (
        f"Too many failed logins from this address or for this user: try again in "
        f"{retry_after} seconds, or ask an administrator to reset the lockout."
        if retry_after
        else "Too many failed logins: ask an administrator to reset the lockout."
    )
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"error": {"code": "locked_out", "message": message}}, status=429)
    else:
        response = HttpResponse(message, status=429, content_type="text/plain; charset=utf-8")
    if retry_after:
        response["Retry-After"] = str(retry_after)
    return response
