"""Admin for benchmarks: the runs (read-only: the benchmark writes them), the benchmark
endpoints (the replica each shape's load test measures; policy-admin edits them, under the same
revision check as tiers and tenants), and the freshness of each shape's capacity figures, from
which users who may add runs (policy-admin) queue an engine benchmark or an endpoint load test
of the selected shapes, through the same service the API and the schedule use.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from controlplane.benchmarks import selectors, services
from controlplane.benchmarks.models import BenchmarkEndpoint, BenchmarkRun, ShapeFreshness
from controlplane.core import formatting
from controlplane.core.admin import (
    ReadOnlyAdmin,
    ReadOnlyHistoryAdmin,
    RevisionCheckedForm,
    RevisionedAdmin,
)


def _pretty(value: Any) -> str:
    return format_html(
        "<pre>{}</pre>", json.dumps(formatting.tidy(value), indent=2, sort_keys=True, default=str)
    )


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(ReadOnlyHistoryAdmin):
    list_display = [
        "id",
        "requested_at",
        "shape",
        "kind",
        "status",
        "trigger",
        "device",
        "duration",
        "short_error",
    ]
    list_filter = ["status", "kind", "trigger", "device"]
    search_fields = ["shape__name", "reason", "error", "task_id"]
    date_hierarchy = "requested_at"
    list_select_related = ["shape"]
    fields: ClassVar[tuple[str, ...]] = (
        "shape",
        "kind",
        "status",
        "trigger",
        "reason",
        "device",
        "requested_by",
        "requested_at",
        "started_at",
        "finished_at",
        "task_id",
        "error",
        "workload_profile_version",
        "figure_links",
        "inputs_pretty",
        "hardware_pretty",
        "software_pretty",
        "results_pretty",
    )
    readonly_fields = fields

    @admin.display(description="duration (s)")
    def duration(self, obj: BenchmarkRun) -> str:
        seconds = obj.duration_s
        return "" if seconds is None else f"{seconds:.1f}"

    @admin.display(description="error")
    def short_error(self, obj: BenchmarkRun) -> str:
        return obj.error[:120]

    @admin.display(description="capacity figures")
    def figure_links(self, obj: BenchmarkRun) -> str:
        return ", ".join(str(figure.pk) for figure in obj.figures.all()) or "none"

    @admin.display(description="inputs")
    def inputs_pretty(self, obj: BenchmarkRun) -> str:
        return _pretty(obj.inputs)

    @admin.display(description="hardware")
    def hardware_pretty(self, obj: BenchmarkRun) -> str:
        return _pretty(obj.hardware)

    @admin.display(description="software")
    def software_pretty(self, obj: BenchmarkRun) -> str:
        return _pretty(obj.software)

    @admin.display(description="results")
    def results_pretty(self, obj: BenchmarkRun) -> str:
        return _pretty(obj.results)


class BenchmarkEndpointForm(RevisionCheckedForm[BenchmarkEndpoint]):
    # In-cluster replicas usually speak plain HTTP: a host typed without a scheme gets http://.
    base_url = forms.URLField(
        max_length=500,
        assume_scheme="http",
        help_text=BenchmarkEndpoint._meta.get_field("base_url").help_text,
    )

    class Meta:
        model = BenchmarkEndpoint
        fields = [
            "shape",
            "enabled",
            "base_url",
            "served_model_name",
            "api",
            "api_key_env",
            "timeout_s",
            "max_concurrency",
            "ignore_eos",
            "requests_per_point",
        ]


@admin.register(BenchmarkEndpoint)
class BenchmarkEndpointAdmin(RevisionedAdmin):
    form = BenchmarkEndpointForm
    list_display = [
        "shape",
        "base_url",
        "served_model_name",
        "api",
        "max_concurrency",
        "requests_per_point",
        "enabled",
        "revision",
    ]
    list_filter = ["enabled", "api"]
    search_fields = ["shape__name", "base_url", "served_model_name"]
    list_select_related = ["shape"]
    ordering = ["shape__name"]


@admin.register(ShapeFreshness)
class ShapeFreshnessAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "model",
        "accelerator",
        "gpus_per_replica",
        "measured_at",
        "age_days",
        "fresh",
        "reasons",
        "active_run",
        "last_run",
    ]
    list_select_related = ["model", "accelerator"]
    search_fields = ["name", "model__name"]
    actions = ["queue_engine_benchmark", "queue_endpoint_load_test"]

    def has_queue_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("benchmarks.add_benchmarkrun"))

    def _freshness(self, obj: ShapeFreshness) -> selectors.Freshness:
        # One computation per row and request, shared by the columns below.
        cached: selectors.Freshness | None = getattr(obj, "_freshness", None)
        if cached is None:
            (cached,) = selectors.shapes_freshness([obj])
            # A per-request cache on the row object, which the model does not declare.
            obj._freshness = cached  # type: ignore[attr-defined]
        return cached

    @admin.display(description="measured at")
    def measured_at(self, obj: ShapeFreshness) -> datetime | None:
        figure = self._freshness(obj).figure
        return figure.measured_at if figure is not None else None

    @admin.display(description="age (days)")
    def age_days(self, obj: ShapeFreshness) -> float | None:
        return self._freshness(obj).age_days

    @admin.display(description="fresh", boolean=True)
    def fresh(self, obj: ShapeFreshness) -> bool:
        return self._freshness(obj).is_fresh

    @admin.display(description="measure again because")
    def reasons(self, obj: ShapeFreshness) -> str:
        return "; ".join(self._freshness(obj).reasons)

    @admin.display(description="active run")
    def active_run(self, obj: ShapeFreshness) -> str:
        run = self._freshness(obj).active_run
        return "" if run is None else f"#{run.pk} {run.status}"

    @admin.display(description="last run")
    def last_run(self, obj: ShapeFreshness) -> str:
        run = self._freshness(obj).last_run
        return "" if run is None else f"#{run.pk} {run.status}"

    @admin.action(
        description="Queue an engine benchmark of the selected shapes", permissions=["queue"]
    )
    def queue_engine_benchmark(
        self, request: HttpRequest, queryset: QuerySet[ShapeFreshness]
    ) -> None:
        self._queue(request, queryset, BenchmarkRun.Kind.ENGINE)

    @admin.action(
        description="Queue an endpoint load test of the selected shapes", permissions=["queue"]
    )
    def queue_endpoint_load_test(
        self, request: HttpRequest, queryset: QuerySet[ShapeFreshness]
    ) -> None:
        self._queue(request, queryset, BenchmarkRun.Kind.ENDPOINT)

    def _queue(self, request: HttpRequest, queryset: QuerySet[ShapeFreshness], kind: str) -> None:
        queued: list[str] = []
        kept: list[str] = []
        without: list[str] = []
        with_endpoint = selectors.enabled_endpoint_shape_ids()
        for shape in queryset.select_related("model", "accelerator"):
            if kind == BenchmarkRun.Kind.ENDPOINT and shape.pk not in with_endpoint:
                without.append(shape.name)
                continue
            run, created = services.benchmark_run_request(
                shape=shape, kind=kind, reason="requested in the admin", user=request.user
            )
            (queued if created else kept).append(f"{shape.name} (#{run.pk})")
        if queued:
            self.message_user(request, f"Queued: {', '.join(queued)}.", messages.SUCCESS)
        if kept:
            self.message_user(
                request, f"Already queued or running: {', '.join(kept)}.", messages.WARNING
            )
        if without:
            self.message_user(
                request,
                f"No enabled benchmark endpoint, nothing queued: {', '.join(without)}. "
                "Register one under Benchmark endpoints.",
                messages.WARNING,
            )
