"""A simulated vLLM fleet that serves Prometheus ``/metrics`` in vLLM's format.

It stands in for a real fleet so that a real Prometheus can scrape it and the telemetry
pipeline can be tested end to end: ``python -m workers.simulators.fleet --port 9400``. With simulated
history (``history``) it also answers Prometheus' range-query API (``query_api``), standing in
for Prometheus itself.
"""

from workers.simulators.fleet.fleet import (
    ClassSpec,
    FleetSimulator,
    FleetSpec,
    PoolSpec,
    StreamSpec,
    scaled_fleet,
    support_assistant_fleet,
)
from workers.simulators.fleet.history import FleetHistory, TrafficPattern
from workers.simulators.fleet.scenario import ScenarioFleetError, fleet_from_scenario

__all__ = [
    "ClassSpec",
    "FleetHistory",
    "FleetSimulator",
    "FleetSpec",
    "PoolSpec",
    "ScenarioFleetError",
    "StreamSpec",
    "TrafficPattern",
    "fleet_from_scenario",
    "scaled_fleet",
    "support_assistant_fleet",
]
