"""Bounded cost of reads: stored reports keyed by a canonical query, capped in number and
bytes with the least recently read evicted, and a per-process memo bounded in bytes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane.core.roles import VIEWER
from controlplane.finance import services
from controlplane.finance.memo import ByteMemo
from controlplane.finance.models import FinanceReport
from tests.controlplane.api_harness import APITest
from tests.controlplane.finance_helpers import active_plan, seeds_fleet


def test_byte_memo_keeps_within_its_budget_least_recently_read_first() -> None:
    memo: ByteMemo[str] = ByteMemo(lambda: 100)
    for name in "abcd":
        value, kept = memo.get(name, 25, lambda n=name: n * 2)
        assert (value, kept) == (name * 2, True)
    assert memo.bytes == 100 and len(memo) == 4
    memo.get("a", 25, lambda: "never computed")  # read: a is now the most recent
    memo.get("e", 25, lambda: "ee")
    assert memo.bytes == 100
    assert memo.get("b", 25, lambda: "again")[0] == "again"  # b was evicted, not a
    assert memo.get("a", 25, lambda: "never computed")[0] == "aa"
    # Heavier than a quarter of the budget: computed, handed back, not kept.
    value, kept = memo.get("big", 26, lambda: "big")
    assert (value, kept) == ("big", False) and memo.get("big", 26, lambda: "x")[0] == "x"
    assert memo.bytes <= 100


class TestStoredReports(APITest):
    @pytest.fixture(autouse=True)
    def _fleet(self, _harness: None) -> None:
        seeds_fleet(self.records, with_second_tenant=True)
        active_plan()

    def test_the_same_query_in_any_order_is_one_stored_report(self, api_client_for: Any) -> None:
        client = api_client_for(VIEWER)
        one = client.get("/api/finance/forecast/", {"group_by": "tenant,region"}).json()
        two = client.get("/api/finance/forecast/", {"group_by": "region,tenant"}).json()
        assert one == two
        assert FinanceReport.objects.filter(endpoint="forecast").count() == 1
        stored = FinanceReport.objects.get(endpoint="forecast")
        assert stored.size_bytes > 0 and stored.read_at is not None

    def test_caps_evict_the_least_recently_read(self, settings: Any) -> None:
        settings.HEADROOM_FINANCE_MAX_REPORTS = 4
        first = services.finance_forecast(horizon=1)
        kept = FinanceReport.objects.get()
        for horizon in range(2, 8):
            # The first report is read again between the others: it stays.
            FinanceReport.objects.filter(pk=kept.pk).update(
                read_at=timezone.now() - timedelta(hours=1)
            )
            services.STORED_REPORTS.clear()
            assert services.finance_forecast(horizon=1).rows == first.rows
            services.finance_forecast(horizon=horizon)
        stored = FinanceReport.objects.order_by("pk")
        assert stored.count() == 4
        assert kept.pk in {r.pk for r in stored}
        horizons = sorted(len(r.rows["rows"]) for r in stored)
        assert horizons == [1, 5, 6, 7]  # the three newest and the one read all along
        # An evicted report is built again, the same rows.
        assert (
            services.finance_forecast(horizon=2).rows[:2]
            == (services.finance_forecast(horizon=7).rows[:2])
        )

    def test_bytes_cap_and_reports_too_large_to_store(self, settings: Any) -> None:
        small = services.finance_forecast(horizon=1)
        size = FinanceReport.objects.get().size_bytes
        settings.HEADROOM_FINANCE_REPORT_STORE_BYTES = 4 * size + 3
        for horizon in range(2, 4):
            services.finance_forecast(horizon=horizon, group_by=["zone"])
        total = sum(FinanceReport.objects.values_list("size_bytes", flat=True))
        assert total <= settings.HEADROOM_FINANCE_REPORT_STORE_BYTES
        # A report over a quarter of the cap is answered and not stored.
        before = FinanceReport.objects.count()
        big = services.finance_forecast(period="day", horizon=30, group_by=["zone", "tenant"])
        assert len(big.rows) > len(small.rows) and not big.stored
        assert FinanceReport.objects.count() <= before
