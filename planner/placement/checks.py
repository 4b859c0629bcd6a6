"""Shape checks shared by the readers of the placement documents (problem.py, solution.py).

Each takes the field path it reports and the error to raise: ``ProblemInvalid`` for a
problem, ``SolutionInvalid`` for a solution (both ``(argument, message)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import cast

Fail = Callable[[str, str], Exception]


def mapping(value: object, path: str, fail: Fail) -> Mapping[str, object]:
    """``value`` as an object (a mapping of field names)."""
    if not isinstance(value, Mapping):
        raise fail(path, f"must be an object, got {type(value).__name__}")
    return cast(Mapping[str, object], value)


def sequence(value: object, path: str, fail: Fail) -> Sequence[object]:
    """``value`` as a list (a string is not one)."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise fail(path, f"must be a list, got {type(value).__name__}")
    return value


def required(row: Mapping[str, object], key: str, path: str, fail: Fail) -> object:
    """``row[key]``, which must be present and not null."""
    if key not in row or row[key] is None:
        raise fail(f"{path}.{key}" if path else key, "is required")
    return row[key]
