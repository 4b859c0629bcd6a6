"""Scenario loading and placement-problem export.

``scenario_load`` makes the database hold what a scenario file declares: every entry is matched
to its row by natural key (a name; (zone, accelerator); (tenant, model, class, region,
version) …), compared field by field, and created or updated only where it differs, so loading
the same file twice writes nothing the second time (no saves, no history rows). Every record
goes through ``full_clean()`` and tenants also through ``validate_residency_regions``; the
whole load is one transaction, so a bad entry leaves the database as it was.

``problem_export`` builds the placement problem (``placement-problem/v1``, the planner's input
contract) from the database, and ``problem_summary`` describes one for an operator. How each
problem field is derived is documented in ``docs/scenarios/README.md``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import models, transaction

from controlplane.fleet.models import (
    AcceleratorType,
    CapacityFigure,
    Geography,
    LlmModel,
    Region,
    RegionLink,
    ReplicaShape,
    WorkloadClass,
    Zone,
    ZoneInventory,
)
from controlplane.policies.models import (
    Tenant,
    TenantQuota,
    Tier,
    WorkloadProfile,
    validate_residency_regions,
)
from controlplane.scenarios.schema import (
    SECTIONS,
    ZONES,
    Entry,
    ScenarioError,
    SectionSpec,
    scenario_parse,
    scenario_read,
)
from planner.capacity import workload

PROBLEM_FORMAT = "placement-problem/v1"

# What a reference field names, by the entity word the schema uses.
_REF_MODELS: dict[str, type[models.Model]] = {
    "geography": Geography,
    "region": Region,
    "zone": Zone,
    "accelerator": AcceleratorType,
    "model": LlmModel,
    "replica shape": ReplicaShape,
    "workload class": WorkloadClass,
    "tier": Tier,
    "tenant": Tenant,
}

# Row counts are reported per section, in loading order (zones right after their regions).
REPORT_KINDS: tuple[str, ...] = tuple(
    k for s in SECTIONS for k in ((s.key, ZONES.key) if s.key == "regions" else (s.key,))
)


@dataclass
class ScenarioLoadReport:
    """What a load did: per section, rows created, updated and left unchanged.

    ``changes`` lists one line per created or updated row (``tenants[2] (acme): updated tier``).
    With ``dry_run`` the load was rolled back after counting.
    """

    name: str
    source: str
    dry_run: bool = False
    counts: dict[str, dict[str, int]] = field(
        default_factory=lambda: {
            k: {"created": 0, "updated": 0, "unchanged": 0} for k in REPORT_KINDS
        }
    )
    changes: list[str] = field(default_factory=list)

    def total(self, outcome: str) -> int:
        return sum(c[outcome] for c in self.counts.values())

    def lines(self) -> list[str]:
        """A table for the terminal: one line per section that has entries, then the total."""
        title = self.name or self.source
        head = f"{'Checked' if self.dry_run else 'Loaded'} scenario {title}"
        if self.name and self.source and self.source != self.name:
            head += f" ({self.source})"
        out = [head + (" (dry run: nothing saved)" if self.dry_run else "") + ":"]
        for kind, c in self.counts.items():
            if sum(c.values()):
                out.append(
                    f"  {kind:<18} {c['created']:>4} created {c['updated']:>4} updated "
                    f"{c['unchanged']:>4} unchanged"
                )
        out.append(
            f"  {'total':<18} {self.total('created'):>4} created {self.total('updated'):>4} "
            f"updated {self.total('unchanged'):>4} unchanged"
        )
        return out


class _DryRunRollback(Exception):
    """Raised inside the load's transaction to undo a dry run."""


def scenario_load(
    *,
    path: Path | str | None = None,
    data: Mapping[str, Any] | None = None,
    user: AbstractBaseUser | None = None,
    dry_run: bool = False,
) -> ScenarioLoadReport:
    """Load a scenario from a file (``path``: YAML or JSON) or from parsed ``data``.

    Creates or updates what differs, never deletes. All or nothing: on the first bad entry
    nothing is saved and :class:`ScenarioError` names the entry and field. ``user`` is recorded
    as the author of the history rows; ``dry_run`` checks everything and then rolls back.
    """
    if (path is None) == (data is None):
        raise TypeError("scenario_load needs exactly one of path= and data=")
    source = str(path) if path is not None else "scenario"
    scenario = scenario_parse(scenario_read(path) if path is not None else data, source=source)
    report = ScenarioLoadReport(name=scenario.name, source=source, dry_run=dry_run)
    loader = _Loader(report=report, user=user, reason=f"scenario {scenario.name or source}")
    try:
        with transaction.atomic():
            for spec in SECTIONS:
                for entry in scenario.entries(spec.key):
                    loader.load(entry)
            if dry_run:
                raise _DryRunRollback
    except _DryRunRollback:
        pass
    return report


