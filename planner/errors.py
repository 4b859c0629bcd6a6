"""The planner's errors: bad input, and a solver failure on valid input."""

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


class PlannerSolverError(RuntimeError):
    """The placement solver failed on a valid problem: a defect, not bad input.

    The message names the part of the problem that failed and the underlying error (which
    is also the exception's ``__cause__``), so a failed re-plan says what went wrong.
    """
