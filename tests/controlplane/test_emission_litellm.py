"""Routing weights in the region documents, and the LiteLLM sink that writes them as a proxy
configuration.

The plan of ``emission_support`` with a hosted provider added: in ``eu`` acme's chat sends
12 requests/s to its one-GPU pool and 4 to the hosted API ``apiprov`` (served 16: weights
0.75 and 0.25); its batch job sends 2 to the two-GPU pool and leaves 1 unserved (weight 1 of
what is served). globex's search, homed in ``us``, sends 9 to the ``us`` pool and 3 to the
``eu`` pool (0.75, 0.25): its weights go in the ``us`` document, where its traffic enters.

The written configuration's key names and types are those of LiteLLM's own source:
``litellm/types/router.py`` (``LiteLLMParamsTypedDict``: ``model``, ``api_base``, ``api_key``,
``weight: int``, ``tpm: int``, ``rpm: int``; ``DeploymentTypedDict``: ``model_name``,
``litellm_params``, ``model_info``), ``litellm/types/litellm_params.py``
(``RoutingStrategyName``), ``litellm/router_strategy/simple_shuffle.py`` (the weighted pick)
and ``litellm/proxy/proxy_server.py`` (``model_list`` and ``router_settings`` handed to the
Router; ``os.environ/`` values read from the environment). Where the ``litellm`` package is
installed, the last test also builds LiteLLM's Router from the file and draws from it.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.test import APIClient

from controlplane.core.roles import POLICY_ADMIN
from controlplane.emission import services
from controlplane.emission.models import AllocationSink, OutboxEntry
from controlplane.emission.payload import region_documents, routing_weights
from controlplane.emission.sinks import Delivery, Outcome, litellm_config
from controlplane.emission.sinks.litellm_config import integer_weights
from controlplane.fleet.models import Geography, Region
from controlplane.plans.models import Plan, PlanAllocation, PlanRouting
from tests.controlplane import emission_support as support

pytestmark = pytest.mark.django_db

ENDPOINTS = {
    "apiprov": {
        "provider": "openai",
        "api_base": "https://api.apiprov.example/v1",
        "api_key_env": "APIPROV_API_KEY",
        "models": {"m": "vendor/m-instruct"},
    }
}
HOSTED = {
    "name": "apiprov",
    "region": "eu",
    "models": ["m"],
    "input_price_per_mtok": 0.5,
    "output_price_per_mtok": 1.5,
    "tpm_limit": 600_000,
    "rpm_limit": 1_200,
    "p95_ttft_s": 0.8,
}
# (demand, tenant, region, shape, planned requests/s)
ROUTING = [
    ("acme/chat", "acme", "eu", "m/gpu80x1", 12.0),
    ("acme/batch", "acme", "eu", "m/gpu80x2", 2.0),
    ("globex/search", "globex", "us", "m/gpu80x1", 9.0),
    ("globex/search", "globex", "eu", "m/gpu80x1", 3.0),
]
# 4 requests/s of 100 output tokens: 24,000 tokens/min, 4 × 3600 × 100 × 1.5 / 1e6 $/hour.
HOSTED_ROWS = [
    {
        "demand": "acme/chat",
        "provider": "apiprov",
        "requests_per_s": 4.0,
        "tokens_per_minute": 24_000.0,
        "cost_per_hour": 2.16,
    }
]

# What LiteLLM's types say (litellm/types/router.py, litellm/types/litellm_params.py).
LITELLM_PARAM_TYPES: dict[str, type] = {
    "model": str,
    "api_base": str,
    "api_key": str,
    "weight": int,
    "rpm": int,
    "tpm": int,
}
ROUTING_STRATEGIES = {
    "simple-shuffle",
    "least-busy",
    "usage-based-routing",
    "latency-based-routing",
    "cost-based-routing",
    "usage-based-routing-v2",
}


def problem() -> dict[str, Any]:
    document = copy.deepcopy(support.PROBLEM)
    document["hosted"] = [HOSTED]
    for demand in document["demands"]:
        if demand["id"] == "acme/chat":
            demand["hosted_overflow"] = True
        if demand["id"] == "globex/search":
            demand["allowed_regions"] = ["us", "eu"]
    return document


def solution() -> dict[str, Any]:
    document = support.solution()
    document["routing"] = [
        {"demand": d, "region": r, "shape": s, "requests_per_s": x} for d, _, r, s, x in ROUTING
    ]
    document["unserved"] = [
        {"demand": "acme/batch", "tenant": "acme", "priority": 0, "requests_per_s": 1.0}
    ]
    document["unserved_requests_per_s"] = 1.0
    document["hosted_cost_per_hour"] = 2.16
    document["hosted"] = HOSTED_ROWS
    return document


def make_plan(version: int = 1, *, state: str = Plan.State.ACTIVE) -> Plan:
    """``emission_support``'s plan, with the routing and hosted rows above."""
    support.shape_records()
    plan = Plan.objects.create(
        version=version,
        inputs_hash=f"{version:064x}",
        state=state,
        solver_status=Plan.SolverStatus.OPTIMAL,
        problem=problem(),
        solution=solution(),
        cost_per_hour=solution()["cost_per_hour"],
    )
    PlanAllocation.objects.bulk_create(
        PlanAllocation(
            plan=plan,
            region=region,
            zone=zone,
            shape=shape,
            accelerator="gpu80",
            gpus_per_replica=gpus,
            replicas=n,
            cost_per_hour=support.GPU_HOUR * gpus * n,
        )
        for region, zone, shape, gpus, n in support.ALLOCATIONS
    )
    PlanRouting.objects.bulk_create(
        PlanRouting(plan=plan, demand=d, tenant=t, region=r, shape=s, requests_per_s=x)
        for d, t, r, s, x in ROUTING
    )
    return plan


