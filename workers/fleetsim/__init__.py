"""A simulated vLLM fleet that serves Prometheus ``/metrics`` in vLLM's format.

It stands in for a real fleet so that a real Prometheus can scrape it and the telemetry
pipeline can be tested end to end: ``python -m workers.fleetsim --port 9400``.
"""

from workers.fleetsim.fleet import (
    ClassSpec,
    FleetSimulator,
    FleetSpec,
    PoolSpec,
    StreamSpec,
    scaled_fleet,
    support_assistant_fleet,
)
from workers.fleetsim.scenario import ScenarioFleetError, fleet_from_scenario

__all__ = [
    "ClassSpec",
    "FleetSimulator",
    "FleetSpec",
    "PoolSpec",
    "ScenarioFleetError",
    "StreamSpec",
    "fleet_from_scenario",
    "scaled_fleet",
    "support_assistant_fleet",
]
