"""REST API of emission: sinks (any role reads, policy-admin writes), the outbox (read, and
a retry of failed rows for policy-admin) and the shadow-mode diffs (read).

A sink's secret is write-only: responses carry ``secret_set`` and ``secret_hint`` (a mask and
the last characters), never the value; an update without ``secret`` keeps the current one.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.filters import SearchFilter
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.serializers import JSONDocumentField, RecordSerializer
from controlplane.api.viewsets import RecordViewSet
from controlplane.core.api import ReadOnlyViewSet, StableOrderingFilter
from controlplane.core.filters import StrictFilterBackend, StrictFilterSet, StrictIntegerFilter
from controlplane.core.roles import POLICY_ADMIN, user_roles
from controlplane.core.serializers import StrictCharField
from controlplane.emission import services
from controlplane.emission.models import AllocationSink, DeliveryAttempt, OutboxEntry, ShadowDiff


class AllocationSinkSerializer(RecordSerializer):
    secret = StrictCharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=256,
        trim_whitespace=False,
        style={"input_type": "password"},
        help_text="Webhook HMAC key. Write-only; omit it on update to keep the current one.",
    )
    secret_set = serializers.SerializerMethodField()
    hosted_endpoints = JSONDocumentField(
        required=False,
        help_text=(
            "LiteLLM: per hosted provider, its LiteLLM provider prefix, api_base, api_key_env "
            "(the environment variable holding its key; keys are never stored) and models "
            "(Headroom model → the provider's model id)."
        ),
    )
    secret_hint = serializers.SerializerMethodField(
        help_text="A mask ending in the secret's last characters, for policy admins; empty for "
        "other roles and when no secret is set."
    )

    class Meta:
        model = AllocationSink
        fields = (
            "id",
            "kind",
            "name",
            "enabled",
            "url",
            "secret",
            "secret_set",
            "secret_hint",
            "directory",
            "timeout_s",
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
            "created_at",
            "updated_at",
        )
        read_only_fields = ("created_at", "updated_at")

    def get_secret_set(self, sink: AllocationSink) -> bool:
        return bool(sink.secret)

    def get_secret_hint(self, sink: AllocationSink) -> str:
        # Even a few characters of a key help whoever guesses it; only those who may write
        # the secret see which one is set.
        request = self.context.get("request")
        if request is None or POLICY_ADMIN not in user_roles(request.user):
            return ""
        return sink.secret_hint

    def validate_secret(self, value: str) -> str:
        if "\x00" in value:
            raise ValidationError("The secret may not contain NUL.")
        return value


class SinkFilter(StrictFilterSet):
    class Meta:
        model = AllocationSink
        fields = ("kind", "enabled")


class AllocationSinkViewSet(RecordViewSet):
    queryset = AllocationSink.objects.all()
    serializer_class = AllocationSinkSerializer
    filterset_class = SinkFilter
    search_fields = ("name", "url", "directory")
    ordering_fields = ("id", "name", "kind", "enabled")


class DeliveryAttemptSerializer(serializers.ModelSerializer[DeliveryAttempt]):
    class Meta:
        model = DeliveryAttempt
        fields = (
            "number",
            "dispatcher",
            "started_at",
            "finished_at",
            "outcome",
            "status_code",
            "error",
        )


class OutboxEntrySerializer(serializers.ModelSerializer[OutboxEntry]):
    plan_version = serializers.IntegerField(source="plan.version", read_only=True)
    sink_name = serializers.CharField(source="sink.name", read_only=True)

    class Meta:
        model = OutboxEntry
        fields: tuple[str, ...] = (
            "id",
            "plan",
            "plan_version",
            "sink",
            "sink_name",
            "region",
            "idempotency_key",
            "status",
            "attempts",
            "next_attempt_at",
            "last_attempt_at",
            "last_error",
            "delivered_at",
            "created_at",
            "updated_at",
            "payload",
        )
        read_only_fields = fields


class OutboxEntryDetailSerializer(OutboxEntrySerializer):
    attempt_log = DeliveryAttemptSerializer(many=True, read_only=True)

    class Meta(OutboxEntrySerializer.Meta):
        fields = (*OutboxEntrySerializer.Meta.fields, "attempt_log")
        read_only_fields = fields


class OutboxFilter(StrictFilterSet):
    plan_version = StrictIntegerFilter(field_name="plan__version")

    class Meta:
        model = OutboxEntry
        fields = ("status", "sink", "plan", "region")


class OutboxEntryViewSet(ReadOnlyViewSet):
    """Outbox rows, newest first; ``?status=failed`` lists what needs attention."""

    queryset = OutboxEntry.objects.select_related("plan", "sink")
    serializer_class = OutboxEntrySerializer
    filterset_class = OutboxFilter
    filter_backends = [StrictFilterBackend, StableOrderingFilter, SearchFilter]
    search_fields = ("idempotency_key", "region")
    ordering_fields = ("id", "created_at", "next_attempt_at", "status", "attempts")

    def get_queryset(self) -> QuerySet[OutboxEntry]:
        queryset: QuerySet[OutboxEntry] = super().get_queryset()
        if self.action == "retrieve":
            queryset = queryset.prefetch_related("attempt_log")
        return queryset

    def get_serializer_class(self) -> type[OutboxEntrySerializer]:
        if self.action in ("retrieve", "retry"):
            return OutboxEntryDetailSerializer
        return OutboxEntrySerializer

    @extend_schema(
        summary="Queue a failed delivery again",
        description="Only failed rows can be retried; others answer 400 and stay as they are.",
        request=None,
        responses=OutboxEntryDetailSerializer,
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str) -> Response:
        entry = self.get_object()
        if not services.outbox_entry_retry(entry=entry):
            raise ValidationError(
                {"status": [f"Only failed rows can be retried, not {entry.status} ones."]}
            )
        return Response(self.get_serializer(entry).data)


class ShadowRowSerializer(serializers.Serializer[Any]):
    zone = serializers.CharField()
    shape = serializers.CharField()
    accelerator = serializers.CharField()
    gpus_per_replica = serializers.IntegerField()
    delivered = serializers.IntegerField(help_text="Replicas a sink last acknowledged.")
    planned = serializers.IntegerField(help_text="Replicas the plan would run.")
    delivered_cost_per_hour = serializers.FloatField()
    planned_cost_per_hour = serializers.FloatField()


class ShadowDiffSerializer(serializers.ModelSerializer[ShadowDiff]):
    plan_version = serializers.IntegerField(source="plan.version", read_only=True)
    delivered_plan_version = serializers.IntegerField(
        source="delivered_plan.version", read_only=True, allow_null=True, default=None
    )
    rows = ShadowRowSerializer(many=True, read_only=True)
    changed = serializers.BooleanField(read_only=True)
    cost_change_per_hour = serializers.FloatField(read_only=True)

    class Meta:
        model = ShadowDiff
        fields = (
            "id",
            "plan",
            "plan_version",
            "region",
            "delivered_plan",
            "delivered_plan_version",
            "changed",
            "delivered_replicas",
            "planned_replicas",
            "delivered_gpus",
            "planned_gpus",
            "delivered_cost_per_hour",
            "planned_cost_per_hour",
            "cost_change_per_hour",
            "rows",
            "created_at",
        )
        read_only_fields = fields


class ShadowDiffFilter(StrictFilterSet):
    plan_version = StrictIntegerFilter(field_name="plan__version")

    class Meta:
        model = ShadowDiff
        fields = ("plan", "region")


class ShadowDiffViewSet(ReadOnlyViewSet):
    """What each activated plan would have changed in the regions in shadow mode, against
    what a sink last delivered there; newest first. Nothing was sent for these."""

    queryset = ShadowDiff.objects.select_related("plan", "delivered_plan")
    serializer_class = ShadowDiffSerializer
    filterset_class = ShadowDiffFilter
    filter_backends = [StrictFilterBackend, StableOrderingFilter]
    ordering_fields = ("id", "created_at", "region")
