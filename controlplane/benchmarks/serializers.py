"""The API's representation of benchmark runs, benchmark endpoints and capacity figure
freshness."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from rest_framework import serializers

from controlplane.api.serializers import REVISION_FIELDS, RevisionedSerializer
from controlplane.benchmarks import selectors
from controlplane.benchmarks.models import BenchmarkEndpoint, BenchmarkRun
from controlplane.benchmarks.selectors import Freshness
from controlplane.core.serializers import StrictCharField, StrictFieldsMixin
from controlplane.fleet.models import ReplicaShape


class BenchmarkRunSerializer(serializers.ModelSerializer[BenchmarkRun]):
    shape: serializers.SlugRelatedField[ReplicaShape] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    requested_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    duration_s = serializers.FloatField(read_only=True, allow_null=True)
    # What PrimaryKeyRelatedField(many=True, read_only=True) builds, spelled out for the type.
    figures = serializers.ManyRelatedField(
        child_relation=serializers.PrimaryKeyRelatedField(read_only=True), read_only=True
    )

    class Meta:
        model = BenchmarkRun
        fields = (
            "id",
            "kind",
            "shape",
            "status",
            "trigger",
            "reason",
            "device",
            "requested_by",
            "requested_at",
            "started_at",
            "finished_at",
            "duration_s",
            "task_id",
            "error",
            "workload_profile_version",
            "inputs",
            "hardware",
            "software",
            "figures",
            "results",
        )
        read_only_fields = fields


class BenchmarkRequestSerializer(StrictFieldsMixin, serializers.Serializer[Any]):
    """The body of ``POST /api/benchmarks/runs/``: the shape to measure, by name, and the
    kind of run (an endpoint load test needs the shape's enabled benchmark endpoint)."""

    shape = serializers.SlugRelatedField(slug_field="name", queryset=ReplicaShape.objects.all())
    kind = serializers.ChoiceField(
        choices=BenchmarkRun.Kind.choices, default=BenchmarkRun.Kind.ENGINE
    )
    reason = StrictCharField(max_length=500, required=False, allow_blank=True, default="")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        shape = attrs["shape"]
        if (
            attrs["kind"] == BenchmarkRun.Kind.ENDPOINT
            and selectors.enabled_endpoint(shape) is None
        ):
            raise serializers.ValidationError(
                {
                    "kind": [
                        f"Shape {shape.name} has no enabled benchmark endpoint to load-test: "
                        "register one at /api/benchmarks/endpoints/ first."
                    ]
                }
            )
        return attrs


class FreshnessSerializer(serializers.Serializer[Freshness]):
    """One shape: its freshest figure, how old, and why it would be measured again."""

    shape = serializers.CharField(source="shape.name")
    model = serializers.CharField(source="shape.model.name")
    figure = serializers.IntegerField(source="figure.pk", allow_null=True, default=None)
    figure_source = serializers.CharField(source="figure.source", allow_null=True, default=None)
    measured_at = serializers.DateTimeField(
        source="figure.measured_at", allow_null=True, default=None
    )
    age_days = serializers.FloatField(allow_null=True)
    is_fresh = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.CharField())
    active_run = serializers.IntegerField(source="active_run.pk", allow_null=True, default=None)
    last_run = serializers.IntegerField(source="last_run.pk", allow_null=True, default=None)
    last_run_status = serializers.CharField(source="last_run.status", allow_null=True, default=None)


class BenchmarkEndpointSerializer(RevisionedSerializer):
    """A shape's benchmark endpoint; the shape by name. Writes run the model's rules
    (``full_clean``); ``max_concurrency`` left out is taken from the shape's freshest figure."""

    shape = serializers.SlugRelatedField(slug_field="name", queryset=ReplicaShape.objects.all())

    class Meta:
        model = BenchmarkEndpoint
        fields = (
            "id",
            "shape",
            "base_url",
            "served_model_name",
            "api",
            "api_key_env",
            "timeout_s",
            "max_concurrency",
            "ignore_eos",
            "requests_per_point",
            "enabled",
            *REVISION_FIELDS,
        )
