"""Scenario loading: the shipped scenario, idempotence, all-or-nothing, named errors, the
command's output and exit status."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.apps import apps
from django.core.management import CommandError, call_command

from controlplane.fleet.models import CapacityFigure, Region, RegionLink, Zone
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile
from controlplane.scenarios.schema import ScenarioError
from controlplane.scenarios.services import scenario_load

REPO = Path(__file__).resolve().parents[2]
SUPPORT_ASSISTANT = REPO / "docs" / "scenarios" / "support-assistant.yaml"


def base_scenario() -> dict[str, Any]:
    """A small valid scenario: one region per geography, three tenants (``acme`` third)."""
    return {
        "format": "headroom-scenario/v1",
        "name": "small",
        "geographies": [{"name": "eu"}, {"name": "us"}],
        "regions": [
            {"name": "eu-west", "geography": "eu", "zones": ["eu-west-a", "eu-west-b"]},
            {
                "name": "us-east",
                "geography": "us",
                "zones": [{"name": "us-east-a", "state": "degraded"}],
            },
        ],
        "region_links": [{"region_a": "eu-west", "region_b": "us-east", "rtt_ms": 90}],
        "accelerators": [
            {
                "name": "gpu80",
                "memory_gb": 80,
                "peak_bf16_tflops": 990,
                "memory_tbps": 3.35,
                "on_demand_price_per_gpu_hour": 4.0,
                "reserved_price_per_gpu_hour": 2.6,
            }
        ],
        "inventory": [
            {"zone": "eu-west-a", "accelerator": "gpu80", "gpus_available": 16},
            {"zone": "us-east-a", "accelerator": "gpu80", "gpus_available": 32},
        ],
        "models": [
            {
                "name": "chat-70b",
                "parameters_billions": 70,
                "layers": 80,
                "kv_heads": 8,
                "head_dim": 128,
            }
        ],
        "replica_shapes": [
            {
                "name": "chat-70b/gpu80x2",
                "model": "chat-70b",
                "accelerator": "gpu80",
                "gpus_per_replica": 2,
            }
        ],
        "workload_classes": [{"name": "policy-question"}],
        "capacity_figures": [
            {
                "shape": "chat-70b/gpu80x2",
                "prefill_tokens_per_s": 4000,
                "decode_tokens_per_s": 160,
                "max_concurrency": 12,
            }
        ],
        "tiers": [
            {"name": "gold", "p95_ttft_slo_s": 1.5, "failure_promise": "zone"},
            {"name": "bronze", "p95_ttft_slo_s": 5, "priority": 2},
        ],
        "tenants": [
            {"name": "globex", "tier": "gold", "home_region": "us-east"},
            {
                "name": "initech",
                "tier": "bronze",
                "home_region": "us-east",
                "spill_allowed": True,
                "max_spill_rtt_ms": 120,
            },
            {
                "name": "acme",
                "tier": "gold",
                "home_region": "eu-west",
                "residency_geography": "eu",
                "residency_regions": ["eu-west"],
            },
        ],
        "quotas": [
            {
                "tenant": "acme",
                "budget_rate_replica_s_per_s": 2.0,
                "budget_burst_replica_s": 6.0,
                "tokens_per_minute_limit": 100000,
                "tokens_per_minute_burst": 150000,
            }
        ],
        "workload_profiles": [
            {
                "tenant": "acme",
                "model": "chat-70b",
                "workload_class": "policy-question",
                "peak_requests_per_s": 1.5,
                "prompt_tokens": {"p50": 1100, "mean": 1500, "p95": 4000, "p99": 6900},
                "output_tokens": {"p50": 70, "mean": 100, "p95": 280, "p99": 500},
                "prefix_cache_hit_rate": 0.35,
            }
        ],
    }


def write(tmp_path: Path, data: Any, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text(json.dumps(data), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def db_snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every row of the fleet and policy tables, history and many-to-many tables included."""
    snapshot = {}
    for label in ("fleet", "policies"):
        for model in apps.get_app_config(label).get_models(include_auto_created=True):
            rows = list(model._default_manager.order_by("pk").values())
            snapshot[model._meta.label] = rows
    return snapshot


