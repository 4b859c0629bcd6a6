"""The placement solution of ``placement-v1``: parsed, typed and frozen, and written back.

The format is described in ``docs/placement-format.md`` ("Solution"); the solver writes it
(``planner.placement.solver.solution_dict``). ``parse_solution`` turns a solution dict into a
``Solution`` of frozen dataclasses, or raises ``SolutionInvalid`` naming the field
(``routing[2].requests_per_s``); ``solution_to_json`` (``Solution.to_json``) writes the dict
back, key for key: ``solution_to_json(parse_solution(d)) == d`` for every solution the solver
writes and every one the control plane stores (with its ``verification``).

Units are in the names: rates in requests/s, costs in $/hour, times in seconds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

from planner.errors import PlannerInputError
from planner.placement import checks
from planner.placement.problem import SOLUTION_FORMAT

Status = Literal["optimal", "feasible", "invalid"]
STATUSES: Final[tuple[Status, ...]] = ("optimal", "feasible", "invalid")


class SolutionInvalid(PlannerInputError):
    """A solution document breaks the format: ``argument`` is the field path."""


@dataclass(frozen=True, slots=True)
class ReplicaRow:
    """Whole replicas of one shape in one zone."""

    zone: str
    shape: str
    replicas: int


@dataclass(frozen=True, slots=True)
class RouteRow:
    """Requests/s of one demand served by one shape in one region, in planned units
    (``requests_per_s × burst``)."""

    demand: str
    region: str
    shape: str
    requests_per_s: float


@dataclass(frozen=True, slots=True)
class HostedRow:
    """Requests/s of one demand sent to a hosted API (planned units), the tokens per minute
    of its quota they take and their $/hour."""

    demand: str
    provider: str
    requests_per_s: float
    tokens_per_minute: float
    cost_per_hour: float


@dataclass(frozen=True, slots=True)
class UnservedRow:
    """Requests/s of one demand the plan leaves unserved (planned units)."""

    demand: str
    tenant: str
    priority: int
    requests_per_s: float


@dataclass(frozen=True, slots=True)
class ExcludedShape:
    """A shape that is not eligible for a demand, and why in words."""

    demand: str
    shape: str
    reason: str


@dataclass(frozen=True)
class Solution:
    """A ``placement-solution/v1`` document.

    An ``invalid`` solution has ``field`` and ``message`` and no plan (its lists are empty and
    its figures None). ``excluded_shapes`` is None where the document has no such key (plans
    stored before the key existed); ``verification`` is the control plane's replay verdict
    (None: absent). ``hosted`` and ``hosted_cost_per_hour`` are None where the document has
    no such key (a problem without hosted providers). ``extra`` keeps any other key as it was, so the document round-trips.
    """

    status: Status
    solve_seconds: float | None = None
    cost_per_hour: float | None = None
    unserved_requests_per_s: float | None = None
    gap: float | None = None
    replicas: tuple[ReplicaRow, ...] = ()
    routing: tuple[RouteRow, ...] = ()
    unserved: tuple[UnservedRow, ...] = ()
    binding: tuple[str, ...] = ()
    excluded_shapes: tuple[ExcludedShape, ...] | None = None
    hosted_cost_per_hour: float | None = None
    hosted: tuple[HostedRow, ...] | None = None
    field: str | None = None
    message: str | None = None
    verification: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    # The keys of the document in their order, so ``to_json`` writes the same document.
    keys: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)

    @property
    def is_invalid(self) -> bool:
        return self.status == "invalid"

    @property
    def served_requests_per_s(self) -> float:
        """Requests/s the routing serves, planned units."""
        return sum(row.requests_per_s for row in self.routing)

    def routing_of(self, demand: str) -> tuple[RouteRow, ...]:
        """The routing rows of ``demand``."""
        return tuple(row for row in self.routing if row.demand == demand)

    def hosted_of(self, demand: str) -> tuple[HostedRow, ...]:
        """The hosted overflow rows of ``demand``."""
        return tuple(row for row in self.hosted or () if row.demand == demand)

    def unserved_of(self, demand: str) -> float:
        """Requests/s of ``demand`` left unserved (0 when it has no row)."""
        return sum(row.requests_per_s for row in self.unserved if row.demand == demand)

    def to_json(self) -> dict[str, Any]:
        """The solution as its JSON document (``solution_to_json``)."""
        return solution_to_json(self)


# The keys a solution document has, in the solver's order (``solution_dict``, ``_invalid``).
_VALID_KEYS: Final = (
    "format",
    "status",
    "cost_per_hour",
    "unserved_requests_per_s",
    "solve_seconds",
    "gap",
    "replicas",
    "routing",
    "unserved",
    "binding",
    "excluded_shapes",
)
_INVALID_KEYS: Final = ("format", "status", "field", "message", "solve_seconds")
# Written after ``_VALID_KEYS`` where the problem has hosted providers.
_HOSTED_KEYS: Final = ("hosted_cost_per_hour", "hosted")
_KNOWN: Final = (
    frozenset(_VALID_KEYS) | frozenset(_INVALID_KEYS) | frozenset(_HOSTED_KEYS) | {"verification"}
)


def _fail(path: str, message: str) -> SolutionInvalid:
    return SolutionInvalid(path, message)


def _mapping(value: object, path: str) -> Mapping[str, object]:
    return checks.mapping(value, path, SolutionInvalid)


def _list(value: object, path: str) -> Sequence[object]:
    return checks.sequence(value, path, SolutionInvalid)


def _required(row: Mapping[str, object], key: str, path: str) -> object:
    return checks.required(row, key, path, SolutionInvalid)


def _text(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"must be a string, got {value!r}")
    return value


def _number(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(path, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise _fail(path, f"must be a finite number, got {value!r}")
    # Kept as written (an int stays an int) so that the document round-trips exactly.
    return value


def _whole(value: object, path: str) -> int:
    v = _number(value, path)
    if not float(v).is_integer():
        raise _fail(path, f"must be a whole number, got {value!r}")
    return int(v)


def _optional_number(root: Mapping[str, object], key: str) -> float | None:
    value = root.get(key)
    return None if value is None else _number(value, key)


def _rows(root: Mapping[str, object], key: str) -> list[tuple[str, Mapping[str, object]]]:
    raw = root.get(key)
    if raw is None:
        return []
    return [(f"{key}[{i}]", _mapping(row, f"{key}[{i}]")) for i, row in enumerate(_list(raw, key))]


def parse_solution(data: Mapping[str, object] | object) -> Solution:
    """Read a ``placement-solution/v1`` dict as a typed, frozen ``Solution``.

    Raises ``SolutionInvalid`` naming the first field that is missing or of the wrong type.
    """
    root = _mapping(data, "solution")
    fmt = root.get("format")
    if fmt is not None and fmt != SOLUTION_FORMAT:
        raise _fail("format", f"must be {SOLUTION_FORMAT!r}, got {fmt!r}")
    status_raw = _required(root, "status", "")
    if status_raw not in STATUSES:
        raise _fail("status", f"must be one of {', '.join(STATUSES)}; got {status_raw!r}")
    status: Status = status_raw
    replicas = tuple(
        ReplicaRow(
            zone=_text(_required(row, "zone", path), f"{path}.zone"),
            shape=_text(_required(row, "shape", path), f"{path}.shape"),
            replicas=_whole(_required(row, "replicas", path), f"{path}.replicas"),
        )
        for path, row in _rows(root, "replicas")
    )
    routing = tuple(
        RouteRow(
            demand=_text(_required(row, "demand", path), f"{path}.demand"),
            region=_text(_required(row, "region", path), f"{path}.region"),
            shape=_text(_required(row, "shape", path), f"{path}.shape"),
            requests_per_s=_number(
                _required(row, "requests_per_s", path), f"{path}.requests_per_s"
            ),
        )
        for path, row in _rows(root, "routing")
    )
    unserved = tuple(
        UnservedRow(
            demand=_text(_required(row, "demand", path), f"{path}.demand"),
            tenant=_text(_required(row, "tenant", path), f"{path}.tenant"),
            priority=_whole(_required(row, "priority", path), f"{path}.priority"),
            requests_per_s=_number(
                _required(row, "requests_per_s", path), f"{path}.requests_per_s"
            ),
        )
        for path, row in _rows(root, "unserved")
    )
    binding = tuple(
        _text(sentence, f"binding[{i}]")
        for i, sentence in enumerate(_list(root.get("binding") or [], "binding"))
    )
    excluded = (
        None
        if root.get("excluded_shapes") is None
        else tuple(
            ExcludedShape(
                demand=_text(_required(row, "demand", path), f"{path}.demand"),
                shape=_text(_required(row, "shape", path), f"{path}.shape"),
                reason=_text(_required(row, "reason", path), f"{path}.reason"),
            )
            for path, row in _rows(root, "excluded_shapes")
        )
    )
    hosted = (
        None
        if root.get("hosted") is None
        else tuple(
            HostedRow(
                demand=_text(_required(row, "demand", path), f"{path}.demand"),
                provider=_text(_required(row, "provider", path), f"{path}.provider"),
                requests_per_s=_number(
                    _required(row, "requests_per_s", path), f"{path}.requests_per_s"
                ),
                tokens_per_minute=_number(
                    _required(row, "tokens_per_minute", path), f"{path}.tokens_per_minute"
                ),
                cost_per_hour=_number(
                    _required(row, "cost_per_hour", path), f"{path}.cost_per_hour"
                ),
            )
            for path, row in _rows(root, "hosted")
        )
    )
    verification_raw = root.get("verification")
    verification = (
        None
        if verification_raw is None
        else MappingProxyType(dict(_mapping(verification_raw, "verification")))
    )
    field_raw = root.get("field")
    message_raw = root.get("message")
    return Solution(
        status=status,
        solve_seconds=_optional_number(root, "solve_seconds"),
        cost_per_hour=_optional_number(root, "cost_per_hour"),
        unserved_requests_per_s=_optional_number(root, "unserved_requests_per_s"),
        gap=_optional_number(root, "gap"),
        replicas=replicas,
        routing=routing,
        unserved=unserved,
        binding=binding,
        excluded_shapes=excluded,
        hosted_cost_per_hour=_optional_number(root, "hosted_cost_per_hour"),
        hosted=hosted,
        field=None if field_raw is None else _text(field_raw, "field"),
        message=None if message_raw is None else _text(message_raw, "message"),
        verification=verification,
        extra=MappingProxyType({k: v for k, v in root.items() if k not in _KNOWN}),
        keys=tuple(root),
    )


def solution_to_json(solution: Solution) -> dict[str, Any]:
    """The ``placement-solution/v1`` dict of ``solution``: the keys it was read with, in their
    order (a ``Solution`` built in code gets the solver's keys for its status)."""
    values: dict[str, Any] = {
        "format": SOLUTION_FORMAT,
        "status": solution.status,
        "cost_per_hour": solution.cost_per_hour,
        "unserved_requests_per_s": solution.unserved_requests_per_s,
        "solve_seconds": solution.solve_seconds,
        "gap": solution.gap,
        "replicas": [
            {"zone": r.zone, "shape": r.shape, "replicas": r.replicas} for r in solution.replicas
        ],
        "routing": [
            {
                "demand": r.demand,
                "region": r.region,
                "shape": r.shape,
                "requests_per_s": r.requests_per_s,
            }
            for r in solution.routing
        ],
        "unserved": [
            {
                "demand": r.demand,
                "tenant": r.tenant,
                "priority": r.priority,
                "requests_per_s": r.requests_per_s,
            }
            for r in solution.unserved
        ],
        "binding": list(solution.binding),
        "excluded_shapes": (
            None
            if solution.excluded_shapes is None
            else [
                {"demand": e.demand, "shape": e.shape, "reason": e.reason}
                for e in solution.excluded_shapes
            ]
        ),
        "hosted_cost_per_hour": solution.hosted_cost_per_hour,
        "hosted": (
            None
            if solution.hosted is None
            else [
                {
                    "demand": h.demand,
                    "provider": h.provider,
                    "requests_per_s": h.requests_per_s,
                    "tokens_per_minute": h.tokens_per_minute,
                    "cost_per_hour": h.cost_per_hour,
                }
                for h in solution.hosted
            ]
        ),
        "field": solution.field,
        "message": solution.message,
        "verification": (None if solution.verification is None else dict(solution.verification)),
    }
    if solution.keys:
        keys: Sequence[str] = solution.keys
    else:
        keys = [*(_INVALID_KEYS if solution.is_invalid else _VALID_KEYS)]
        if not solution.is_invalid and solution.hosted is not None:
            keys.extend(_HOSTED_KEYS)
        if solution.verification is not None:
            keys.append("verification")
        keys.extend(solution.extra)
    out: dict[str, Any] = {}
    for key in keys:
        if key in solution.extra:
            out[key] = solution.extra[key]
        elif key in values:
            out[key] = values[key]
    if solution.verification is not None and "verification" not in out:
        # Added since the document was read (the control plane's replay verdict).
        out["verification"] = values["verification"]
    return out
