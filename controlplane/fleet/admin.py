"""Admin UI for fleet facts, arranged for what an operator scans for.

Every model keeps its audit trail through ``SimpleHistoryAdmin`` (who changed what, before and
after); saving an unchanged form writes no history row (``core.admin.HistoryAdmin``). Derived figures are shown read-only and come from the model properties, which take them
from ``planner.capacity.memory``; nothing is computed here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import Count, QuerySet, Sum
from django.http import HttpRequest
from django.utils import timezone
from django.utils.timesince import timesince

from controlplane.core.admin import HistoryAdmin
from controlplane.fleet.admin_forms import HumanFieldsMixin
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
from planner.capacity.memory import MIB


def _llm_model_complete(model: LlmModel | None) -> bool:
    """Whether a (possibly unsaved) model has every field its derived figures need."""
    return model is not None and None not in (
        model.parameters_billions,
        model.bytes_per_parameter,
        model.layers,
        model.kv_heads,
        model.head_dim,
        model.kv_bytes_per_element,
    )


def _shape_complete(shape: ReplicaShape) -> bool:
    """Whether a (possibly unsaved) shape has what its KV pool needs: model, GPU, count."""
    return (
        shape.model_id is not None
        and shape.accelerator_id is not None
        and bool(shape.gpus_per_replica)
        and shape.runtime_reserve_gb_per_gpu is not None
        and _llm_model_complete(shape.model)
    )


@admin.register(Geography)
class GeographyAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = ["name", "description", "region_count"]
    # Explicit: an annotated (GROUP BY) queryset drops Meta.ordering, and autocomplete pages.
    ordering = ["name"]
    search_fields = ["name", "description"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Geography]:
        rows: QuerySet[Geography] = super().get_queryset(request)
        return rows.annotate(_region_count=Count("regions"))

    @admin.display(description="regions", ordering="_region_count")
    def region_count(self, obj: Geography) -> int:
        return int(getattr(obj, "_region_count", 0))


class ZoneInline(HumanFieldsMixin, admin.TabularInline[Zone, Region]):
    model = Zone
    fields = ["name", "state"]
    extra = 0
    show_change_link = True


@admin.register(Region)
class RegionAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = ["name", "geography", "price_multiplier", "actuation", "zone_count"]
    ordering = ["name"]
    list_filter = ["geography", "actuation"]
    search_fields = ["name", "geography__name"]
    autocomplete_fields = ["geography"]
    list_select_related = ["geography"]
    inlines = [ZoneInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Region]:
        rows: QuerySet[Region] = super().get_queryset(request)
        return rows.annotate(_zone_count=Count("zones"))

    @admin.display(description="zones", ordering="_zone_count")
    def zone_count(self, obj: Region) -> int:
        return int(getattr(obj, "_zone_count", 0))


class ZoneInventoryInline(HumanFieldsMixin, admin.TabularInline[ZoneInventory, Zone]):
    model = ZoneInventory
    fields = ["accelerator", "gpus_available"]
    autocomplete_fields = ["accelerator"]
    extra = 0


@admin.register(Zone)
class ZoneAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = ["name", "region", "geography", "state"]
    list_filter = ["state", "region__geography", "region"]
    search_fields = ["name", "region__name"]
    autocomplete_fields = ["region"]
    list_select_related = ["region__geography"]
    inlines = [ZoneInventoryInline]

    @admin.display(description="geography", ordering="region__geography__name")
    def geography(self, obj: Zone) -> str:
        return obj.region.geography.name


@admin.register(RegionLink)
class RegionLinkAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = ["region_a", "region_b", "rtt_ms"]
    list_filter = ["region_a__geography", "region_a"]
    search_fields = ["region_a__name", "region_b__name"]
    autocomplete_fields = ["region_a", "region_b"]
    list_select_related = ["region_a", "region_b"]


@admin.register(AcceleratorType)
class AcceleratorTypeAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = [
        "name",
        "memory_gb",
        "peak_bf16_tflops",
        "memory_tbps",
        "on_demand_price_per_gpu_hour",
        "reserved_price_per_gpu_hour",
        "spot_price_per_gpu_hour",
        "gpu_product",
        "gpus_in_inventory",
    ]
    ordering = ["name"]
    search_fields = ["name", "gpu_product"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[AcceleratorType]:
        rows: QuerySet[AcceleratorType] = super().get_queryset(request)
        return rows.annotate(_gpus=Sum("inventory__gpus_available"))

    @admin.display(description="GPUs in inventory", ordering="_gpus")
    def gpus_in_inventory(self, obj: AcceleratorType) -> int:
        return int(getattr(obj, "_gpus", None) or 0)


@admin.register(ZoneInventory)
class ZoneInventoryAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = ["zone", "region", "accelerator", "gpus_available"]
    list_filter = ["accelerator", "zone__region__geography", "zone__region"]
    search_fields = ["zone__name", "zone__region__name", "accelerator__name"]
    autocomplete_fields = ["zone", "accelerator"]
    list_select_related = ["zone__region", "accelerator"]

    @admin.display(description="region", ordering="zone__region__name")
    def region(self, obj: ZoneInventory) -> str:
        return obj.zone.region.name


@admin.register(LlmModel)
class LlmModelAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = [
        "name",
        "parameters_billions",
        "bytes_per_parameter",
        "layers",
        "kv_heads",
        "head_dim",
        "weights",
        "kv_per_token",
    ]
    search_fields = ["name"]
    readonly_fields = ["weights", "kv_per_token"]
    fieldsets = [
        (None, {"fields": ["name", "parameters_billions", "bytes_per_parameter"]}),
        (
            "Attention (KV cache)",
            {"fields": ["layers", "kv_heads", "head_dim", "kv_bytes_per_element"]},
        ),
        ("Derived", {"fields": ["weights", "kv_per_token"]}),
    ]

    @admin.display(description="weights")
    def weights(self, obj: LlmModel) -> str | None:
        """Weight memory in decimal GB, with the exact byte count."""
        if not _llm_model_complete(obj):
            return None
        return f"{obj.weight_bytes / 1e9:,.1f} GB ({obj.weight_bytes:,.0f} bytes)"

    @admin.display(description="KV bytes per token")
    def kv_per_token(self, obj: LlmModel) -> str | None:
        """KV-cache bytes one token occupies, and the same in MiB."""
        if not _llm_model_complete(obj):
            return None
        per_token = obj.kv_bytes_per_token
        return f"{per_token:,.0f} B ({per_token / MIB:.3f} MiB)"


class CapacityFigureInline(HumanFieldsMixin, admin.TabularInline[CapacityFigure, ReplicaShape]):
    model = CapacityFigure
    fields = [
        "workload_class",
        "prefill_tokens_per_s",
        "decode_tokens_per_s",
        "max_concurrency",
        "knee_requests_per_s",
        "measured_at",
        "source",
    ]
    autocomplete_fields = ["workload_class"]
    extra = 0
    show_change_link = True


@admin.register(ReplicaShape)
class ReplicaShapeAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = [
        "name",
        "model",
        "accelerator",
        "gpus_per_replica",
        "kv_pool",
        "context_tokens",
        "target_utilization",
        "runtime_version",
    ]
    list_filter = ["accelerator", "model", "gpus_per_replica"]
    search_fields = ["name", "model__name", "accelerator__name", "runtime_version"]
    autocomplete_fields = ["model", "accelerator"]
    # The derived columns read the model and accelerator of every row.
    list_select_related = ["model", "accelerator"]
    readonly_fields = ["weights_per_gpu", "kv_pool", "context_tokens"]
    fieldsets = [
        (None, {"fields": ["name", "model", "accelerator", "gpus_per_replica"]}),
        (
            "Runtime",
            {"fields": ["runtime_reserve_gb_per_gpu", "target_utilization", "runtime_version"]},
        ),
        (
            "Serving",
            {
                "fields": ["container_image", "model_path", "max_model_len", "extra_args"],
                "description": (
                    "How a cluster starts a replica: the Kubernetes sink runs vLLM's OpenAI "
                    "server with these, the model's name as --served-model-name and GPUs per "
                    "replica as --tensor-parallel-size."
                ),
            },
        ),
        ("Derived", {"fields": ["weights_per_gpu", "kv_pool", "context_tokens"]}),
    ]
    inlines = [CapacityFigureInline]

    @admin.display(description="weights per GPU")
    def weights_per_gpu(self, obj: ReplicaShape) -> str | None:
        """Weight memory each GPU holds under tensor parallelism, decimal GB."""
        if not _shape_complete(obj):
            return None
        return f"{obj.model.weight_bytes / obj.gpus_per_replica / 1e9:,.1f} GB"

    @admin.display(description="KV pool per replica")
    def kv_pool(self, obj: ReplicaShape) -> str | None:
        """KV-cache memory the replica has left after weights and reserve, decimal GB."""
        if not _shape_complete(obj):
            return None
        return f"{obj.kv_pool_gb:,.1f} GB"

    @admin.display(description="context tokens")
    def context_tokens(self, obj: ReplicaShape) -> str | None:
        """Tokens of live context the KV pool holds, across all running requests."""
        if not _shape_complete(obj):
            return None
        return f"{obj.context_tokens:,}"


@admin.register(HostedProvider)
class HostedProviderAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = [
        "name",
        "region",
        "input_price_per_mtok",
        "output_price_per_mtok",
        "tpm_limit",
        "rpm_limit",
        "p95_ttft_s",
        "enabled",
    ]
    list_filter = ["enabled", "region"]
    search_fields = ["name"]
    autocomplete_fields = ["region"]
    filter_horizontal = ["served_models"]
    list_select_related = ["region"]


@admin.register(WorkloadClass)
class WorkloadClassAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = ["name", "description"]
    search_fields = ["name", "description"]


class FreshnessFilter(admin.SimpleListFilter):
    """Stale or fresh, by the same age limit as ``CapacityFigure.is_stale``."""

    title = "freshness"
    parameter_name = "freshness"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("stale", "stale"), ("fresh", "fresh")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[CapacityFigure]
    ) -> QuerySet[CapacityFigure]:
        # is_stale is "age > limit", so the cutoff itself is still fresh.
        cutoff = timezone.now() - timedelta(days=settings.HEADROOM_CAPACITY_MAX_AGE_DAYS)
        if self.value() == "stale":
            return queryset.filter(measured_at__lt=cutoff)
        if self.value() == "fresh":
            return queryset.filter(measured_at__gte=cutoff)
        return queryset


@admin.register(CapacityFigure)
class CapacityFigureAdmin(HumanFieldsMixin, HistoryAdmin):
    list_display = [
        "shape",
        "workload_class_or_all",
        "prefill_tokens_per_s",
        "decode_tokens_per_s",
        "max_concurrency",
        "knee_requests_per_s",
        "source",
        "measured_at",
        "age",
        "stale",
    ]
    list_filter = [
        FreshnessFilter,
        "source",
        "shape__accelerator",
        "shape__model",
        "workload_class",
    ]
    search_fields = ["shape__name", "workload_class__name"]
    autocomplete_fields = ["shape", "workload_class"]
    list_select_related = ["shape", "workload_class"]
    date_hierarchy = "measured_at"
    readonly_fields = ["age", "stale"]
    fieldsets = [
        (None, {"fields": ["shape", "workload_class"]}),
        (
            "Measured capacity of one replica",
            {
                "fields": [
                    "prefill_tokens_per_s",
                    "decode_tokens_per_s",
                    "max_concurrency",
                    "knee_requests_per_s",
                ]
            },
        ),
        ("Provenance", {"fields": ["measured_at", "source", "provenance", "age", "stale"]}),
    ]

    @admin.display(description="workload class", ordering="workload_class__name")
    def workload_class_or_all(self, obj: CapacityFigure) -> str:
        return obj.workload_class.name if obj.workload_class is not None else "all classes"

    @admin.display(description="age", ordering="measured_at")
    def age(self, obj: CapacityFigure) -> str | None:
        if obj.measured_at is None:
            return None
        return timesince(obj.measured_at)

    @admin.display(description="stale", boolean=True)
    def stale(self, obj: CapacityFigure) -> bool | None:
        if obj.measured_at is None:
            return None
        return obj.is_stale