def history_counts() -> dict[str, int]:
    return {label: len(rows) for label, rows in db_snapshot().items() if "Historical" in label}


# -- the shipped scenario ---------------------------------------------------------------------


@pytest.mark.django_db
def test_support_assistant_loads_with_the_seeds_figures() -> None:
    report = scenario_load(path=SUPPORT_ASSISTANT)

    assert report.name == "support-assistant"
    assert report.total("updated") == report.total("unchanged") == 0
    assert report.counts["zones"]["created"] == 6
    assert report.counts["workload_profiles"]["created"] == 21
    assert {z.name for z in Zone.objects.filter(region__name="eu-west")} == {
        "eu-west-a",
        "eu-west-b",
        "eu-west-c",
    }
    link = RegionLink.objects.get()
    assert link.rtt_ms == 90
    shape2 = CapacityFigure.objects.get(shape__name="chat-70b/gpu80x2", workload_class=None)
    assert (shape2.prefill_tokens_per_s, shape2.decode_tokens_per_s) == (4000, 160)
    # 140 GB of weights: 8 GB of KV pool on two 80 GB GPUs, 156 GB on four (the seeds).
    assert shape2.shape.model.weight_bytes == pytest.approx(140e9)
    assert shape2.shape.kv_pool_gb == pytest.approx(8.0)
    four = CapacityFigure.objects.get(shape__name="chat-70b/gpu80x4").shape
    assert four.kv_pool_gb == pytest.approx(156.0)

    profiles = list(WorkloadProfile.objects.select_related("tenant", "region"))
    total = sum(p.peak_requests_per_s for p in profiles)
    assert total == pytest.approx(8.0)
    eu = sum(
        p.peak_requests_per_s
        for p in profiles
        if (p.region or p.tenant.home_region).name == "eu-west"
    )
    assert eu / total == pytest.approx(0.30)
    resident = sum(
        p.peak_requests_per_s for p in profiles if p.tenant.residency_geography is not None
    )
    eu_resident = sum(
        p.peak_requests_per_s
        for p in profiles
        if p.tenant.residency_geography is not None and p.tenant.residency_geography.name == "eu"
    )
    assert eu_resident / total == pytest.approx(0.22)
    assert resident > eu_resident  # the US premium tenant is bound to its geography too
    by_class: dict[str, float] = {}
    for p in profiles:
        by_class[p.workload_class.name] = (
            by_class.get(p.workload_class.name, 0.0) + p.peak_requests_per_s
        )
    assert by_class["policy-question"] / total == pytest.approx(0.85)
    assert by_class["order-lookup"] / total == pytest.approx(0.14)
    assert by_class["long-summary"] / total == pytest.approx(0.01)
    means = {p.workload_class.name: (p.prompt_tokens_mean, p.output_tokens_mean) for p in profiles}
    assert means == {
        "policy-question": (1300, 80),
        "order-lookup": (3200, 150),
        "long-summary": (9000, 400),
    }
    assert {p.prefix_cache_hit_rate for p in profiles} == {0.35}

    tiers = {t.name: t for t in Tier.objects.all()}
    assert tiers["premium"].failure_promise == "zone"
    assert tiers["premium"].p95_ttft_slo_s == 1.5
    assert tiers["standard"].failure_promise == "n+1"
    assert tiers["free"].failure_promise == "none"
    assert tiers["free"].priority > tiers["standard"].priority
    assert tiers["batch"].priority == max(t.priority for t in tiers.values())
    nordlicht = Tenant.objects.get(name="nordlicht-versicherung")
    assert [r.name for r in nordlicht.allowed_regions()] == ["eu-west"]
    assert TenantQuota.objects.count() == Tenant.objects.count() == 5


