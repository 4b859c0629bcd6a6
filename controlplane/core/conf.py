"""The one settings reader: every ``HEADROOM_*`` value and every environment-driven setting.

Two entry points share one set of parsing rules:

- ``env_*`` read the process environment; ``controlplane/settings.py`` builds the Django
  settings with them.
- ``setting_*`` read a value at call time: the Django setting of that name when the settings
  module defines it (tests override them with pytest-django's ``settings``), else the
  environment variable of that name, else the default. Each app's ``conf.py`` builds its typed
  settings from these.

The rules, the same everywhere: an absent or blank value is the default (a blank boolean is
false); a value that is
present but malformed is ``ImproperlyConfigured`` at once, never a silent default. Numbers
must be finite (``nan`` and ``inf`` are refused) and never booleans; whole numbers must be
whole; bounds are checked and named in the message.
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
# An empty boolean is false (``DEBUG=`` turns debugging off), the one place a blank value is
# not the default.
_FALSE = {"0", "false", "no", "off", ""}


# -- parsing ------------------------------------------------------------------------------------


def parse_bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def parse_number(
    name: str,
    raw: Any,
    *,
    integral: bool = False,
    minimum: float | None = None,
    positive: bool = False,
    maximum: float | None = None,
) -> float:
    """A finite number from a string or a number; ``integral`` asks for a whole one."""
    if isinstance(raw, bool):
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}")
    value: float
    if isinstance(raw, int | float):
        value = raw
    else:
        text = str(raw).strip()
        try:
            value = int(text) if integral else float(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError as exc:
                kind = "a whole number" if integral else "a number"
                raise ImproperlyConfigured(f"{name} must be {kind}, got {raw!r}") from exc
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {raw!r}")
    if integral:
        if not float(value).is_integer():
            raise ImproperlyConfigured(f"{name} must be a whole number, got {raw!r}")
        value = int(value)
    if positive and not value > 0:
        raise ImproperlyConfigured(f"{name} must be positive, got {raw!r}")
    if minimum is not None and not value >= minimum:
        bound = "zero or more" if minimum == 0 else f"at least {minimum:g}"
        raise ImproperlyConfigured(f"{name} must be {bound}, got {raw!r}")
    if maximum is not None and not value <= maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum:g}, got {raw!r}")
    return value


def parse_choice(name: str, raw: Any, choices: Iterable[str]) -> str:
    allowed = tuple(choices)
    value = str(raw).strip().lower()
    if value not in allowed:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
    return value


def parse_list(raw: Any) -> list[str]:
    if isinstance(raw, list | tuple):
        return [str(item).strip() for item in raw if str(item).strip()]
    return [item.strip() for item in str(raw).split(",") if item.strip()]


# -- the environment (for settings.py) -----------------------------------------------------------


def env_raw(name: str) -> str | None:
    """The environment variable, or None when it is absent or blank."""
    raw = os.environ.get(name)
    return None if raw is None or raw.strip() == "" else raw


def envstr(name: str, default: str) -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    return default if raw is None else parse_bool(name, raw)


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = env_raw(name)
    if raw is None:
        return default
    return int(parse_number(name, raw, integral=True, minimum=minimum))


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    return default if raw is None else parse_list(raw)


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


# Words that mark a value copied from an example rather than generated.
_PLACEHOLDER_WORDS = ("replace", "change-me", "changeme", "example", "placeholder", "insecure")
MIN_SECRET_LENGTH = 50


def envsecret(name: str, *, required: bool, dev_default: str) -> str:
    """A secret: required in production, a fixed development value otherwise.

    In production (``required``) a value that is short, is the development value, or reads
    like a placeholder (``replace-me``, ``changeme`` …) is refused: a deployment must not run
    on a key anyone can read in the repository.
    """
    raw = os.environ.get(name, "")
    if not required:
        return raw or dev_default
    if not raw:
        raise ImproperlyConfigured(f"{name} must be set when DEBUG is off")
    lowered = raw.lower()
    if (
        raw == dev_default
        or len(raw) < MIN_SECRET_LENGTH
        or any(word in lowered for word in _PLACEHOLDER_WORDS)
    ):
        raise ImproperlyConfigured(
            f"{name} looks like a placeholder (it must be at least {MIN_SECRET_LENGTH} "
            "random characters): generate one with "
            "python3 -c 'import secrets; print(secrets.token_urlsafe(60))'"
        )
    return raw


# -- settings read at call time ------------------------------------------------------------------


def setting_raw(name: str) -> Any:
    """The Django setting if defined, else the environment variable; None when absent."""
    if hasattr(settings, name):
        value: Any = getattr(settings, name)
        if isinstance(value, str) and value.strip() == "":
            return None
        return value
    return env_raw(name)


def setting_text(name: str, default: str) -> str:
    raw = setting_raw(name)
    return default if raw is None else str(raw).strip()


def setting_bool(name: str, default: bool) -> bool:
    raw = getattr(settings, name) if hasattr(settings, name) else os.environ.get(name)
    return default if raw is None else parse_bool(name, raw)


def setting_number(
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    positive: bool = False,
    maximum: float | None = None,
) -> float:
    raw = setting_raw(name)
    if raw is None:
        return float(default)
    return float(parse_number(name, raw, minimum=minimum, positive=positive, maximum=maximum))


def setting_int(
    name: str,
    default: int,
    *,
    minimum: float | None = None,
    positive: bool = False,
    maximum: float | None = None,
) -> int:
    raw = setting_raw(name)
    if raw is None:
        return default
    return int(
        parse_number(name, raw, integral=True, minimum=minimum, positive=positive, maximum=maximum)
    )


def setting_choice(name: str, default: str, choices: Iterable[str]) -> str:
    raw = setting_raw(name)
    return parse_choice(name, default if raw is None else raw, choices)


def setting_parsed(name: str, parse: Callable[[str], T], default: T) -> T:
    """A structured value: a string is parsed with ``parse``; a Django setting that already
    holds the structure is returned as it is."""
    raw = setting_raw(name)
    if raw is None:
        return default
    if isinstance(raw, str):
        return parse(raw)
    # Taken as the structure ``parse`` would have built.
    structured: T = raw
    return structured
