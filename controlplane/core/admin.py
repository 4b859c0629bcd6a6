"""The admin kit: read-only admins for rows the pipeline writes, and the admin of revisioned
records (shows the revision; refuses a save over someone else's change, as the API refuses a
stale ``If-Match``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django import forms
from django.contrib import admin
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import router, transaction
from django.db.models import F, FloatField
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.utils.functional import cached_property
from simple_history.admin import SimpleHistoryAdmin

from controlplane.core import formatting
from controlplane.core.records import Revisioned

_RevisionedT = TypeVar("_RevisionedT", bound=Revisioned)


class ReadOnlyAdminMixin:
    """Viewable by whoever has the view permission; never added, changed or deleted here.

    Mixed into model admins and inlines of rows that only the control plane writes (plans,
    runs, reports); actions that change such rows call their app's services."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ListActionsOnlyAdminMixin:
    """Never added, changed or deleted here, except that the change list's actions (which
    call services) run for users with the change permission. A row's own page stays
    read-only: saving it would write back values the control plane may have changed since."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A mixin: the admin class it is mixed into has the method, which mypy cannot see here.
        allowed: bool = super().has_change_permission(request)  # type: ignore[misc]
        return obj is None and allowed


def float_format(name: str) -> Callable[[Any], str]:
    """How a stored float named ``name`` reads: money to the cent, replica and GPU counts
    whole or to one decimal, anything else (rates, times, token counts) to three significant
    figures."""
    if "price" in name or "cost" in name:
        return formatting.money
    if "replicas" in name or "gpus" in name:
        return formatting.count
    return formatting.rate


def _rounded_column(field: FloatField[Any, Any]) -> Callable[[Any], str]:
    format_ = float_format(field.name)

    def column(obj: Any) -> str:
        value = getattr(obj, field.name)
        return "-" if value is None else format_(value)

    column.short_description = field.verbose_name  # type: ignore[attr-defined]
    column.admin_order_field = field.name  # type: ignore[attr-defined]
    column.__name__ = field.name
    return column


# A read-only page's rounded stand-in for a float field: a model admin attribute, so the
# page's row takes it rather than the field (the model's own name would win).
ROUNDED_SUFFIX = "__rounded"


class RoundedFloatsMixin:
    """Change lists whose float columns read rounded by what they mean
    (``162.35999999999999`` → ``162.36``), sorting by the stored value; on a page that only
    shows a row (no change permission), its float fields read rounded the same way. Forms
    that edit a row keep the stored value in their inputs."""

    def __getattr__(self, name: str) -> Any:
        if name.endswith(ROUNDED_SUFFIX):
            field = self._float_field(name.removesuffix(ROUNDED_SUFFIX))
            if field is not None:
                return _rounded_column(field)
        raise AttributeError(name)

    def _float_field(self, name: Any) -> FloatField[Any, Any] | None:
        if not isinstance(name, str):
            return None
        try:
            field = self.model._meta.get_field(name)
        except FieldDoesNotExist:
            return None
        return field if isinstance(field, FloatField) else None

    def _rounded_names(self, names: Any) -> Any:
        if isinstance(names, list | tuple):
            return type(names)(self._rounded_names(name) for name in names)
        return names + ROUNDED_SUFFIX if self._float_field(names) is not None else names

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)  # type: ignore[misc]
        if obj is None or self.has_change_permission(request, obj):
            return fieldsets
        return [
            (title, {**options, "fields": self._rounded_names(list(options["fields"]))})
            for title, options in fieldsets
        ]

    def get_list_display(self, request: HttpRequest) -> list[str | Callable[[Any], str | bool]]:
        names = super().get_list_display(request)  # type: ignore[misc]
        opts = self.model._meta
        out: list[str | Callable[[Any], str | bool]] = []
        for name in names:
            try:
                field = opts.get_field(name) if isinstance(name, str) else None
            except FieldDoesNotExist:
                field = None
            out.append(_rounded_column(field) if isinstance(field, FloatField) else name)
        return out


class ReadOnlyAdmin(RoundedFloatsMixin, ReadOnlyAdminMixin, admin.ModelAdmin[Any]):
    """A model admin that only shows."""


class ReadOnlyHistoryAdmin(RoundedFloatsMixin, ReadOnlyAdminMixin, SimpleHistoryAdmin):
    """A read-only admin of a model with an audit history."""


class RevisionCheckedForm(forms.ModelForm[_RevisionedT]):
    """A form for a ``Revisioned`` record that refuses to overwrite someone else's change.

    The revision the editor saw travels in a hidden field. On save the row is locked (inside
    the admin's transaction) and its revision compared; the save then writes the next
    revision after the stored one, also when the form was opened from an old history entry.
    """

    expected_revision = forms.IntegerField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["expected_revision"].required = True
            if not self.is_bound:
                # The stored revision, not the instance's: a history entry being reverted
                # carries the revision it had then.
                stored = self._stored_revision(lock=False)
                self.fields["expected_revision"].initial = (
                    stored if stored is not None else self.instance.revision
                )

    @cached_property
    def changed_data(self) -> list[str]:
        # The revision the editor saw is not a change: without this, every save of an
        # unchanged record counts as changed (new revision, empty history row).
        return [name for name in super().changed_data if name != "expected_revision"]

    def _stored_revision(self, *, lock: bool) -> int | None:
        rows = type(self.instance)._default_manager.filter(pk=self.instance.pk)
        if lock:
            # A no-op UPDATE takes the row's write lock on PostgreSQL and the database's write
            # lock on SQLite (which ignores SELECT ... FOR UPDATE), the same lock the API takes
            # before its If-Match check. It sends no signals, so writes no history row.
            rows.update(revision=F("revision"))
        revision: int | None = rows.values_list("revision", flat=True).first()
        return revision

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        expected = cleaned.get("expected_revision")
        if self.instance.pk is None or expected is None:
            return cleaned
        # Locked until the admin's transaction commits, so no write can slip in between this
        # check and the save.
        stored = self._stored_revision(lock=True)
        if stored is None:
            # Deleted since: saving restores it (a revert of a deleted record).
            return cleaned
        if stored != expected:
            raise ValidationError(
                f"This {self.instance._meta.verbose_name} was changed by someone else since "
                f"you opened it (revision {expected}, now {stored}). Reload the page, look at "
                "their change, and apply yours again.",
                code="stale_revision",
            )
        self.instance.revision = stored
        return cleaned


def reverting(request: HttpRequest) -> bool:
    """Whether ``request`` is a revert from a record's history (``history_form_view``)."""
    return bool(getattr(request, "_headroom_reverting", False))


class HistoryAdmin(RoundedFloatsMixin, SimpleHistoryAdmin):
    """Admin of a model with an audit history that saves nothing when nothing changed: an
    unchanged form writes no empty history row (the API's no-op writes do the same)."""

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm, change: bool) -> None:  # type: ignore[type-arg]
        if change and not form.has_changed() and not reverting(request):
            return
        super().save_model(request, obj, form, change)  # type: ignore[no-untyped-call]

    def history_form_view(
        self,
        request: HttpRequest,
        object_id: str,
        version_id: str,
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # A revert's form starts from the history entry, so "unchanged" there still differs
        # from the stored record: it is saved.
        request._headroom_reverting = True  # type: ignore[attr-defined]
        # django-simple-history leaves this view unannotated, and mypy's untyped_calls_exclude
        # does not reach calls made through super().
        response: HttpResponse = super().history_form_view(  # type: ignore[no-untyped-call]
            request, object_id, version_id, extra_context
        )
        return response


class RevisionedAdmin(HistoryAdmin):
    """Admin for a ``Revisioned`` model: shows the revision, checks it on save, and saves
    nothing when nothing changed (no new revision, no empty history row)."""

    form = RevisionCheckedForm

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "revision"]

    def history_form_view(
        self,
        request: HttpRequest,
        object_id: str,
        version_id: str,
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Reverting saves through the form, whose revision check locks the row: that needs
        # a transaction, which the change view has and this view does not.
        with transaction.atomic(using=router.db_for_write(self.model)):
            return super().history_form_view(request, object_id, version_id, extra_context)
