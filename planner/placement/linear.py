"""A small mixed-integer linear model and the OR-Tools back ends that solve it.

The placement formulation (``model.py``) is written once against ``LinearModel``; a back end
translates it for one solver and then solves it again and again with different objectives
and added rows, which is how the lexicographic stages of ``placement-v1`` run. Three back
ends exist so that their speed can be measured on the same model (docs/placement.md):
HiGHS and SCIP through MathOpt (``"highs"``, ``"scip"``), and CP-SAT on a model whose
continuous variables and coefficients are scaled to integers (``"cpsat"``).
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from ortools.math_opt.python import mathopt
from ortools.sat.python import cp_model

BackendName = Literal["highs", "scip", "cpsat"]
BACKENDS: Final[tuple[BackendName, ...]] = ("highs", "scip", "cpsat")

# Primal feasibility the MIP solvers must meet, in the units of a row (replicas for the
# capacity rows). Tighter than the solvers' 1e-6 defaults so that a plan cannot lean on
# solver tolerance to save a replica; float noise stays far below it.
FEASIBILITY_TOLERANCE: Final = 1e-9
# Relative optimality gap at which a stage counts as proven optimal.
OPTIMALITY_GAP: Final = 1e-9
# Seconds per variable and nonzero to hand a model to the solver and read it back.
TRANSFER_S_PER_ENTRY: Final = 1e-5

_log = logging.getLogger(__name__)


@dataclass
class LinearModel:
    """Variables with bounds and integrality, and rows ``lo ≤ Σ coef·var ≤ hi``."""

    var_lb: list[float] = field(default_factory=list)
    var_ub: list[float] = field(default_factory=list)
    var_integer: list[bool] = field(default_factory=list)
    var_name: list[str] = field(default_factory=list)
    row_terms: list[tuple[tuple[int, float], ...]] = field(default_factory=list)
    row_lo: list[float] = field(default_factory=list)
    row_hi: list[float] = field(default_factory=list)
    row_name: list[str] = field(default_factory=list)

    def add_var(self, lb: float, ub: float, *, integer: bool, name: str) -> int:
        """Add a variable; returns its index."""
        self.var_lb.append(lb)
        self.var_ub.append(ub)
        self.var_integer.append(integer)
        self.var_name.append(name)
        return len(self.var_lb) - 1

    def add_row(
        self, terms: Sequence[tuple[int, float]], lo: float, hi: float, *, name: str
    ) -> int:
        """Add ``lo ≤ Σ coef·var ≤ hi`` (use ±inf for a one-sided row); returns its index."""
        self.row_terms.append(tuple(terms))
        self.row_lo.append(lo)
        self.row_hi.append(hi)
        self.row_name.append(name)
        return len(self.row_lo) - 1

    @property
    def num_vars(self) -> int:
        return len(self.var_lb)


@dataclass(frozen=True)
class Outcome:
    """What one solve returned.

    ``values`` is None when no solution was found. ``bound`` is the best proven bound on the
    objective (a lower bound when minimising, an upper bound when maximising).
    """

    proven_optimal: bool
    infeasible: bool
    values: tuple[float, ...] | None
    objective: float | None
    bound: float | None
    seconds: float


class Backend(Protocol):
    """A solver holding a translated ``LinearModel`` that can grow between solves."""

    def add_var(self, lb: float, ub: float, *, integer: bool, name: str) -> int: ...

    def add_row(self, terms: Sequence[tuple[int, float]], lo: float, hi: float) -> None: ...

    def set_upper_bound(self, var: int, ub: float) -> None: ...

    def fix(self, var: int, value: float) -> None: ...

    def solve(
        self,
        objective: Mapping[int, float],
        *,
        maximize: bool,
        time_limit_s: float,
        hint: Mapping[int, float] | None,
        gap: float = OPTIMALITY_GAP,
        node_limit: int | None = None,
    ) -> Outcome:
        """Solve with ``objective``, stopping at ``time_limit_s``, a relative ``gap`` or
        ``node_limit`` branch-and-bound nodes, whichever comes first. The clock stops a
        solve where the machine's speed and load put it; a gap or a node count stops it at
        the same answer on any machine, which is how plans stay the same wherever they are
        solved (docs/placement.md)."""
        ...


def make_backend(model: LinearModel, name: BackendName, *, workers: int, seed: int) -> Backend:
    """Translate ``model`` for the back end called ``name``."""
    if name == "cpsat":
        return CpSatBackend(model, workers=workers, seed=seed)
    return MathOptBackend(model, name, workers=workers, seed=seed)


class MathOptBackend:
    """HiGHS or SCIP through MathOpt; the model is kept and changed between solves."""

    def __init__(self, model: LinearModel, name: BackendName, *, workers: int, seed: int) -> None:
        self._solver = mathopt.SolverType.HIGHS if name == "highs" else mathopt.SolverType.GSCIP
        self._workers = workers
        self._seed = seed
        self._model = mathopt.Model(name="placement")
        self._nonzeros = 0
        self._vars: list[mathopt.Variable] = []
        self._integer: list[bool] = []
        for lb, ub, integer, var_name in zip(
            model.var_lb, model.var_ub, model.var_integer, model.var_name, strict=True
        ):
            self.add_var(lb, ub, integer=integer, name=var_name)
        for terms, lo, hi in zip(model.row_terms, model.row_lo, model.row_hi, strict=True):
            self.add_row(terms, lo, hi)

    def add_var(self, lb: float, ub: float, *, integer: bool, name: str) -> int:
        m = self._model
        # Names stay in LinearModel; MathOpt refuses repeats and needs none to solve. Bounds
        # go in as floats (MathOpt's setters are typed; an inventory count is an int).
        if integer:
            self._vars.append(m.add_integer_variable(lb=float(lb), ub=float(ub)))
        else:
            self._vars.append(m.add_variable(lb=float(lb), ub=float(ub)))
        self._integer.append(integer)
        return len(self._vars) - 1

    def add_row(self, terms: Sequence[tuple[int, float]], lo: float, hi: float) -> None:
        self._nonzeros += len(terms)
        row = self._model.add_linear_constraint(lb=float(lo), ub=float(hi))
        for var, coef in terms:
            row.set_coefficient(self._vars[var], float(coef))

    def set_upper_bound(self, var: int, ub: float) -> None:
        self._vars[var].upper_bound = float(ub)

    def fix(self, var: int, value: float) -> None:
        self._vars[var].lower_bound = float(value)
        self._vars[var].upper_bound = float(value)

    def _params(
        self,
        time_limit_s: float,
        *,
        tight: bool = True,
        gap: float = OPTIMALITY_GAP,
        node_limit: int | None = None,
    ) -> mathopt.SolveParameters:
        params = mathopt.SolveParameters(
            time_limit=datetime.timedelta(seconds=max(0.01, time_limit_s)),
            node_limit=node_limit,
            enable_output=False,
            random_seed=self._seed,
            relative_gap_tolerance=gap,
            absolute_gap_tolerance=1e-9,
        )
        if self._solver == mathopt.SolverType.HIGHS:
            # One thread: HiGHS's MIP search is serial, its scheduler is static (instances
            # in one process must agree on the count), and a process forked to solve a part
            # must not inherit a scheduler whose worker threads it does not have. MathOpt
            # refuses its generic ``threads`` for HiGHS; HiGHS's own option it passes on.
            params.highs.int_options["threads"] = 1
        if not tight:
            return params
        if self._solver == mathopt.SolverType.HIGHS:
            params.highs.double_options["mip_feasibility_tolerance"] = FEASIBILITY_TOLERANCE
            params.highs.double_options["primal_feasibility_tolerance"] = FEASIBILITY_TOLERANCE
        else:
            params.gscip.real_params["numerics/feastol"] = FEASIBILITY_TOLERANCE
        return params

    def solve(
        self,
        objective: Mapping[int, float],
        *,
        maximize: bool,
        time_limit_s: float,
        hint: Mapping[int, float] | None,
        gap: float = OPTIMALITY_GAP,
        node_limit: int | None = None,
    ) -> Outcome:
        m = self._model
        m.objective.clear()
        m.objective.is_maximize = maximize
        for var, coef in objective.items():
            m.objective.set_linear_coefficient(self._vars[var], coef)
        model_params = None
        if hint is not None:
            model_params = mathopt.ModelSolveParameters(
                solution_hints=[
                    mathopt.SolutionHint(
                        variable_values={self._vars[v]: value for v, value in hint.items()}
                    )
                ]
            )
        started = time.perf_counter()
        # Handing the model over and reading the answer back take time the solver's own
        # limit does not see (about a second for 100,000 nonzeros): leave room for it.
        overhead = TRANSFER_S_PER_ENTRY * (len(self._vars) + self._nonzeros)
        time_limit_s = max(0.01, time_limit_s - overhead)
        try:
            result = mathopt.solve(
                m,
                self._solver,
                params=self._params(time_limit_s, gap=gap, node_limit=node_limit),
                model_params=model_params,
            )
        except Exception:
            # HiGHS can refuse its own answer at so tight a tolerance ("claims optimality,
            # but with primal infeasibilities" of 1e-9); once more at its defaults, and the
            # caller's exact check decides. (ortools can also fail while converting the
            # error, hence the broad except.)
            left = time_limit_s - (time.perf_counter() - started)
            try:
                result = mathopt.solve(
                    m,
                    self._solver,
                    params=self._params(left, tight=False, gap=gap, node_limit=node_limit),
                    model_params=model_params,
                )
            except Exception:
                return Outcome(
                    proven_optimal=False,
                    infeasible=False,
                    values=None,
                    objective=None,
                    bound=None,
                    seconds=time.perf_counter() - started,
                )
        seconds = time.perf_counter() - started
        reason = result.termination.reason
        infeasible = reason in (
            mathopt.TerminationReason.INFEASIBLE,
            mathopt.TerminationReason.INFEASIBLE_OR_UNBOUNDED,
        )
        values: tuple[float, ...] | None = None
        objective_value: float | None = None
        if result.has_primal_feasible_solution():
            raw = result.variable_values(self._vars)
            values = tuple(
                float(round(v)) if integer else float(v)
                for v, integer in zip(raw, self._integer, strict=True)
            )
            objective_value = sum(coef * values[var] for var, coef in objective.items())
        bound = result.termination.objective_bounds.dual_bound
        _log.debug(
            "%s: %d variables, %d nonzeros, limit %.1f s, %s nodes: %s (%s) in %.2f s, "
            "%d nodes, objective %s, bound %s",
            self._solver.name,
            len(self._vars),
            self._nonzeros,
            time_limit_s,
            node_limit,
            reason.name,
            result.termination.limit.name if result.termination.limit else "-",
            seconds,
            result.solve_stats.node_count,
            objective_value,
            bound,
        )
        return Outcome(
            proven_optimal=reason == mathopt.TerminationReason.OPTIMAL,
            infeasible=infeasible,
            values=values,
            objective=objective_value,
            bound=bound if math.isfinite(bound) else None,
            seconds=seconds,
        )


def _ceil_scaled(value: float) -> int:
    # Round a scaled coefficient up, ignoring float noise below one part in a billion (as
    # planner.capacity's ceil_count): 20.000000000000004 is 20, not 21.
    nearest = round(value)
    if abs(value - nearest) <= 1e-9 * max(1.0, abs(value)):
        return int(nearest)
    return math.ceil(value)


def _floor_scaled(value: float) -> int:
    return -_ceil_scaled(-value)


class CpSatBackend:
    """CP-SAT on an integer model: continuous variables count in steps of 1/``STEPS``.

    Each row is multiplied by a power of ten and its coefficients rounded *against* the row
    (up on the ≤ side, down on the ≥ side) so that every integer solution also satisfies the
    real-valued row: rounding can cost optimality at the margin, never feasibility.
    """

    STEPS: Final = 100_000
    ROW_DIGITS: Final = 9

    def __init__(self, model: LinearModel, *, workers: int, seed: int) -> None:
        self._workers = workers
        self._seed = seed
        self._model = cp_model.CpModel()
        self._scale: list[int] = []
        self._vars: list[cp_model.IntVar] = []
        for lb, ub, integer, name in zip(
            model.var_lb, model.var_ub, model.var_integer, model.var_name, strict=True
        ):
            self.add_var(lb, ub, integer=integer, name=name)
        for terms, lo, hi in zip(model.row_terms, model.row_lo, model.row_hi, strict=True):
            self.add_row(terms, lo, hi)

    def add_var(self, lb: float, ub: float, *, integer: bool, name: str) -> int:
        if lb < 0:
            raise ValueError(f"the CP-SAT back end needs non-negative variables: {name}")
        scale = 1 if integer else self.STEPS
        # An unbounded helper (|n − previous|) gets a finite domain CP-SAT can hold.
        top = min(ub * scale, 2**40)
        self._scale.append(scale)
        self._vars.append(
            self._model.new_int_var(math.ceil(lb * scale - 1e-9), math.floor(top + 1e-9), name)
        )
        return len(self._vars) - 1

    def add_row(self, terms: Sequence[tuple[int, float]], lo: float, hi: float) -> None:
        # Coefficients per integer step, then a row scale that keeps about ROW_DIGITS digits.
        per_step = [(var, coef / self._scale[var]) for var, coef in terms if coef != 0]
        if not per_step:
            return
        biggest = max(abs(c) for _, c in per_step)
        row_scale = 10.0 ** (self.ROW_DIGITS - math.floor(math.log10(biggest)))
        if math.isfinite(hi):
            coefs = [(v, _ceil_scaled(c * row_scale)) for v, c in per_step]
            self._model.add(
                sum(c * self._vars[v] for v, c in coefs) <= _floor_scaled(hi * row_scale)
            )
        if math.isfinite(lo):
            coefs = [(v, _floor_scaled(c * row_scale)) for v, c in per_step]
            self._model.add(
                sum(c * self._vars[v] for v, c in coefs) >= _ceil_scaled(lo * row_scale)
            )

    def set_upper_bound(self, var: int, ub: float) -> None:
        scaled = math.floor(ub * self._scale[var] + 1e-9)
        self._model.add(self._vars[var] <= scaled)

    def fix(self, var: int, value: float) -> None:
        self._model.add(self._vars[var] == round(value * self._scale[var]))

    def solve(
        self,
        objective: Mapping[int, float],
        *,
        maximize: bool,
        time_limit_s: float,
        hint: Mapping[int, float] | None,
        gap: float = OPTIMALITY_GAP,
        node_limit: int | None = None,
    ) -> Outcome:
        # CP-SAT has no branch-and-bound nodes to count: it stops by time and gap only.
        del node_limit
        expr = sum((coef / self._scale[var]) * self._vars[var] for var, coef in objective.items())
        if maximize:
            self._model.maximize(expr)
        else:
            self._model.minimize(expr)
        self._model.clear_hints()  # type: ignore[no-untyped-call]
        if hint is not None:
            for var, value in hint.items():
                self._model.add_hint(self._vars[var], round(value * self._scale[var]))
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, time_limit_s)
        solver.parameters.num_workers = self._workers
        solver.parameters.random_seed = self._seed
        solver.parameters.relative_gap_limit = gap
        started = time.perf_counter()
        status = solver.solve(self._model)
        seconds = time.perf_counter() - started
        values: tuple[float, ...] | None = None
        objective_value: float | None = None
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            values = tuple(
                solver.value(v) / scale for v, scale in zip(self._vars, self._scale, strict=True)
            )
            objective_value = sum(coef * values[var] for var, coef in objective.items())
        bound = solver.best_objective_bound if values is not None else None
        return Outcome(
            proven_optimal=status == cp_model.OPTIMAL,
            infeasible=status == cp_model.INFEASIBLE,
            values=values,
            objective=objective_value,
            bound=bound,
            seconds=seconds,
        )
