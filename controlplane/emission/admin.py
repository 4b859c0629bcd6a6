"""Admin UI of emission: sinks (policy-admin edits; the secret is write-only) and the outbox
(read-only, with each row's attempt log and a "retry now" action for failed rows)."""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from simple_history.admin import SimpleHistoryAdmin

from controlplane.core.admin import ListActionsOnlyAdminMixin, ReadOnlyAdminMixin
from controlplane.emission import services
from controlplane.emission.models import AllocationSink, DeliveryAttempt, OutboxEntry


class AllocationSinkForm(forms.ModelForm[AllocationSink]):
    """The secret is never rendered back; leaving it empty keeps the current one."""

    url = forms.URLField(
        required=False,
        max_length=500,
        assume_scheme="https",
        help_text="Webhook: where allocations are POSTed.",
    )
    prometheus_url = forms.URLField(
        required=False,
        max_length=300,
        assume_scheme="https",
        help_text="Kubernetes with KEDA: the Prometheus the ScaledObjects query.",
    )
    secret = forms.CharField(
        required=False,
        strip=False,
        max_length=256,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Webhook HMAC key, at least 16 characters. Leave empty to keep the current one.",
    )
    clear_secret = forms.BooleanField(required=False, help_text="Remove the stored secret.")

    class Meta:
        model = AllocationSink
        fields = [
            "name",
            "kind",
            "enabled",
            "timeout_s",
            "url",
            "secret",
            "directory",
            "namespace",
            "container_image",
            "autoscaler",
            "prometheus_url",
            "gpu_node_label",
            "cpu_per_gpu",
            "memory_gib_per_gpu",
            "env_secret",
            "kubectl_apply",
            "kubectl_context",
            "endpoint_template",
            "hosted_endpoints",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and self.instance.secret:
            self.fields[
                "secret"
            ].help_text = f"Set ({self.instance.secret_hint}). Leave empty to keep it."

    def clean_secret(self) -> str:
        value: str = self.cleaned_data.get("secret") or ""
        if self.cleaned_data.get("clear_secret"):
            return ""
        # An empty field means "unchanged": the stored secret is put back before validation.
        return value or (self.instance.secret if self.instance.pk else "")

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if cleaned.get("clear_secret"):
            cleaned["secret"] = ""
            self.instance.secret = ""
        return cleaned


@admin.register(AllocationSink)
class AllocationSinkAdmin(SimpleHistoryAdmin):
    form = AllocationSinkForm
    list_display = [
        "name",
        "kind",
        "enabled",
        "destination",
        "secret_hint",
        "pending_count",
        "failed_count",
    ]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "url", "directory"]
    ordering = ["name"]
    readonly_fields = ["secret_hint", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "kind", "enabled", "timeout_s"]}),
        ("Webhook", {"fields": ["url", "secret", "clear_secret", "secret_hint"]}),
        ("Files, Kubernetes and LiteLLM", {"fields": ["directory"]}),
        (
            "Kubernetes",
            {
                "fields": [
                    "namespace",
                    "container_image",
                    "autoscaler",
                    "prometheus_url",
                    "gpu_node_label",
                    "cpu_per_gpu",
                    "memory_gib_per_gpu",
                    "env_secret",
                    "kubectl_apply",
                    "kubectl_context",
                ]
            },
        ),
        ("LiteLLM", {"fields": ["endpoint_template", "hosted_endpoints"]}),
        ("Record", {"fields": ["created_at", "updated_at"]}),
    ]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        # SimpleHistoryAdmin overrides the permission checks without annotations.
        if obj is None or self.has_change_permission(request, obj):  # type: ignore[no-untyped-call]
            return fieldsets
        # A view-only page renders every field's value as text: leave the secret out.
        hidden = {"secret", "clear_secret"}
        return [
            (title, {**options, "fields": [f for f in options["fields"] if f not in hidden]})
            for title, options in fieldsets
        ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[AllocationSink]:
        rows: QuerySet[AllocationSink] = super().get_queryset(request)
        return rows.annotate(
            _pending=Count(
                "outbox_entries",
                filter=Q(
                    outbox_entries__status__in=[
                        OutboxEntry.Status.PENDING,
                        OutboxEntry.Status.DELIVERING,
                    ]
                ),
            ),
            _failed=Count(
                "outbox_entries", filter=Q(outbox_entries__status=OutboxEntry.Status.FAILED)
            ),
        )

    @admin.display(description="destination")
    def destination(self, sink: AllocationSink) -> str:
        return sink.url if sink.kind == AllocationSink.Kind.WEBHOOK else sink.directory

    @admin.display(description="queued", ordering="_pending")
    def pending_count(self, sink: AllocationSink) -> int:
        return int(getattr(sink, "_pending", 0))

    @admin.display(description="failed", ordering="_failed")
    def failed_count(self, sink: AllocationSink) -> int:
        return int(getattr(sink, "_failed", 0))


class DeliveryAttemptInline(ReadOnlyAdminMixin, admin.TabularInline[DeliveryAttempt, OutboxEntry]):
    model = DeliveryAttempt
    fields: ClassVar[tuple[str, ...]] = (
        "number",
        "outcome",
        "status_code",
        "started_at",
        "finished_at",
        "dispatcher",
        "error",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["-number", "-pk"]


@admin.register(OutboxEntry)
class OutboxEntryAdmin(ListActionsOnlyAdminMixin, admin.ModelAdmin[OutboxEntry]):
    list_display = [
        "plan_version",
        "sink",
        "region",
        "status",
        "attempts",
        "next_attempt_at",
        "delivered_at",
        "short_error",
    ]
    list_filter = ["status", "sink"]
    search_fields = ["idempotency_key", "region"]
    list_select_related = ["plan", "sink"]
    date_hierarchy = "created_at"
    readonly_fields: ClassVar[tuple[str, ...]] = (
        "plan",
        "sink",
        "region",
        "idempotency_key",
        "status",
        "attempts",
        "next_attempt_at",
        "claimed_by",
        "claim_expires_at",
        "last_attempt_at",
        "last_error",
        "delivered_at",
        "created_at",
        "updated_at",
        "payload",
    )
    fields = readonly_fields
    inlines = [DeliveryAttemptInline]
    actions = ["retry_now"]

    @admin.display(description="plan", ordering="plan__version")
    def plan_version(self, entry: OutboxEntry) -> str:
        return f"v{entry.plan.version}"

    @admin.display(description="last error")
    def short_error(self, entry: OutboxEntry) -> str:
        return entry.last_error[:80]

    @admin.action(description="Retry the selected failed deliveries now", permissions=["change"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet[OutboxEntry]) -> None:
        retried = sum(services.outbox_entry_retry(entry=entry) for entry in queryset)
        skipped = queryset.count() - retried
        self.message_user(request, f"{retried} queued again.", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"{skipped} skipped: only failed rows can be retried.", messages.WARNING
            )
