"""Typed environment helpers that fail loudly.

A value that is present but malformed is an error at start-up, never a silent default.
"""

from __future__ import annotations

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


def envint(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


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
    if raw and not required:
        return raw
    if required:
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
    return dev_default
