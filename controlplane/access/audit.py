"""Changes made with a tenant key name the key on their history rows.

A key is no user, so the history row's user is empty (``core.api.TenantScopeMixin`` hides
the key from simple_history's user lookup); its change reason says ``tenant key <prefix>``.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver
from simple_history.models import HistoricalRecords
from simple_history.signals import pre_create_historical_record


@receiver(pre_create_historical_record, dispatch_uid="access-tenant-key-history")
def stamp_tenant_key(sender: Any, history_instance: Any, **kwargs: Any) -> None:
    request = getattr(HistoricalRecords.context, "request", None)
    prefix = getattr(request, "headroom_tenant_key", None)
    if prefix and not history_instance.history_change_reason:
        history_instance.history_change_reason = f"tenant key {prefix}"
