"""The one rule for which capacity figure planning uses, and its three users agreeing on it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.benchmarks.selectors import freshest_figure
from controlplane.fleet.models import CapacityFigure, WorkloadClass
from controlplane.fleet.selectors import planning_figure, planning_figures
from controlplane.plans.problem import planning_shapes
from controlplane.telemetry.selectors import pool_shape
from tests.controlplane.telemetry_fakes import make_fleet

pytestmark = pytest.mark.django_db


def test_whole_mix_figure_wins_over_a_fresher_per_class_one() -> None:
    fleet = make_fleet(("northwind", "eu-west"))
    whole = CapacityFigure.objects.get(shape=fleet.shape)
    chat = WorkloadClass.objects.create(name="chat")
    CapacityFigure.objects.create(
        shape=fleet.shape,
        workload_class=chat,
        measured_at=timezone.now() + timedelta(minutes=1),
        prefill_tokens_per_s=5000,
        decode_tokens_per_s=200,
        max_concurrency=16,
    )
    assert planning_figure(shape=fleet.shape) == whole
    assert planning_figures()[fleet.shape.pk] == whole
    assert freshest_figure(fleet.shape) == whole
    assert dict(planning_shapes(lambda message: None))[fleet.shape] == whole


def test_a_shape_measured_per_class_only_is_planned_and_sized_on_that_figure() -> None:
    # Telemetry's pool sizing used whole-mix figures only, so a model measured per class had
    # no replica impact although the plan was built on its per-class figure.
    fleet = make_fleet(("northwind", "eu-west"))
    CapacityFigure.objects.filter(shape__model=fleet.model).delete()
    chat = WorkloadClass.objects.create(name="chat")
    older = CapacityFigure.objects.create(
        shape=fleet.shape,
        workload_class=chat,
        measured_at=timezone.now() - timedelta(days=1),
        prefill_tokens_per_s=3000,
        decode_tokens_per_s=120,
        max_concurrency=10,
    )
    newer = CapacityFigure.objects.create(
        shape=fleet.shape,
        workload_class=chat,
        prefill_tokens_per_s=4400,
        decode_tokens_per_s=170,
        max_concurrency=12,
    )
    assert planning_figure(shape=fleet.shape) == newer != older
    assert dict(planning_shapes(lambda message: None))[fleet.shape] == newer
    sized = pool_shape(model=fleet.model)
    assert sized is not None
    assert sized.shape == fleet.shape
    assert (sized.prefill_tokens_per_s, sized.decode_tokens_per_s) == (4400, 170)
