"""Actuals: the hours actually held, from the history of active plans, against the forecast.

Three plans are activated over two whole months (their activation times set back), and the
history endpoint's held replica-hours, GPU-hours and cost are checked by hand, with the
variance against the forecast stored while the first plan was active.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane.core.roles import FINANCE
from controlplane.emission.models import AllocationSink, OutboxEntry
from controlplane.finance import services
from controlplane.finance.models import FinanceSnapshot
from controlplane.plans.models import Plan
from tests.controlplane.api_harness import APITest
from tests.controlplane.finance_helpers import active_plan, seeds_fleet
from tests.controlplane.plans_helpers import raise_profile

HOUR = 3600


def month_start(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def replicas(plan: Plan) -> int:
    return sum(row.replicas for row in plan.allocations.all())


class TestHeldHours(APITest):
    def test_three_plans_over_two_months(self, _harness: None, api_client_for: Any) -> None:
        now = timezone.now()
        current = month_start(now)
        second = month_start(current - timedelta(days=1))
        first = month_start(second - timedelta(days=1))
        activations = (
            first + timedelta(days=9),
            first + timedelta(days=24),
            second + timedelta(days=4),
        )
        seeds_fleet(self.records, with_second_tenant=True)
        plans = [active_plan()]
        Plan.objects.filter(pk=plans[0].pk).update(activated_at=activations[0])
        # The forecast as it stood an hour after the first activation: the planned side.
        services.finance_forecast(now=activations[0] + timedelta(hours=1))
        FinanceSnapshot.objects.update(created_at=activations[0] + timedelta(hours=1))
        raise_profile("helper", 4.0)
        plans.append(active_plan())
        raise_profile("assistant", 1.5)
        plans.append(active_plan())
        for plan, at in zip(plans[1:], activations[1:], strict=True):
            Plan.objects.filter(pk=plan.pk).update(activated_at=at)
        counts = [replicas(p) for p in plans]
        rates = [p.cost_per_hour for p in plans]
        assert counts[0] < counts[1] < counts[2], counts

        rows = (
            api_client_for(FINANCE)
            .get("/api/finance/history/", {"period": "month", "horizon": 3})
            .json()["rows"]
        )
        by_month = {r["period"]: r for r in rows}
        end_ts = int(now.timestamp()) // HOUR * HOUR

        def span(a: datetime, b: datetime | int) -> float:
            stop = b if isinstance(b, int) else int(b.timestamp())
            return (stop - int(a.timestamp())) / HOUR

        held = {
            first.strftime("%Y-%m"): [
                (0, span(activations[0], activations[1])),
                (1, span(activations[1], second)),
            ],
            second.strftime("%Y-%m"): [
                (1, span(second, activations[2])),
                (2, span(activations[2], current)),
            ],
        }
        # In a month's first hour no whole hour of it has ended yet: it has no row.
        if end_ts > current.timestamp():
            held[current.strftime("%Y-%m")] = [(2, span(current, end_ts))]
        else:
            assert current.strftime("%Y-%m") not in by_month
        for label, parts in held.items():
            row = by_month[label]
            expected_hours = sum(h for _, h in parts)
            assert row["hours_active"] == pytest.approx(expected_hours, abs=0.01), label
            assert row["replica_hours"] == pytest.approx(
                sum(counts[i] * h for i, h in parts), abs=0.01
            ), label
            # One GPU per replica in this fleet.
            assert row["gpu_hours"] == row["replica_hours"]
            assert row["cost"] == pytest.approx(sum(rates[i] * h for i, h in parts), abs=0.05)
            versions = {str(plans[i].version) for i, _ in parts}
            assert set(row["plan_versions"].split(";")) == versions, label

        # Against the forecast made under the first plan (flat: the first plan all month).
        month_one = by_month[first.strftime("%Y-%m")]
        hours_one = span(first, second)
        assert month_one["planned_replica_hours"] == pytest.approx(counts[0] * hours_one)
        assert month_one["planned_gpu_hours"] == month_one["planned_replica_hours"]
        assert month_one["variance_replica_hours"] == pytest.approx(
            month_one["replica_hours"] - counts[0] * hours_one, abs=0.01
        )
        assert month_one["variance_cost"] == pytest.approx(
            month_one["cost"] - month_one["planned_cost"], abs=0.02
        )
        # The current month is still filling: no variance yet.
        if current.strftime("%Y-%m") in by_month:
            assert by_month[current.strftime("%Y-%m")]["variance_cost"] is None

        # By tenant, the held hours add up to the month's.
        tenants = services.finance_history(period="month", horizon=3, group_by=["tenant"]).rows
        for label, row in by_month.items():
            parts = [r for r in tenants if r["period"] == label]
            assert {r["tenant"] for r in parts} == {"assistant", "helper"}
            assert sum(r["replica_hours"] for r in parts) == pytest.approx(
                row["replica_hours"], abs=0.05
            )


class TestDeliveredState(APITest):
    """Where the sinks' delivered state is known, actuals hold what was delivered."""

    def plans(self) -> tuple[list[Plan], list[datetime], datetime]:
        """Two plans of different size: the first activated 3 days back, the second 2 days
        back (whole hours, so the sums below are exact); and the end of the last whole hour."""
        now = timezone.now()
        end = datetime.fromtimestamp(int(now.timestamp()) // HOUR * HOUR, tz=UTC)
        activations = [end - timedelta(days=3), end - timedelta(days=2)]
        seeds_fleet(self.records, with_second_tenant=True)
        plans = [active_plan()]
        raise_profile("helper", 4.0)
        plans.append(active_plan())
        for plan, at in zip(plans, activations, strict=True):
            Plan.objects.filter(pk=plan.pk).update(activated_at=at)
        assert replicas(plans[0]) < replicas(plans[1])
        return [Plan.objects.get(pk=p.pk) for p in plans], activations, end

    def sent(self, plan: Plan, status: str, delivered_at: datetime | None) -> None:
        sink = AllocationSink.objects.get_or_create(
            name="files", defaults={"kind": AllocationSink.Kind.FILES, "directory": "a"}
        )[0]
        OutboxEntry.objects.create(
            plan=plan,
            sink=sink,
            region="r1",
            payload={},
            idempotency_key=f"plan-{plan.pk}-r1",
            status=status,
            delivered_at=delivered_at,
        )

    def held(self) -> dict[str, Any]:
        rows = services.finance_history(period="month", horizon=2).rows
        return {
            "replica_hours": sum(r["replica_hours"] for r in rows),
            "cost": sum(r["cost"] for r in rows),
            "sources": {r["source"] for r in rows if r["replica_hours"] > 0},
            "versions": {v for r in rows for v in r["plan_versions"].split(";") if v},
        }

    def test_a_delivery_6_hours_late_leaves_those_hours_to_the_plan_before(self) -> None:
        plans, activations, end = self.plans()
        counts = [replicas(p) for p in plans]
        self.sent(plans[0], OutboxEntry.Status.DELIVERED, activations[0])
        self.sent(plans[1], OutboxEntry.Status.DELIVERED, activations[1] + timedelta(hours=6))
        first = (activations[1] - activations[0]).total_seconds() / HOUR + 6
        second = (end - activations[1]).total_seconds() / HOUR - 6
        held = self.held()
        assert held["replica_hours"] == pytest.approx(counts[0] * first + counts[1] * second)
        assert held["cost"] == pytest.approx(
            plans[0].cost_per_hour * first + plans[1].cost_per_hour * second, abs=0.05
        )
        assert held["sources"] == {"delivered"}
        # The same plans without any delivered state: held from the activation, as planned.
        OutboxEntry.objects.all().delete()
        planned = self.held()
        assert planned["replica_hours"] == pytest.approx(
            counts[0] * (first - 6) + counts[1] * (second + 6)
        )
        assert planned["sources"] == {"plan"}

    def test_a_failed_delivery_is_never_held(self) -> None:
        plans, activations, end = self.plans()
        counts = [replicas(p) for p in plans]
        self.sent(plans[1], OutboxEntry.Status.FAILED, None)
        held = self.held()
        # The first plan (sent to no sink: held from its activation) holds to the end.
        hours_held = (end - activations[0]).total_seconds() / HOUR
        assert held["replica_hours"] == pytest.approx(counts[0] * hours_held)
        assert held["versions"] == {str(plans[0].version)}
        assert held["sources"] == {"plan"}
        # Delivered at last, an hour ago: from then on the second plan is held.
        OutboxEntry.objects.filter(plan=plans[1]).update(
            status=OutboxEntry.Status.DELIVERED, delivered_at=end - timedelta(hours=1)
        )
        held = self.held()
        assert held["replica_hours"] == pytest.approx(counts[0] * (hours_held - 1) + counts[1])
        # The current month mixes both (three days back may reach into the month before).
        assert "delivered+plan" in held["sources"] <= {"plan", "delivered+plan"}
