"""Who is asking: the real client address behind trusted proxies, and login lockouts.

Every place that keys a limit on the client (login lockouts on the admin, the API's session
login and the token endpoint; DRF throttles) asks ``client_address``. ``X-Forwarded-For`` is
read only when the connection comes from a trusted proxy (``HEADROOM_TRUSTED_PROXIES``,
addresses or networks): a client that talks to Headroom directly cannot choose its own address
by sending the header.

Login limits, on every login path (``LoginLimitBackend``, first of the authentication
backends):

1. The lockout (django-axes), keyed on the username *and* the address together: after
   ``AXES_FAILURE_LIMIT`` failures for one username from one address, that pair is refused
   for ``AXES_COOLOFF_TIME``. A guesser locks out only itself: the same user from any other
   address still logs in.
2. A slower per-username rate (``login_limit_refusal``) against guessing one username from
   many addresses: once a username has had ``HEADROOM_LOGIN_USERNAME_FAILURES`` failures
   within ``HEADROOM_LOGIN_RATE_WINDOW`` (from any addresses), an address that has itself
   failed for that username within the window is refused until its latest failure is a
   window old. An address without such a failure is let through, so the right password from
   a fresh address still logs in, and each guessing address gets one guess a window.
3. A per-address rate against spraying one password over many usernames: an address with
   ``HEADROOM_LOGIN_ADDRESS_FAILURES`` failures within the window (any usernames) is refused
   until the window holds fewer. Only the address that failed is refused.

Failures are counted from django-axes' failure log (``AccessFailureLog``), which records every
failed attempt, refused ones included: a refused address that keeps trying stays refused.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from axes.helpers import get_client_username, get_credentials
from axes.models import AccessFailureLog
from django.conf import settings
from django.db.models import Max
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

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


# Set on a request the login limits refused: (seconds to wait, why).
_REFUSAL_ATTR = "headroom_login_refusal"


def _seconds_until(moment: datetime, now: datetime) -> int:
    return max(1, math.ceil((moment - now).total_seconds()))


def login_limit_refusal(username: str | None, address: str) -> tuple[int, str] | None:
    """The per-username and per-address rates (the module docstring): ``(seconds to wait,
    why)`` when this attempt is refused, else None."""
    window = settings.HEADROOM_LOGIN_RATE_WINDOW
    now = timezone.now()
    since = now - window
    recent = AccessFailureLog.objects.filter(attempt_time__gt=since)
    if address:
        from_here = recent.filter(ip_address=address)
        limit = settings.HEADROOM_LOGIN_ADDRESS_FAILURES
        count = from_here.count()
        if count >= limit:
            # Refused until enough of them are a window old that fewer than the limit remain.
            times = from_here.order_by("attempt_time").values_list("attempt_time", flat=True)
            leaving = times[count - limit]
            return (
                _seconds_until(leaving + window, now),
                "Too many failed logins from this address",
            )
    if username and address:
        for_user = recent.filter(username=username)
        if for_user.count() >= settings.HEADROOM_LOGIN_USERNAME_FAILURES:
            latest = for_user.filter(ip_address=address).aggregate(last=Max("attempt_time"))
            if latest["last"] is not None:
                return (
                    _seconds_until(latest["last"] + window, now),
                    "Too many failed logins for this user, from this address among others",
                )
    return None


class LoginLimitBackend(AxesStandaloneBackend):
    """django-axes' lockout check, then the per-username and per-address rates.

    Like django-axes' own backend it logs nobody in: it refuses (``PermissionDenied``, which
    ends ``authenticate`` as a failed login) or lets the next backend check the password.
    """

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().authenticate(request, username=username, password=password, **kwargs)
        if request is None or not getattr(settings, "AXES_ENABLED", True):
            return None
        credentials = get_credentials(username=username, **kwargs)
        address = getattr(request, "axes_ip_address", None) or client_address(request)
        refusal = login_limit_refusal(get_client_username(request, credentials), address)
        if refusal is None:
            return None
        setattr(request, _REFUSAL_ATTR, refusal)
        # The lockout middleware answers a request so marked with ``lockout_response``.
        request.axes_locked_out = True  # type: ignore[attr-defined]
        raise AxesBackendPermissionDenied(refusal[1])


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any
) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: 429 with ``Retry-After``; the API's error shape under /api/."""
    refusal: tuple[int, str] | None = getattr(request, _REFUSAL_ATTR, None)
    if refusal is not None:
        retry_after: int | None = refusal[0]
        message = (
            f"{refusal[1]}: try again in {retry_after} seconds, or ask an administrator to "
            "reset the login limits."
        )
    else:
        cool_off = settings.AXES_COOLOFF_TIME
        retry_after = max(1, math.ceil(cool_off.total_seconds())) if cool_off else None
        message = (
            f"Too many failed logins for this user from this address: try again in "
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