def litellm_sink(directory: str = "gateway", **extra: Any) -> AllocationSink:
    sink = AllocationSink(
        kind=AllocationSink.Kind.LITELLM,
        name=extra.pop("name", "gateway"),
        directory=directory,
        namespace="inference",
        hosted_endpoints=extra.pop("hosted_endpoints", ENDPOINTS),
        **extra,
    )
    sink.full_clean()
    sink.save()
    return sink


@pytest.fixture
def root(settings: Any, tmp_path: Path) -> Path:
    settings.HEADROOM_EMISSION_ROOT = str(tmp_path)
    return tmp_path


def emit(plan: Plan) -> services.DispatchReport:
    with transaction.atomic():
        services.outbox_enqueue_for_plan(plan=plan)
    return services.outbox_dispatch()


def config(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def groups(loaded: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in loaded["model_list"]:
        out.setdefault(entry["model_name"], []).append(entry["litellm_params"])
    return out


# -- the document ---------------------------------------------------------------------------


def test_each_home_region_document_carries_its_demands_weights_over_served_traffic() -> None:
    plan = make_plan()
    documents = region_documents(services.plan_snapshot(plan=plan))
    eu, us, ap = documents["eu"], documents["us"], documents["ap"]
    assert eu["format"] == "headroom-allocation/v1"
    assert eu["routing_weights"] == [
        {
            "demand": "acme/batch",
            "tenant": "acme",
            "model": "m",
            "tokens_per_request": 200,
            "served_requests_per_s": 2.0,
            "unserved_requests_per_s": 1.0,
            "targets": [
                {
                    "kind": "pool",
                    "region": "eu",
                    "shape": "m/gpu80x2",
                    "requests_per_s": 2.0,
                    "weight": 1.0,
                }
            ],
        },
        {
            "demand": "acme/chat",
            "tenant": "acme",
            "model": "m",
            "tokens_per_request": 100,
            "served_requests_per_s": 16.0,
            "unserved_requests_per_s": 0.0,
            "targets": [
                {
                    "kind": "pool",
                    "region": "eu",
                    "shape": "m/gpu80x1",
                    "requests_per_s": 12.0,
                    "weight": 0.75,
                },
                {
                    "kind": "hosted",
                    "provider": "apiprov",
                    "region": "eu",
                    "requests_per_s": 4.0,
                    "tokens_per_minute": 24_000.0,
                    "cost_per_hour": 2.16,
                    "weight": 0.25,
                },
            ],
        },
    ]
    (search,) = us["routing_weights"]
    assert search["demand"] == "globex/search" and search["served_requests_per_s"] == 12.0
    assert [(t["region"], t["shape"], t["weight"]) for t in search["targets"]] == [
        ("eu", "m/gpu80x1", 0.25),
        ("us", "m/gpu80x1", 0.75),
    ]
    assert ap["routing_weights"] == []
    for document in documents.values():
        for demand in document["routing_weights"]:
            assert sum(t["weight"] for t in demand["targets"]) == pytest.approx(1.0)
    # The per-region routing is unchanged: the eu pool serves globex's 3 requests/s too.
    assert {t["tenant"] for t in eu["routing"]} == {"acme", "globex"}


def test_without_a_readable_solution_there_are_no_weights_rather_than_partial_ones() -> None:
    plan = make_plan()
    snapshot = services.plan_snapshot(plan=plan)
    assert routing_weights(snapshot)
    Plan.objects.filter(pk=plan.pk).update(solution={"status": "nonsense"})
    plan.refresh_from_db()
    broken = services.plan_snapshot(plan=plan)
    assert broken.solution_error
    assert routing_weights(broken) == {}
    assert all(d["routing_weights"] == [] for d in region_documents(broken).values())


def test_a_plan_without_hosted_rows_weighs_its_pools_alone() -> None:
    plan = support.make_plan()
    documents = region_documents(services.plan_snapshot(plan=plan))
    (chat, batch) = sorted(documents["eu"]["routing_weights"], key=lambda d: d["demand"])[::-1]
    assert chat["demand"] == "acme/chat"
    assert [(t["kind"], t["weight"]) for t in chat["targets"]] == [("pool", 1.0)]
    assert batch["unserved_requests_per_s"] == 0.0


# -- the LiteLLM configuration ---------------------------------------------------------------


def test_litellm_sink_writes_each_region_config_with_exact_weights(root: Path) -> None:
    litellm_sink()
    report = emit(make_plan())
    assert report.delivered == 3 and report.failed == 0, report.errors
    eu = config(root / "gateway" / "eu.yaml")
    assert eu["router_settings"] == {"routing_strategy": "simple-shuffle"}
    # acme's chat (12/s) and batch (2/s) share the eu pool of m: 14 of 18 requests/s;
    # 12 × 60 × 100 + 2 × 60 × 200 tokens/min.
    assert groups(eu) == {
        "acme/m": [
            {
                "model": "hosted_vllm/m",
                "api_base": "http://eu-m.inference.svc.cluster.local/v1",
                "weight": 7778,
                "rpm": 840,
                "tpm": 96_000,
            },
            {
                "model": "openai/vendor/m-instruct",
                "api_base": "https://api.apiprov.example/v1",
                "api_key": "os.environ/APIPROV_API_KEY",
                "weight": 2222,
                "rpm": 240,
                "tpm": 24_000,
            },
        ]
    }
    us = config(root / "gateway" / "us.yaml")
    assert groups(us) == {
        "globex/m": [
            {
                "model": "hosted_vllm/m",
                "api_base": "http://eu-m.inference.svc.cluster.local/v1",
                "weight": 2500,
                "rpm": 180,
                "tpm": 18_000,
            },
            {
                "model": "hosted_vllm/m",
                "api_base": "http://us-m.inference.svc.cluster.local/v1",
                "weight": 7500,
                "rpm": 540,
                "tpm": 54_000,
            },
        ]
    }
    ap = config(root / "gateway" / "ap.yaml")
    assert ap == {"model_list": [], "router_settings": {"routing_strategy": "simple-shuffle"}}
    text = (root / "gateway" / "eu.yaml").read_text()
    assert text.startswith("# headroom-litellm plan-version=1 region=eu\n")
    ids = [e["model_info"]["id"] for e in eu["model_list"]]
    assert len(ids) == len(set(ids))
    assert {e["model_info"]["headroom_target"] for e in eu["model_list"]} == {"pool", "hosted"}


def test_written_configs_use_litellm_key_names_and_types(root: Path) -> None:
    litellm_sink()
    emit(make_plan())
    for path in (root / "gateway").glob("*.yaml"):
        loaded = config(path)
        assert set(loaded) == {"model_list", "router_settings"}
        assert loaded["router_settings"]["routing_strategy"] in ROUTING_STRATEGIES
        for entry in loaded["model_list"]:
            assert set(entry) == {"model_name", "litellm_params", "model_info"}
            params = entry["litellm_params"]
            assert set(params) <= set(LITELLM_PARAM_TYPES), params
            for key, value in params.items():
                assert type(value) is LITELLM_PARAM_TYPES[key], (key, value)
            assert params["weight"] > 0
            assert isinstance(entry["model_info"]["id"], str)
            if "api_key" in params:
                assert params["api_key"].startswith("os.environ/")
        # simple-shuffle falls back to rpm, then tpm, when the first deployment has no
        # weight: every deployment of a group carries one, and each group adds up.
        for deployments in groups(loaded).values():
            assert sum(d["weight"] for d in deployments) == litellm_config.WEIGHT_TOTAL


def test_no_secret_is_written_and_a_custom_endpoint_template_is_used(root: Path) -> None:
    endpoints = {"apiprov": {"provider": "together_ai"}}
    litellm_sink(
        endpoint_template="https://{model}.{region}.models.example/v1",
        hosted_endpoints=endpoints,
    )
    emit(make_plan())
    eu = groups(config(root / "gateway" / "eu.yaml"))["acme/m"]
    assert [d["api_base"] for d in eu if d["model"] == "hosted_vllm/m"] == [
        "https://m.eu.models.example/v1"
    ]
    (hosted,) = [d for d in eu if d["model"].startswith("together_ai/")]
    assert hosted["model"] == "together_ai/m" and "api_base" not in hosted
    assert hosted["api_key"] == "os.environ/APIPROV_API_KEY"
    # Nothing the sink holds as a secret reaches the file.
    text = (root / "gateway" / "eu.yaml").read_text()
    assert support.SECRET not in text and "sk-" not in text


def test_a_provider_without_an_endpoint_entry_fails_the_delivery_naming_it(root: Path) -> None:
    litellm_sink(hosted_endpoints={})
    report = emit(make_plan())
    assert report.failed == 1 and report.delivered == 2
    row = OutboxEntry.objects.get(region="eu")
    assert row.status == OutboxEntry.Status.FAILED
    assert "'apiprov'" in row.last_error and "hosted_endpoints" in row.last_error
    assert not (root / "gateway" / "eu.yaml").exists()


def test_litellm_config_is_idempotent_and_never_rolled_back(root: Path) -> None:
    sink = litellm_sink()
    emit(make_plan(version=2))
    path = root / "gateway" / "eu.yaml"
    written = path.read_bytes()
    older = make_plan(version=1, state=Plan.State.SUPERSEDED)
    document = region_documents(services.plan_snapshot(plan=older))["eu"]
    result = litellm_config.deliver(sink, Delivery("k", "eu", document))
    assert result.outcome is Outcome.DELIVERED and "already holds plan v2" in result.detail
    assert path.read_bytes() == written
    again = region_documents(services.plan_snapshot(plan=Plan.objects.get(version=2)))
    result = litellm_config.deliver(sink, Delivery("k", "eu", again["eu"]))
    assert result.detail == "eu.yaml unchanged"


def test_a_shadow_region_gets_no_gateway_config(root: Path) -> None:
    for name in ("eu", "us", "ap"):
        geo, _ = Geography.objects.get_or_create(name=name)
        Region.objects.update_or_create(
            name=name,
            defaults={
                "geography": geo,
                "actuation": Region.Actuation.SHADOW if name == "eu" else Region.Actuation.ACTUATE,
            },
        )
    litellm_sink()
    emit(make_plan())
    assert sorted(p.name for p in (root / "gateway").glob("*.yaml")) == ["ap.yaml", "us.yaml"]
    assert not OutboxEntry.objects.filter(region="eu").exists()


@pytest.mark.parametrize(
    ("endpoints", "needle"),
    [
        ({"p": {"provider": "openai", "api_key": "sk-live"}}, "api_key_env"),
        ({"p": {"provider": "openai", "base": "x"}}, "unknown key 'base'"),
        ({"p": {"api_base": "https://x.example"}}, "provider is required"),
        ({"p": {"provider": "openai", "api_base": "ftp://x"}}, "api_base"),
        ({"p": {"provider": "openai", "api_key_env": "NOT A NAME"}}, "api_key_env"),
        ({"p": {"provider": "openai", "models": {"m": 3}}}, "models"),
        (["openai"], "mapping"),
    ],
)
def test_hosted_endpoints_are_checked_and_keys_are_never_stored(
    endpoints: Any, needle: str
) -> None:
    sink = AllocationSink(
        kind=AllocationSink.Kind.LITELLM, name="g", directory="g", hosted_endpoints=endpoints
    )
    with pytest.raises(ValidationError) as caught:
        sink.full_clean()
    assert needle in " ".join(caught.value.message_dict["hosted_endpoints"])


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("http://{service}.{zone}/v1", "{zone}"),
        ("{model}/v1", "http"),
        ("http://{model/v1", "template"),
        ("http://{model:>999999999}/v1", "plainly"),
        ("http://{model!r}/v1", "plainly"),
    ],
)
def test_endpoint_templates_are_checked(template: str, needle: str) -> None:
    sink = AllocationSink(
        kind=AllocationSink.Kind.LITELLM, name="g", directory="g", endpoint_template=template
    )
    with pytest.raises(ValidationError) as caught:
        sink.full_clean()
    assert needle in " ".join(caught.value.message_dict["endpoint_template"])


