"""Hosted spend in finance: a plan that sends part of a demand to a hosted API is priced as
its replicas plus that spend, each as its own line.

The fleet is the planner's worked example (docs/planning.md, "Hosted overflow"): one region
with one zone of 2 GPUs at 4.00 $/GPU-hour; the shape prefills 10,000 and decodes 1,000
tokens/s, a request is 1,000 prompt + 200 output tokens (0.3 replica-seconds), planned at
75 %: a replica carries 2.5 requests/s. The tenant sends 10 requests/s (burst 1, no failure
promise): 4 replicas' worth, 2 in the inventory, so 5 requests/s go to the provider at
0.50/1.50 $ per million input/output tokens: 5 × 3,600 × (1,000 × 0.5 + 200 × 1.5) / 10⁶ =
14.40 $/h, on top of 2 replicas at 8.00 $/h: 22.40 $/h.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from rest_framework.test import APIClient

from controlplane.core.roles import FINANCE
from controlplane.finance import opencost, services
from controlplane.finance.snapshot import Served, hosted_days, snapshot_arrays
from controlplane.plans.models import Plan
from controlplane.plans.selectors import plan_solution, read_problem
from planner.forecast.finance import Sizing
from tests.controlplane.api_harness import Records
from tests.controlplane.plans_helpers import run_replan

pytestmark = pytest.mark.django_db


def hosted_fleet(records: Records, *, provider: bool = True) -> dict[str, Any]:
    geo = records.geography(name="eu")
    region = records.region(name="eu-west", geography=geo)
    zone = records.zone(region=region, name="eu-west-a")
    gpu = records.accelerator(
        name="h100", on_demand_price_per_gpu_hour=4.0, reserved_price_per_gpu_hour=2.5
    )
    records.inventory(zone=zone, accelerator=gpu, gpus_available=2)
    model = records.llm_model(name="m7b")
    shape = records.shape(
        name="m7b-1xh100",
        model=model,
        accelerator=gpu,
        gpus_per_replica=1,
        target_utilization=0.75,
    )
    records.figure(shape=shape, prefill_tokens_per_s=10_000.0, decode_tokens_per_s=1_000.0)
    mix = records.workload_class(name="chat")
    tier = records.tier(
        name="overflow",
        failure_promise="none",
        burst_factor=1.0,
        hosted_overflow=True,
        p95_ttft_slo_s=2.0,
    )
    tenant = records.tenant(name="acme", tier=tier, home_region=region, residency_regions=(region,))
    figures = {
        "peak_requests_per_s": 10.0,
        **{f"prompt_tokens_{k}": 1000.0 for k in ("p50", "mean", "p95", "p99")},
        **{f"output_tokens_{k}": 200.0 for k in ("p50", "mean", "p95", "p99")},
    }
    records.profile(tenant=tenant, model=model, workload_class=mix, **figures)
    if provider:
        records.hosted_provider(
            name="apiprov",
            region=region,
            input_price_per_mtok=0.5,
            output_price_per_mtok=1.5,
            tpm_limit=600_000,
            p95_ttft_s=0.8,
            served_models=[model],
        )
    return {"region": region, "model": model}


def hosted_plan() -> Plan:
    hosted_fleet(Records())
    run = run_replan()
    assert run.plan is not None and run.plan.state == Plan.State.ACTIVE, run.error
    return run.plan


# A moment in December 2026 (31 days, 744 hours); February 2027 is all forecast (672 hours).
NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
REPLICAS_PER_HOUR = 8.0  # 2 replicas × 1 GPU × 4.00 $/GPU-hour
HOSTED_PER_HOUR = 14.4  # 5 requests/s × 3,600 × 800 $ per 10⁶ requests


def test_the_plan_sends_the_overflow_to_the_provider() -> None:
    plan = hosted_plan()
    solution = plan_solution(plan)
    assert [(r.zone, r.replicas) for r in solution.replicas] == [("eu-west-a", 2)]
    (row,) = solution.hosted or ()
    assert row.provider == "apiprov"
    assert row.requests_per_s == pytest.approx(5.0)
    assert row.cost_per_hour == pytest.approx(HOSTED_PER_HOUR)
    assert plan.cost_per_hour == pytest.approx(REPLICAS_PER_HOUR + HOSTED_PER_HOUR)


def _rows(report: services.Report) -> dict[str, dict[str, Any]]:
    return {row["period"]: row for row in report.rows}


def test_a_period_costs_the_replicas_plus_the_hosted_spend() -> None:
    plan = hosted_plan()
    rows = _rows(services.finance_forecast(period="month", horizon=3, now=NOW))
    # December: the plan's days (up to the 7th) and the forecast's (declared: the plan).
    december, february = rows["2026-12"], rows["2027-02"]
    assert december["sized_by"] == "plan+forecast" and february["sized_by"] == "forecast"
    assert december["hosted_cost"] == 10_713.60  # 14.40 × 744
    assert december["cost"] == 16_665.60  # (8.00 + 14.40) × 744 = 22.40 × 744
    assert december["cost"] == pytest.approx(float(plan.cost_per_hour) * 744, abs=0.005)
    assert december["cost_low"] == december["cost_high"] == 16_665.60
    assert december["replica_hours"] == 1_488.00 and december["gpu_hours"] == 1_488.00
    assert february["hosted_cost"] == 9_676.80  # 14.40 × 672
    assert february["cost"] == 15_052.80  # 22.40 × 672


def test_groups_carry_the_hosted_spend_under_the_providers_region_and_name() -> None:
    hosted_plan()
    rows = services.finance_forecast(
        period="month", group_by=["region", "accelerator"], horizon=1, now=NOW
    ).rows
    by_group = {(r["region"], r["accelerator"]): r for r in rows}
    assert set(by_group) == {("eu-west", "h100"), ("eu-west", "(hosted) apiprov")}
    replicas, hosted = by_group[("eu-west", "h100")], by_group[("eu-west", "(hosted) apiprov")]
    assert (replicas["cost"], replicas["hosted_cost"]) == (5_952.00, 0.0)  # 8.00 × 744
    assert (hosted["cost"], hosted["hosted_cost"]) == (10_713.60, 10_713.60)
    assert (hosted["replica_hours"], hosted["gpu_hours"]) == (0.0, 0.0)
    (tenant,) = services.finance_forecast(
        period="month", group_by=["tenant"], horizon=1, now=NOW
    ).rows
    assert (tenant["tenant"], tenant["cost"], tenant["hosted_cost"]) == (
        "acme",
        16_665.60,
        10_713.60,
    )
    # A tenant key's cut keeps the tenant's hosted spend.
    (own,) = services.finance_forecast(period="month", horizon=1, now=NOW, tenant="acme").rows
    assert (own["cost"], own["hosted_cost"]) == (16_665.60, 10_713.60)


def test_showback_charges_the_hosted_spend_to_the_tenant_and_its_replicas_carry_the_rest() -> None:
    hosted_plan()
    report = services.finance_showback(period="month", horizon=1, now=NOW)
    (line,) = [r for r in report.rows if r["line"] == "tenant"]
    (idle,) = [r for r in report.rows if r["line"] == "idle-headroom"]
    # 10 requests/s all month, half of them hosted: the replicas' half uses
    # 13,392,000 × 0.3 s ÷ 0.75 ÷ 3,600 = 1,488 replica-hours, the 2 replicas × 744 hours.
    assert line["requests"] == 26_784_000  # 10 × 3,600 × 744
    assert line["tokens"] == 32_140_800_000  # × 1,200
    assert line["used_replica_hours"] == 1_488.00
    assert (line["usage_cost"], line["idle_share"]) == (5_952.00, 0.0)
    assert line["hosted_cost"] == 10_713.60
    assert line["cost"] == 16_665.60
    assert line["cost_per_million_tokens"] == 0.52  # 16,665.60 ÷ 32,140.8
    assert (idle["idle_cost"], idle["hosted_cost"]) == (0.0, 0.0)


def test_history_holds_the_hosted_spend_while_the_plan_is_active() -> None:
    plan = hosted_plan()
    Plan.objects.filter(pk=plan.pk).update(activated_at=NOW - timedelta(hours=10))
    (row,) = services.finance_history(period="month", horizon=1, now=NOW).rows
    assert row["hours_active"] == 10.0
    assert row["hosted_cost"] == 144.00  # 14.40 × 10
    assert row["cost"] == 224.00  # 22.40 × 10
    assert row["replica_hours"] == 20.0
    by_region = services.finance_history(
        period="month", group_by=["region", "accelerator"], horizon=1, now=NOW
    ).rows
    assert {(r["accelerator"], r["cost"], r["hosted_cost"]) for r in by_region} == {
        ("h100", 80.0, 0.0),
        ("(hosted) apiprov", 144.0, 144.0),
    }


def test_opencost_puts_the_hosted_spend_in_external_cost() -> None:
    hosted_plan()
    body = opencost.opencost_allocation(
        {"window": "today", "aggregate": "tenant", "includeIdle": "true"}, now=NOW
    )
    (allocations,) = body["data"]
    acme = allocations["acme"]
    assert acme["gpuCost"] == 192.0  # 2 replicas × 4.00 × 24, all used by acme's load
    assert acme["externalCost"] == 345.6  # 14.40 × 24
    assert acme["totalCost"] == 537.6  # 22.40 × 24
    assert acme["gpuHours"] == 48.0
    by_gpu = opencost.opencost_allocation({"window": "today", "aggregate": "accelerator"}, now=NOW)
    (sets,) = by_gpu["data"]
    assert sets["(hosted) apiprov"]["externalCost"] == 345.6
    assert sets["(hosted) apiprov"]["gpuCost"] == 0.0
    assert sets["(hosted) apiprov"]["totalCost"] == 345.6
    assert sets["h100"]["externalCost"] == 0.0 and sets["h100"]["totalCost"] == 192.0


def test_the_api_serves_hosted_cost_as_a_column_in_json_and_csv(
    api_client_for: Callable[[str], APIClient],
) -> None:
    plan = hosted_plan()
    client = api_client_for(FINANCE)
    body = client.get("/api/finance/forecast/?horizon=1").json()
    assert "hosted_cost" in body["columns"]
    (row,) = body["rows"]
    start = datetime.fromisoformat(row["period_start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(row["period_end"].replace("Z", "+00:00"))
    hours = (end - start).total_seconds() / 3600
    assert row["hosted_cost"] == round(HOSTED_PER_HOUR * hours, 2)
    assert row["cost"] == round(float(plan.cost_per_hour) * hours, 2)
    assert row["cost"] == round(row["hosted_cost"] + REPLICAS_PER_HOUR * hours, 2)
    csv_rows = list(
        csv.DictReader(
            io.StringIO(client.get("/api/finance/forecast/?horizon=1&format=csv").content.decode())
        )
    )
    assert float(csv_rows[0]["hosted_cost"]) == row["hosted_cost"]
    for endpoint in ("showback", "history"):
        answer = client.get(f"/api/finance/{endpoint}/?horizon=1").json()
        assert "hosted_cost" in answer["columns"], endpoint
    bad = client.get("/api/finance/forecast/?group_by=provider")
    assert bad.status_code == 400 and "group_by" in bad.json()["error"]["fields"]


def test_a_plan_without_hosted_rows_has_hosted_cost_zero_everywhere() -> None:
    hosted_fleet(Records(), provider=False)
    run = run_replan()
    assert run.plan is not None and run.plan.state == Plan.State.ACTIVE, run.error
    assert plan_solution(run.plan).hosted is None
    snapshot = services.finance_snapshot(now=NOW)
    assert snapshot.hosted == []
    assert "hosted_q" not in snapshot_arrays(snapshot)
    (row,) = services.finance_forecast(period="month", horizon=1, now=NOW).rows
    # The 2 replicas alone, 5 requests/s unserved.
    assert (row["cost"], row["hosted_cost"]) == (5_952.00, 0.0)
    assert all(
        r["hosted_cost"] == 0.0
        for r in services.finance_showback(period="month", horizon=1, now=NOW).rows
    )


def test_a_forecast_day_scales_its_solves_hosted_rows_to_the_days_rate() -> None:
    """The rule for re-sized days: a day given the fleet solved for demand v sends the solve's
    hosted rows × rate(day) ÷ v (its routes scaled down to the day)."""
    problem = read_problem(
        {
            "format": "placement-problem/v1",
            "target_utilization": 0.75,
            "regions": [{"name": "eu-west", "zones": ["eu-west-a"]}],
            "accelerators": [{"name": "H100", "price_per_gpu_hour": 4.0}],
            "inventory": [{"zone": "eu-west-a", "accelerator": "H100", "gpus": 2}],
            "shapes": [
                {
                    "name": "m7b-1xH100",
                    "model": "m7b",
                    "accelerator": "H100",
                    "gpus": 1,
                    "prefill_tokens_per_s": 10000,
                    "decode_tokens_per_s": 1000,
                }
            ],
            "demands": [
                {
                    "id": "chat",
                    "tenant": "acme",
                    "model": "m7b",
                    "home_region": "eu-west",
                    "allowed_regions": ["eu-west"],
                    "requests_per_s": 10,
                    "prompt_tokens": 1000,
                    "output_tokens": 200,
                    "hosted_overflow": True,
                }
            ],
            "hosted": [
                {
                    "name": "apiprov",
                    "region": "eu-west",
                    "models": ["m7b"],
                    "input_price_per_mtok": 0.5,
                    "output_price_per_mtok": 1.5,
                    "tpm_limit": 600_000,
                    "p95_ttft_s": 0.8,
                }
            ],
        }
    )
    fleet = Sizing(
        replicas=(("eu-west-a", "m7b-1xH100", 2),),
        routing=(("chat", "eu-west", "m7b-1xH100", 1.0),),
        cost_per_hour=22.4,
        exact=True,
    )
    plan = Sizing(replicas=fleet.replicas, routing=fleet.routing, cost_per_hour=22.4, exact=True)
    sent = Served(routed={"chat": 5.0}, hosted={"chat": (("apiprov", 5.0, 14.4),)})
    # Day 0 is at the solve's own rate (10 requests/s), day 1 at 8 inside the solve's run.
    day_rates = np.array([[10.0], [8.0]])
    rows, arrays = hosted_days(
        problem=problem,
        demand_ids=["chat"],
        by_edge={"q": [fleet, fleet], "low": [fleet, fleet], "high": [fleet, fleet]},
        in_force=plan,
        rates={"q": day_rates, "low": day_rates * 0.5, "high": day_rates},
        served={id(fleet): sent, id(plan): sent},
        vectors={id(fleet): np.array([10.0]), id(plan): np.array([10.0])},
        mean_daily={"chat": np.array([10.0, 8.0]) * 86400},
        quantiles={"chat": 0.9},
    )
    assert rows == [
        {
            "demand": "chat",
            "tenant": "acme",
            "tier": "",
            "model": "m7b",
            "provider": "apiprov",
            "region": "eu-west",
            "quantile": 0.9,
        }
    ]
    assert arrays["hosted_q"][0].tolist() == pytest.approx([345.6, 276.48])  # 14.40 × 24 × 0.8
    assert arrays["hosted_low"][0].tolist() == pytest.approx([172.8, 138.24])  # at half the rate
    assert arrays["hosted_plan"][0].tolist() == pytest.approx([345.6, 345.6])  # the plan, × 24
    # Half of the expected requests go hosted (5 of the 10 planned requests/s served).
    assert arrays["hosted_requests"][0].tolist() == pytest.approx([432_000, 345_600])
    assert arrays["hosted_tokens"][0].tolist() == pytest.approx([518_400_000, 414_720_000])
