"""The OpenCost-compatible endpoint: OpenCost's parameters, its fields, idle as its own row.

The fleet is the seeds' sizing example with a second tenant (``finance_helpers``): 27 replicas
of one 1-GPU shape at 2.00 $/GPU-hour, 54 $/h, declared demand (flat).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane.core.roles import FINANCE
from controlplane.finance import services
from controlplane.policies.models import Tenant
from tests.controlplane.api_harness import APITest
from tests.controlplane.finance_helpers import active_plan, seeds_fleet
from tests.controlplane.tenant_key_support import issue_key, key_client

URL = "/api/finance/forecast/opencost/"
# A few of OpenCost's AllocationJSON names (core/pkg/opencost/allocation_json.go) a FinOps
# tool reads; the endpoint answers all 49 non-omitempty ones.
READ_BY_TOOLS = {
    "name",
    "properties",
    "window",
    "start",
    "end",
    "minutes",
    "cpuCost",
    "gpuCount",
    "gpuHours",
    "gpuCost",
    "gpuCostIdle",
    "gpuEfficiency",
    "ramCost",
    "pvCost",
    "networkCost",
    "loadBalancerCost",
    "sharedCost",
    "externalCost",
    "totalCost",
    "totalEfficiency",
}


def day(offset: int) -> datetime:
    today = timezone.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=offset)


def rfc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def window(first: int, last: int) -> str:
    return f"{rfc(day(first))},{rfc(day(last))}"


class OpenCostTest(APITest):
    @pytest.fixture(autouse=True)
    def _fleet(self, _harness: None) -> None:
        seeds_fleet(self.records, with_second_tenant=True)
        self.plan = active_plan()

    def get(self, api_client_for: Any, **params: str) -> dict[str, Any]:
        response = api_client_for(FINANCE).get(URL, params)
        assert response.status_code == 200, response.content
        body: dict[str, Any] = response.json()
        assert (body["code"], body["status"]) == (200, "success")
        return body


class TestWindowAndStep(OpenCostTest):
    def test_a_week_by_day_is_seven_daily_sets(self, api_client_for: Any) -> None:
        body = self.get(api_client_for, window=window(1, 8), step="1d", aggregate="tenant")
        assert len(body["data"]) == 7
        for k, allocations in enumerate(body["data"]):
            assert set(allocations) == {"assistant", "helper"}
            for allocation in allocations.values():
                assert allocation["window"] == {
                    "start": rfc(day(1 + k)),
                    "end": rfc(day(2 + k)),
                }
                assert allocation["minutes"] == 1440
        # Accumulated: one set, the sum of the seven.
        one = self.get(
            api_client_for, window=window(1, 8), step="1d", aggregate="tenant", accumulate="true"
        )
        assert len(one["data"]) == 1
        (summed,) = one["data"]
        for name in ("assistant", "helper"):
            assert summed[name]["gpuCost"] == pytest.approx(
                sum(s[name]["gpuCost"] for s in body["data"]), abs=1e-3
            )
            assert summed[name]["window"] == {"start": rfc(day(1)), "end": rfc(day(8))}
        # No step: the window is one set, as OpenCost's default.
        assert len(self.get(api_client_for, window=window(1, 8))["data"]) == 1

    def test_today_and_accumulate_by_week(self, api_client_for: Any) -> None:
        today = self.get(api_client_for, window="today", includeIdle="true")
        (allocations,) = today["data"]
        # Today is the plan: 27 GPUs × 24 h at 2.00, the region's usage plus its idle.
        assert sum(a["totalCost"] for a in allocations.values()) == pytest.approx(54 * 24)
        assert sum(a["gpuHours"] for a in allocations.values()) == pytest.approx(27 * 24)
        assert (
            self.get(api_client_for, window="1d")["data"]
            == self.get(api_client_for, window="today")["data"]
        )
        by_week = self.get(api_client_for, window=window(0, 21), step="1d", accumulateBy="week")[
            "data"
        ]
        weeks = {
            datetime.fromisoformat(a["start"]).isocalendar()[1] for s in by_week for a in s.values()
        }
        assert len(by_week) == len(weeks) in (3, 4)

    def test_period_and_horizon_without_a_window(self, api_client_for: Any) -> None:
        body = self.get(api_client_for, aggregate="tenant", horizon="2", shareIdle="true")
        rows = services.finance_forecast(group_by=["tenant"], horizon=2).rows
        assert len(body["data"]) == 2
        first = body["data"][0]
        for row in (r for r in rows if r["period"] == rows[0]["period"]):
            # Idle shared by use: each tenant's cost is the forecast's tenant row.
            assert first[row["tenant"]]["totalCost"] == pytest.approx(row["cost"], abs=0.01)


class TestIdle(OpenCostTest):
    def test_idle_is_its_own_allocation_and_the_sets_add_up(self, api_client_for: Any) -> None:
        span = window(1, 3)
        forecast = services.finance_forecast(period="day", horizon=3).rows[1:]
        plain = self.get(api_client_for, window=span, step="1d", aggregate="tenant")
        with_idle = self.get(
            api_client_for, window=span, step="1d", aggregate="tenant", includeIdle="true"
        )
        shared = self.get(
            api_client_for,
            window=span,
            step="1d",
            aggregate="tenant",
            includeIdle="true",
            shareIdle="true",
        )
        for k, row in enumerate(forecast):
            assert "__idle__" not in plain["data"][k]  # OpenCost's default: includeIdle false
            sets = with_idle["data"][k]
            idle = sets["__idle__"]
            assert idle["name"] == "__idle__" and idle["gpuCost"] > 0
            # Usage plus idle is the day's whole cost and GPU-hours.
            assert sum(a["totalCost"] for a in sets.values()) == pytest.approx(row["cost"])
            assert sum(a["gpuHours"] for a in sets.values()) == pytest.approx(row["gpu_hours"])
            for name in ("assistant", "helper"):
                usage = sets[name]
                assert usage == plain["data"][k][name]
                assert usage["gpuCostIdle"] == 0
                assert 0 < usage["gpuEfficiency"] <= 1
                with_share = shared["data"][k][name]
                assert with_share["gpuCost"] == pytest.approx(
                    usage["gpuCost"] + with_share["gpuCostIdle"], abs=1e-4
                )
            # Shared out: every pool serves someone, so nothing is left idle.
            assert "__idle__" not in shared["data"][k]
            total = sum(a["totalCost"] for a in shared["data"][k].values())
            assert total == pytest.approx(row["cost"])

    def test_every_allocation_has_opencosts_fields(self, api_client_for: Any) -> None:
        body = self.get(api_client_for, window=window(1, 2), includeIdle="true")
        for allocation in body["data"][0].values():
            assert len(allocation) == 49
            assert READ_BY_TOOLS <= set(allocation)
            assert allocation["cpuCost"] == allocation["ramCost"] == 0
            assert allocation["totalCost"] == allocation["gpuCost"]
        assert body["data"][0]["r1"]["properties"] == {"labels": {"region": "r1"}}

    def test_a_tenant_key_sees_its_own_allocations_and_no_idle(self) -> None:
        client = key_client(issue_key(Tenant.objects.get(name="helper")))
        body = client.get(URL, {"window": window(1, 2), "includeIdle": "true"})
        assert body.status_code == 200, body.content
        assert list(body.json()["data"][0]) == ["r1/helper"]


class TestUnsupported(OpenCostTest):
    @pytest.mark.parametrize(
        ("params", "field"),
        [
            ({"window": "7d", "step": "1d"}, "window"),  # the past week: history's
            ({"window": "yesterday"}, "window"),
            ({"window": "week"}, "window"),
            ({"window": "lastmonth"}, "window"),
            ({"window": "2020-01-01T00:00:00Z,2020-01-02T00:00:00Z"}, "window"),
            # Ends at the next hour and starts 25 h before it: never both at 00:00 UTC (a 24 h
            # window would be whole days when asked between 23:00 and midnight).
            ({"window": "25h"}, "window"),
            ({"window": "tomorrow"}, "window"),
            ({"window": "3000-01-01T00:00:00Z,3000-01-02T00:00:00Z"}, "window"),
            ({"window": "today", "period": "month"}, "period"),
            ({"window": "today", "step": "12h"}, "step"),
            ({"window": "today", "step": "x"}, "step"),
            ({"resolution": "1h"}, "resolution"),
            ({"accumulate": "maybe"}, "accumulate"),
            ({"accumulateBy": "hour"}, "accumulateBy"),
            ({"includeIdle": "yes"}, "includeIdle"),
            ({"shareIdle": "2"}, "shareIdle"),
            ({"idleByNode": "true"}, "idleByNode"),
            (
                {"includeProportionalAssetResourceCosts": "true"},
                "includeProportionalAssetResourceCosts",
            ),
            ({"aggregate": "namespace"}, "aggregate"),
            ({"filter": 'namespace:"kube-system"'}, "filter"),
            ({"step": "1d"}, "step"),  # a step needs a window
            ({"step": ""}, "step"),  # given, but empty
            ({"window": "today", "aggregate": ""}, "aggregate"),
        ],
    )
    def test_is_a_400_naming_it(
        self, params: dict[str, str], field: str, api_client_for: Any
    ) -> None:
        response = api_client_for(FINANCE).get(URL, params)
        assert response.status_code == 400, (params, response.content)
        assert field in response.json()["error"]["fields"], response.json()

    def test_a_step_that_does_not_divide_the_window(self, api_client_for: Any) -> None:
        response = api_client_for(FINANCE).get(URL, {"window": window(1, 8), "step": "3d"})
        assert response.status_code == 400
        assert "step" in response.json()["error"]["fields"]
        by_month = api_client_for(FINANCE).get(
            URL, {"window": window(1, 8), "step": "7d", "accumulateBy": "month"}
        )
        assert by_month.status_code == 400
        assert "accumulateBy" in by_month.json()["error"]["fields"]