@pytest.mark.django_db
def test_loading_twice_changes_nothing() -> None:
    first = scenario_load(path=SUPPORT_ASSISTANT)
    before = db_snapshot()
    revisions = {t.pk: t.revision for t in Tenant.objects.all()}

    second = scenario_load(path=SUPPORT_ASSISTANT)

    assert second.total("created") == 0
    assert second.total("updated") == 0
    assert second.total("unchanged") == first.total("created")
    assert second.changes == []
    assert db_snapshot() == before  # no new rows anywhere, history rows included
    assert {t.pk: t.revision for t in Tenant.objects.all()} == revisions


@pytest.mark.django_db
def test_a_changed_entry_is_updated_alone_with_one_history_row(tmp_path: Path) -> None:
    data = base_scenario()
    scenario_load(data=data)
    before = history_counts()
    tier = Tier.objects.get(name="gold")

    data["tiers"][0]["burst_factor"] = 1.5
    data["tenants"][1]["spill_allowed"] = False  # max_spill_rtt_ms stays: still valid
    report = scenario_load(path=write(tmp_path, data))

    assert report.counts["tiers"] == {"created": 0, "updated": 1, "unchanged": 1}
    assert report.counts["tenants"] == {"created": 0, "updated": 1, "unchanged": 2}
    assert report.total("created") == 0
    assert report.total("updated") == 2
    assert "tiers[0] (gold): updated burst_factor" in report.changes
    after = history_counts()
    assert after["policies.HistoricalTier"] == before["policies.HistoricalTier"] + 1
    assert after["policies.HistoricalTenant"] == before["policies.HistoricalTenant"] + 1
    assert after["fleet.HistoricalRegion"] == before["fleet.HistoricalRegion"]
    updated = Tier.objects.get(name="gold")
    assert updated.burst_factor == 1.5
    assert updated.revision == tier.revision + 1
    latest = updated.history.first()
    assert latest is not None
    assert latest.history_change_reason == "scenario small"


@pytest.mark.django_db
def test_an_absent_optional_field_returns_to_its_default() -> None:
    data = base_scenario()
    data["tiers"][1]["burst_factor"] = 1.2
    scenario_load(data=data)
    del data["tiers"][1]["burst_factor"]

    report = scenario_load(data=data)

    assert report.counts["tiers"]["updated"] == 1
    assert Tier.objects.get(name="bronze").burst_factor == 1.0


@pytest.mark.django_db
def test_residency_regions_are_compared_as_a_set() -> None:
    data = base_scenario()
    data["regions"].append({"name": "eu-central", "geography": "eu", "zones": ["eu-central-a"]})
    scenario_load(data=data)

    data["tenants"][2]["residency_regions"] = ["eu-central", "eu-west"]
    report = scenario_load(data=data)
    assert report.counts["tenants"]["updated"] == 1
    assert "tenants[2] (acme): updated residency_regions" in report.changes
    acme = Tenant.objects.get(name="acme")
    assert [r.name for r in acme.allowed_regions()] == ["eu-central", "eu-west"]

    data["tenants"][2]["residency_regions"] = ["eu-west", "eu-central"]  # same set
    assert scenario_load(data=data).total("updated") == 0


@pytest.mark.django_db
def test_a_region_link_matches_either_direction() -> None:
    data = base_scenario()
    scenario_load(data=data)
    data["region_links"] = [{"region_a": "us-east", "region_b": "eu-west", "rtt_ms": 95}]

    report = scenario_load(data=data)

    assert report.counts["region_links"] == {"created": 0, "updated": 1, "unchanged": 0}
    link = RegionLink.objects.get()
    assert (link.region_a.name, link.region_b.name, link.rtt_ms) == ("eu-west", "us-east", 95)


