"""Helpers for the admin's tests: a model's admin URL and the body its change form sends."""

from __future__ import annotations

from typing import Any

from django.db.models import Model
from django.forms import MultiWidget
from django.http import HttpResponse
from django.urls import reverse


def admin_url(model: type[Model], view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def form_data(response: HttpResponse) -> dict[str, Any]:
    """The POST body the rendered change form sends when nothing is edited, inlines included."""
    context = response.context  # type: ignore[attr-defined]
    forms = [context["adminform"].form]
    data: dict[str, Any] = {}
    for inline in context.get("inline_admin_formsets", []):
        management = inline.formset.management_form
        for name in management.fields:
            data[management.add_prefix(name)] = management[name].value()
        forms.extend(inline.formset.forms)
    for form in forms:
        for bound in form:
            _put(data, bound.html_name, bound.field.widget, bound.value())
            if bound.field.show_hidden_initial:
                # A field with a callable default renders its initial value in a hidden input
                # as well, and the form compares against what comes back in it.
                initial = bound.field.prepare_value(bound.initial)
                _put(data, bound.html_initial_name, bound.field.hidden_widget(), initial)
    return data


def _put(data: dict[str, Any], name: str, widget: Any, value: Any) -> None:
    if value is None or value is False:
        return
    if isinstance(widget, MultiWidget):
        for i, part in enumerate(widget.decompress(value)):
            data[f"{name}_{i}"] = "" if part is None else part
    else:
        data[name] = value
