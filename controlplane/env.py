"""Typed environment helpers that fail loudly.

A value that is present but malformed is an error at start-up, never a silent default.
"""

from __future__ import annotations

import ipaddress
import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str) -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {raw!r}")
    return value


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def envnetworks(
    name: str, default: list[str]
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Comma-separated IP addresses or CIDR networks (an address is a one-address network)."""
    networks = []
    for entry in envlist(name, default):
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"{name} must list IP addresses or networks, got {entry!r}"
            ) from exc
    return tuple(networks)


def envsecret(name: str, *, required: bool, dev_default: str) -> str:
    """A secret: required in production, a fixed development value otherwise."""
    raw = os.environ.get(name, "")
    if raw:
        return raw
    if required:
        raise ImproperlyConfigured(f"{name} must be set when DEBUG is off")
    return dev_default