class _Loader:
    """Matches entries to rows and saves what differs; one instance per load."""

    def __init__(self, *, report: ScenarioLoadReport, user: Any, reason: str) -> None:
        self.report = report
        self.user = user
        self.reason = reason[:100]  # the history's change-reason column holds 100 characters
        # Rows by (model, name): references resolve to the instance this load last saved, so
        # a later clean() sees the values of this load, not stale ones.
        self._by_name: dict[tuple[type[models.Model], str], models.Model] = {}

    # -- references -------------------------------------------------------------------------

    def ref(self, entry: Entry, key: str) -> Any:
        """The row an entry's reference field names, or None where the field is absent/null."""
        name = entry.get(key)
        if name is None:
            return None
        f = entry.section.field_for_key(key)
        assert f is not None and f.ref is not None
        return self._named(entry, key, f.ref, name)

    def _named(self, entry: Entry, key: str, entity: str, name: str) -> models.Model:
        model = _REF_MODELS[entity]
        obj = self._by_name.get((model, name))
        if obj is None:
            obj = model._default_manager.filter(name=name).first()
            if obj is None:
                raise ScenarioError(entry.label, f"{key}: unknown {entity} '{name}'")
            self._by_name[(model, name)] = obj
        return obj

    # -- entries ----------------------------------------------------------------------------

    def load(self, entry: Entry) -> None:
        getattr(self, "_load_" + entry.section.key)(entry)

    def _load_geographies(self, entry: Entry) -> None:
        self.upsert(entry, Geography, key={"name": entry.get("name")}, values=self.plain(entry))

    def _load_regions(self, entry: Entry) -> None:
        values = {**self.plain(entry), "geography": self.ref(entry, "geography")}
        region = self.upsert(entry, Region, key={"name": entry.get("name")}, values=values)
        for zone in entry.children.get("zones", []):
            zone_values = {**self.plain(zone), "region": region}
            self.upsert(zone, Zone, key={"name": zone.get("name")}, values=zone_values)

    def _load_region_links(self, entry: Entry) -> None:
        a, b = self.ref(entry, "region_a"), self.ref(entry, "region_b")
        # A link holds both ways: match a row stored in either direction, keep its direction.
        existing = RegionLink.objects.filter(region_a=b, region_b=a).first()
        key = {"region_a": b, "region_b": a} if existing else {"region_a": a, "region_b": b}
        self.upsert(entry, RegionLink, key=key, values=self.plain(entry))

    def _load_accelerators(self, entry: Entry) -> None:
        self.upsert(
            entry, AcceleratorType, key={"name": entry.get("name")}, values=self.plain(entry)
        )

    def _load_inventory(self, entry: Entry) -> None:
        key = {"zone": self.ref(entry, "zone"), "accelerator": self.ref(entry, "accelerator")}
        self.upsert(entry, ZoneInventory, key=key, values=self.plain(entry))

    def _load_models(self, entry: Entry) -> None:
        self.upsert(entry, LlmModel, key={"name": entry.get("name")}, values=self.plain(entry))

    def _load_replica_shapes(self, entry: Entry) -> None:
        values = {
            **self.plain(entry),
            "model": self.ref(entry, "model"),
            "accelerator": self.ref(entry, "accelerator"),
        }
        self.upsert(entry, ReplicaShape, key={"name": entry.get("name")}, values=values)

    def _load_workload_classes(self, entry: Entry) -> None:
        self.upsert(entry, WorkloadClass, key={"name": entry.get("name")}, values=self.plain(entry))

    def _load_capacity_figures(self, entry: Entry) -> None:
        key = {
            "shape": self.ref(entry, "shape"),
            "workload_class": self.ref(entry, "workload_class"),
        }
        values = self.plain(entry)
        if entry.has("measured_at"):
            key["measured_at"] = values.pop("measured_at")
            self.upsert(entry, CapacityFigure, key=key, values=values)
            return
        # No date: the entry states the figure as of now. It matches the freshest figure of
        # its shape and class when the numbers agree; otherwise it is a new measurement.
        values.pop("measured_at")
        freshest = CapacityFigure.objects.filter(**key).order_by("-measured_at", "-pk").first()
        if freshest is not None and not self._differences(freshest, values):
            self._clean(entry, freshest)
            self._count(entry, "unchanged")
            return
        self.upsert(entry, CapacityFigure, key=None, values={**key, **values})

    def _load_tiers(self, entry: Entry) -> None:
        self.upsert(entry, Tier, key={"name": entry.get("name")}, values=self.plain(entry))

    def _load_tenants(self, entry: Entry) -> None:
        values = {
            **self.plain(entry),
            "tier": self.ref(entry, "tier"),
            "home_region": self.ref(entry, "home_region"),
            "residency_geography": self.ref(entry, "residency_geography"),
        }
        regions: list[Region] = []
        for name in entry.get("residency_regions", []):
            region = self._named(entry, "residency_regions", "region", name)
            assert isinstance(region, Region)
            regions.append(region)

        def residency(tenant: models.Model) -> None:
            assert isinstance(tenant, Tenant)
            validate_residency_regions(
                home_region=tenant.home_region,
                geography=tenant.residency_geography,
                regions=regions,
            )

        self.upsert(
            entry,
            Tenant,
            key={"name": entry.get("name")},
            values=values,
            m2m={"residency_regions": regions},
            extra_check=residency,
        )

    def _load_quotas(self, entry: Entry) -> None:
        self.upsert(
            entry, TenantQuota, key={"tenant": self.ref(entry, "tenant")}, values=self.plain(entry)
        )

    def _load_workload_profiles(self, entry: Entry) -> None:
        key = {
            "tenant": self.ref(entry, "tenant"),
            "model": self.ref(entry, "model"),
            "workload_class": self.ref(entry, "workload_class"),
            "region": self.ref(entry, "region"),
        }
        values = self.plain(entry)
        key["version"] = values.pop("version")
        self.upsert(entry, WorkloadProfile, key=key, values=values)

    # -- the generic part -------------------------------------------------------------------

    def plain(self, entry: Entry) -> dict[str, Any]:
        """Values of the entry's non-reference fields by model attribute; an absent optional
        field takes the model's default, so the file states the whole record."""
        spec = entry.section
        model = _SECTION_MODELS[spec.key]
        values: dict[str, Any] = {}
        for f in spec.fields:
            if f.ref is not None or f.children is not None:
                continue
            if entry.has(f.key):
                values[f.attr] = entry.get(f.key)
            else:
                model_field = model._meta.get_field(f.attr)
                assert isinstance(model_field, models.Field)
                values[f.attr] = model_field.get_default()
        return values

    def upsert(
        self,
        entry: Entry,
        model: type[models.Model],
        *,
        key: dict[str, Any] | None,
        values: dict[str, Any],
        m2m: Mapping[str, Sequence[models.Model]] | None = None,
        extra_check: Callable[[models.Model], None] | None = None,
    ) -> models.Model:
        """Create the row ``key`` names, or update the fields of ``values`` that differ.

        ``key`` None always creates. Saves (and so writes history) only when something
        differs; validates every record either way.
        """
        obj = model._default_manager.filter(**key).first() if key is not None else None
        m2m = m2m or {}
        if obj is None:
            obj = model(**{**values, **(key or {})})
            changed = ["created"]
            m2m_changed = [name for name, rows in m2m.items() if rows]
        else:
            changed = self._differences(obj, values)
            for attr in changed:
                setattr(obj, attr, values[attr])
            m2m_changed = [
                name
                for name, rows in m2m.items()
                if {r.pk for r in rows} != set(getattr(obj, name).values_list("pk", flat=True))
            ]
        self._clean(entry, obj)
        if extra_check is not None:
            self._checked(entry, lambda: extra_check(obj))
        if changed:
            obj._history_user = self.user  # type: ignore[attr-defined]
            obj._change_reason = self.reason  # type: ignore[attr-defined]
            obj.save()
        for name in m2m_changed:
            obj._history_user = self.user  # type: ignore[attr-defined]
            obj._change_reason = self.reason  # type: ignore[attr-defined]
            getattr(obj, name).set(m2m[name])
        if "name" in (key or {}):
            self._by_name[(model, str(key["name"]))] = obj  # type: ignore[index]
        if changed == ["created"]:
            self._count(entry, "created")
            self.report.changes.append(f"{entry.label}: created")
        elif changed or m2m_changed:
            self._count(entry, "updated")
            self.report.changes.append(f"{entry.label}: updated {', '.join(changed + m2m_changed)}")
        else:
            self._count(entry, "unchanged")
        return obj

    @staticmethod
    def _differences(obj: models.Model, values: Mapping[str, Any]) -> list[str]:
        """Attributes whose stored value differs from the wanted one (foreign keys by id)."""
        changed = []
        for attr, wanted in values.items():
            f = obj._meta.get_field(attr)
            if isinstance(f, models.ForeignKey):
                current = getattr(obj, f.attname)
                wanted_value = wanted.pk if wanted is not None else None
            else:
                current, wanted_value = getattr(obj, attr), wanted
            if current != wanted_value:
                changed.append(attr)
        return changed

    def _clean(self, entry: Entry, obj: models.Model) -> None:
        self._checked(entry, obj.full_clean)

    @staticmethod
    def _checked(entry: Entry, check: Callable[[], None]) -> None:
        """Run a validation and restate its errors with the entry's label and file keys."""
        try:
            check()
        except ValidationError as exc:
            raise ScenarioError(entry.label, _validation_message(entry.section, exc)) from exc

    def _count(self, entry: Entry, outcome: str) -> None:
        self.report.counts[entry.section.key][outcome] += 1


