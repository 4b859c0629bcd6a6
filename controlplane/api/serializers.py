"""Serializers: the API's representation of fleet and policy records.

They parse and render only. Every write goes through ``services`` (``record_save``,
``tenant_save``), which run the model's ``full_clean()``, so the API applies the same rules as
the admin. Derived figures (KV pool, context tokens, weight bytes) come from the models, which
take them from ``planner.capacity.memory``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.models import Model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api.services import record_save
from controlplane.core.serializers import StrictModelSerializer, StrictPrimaryKeyRelatedField
from controlplane.fleet.models import (
    AcceleratorType,
    CapacityFigure,
    Geography,
    HostedProvider,
    LlmModel,
    Region,
    RegionLink,
    ReplicaShape,
    WorkloadClass,
    Zone,
    ZoneInventory,
)
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile
from controlplane.policies.services import tenant_save
from planner.errors import PlannerInputError

# Provenance documents describe a benchmark run; deeper nesting than this is a mistake, and
# unbounded nesting would exhaust the recursion limit when the document is stored.
MAX_JSON_DEPTH = 16


def _finite_or_none(compute: Callable[[], float]) -> float | None:
    """A derived figure, or ``None`` when the stored inputs make it meaningless.

    Field validators bound each input from one side only, so extreme but finite inputs can
    overflow a product to infinity; JSON cannot carry that, and ``None`` says "not defined".
    """
    try:
        value = float(compute())
    except (ArithmeticError, PlannerInputError, ValueError):
        return None
    return value if math.isfinite(value) else None


class JSONDocumentField(serializers.JSONField):
    """A JSON document that every database can store: bounded depth, no NUL characters."""

    default_error_messages = {
        "too_deep": f"Nest at most {MAX_JSON_DEPTH} levels.",
        "nul": "Text may not contain NUL (\\u0000) characters.",
    }

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        self._check(value, depth=1)
        return value

    def _check(self, value: Any, *, depth: int) -> None:
        if isinstance(value, str):
            if "\x00" in value:
                self.fail("nul")
            return
        if not isinstance(value, dict | list):
            return
        if depth > MAX_JSON_DEPTH:
            self.fail("too_deep")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and "\x00" in key:
                self.fail("nul")
            self._check(item, depth=depth + 1)


class RecordSerializer(StrictModelSerializer):
    """Writes through ``record_save`` so the model's ``full_clean()`` rules apply; unknown
    fields, booleans as numbers and fractional ids are refused (``core.serializers``).
    A many-to-many field is set after the row is saved, in the same transaction.
    """

    def create(self, validated_data: dict[str, Any]) -> Any:
        model: type[Model] = self.Meta.model
        related = self._many_to_many(validated_data)
        with transaction.atomic():
            record = record_save(record=model(**validated_data))
            for name, values in related.items():
                getattr(record, name).set(values)
        return record

    def update(self, instance: Any, validated_data: dict[str, Any]) -> Any:
        related = self._many_to_many(validated_data)
        for name, value in validated_data.items():
            setattr(instance, name, value)
        with transaction.atomic():
            record = record_save(record=instance)
            for name, values in related.items():
                getattr(record, name).set(values)
        return record

    def _many_to_many(self, validated_data: dict[str, Any]) -> dict[str, Any]:
        """Pop the many-to-many fields out of ``validated_data`` (a model takes them only once
        it has a primary key)."""
        model: type[Model] = self.Meta.model
        names = {f.name for f in model._meta.many_to_many}
        return {name: validated_data.pop(name) for name in list(validated_data) if name in names}


class RevisionedSerializer(RecordSerializer):
    """Adds ``revision`` and ``etag`` (read-only): send ``etag`` back as ``If-Match``."""

    etag = serializers.CharField(read_only=True, help_text="Send as If-Match to update.")


REVISION_FIELDS = ("revision", "etag")


class GeographySerializer(RecordSerializer):
    class Meta:
        model = Geography
        fields = ("id", "name", "description")


class RegionSerializer(RecordSerializer):
    class Meta:
        model = Region
        fields = ("id", "name", "geography", "price_multiplier", "actuation")


class ZoneSerializer(RecordSerializer):
    class Meta:
        model = Zone
        fields = ("id", "name", "region", "state")


class HostedProviderSerializer(RecordSerializer):
    """A hosted API for overflow; ``served_models`` are model ids (at least one)."""

    served_models = StrictPrimaryKeyRelatedField(
        many=True, queryset=LlmModel.objects.all(), allow_empty=False
    )

    class Meta:
        model = HostedProvider
        fields = (
            "id",
            "name",
            "region",
            "served_models",
            "input_price_per_mtok",
            "output_price_per_mtok",
            "tpm_limit",
            "rpm_limit",
            "p95_ttft_s",
            "enabled",
        )


class RegionLinkSerializer(RecordSerializer):
    class Meta:
        model = RegionLink
        fields = ("id", "region_a", "region_b", "rtt_ms")


class AcceleratorTypeSerializer(RecordSerializer):
    class Meta:
        model = AcceleratorType
        fields = (
            "id",
            "name",
            "memory_gb",
            "peak_bf16_tflops",
            "memory_tbps",
            "on_demand_price_per_gpu_hour",
            "reserved_price_per_gpu_hour",
            "spot_price_per_gpu_hour",
            "gpu_product",
        )


class ZoneInventorySerializer(RecordSerializer):
    class Meta:
        model = ZoneInventory
        fields = ("id", "zone", "accelerator", "gpus_available")


class LlmModelSerializer(RecordSerializer):
    weight_bytes = serializers.SerializerMethodField(help_text="Weights in memory, bytes.")
    kv_bytes_per_token = serializers.SerializerMethodField(
        help_text="KV cache per token of context, bytes."
    )

    class Meta:
        model = LlmModel
        fields = (
            "id",
            "name",
            "parameters_billions",
            "bytes_per_parameter",
            "layers",
            "kv_heads",
            "head_dim",
            "kv_bytes_per_element",
            "hidden_size",
            "intermediate_size",
            "attention_heads",
            "vocab_size",
            "weight_bytes",
            "kv_bytes_per_token",
        )

    def get_weight_bytes(self, model: LlmModel) -> float | None:
        return _finite_or_none(lambda: model.weight_bytes)

    def get_kv_bytes_per_token(self, model: LlmModel) -> float | None:
        return _finite_or_none(lambda: model.kv_bytes_per_token)


class ReplicaShapeSerializer(RecordSerializer):
    kv_pool_gb = serializers.SerializerMethodField(
        help_text="KV cache pool of one replica, decimal GB."
    )
    context_tokens = serializers.SerializerMethodField(
        help_text="Tokens of live context one replica's KV pool holds."
    )

    class Meta:
        model = ReplicaShape
        fields = (
            "id",
            "name",
            "model",
            "accelerator",
            "gpus_per_replica",
            "runtime_reserve_gb_per_gpu",
            "target_utilization",
            "runtime_version",
            "container_image",
            "model_path",
            "max_model_len",
            "extra_args",
            "kv_pool_gb",
            "context_tokens",
        )

    def get_kv_pool_gb(self, shape: ReplicaShape) -> float | None:
        return _finite_or_none(lambda: shape.kv_pool_gb)

    def get_context_tokens(self, shape: ReplicaShape) -> int | None:
        tokens = _finite_or_none(lambda: shape.context_tokens)
        return None if tokens is None else int(tokens)


class WorkloadClassSerializer(RecordSerializer):
    class Meta:
        model = WorkloadClass
        fields = ("id", "name", "description")


class CapacityFigureSerializer(RecordSerializer):
    provenance = JSONDocumentField(
        required=False,
        help_text="Benchmark run, hardware, software versions, workload profile version.",
    )
    is_stale = serializers.BooleanField(
        read_only=True, help_text="Measured longer ago than the fleet's maximum figure age."
    )

    class Meta:
        model = CapacityFigure
        fields = (
            "id",
            "shape",
            "workload_class",
            "prefill_tokens_per_s",
            "decode_tokens_per_s",
            "max_concurrency",
            "knee_requests_per_s",
            "measured_at",
            "source",
            "provenance",
            "is_stale",
        )


class TierSerializer(RevisionedSerializer):
    class Meta:
        model = Tier
        fields = (
            "id",
            "name",
            "p95_ttft_slo_s",
            "p95_itl_slo_s",
            "failure_promise",
            "priority",
            "target_utilization",
            "burst_factor",
            "forecast_quantile",
            *REVISION_FIELDS,
        )


TENANT_QUOTA_FIELDS = (
    "id",
    "tenant",
    "budget_rate_replica_s_per_s",
    "budget_burst_replica_s",
    "tokens_per_minute_limit",
    "tokens_per_minute_burst",
    *REVISION_FIELDS,
)


class TenantQuotaSerializer(RevisionedSerializer):
    class Meta:
        model = TenantQuota
        fields = TENANT_QUOTA_FIELDS


class TenantQuotaSummarySerializer(serializers.ModelSerializer[TenantQuota]):
    """The quota as shown inside a tenant (read-only; edit it at its own endpoint)."""

    etag = serializers.CharField(read_only=True)

    class Meta:
        model = TenantQuota
        fields = tuple(f for f in TENANT_QUOTA_FIELDS if f != "tenant")
        read_only_fields = fields


class TenantSerializer(RevisionedSerializer):
    residency_regions = StrictPrimaryKeyRelatedField(
        many=True,
        required=False,
        queryset=Region.objects.all(),
        help_text=(
            "Regions the tenant's data may be served in (empty = no region list). Must "
            "include the home region and lie inside the residency geography."
        ),
    )
    quota = TenantQuotaSummarySerializer(read_only=True, allow_null=True)

    class Meta:
        model = Tenant
        fields = (
            "id",
            "name",
            "display_name",
            "tier",
            "home_region",
            "residency_geography",
            "residency_regions",
            "spill_allowed",
            "max_spill_rtt_ms",
            "fair_share_weight",
            "quota",
            *REVISION_FIELDS,
        )

    def create(self, validated_data: dict[str, Any]) -> Tenant:
        regions = validated_data.pop("residency_regions", None)
        return tenant_save(tenant=Tenant(**validated_data), residency_regions=regions)

    def update(self, instance: Tenant, validated_data: dict[str, Any]) -> Tenant:
        regions = validated_data.pop("residency_regions", None)
        for name, value in validated_data.items():
            setattr(instance, name, value)
        return tenant_save(tenant=instance, residency_regions=regions)


class PercentileBoundsFields(serializers.Serializer[Any]):
    """The bucket bounds of a profile's or an observation's length percentiles, read-only:
    what telemetry read them in, which are coarse, and how those read."""

    percentile_bounds = serializers.DictField(
        child=serializers.ListField(
            child=serializers.FloatField(allow_null=True), min_length=2, max_length=2
        ),
        read_only=True,
        help_text="The histogram bucket each telemetry percentile was read in, tokens: "
        '{"prompt_tokens_p99": [2000, 5000]}; the upper bound is null beyond the top bucket '
        "(censored). Empty for declared figures.",
    )
    coarse = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Percentiles read in a bucket wider than 10% of its upper bound "
        "(telemetry.histograms.COARSE_RELATIVE_WIDTH): interpolated inside the bucket, rough "
        "figures.",
    )
    between = serializers.DictField(
        child=serializers.CharField(),
        read_only=True,
        help_text='Coarse percentiles as they read: {"prompt_tokens_p99": "between 2,000 and '
        '5,000"}.',
    )


class BurstinessSerializer(serializers.Serializer[dict[str, Any]]):
    """How clumped a workload's arrivals are (``planner.capacity.burstiness``), over the
    busiest hour of what telemetry saw."""

    requests = serializers.IntegerField()
    span_s = serializers.FloatField()
    mean_requests_per_s = serializers.FloatField()
    resolution_s = serializers.FloatField(
        help_text="The finest window the figures were read at: 1 s from a request log, the "
        "bucket width from a pull."
    )
    dispersion = serializers.FloatField(
        help_text="Index of dispersion of counts at the resolution (1: Poisson); what a replay "
        "synthesises arrivals with."
    )
    peak_1s = serializers.FloatField(allow_null=True, help_text="Busiest second, requests/s.")
    peak_10s = serializers.FloatField(allow_null=True, help_text="Busiest 10 s, requests/s.")
    peak_60s = serializers.FloatField(allow_null=True, help_text="Busiest minute, requests/s.")
    interarrival_scv = serializers.FloatField(
        allow_null=True, help_text="Squared coefficient of variation of the gaps (1: Poisson)."
    )
    dispersion_1s = serializers.FloatField(allow_null=True)
    dispersion_10s = serializers.FloatField(allow_null=True)


class BurstinessField(serializers.Serializer[Any]):
    """A record's ``burstiness``, read-only; null where none was measured (a declared
    profile)."""

    burstiness = serializers.SerializerMethodField()

    @extend_schema_field(BurstinessSerializer(allow_null=True))
    def get_burstiness(self, record: Any) -> dict[str, Any] | None:
        figures = getattr(record, "burstiness", None) or {}
        return dict(figures) if figures else None


class WorkloadProfileSerializer(PercentileBoundsFields, BurstinessField, RecordSerializer):
    class Meta:
        model = WorkloadProfile
        fields = (
            "id",
            "tenant",
            "model",
            "workload_class",
            "region",
            "version",
            "source",
            "peak_requests_per_s",
            "prompt_tokens_p50",
            "prompt_tokens_mean",
            "prompt_tokens_p95",
            "prompt_tokens_p99",
            "output_tokens_p50",
            "output_tokens_mean",
            "output_tokens_p95",
            "output_tokens_p99",
            "prefix_cache_hit_rate",
            "residence_s",
            "percentile_bounds",
            "coarse",
            "between",
            "burstiness",
            "created_at",
        )
