"""Reads over the fleet that more than one app needs.

``planning_figure`` is the one rule for which capacity figure planning uses: the placement
problem, the benchmark schedule and endpoints, and telemetry's replica impact of a drift all
size a shape on the same figure.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings

from controlplane.fleet.models import CapacityFigure, ReplicaShape


def planning_figures(*, shape_ids: Iterable[int] | None = None) -> dict[int, CapacityFigure]:
    """The figure planning uses for each shape that has one, by shape id: the freshest figure
    for the whole mix (no workload class), else the freshest of any class.

    One query over the figures; ``shape_ids`` limits it to those shapes."""
    figures = CapacityFigure.objects.select_related("workload_class").order_by(
        "-measured_at", "-pk"
    )
    if shape_ids is not None:
        figures = figures.filter(shape_id__in=list(shape_ids))
    chosen: dict[int, CapacityFigure] = {}
    for figure in figures:
        current = chosen.get(figure.shape_id)
        # Freshest first: keep the first figure, unless a whole-mix figure comes after a
        # per-class one.
        if current is None or (
            current.workload_class_id is not None and figure.workload_class_id is None
        ):
            chosen[figure.shape_id] = figure
    return chosen


def planning_figure(*, shape: ReplicaShape) -> CapacityFigure | None:
    """The figure planning uses for ``shape`` (see ``planning_figures``); None without one."""
    figures = CapacityFigure.objects.filter(shape=shape).order_by("-measured_at", "-pk")
    return figures.filter(workload_class__isnull=True).first() or figures.first()


def planning_target_utilization(*, shape: ReplicaShape) -> float:
    """The utilisation a shape is planned at: its own target, else the fleet default
    (``HEADROOM_DEFAULT_TARGET_UTILIZATION``)."""
    if shape.target_utilization is not None:
        return float(shape.target_utilization)
    return float(settings.HEADROOM_DEFAULT_TARGET_UTILIZATION)
