"""Query parameters of the finance endpoints and the shape of their answers (for the schema)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.finance.services import GROUPS, FinanceInputError, check_group_by
from planner.forecast.finance import PERIODS

# More periods than this ask for more than any stored horizon holds.
MAX_HORIZON = 400


def _groups(value: str) -> list[str]:
    try:
        return list(check_group_by(value.split(",")))
    except FinanceInputError as exc:
        raise serializers.ValidationError(exc.message) from exc


class ReportQuerySerializer(serializers.Serializer[Any]):
    period = serializers.ChoiceField(choices=PERIODS, default="month")
    horizon = serializers.IntegerField(
        min_value=1, max_value=MAX_HORIZON, required=False, help_text="Number of periods."
    )


class GroupedQuerySerializer(ReportQuerySerializer):
    group_by = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        help_text=f"Comma-separated, any of: {', '.join(GROUPS)}.",
    )

    def validate_group_by(self, value: str) -> list[str]:
        return _groups(value)


class OpenCostQuerySerializer(ReportQuerySerializer):
    aggregate = serializers.CharField(
        required=False,
        default="region",
        help_text=f"OpenCost's aggregate: comma-separated, any of {', '.join(GROUPS)}.",
    )

    def validate_aggregate(self, value: str) -> list[str]:
        names = _groups(value)
        if not names:
            raise serializers.ValidationError(f"Name at least one of {', '.join(GROUPS)}.")
        return names


class ReportSerializer(serializers.Serializer[Any]):
    """A finance report: rows of the named columns, from one plan version."""

    plan_version = serializers.IntegerField()
    snapshot = serializers.IntegerField(allow_null=True)
    period = serializers.CharField()
    horizon = serializers.IntegerField()
    group_by = serializers.ListField(child=serializers.CharField())
    columns = serializers.ListField(child=serializers.CharField())
    rows = serializers.ListField(child=serializers.DictField())
    notes = serializers.ListField(child=serializers.CharField())


class OpenCostResponseSerializer(serializers.Serializer[Any]):
    """OpenCost's allocation response: one set of allocations by name per window."""

    code = serializers.IntegerField()
    status = serializers.CharField()
    # OpenCost's key. The class only describes the response in the schema; it never
    # serializes, so shadowing ``Serializer.data`` is harmless here.
    data = serializers.ListField(child=serializers.DictField())  # type: ignore[assignment]