_SECTION_MODELS: dict[str, type[models.Model]] = {
    "geographies": Geography,
    "regions": Region,
    "zones": Zone,
    "region_links": RegionLink,
    "accelerators": AcceleratorType,
    "inventory": ZoneInventory,
    "models": LlmModel,
    "replica_shapes": ReplicaShape,
    "workload_classes": WorkloadClass,
    "capacity_figures": CapacityFigure,
    "tiers": Tier,
    "tenants": Tenant,
    "quotas": TenantQuota,
    "workload_profiles": WorkloadProfile,
}


def _validation_message(spec: SectionSpec, exc: ValidationError) -> str:
    """``field: message; field: message`` with the file's field names."""
    if not hasattr(exc, "error_dict"):
        return " ".join(exc.messages)
    parts = []
    for attr, messages in exc.message_dict.items():
        text = " ".join(messages)
        parts.append(text if attr == "__all__" else f"{spec.key_for_attr(attr)}: {text}")
    return "; ".join(parts)


# -- placement problem ------------------------------------------------------------------------


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
    for shape, figure in _shapes_with_figures(say):
        shapes.append(
            {
                "name": shape.name,
                "model": shape.model.name,
                "accelerator": shape.accelerator.name,
                "gpus": shape.gpus_per_replica,
                "prefill_tokens_per_s": _num(figure.prefill_tokens_per_s),
                "decode_tokens_per_s": _num(figure.decode_tokens_per_s),
                "max_concurrency": figure.max_concurrency,
                "target_utilization": _num(
                    shape.target_utilization
                    if shape.target_utilization is not None
                    else default_target
                ),
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

    return {
        "format": PROBLEM_FORMAT,
        "target_utilization": _num(default_target),
        "regions": regions,
        "accelerators": accelerators,
        "inventory": inventory,
        "shapes": shapes,
        "rtt_ms": rtt,
        "demands": demands,
    }


def _shapes_with_figures(
    say: Callable[[str], None],
) -> list[tuple[ReplicaShape, CapacityFigure]]:
    """Each shape with the figure planning uses: the freshest for the whole mix (no workload
    class), else the freshest of any class; shapes with no figure are reported and skipped."""
    chosen: dict[int, CapacityFigure] = {}
    figures = CapacityFigure.objects.order_by("-measured_at", "-pk")
    for figure in figures:
        current = chosen.get(figure.shape_id)
        # Ordered freshest first: keep the first figure, unless a whole-mix figure comes
        # after a per-class one.
        if current is None or (
            current.workload_class_id is not None and figure.workload_class_id is None
        ):
            chosen[figure.shape_id] = figure
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
        if tenant.spill_allowed and tenant.max_spill_rtt_ms is not None:
            demand["max_spill_rtt_ms"] = _num(tenant.max_spill_rtt_ms)
        demand["promise"] = tier.failure_promise
        demand["priority"] = tier.priority
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
    default_target = float(problem.get("target_utilization", 0.7))
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
