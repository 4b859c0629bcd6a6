"""The fleet simulator built from a scenario file: its labels name what ``load_scenario`` puts
in the database, its pools are sized as the capacity method would, and its options."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from controlplane.fleet.models import LlmModel, Region
from controlplane.policies.models import Tenant
from controlplane.scenarios.services import scenario_load
from workers.simulators.fleet import (
    FleetSimulator,
    ScenarioFleetError,
    fleet_from_scenario,
    scaled_fleet,
    support_assistant_fleet,
)
from workers.simulators.fleet.__main__ import main
from workers.simulators.fleet.exposition import render
from workers.simulators.fleet.scenario import fleet_from_data

SCENARIO = Path(__file__).resolve().parents[2] / "docs" / "scenarios" / "support-assistant.yaml"
_LABELS = re.compile(r'model_name="([^"]+)",tenant="([^"]+)",region="([^"]+)"')


@pytest.mark.django_db
def test_every_label_the_simulator_exposes_names_a_loaded_record() -> None:
    scenario_load(path=SCENARIO)
    sim = FleetSimulator(fleet_from_scenario(SCENARIO), seed=4)
    sim.advance_to(60.0)
    found = set(_LABELS.findall(render(sim)))
    assert len(found) == 7
    models, tenants, regions = (set(column) for column in zip(*found, strict=True))
    assert models == set(LlmModel.objects.values_list("name", flat=True)) == {"chat-70b"}
    assert tenants == set(Tenant.objects.values_list("name", flat=True))
    assert regions == set(Region.objects.values_list("name", flat=True))
    # Nordlicht is EU-resident: its traffic is only ever in eu-west.
    assert {r for _, t, r in found if t == "nordlicht-versicherung"} == {"eu-west"}


def test_streams_follow_the_scenarios_profiles() -> None:
    spec = fleet_from_scenario(SCENARIO)
    rates = {(s.tenant, s.region): s.requests_per_s for s in spec.streams}
    # eu-west 2.4 = nordlicht 1.76 + harborline 0.40 + parcelpoint 0.24; us-east 5.6.
    assert math.fsum(r for (_, region), r in rates.items() if region == "eu-west") == (
        pytest.approx(2.4)
    )
    assert math.fsum(r for (_, region), r in rates.items() if region == "us-east") == (
        pytest.approx(5.6)
    )
    assert rates[("nordlicht-versicherung", "eu-west")] == pytest.approx(1.76)
    nordlicht = next(s for s in spec.streams if s.tenant == "nordlicht-versicherung")
    shares = {c.name: c.share for c in nordlicht.classes}
    assert shares == {
        "policy-question": pytest.approx(0.85),
        "order-lookup": pytest.approx(0.14),
        "long-summary": pytest.approx(0.01),
    }
    policy = next(c for c in nordlicht.classes if c.name == "policy-question")
    assert (policy.prompt_median, policy.prompt_mean, policy.prefix_cache_hit_rate) == (
        1070,
        1300,
        0.35,
    )


def test_pools_are_sized_at_the_planning_target_on_the_smallest_shape() -> None:
    spec = fleet_from_scenario(SCENARIO)
    pools = {p.region: p for p in spec.pools}
    # The 2-GPU shape (4,000 / 160 tokens/s, an 8 GB KV pool of 24,414 tokens).
    assert {(p.prefill_tokens_per_s, p.decode_tokens_per_s) for p in spec.pools} == {(4000, 160)}
    assert {p.kv_pool_tokens for p in spec.pools} == {24414}
    # A mean request costs about 0.85 replica-s (35% prefix hits): 2.4 req/s → 2.04 → 3
    # replicas at 0.7; 5.6 req/s → 4.75 → 7.
    assert (pools["eu-west"].replicas, pools["us-east"].replicas) == (3, 7)
    sim = FleetSimulator(spec)
    for pool in spec.pools:
        assert 0.6 < sim.pool_load(pool.model, pool.region).utilization <= 0.7
    # The Friday review's prompt growth pushes eu-west well past the target.
    sim.set_extra_prompt_tokens(1200)
    assert sim.pool_load("chat-70b", "eu-west").utilization > 0.8


def test_a_scaled_fleet_has_the_same_load_per_replica() -> None:
    base = support_assistant_fleet()
    big = scaled_fleet(base, 10)
    assert [s.requests_per_s for s in big.streams] == pytest.approx(
        [10 * s.requests_per_s for s in base.streams]
    )
    assert [p.replicas for p in big.pools] == [10 * p.replicas for p in base.pools]
    small, large = FleetSimulator(base), FleetSimulator(big)
    for pool in base.pools:
        assert large.pool_load(pool.model, pool.region).utilization == pytest.approx(
            small.pool_load(pool.model, pool.region).utilization
        )
    with pytest.raises(ValueError, match="positive"):
        scaled_fleet(base, 0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"regions": [{"name": "eu-west"}]}, "tenants: the scenario needs a non-empty list"),
        (
            {
                "regions": [{"name": "eu-west"}],
                "tenants": [{"name": "acme", "home_region": "eu-west"}],
                "models": [{"name": "m"}],
                "workload_profiles": [{"tenant": "zeta", "model": "m"}],
            },
            r"workload_profiles\[0\]: tenant: unknown tenant 'zeta'",
        ),
        (
            {
                "regions": [{"name": "eu-west"}],
                "tenants": [{"name": "acme", "home_region": "eu-west"}],
                "models": [{"name": "m"}],
                "workload_profiles": [
                    {
                        "tenant": "acme",
                        "model": "m",
                        "workload_class": "c",
                        "peak_requests_per_s": "x",
                    }
                ],
            },
            r"workload_profiles\[0\]: peak_requests_per_s must be a number",
        ),
    ],
)
def test_scenarios_it_cannot_simulate_are_named(data: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioFleetError, match=message):
        fleet_from_data(data)


def test_command_line_refuses_a_missing_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--port", "1", "--scenario", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--rate-scale", "0"])
