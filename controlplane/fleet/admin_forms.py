"""Form fields the fleet and policy admins share: numbers typed as text and refused when not
finite, and labels in words rather than the field names' letters.

A number input lets the browser drop what it cannot parse (``1e309`` overflows, so Chromium
sends an empty value and the form answers "This field is required."); a text input sends
what was typed, and the form answers with what is wrong while keeping the value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from django import forms
from django.contrib.admin import TabularInline
from django.db import models
from django.http import HttpRequest
from django.utils.text import capfirst

# Labels for fields whose names hold units (``_s``, ``_ms``, ``_per_s``) or abbreviations.
HUMAN_LABELS = {
    "budget_rate_replica_s_per_s": "Budget refill (replica-seconds per second)",
    "budget_burst_replica_s": "Budget burst (replica-seconds)",
    "tokens_per_minute_limit": "Tokens per minute, sustained",
    "tokens_per_minute_burst": "Tokens per minute, burst ceiling",
    "p95_ttft_slo_s": "SLO: p95 time to first token (seconds)",
    "failure_promise": "Failure promise",
    "target_utilization": "Target utilisation (0–1]",
    "burst_factor": "Burst factor (≥ 1)",
    "forecast_quantile": "Forecast quantile (0–1)",
    "max_spill_rtt_ms": "Largest spill round trip (ms)",
    "fair_share_weight": "Fair-share weight",
    "peak_requests_per_s": "Peak requests per second",
    "prompt_tokens_p50": "Prompt tokens p50",
    "prompt_tokens_mean": "Prompt tokens mean",
    "prompt_tokens_p95": "Prompt tokens p95",
    "prompt_tokens_p99": "Prompt tokens p99",
    "output_tokens_p50": "Output tokens p50",
    "output_tokens_mean": "Output tokens mean",
    "output_tokens_p95": "Output tokens p95",
    "output_tokens_p99": "Output tokens p99",
    "prefix_cache_hit_rate": "Prefix-cache hit rate (0–1)",
    "residence_s": "Residence time (seconds)",
    "price_multiplier": "Price multiplier",
    "rtt_ms": "Round trip (ms)",
    "memory_gb": "Memory per GPU (GB)",
    "memory_tbps": "Memory bandwidth (TB/s)",
    "peak_bf16_tflops": "Peak BF16 (TFLOPS)",
    "on_demand_price_per_gpu_hour": "On-demand price ($ per GPU-hour)",
    "reserved_price_per_gpu_hour": "Reserved price ($ per GPU-hour)",
    "spot_price_per_gpu_hour": "Spot price ($ per GPU-hour)",
    "gpus_available": "GPUs available",
    "gpus_per_replica": "GPUs per replica",
    "runtime_reserve_gb_per_gpu": "Runtime reserve per GPU (GB)",
    "parameters_billions": "Parameters (billions)",
    "bytes_per_parameter": "Bytes per parameter",
    "kv_heads": "KV heads",
    "head_dim": "Head dimension",
    "kv_bytes_per_element": "KV bytes per element",
    "prefill_tokens_per_s": "Prefill (tokens per second)",
    "decode_tokens_per_s": "Decode (tokens per second)",
    "knee_requests_per_s": "Knee (requests per second)",
    "max_concurrency": "Largest concurrency",
}


class FiniteFloatField(forms.FloatField):
    """A float typed as text (the browser keeps what was typed) that must be finite."""

    widget = forms.TextInput(attrs={"inputmode": "decimal", "size": 12})
    default_error_messages = {
        "invalid": "Enter a finite number, such as 0.5 or 1e3 (this value is not one)."
    }

    def to_python(self, value: Any) -> float | None:  # type: ignore[override]
        result = super().to_python(value)
        if result is not None and not math.isfinite(result):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return result

    def widget_attrs(self, widget: forms.Widget) -> dict[str, Any]:
        # FloatField adds step="any" and min/max for a number input; text needs none.
        return {}


class HumanFieldsMixin:
    """For a ModelAdmin or inline: floats as ``FiniteFloatField``, labels from
    ``HUMAN_LABELS``, and history lists that show "—" rather than "None"."""

    object_history_list_template = "admin/headroom/object_history_list.html"
    formfield_overrides: ClassVar[Mapping[type[models.Field[Any, Any]], Mapping[str, Any]]] = {
        models.FloatField: {"form_class": FiniteFloatField}
    }

    def formfield_for_dbfield(
        self, db_field: models.Field[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.Field | None:
        field: forms.Field | None = super().formfield_for_dbfield(  # type: ignore[misc]
            db_field, request, **kwargs
        )
        if field is not None and db_field.name in HUMAN_LABELS:
            field.label = HUMAN_LABELS[db_field.name]
        if field is not None and isinstance(self, TabularInline):
            # A tabular inline names its columns in the table's head, not in a <label> by
            # each control: the control carries its name itself, for screen readers.
            label = field.label if field.label is not None else capfirst(db_field.verbose_name)
            field.widget.attrs.setdefault("aria-label", str(label))
        return field

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        """A tabular inline's rows with a named delete box (its column head says "Delete"
        for the eye only)."""
        formset = super().get_formset(request, obj, **kwargs)  # type: ignore[misc]
        if not isinstance(self, TabularInline):
            return formset

        class LabelledFormSet(formset):  # type: ignore[misc, valid-type]
            def add_fields(self, form: forms.Form, index: int | None) -> None:
                super().add_fields(form, index)
                if "DELETE" in form.fields:
                    form.fields["DELETE"].widget.attrs.setdefault("aria-label", "Delete this row")

        return LabelledFormSet
