"""The scenario file format: its sections, their fields and types, checked before any database
work.

A scenario is a YAML or JSON mapping of sections (``regions``, ``tenants`` …), each a list of
entries. This module reads the file, checks every entry's shape (known fields, required fields
present, the right types, no entry twice) and hands back :class:`Scenario`, whose entries carry a
label such as ``tenants[2] (acme)`` so that every later error can name the entry it is about.
References between entries (a tenant's ``home_region``) and the models' own validation are the
loader's job (``controlplane.scenarios.services``), because they need the database.

The format is documented field by field in ``docs/scenarios/README.md``.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.utils.dateparse import parse_date, parse_datetime

SCENARIO_FORMAT = "headroom-scenario/v1"
# libyaml's safe loader when PyYAML was built with it: several times faster, same results.
_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ScenarioError(Exception):
    """A scenario that cannot be loaded.

    ``where`` names the entry (``tenants[2] (acme)``) or the file; ``message`` says what is
    wrong, starting with the field where there is one (``home_region: unknown region 'x'``).
    """

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.message = message


class Kind(enum.Enum):
    TEXT = "a string"
    NUMBER = "a number"
    INTEGER = "a whole number"
    BOOLEAN = "true or false"
    TEXT_LIST = "a list of strings"
    MAPPING = "a mapping"
    DATETIME = "an ISO 8601 date-time"
    ENTRIES = "a list of entries"


@dataclass(frozen=True)
class FieldSpec:
    """One field of an entry.

    ``key`` is the name in the file, dotted for a nested mapping (``prompt_tokens.p50``);
    ``attr`` the model attribute it sets. ``ref`` names the kind of entity a string refers to
    (``region``), resolved by name when loading.
    """

    key: str
    attr: str
    kind: Kind
    required: bool = False
    nullable: bool = False
    ref: str | None = None
    children: SectionSpec | None = None


@dataclass(frozen=True)
class SectionSpec:
    """A list of entries of one kind, e.g. ``tenants``.

    ``natural_key`` lists the field keys that identify an entry, with the value an absent key
    stands for; ``unordered_key`` makes the key a set (a region link holds both ways).
    """

    key: str
    entity: str
    fields: tuple[FieldSpec, ...]
    natural_key: tuple[tuple[str, Any], ...]
    describe: Callable[[Mapping[str, Any]], str]
    unordered_key: bool = False

    def field_for_key(self, key: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.key == key), None)

    def key_for_attr(self, attr: str) -> str:
        """The file key that sets a model attribute (for naming fields in model errors)."""
        return next((f.key for f in self.fields if f.attr == attr), attr)


@dataclass(frozen=True)
class Entry:
    """One checked entry. ``values`` holds the keys present in the file (dotted for nested
    ones), converted to Python values; ``children`` the nested entries (a region's zones)."""

    section: SectionSpec
    index: int
    label: str
    values: dict[str, Any]
    children: dict[str, list[Entry]] = field(default_factory=dict)

    def has(self, key: str) -> bool:
        return key in self.values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def natural_key(self) -> tuple[Any, ...] | frozenset[Any]:
        parts = tuple(self.values.get(k, absent) for k, absent in self.section.natural_key)
        return frozenset(parts) if self.section.unordered_key else parts


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    sections: dict[str, list[Entry]]

    def entries(self, section: str) -> list[Entry]:
        return self.sections.get(section, [])


def _name(values: Mapping[str, Any]) -> str:
    name = values.get("name")
    return name if isinstance(name, str) else ""


def _joined(*keys: str, sep: str = "/") -> Callable[[Mapping[str, Any]], str]:
    def describe(values: Mapping[str, Any]) -> str:
        parts = [values.get(k) for k in keys]
        return sep.join(p if isinstance(p, str) else "?" for p in parts)

    return describe


def _describe_figure(values: Mapping[str, Any]) -> str:
    shape = values.get("shape")
    cls = values.get("workload_class")
    text = f"{shape if isinstance(shape, str) else '?'}/{cls if isinstance(cls, str) else 'all'}"
    measured = values.get("measured_at")
    return f"{text} @ {measured}" if measured is not None else text


def _describe_profile(values: Mapping[str, Any]) -> str:
    text = _joined("tenant", "model", "workload_class")(values)
    region = values.get("region")
    if isinstance(region, str):
        text += f"@{region}"
    version = values.get("version")
    return f"{text} v{version}" if isinstance(version, int) else text


def _text(key: str, attr: str | None = None, **kw: Any) -> FieldSpec:
    return FieldSpec(key, attr or key, Kind.TEXT, **kw)


def _number(key: str, attr: str | None = None, **kw: Any) -> FieldSpec:
    return FieldSpec(key, attr or key, Kind.NUMBER, **kw)


def _integer(key: str, attr: str | None = None, **kw: Any) -> FieldSpec:
    return FieldSpec(key, attr or key, Kind.INTEGER, **kw)


def _percentiles(kind: str) -> tuple[FieldSpec, ...]:
    return tuple(
        _number(f"{kind}_tokens.{p}", f"{kind}_tokens_{p}", required=True)
        for p in ("p50", "mean", "p95", "p99")
    )


ZONES = SectionSpec(
    key="zones",
    entity="zone",
    fields=(_text("name", required=True), _text("state")),
    natural_key=(("name", None),),
    describe=_name,
)

# In loading order: every section refers only to sections above it.
SECTIONS: tuple[SectionSpec, ...] = (
    SectionSpec(
        key="geographies",
        entity="geography",
        fields=(_text("name", required=True), _text("description")),
        natural_key=(("name", None),),
        describe=_name,
    ),
    SectionSpec(
        key="regions",
        entity="region",
        fields=(
            _text("name", required=True),
            _text("geography", required=True, ref="geography"),
            _number("price_multiplier"),
            _text("actuation"),
            FieldSpec("zones", "zones", Kind.ENTRIES, children=ZONES),
        ),
        natural_key=(("name", None),),
        describe=_name,
    ),
    SectionSpec(
        key="region_links",
        entity="region link",
        fields=(
            _text("region_a", required=True, ref="region"),
            _text("region_b", required=True, ref="region"),
            _number("rtt_ms", required=True),
        ),
        natural_key=(("region_a", None), ("region_b", None)),
        describe=_joined("region_a", "region_b", sep=" <-> "),
        unordered_key=True,
    ),
    SectionSpec(
        key="accelerators",
        entity="accelerator",
        fields=(
            _text("name", required=True),
            _number("memory_gb", required=True),
            _number("peak_bf16_tflops", required=True),
            _number("memory_tbps", required=True),
            _number("on_demand_price_per_gpu_hour", required=True),
            _number("reserved_price_per_gpu_hour", required=True),
            _number("spot_price_per_gpu_hour", nullable=True),
            _text("gpu_product"),
        ),
        natural_key=(("name", None),),
        describe=_name,
    ),
    SectionSpec(
        key="inventory",
        entity="zone inventory",
        fields=(
            _text("zone", required=True, ref="zone"),
            _text("accelerator", required=True, ref="accelerator"),
            _integer("gpus_available", required=True),
        ),
        natural_key=(("zone", None), ("accelerator", None)),
        describe=_joined("zone", "accelerator"),
    ),
    SectionSpec(
        key="models",
        entity="model",
        fields=(
            _text("name", required=True),
            _number("parameters_billions", required=True),
            _number("bytes_per_parameter"),
            _integer("layers", required=True),
            _integer("kv_heads", required=True),
            _integer("head_dim", required=True),
            _number("kv_bytes_per_element"),
            _integer("hidden_size", nullable=True),
            _integer("intermediate_size", nullable=True),
            _integer("attention_heads", nullable=True),
            _integer("vocab_size", nullable=True),
        ),
        natural_key=(("name", None),),
        describe=_name,
    ),
    SectionSpec(
        key="replica_shapes",
        entity="replica shape",
        fields=(
            _text("name", required=True),
            _text("model", required=True, ref="model"),
            _text("accelerator", required=True, ref="accelerator"),
            _integer("gpus_per_replica", required=True),
            _number("runtime_reserve_gb_per_gpu"),
            _number("target_utilization", nullable=True),
            _text("runtime_version"),
            _text("container_image"),
            _text("model_path"),
            _integer("max_model_len", nullable=True),
            FieldSpec("extra_args", "extra_args", Kind.TEXT_LIST),
        ),
        natural_key=(("name", None),),
        describe=_name,
    ),
    SectionSpec(
        key="hosted_providers",
        entity="hosted provider",
        fields=(
            _text("name", required=True),
            _text("region", required=True, ref="region"),
            FieldSpec("models", "served_models", Kind.TEXT_LIST, required=True, ref="model"),
            _number("input_price_per_mtok", required=True),
            _number("output_price_per_mtok", required=True),
            _integer("tpm_limit", required=True),
            _integer("rpm_limit", nullable=True),
            _number("p95_ttft_s", required=True),
            FieldSpec("enabled", "enabled", Kind.BOOLEAN),
        ),
        natural_key=(("name", None),),
        describe=_name,
    ),
    SectionSpec(
        key="workload_classes",
        entity="workload class",
        fields=(_text("name", required=True), _text("description")),
        natural_key=(("name", None),),
        describe=_name,
    ),
    SectionSpec(
        key="capacity_figures",
        entity="capacity figure",
        fields=(
            _text("shape", required=True, ref="replica shape"),
            _text("workload_class", nullable=True, ref="workload class"),
            _number("prefill_tokens_per_s", required=True),
            _number("decode_tokens_per_s", required=True),
            _integer("max_concurrency", required=True),
            _number("knee_requests_per_s", nullable=True),
            FieldSpec("measured_at", "measured_at", Kind.DATETIME),
            _text("source"),
            FieldSpec("provenance", "provenance", Kind.MAPPING),
        ),
        natural_key=(("shape", None), ("workload_class", None), ("measured_at", None)),
        describe=_describe_figure,
    ),
    SectionSpec(
        key="tiers",
        entity="tier",
        fields=(
            _text("name", required=True),
            _number("p95_ttft_slo_s", required=True),
            _number("p95_itl_slo_s"),
            _text("failure_promise"),
            _integer("priority"),
            _number("target_utilization"),
            _number("burst_factor"),
            _number("forecast_quantile"),
            FieldSpec("hosted_overflow", "hosted_overflow", Kind.BOOLEAN),
        ),
        natural_key=(("name", None),),
        describe=_name,
    ),
    SectionSpec(
        key="tenants",
        entity="tenant",
        fields=(
            _text("name", required=True),
            _text("display_name"),
            _text("tier", required=True, ref="tier"),
            _text("home_region", required=True, ref="region"),
            _text("residency_geography", nullable=True, ref="geography"),
            FieldSpec("residency_regions", "residency_regions", Kind.TEXT_LIST, ref="region"),
            FieldSpec("spill_allowed", "spill_allowed", Kind.BOOLEAN),
            _number("max_spill_rtt_ms", nullable=True),
            _number("fair_share_weight"),
        ),
        natural_key=(("name", None),),
        describe=_name,
    ),
    SectionSpec(
        key="quotas",
        entity="tenant quota",
        fields=(
            _text("tenant", required=True, ref="tenant"),
            _number("budget_rate_replica_s_per_s", required=True),
            _number("budget_burst_replica_s", required=True),
            _integer("tokens_per_minute_limit", nullable=True),
            _integer("tokens_per_minute_burst", nullable=True),
        ),
        natural_key=(("tenant", None),),
        describe=_joined("tenant"),
    ),
    SectionSpec(
        key="workload_profiles",
        entity="workload profile",
        fields=(
            _text("tenant", required=True, ref="tenant"),
            _text("model", required=True, ref="model"),
            _text("workload_class", required=True, ref="workload class"),
            _text("region", nullable=True, ref="region"),
            _integer("version"),
            _text("source"),
            _number("peak_requests_per_s", required=True),
            *_percentiles("prompt"),
            *_percentiles("output"),
            _number("prefix_cache_hit_rate"),
            _number("residence_s", nullable=True),
        ),
        natural_key=(
            ("tenant", None),
            ("model", None),
            ("workload_class", None),
            ("region", None),
            ("version", 1),
        ),
        describe=_describe_profile,
    ),
)

SECTIONS_BY_KEY = {s.key: s for s in SECTIONS}
_TOP_LEVEL_TEXT = ("format", "name", "description")


def scenario_read(path: Path | str) -> Any:
    """Parse a scenario file: JSON for ``.json``, YAML otherwise (YAML also reads JSON)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(str(path), f"cannot read the file: {exc}") from exc
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioError(
                str(path), f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from exc
    try:
        return yaml.load(text, Loader=_YAML_LOADER)  # safe: the C or Python SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "not valid YAML"
        raise ScenarioError(str(path), f"YAML syntax error{at}: {problem}") from exc
    except yaml.YAMLError as exc:
        raise ScenarioError(str(path), f"YAML syntax error: {exc}") from exc


def scenario_parse(data: Any, *, source: str = "scenario") -> Scenario:
    """Check the shape of parsed scenario data; raise :class:`ScenarioError` at the first fault.

    ``source`` names the data in messages about the whole file (its path, usually).
    """
    if not isinstance(data, Mapping):
        raise ScenarioError(source, f"expected a mapping of sections, got {_type_name(data)}")
    unknown = sorted(str(k) for k in data if k not in SECTIONS_BY_KEY and k not in _TOP_LEVEL_TEXT)
    if unknown:
        known = ", ".join([*_TOP_LEVEL_TEXT, *SECTIONS_BY_KEY])
        raise ScenarioError(source, f"unknown section '{unknown[0]}'; known: {known}")
    for key in _TOP_LEVEL_TEXT:
        if key in data and not isinstance(data[key], str):
            raise ScenarioError(source, f"{key}: expected a string, got {_type_name(data[key])}")
    if "format" in data and data["format"] != SCENARIO_FORMAT:
        raise ScenarioError(source, f"format: expected '{SCENARIO_FORMAT}', got '{data['format']}'")
    sections: dict[str, list[Entry]] = {}
    for spec in SECTIONS:
        raw = data.get(spec.key)
        if raw is None:
            sections[spec.key] = []
            continue
        sections[spec.key] = _parse_entries(spec, raw, prefix="")
    _check_unique(sections["regions"], "zones")
    return Scenario(
        name=str(data.get("name") or ""),
        description=str(data.get("description") or ""),
        sections=sections,
    )


def _parse_entries(spec: SectionSpec, raw: Any, *, prefix: str) -> list[Entry]:
    where = f"{prefix}{spec.key}"
    if not isinstance(raw, list):
        raise ScenarioError(where, f"expected a list of entries, got {_type_name(raw)}")
    entries = [_parse_entry(spec, i, item, prefix=prefix) for i, item in enumerate(raw)]
    first: dict[Any, Entry] = {}
    for entry in entries:
        earlier = first.setdefault(entry.natural_key, entry)
        if earlier is not entry:
            raise ScenarioError(entry.label, f"duplicate of {earlier.label}")
    return entries


def _check_unique(parents: Sequence[Entry], child_key: str) -> None:
    """Child entries (zones) are unique across all parents, not only within one."""
    first: dict[Any, Entry] = {}
    for parent in parents:
        for entry in parent.children.get(child_key, []):
            earlier = first.setdefault(entry.natural_key, entry)
            if earlier is not entry:
                raise ScenarioError(entry.label, f"duplicate of {earlier.label}")


def _parse_entry(spec: SectionSpec, index: int, item: Any, *, prefix: str) -> Entry:
    if spec is ZONES and isinstance(item, str):
        item = {"name": item}  # a zone may be given by its name alone
    bare = f"{prefix}{spec.key}[{index}]"
    if not isinstance(item, Mapping):
        raise ScenarioError(bare, f"expected a mapping, got {_type_name(item)}")
    described = spec.describe(item)
    label = f"{bare} ({described})" if described else bare

    nested = {f.key.split(".", 1)[0] for f in spec.fields if "." in f.key}
    top_keys = {f.key for f in spec.fields if "." not in f.key} | nested
    for key in item:
        if key not in top_keys:
            raise ScenarioError(label, f"unknown field '{key}'")
    for group in sorted(nested):
        if group in item and not isinstance(item[group], Mapping):
            raise ScenarioError(
                label, f"{group}: expected a mapping, got {_type_name(item[group])}"
            )
        allowed = {f.key.split(".", 1)[1] for f in spec.fields if f.key.startswith(group + ".")}
        for sub in item.get(group) or {}:
            if sub not in allowed:
                raise ScenarioError(label, f"unknown field '{group}.{sub}'")

    values: dict[str, Any] = {}
    children: dict[str, list[Entry]] = {}
    for f in spec.fields:
        present, raw = _lookup(item, f.key)
        if not present:
            if f.required:
                raise ScenarioError(label, f"{f.key}: required field missing")
            continue
        if raw is None:
            if f.nullable:
                values[f.key] = None
                continue
            raise ScenarioError(label, f"{f.key}: expected {f.kind.value}, got null")
        if f.kind is Kind.ENTRIES:
            assert f.children is not None
            children[f.key] = _parse_entries(f.children, raw, prefix=f"{label}.")
            continue
        values[f.key] = _convert(label, f, raw)
    return Entry(section=spec, index=index, label=label, values=values, children=children)


def _lookup(item: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    node: Any = item
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _convert(label: str, f: FieldSpec, raw: Any) -> Any:
    def wrong() -> ScenarioError:
        shown = f"'{raw}'" if isinstance(raw, str) else _type_name(raw)
        return ScenarioError(label, f"{f.key}: expected {f.kind.value}, got {shown}")

    match f.kind:
        case Kind.TEXT:
            if not isinstance(raw, str):
                raise wrong()
            return raw
        case Kind.NUMBER:
            # bool is an int in Python; "true" is never meant as a number.
            if isinstance(raw, bool) or not isinstance(raw, int | float):
                raise wrong()
            if not math.isfinite(raw):
                raise ScenarioError(label, f"{f.key}: expected a finite number, got {raw}")
            return raw
        case Kind.INTEGER:
            if isinstance(raw, float) and raw.is_integer():
                return int(raw)
            if isinstance(raw, bool) or not isinstance(raw, int):
                raise wrong()
            return raw
        case Kind.BOOLEAN:
            if not isinstance(raw, bool):
                raise wrong()
            return raw
        case Kind.TEXT_LIST:
            if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
                raise wrong()
            return list(raw)
        case Kind.MAPPING:
            if not isinstance(raw, Mapping):
                raise wrong()
            return dict(raw)
        case Kind.DATETIME:
            return _datetime(raw, wrong)
    raise AssertionError(f"unhandled kind {f.kind}")  # pragma: no cover


def _datetime(raw: Any, wrong: Callable[[], ScenarioError]) -> dt.datetime:
    """A date-time from YAML (already parsed) or from an ISO 8601 string; naive means UTC."""
    value: dt.datetime | None
    if isinstance(raw, dt.datetime):
        value = raw
    elif isinstance(raw, dt.date):
        value = dt.datetime.combine(raw, dt.time())
    elif isinstance(raw, str):
        try:
            value = parse_datetime(raw)
            if value is None:
                day = parse_date(raw)
                value = dt.datetime.combine(day, dt.time()) if day else None
        except ValueError:
            value = None
    else:
        value = None
    if value is None:
        raise wrong()
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__
