"""Placement solver stability: re-plans on many generated fleets, and the spread over seeds.

**Stability.** For each size (tenants × regions × zones per region × GPU types) and each of
``--problems`` problem seeds, the generator builds a fleet; the solver plans it, every
demand's rate is then moved by a random factor in [0.8, 1.25] (seeded by the problem), and
the solver plans again with the first plan's replicas as ``previous``, as a re-plan does.
Recorded: crashes (any exception out of ``solve``; must be 0), violations the independent
verifier finds in either plan (must be 0), solve times, and the re-plan's cost against the
independent reference MILP (``planner.placement.reference``, scipy's HiGHS) on the same
problem: its best plan and its proven lower bound.

**Seed spread.** One problem per size is solved under each of ``--seeds`` solver seeds at
the solver's default time limit and at the re-plan's; each run's cost is compared with the
best any run (or the reference) found. Goal: every seed within 0.5 % of the best.

Run from the repository root:

    .venv/bin/python -m benchmarks.solver_stability                 # both parts, print tables
    .venv/bin/python -m benchmarks.solver_stability --only spread   # the seed spread only
    .venv/bin/python -m benchmarks.solver_stability --write-docs    # also update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import random
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.bench_placement import _QuietStdout
from benchmarks.bench_replan import write_docs
from planner.placement import solve
from planner.placement.generator import generate_problem
from planner.placement.reference import CostBound, ReferenceTooHard, reference_cost_bound
from planner.placement.verify import verify

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
STABILITY = "## Solver stability"
SPREAD = "## Seed spread"
WORKERS = 2
# The solver's default time limit (``solve``) and the re-plan's (HEADROOM_REPLAN_TIME_LIMIT_S).
DEFAULT_LIMIT_S = 60.0
REPLAN_LIMIT_S = 6.0
SPREAD_GOAL = 0.005
# Demand moves between the two plans by a factor drawn from this range.
DRIFT = (0.8, 1.25)


@dataclass(frozen=True)
class Size:
    label: str
    tenants: int
    regions: int
    zones_per_region: int
    gpu_types: int

    def problem(self, seed: int) -> dict[str, Any]:
        return generate_problem(
            tenants=self.tenants,
            regions=self.regions,
            zones_per_region=self.zones_per_region,
            gpu_types=self.gpu_types,
            seed=seed,
        )


STABILITY_SIZES = (Size("60×6×3×3", 60, 6, 3, 3), Size("100×8×3×4", 100, 8, 3, 4))
SPREAD_SIZES = (Size("100×8×3×4", 100, 8, 3, 4), Size("200×12×3×4", 200, 12, 3, 4))
# The spread's problem seed per size (200×12×3×4 seed 2 is the placement benchmark's).
SPREAD_PROBLEM_SEED = {"100×8×3×4": 1, "200×12×3×4": 2}


@dataclass
class Solve:
    """One call of ``solve``: what it returned, or the exception it raised."""

    wall_s: float
    status: str
    cost_per_hour: float | None
    gap: float | None
    violations: list[str] = field(default_factory=list)
    crash: str | None = None


def timed_solve(
    problem: dict[str, Any], *, time_limit_s: float, seed: int
) -> tuple[Solve, dict[str, Any] | None]:
    """One solve, verified; the solution too, unless it crashed."""
    started = time.perf_counter()
    try:
        solution = solve(problem, time_limit_s=time_limit_s, workers=WORKERS, seed=seed)
    except Exception as error:  # a crash is what is counted here, whatever it is
        crash = Solve(
            wall_s=time.perf_counter() - started,
            status="crash",
            cost_per_hour=None,
            gap=None,
            crash=f"{type(error).__name__}: {error}\n{traceback.format_exc()}",
        )
        return crash, None
    wall = time.perf_counter() - started
    run = Solve(
        wall_s=wall,
        status=str(solution["status"]),
        cost_per_hour=float(solution["cost_per_hour"]),
        gap=float(solution["gap"]),
        violations=verify(problem, solution),
    )
    return run, solution


def drifted(problem: dict[str, Any], previous: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """``problem`` with every demand's rate moved, and ``previous`` as the plan in force."""
    rng = random.Random(seed)
    moved = copy.deepcopy(problem)
    for demand in moved["demands"]:
        demand["requests_per_s"] = round(demand["requests_per_s"] * rng.uniform(*DRIFT), 3)
    moved["previous"] = [dict(row) for row in previous]
    return moved


