"""The audit trail of one record, as the history endpoint shows it.

Each row of a record's simple_history table becomes an entry: when, who, what kind of change,
and for every field that changed its value before and after. A "created" entry lists every
field with ``before`` null; a "deleted" entry lists every field with ``after`` null. Foreign
keys appear as ids; many-to-many fields as sorted lists of ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.contrib.auth.models import AbstractBaseUser
from django.forms.models import model_to_dict
from rest_framework import serializers
from simple_history import utils as history_utils

CHANGE_KINDS = {"+": "created", "~": "changed", "-": "deleted"}
CHANGE_KIND_CHOICES = [(kind, kind) for kind in sorted(CHANGE_KINDS.values())]


class HistoryRow(Protocol):
    """The fields simple_history adds to every historical row (its model is built at run time)."""

    history_id: int
    history_date: datetime
    history_type: str
    history_change_reason: str | None

    @property
    def history_user(self) -> AbstractBaseUser | None: ...


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: Any
    after: Any


@dataclass(frozen=True)
class HistoryEntry:
    history_id: int
    date: datetime
    kind: str
    user_id: int | None
    user: str | None
    change_reason: str | None
    revision: int | None
    changes: list[FieldChange]


def _compared_fields(row: Any) -> list[str]:
    """The fields a diff compares: editable tracked fields, without the primary key.

    The same set ``diff_against`` uses, so created/deleted entries list what changed entries can.
    """
    pk_name = row.instance_type._meta.pk.name
    return sorted(f.name for f in row.tracked_fields if f.editable and f.name != pk_name)


def _m2m_ids(row: Any, field_name: str) -> list[Any]:
    field = row.instance_type._meta.get_field(field_name)
    target = history_utils.get_m2m_reverse_field_name(field)
    return sorted(getattr(row, field_name).values_list(target, flat=True))


def _m2m_rows_to_ids(row: Any, field_name: str, rows: list[dict[str, Any]]) -> list[Any]:
    field = row.instance_type._meta.get_field(field_name)
    target = history_utils.get_m2m_reverse_field_name(field)
    return sorted(r[target] for r in rows)


def _snapshot(row: Any) -> dict[str, Any]:
    values: dict[str, Any] = model_to_dict(row, fields=_compared_fields(row))
    for field in row._history_m2m_fields:
        values[field.name] = _m2m_ids(row, field.name)
    return dict(sorted(values.items()))


def _changes(row: Any, older: Any | None) -> list[FieldChange]:
    if row.history_type == "-":
        return [FieldChange(name, value, None) for name, value in _snapshot(row).items()]
    if older is None or row.history_type == "+":
        return [FieldChange(name, None, value) for name, value in _snapshot(row).items()]
    m2m_names = {field.name for field in row._history_m2m_fields}
    changes = []
    for change in row.diff_against(older).changes:
        if change.field in m2m_names:
            before = _m2m_rows_to_ids(row, change.field, change.old)
            after = _m2m_rows_to_ids(row, change.field, change.new)
        else:
            before, after = change.old, change.new
        changes.append(FieldChange(change.field, before, after))
    return changes


def history_entries(rows: Sequence[HistoryRow], older: HistoryRow | None) -> list[HistoryEntry]:
    """Entries for ``rows`` (one record's history rows, newest first).

    ``older`` is the row just before the last of ``rows`` (None when the last is the first),
    so each entry can say what changed even when ``rows`` is one page of a longer history.
    """
    entries = []
    for index, row in enumerate(rows):
        previous = rows[index + 1] if index + 1 < len(rows) else older
        user = row.history_user
        entries.append(
            HistoryEntry(
                history_id=row.history_id,
                date=row.history_date,
                kind=CHANGE_KINDS[row.history_type],
                user_id=None if user is None else user.pk,
                user=None if user is None else user.get_username(),
                change_reason=row.history_change_reason,
                revision=getattr(row, "revision", None),
                changes=_changes(row, previous),
            )
        )
    return entries


class FieldChangeSerializer(serializers.Serializer[Any]):
    field = serializers.CharField()
    before = serializers.JSONField(allow_null=True, help_text="Value before the change.")
    after = serializers.JSONField(allow_null=True, help_text="Value after the change.")


class HistoryEntrySerializer(serializers.Serializer[Any]):
    history_id = serializers.IntegerField()
    date = serializers.DateTimeField(help_text="When the change was saved.")
    kind = serializers.ChoiceField(choices=CHANGE_KIND_CHOICES)
    user_id = serializers.IntegerField(allow_null=True)
    user = serializers.CharField(allow_null=True, help_text="Username of the acting user.")
    change_reason = serializers.CharField(allow_null=True)
    revision = serializers.IntegerField(
        allow_null=True, help_text="The record's revision after the change (revisioned records)."
    )
    changes = FieldChangeSerializer(many=True)
