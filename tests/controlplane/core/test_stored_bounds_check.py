"""``manage.py check --database default`` names rows stored outside their field's range."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from controlplane.core.checks import stored_figures_within_bounds
from controlplane.fleet.models import CapacityFigure
from tests.controlplane.api_harness import Records
from tests.controlplane.finance_helpers import seeds_fleet

pytestmark = pytest.mark.django_db


def test_rows_within_range_raise_nothing() -> None:
    seeds_fleet(Records())
    assert stored_figures_within_bounds(databases=["default"]) == []


def test_a_row_stored_past_its_range_is_named_with_the_range() -> None:
    seeds_fleet(Records())
    figure = CapacityFigure.objects.get()
    # An update writes around the validators, as a raw fix or an old release's row would.
    CapacityFigure.objects.filter(pk=figure.pk).update(prefill_tokens_per_s=1e9)

    messages = stored_figures_within_bounds(databases=["default"])

    assert [m.id for m in messages] == ["core.W001"]
    text = messages[0].msg
    assert "fleet.CapacityFigure.prefill_tokens_per_s: 1 row(s) outside" in text
    assert f"#{figure.pk} = 1000000000.0" in text


def test_the_check_runs_with_the_database_tag_only() -> None:
    seeds_fleet(Records())
    CapacityFigure.objects.update(prefill_tokens_per_s=1e9)
    plain, with_database = StringIO(), StringIO()
    call_command("check", stdout=plain, stderr=plain)
    call_command("check", "--database", "default", stdout=with_database, stderr=with_database)
    assert "core.W001" not in plain.getvalue()
    assert "core.W001" in with_database.getvalue()
