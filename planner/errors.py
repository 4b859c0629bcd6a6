"""The one error type the planner raises for bad input."""

from __future__ import annotations


class PlannerInputError(ValueError):
    """An argument is outside its domain.

    ``argument`` names the offending argument (or problem field), so a caller such as the
    REST API or the CLI can point at it.
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument
        self.message = message