def reference(problem: dict[str, Any], limit_s: float) -> tuple[CostBound | None, float]:
    started = time.perf_counter()
    try:
        with _QuietStdout():
            bound: CostBound | None = reference_cost_bound(problem, time_limit_s=limit_s)
    except ReferenceTooHard:
        bound = None
    return bound, time.perf_counter() - started


@dataclass
class Replan:
    """One problem of the stability part: the first plan, the re-plan, the reference."""

    size: str
    problem_seed: int
    first: Solve
    second: Solve | None
    reference: CostBound | None
    reference_s: float

    @property
    def crashes(self) -> int:
        return sum(s is not None and s.crash is not None for s in (self.first, self.second))

    @property
    def violations(self) -> int:
        return sum(len(s.violations) for s in (self.first, self.second) if s is not None)

    @property
    def to_reference_best(self) -> float | None:
        """Re-plan cost / the reference's best plan, minus one (negative: cheaper)."""
        ref = self.reference
        s = self.second
        if ref is None or ref.best is None or s is None or s.cost_per_hour is None:
            return None
        return s.cost_per_hour / ref.best - 1.0

    @property
    def to_reference_bound(self) -> float | None:
        """(re-plan cost − the reference's proven bound) / re-plan cost."""
        ref = self.reference
        s = self.second
        if ref is None or s is None or s.cost_per_hour is None or s.cost_per_hour <= 0:
            return None
        return max(0.0, (s.cost_per_hour - ref.lower) / s.cost_per_hour)


def _solve_pair(size: Size, seed: int, limit_s: float, reference_s: float) -> Replan:
    problem = size.problem(seed)
    first, solution = timed_solve(problem, time_limit_s=limit_s, seed=0)
    if solution is None:  # crashed: nothing to re-plan from
        return Replan(size.label, seed, first, None, None, 0.0)
    moved = drifted(problem, solution["replicas"], seed)
    second, _ = timed_solve(moved, time_limit_s=limit_s, seed=0)
    bound, ref_s = reference(moved, reference_s) if reference_s > 0 else (None, 0.0)
    return Replan(size.label, seed, first, second, bound, ref_s)


