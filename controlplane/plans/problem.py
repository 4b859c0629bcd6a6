"""The placement problem built from the database, and its summary for an operator.

``problem_export`` writes the planner's input contract (``planner.placement.problem``; the
format is described in ``docs/placement-format.md``) from the fleet, the policies and the
current workload profiles; ``problem_summary`` describes one. How each field is derived is
documented in ``docs/scenarios/README.md``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings

from controlplane.fleet.models import (
    AcceleratorType,
    CapacityFigure,
    HostedProvider,
    Region,
    RegionLink,
    ReplicaShape,
    Zone,
    ZoneInventory,
)
from controlplane.fleet.selectors import planning_figures, planning_target_utilization
from controlplane.policies.models import Tier, WorkloadProfile
from controlplane.telemetry import traces
from planner.capacity import workload
from planner.errors import PlannerInputError
from planner.placement.problem import DEFAULT_TARGET_UTILIZATION, PROBLEM_FORMAT


def problem_export(
    *,
    warn: Callable[[str], None] | None = None,
    replace: Mapping[int, WorkloadProfile] | None = None,
) -> dict[str, Any]:
    """The placement problem (``placement-problem/v1``) for the fleet and tenants in the database.

    ``replace`` maps the id of a current workload profile to a profile that stands for it
    instead (an unsaved one with other figures: what a drift alert's baseline was), so a
    change can be priced by solving the problem with and without it.

    Zones that are down are left out (a degraded zone stays). A shape without a capacity
    figure is left out, and so is a demand whose model has no shape left: ``warn`` is called
    with a sentence for each. Lists are sorted, so the same database gives the same problem.
    A tier whose utilisation target differs from the default shows as a scaled ``burst``
    (see ``docs/scenarios/README.md``).
    """
    say = warn or (lambda message: None)
    default_target = float(settings.HEADROOM_DEFAULT_TARGET_UTILIZATION)

    zones_by_region: dict[int, list[str]] = defaultdict(list)
    for zone in Zone.objects.exclude(state=Zone.State.DOWN).order_by("name"):
        zones_by_region[zone.region_id].append(zone.name)
    live_zones = {name for names in zones_by_region.values() for name in names}
    regions = [
        {
            "name": region.name,
            "geo": region.geography.name,
            "zones": zones_by_region.get(region.pk, []),
            "price_multiplier": _num(region.price_multiplier),
        }
        for region in Region.objects.select_related("geography").order_by("name")
    ]

    accelerators = [
        {
            "name": acc.name,
            "memory_gb": _num(acc.memory_gb),
            "price_per_gpu_hour": _num(acc.on_demand_price_per_gpu_hour),
        }
        for acc in AcceleratorType.objects.order_by("name")
    ]

    inventory = [
        {"zone": row.zone.name, "accelerator": row.accelerator.name, "gpus": row.gpus_available}
        for row in ZoneInventory.objects.select_related("zone", "accelerator")
        if row.zone.name in live_zones
    ]
    inventory.sort(key=lambda r: (r["zone"], r["accelerator"]))

    shapes = []
    for shape, figure in planning_shapes(say):
        shapes.append(
            {
                "name": shape.name,
                "model": shape.model.name,
                "accelerator": shape.accelerator.name,
                "gpus": shape.gpus_per_replica,
                "prefill_tokens_per_s": _num(figure.prefill_tokens_per_s),
                "decode_tokens_per_s": _num(figure.decode_tokens_per_s),
                "max_concurrency": figure.max_concurrency,
                "target_utilization": _num(planning_target_utilization(shape=shape)),
            }
        )
    served_models = {str(s["model"]) for s in shapes}

    rtt = [
        {"from": link.region_a.name, "to": link.region_b.name, "ms": _num(link.rtt_ms)}
        for link in RegionLink.objects.select_related("region_a", "region_b")
    ]
    rtt.sort(key=lambda r: (r["from"], r["to"]))

    demands = [
        d
        for d in _demands(default_target=default_target, say=say, replace=replace or {})
        if _demand_has_shape(d, served_models, say)
    ]

    document: dict[str, Any] = {
        "format": PROBLEM_FORMAT,
        "target_utilization": _num(default_target),
        "regions": regions,
        "accelerators": accelerators,
        "inventory": inventory,
        "shapes": shapes,
        "rtt_ms": rtt,
        "demands": demands,
    }
    hosted = _hosted(demands)
    if hosted:
        # Only then: a fleet without hosted providers keeps the documents (and the inputs
        # hash) it had.
        document["hosted"] = hosted
    return document


def _hosted(demands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The enabled hosted providers serving a model some demand asks for, as the format's
    ``hosted`` rows."""
    wanted = {str(d["model"]) for d in demands}
    rows = []
    for provider in (
        HostedProvider.objects.filter(enabled=True)
        .select_related("region")
        .prefetch_related("served_models")
        .order_by("name")
    ):
        served = sorted(m.name for m in provider.served_models.all() if m.name in wanted)
        if not served:
            continue
        row: dict[str, Any] = {
            "name": provider.name,
            "region": provider.region.name,
            "models": served,
            "input_price_per_mtok": _num(provider.input_price_per_mtok),
            "output_price_per_mtok": _num(provider.output_price_per_mtok),
            "tpm_limit": provider.tpm_limit,
            "p95_ttft_s": _num(provider.p95_ttft_s),
        }
        if provider.rpm_limit is not None:
            row["rpm_limit"] = provider.rpm_limit
        rows.append(row)
    return rows


# The builder's own document, read back where a re-plan needs a few names from it before it
# is solved (the typed ``Problem`` exists only for a valid document; these hold for any).


def _rows(document: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    rows = document.get(key)
    return [row for row in rows if isinstance(row, Mapping)] if isinstance(rows, list) else []


def problem_shape_names(document: Mapping[str, Any]) -> list[str]:
    """The names of the document's shapes, in its order."""
    return [str(row["name"]) for row in _rows(document, "shapes") if "name" in row]


def problem_zone_names(document: Mapping[str, Any]) -> list[str]:
    """The names of every zone of the document's regions."""
    out: list[str] = []
    for row in _rows(document, "regions"):
        zones = row.get("zones")
        if isinstance(zones, list):
            out.extend(str(zone) for zone in zones)
    return out


def problem_demand_ids(document: Mapping[str, Any]) -> list[str]:
    """The ids of the document's demands, in its order."""
    return [str(row.get("id")) for row in _rows(document, "demands")]


def problem_with_demands(
    document: Mapping[str, Any], change: Callable[[Mapping[str, Any]], Mapping[str, Any]]
) -> dict[str, Any]:
    """A copy of the document with each demand row replaced by ``change(row)``."""
    return {**document, "demands": [change(row) for row in _rows(document, "demands")]}


def planning_shapes(
    say: Callable[[str], None],
) -> list[tuple[ReplicaShape, CapacityFigure]]:
    """Each shape with the figure planning uses (``fleet.selectors.planning_figures``), by
    name; shapes with no figure are reported and skipped, stale figures reported."""
    chosen = planning_figures()
    out = []
    for shape in ReplicaShape.objects.select_related("model", "accelerator").order_by("name"):
        if shape.pk not in chosen:
            say(f"shape {shape.name} left out: it has no capacity figure")
            continue
        figure = chosen[shape.pk]
        if figure.is_stale:
            say(
                f"shape {shape.name}: its capacity figure of {figure.measured_at:%Y-%m-%d} is "
                f"older than {settings.HEADROOM_CAPACITY_MAX_AGE_DAYS} days"
            )
        out.append((shape, figure))
    return out


def _demands(
    *,
    default_target: float,
    say: Callable[[str], None],
    replace: Mapping[int, WorkloadProfile],
) -> list[dict[str, Any]]:
    """One demand per current workload profile (the highest version of each tenant, model,
    class and region), or per the profile ``replace`` puts in its place."""
    profiles = WorkloadProfile.objects.select_related(
        "tenant__tier", "tenant__home_region", "model", "workload_class", "region"
    ).order_by("tenant_id", "model_id", "workload_class_id", "region_id", "-version")
    current: dict[tuple[int, int, int, int | None], WorkloadProfile] = {}
    for profile in profiles:
        k = (profile.tenant_id, profile.model_id, profile.workload_class_id, profile.region_id)
        if k not in current or profile.version > current[k].version:
            current[k] = profile

    current = {k: replace.get(p.pk, p) for k, p in current.items()}
    allowed_cache: dict[int, list[str]] = {}
    scaled_tiers: set[str] = set()
    demands = []
    for profile in current.values():
        tenant, tier = profile.tenant, profile.tenant.tier
        if tenant.pk not in allowed_cache:
            allowed_cache[tenant.pk] = [r.name for r in tenant.allowed_regions()]
        allowed = allowed_cache[tenant.pk]
        demand_id = f"{tenant.name}/{profile.model.name}/{profile.workload_class.name}"
        home = tenant.home_region
        if profile.region is not None:
            demand_id += f"@{profile.region.name}"
            home = profile.region
        if not allowed:
            say(f"demand {demand_id} left out: tenant {tenant.name} may be served nowhere")
            continue
        demand: dict[str, Any] = {
            "id": demand_id,
            "tenant": tenant.name,
            "tier": tier.name,
            "model": profile.model.name,
            "home_region": home.name,
            "allowed_regions": allowed,
            "requests_per_s": _num(profile.peak_requests_per_s),
            "burst": _num(_tier_burst(tier, default_target, say, scaled_tiers)),
            "prompt_tokens": _num(profile.prompt_tokens_mean),
            "output_tokens": _num(profile.output_tokens_mean),
            "prefix_cache_hit_rate": _num(profile.prefix_cache_hit_rate),
        }
        if profile.residence_s is not None:
            demand["residence_s"] = _num(profile.residence_s)
        demand["ttft_slo_s"] = _num(tier.p95_ttft_slo_s)
        demand["prompt_tokens_p95"] = _num(profile.prompt_tokens_p95)
        demand["output_tokens_p95"] = _num(profile.output_tokens_p95)
        dispersion = (profile.burstiness or {}).get("dispersion")
        if isinstance(dispersion, int | float) and math.isfinite(dispersion) and dispersion > 0:
            demand["arrival_scv"] = float(f"{max(float(dispersion), 1e-3):.4g}")
        if profile.source == WorkloadProfile.Source.TELEMETRY:
            trace = traces.trace_latest(
                tenant=tenant.name, model=profile.model.name, region=home.name
            )
            if trace is not None:
                # The re-plan replays these arrivals (plans.services, planner.placement.replay).
                demand["request_trace"] = trace.pk
        if tenant.spill_allowed and tenant.max_spill_rtt_ms is not None:
            demand["max_spill_rtt_ms"] = _num(tenant.max_spill_rtt_ms)
        demand["promise"] = tier.failure_promise
        demand["priority"] = tier.priority
        if tier.hosted_overflow:
            demand["hosted_overflow"] = True
        demands.append(demand)
    demands.sort(key=lambda d: str(d["id"]))
    return demands


def _tier_burst(
    tier: Tier, default_target: float, say: Callable[[str], None], reported: set[str]
) -> float:
    """The tier's burst, scaled so that a shape planned at ``default_target`` carries this
    tier's load as if at the tier's own target: × default / tier target.

    The format allows no burst below 1, so a tier that may run hotter than the default cannot
    be expressed; its burst stays at 1 (planned at the shape's target, more conservatively)
    and the first demand of such a tier reports it.
    """
    if math.isclose(tier.target_utilization, default_target):
        return tier.burst_factor
    burst = tier.burst_factor * (default_target / tier.target_utilization)
    if not math.isfinite(burst):
        # Only a record stored before the bounds existed (or written around them) gets here.
        raise PlannerInputError(
            f"tier {tier.name}: burst_factor",
            f"{tier.burst_factor:g} × default target {default_target:g} / target utilisation "
            f"{tier.target_utilization:g} is not a finite number",
        )
    if burst < 1.0:
        if tier.name not in reported:
            reported.add(tier.name)
            say(
                f"tier {tier.name}: target utilisation {tier.target_utilization:g} is above the "
                f"default {default_target:g} and burst {tier.burst_factor:g} cannot absorb it; "
                "planned at burst 1 (the shapes' own target)"
            )
        return 1.0
    return burst


def _demand_has_shape(
    demand: Mapping[str, Any], models_served: set[str], say: Callable[[str], None]
) -> bool:
    if demand["model"] in models_served:
        return True
    say(
        f"demand {demand['id']} left out: no shape of model {demand['model']} has a capacity figure"
    )
    return False


def _num(value: float) -> int | float:
    """A number for JSON: whole values as integers (``90`` rather than ``90.0``)."""
    return int(value) if float(value).is_integer() else float(value)


# -- summary ----------------------------------------------------------------------------------


def request_cost_s(demand: Mapping[str, Any], shape: Mapping[str, Any]) -> float:
    """Replica-seconds one request of ``demand`` costs on ``shape`` (placement-v1 ``c[d,s]``):
    prompt × (1 − prefix-cache hit rate) / prefill rate + output / decode rate."""
    return workload.request_cost(
        prompt_tokens=float(demand["prompt_tokens"]),
        output_tokens=float(demand["output_tokens"]),
        prefill_rate=float(shape["prefill_tokens_per_s"]),
        decode_rate=float(shape["decode_tokens_per_s"]),
        prefix_cache_hit_rate=float(demand.get("prefix_cache_hit_rate", 0.0)),
    )


def problem_summary(problem: Mapping[str, Any]) -> str:
    """A readable account of a placement problem: regions and zones, GPUs, shapes, demands by
    tier, planned requests/s and the replica-seconds per second they cost on each shape."""
    default_target = float(problem.get("target_utilization", DEFAULT_TARGET_UTILIZATION))
    regions = list(problem.get("regions", []))
    shapes = list(problem.get("shapes", []))
    demands = list(problem.get("demands", []))
    zone_region = {z: r["name"] for r in regions for z in r.get("zones", [])}

    lines = [
        f"Placement problem ({problem.get('format', '?')}), default target utilisation "
        f"{default_target:g}"
    ]
    described = "; ".join(
        f"{r['name']} ({r.get('geo', '?')}): {len(r.get('zones', []))} zones" for r in regions
    )
    lines.append(
        f"Regions: {len(regions)}, zones: {len(zone_region)}"
        + (f" ({described})" if described else "")
    )

    gpus: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in problem.get("inventory", []):
        gpus[row["accelerator"]][zone_region.get(row["zone"], "?")] += int(row["gpus"])
    if gpus:
        for acc, per_region in sorted(gpus.items()):
            where = ", ".join(f"{r} {n}" for r, n in sorted(per_region.items()))
            lines.append(f"GPUs: {sum(per_region.values())} × {acc} ({where})")
    else:
        lines.append("GPUs: none")

    lines.append(f"Shapes: {len(shapes)}")
    for s in shapes:
        lines.append(
            f"  {s['name']}: {s['gpus']} × {s['accelerator']}, prefill "
            f"{s['prefill_tokens_per_s']:g} tok/s, decode {s['decode_tokens_per_s']:g} tok/s, "
            f"max concurrency {s.get('max_concurrency', '-')}, target "
            f"{s.get('target_utilization', default_target):g}"
        )

    def planned(d: Mapping[str, Any]) -> float:
        return float(d["requests_per_s"]) * float(d.get("burst", 1.0))

    by_tier: dict[tuple[int, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for d in demands:
        promise = str(d.get("promise", "none"))
        by_tier[(int(d.get("priority", 0)), str(d.get("tier", "")), promise)].append(d)
    lines.append(f"Demands by tier: {len(demands)}")
    for (priority, tier, promise), group in sorted(by_tier.items()):
        name = tier or f"priority {priority}"
        lines.append(
            f"  {name} (promise {promise}, priority {priority}): {len(group)} demands, "
            f"{sum(float(d['requests_per_s']) for d in group):.2f} req/s at peak, "
            f"{sum(planned(d) for d in group):.2f} req/s planned"
        )
    lines.append(
        f"Total planned: {sum(planned(d) for d in demands):.2f} req/s "
        f"({sum(float(d['requests_per_s']) for d in demands):.2f} req/s at peak × burst)"
    )

    if shapes:
        lines.append("Planned load if each model's demands ran on one shape:")
    for s in shapes:
        load = sum(planned(d) * request_cost_s(d, s) for d in demands if d["model"] == s["model"])
        target = float(s.get("target_utilization", default_target))
        replicas = math.ceil(load / target - 1e-9) if load > 0 else 0
        lines.append(
            f"  {s['name']}: {load:.2f} replica-seconds/s, at least {replicas} replicas "
            f"({replicas * int(s['gpus'])} GPUs) at target {target:g}, before failure headroom"
        )
    return "\n".join(lines)
