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


class OpenCostQuerySerializer(serializers.Serializer[Any]):
    """OpenCost's ``/allocation`` parameters, for the schema (``opencost.opencost_query``
    checks them: a 400 names the first that is unknown, malformed or not supported)."""

    window = serializers.CharField(
        required=False,
        help_text="OpenCost's window: today, start,end (RFC 3339 or unix seconds), 1d, …; "
        "whole UTC days from today to the forecast's end. Without it, period and horizon.",
    )
    step = serializers.CharField(
        required=False, help_text="Length of each set, whole days (1d, 7d, 1w); default: window."
    )
    resolution = serializers.CharField(required=False, help_text="Only 1d (the forecast is daily).")
    aggregate = serializers.CharField(
        required=False,
        default="region",
        help_text=f"Comma-separated, any of {', '.join(GROUPS)}.",
    )
    accumulate = serializers.CharField(
        required=False, help_text="true: one set summing the window (default false)."
    )
    accumulateBy = serializers.CharField(
        required=False, help_text="all, day, week (ISO), month or quarter."
    )
    includeIdle = serializers.CharField(
        required=False, help_text="true: the idle headroom as its own __idle__ allocation."
    )
    shareIdle = serializers.CharField(
        required=False, help_text="true: the idle headroom shared over the allocations by use."
    )
    idleByNode = serializers.CharField(required=False, help_text="Only false.")
    sharelb = serializers.CharField(required=False, help_text="No load balancers: no effect.")
    includeProportionalAssetResourceCosts = serializers.CharField(
        required=False, help_text="Only false."
    )
    includeAggregatedMetadata = serializers.CharField(
        required=False, help_text="The group's values are always in properties.labels."
    )
    period = serializers.ChoiceField(
        choices=PERIODS, required=False, help_text="Without a window: one set per period."
    )
    horizon = serializers.IntegerField(
        min_value=1, max_value=MAX_HORIZON, required=False, help_text="Number of periods."
    )


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
