"""Emission reads for the pages: what the regions in shadow mode would have changed."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.emission.models import ShadowDiff
from controlplane.fleet.models import Region


@dataclass(frozen=True)
class ShadowRegion:
    """A region in shadow mode and the newest plan's diff there (None: no plan activated
    since the region went into shadow mode, or the plan has nothing there)."""

    region: str
    diff: ShadowDiff | None


def shadow_overview() -> list[ShadowRegion]:
    """Every region in shadow mode, by name, with its newest diff (two queries)."""
    names = list(
        Region.objects.filter(actuation=Region.Actuation.SHADOW)
        .order_by("name")
        .values_list("name", flat=True)
    )
    newest: dict[str, ShadowDiff] = {}
    rows = (
        ShadowDiff.objects.filter(region__in=names)
        .select_related("plan", "delivered_plan")
        .order_by("region", "-created_at", "-pk")
    )
    for diff in rows:
        newest.setdefault(diff.region, diff)
    return [ShadowRegion(region=name, diff=newest.get(name)) for name in names]
