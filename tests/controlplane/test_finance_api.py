"""The finance API: roles, bad parameters, CSV against JSON, and the sums that must agree.

The fleet is the seeds' sizing example in the database (``finance_helpers``): 27 replicas of
one 1-GPU shape at 2.00 $/GPU-hour, 54 $/h, plus a 2 requests/s tenant with no promise.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any, cast

import numpy as np
import pytest
import yaml
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from controlplane.core.roles import FINANCE, VIEWER
from controlplane.finance import services
from controlplane.finance.models import FinanceReport, FinanceSnapshot, PromisePricing
from controlplane.finance.renderers import CSVRenderer
from controlplane.finance.snapshot import snapshot_arrays
from controlplane.plans.models import Plan
from controlplane.policies.models import Tenant
from planner.forecast.finance import HOURS_PER_MONTH, period_end
from tests.controlplane.api_harness import APITest, ReportEndpointContract
from tests.controlplane.finance_helpers import ON_DEMAND, RESERVED, active_plan, seeds_fleet
from tests.controlplane.plans_helpers import raise_profile
from tests.controlplane.tenant_key_support import issue_key, key_client

ENDPOINTS = (
    "/api/finance/forecast/",
    "/api/finance/forecast/opencost/",
    "/api/finance/commitments/",
    "/api/finance/promises/",
    "/api/finance/showback/",
    "/api/finance/history/",
)
CSV_ENDPOINTS = tuple(e for e in ENDPOINTS if "opencost" not in e)


def month_hours(now: datetime) -> int:
    start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (period_end(int(start.timestamp()), "month") - int(start.timestamp())) // 3600


def parse_csv(content: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(content.decode("utf-8"))))


class FinanceTest(APITest):
    plan: Plan

    @pytest.fixture(autouse=True)
    def _fleet(self, _harness: None) -> None:
        seeds_fleet(self.records, with_second_tenant=True)
        self.plan = active_plan()


class TestFinanceEndpoints(ReportEndpointContract):
    urls = ENDPOINTS
    json_only = frozenset({"/api/finance/forecast/opencost/"})  # as OpenCost's own API

    def setup_reports(self) -> None:
        seeds_fleet(self.records, with_second_tenant=True)
        active_plan()

    def bad_parameters(self) -> Iterator[tuple[str, dict[str, str], str]]:
        forecast = "/api/finance/forecast/"
        yield forecast, {"group_by": "colour"}, "group_by"
        yield forecast, {"group_by": "region,planet"}, "group_by"
        yield forecast, {"period": "year"}, "period"
        yield forecast, {"horizon": "-3"}, "horizon"
        yield forecast, {"horizon": "0"}, "horizon"
        yield forecast, {"horizon": "x"}, "horizon"
        yield forecast, {"horizon": "300", "period": "month"}, "horizon"
        yield forecast, {"period": "\x00"}, "period"
        for url in ("/api/finance/commitments/", "/api/finance/showback/"):
            yield url, {"period": "fortnight"}, "period"
            yield url, {"horizon": "-1"}, "horizon"
        yield "/api/finance/history/", {"group_by": "colour"}, "group_by"
        yield "/api/finance/history/", {"period": "hour"}, "period"
        yield "/api/finance/history/", {"horizon": "-1"}, "horizon"
        yield "/api/finance/forecast/opencost/", {"aggregate": "namespace"}, "aggregate"
        yield "/api/finance/forecast/opencost/", {"aggregate": ""}, "aggregate"
        yield "/api/finance/forecast/opencost/", {"horizon": "-1"}, "horizon"


class TestNoActivePlan(FinanceTest):
    def test_no_active_plan_is_404(self, api_client_for: Any) -> None:
        Plan.objects.update(state=Plan.State.SUPERSEDED)
        client = api_client_for(VIEWER)
        for url in ENDPOINTS:
            if url.endswith("history/"):
                continue
            response = client.get(url)
            assert response.status_code == 404, url
            assert response.json()["error"]["code"] == "not_found"


class TestCsvAndJson(FinanceTest):
    @pytest.mark.parametrize("url", CSV_ENDPOINTS)
    def test_csv_carries_the_json_numbers(self, url: str, api_client_for: Any) -> None:
        client = api_client_for(FINANCE)
        Plan.objects.filter(pk=self.plan.pk).update(activated_at=timezone.now() - timedelta(days=2))
        params = {"group_by": "region,tenant"} if "forecast" in url or "history" in url else {}
        body = client.get(url, params).json()
        as_csv = client.get(url, {**params, "format": "csv"})
        assert as_csv.status_code == 200
        assert as_csv["Content-Type"].startswith("text/csv")
        by_accept = client.get(url, params, HTTP_ACCEPT="text/csv")
        assert by_accept.status_code == 200 and by_accept.content == as_csv.content
        rows = parse_csv(as_csv.content)
        assert list(rows[0].keys()) == body["columns"]
        assert len(rows) == len(body["rows"]) > 0
        for from_csv, from_json in zip(rows, body["rows"], strict=True):
            for column in body["columns"]:
                value = from_json[column]
                if value is None:
                    assert from_csv[column] == "", column
                elif isinstance(value, bool) or isinstance(value, str):
                    assert from_csv[column] == str(value), column
                else:
                    assert float(from_csv[column]) == pytest.approx(value, abs=1e-9), column

    def test_opencost_shape(self, api_client_for: Any) -> None:
        client = api_client_for(FINANCE)
        body = client.get(
            "/api/finance/forecast/opencost/",
            {"aggregate": "tenant", "horizon": 2, "shareIdle": "true"},
        ).json()
        forecast = client.get("/api/finance/forecast/", {"group_by": "tenant", "horizon": 2})
        rows = forecast.json()["rows"]
        assert (body["code"], body["status"]) == (200, "success")
        assert len(body["data"]) == 2
        first = body["data"][0]
        assert set(first) == {r["tenant"] for r in rows if r["period"] == rows[0]["period"]} - {
            services.IDLE
        } | ({"__idle__"} if any(r["tenant"] == services.IDLE for r in rows) else set())
        allocation = first["assistant"]
        assert allocation["name"] == "assistant"
        assert set(allocation["window"]) == {"start", "end"}
        row = next(r for r in rows if r["tenant"] == "assistant")
        assert allocation["gpuHours"] == pytest.approx(row["gpu_hours"], abs=0.01)
        assert allocation["gpuCost"] == allocation["totalCost"]
        assert allocation["totalCost"] == pytest.approx(row["cost"], abs=0.01)
        assert allocation["minutes"] == month_hours(timezone.now()) * 60


class TestSums(FinanceTest):
    def test_current_month_is_the_active_plan_times_its_hours(self, api_client_for: Any) -> None:
        client = api_client_for(FINANCE)
        hours = month_hours(timezone.now())
        assert self.plan.cost_per_hour == pytest.approx(54.0)
        total = client.get("/api/finance/forecast/", {"horizon": 3}).json()["rows"]
        # The plan runs up to the end of today, the forecast after it; declared demand is
        # flat, and re-solving the plan's problem at its own rates gives the plan back.
        assert total[0]["sized_by"] in ("plan", "plan+forecast")
        assert total[0]["cost"] == pytest.approx(self.plan.cost_per_hour * hours, abs=0.01)
        assert total[0]["replica_hours"] == 27 * hours
        assert [r["sized_by"] for r in total[1:]] == ["forecast", "forecast"]
        for group_by in ("region", "zone,shape", "tenant", "tier,accelerator,model"):
            rows = client.get("/api/finance/forecast/", {"group_by": group_by}).json()["rows"]
            current = [r for r in rows if r["period"] == total[0]["period"]]
            assert sum(r["cost"] for r in current) == pytest.approx(total[0]["cost"], abs=0.05)
        # The current week and day cost the plan too, hour for hour.
        for period, span_hours in (("week", 168), ("day", 24)):
            rows = client.get("/api/finance/forecast/", {"period": period, "horizon": 2})
            current = rows.json()["rows"][0]
            expected = ("plan",) if period == "day" else ("plan", "plan+forecast")
            assert current["sized_by"] in expected
            assert current["cost"] == pytest.approx(54.0 * span_hours, abs=0.01)
        # Declared demand is flat: later months are the plan at their own hours.
        for row in total[1:]:
            span = (
                datetime.fromisoformat(row["period_end"])
                - datetime.fromisoformat(row["period_start"])
            ).total_seconds() / 3600
            assert row["cost"] == pytest.approx(54.0 * span, abs=0.01)

    def test_showback_lines_add_up_to_the_forecast(self, api_client_for: Any) -> None:
        client = api_client_for(FINANCE)
        for period in ("quarter", "month", "week", "day"):
            forecast = client.get("/api/finance/forecast/", {"period": period, "horizon": 3})
            showback = client.get("/api/finance/showback/", {"period": period, "horizon": 3})
            totals = {r["period"]: r["cost"] for r in forecast.json()["rows"]}
            for label, total in totals.items():
                lines = [r for r in showback.json()["rows"] if r["period"] == label]
                tenants = [r for r in lines if r["line"] == "tenant"]
                (idle,) = [r for r in lines if r["line"] == "idle-headroom"]
                usage = sum(r["usage_cost"] for r in tenants)
                assert usage + idle["idle_cost"] == pytest.approx(total, abs=0.05)
                charged = sum(r["cost"] for r in tenants)
                assert charged + idle["idle_unallocated"] == pytest.approx(total, abs=0.05)
                assert idle["idle_cost"] > 0  # burst and zone headroom are idle at the mean
                assert {r["tenant"] for r in tenants} == {"assistant", "helper"}
                for r in tenants:
                    assert r["cost_per_million_tokens"] == pytest.approx(
                        r["cost"] / r["tokens"] * 1e6, abs=0.01
                    )

    def test_tenant_split_follows_load(self, api_client_for: Any) -> None:
        rows = api_client_for(FINANCE).get("/api/finance/showback/", {"horizon": 1}).json()["rows"]
        tenants = {r["tenant"]: r for r in rows if r["line"] == "tenant"}
        # 8 and 2 requests/s of the same request cost: usage 4:1, idle shared 4:1.
        assert tenants["assistant"]["usage_cost"] == pytest.approx(
            4 * tenants["helper"]["usage_cost"], rel=1e-3
        )
        assert tenants["assistant"]["idle_share"] == pytest.approx(
            4 * tenants["helper"]["idle_share"], rel=1e-3
        )
        # Usage: 10 requests/s × 1 replica-second ÷ 0.7 = 14.29 replicas of 27, at 2 $/h.
        hours = month_hours(timezone.now())
        usage = tenants["assistant"]["usage_cost"] + tenants["helper"]["usage_cost"]
        assert usage == pytest.approx(10 / 0.7 * ON_DEMAND * hours, abs=0.05)


class TestCommitments(FinanceTest):
    def test_hand_computed_month(self, api_client_for: Any) -> None:
        # Flat 27 GPUs every hour; r/o = 1.3 / 2.0 = 0.65 < 1, so all 27 are worth reserving.
        # A month of H hours: all on demand 2.0 × 27 × H; reserved 1.3 × 27 × H; saving
        # 0.7 × 27 × H; nothing on demand, nothing idle.
        hours = month_hours(timezone.now())
        rows = api_client_for(FINANCE).get("/api/finance/commitments/", {"horizon": 2}).json()
        first = rows["rows"][0]
        assert (first["region"], first["accelerator"], first["reserved_gpus"]) == (
            "r1",
            "gpu80",
            27,
        )
        assert first["break_even"] == 0.65
        assert first["cost_all_on_demand"] == pytest.approx(ON_DEMAND * 27 * hours)
        assert first["cost"] == pytest.approx(RESERVED * 27 * hours)
        assert first["saving"] == pytest.approx(0.7 * 27 * hours)
        assert first["on_demand_gpu_hours"] == first["idle_reserved_gpu_hours"] == 0

    def test_level_is_the_brute_force_minimum_of_the_low_series(self) -> None:
        report = services.finance_commitments(horizon=3)
        snapshot = FinanceSnapshot.objects.get(pk=report.snapshot)
        arrays = snapshot_arrays(snapshot)
        spans = sorted({(r["period_start"], r["period_end"]) for r in report.rows})
        first = int(snapshot.start.timestamp())
        lo = (int(datetime.fromisoformat(spans[0][0]).timestamp()) - first) // 3600
        now_hi = (int(datetime.fromisoformat(spans[0][1]).timestamp()) - first) // 3600
        hi = (int(datetime.fromisoformat(spans[-1][1]).timestamp()) - first) // 3600
        low = arrays["gpu_low"][0, lo:hi].astype(np.int64)
        low[: now_hi - lo] = snapshot.gpu_pools[0]["gpus"]
        r, o = Fraction(RESERVED), Fraction(ON_DEMAND)
        costs = [
            r * k * low.size + o * int(np.maximum(low - k, 0).sum())
            for k in range(int(low.max()) + 2)
        ]
        assert report.rows[0]["reserved_gpus"] == costs.index(min(costs))


class TestPromises(APITest):
    def test_prices_reproduce_the_seeds_12_18_27(self, api_client_for: Any) -> None:
        seeds_fleet(self.records)
        plan = active_plan()
        assert sum(a.replicas for a in plan.allocations.all()) == 27
        rows = api_client_for(FINANCE).get("/api/finance/promises/").json()["rows"]
        fleet = {r["promise"]: r for r in rows if r["scope"] == "fleet"}
        # Zone survival: 27 → 19 (N+1 kept: 18 carry the burst, one spare); N+1: 19 → 18;
        # burst: 18 → 12, the expected peak alone. One replica is one GPU at 2.00 $/h.
        assert (fleet["zone"]["replicas_with"], fleet["zone"]["replicas_without"]) == (27, 19)
        assert (fleet["n+1"]["replicas_with"], fleet["n+1"]["replicas_without"]) == (19, 18)
        assert (fleet["burst"]["replicas_with"], fleet["burst"]["replicas_without"]) == (18, 12)
        assert fleet["zone"]["price_per_hour"] == 16.0
        assert fleet["n+1"]["price_per_hour"] == 2.0
        assert fleet["burst"]["price_per_hour"] == 12.0
        assert fleet["zone"]["price_per_month"] == 16.0 * HOURS_PER_MONTH
        tier = {r["promise"]: r for r in rows if r["scope"] == "tier"}
        tenant = {r["promise"]: r for r in rows if r["scope"] == "tenant"}
        for promise, row in fleet.items():
            assert tier[promise]["price_per_hour"] == row["price_per_hour"]
            assert tenant[promise]["price_per_hour"] == row["price_per_hour"]
            assert tenant[promise]["name"] == "assistant"

    def test_computed_once_per_plan_version(self, api_client_for: Any) -> None:
        seeds_fleet(self.records, with_second_tenant=True)
        active_plan()
        client = api_client_for(VIEWER)
        first = client.get("/api/finance/promises/").json()
        assert PromisePricing.objects.count() == 1
        again = client.get("/api/finance/promises/").json()
        assert again["rows"] == first["rows"] and PromisePricing.objects.count() == 1
        # The helper's tier promises nothing, so it carries none of any promise's price.
        plain = [r for r in first["rows"] if r["scope"] == "tier" and r["name"] == "plain"]
        assert plain and all(r["price_per_hour"] == 0 for r in plain)
        # Tenants add up to their tier, tiers to the fleet.
        for promise in ("zone", "n+1", "burst"):
            rows = [r for r in first["rows"] if r["promise"] == promise]
            (fleet,) = [r for r in rows if r["scope"] == "fleet"]
            for scope in ("tier", "tenant"):
                total = sum(r["price_per_hour"] for r in rows if r["scope"] == scope)
                assert total == pytest.approx(fleet["price_per_hour"], abs=0.02)
                # The assistant promises all three, so every share is some tenant's.
                shares = sum(r["share"] for r in rows if r["scope"] == scope)
                assert shares == pytest.approx(1.0, abs=1e-5)


class TestStoredOnce(FinanceTest):
    def test_second_call_reads_the_stored_rows(self, api_client_for: Any) -> None:
        client = api_client_for(FINANCE)
        params = {"group_by": "tenant,zone", "period": "week"}
        first = client.get("/api/finance/forecast/", params).json()
        assert FinanceSnapshot.objects.count() == 1
        assert FinanceReport.objects.count() == 1
        with CaptureQueriesContext(connection) as queries:
            second = client.get("/api/finance/forecast/", params).json()
        assert second == first
        assert FinanceSnapshot.objects.count() == 1 and FinanceReport.objects.count() == 1
        # The active plan, its rows, the snapshot and the stored report.
        assert len(queries) <= 6, [q["sql"][:80] for q in queries]
        client.get("/api/finance/showback/")
        assert FinanceSnapshot.objects.count() == 1  # one snapshot serves every report

    def test_a_stored_report_is_read_without_the_bulk(self, api_client_for: Any) -> None:
        client = api_client_for(FINANCE)
        first = client.get("/api/finance/showback/").json()
        with CaptureQueriesContext(connection) as queries:
            second = client.get("/api/finance/showback/").json()
        assert second == first
        # Neither the snapshot's arrays and pools nor the plan's documents travel: they are
        # only needed to build a report, and this one is stored (and, in this process, its
        # rows are already in memory).
        sql = " ".join(q["sql"] for q in queries)
        for column in ('"arrays"', '"loads"', '"gpu_pools"', '"problem"', '"solution"', '"rows"'):
            assert column not in sql, column

    def test_a_new_plan_version_is_not_served_from_memory(self, api_client_for: Any) -> None:
        client = api_client_for(FINANCE)
        before = client.get("/api/finance/forecast/").json()
        raise_profile("assistant", 1.5)
        after_plan = active_plan()
        after = client.get("/api/finance/forecast/").json()
        assert after["plan_version"] == after_plan.version != before["plan_version"]
        assert after["rows"] != before["rows"]

    def test_a_stored_reports_body_is_rendered_once(
        self, api_client_for: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        rendered: list[str] = []
        for renderer in (JSONRenderer, CSVRenderer):
            plain = renderer.render

            def counting(self: Any, *args: Any, _plain: Any = plain, **kwargs: Any) -> bytes:
                rendered.append(type(self).__name__)
                return cast(bytes, _plain(self, *args, **kwargs))

            monkeypatch.setattr(renderer, "render", counting)
        client = api_client_for(FINANCE)
        params = {"group_by": "tenant", "period": "week"}
        first = client.get("/api/finance/forecast/", params)
        again = client.get("/api/finance/forecast/", params)
        assert first.content == again.content and first.json()["rows"]
        first_csv = client.get("/api/finance/forecast/", {**params, "format": "csv"})
        again_csv = client.get("/api/finance/forecast/", {**params, "format": "csv"})
        assert first_csv.content == again_csv.content
        assert rendered == ["RenderedOnceJSONRenderer", "ReportCSVRenderer"]
        # Another parameter set is another stored report; a new plan version, another body.
        client.get("/api/finance/forecast/", {"group_by": "region"})
        assert len(rendered) == 3
        raise_profile("assistant", 1.5)
        replanned = active_plan()
        after = client.get("/api/finance/forecast/", params)
        assert len(rendered) == 4 and after.json()["plan_version"] == replanned.version
        assert after.content != first.content

    def test_a_tenant_keys_cut_of_a_report_is_rendered_for_it(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A key's report is a new object cut from the stored one, never marked: rendered each
        # time, and it shows only the key's rows.
        calls: list[int] = []
        plain = JSONRenderer.render

        def counting(self: Any, *args: Any, **kwargs: Any) -> bytes:
            calls.append(1)
            return cast(bytes, plain(self, *args, **kwargs))

        monkeypatch.setattr(JSONRenderer, "render", counting)
        client = key_client(issue_key(Tenant.objects.get(name="assistant")))
        bodies = [client.get("/api/finance/forecast/").json() for _ in range(2)]
        assert bodies[0] == bodies[1] and len(calls) == 2
        assert {row["tenant"] for row in bodies[0]["rows"]} == {"assistant"}


class TestHistory(FinanceTest):
    def test_provisioned_from_activation_times(self, api_client_for: Any) -> None:
        today = timezone.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        yesterday = today - timedelta(days=1)
        Plan.objects.filter(pk=self.plan.pk).update(activated_at=yesterday)
        services.finance_forecast()  # a stored forecast, so today has a planned side
        rows = (
            api_client_for(FINANCE)
            .get("/api/finance/history/", {"period": "day", "horizon": 3, "group_by": "tenant"})
            .json()["rows"]
        )
        by_day: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_day.setdefault(row["period"], []).append(row)
        # Nothing was active the day before yesterday; yesterday the plan ran all 24 hours.
        assert (today - timedelta(days=2)).strftime("%Y-%m-%d") not in by_day
        full = by_day[yesterday.strftime("%Y-%m-%d")]
        assert {r["tenant"] for r in full} == {"assistant", "helper"}
        assert sum(r["cost"] for r in full) == pytest.approx(54.0 * 24, abs=0.05)
        assert sum(r["replica_hours"] for r in full) == pytest.approx(27 * 24, abs=0.05)
        assert all(r["hours_active"] == 24 and r["plan_versions"] == "1" for r in full)
        # The stored forecast began after yesterday: nothing was planned for it then.
        assert all(r["planned_cost"] is None for r in full)
        elapsed = (timezone.now() - today).total_seconds() // 3600  # whole hours
        for row in by_day.get(today.strftime("%Y-%m-%d"), []):
            assert row["hours_active"] == elapsed
        partial = by_day.get(today.strftime("%Y-%m-%d"), [])
        if partial:
            assert sum(r["cost"] for r in partial) == pytest.approx(54.0 * elapsed, abs=0.05)
            assert sum(r["planned_cost"] for r in partial) == pytest.approx(54.0 * 24, abs=0.05)


class TestSchema(APITest):
    def test_finance_paths_and_parameters_are_in_the_schema(self, client: Any) -> None:
        schema = yaml.safe_load(client.get("/api/schema/").content)
        paths = schema["paths"]
        for url in ENDPOINTS:
            assert set(paths[url]) == {"get"}, url
        forecast = {p["name"] for p in paths["/api/finance/forecast/"]["get"]["parameters"]}
        assert {"period", "group_by", "horizon"} <= forecast
        opencost = paths["/api/finance/forecast/opencost/"]["get"]["parameters"]
        assert "aggregate" in {p["name"] for p in opencost}


class TestAdmin(FinanceTest):
    def test_stored_results_are_shown_read_only(self, client: Any) -> None:
        services.finance_forecast()
        services.finance_promises()
        admin_user = User.objects.create_superuser("root", password="pw-root")
        client.force_login(admin_user)
        snapshot = FinanceSnapshot.objects.get()
        for model, pk in (
            ("financesnapshot", snapshot.pk),
            ("promisepricing", PromisePricing.objects.get().pk),
            ("financereport", FinanceReport.objects.get().pk),
        ):
            assert client.get(f"/admin/finance/{model}/").status_code == 200, model
            page = client.get(f"/admin/finance/{model}/{pk}/change/")
            assert page.status_code == 200, model
            assert b'type="submit"' not in page.content or b"Save" not in page.content
            assert client.get(f"/admin/finance/{model}/add/").status_code == 403


class TestRetention(FinanceTest):
    def test_only_the_first_and_the_active_snapshot_of_a_horizon_stay(self) -> None:
        first = services.finance_snapshot()
        for factor in (1.5, 2.0):
            raise_profile("helper", factor)
            assert active_plan().version > self.plan.version
            services.finance_forecast(group_by=["tenant"])
        kept = list(FinanceSnapshot.objects.order_by("created_at").values_list("pk", flat=True))
        newest = services.finance_snapshot()
        assert kept == [first.pk, newest.pk]
        assert newest.plan.state == Plan.State.ACTIVE
        assert (
            FinanceReport.objects.filter(snapshot__in=kept).count() == FinanceReport.objects.count()
        )