@pytest.mark.django_db
def test_capacity_figures_with_and_without_a_date() -> None:
    data = base_scenario()
    dated = {
        "shape": "chat-70b/gpu80x2",
        "workload_class": "policy-question",
        "prefill_tokens_per_s": 4200,
        "decode_tokens_per_s": 170,
        "max_concurrency": 10,
        "measured_at": "2025-03-01T12:00:00Z",
        "source": "endpoint-load-test",
        "provenance": {"run": "lt-17"},
    }
    data["capacity_figures"].append(dated)
    scenario_load(data=data)
    assert scenario_load(data=data).counts["capacity_figures"]["unchanged"] == 2

    # A dated figure is matched by (shape, class, date) and updated in place.
    dated["decode_tokens_per_s"] = 175
    report = scenario_load(data=data)
    assert report.counts["capacity_figures"] == {"created": 0, "updated": 1, "unchanged": 1}
    # An undated figure whose numbers change is a new measurement; the old one stays.
    data["capacity_figures"][0]["decode_tokens_per_s"] = 150
    report = scenario_load(data=data)
    assert report.counts["capacity_figures"] == {"created": 1, "updated": 0, "unchanged": 1}
    assert CapacityFigure.objects.filter(workload_class=None).count() == 2
    freshest = CapacityFigure.objects.filter(workload_class=None).order_by("-measured_at")[0]
    assert freshest.decode_tokens_per_s == 150


@pytest.mark.django_db
def test_json_loads_like_yaml(tmp_path: Path) -> None:
    data = yaml.safe_load(SUPPORT_ASSISTANT.read_text(encoding="utf-8"))
    path = write(tmp_path, data, "support-assistant.json")

    created = scenario_load(path=path)
    again = scenario_load(path=SUPPORT_ASSISTANT)

    assert created.total("created") == 62
    assert again.total("created") == again.total("updated") == 0


@pytest.mark.django_db
def test_dry_run_checks_and_saves_nothing() -> None:
    before = db_snapshot()

    report = scenario_load(path=SUPPORT_ASSISTANT, dry_run=True)

    assert report.dry_run
    assert report.total("created") == 62
    assert db_snapshot() == before
    assert "dry run" in report.lines()[0]


# -- all or nothing ---------------------------------------------------------------------------


def _fifth_entity_broken() -> dict[str, Any]:
    """Four valid entities (two geographies, a region, its zone), then an invalid fifth."""
    return {
        "geographies": [{"name": "eu"}, {"name": "us"}],
        "regions": [
            {"name": "eu-west", "geography": "eu", "zones": ["eu-west-a", "eu-west-b"]},
        ],
        "tiers": [{"name": "gold", "p95_ttft_slo_s": 1.5}],
    }


@pytest.mark.django_db
def test_a_broken_fifth_entity_on_an_empty_database_saves_nothing(tmp_path: Path) -> None:
    data = _fifth_entity_broken()
    data["regions"][0]["zones"][1] = {"name": "eu-west-b", "state": "sideways"}
    before = db_snapshot()

    with pytest.raises(ScenarioError) as caught:
        scenario_load(path=write(tmp_path, data))

    assert str(caught.value).startswith("regions[0] (eu-west).zones[1] (eu-west-b): state: ")
    assert "sideways" in str(caught.value)
    assert db_snapshot() == before


@pytest.mark.django_db
def test_a_broken_file_leaves_a_loaded_database_exactly_as_it_was(tmp_path: Path) -> None:
    scenario_load(path=SUPPORT_ASSISTANT)
    data = yaml.safe_load(SUPPORT_ASSISTANT.read_text(encoding="utf-8"))
    # Updates and creations that would succeed before the bad entry ...
    data["tiers"][0]["burst_factor"] = 2.0
    data["geographies"].append({"name": "ap"})
    data["regions"][0]["zones"].append("eu-west-d")
    # ... then the fifth tenant refers to a region that does not exist.
    data["tenants"][4]["home_region"] = "eu-wst"
    before = db_snapshot()

    with pytest.raises(ScenarioError) as caught:
        scenario_load(path=write(tmp_path, data))

    assert str(caught.value) == (
        "tenants[4] (parcelpoint-logistics): home_region: unknown region 'eu-wst'"
    )
    assert db_snapshot() == before


