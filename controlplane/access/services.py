"""Making, revoking and checking tenant keys (the format and its hash: ``models``)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from controlplane.access import selectors
from controlplane.access.models import PREFIX_HEAD, PREFIX_LENGTH, TenantKey
from controlplane.policies.models import Tenant

# The secret part: 32 random bytes, URL-safe base64 (43 characters).
SECRET_BYTES = 32
KEY_LENGTH = PREFIX_LENGTH + 1 + 43
# Each use is recorded to the minute: at most one write per key a minute, however busy.
LAST_USED_RESOLUTION = timedelta(minutes=1)
# A fresh prefix collides with a stored one about once in 4 billion per key stored; a few
# tries make a failure practically impossible.
PREFIX_TRIES = 5


@dataclass(frozen=True)
class IssuedKey:
    """A new key's record and the whole key, which exists nowhere else: show it once."""

    record: TenantKey
    key: str


class TenantKeyRefused(Exception):
    """A presented key that authenticates nobody; the message says why (for the 401)."""


def key_hash(key: str) -> str:
    """SHA-256 (hex) of a whole key: what is stored and compared (``models`` says why)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _acting(user: AbstractBaseUser | AnonymousUser | None) -> User | None:
    return user if isinstance(user, User) else None


def tenant_key_create(
    *,
    tenant: Tenant,
    name: str,
    created_by: AbstractBaseUser | AnonymousUser | None,
    expires_at: datetime | None = None,
    read_only: bool = False,
) -> IssuedKey:
    """A new key for ``tenant``; the returned ``key`` is the only copy of it.

    Refuses (``ValidationError``) an empty name or an expiry in the past."""
    user = _acting(created_by)
    for attempt in range(PREFIX_TRIES):
        prefix = PREFIX_HEAD + secrets.token_hex(4)
        key = f"{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
        record = TenantKey(
            tenant=tenant,
            name=name,
            prefix=prefix,
            secret_hash=key_hash(key),
            read_only=read_only,
            created_by=user,
            expires_at=expires_at,
        )
        # Validates the name, the expiry and (on a stored prefix) uniqueness, before saving.
        record.full_clean(exclude=["prefix"])
        # simple_history's per-instance input, unknown to the model's type: outside a request
        # (the command) the creator is still recorded.
        record._history_user = user  # type: ignore[attr-defined]
        try:
            with transaction.atomic():
                record.save()
        except IntegrityError:
            if attempt == PREFIX_TRIES - 1:
                raise
            continue
        return IssuedKey(record=record, key=key)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def tenant_key_revoke(
    *, key: TenantKey, user: AbstractBaseUser | AnonymousUser | None
) -> TenantKey:
    """Revoke ``key``: from now on it is refused (401). Revoking twice changes nothing."""
    with transaction.atomic():
        locked = TenantKey.objects.select_for_update().get(pk=key.pk)
        if locked.revoked_at is not None:
            return locked
        locked.revoked_at = timezone.now()
        locked.revoked_by = _acting(user)
        locked._history_user = locked.revoked_by  # type: ignore[attr-defined]
        locked.save()
    return locked


def tenant_key_authenticate(*, key: str, now: datetime | None = None) -> TenantKey:
    """The active key ``key`` is, its use recorded; ``TenantKeyRefused`` otherwise.

    The record is found by the key's public prefix and its hash compared in constant time;
    only a key whose secret matches learns that it is revoked or expired."""
    moment = now or timezone.now()
    if len(key) != KEY_LENGTH or not key.startswith(PREFIX_HEAD) or key[PREFIX_LENGTH] != "_":
        raise TenantKeyRefused("Malformed tenant key.")
    record = selectors.tenant_key_by_prefix(prefix=key[:PREFIX_LENGTH])
    if record is None or not constant_time_compare(record.secret_hash, key_hash(key)):
        raise TenantKeyRefused("Unknown tenant key.")
    if record.revoked_at is not None:
        raise TenantKeyRefused("This tenant key is revoked.")
    if record.expires_at is not None and record.expires_at <= moment:
        raise TenantKeyRefused("This tenant key has expired.")
    due = moment - LAST_USED_RESOLUTION
    if record.last_used_at is None or record.last_used_at <= due:
        # Conditional: of concurrent requests in the same minute, one writes.
        TenantKey.objects.filter(pk=record.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=due)
        ).update(last_used_at=moment)
    return record
