"""planner.placement: where the replicas go, and why (contract: ``placement-v1``).

``parse_problem`` validates a problem dict into typed frozen dataclasses; ``solve`` returns
the spec's solution dict; ``explain`` says what binds a solution and what each promise
costs. See docs/placement.md.
"""

# ``explain`` here is the function; its module stays importable by name
# (``from planner.placement.explain import plan_from_solution``).
from planner.placement.explain import Explanation, PromisePrice, explain
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
    "Explanation",
    "InventoryRow",
    "PreviousRow",
    "Problem",
    "ProblemInvalid",
    "PromisePrice",
    "Region",
    "Rtt",
    "Shape",
    "explain",
    "parse_problem",
    "solve",
]