# -- errors name the entry --------------------------------------------------------------------


def _set(path: str, value: Any) -> Any:
    """A change to base_scenario(): set the value at a dotted path (list indices as numbers)."""

    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return change


_DELETE = object()

BROKEN = [
    pytest.param(
        _set("tenants.2.home_region", "eu-wst"),
        "tenants[2] (acme): home_region: unknown region 'eu-wst'",
        id="unknown-reference",
    ),
    pytest.param(
        _set("replica_shapes.0.gpus_per_replica", 1),
        "replica_shapes[0] (chat-70b/gpu80x2): gpus_per_replica: chat-70b needs 140.0 GB of "
        "weights per GPU on 1 × gpu80 plus 6 GB reserve, but each GPU has 80 GB: no room is "
        "left for the KV cache. Use more GPUs per replica or a larger accelerator.",
        id="model-validation",
    ),
    pytest.param(
        _set("accelerators.0.reserved_price_per_gpu_hour", 5.0),
        "accelerators[0] (gpu80): reserved_price_per_gpu_hour: Reserved price is above the "
        "on-demand price (5 > 4 per GPU-hour).",
        id="model-clean",
    ),
    pytest.param(
        _set("tiers.0.target_utilization", 1.5),
        "tiers[0] (gold): target_utilization: Must be at most 1.",
        id="field-validator",
    ),
    pytest.param(
        _set("tiers.0.p95_ttft_slo_s", _DELETE),
        "tiers[0] (gold): p95_ttft_slo_s: required field missing",
        id="missing-required-field",
    ),
    pytest.param(
        _set("inventory.1.gpus_available", "lots"),
        "inventory[1] (us-east-a/gpu80): gpus_available: expected a whole number, got 'lots'",
        id="wrong-type",
    ),
    pytest.param(
        _set("tenants.1.spill_allowed", "yes"),
        "tenants[1] (initech): spill_allowed: expected true or false, got 'yes'",
        id="wrong-type-boolean",
    ),
    pytest.param(
        _set("models.0.layers", True),
        "models[0] (chat-70b): layers: expected a whole number, got a boolean",
        id="boolean-is-not-a-number",
    ),
    pytest.param(
        _set("tenants.2.residency_regions", ["eu-west", "us-east"]),
        "tenants[2] (acme): residency_regions: us-east lie outside the residency geography eu.",
        id="residency-rule",
    ),
    pytest.param(
        _set("tenants.0.tier_name", "gold"),
        "tenants[0] (globex): unknown field 'tier_name'",
        id="unknown-field",
    ),
    pytest.param(
        _set("tiers.1.name", "gold"),
        "tiers[1] (gold): duplicate of tiers[0] (gold)",
        id="duplicate-entry",
    ),
    pytest.param(
        _set("regions.1.zones.0", "eu-west-a"),
        "regions[1] (us-east).zones[0] (eu-west-a): duplicate of regions[0] (eu-west).zones[0] "
        "(eu-west-a)",
        id="duplicate-zone-across-regions",
    ),
    pytest.param(
        _set("workload_profiles.0.prompt_tokens.p95", 900),
        "workload_profiles[0] (acme/chat-70b/policy-question): prompt_tokens.p95: p95 (900) is "
        "below p50 (1100).",
        id="nested-field",
    ),
    pytest.param(
        _set("tenants.1.max_spill_rtt_ms", None),
        "tenants[1] (initech): max_spill_rtt_ms: Spill is allowed, so give the largest rtt it "
        "may add.",
        id="null-optional-field",
    ),
    pytest.param(
        _set("quotas", {"tenant": "acme"}),
        "quotas: expected a list of entries, got a mapping",
        id="section-not-a-list",
    ),
    pytest.param(
        _set("tenant", []),
        "scenario.yaml: unknown section 'tenant'",
        id="unknown-section",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("change", "message"), BROKEN)
def test_a_broken_file_names_the_bad_entry(tmp_path: Path, change: Any, message: str) -> None:
    scenario_load(data=base_scenario())
    before = db_snapshot()
    data = base_scenario()
    change(data)

    with pytest.raises(ScenarioError) as caught:
        scenario_load(path=write(tmp_path, data))

    text = str(caught.value)
    if message.startswith("scenario.yaml"):
        assert text.startswith(str(tmp_path / message.split(": ")[0]))
        assert message.split(": ", 1)[1] in text
    else:
        assert text == message
    assert db_snapshot() == before


@pytest.mark.django_db
def test_a_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("tiers:\n  - name: gold\n    p95_ttft_slo_s: [1.5\n", encoding="utf-8")

    with pytest.raises(ScenarioError) as caught:
        scenario_load(path=path)

    assert str(caught.value).startswith(f"{path}: YAML syntax error at line ")
    assert Tier.objects.count() == 0


@pytest.mark.django_db
def test_a_json_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"tiers": [\n  {"name": "gold",}\n]}', encoding="utf-8")

    with pytest.raises(ScenarioError) as caught:
        scenario_load(path=path)

    assert str(caught.value).startswith(f"{path}: JSON syntax error at line 2")


