"""Every validation rule of the fleet and policy models, through ``full_clean()``.

Each refusal names the field it blames and the message a person reads; the boundary values
each rule allows are checked too, so a rule that refused everything would fail here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import IntegrityError, models, transaction
from django.utils import timezone

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

pytestmark = pytest.mark.django_db

FINITE = "Must be a finite number."
SLUG = "Use lower-case letters, digits and . _ / - (starting with a letter or digit)."

Base = dict[str, Any]


def _saved(obj: models.Model) -> Any:
    obj.full_clean()
    obj.save()
    return obj


def _errors(obj: models.Model) -> dict[str, list[str]]:
    """The errors ``full_clean()`` raises, by field; fails the test when it raises none."""
    with pytest.raises(ValidationError) as info:
        obj.full_clean()
    return info.value.message_dict


@pytest.fixture
def base(db: None) -> Base:
    """A small fleet: eu (eu-west, eu-north) and us (us-east, us-west), one 80 GB GPU type,
    a 70B model (140 GB of bf16 weights), one shape, one tier and one tenant."""
    eu = _saved(Geography(name="eu"))
    us = _saved(Geography(name="us"))
    b: Base = {
        "eu": eu,
        "us": us,
        "eu_west": _saved(Region(name="eu-west", geography=eu)),
        "eu_north": _saved(Region(name="eu-north", geography=eu)),
        "us_east": _saved(Region(name="us-east", geography=us)),
        "us_west": _saved(Region(name="us-west", geography=us)),
    }
    b["zone"] = _saved(Zone(name="eu-west-a", region=b["eu_west"]))
    b["h100"] = _saved(
        AcceleratorType(
            name="h100-80gb",
            memory_gb=80,
            peak_bf16_tflops=989,
            memory_tbps=3.35,
            on_demand_price_per_gpu_hour=4.0,
            reserved_price_per_gpu_hour=2.5,
        )
    )
    b["llama"] = _saved(
        LlmModel(name="llama-3-70b", parameters_billions=70, layers=80, kv_heads=8, head_dim=128)
    )
    b["shape"] = _saved(
        ReplicaShape(
            name="llama-3-70b-h100x2", model=b["llama"], accelerator=b["h100"], gpus_per_replica=2
        )
    )
    b["chat"] = _saved(WorkloadClass(name="chat"))
    b["gold"] = _saved(Tier(name="gold", p95_ttft_slo_s=0.8))
    b["acme"] = _saved(Tenant(name="acme", tier=b["gold"], home_region=b["eu_west"]))
    return b


# Valid, unsaved records; each test breaks one thing.


def new_geography(b: Base) -> Geography:
    return Geography(name="ap")


def new_region(b: Base) -> Region:
    return Region(name="eu-south", geography=b["eu"], price_multiplier=1.1)


def new_zone(b: Base) -> Zone:
    return Zone(name="eu-west-b", region=b["eu_west"])


def new_link(b: Base) -> RegionLink:
    return RegionLink(region_a=b["eu_west"], region_b=b["us_east"], rtt_ms=80)


def new_accelerator(b: Base) -> AcceleratorType:
    return AcceleratorType(
        name="a100-80gb",
        memory_gb=80,
        peak_bf16_tflops=312,
        memory_tbps=2.0,
        on_demand_price_per_gpu_hour=3.0,
        reserved_price_per_gpu_hour=2.0,
    )


def new_inventory(b: Base) -> ZoneInventory:
    return ZoneInventory(zone=b["zone"], accelerator=b["h100"], gpus_available=64)


def new_model(b: Base) -> LlmModel:
    return LlmModel(name="llama-3-8b", parameters_billions=8, layers=32, kv_heads=8, head_dim=128)


def new_shape(b: Base) -> ReplicaShape:
    return ReplicaShape(
        name="llama-3-70b-h100x4", model=b["llama"], accelerator=b["h100"], gpus_per_replica=4
    )


def new_workload_class(b: Base) -> WorkloadClass:
    return WorkloadClass(name="long-summary")


def new_figure(b: Base) -> CapacityFigure:
    return CapacityFigure(
        shape=b["shape"],
        workload_class=b["chat"],
        prefill_tokens_per_s=12000,
        decode_tokens_per_s=2400,
        max_concurrency=32,
        knee_requests_per_s=3.5,
        measured_at=timezone.now() - timedelta(days=1),
        provenance={"run": "bench-42"},
    )


def new_tier(b: Base) -> Tier:
    return Tier(name="silver", p95_ttft_slo_s=2.0, target_utilization=0.8, burst_factor=1.2)


def new_tenant(b: Base) -> Tenant:
    return Tenant(
        name="globex", tier=b["gold"], home_region=b["eu_west"], residency_geography=b["eu"]
    )


def new_quota(b: Base) -> TenantQuota:
    return TenantQuota(
        tenant=b["acme"],
        budget_rate_replica_s_per_s=4,
        budget_burst_replica_s=60,
        tokens_per_minute_limit=100_000,
        tokens_per_minute_burst=150_000,
    )


def new_profile(b: Base) -> WorkloadProfile:
    return WorkloadProfile(
        tenant=b["acme"],
        model=b["llama"],
        workload_class=b["chat"],
        region=b["eu_west"],
        peak_requests_per_s=20,
        prompt_tokens_p50=800,
        prompt_tokens_mean=1000,
        prompt_tokens_p95=3000,
        prompt_tokens_p99=6000,
        output_tokens_p50=150,
        output_tokens_mean=200,
        output_tokens_p95=600,
        output_tokens_p99=900,
        prefix_cache_hit_rate=0.3,
        residence_s=4.0,
    )


Factory = Callable[[Base], models.Model]
FACTORIES: list[Factory] = [
    new_geography,
    new_region,
    new_zone,
    new_link,
    new_accelerator,
    new_inventory,
    new_model,
    new_shape,
    new_workload_class,
    new_figure,
    new_tier,
    new_tenant,
    new_quota,
    new_profile,
]


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_the_valid_records_pass(factory: Factory, base: Base) -> None:
    _saved(factory(base))


# -- field validators --------------------------------------------------------------------

FIELD_CASES: list[tuple[Factory, str, Any, str]] = [
    (new_geography, "name", "EU West", SLUG),
    (new_region, "name", "-eu", SLUG),
    (new_region, "price_multiplier", 0, "Must be at least 0.1."),
    (new_region, "price_multiplier", -1.0, "Must be at least 0.1."),
    (new_link, "rtt_ms", -0.1, "Must be at least 0 ms."),
    (new_accelerator, "memory_gb", 0, "Must be at least 1 GB."),
    (new_accelerator, "peak_bf16_tflops", -1, "Must be at least 1 TFLOP/s."),
    (new_accelerator, "memory_tbps", 0, "Must be at least 0.1 TB/s."),
    (new_accelerator, "on_demand_price_per_gpu_hour", 0, "Must be at least 0.01 $ per GPU-hour."),
    (new_accelerator, "reserved_price_per_gpu_hour", -0.5, "Must be at least 0.01 $ per GPU-hour."),
    (new_inventory, "gpus_available", -1, "Must be at least 0 GPUs."),
    (new_model, "parameters_billions", 0, "Must be at least 0.000001 billion."),
    (new_model, "bytes_per_parameter", 0, "Must be at least 0.125 bytes."),
    (new_model, "kv_bytes_per_element", -2, "Must be at least 0.125 bytes."),
    (new_model, "layers", 0, "Must be at least 1."),
    (new_model, "kv_heads", 0, "Must be at least 1."),
    (new_model, "head_dim", 0, "Must be at least 1."),
    (new_shape, "gpus_per_replica", 0, "Must be at least 1 GPUs."),
    (new_shape, "runtime_reserve_gb_per_gpu", -1, "Must be at least 0 GB."),
    (new_shape, "target_utilization", 0, "Must be at least 0.05."),
    (new_shape, "target_utilization", 1.01, "Must be at most 1."),
    (new_figure, "prefill_tokens_per_s", 0, "Must be at least 1 tokens per second."),
    (new_figure, "decode_tokens_per_s", -5, "Must be at least 1 tokens per second."),
    (new_figure, "max_concurrency", 0, "Must be at least 1 sequences."),
    (new_figure, "knee_requests_per_s", 0, "Must be at least 0.001 requests per second."),
    (new_tier, "p95_ttft_slo_s", 0, "Must be at least 0.01 s."),
    (new_tier, "target_utilization", 0, "Must be at least 0.05."),
    (new_tier, "target_utilization", 1.5, "Must be at most 1."),
    (new_tier, "burst_factor", 0.99, "Must be at least 1."),
    (new_tenant, "name", "Globex Corp", SLUG),
    (new_tenant, "max_spill_rtt_ms", -1, "Must be at least 0 ms."),
    (new_tenant, "fair_share_weight", 0, "Must be at least 0.01."),
    (
        new_quota,
        "budget_rate_replica_s_per_s",
        0,
        "Must be at least 0.01 replica-seconds per second.",
    ),
    (new_quota, "budget_burst_replica_s", -1, "Must be at least 0.01 replica-seconds."),
    (new_quota, "tokens_per_minute_limit", -1, "Must be at least 1 tokens per minute."),
    (new_quota, "tokens_per_minute_burst", -1, "Must be at least 1 tokens per minute."),
    (new_profile, "peak_requests_per_s", -1, "Must be at least 0 requests per second."),
    (new_profile, "prompt_tokens_p50", 0, "Must be at least 1 tokens."),
    (new_profile, "prompt_tokens_mean", 0, "Must be at least 1 tokens."),
    (new_profile, "prompt_tokens_p95", -1, "Must be at least 1 tokens."),
    (new_profile, "prompt_tokens_p99", 0, "Must be at least 1 tokens."),
    (new_profile, "output_tokens_p50", 0, "Must be at least 1 tokens."),
    (new_profile, "output_tokens_mean", 0, "Must be at least 1 tokens."),
    (new_profile, "output_tokens_p95", 0, "Must be at least 1 tokens."),
    (new_profile, "output_tokens_p99", -3, "Must be at least 1 tokens."),
    (new_profile, "prefix_cache_hit_rate", 1.01, "Must be at most 1."),
    (new_profile, "prefix_cache_hit_rate", -0.01, "Must be at least 0."),
    (new_profile, "residence_s", 0, "Must be at least 0.001 s."),
]


@pytest.mark.parametrize(
    ("factory", "field", "value", "message"),
    FIELD_CASES,
    ids=[f"{f.__name__}-{field}={value}" for f, field, value, _ in FIELD_CASES],
)
def test_field_validator_refuses(
    factory: Factory, field: str, value: Any, message: str, base: Base
) -> None:
    obj = factory(base)
    setattr(obj, field, value)
    assert message in _errors(obj)[field]


NOT_FINITE_CASES: list[tuple[Factory, str, str]] = [
    (new_region, "price_multiplier", FINITE),
    (new_accelerator, "memory_gb", FINITE),
    (new_model, "parameters_billions", FINITE),
    (new_figure, "decode_tokens_per_s", FINITE),
    (new_tier, "p95_ttft_slo_s", FINITE),
    (new_tier, "target_utilization", FINITE),
    (new_tier, "burst_factor", FINITE),
    (new_profile, "prompt_tokens_p50", FINITE),
    (new_profile, "prefix_cache_hit_rate", FINITE),
]


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize(
    ("factory", "field", "message"),
    NOT_FINITE_CASES,
    ids=[f"{f.__name__}-{field}" for f, field, _ in NOT_FINITE_CASES],
)
def test_positive_fraction_and_burst_validators_refuse_nan_and_infinity(
    factory: Factory, field: str, message: str, value: float, base: Base
) -> None:
    # A YAML scenario can spell .nan and .inf; forms and the API refuse them before here.
    obj = factory(base)
    setattr(obj, field, value)
    assert message in _errors(obj)[field]


BOUNDARY_CASES: list[tuple[Factory, str, Any]] = [
    (new_link, "rtt_ms", 0),
    (new_inventory, "gpus_available", 0),
    (new_shape, "runtime_reserve_gb_per_gpu", 0),
    (new_shape, "target_utilization", 1.0),
    (new_shape, "target_utilization", None),
    (new_figure, "knee_requests_per_s", None),
    (new_figure, "workload_class", None),
    (new_tier, "target_utilization", 1.0),
    (new_tier, "burst_factor", 1.0),
    (new_tenant, "max_spill_rtt_ms", 0),
    (new_accelerator, "reserved_price_per_gpu_hour", 3.0),  # equal to on-demand
    (new_quota, "budget_burst_replica_s", 4),  # equal to the rate: one second of refill
    (new_quota, "tokens_per_minute_burst", 100_000),  # equal to the limit
    (new_quota, "tokens_per_minute_burst", None),
    (new_profile, "prefix_cache_hit_rate", 0.0),
    (new_profile, "prefix_cache_hit_rate", 1.0),
    (new_profile, "peak_requests_per_s", 0),
    (new_profile, "prompt_tokens_p95", 800),  # equal to p50
    (new_profile, "output_tokens_p99", 600),  # equal to p95
]


@pytest.mark.parametrize(
    ("factory", "field", "value"),
    BOUNDARY_CASES,
    ids=[f"{f.__name__}-{field}={value}" for f, field, value in BOUNDARY_CASES],
)
def test_boundary_value_is_allowed(factory: Factory, field: str, value: Any, base: Base) -> None:
    obj = factory(base)
    setattr(obj, field, value)
    obj.full_clean()


# -- fleet clean() rules -------------------------------------------------------------------


def test_reserved_price_above_on_demand_is_refused(base: Base) -> None:
    accelerator = new_accelerator(base)
    accelerator.on_demand_price_per_gpu_hour = 4
    accelerator.reserved_price_per_gpu_hour = 5
    assert _errors(accelerator) == {
        "reserved_price_per_gpu_hour": [
            "Reserved price is above the on-demand price (5 > 4 per GPU-hour)."
        ]
    }


def test_shape_that_leaves_no_kv_pool_is_refused_naming_gb(base: Base) -> None:
    shape = new_shape(base)
    shape.gpus_per_replica = 1
    assert _errors(shape) == {
        "gpus_per_replica": [
            "llama-3-70b needs 140.0 GB of weights per GPU on 1 × h100-80gb plus 6 GB reserve, "
            "but each GPU has 80 GB: no room is left for the KV cache. Use more GPUs per replica "
            "or a larger accelerator."
        ]
    }


def test_shape_whose_kv_pool_is_exactly_zero_is_refused(base: Base) -> None:
    # 2 × (80 − 140/2 − 10) = 0 GB: weights fit, but no request could hold a token.
    shape = new_shape(base)
    shape.gpus_per_replica = 2
    shape.runtime_reserve_gb_per_gpu = 10
    message = _errors(shape)["gpus_per_replica"][0]
    assert message.startswith("llama-3-70b needs 70.0 GB of weights per GPU on 2 × h100-80gb")
    assert "plus 10 GB reserve, but each GPU has 80 GB" in message


def test_shape_that_fits_has_its_kv_pool(base: Base) -> None:
    shape = new_shape(base)  # 4 × (80 − 35 − 6) = 156 GB, as in the seeds
    shape.full_clean()
    assert shape.kv_pool_gb == pytest.approx(156)


def test_region_link_to_itself_is_refused(base: Base) -> None:
    link = RegionLink(region_a=base["eu_west"], region_b=base["eu_west"], rtt_ms=0)
    assert _errors(link) == {"region_b": ["A region's rtt to itself is always 0."]}


def test_region_link_reverse_of_an_existing_pair_is_refused(base: Base) -> None:
    _saved(RegionLink(region_a=base["eu_west"], region_b=base["eu_north"], rtt_ms=25))
    reverse = RegionLink(region_a=base["eu_north"], region_b=base["eu_west"], rtt_ms=26)
    assert _errors(reverse) == {"region_b": ["This pair is already linked in the other direction."]}


def test_region_link_is_not_its_own_reverse_when_edited(base: Base) -> None:
    link = _saved(RegionLink(region_a=base["eu_west"], region_b=base["eu_north"], rtt_ms=25))
    link.rtt_ms = 30
    link.full_clean()


def test_capacity_figure_measured_in_the_future_is_refused(base: Base) -> None:
    figure = new_figure(base)
    figure.measured_at = timezone.now() + timedelta(hours=1)
    assert _errors(figure) == {"measured_at": ["A measurement cannot be in the future."]}


def test_capacity_figure_a_few_minutes_ahead_is_clock_skew_and_allowed(base: Base) -> None:
    figure = new_figure(base)
    figure.measured_at = timezone.now() + timedelta(minutes=4)
    figure.full_clean()


def test_capacity_figure_provenance_must_be_an_object(base: Base) -> None:
    figure = new_figure(base)
    figure.provenance = ["bench-42"]
    assert _errors(figure) == {"provenance": ["Must be a JSON object."]}


# -- policy clean() rules ------------------------------------------------------------------


def test_spill_without_max_rtt_is_refused(base: Base) -> None:
    tenant = new_tenant(base)
    tenant.spill_allowed = True
    tenant.max_spill_rtt_ms = None
    assert _errors(tenant) == {
        "max_spill_rtt_ms": ["Spill is allowed, so give the largest rtt it may add."]
    }


def test_spill_with_max_rtt_is_allowed(base: Base) -> None:
    tenant = new_tenant(base)
    tenant.spill_allowed = True
    tenant.max_spill_rtt_ms = 40
    tenant.full_clean()


def test_home_region_outside_residency_geography_is_refused(base: Base) -> None:
    tenant = new_tenant(base)
    tenant.home_region = base["us_east"]
    assert _errors(tenant) == {
        "home_region": ["Home region us-east is in us, outside the residency geography eu."]
    }


def test_residency_regions_outside_the_geography_are_named(base: Base) -> None:
    with pytest.raises(ValidationError) as info:
        validate_residency_regions(
            home_region=base["eu_west"],
            geography=base["eu"],
            regions=[base["us_west"], base["eu_west"], base["us_east"]],
        )
    assert info.value.message_dict == {
        "residency_regions": ["us-east, us-west lie outside the residency geography eu."]
    }


def test_home_region_must_be_among_the_residency_regions(base: Base) -> None:
    with pytest.raises(ValidationError) as info:
        validate_residency_regions(
            home_region=base["eu_west"], geography=None, regions=[base["eu_north"]]
        )
    assert info.value.message_dict == {
        "residency_regions": ["The home region eu-west must be one of the residency regions."]
    }


@pytest.mark.parametrize(
    ("home", "geography", "regions"),
    [
        ("eu_west", "eu", []),
        ("eu_west", "eu", ["eu_west", "eu_north"]),
        ("eu_west", None, ["eu_west", "us_east"]),
        (None, "us", ["us_east"]),
    ],
    ids=["empty-list", "inside-geography", "no-geography", "no-home-region"],
)
def test_residency_regions_that_follow_the_rule_pass(
    home: str | None, geography: str | None, regions: list[str], base: Base
) -> None:
    validate_residency_regions(
        home_region=base[home] if home else None,
        geography=base[geography] if geography else None,
        regions=[base[name] for name in regions],
    )


def test_quota_burst_ceiling_below_sustained_limit_is_refused(base: Base) -> None:
    quota = new_quota(base)
    quota.tokens_per_minute_limit = 1000
    quota.tokens_per_minute_burst = 500
    assert _errors(quota) == {
        "tokens_per_minute_burst": ["The burst ceiling is below the sustained limit (500 < 1000)."]
    }


def test_quota_bucket_smaller_than_one_second_of_refill_is_refused(base: Base) -> None:
    quota = new_quota(base)
    quota.budget_rate_replica_s_per_s = 4
    quota.budget_burst_replica_s = 3.5
    assert _errors(quota) == {
        "budget_burst_replica_s": [
            "The bucket holds less than one second of refill; make the burst at least the rate."
        ]
    }


@pytest.mark.parametrize("kind", ["prompt", "output"])
def test_profile_p95_below_p50_is_refused(kind: str, base: Base) -> None:
    profile = new_profile(base)
    setattr(profile, f"{kind}_tokens_p50", 200)
    setattr(profile, f"{kind}_tokens_p95", 100)
    setattr(profile, f"{kind}_tokens_p99", 900)
    assert _errors(profile) == {f"{kind}_tokens_p95": ["p95 (100) is below p50 (200)."]}


@pytest.mark.parametrize("kind", ["prompt", "output"])
def test_profile_p99_below_p95_is_refused(kind: str, base: Base) -> None:
    profile = new_profile(base)
    setattr(profile, f"{kind}_tokens_p50", 100)
    setattr(profile, f"{kind}_tokens_p95", 3000)
    setattr(profile, f"{kind}_tokens_p99", 2000)
    assert _errors(profile) == {f"{kind}_tokens_p99": ["p99 (2000) is below p95 (3000)."]}


def test_profile_reports_prompt_and_output_order_together(base: Base) -> None:
    profile = new_profile(base)
    profile.prompt_tokens_p95 = 700  # below p50 800
    profile.output_tokens_p99 = 500  # below p95 600
    assert _errors(profile) == {
        "prompt_tokens_p95": ["p95 (700) is below p50 (800)."],
        "output_tokens_p99": ["p99 (500) is below p95 (600)."],
    }


# -- unique constraints --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "label"),
    [
        (new_geography, "Geography"),
        (new_region, "Region"),
        (new_zone, "Zone"),
        (new_accelerator, "Accelerator type"),
        (new_model, "Model"),
        (new_shape, "Replica shape"),
        (new_workload_class, "Workload class"),
        (new_tier, "Tier"),
        (new_tenant, "Tenant"),
    ],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_names_are_unique(factory: Factory, label: str, base: Base) -> None:
    _saved(factory(base))
    assert _errors(factory(base))["name"] == [f"{label} with this Name already exists."]


def test_region_link_pair_is_unique(base: Base) -> None:
    _saved(new_link(base))
    assert _errors(new_link(base)) == {
        NON_FIELD_ERRORS: ["Region link with this Region a and Region b already exists."]
    }


def test_zone_inventory_is_unique_per_zone_and_accelerator(base: Base) -> None:
    _saved(new_inventory(base))
    assert _errors(new_inventory(base)) == {
        NON_FIELD_ERRORS: ["Zone inventory with this Zone and Accelerator already exists."]
    }


def test_a_tenant_has_one_quota(base: Base) -> None:
    _saved(new_quota(base))
    assert _errors(new_quota(base)) == {"tenant": ["Tenant quota with this Tenant already exists."]}


def test_profile_version_is_unique_per_tenant_model_class_and_region(base: Base) -> None:
    _saved(new_profile(base))
    assert _errors(new_profile(base)) == {
        NON_FIELD_ERRORS: [
            "Workload profile with this Tenant, Model, Workload class, Region and Version "
            "already exists."
        ]
    }
    newer = new_profile(base)
    newer.version = 2
    newer.full_clean()
    elsewhere = new_profile(base)
    elsewhere.region = base["eu_north"]
    elsewhere.full_clean()


def test_profile_version_is_unique_for_the_home_region_too(base: Base) -> None:
    # Region empty means the tenant's home region; NULL must not make every row distinct.
    first = new_profile(base)
    first.region = None
    _saved(first)
    again = new_profile(base)
    again.region = None
    assert _errors(again) == {
        NON_FIELD_ERRORS: [
            "This tenant already has this version of the profile for this model and class "
            "from its home region."
        ]
    }


@pytest.mark.parametrize(
    "make_duplicate",
    [
        lambda b: (new_link(b), new_link(b)),
        lambda b: (new_inventory(b), new_inventory(b)),
        lambda b: (new_profile(b), new_profile(b)),
        lambda b: (
            WorkloadProfile(**{**_fields(new_profile(b)), "region": None}),
            WorkloadProfile(**{**_fields(new_profile(b)), "region": None}),
        ),
    ],
    ids=["region-link", "zone-inventory", "profile-version", "profile-version-home-region"],
)
def test_database_enforces_the_unique_constraints(
    make_duplicate: Callable[[Base], tuple[models.Model, models.Model]], base: Base
) -> None:
    # Writers that skip full_clean() (bulk loads, raw saves) still cannot make duplicates.
    first, second = make_duplicate(base)
    first.save()
    with pytest.raises(IntegrityError), transaction.atomic():
        second.save()


def _fields(obj: models.Model) -> dict[str, Any]:
    return {
        f.name: getattr(obj, f.name)
        for f in obj._meta.concrete_fields
        if not f.primary_key and f.name != "created_at"
    }