def test_the_api_creates_a_litellm_sink_and_names_a_bad_field(role_users: dict[str, Any]) -> None:
    client = APIClient()
    client.force_authenticate(role_users[POLICY_ADMIN])
    body = {"kind": "litellm", "name": "gw", "directory": "gateway", "hosted_endpoints": ENDPOINTS}
    made = client.post("/api/emission/sinks/", body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["hosted_endpoints"] == ENDPOINTS
    bad = client.post(
        "/api/emission/sinks/",
        {**body, "name": "gw2", "hosted_endpoints": {"p": {"provider": "x", "api_key": "k"}}},
        format="json",
    )
    assert bad.status_code == 400 and "hosted_endpoints" in bad.json()["error"]["fields"]
    assert not AllocationSink.objects.filter(name="gw2").exists()


@pytest.mark.parametrize(
    ("shares", "parts"),
    [
        ([12.0, 4.0], [7500, 2500]),
        ([14.0, 4.0], [7778, 2222]),
        ([1.0, 1.0, 1.0], [3334, 3333, 3333]),
        ([1.0, 0.0], [10000, 0]),
        ([1e-9, 1.0], [1, 9999]),
        ([], []),
    ],
)
def test_integer_weights_add_up_and_keep_every_destination(
    shares: list[float], parts: list[int]
) -> None:
    assert integer_weights(shares) == parts


def litellm_python() -> str:
    """The interpreter of the environment with LiteLLM installed (``make litellm-env``):
    ``HEADROOM_LITELLM_PYTHON``, else ``.venv-litellm`` at the repository root."""
    configured = os.environ.get("HEADROOM_LITELLM_PYTHON")
    if configured:
        return configured
    default = Path(__file__).resolve().parents[2] / ".venv-litellm" / "bin" / "python"
    if not default.exists():
        pytest.skip("LiteLLM's environment is not installed (make litellm-env)")
    return str(default)


def test_litellm_router_builds_from_the_written_config_and_draws_by_weight(root: Path) -> None:
    python = litellm_python()
    litellm_sink()
    emit(make_plan())
    written = root / "gateway" / "eu.yaml"
    # LiteLLM's own Router, in its own environment, reads the file as its proxy would.
    result = subprocess.run(
        [
            python,
            str(Path(__file__).with_name("litellm_draw.py")),
            str(written),
            "acme/m",
            "4000",
            "7",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "APIPROV_API_KEY": "test-key"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    picks = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(picks) == {"hosted_vllm/m", "openai/vendor/m-instruct"}
    assert sum(picks.values()) == 4000
    # 4 of 18 requests/s go to the provider: weight 2222 of 10,000.
    assert picks["openai/vendor/m-instruct"] / 4000 == pytest.approx(0.2222, abs=0.03)