def measure_stability(
    problems: int, limit_s: float, reference_s: float, first_seed: int, sizes: Sequence[Size]
) -> list[Replan]:
    out: list[Replan] = []
    for size in sizes:
        for seed in range(first_seed, first_seed + problems):
            r = _solve_pair(size, seed, limit_s, reference_s)
            out.append(r)
            s = r.second
            print(
                f"{size.label} seed {seed}: first {r.first.status} {r.first.wall_s:.2f} s; "
                + (
                    f"re-plan {s.status} {s.wall_s:.2f} s {s.cost_per_hour} $/h; "
                    if s is not None
                    else ""
                )
                + f"reference {r.reference} ({r.reference_s:.1f} s); "
                f"crashes {r.crashes}, violations {r.violations}; "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            for crash in (r.first.crash, s.crash if s else None):
                if crash:
                    print(crash, flush=True)
    return out


@dataclass
class SpreadRun:
    size: str
    limit_s: float
    seed: int
    run: Solve


def measure_spread(
    seeds: int, reference_s: float, limits: Sequence[float] = (DEFAULT_LIMIT_S, REPLAN_LIMIT_S)
) -> tuple[list[SpreadRun], dict[str, Any]]:
    runs: list[SpreadRun] = []
    references: dict[str, Any] = {}
    for size in SPREAD_SIZES:
        problem = size.problem(SPREAD_PROBLEM_SEED[size.label])
        for limit in limits:
            for seed in range(seeds):
                run, _ = timed_solve(problem, time_limit_s=limit, seed=seed)
                runs.append(SpreadRun(size.label, limit, seed, run))
                print(
                    f"{size.label} limit {limit:g} s seed {seed}: {run.status} "
                    f"{run.cost_per_hour} $/h gap {run.gap} in {run.wall_s:.2f} s, "
                    f"{len(run.violations)} violations, load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        bound, ref_s = reference(problem, reference_s) if reference_s > 0 else (None, 0.0)
        references[size.label] = (bound, ref_s)
        print(f"{size.label} reference: {bound} in {ref_s:.1f} s", flush=True)
    return runs, references


# -- reporting -------------------------------------------------------------------------------


def _pct(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "–"
    percent = 100.0 * value
    if abs(percent) < 0.5 * 10.0**-digits:
        percent = 0.0  # no "-0.000 %"
    return f"{percent:.{digits}f} %"


def _median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "–"


def stability_table(results: Sequence[Replan]) -> str:
    lines = [
        "| size | problems | crashes | violations | first plan s, median (max) | "
        "re-plan s, median (max) | re-plan statuses | re-plan vs reference's best plan, "
        "median (max) | re-plan cheaper / as cheap / dearer than reference's plan | "
        "re-plan to reference's bound, median (max) | reference proven |",
        "| --- | ---: | ---: | ---: | --- | --- | --- | --- | --- | --- | ---: |",
    ]
    for label in dict.fromkeys(r.size for r in results):
        rows = [r for r in results if r.size == label]
        firsts = [r.first.wall_s for r in rows]
        seconds = [r.second.wall_s for r in rows if r.second is not None]
        statuses = [r.second.status for r in rows if r.second is not None]
        kinds = sorted(set(statuses))
        to_best = [x for x in (r.to_reference_best for r in rows) if x is not None]
        to_bound = [x for x in (r.to_reference_bound for r in rows) if x is not None]
        proven = sum(r.reference is not None and r.reference.proven for r in rows)
        lines.append(
            f"| {label} | {len(rows)} | {sum(r.crashes for r in rows)} | "
            f"{sum(r.violations for r in rows)} | {_median(firsts)} ({max(firsts):.2f}) | "
            f"{_median(seconds)} ({max(seconds, default=0.0):.2f}) | "
            + ", ".join(f"{statuses.count(k)}× {k}" for k in kinds)
            + f" | {_pct(statistics.median(to_best) if to_best else None, 3)} "
            f"({_pct(max(to_best, default=None), 3)}) | "
            f"{sum(x < -1e-9 for x in to_best)} / {sum(abs(x) <= 1e-9 for x in to_best)} / "
            f"{sum(x > 1e-9 for x in to_best)} | "
            f"{_pct(statistics.median(to_bound) if to_bound else None, 3)} "
            f"({_pct(max(to_bound, default=None), 3)}) | {proven} of {len(rows)} |"
        )
    return "\n".join(lines)


def spread_table(runs: Sequence[SpreadRun], references: dict[str, Any]) -> str:
    """Per size and limit: the seeds' costs, their spread, and the gap to the best known.

    The spread is the worst seed's cost over the best seed's; the best known is the cheapest
    plan any run of the size (at any limit) or the reference found.
    """
    lines = [
        "| size | limit | seeds | statuses | solve s, median (max) | cost $/h per seed | "
        "spread (worst seed over best seed) | best known $/h | worst seed above best known | "
        "reference best / bound $/h | spread ≤ 0.5 % |",
        "| --- | ---: | ---: | --- | --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for label in dict.fromkeys(r.size for r in runs):
        bound, _ = references.get(label, (None, 0.0))
        of_size = [r.run.cost_per_hour for r in runs if r.size == label]
        known = [c for c in of_size if c is not None]
        if bound is not None and bound.best is not None:
            known.append(bound.best)
        best_known = min(known) if known else None
        for limit in dict.fromkeys(r.limit_s for r in runs if r.size == label):
            rows = [r for r in runs if r.size == label and r.limit_s == limit]
            costs = [r.run.cost_per_hour for r in rows if r.run.cost_per_hour is not None]
            spread = max(costs) / min(costs) - 1.0 if costs else None
            above = max(costs) / best_known - 1.0 if costs and best_known else None
            kinds = sorted({r.run.status for r in rows})
            statuses = ", ".join(f"{sum(r.run.status == k for r in rows)}× {k}" for k in kinds)
            walls = [r.run.wall_s for r in rows]
            ref = "–" if bound is None else f"{bound.best or 0:,.2f} / {bound.lower:,.2f}"
            met = spread is not None and spread <= SPREAD_GOAL and len(costs) == len(rows)
            lines.append(
                f"| {label} | {limit:g} s | {len(rows)} | {statuses} | {_median(walls)} "
                f"({max(walls):.2f}) | {' / '.join(f'{c:,.2f}' for c in costs)} | "
                f"{_pct(spread, 3)} | {best_known or 0:,.2f} | {_pct(above, 3)} | {ref} | "
                f"{'yes' if met else 'no'} |"
            )
    return "\n".join(lines)


def _from_json(path: Path) -> tuple[list[Replan], list[SpreadRun], dict[str, Any]]:
    """The measurements a ``--json`` file recorded, to render the tables again."""
    raw = json.loads(path.read_text())

    def bound(value: Any) -> CostBound | None:
        return None if value is None else CostBound(**value)

    def run(value: Any) -> Solve | None:
        return None if value is None else Solve(**value)

    replans = [
        Replan(
            size=r["size"],
            problem_seed=r["problem_seed"],
            first=Solve(**r["first"]),
            second=run(r["second"]),
            reference=bound(r["reference"]),
            reference_s=r["reference_s"],
        )
        for r in raw.get("stability", [])
    ]
    spread = [
        SpreadRun(size=r["size"], limit_s=r["limit_s"], seed=r["seed"], run=Solve(**r["run"]))
        for r in raw.get("spread", [])
    ]
    references = {k: (bound(v[0]), v[1]) for k, v in raw.get("spread_references", {}).items()}
    return replans, spread, references


def machine() -> str:
    model = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, "
        f"OR-Tools {metadata.version('ortools')}, SciPy {metadata.version('scipy')}, "
        f"solver workers={WORKERS}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--only", choices=["stability", "spread"], help="run one part only")
    parser.add_argument("--problems", type=int, default=20, help="problems per size (20)")
    parser.add_argument(
        "--size", choices=["60×6", "100×8"], help="stability: this size only (default: both)"
    )
    parser.add_argument("--first-seed", type=int, default=1, help="first problem seed (1)")
    parser.add_argument("--seeds", type=int, default=8, help="solver seeds in the spread (8)")
    parser.add_argument(
        "--spread-limits",
        type=float,
        nargs="+",
        default=[DEFAULT_LIMIT_S, REPLAN_LIMIT_S],
        help="spread: the time limits to solve at (60 and 6 s); --reference-limit 0 skips "
        "the reference",
    )
    parser.add_argument(
        "--limit", type=float, default=DEFAULT_LIMIT_S, help="stability solves' limit (60 s)"
    )
    parser.add_argument(
        "--reference-limit", type=float, default=60.0, help="reference MILP's limit (60 s)"
    )
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the file --write-docs updates")
    parser.add_argument("--json", type=Path, help="also write the raw measurements here")
    parser.add_argument(
        "--tables-from",
        type=Path,
        nargs="+",
        help="print the tables of earlier --json files; no solving",
    )
    args = parser.parse_args(argv)
    if args.tables_from:
        replans, spread, references = [], [], {}
        for path in args.tables_from:
            more = _from_json(path)
            replans += more[0]
            spread += more[1]
            references.update(more[2])
        if replans:
            print(stability_table(replans) + "\n")
        if spread:
            print(spread_table(spread, references))
        return 0

    raw: dict[str, Any] = {}
    ok = True
    started_load = os.getloadavg()
    if args.only in (None, "stability"):
        sizes = [z for z in STABILITY_SIZES if args.size is None or z.label.startswith(args.size)]
        results = measure_stability(
            args.problems, args.limit, args.reference_limit, args.first_seed, sizes
        )
        raw["stability"] = [asdict(r) for r in results]
        text = stability_table(results)
        ok = ok and all(r.crashes == 0 and r.violations == 0 for r in results)
        print("\n" + text)
        if args.write_docs:
            write_docs(_section(STABILITY, text, started_load), args.docs, STABILITY)
    if args.only in (None, "spread"):
        runs, references = measure_spread(args.seeds, args.reference_limit, args.spread_limits)
        raw["spread"] = [asdict(r) for r in runs]
        raw["spread_references"] = {
            k: (None if v[0] is None else asdict(v[0]), v[1]) for k, v in references.items()
        }
        text = spread_table(runs, references)
        ok = ok and all(r.run.crash is None and not r.run.violations for r in runs)
        print("\n" + text)
        if args.write_docs:
            write_docs(_section(SPREAD, text, started_load), args.docs, SPREAD)
    if args.json:
        args.json.write_text(json.dumps(raw, indent=2, default=str))
    return 0 if ok else 1


def _section(heading: str, table: str, started_load: tuple[float, float, float]) -> str:
    end = os.getloadavg()
    return "\n".join(
        [
            heading,
            "",
            f"Machine: {machine()}; measured {time.strftime('%Y-%m-%d')}; load average "
            f"(1 min) {started_load[0]:.1f} at the start, {end[0]:.1f} at the end.",
            "",
            table,
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
