"""Number formats for the pages: rounded for reading, units stated by the template."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html

from controlplane.core import formatting

register = template.Library()


def _float(value: Any) -> float | None:
    return formatting.finite(value)


@register.filter
def num(value: Any, digits: int = 2) -> str:
    """A number with thousands separators and at most ``digits`` decimals, trailing zeros
    dropped (57.400000000000006 → 57.4); residue (8.9e-16) reads as 0."""
    if value is None:
        return "—"
    if _float(value) is None:
        return str(value)
    return formatting.number(value, int(digits))


@register.filter
def money(value: Any) -> str:
    """Dollars with cents: 1,234.50."""
    return formatting.money(value)


@register.filter
def subtract_money(value: Any, other: Any) -> str:
    """``value − other`` as money (a total less one of its parts)."""
    a, b = _float(value), _float(other)
    if a is None or b is None:
        return "—"
    return formatting.money(a - b)


@register.filter
def count(value: Any) -> str:
    """Replicas or GPUs: whole, or one decimal where fractional."""
    return formatting.count(value)


@register.filter
def rate(value: Any) -> str:
    """A rate (requests per second, tokens per second) to three significant figures."""
    return formatting.rate(value)


@register.filter
def signed_money(value: Any) -> str:
    number = _float(value)
    if number is None:
        return "—"
    if abs(number) < 0.005:
        return "±0.00"
    return f"{number:+,.2f}"


@register.filter
def signed(value: Any) -> str:
    number = _float(value)
    if number is None:
        return "—"
    return "±0" if number == 0 else f"{number:+,.0f}"


@register.filter
def pct(value: Any, digits: int = 0) -> str:
    number = _float(value)
    return "—" if number is None else f"{number * 100:.{int(digits)}f} %"


@register.filter
def promise_label(value: str) -> str:
    return {"none": "none", "n+1": "N+1", "zone": "survive a zone"}.get(value, value)


@register.filter
def cell(row: Any, column: str) -> Any:
    """``row[column]`` for a report row (a dict) in a template."""
    return row.get(column) if hasattr(row, "get") else None


@register.filter
def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@register.filter
def cell_text(value: Any) -> str:
    """A report cell for reading: numbers rounded, empty cells as a dash."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return num(value, 2)
    return str(value)


@register.filter
def column_label(name: str) -> str:
    """A report column's name in words: ``cost_per_million_tokens`` → "cost per million
    tokens"."""
    return str(name).replace("_", " ")


@register.simple_tag
def length_figure(point: Any, name: str) -> str:
    """A length percentile of a profile point as it reads: "≥ 5,000" beyond the top histogram
    bucket, "4,871 (between 2,000 and 5,000)" in a coarse one, else the number."""
    value = getattr(point, name, None)
    if name in getattr(point, "censored", ()):
        return format_html("≥ {}", num(value, 0))
    between = getattr(point, "between", {}).get(name)
    if between:
        return format_html('{} <span class="muted">({})</span>', num(value, 0), between)
    return num(value, 0)
