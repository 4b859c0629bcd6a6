"""Commitments with a spot price: reserved, on demand and spot chosen per region and GPU type.

The fleet is the seeds' sizing example with a second tenant (``finance_helpers``): "assistant"
promises zone survival, "helper" promises nothing, so the GPUs helper's load uses may run on
spot and every other GPU (assistant's, and all spares and headroom) is firm. The fleet is
declared, so every hour holds the plan's GPUs: the mix can be checked by hand, and the level
against the brute-force optimum over every reservation.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from controlplane.core.roles import FINANCE
from controlplane.finance import services
from controlplane.fleet.models import AcceleratorType
from tests.controlplane.api_harness import APITest
from tests.controlplane.finance_helpers import ON_DEMAND, RESERVED, active_plan, seeds_fleet


def brute_force_level(gpus: int, spare: int, hours: int, spot: float) -> int:
    """The cheapest reservation over every K and every integer split of each (identical) hour:
    reserved ≤ K, spot ≤ the interruptible GPUs, the rest on demand."""
    r, o, s = Fraction(RESERVED), Fraction(ON_DEMAND), Fraction(spot)
    costs = []
    for level in range(gpus + 2):
        hour = min(
            o * (gpus - a - c) + s * c
            for a in range(min(level, gpus) + 1)
            for c in range(spare + 1)
            if gpus - a - c >= 0
        )
        costs.append(r * level * hours + hour * hours)
    return costs.index(min(costs))


class TestSpotMix(APITest):
    @pytest.fixture(autouse=True)
    def _fleet(self, _harness: None) -> None:
        seeds_fleet(self.records, with_second_tenant=True)

    def spot_priced(self, price: float | None) -> None:
        gpu = AcceleratorType.objects.get(name="gpu80")
        gpu.spot_price_per_gpu_hour = price
        gpu.full_clean()
        gpu.save()

    @pytest.mark.parametrize("spot", [0.7, 1.5])
    def test_unpromised_load_runs_on_spot_and_the_level_is_the_optimum(
        self, spot: float, api_client_for: Any
    ) -> None:
        self.spot_priced(spot)
        plan = active_plan()
        gpus = sum(row.replicas * row.gpus_per_replica for row in plan.allocations.all())
        rows = api_client_for(FINANCE).get("/api/finance/commitments/", {"horizon": 2}).json()
        for row in rows["rows"]:
            hours = row["reserved_gpu_hours"] / row["reserved_gpus"]
            spare = row["interruptible_gpu_hours"] / hours
            assert spare == int(spare) and 0 < spare < gpus / 2, row
            assert row["spot_price"] == spot
            assert row["gpu_hours"] == gpus * hours
            assert row["reserved_gpus"] == brute_force_level(gpus, int(spare), int(hours), spot)
            # Spot serves interruptible GPUs only; what the reservation leaves of them.
            assert row["spot_gpu_hours"] <= row["interruptible_gpu_hours"]
            assert (
                row["reserved_used_gpu_hours"] + row["on_demand_gpu_hours"] + row["spot_gpu_hours"]
                == row["gpu_hours"]
            )
            if spot < RESERVED:
                # Spot is cheaper than a reservation: the firm GPUs are reserved, the rest spot.
                assert row["reserved_gpus"] == gpus - spare
                assert row["spot_gpu_hours"] == row["interruptible_gpu_hours"]
            else:
                # Needed every hour, a reserved GPU beats spot at 1.5: everything is reserved.
                assert row["reserved_gpus"] == gpus and row["spot_gpu_hours"] == 0
            assert row["on_demand_gpu_hours"] == 0
            assert row["cost"] == pytest.approx(
                row["cost_reserved"] + row["cost_on_demand"] + row["cost_spot"], abs=0.01
            )
            assert row["cost_spot"] == pytest.approx(spot * row["spot_gpu_hours"], abs=0.01)
            assert row["saving"] == pytest.approx(row["cost_all_on_demand"] - row["cost"], abs=0.01)

    def test_without_a_spot_price_nothing_is_spot(self) -> None:
        active_plan()
        for row in services.finance_commitments(horizon=2).rows:
            assert row["spot_price"] is None
            assert row["spot_gpu_hours"] == row["interruptible_gpu_hours"] == 0
            assert row["cost_spot"] == 0
