"""Tenant keys in the admin (policy-admins): make one (its key is shown once, in the message
after saving), list them, revoke them (an action; a key is never deleted, for its audit trail).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from simple_history.admin import SimpleHistoryAdmin

from controlplane.access import services
from controlplane.access.models import TenantKey
from controlplane.core.roles import POLICY_ADMIN, user_roles


def _is_policy_admin(request: HttpRequest) -> bool:
    return POLICY_ADMIN in user_roles(request.user)


@admin.register(TenantKey)
class TenantKeyAdmin(SimpleHistoryAdmin):
    list_display = (
        "prefix",
        "name",
        "tenant",
        "state",
        "read_only",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("tenant", "read_only")
    search_fields = ("prefix", "name", "tenant__name")
    list_select_related = ("tenant",)
    actions = ("revoke",)
    readonly_fields = (
        "prefix",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["tenant", "name", "expires_at", "read_only"]
        return ["tenant", "name", "prefix", "read_only", "expires_at", *self.readonly_fields[1:]]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # A stored key changes only by revoking: what it may do is fixed when it is made.
        if obj is not None:
            return ("tenant", "name", "read_only", "expires_at", *self.readonly_fields)
        return ()

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _is_policy_admin(request) and super().has_view_permission(request, obj)  # type: ignore[no-untyped-call]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return _is_policy_admin(request) and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _is_policy_admin(request) and super().has_change_permission(request, obj)  # type: ignore[no-untyped-call]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(
        self, request: HttpRequest, obj: TenantKey, form: ModelForm[Any], change: bool
    ) -> None:
        if change:
            return  # nothing of a stored key is editable here
        issued = services.tenant_key_create(
            tenant=obj.tenant,
            name=obj.name,
            created_by=request.user,
            expires_at=obj.expires_at,
            read_only=obj.read_only,
        )
        # The admin goes on to log the addition and link the saved object: it is this one.
        obj.pk = issued.record.pk
        obj.prefix = issued.record.prefix
        messages.warning(
            request,
            f"The key {issued.record.prefix} is: {issued.key}   Copy it now: it is shown "
            "only this once and cannot be recovered (revoke the key if it is lost).",
        )

    @admin.action(description="Revoke the selected keys", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[TenantKey]) -> None:
        for key in queryset:
            services.tenant_key_revoke(key=key, user=request.user)
        self.message_user(request, f"Revoked {queryset.count()} key(s).", messages.SUCCESS)
