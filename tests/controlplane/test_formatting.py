"""Numbers rounded by meaning (``controlplane.core.formatting``) and the template filters
that print them on the operators' pages."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.template import Context, Template

from controlplane.core import formatting


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (162.35999999999999, "162.36"),
        (1234.5, "1,234.50"),
        (0, "0.00"),
        (-1e-12, "0.00"),  # residue, not a refund
        (-3.456, "-3.46"),
        ("7.5", "7.50"),
    ],
)
def test_money_is_to_the_cent(value: object, expected: str) -> None:
    assert formatting.money(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3.0, "3"), (3.0000000001, "3"), (2.5, "2.5"), (2.46, "2.5"), (8.9e-16, "0"), (1200, "1,200")],
)
def test_counts_are_whole_or_one_decimal(value: float, expected: str) -> None:
    assert formatting.count(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.017634, "0.0176"),
        (1234.5, "1,230"),
        (12.0, "12"),
        (999.96, "1,000"),
        (0.5, "0.5"),
        (-42.42, "-42.4"),
        (8.9e-16, "0"),
    ],
)
def test_rates_have_three_significant_figures(value: float, expected: str) -> None:
    assert formatting.rate(value) == expected


@pytest.mark.parametrize(
    ("value", "digits", "expected"),
    [
        (57.400000000000006, 2, "57.4"),
        (8.9e-16, 1, "0"),  # was "8.9e-16 spare" on the fleet overview
        (-8.9e-16, 2, "0"),
        (0.00042, 2, "0.00042"),  # small but real: not rounded away, and no exponent
        (4.2e-05, 2, "0.000042"),
        (1234.5678, 0, "1,235"),
    ],
)
def test_number_drops_residue_and_trailing_zeros(value: float, digits: int, expected: str) -> None:
    assert formatting.number(value, digits) == expected


@pytest.mark.parametrize("value", [None, "n/a", math.nan, math.inf, True])
def test_what_is_not_a_finite_number_reads_as_a_dash(value: object) -> None:
    assert formatting.finite(value) is None
    for format_ in (formatting.money, formatting.count, formatting.rate, formatting.number):
        assert format_(value) == formatting.DASH


def test_the_template_filters_print_the_same() -> None:
    template = Template(
        "{% load headroom %}{{ a|money }} {{ b|num:1 }} spare, {{ c|count }} replicas, "
        "{{ d|rate }} req/s, {{ e|num }}"
    )
    text = template.render(
        Context({"a": 162.35999999999999, "b": 8.9e-16, "c": 4.0, "d": 0.017634, "e": None})
    )
    assert text == "162.36 0 spare, 4 replicas, 0.0176 req/s, —"


def test_tidy_rounds_the_residue_off_every_float_in_a_document() -> None:
    document = {"cost": 5.91999999999999, "rows": [0.19999999999999, 3, "x", 8.9e-16], "n": None}
    assert formatting.tidy(document) == {"cost": 5.92, "rows": [0.2, 3, "x", 0.0], "n": None}
    assert formatting.tidy(math.inf) == math.inf  # not a figure to round: left as it is


def test_float_columns_in_admin_lists_read_rounded_and_sort_by_the_stored_value(rf: Any) -> None:
    from django.contrib import admin

    from controlplane.telemetry.models import ObservedWorkload

    model_admin = admin.site._registry[ObservedWorkload]
    columns = {
        getattr(c, "__name__", c): c for c in model_admin.get_list_display(rf.get("/admin/"))
    }
    peak = columns["peak_requests_per_s"]
    assert callable(peak) and peak.admin_order_field == "peak_requests_per_s"  # type: ignore[attr-defined]
    row = ObservedWorkload(
        peak_requests_per_s=0.017424000000000002, prefix_cache_hit_rate=0.6000000000000001
    )
    assert peak(row) == "0.0174"
    assert columns["prefix_cache_hit_rate"](row) == "0.6"  # type: ignore[operator]
    assert columns["tenant"] == "tenant"  # other columns as they were


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("on_demand_price_per_gpu_hour", 2.4999999999, "2.50"),
        ("cost_per_hour", 162.35999999999999, "162.36"),
        ("gpus_available", 8.0, "8"),
        ("knee_requests_per_s", 3.14159, "3.14"),
    ],
)
def test_stored_floats_read_by_their_names_meaning(name: str, value: float, expected: str) -> None:
    from controlplane.core.admin import float_format

    assert float_format(name)(value) == expected


def test_a_read_only_admin_page_shows_its_float_fields_rounded(rf: Any) -> None:
    from django.contrib import admin
    from django.contrib.admin.utils import flatten_fieldsets, label_for_field, lookup_field
    from django.contrib.auth.models import AnonymousUser

    from controlplane.core.admin import ROUNDED_SUFFIX
    from controlplane.telemetry.models import ObservedWorkload

    model_admin = admin.site._registry[ObservedWorkload]
    request = rf.get("/admin/")
    request.user = AnonymousUser()
    row = ObservedWorkload(tenant="acme", peak_requests_per_s=0.019008000000000004)
    names = flatten_fieldsets(model_admin.get_fieldsets(request, row))
    peak = "peak_requests_per_s" + ROUNDED_SUFFIX
    assert peak in names and "tenant" in names and "peak_requests_per_s" not in names
    assert lookup_field(peak, row, model_admin)[2] == "0.019"
    assert str(label_for_field(peak, ObservedWorkload, model_admin)) == "peak requests per s"
    # Adding (no row yet) keeps the fields themselves.
    assert "peak_requests_per_s" in flatten_fieldsets(model_admin.get_fieldsets(request, None))