def test_scenario_load_needs_exactly_one_source() -> None:
    with pytest.raises(TypeError):
        scenario_load()
    with pytest.raises(TypeError):
        scenario_load(path=SUPPORT_ASSISTANT, data={})


def test_a_wrong_format_is_refused() -> None:
    with pytest.raises(ScenarioError, match="format: expected 'headroom-scenario/v1'"):
        scenario_load(data={"format": "headroom-scenario/v9"})


# -- the command ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_command_prints_what_it_loaded(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("load_scenario", str(SUPPORT_ASSISTANT))
    out = capsys.readouterr().out

    assert out.startswith(f"Loaded scenario support-assistant ({SUPPORT_ASSISTANT}):")
    assert re.search(r"\n  tenants +5 created +0 updated +0 unchanged\n", out)
    assert re.search(r"\n  total +62 created +0 updated +0 unchanged\n", out)

    call_command("load_scenario", str(SUPPORT_ASSISTANT), verbosity=2)
    again = capsys.readouterr().out
    assert re.search(r"\n  total +0 created +0 updated +62 unchanged\n", again)


@pytest.mark.django_db
def test_command_fails_with_status_2_and_the_message(tmp_path: Path) -> None:
    data = base_scenario()
    data["tenants"][2]["home_region"] = "eu-wst"

    with pytest.raises(CommandError) as caught:
        call_command("load_scenario", str(write(tmp_path, data)))

    assert caught.value.returncode == 2
    assert str(caught.value) == "tenants[2] (acme): home_region: unknown region 'eu-wst'"
    assert Tenant.objects.count() == 0


def test_manage_py_exits_2_without_a_traceback(tmp_path: Path) -> None:
    """The real command line: status 2, the message on stderr, nothing on stdout."""
    path = tmp_path / "broken.yaml"
    path.write_text("tenants: [\n", encoding="utf-8")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "HEADROOM_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'unused.sqlite3'}",
    }

    done = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "load_scenario", str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2
    assert f"{path}: YAML syntax error at line 2" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.django_db
def test_loading_leaves_the_callers_data_alone() -> None:
    data = yaml.safe_load(SUPPORT_ASSISTANT.read_text(encoding="utf-8"))
    before = copy.deepcopy(data)

    scenario_load(data=data)

    assert data == before
    assert Region.objects.count() == 2
