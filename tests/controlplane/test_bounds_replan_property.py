"""Whatever the API accepts can be planned: a property test.

Hypothesis drives the real REST API as a policy admin, writing values across and beyond every
numeric field's bounds (the bounds themselves, values inside, 1e308, infinity, NaN, -0.0,
huge integers, the smallest positive float) into the shipped support-assistant scenario.
Every write is answered 200 or a 400 naming a field; then a re-plan runs. It must succeed,
find nothing changed, or fail with a stated reason recorded on the run, never with an
unhandled exception (an ``OverflowError`` or ``ZeroDivisionError`` logged with its traceback
and recorded as the run's error).
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import pytest
from django.test import override_settings
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase
from rest_framework.test import APIClient

from controlplane.core.roles import POLICY_ADMIN
from controlplane.fleet.models import Region
from controlplane.plans.models import ReplanRun
from controlplane.plans.services import STATED_FAILURES
from controlplane.policies.models import Tier
from tests.controlplane.api_harness import Records
from tests.controlplane.bounds_support import BoundedField, bounded_fields
from tests.controlplane.conftest import make_user
from tests.controlplane.plans_helpers import load_support_assistant, run_replan

FIELDS = bounded_fields()

# Values outside every range, or at the edge of what a float or a JSON number can hold.
HOSTILE: tuple[Any, ...] = (
    1e308,
    -1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    -0.0,
    0.0,
    5e-324,
    1e-300,
    -1,
    10**30,
    2**63,
    2**1024,
)


def _inside(field: BoundedField) -> st.SearchStrategy[Any]:
    if field.whole:
        return st.integers(min_value=int(field.low), max_value=int(field.high))
    return st.floats(min_value=field.low, max_value=field.high)


# An edit of the fleet: which record of each endpoint is written (an index into its records,
# by id) and, for each field, the value written to it (a field left out is not written).
Edit = tuple[dict[str, int], dict[str, Any]]


@st.composite
def edits(draw: st.DrawFn) -> Edit:
    """Every field at once, each kept, at a bound, inside, or hostile: so one example can
    combine the extremes of many figures (a high rate, long prompts, a slow replica)."""
    records = {f.basename: draw(st.integers(min_value=0, max_value=5)) for f in FIELDS}
    values: dict[str, Any] = {}
    for field in FIELDS:
        kind = draw(st.sampled_from(("keep", "keep", "low", "high", "inside", "hostile")))
        if kind == "low":
            values[str(field)] = field.low
        elif kind == "high":
            values[str(field)] = field.high
        elif kind == "inside":
            values[str(field)] = draw(_inside(field))
        elif kind == "hostile":
            values[str(field)] = draw(st.sampled_from(HOSTILE))
    return records, values


# Figures that divide the load: at their lowest, a request costs the most replica-time.
DIVISORS = {"prefill_tokens_per_s", "decode_tokens_per_s", "target_utilization"}
FIRST_RECORDS = {f.basename: 0 for f in FIELDS}
ALL_HIGH: Edit = (FIRST_RECORDS, {str(f): f.high for f in FIELDS})
ALL_LOW: Edit = (FIRST_RECORDS, {str(f): f.low for f in FIELDS})
HEAVIEST: Edit = (
    FIRST_RECORDS,
    {str(f): f.low if f.name in DIVISORS else f.high for f in FIELDS},
)


def _json(value: Any) -> Any:
    """Non-finite floats travel as strings, which a number field parses like any other."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _in_range(field: BoundedField, value: Any) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return field.low <= value <= field.high


# Short solves: the property is about what the inputs do, not about plan quality.
@override_settings(
    HEADROOM_REPLAN_TIME_LIMIT_S=2.0,
    HEADROOM_REPLAN_BAND_TIME_LIMIT_S=0.5,
    HEADROOM_REPLAN_SOLVER_WORKERS=1,
)
class AcceptedRecordsArePlannable(TestCase):
    @classmethod
    def setUpTestData(cls) -> None:
        load_support_assistant()
        # A hosted provider the standard tier may overflow to: its figures are edited too.
        Records().hosted_provider(region=Region.objects.get(name="us-east"))
        Tier.objects.filter(name="standard").update(hosted_overflow=True)
        cls.admin = make_user("bounds-admin", POLICY_ADMIN)

    @settings(
        max_examples=12,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(edits())
    @example(ALL_HIGH)
    @example(ALL_LOW)
    @example(HEAVIEST)
    def test_a_replan_after_any_accepted_writes_succeeds_or_states_why_not(
        self, edit: Edit
    ) -> None:
        records, values = edit
        client = APIClient()
        client.force_authenticate(self.admin)
        for field in FIELDS:
            if str(field) not in values:
                continue
            value = values[str(field)]
            pks = list(field.model._default_manager.order_by("pk").values_list("pk", flat=True))
            pk = pks[records[field.basename] % len(pks)]
            response = client.patch(
                reverse(f"{field.basename}-detail", args=[pk]),
                json.dumps({field.name: _json(value)}),
                content_type="application/json",
                HTTP_IF_MATCH="*",
            )
            assert response.status_code in (200, 400), (field, value, response.content)
            if response.status_code == 400:
                named = response.json()["error"]["fields"]
                assert named, (field, value, response.content)
                if not _in_range(field, value):
                    assert field.name in named, (field, value, named)
            else:
                assert _in_range(field, value), (field, value, response.json())

        with self.assertNoLogs("controlplane.plans.services", level="ERROR"):
            run = run_replan()

        assert run.status in (
            ReplanRun.Status.SUCCEEDED,
            ReplanRun.Status.UNCHANGED,
            ReplanRun.Status.FAILED,
        ), run.status
        if run.status == ReplanRun.Status.FAILED:
            assert run.error.startswith(STATED_FAILURES), run.error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("burst_factor", 1e308, "].burst: requests_per_s × burst"),
        ("target_utilization", 5e-324, "tier premium: burst_factor"),
    ],
)
def test_a_record_stored_around_the_bounds_fails_the_replan_with_the_field_named(
    field: str, value: float, named: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A value written before the bounds existed (or by SQL) is refused by the planner with
    the field named; the run records why, and nothing is logged as an error."""
    load_support_assistant()
    Tier.objects.filter(name="premium").update(**{field: value})

    run = run_replan()

    assert run.status == ReplanRun.Status.FAILED
    assert run.error.startswith(STATED_FAILURES) and named in run.error, run.error
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
