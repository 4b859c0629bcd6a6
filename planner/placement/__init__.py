"""planner.placement: where the replicas go, and why (contract: ``placement-v1``).

``parse_problem`` validates a problem dict into typed frozen dataclasses; ``solve`` returns
the spec's solution dict.
"""

from planner.placement.problem import (
    Accelerator,
    Demand,
    InventoryRow,
    PreviousRow,
    Problem,
    ProblemInvalid,
    Region,
    Rtt,
    Shape,
    parse_problem,
)
from planner.placement.solver import solve

__all__ = [
    "Accelerator",
    "Demand",
    "InventoryRow",
    "PreviousRow",
    "Problem",
    "ProblemInvalid",
    "Region",
    "Rtt",
    "Shape",
    "parse_problem",
    "solve",
]
