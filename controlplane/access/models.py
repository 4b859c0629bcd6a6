"""Tenant keys: API credentials bound to exactly one tenant.

A key reads ``hr_<8 hex>_<secret>``: the first part (``prefix``, e.g. ``hr_ab12cd34``) is its
public name, shown in lists and logs; the whole key is shown once, when it is made, and only
its SHA-256 is stored (``secret_hash``).

Why a fast hash and not a password hash: a password hash (PBKDF2, Argon2) is slow on purpose,
because passwords are few and guessable. A key's secret is 256 random bits
(``secrets.token_urlsafe(32)``): nobody can guess it or try its space, fast hash or slow, so
SHA-256 protects a leaked table just as well, and checking a request costs microseconds
instead of the tens of milliseconds a slow hash would add to every API call. The stored hash
is compared in constant time (``django.utils.crypto.constant_time_compare``), and found by the
prefix, never by the hash itself.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from simple_history.models import HistoricalRecords

from controlplane.policies.models import Tenant

PREFIX_HEAD = "hr_"
PREFIX_LENGTH = len(PREFIX_HEAD) + 8


class TenantKey(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active", "active"
        EXPIRED = "expired", "expired"
        REVOKED = "revoked", "revoked"

    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        related_name="keys",
        help_text="The one tenant this key reads and changes.",
    )
    name = models.CharField(max_length=100, help_text="What the key is for, e.g. 'ci-deploys'.")
    prefix = models.CharField(
        max_length=PREFIX_LENGTH,
        unique=True,
        editable=False,
        help_text="The key's public part: names it in lists and logs.",
    )
    secret_hash = models.CharField(
        max_length=64, editable=False, help_text="SHA-256 of the whole key (hex)."
    )
    read_only = models.BooleanField(
        default=False, help_text="The key reads only: every write it sends is refused (403)."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="After this moment the key is refused (empty: never)."
    )
    last_used_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="Last request (to the minute)."
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )

    # The hash stays out of the audit trail, and so does each use (not a change).
    history = HistoricalRecords(excluded_fields=["secret_hash", "last_used_at"])

    class Meta:
        ordering = ["tenant__name", "name", "id"]
        verbose_name = "tenant key"

    def __str__(self) -> str:
        return f"{self.prefix} ({self.name})"

    def clean(self) -> None:
        super().clean()
        if self.pk is None and self.expires_at is not None and self.expires_at <= timezone.now():
            raise ValidationError({"expires_at": "Give a moment in the future."})

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return self.State.REVOKED
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return self.State.EXPIRED
        return self.State.ACTIVE
