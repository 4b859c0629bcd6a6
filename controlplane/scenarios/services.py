"""Scenario loading.

``scenario_load`` makes the database hold what a scenario file declares: every entry is matched
to its row by natural key (a name; (zone, accelerator); (tenant, model, class, region,
version) …), compared field by field, and created or updated only where it differs, so loading
the same file twice writes nothing the second time (no saves, no history rows). Every record
goes through ``full_clean()`` and tenants also through ``validate_residency_regions``; the
whole load is one transaction, so a bad entry leaves the database as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import models, transaction

from controlplane.fleet.models import (
    AcceleratorType,
    CapacityFigure,
    Geography,
    HostedProvider,
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

    def _load_hosted_providers(self, entry: Entry) -> None:
        served: list[LlmModel] = []
        for name in entry.get("models", []):
            model = self._named(entry, "models", "model", name)
            assert isinstance(model, LlmModel)
            if model not in served:
                served.append(model)
        if not served:
            raise ScenarioError(entry.label, "models: name at least one model the provider serves")
        values = {**self.plain(entry), "region": self.ref(entry, "region")}
        self.upsert(
            entry,
            HostedProvider,
            key={"name": entry.get("name")},
            values=values,
            m2m={"served_models": served},
        )

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
        # _history_user and _change_reason are simple_history's per-instance inputs to the
        # history row the next save writes; the model's type does not declare them.
        if changed:
            obj._history_user = self.user  # type: ignore[attr-defined]
            obj._change_reason = self.reason  # type: ignore[attr-defined]
            obj.save()
        for name in m2m_changed:
            obj._history_user = self.user  # type: ignore[attr-defined]
            obj._change_reason = self.reason  # type: ignore[attr-defined]
            getattr(obj, name).set(m2m[name])
        if key is not None and "name" in key:
            self._by_name[(model, str(key["name"]))] = obj
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
    "hosted_providers": HostedProvider,
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
