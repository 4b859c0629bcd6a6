"""Placement solver benchmark: generated fleets of three sizes, solver against greedy baseline.

For each size (tenants × regions × zones per region × GPU types) the generator builds one
problem from a fixed seed; the solver runs three times (solver seeds 0, 1, 2) with the size's
time limit, and the greedy baseline once. Every plan is checked with the independent
verifier. Reported per size: median solve time, statuses, the solver's own gap, the gap
against the best bound any run proved, cost, the baseline's cost and the saving.

Goals: 50×6 proven optimal; 200×12 within 0.1 % of the bound within 10 s; 1000×24 within
1 % within 60 s.

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_placement                 # all sizes, print table
    .venv/bin/python -m benchmarks.bench_placement --sizes small   # the 50×6 size only
    .venv/bin/python -m benchmarks.bench_placement --write-docs    # also update docs/benchmarks.md

With ``--hosted`` it instead solves each size's problem with and without hosted providers
(``generate_problem(..., hosted=True)``: the same fleet and demands, plus hosted APIs and
tenants allowed to overflow to them), alternating, ``--runs`` times each (solver seeds 0,
1, …, the same on both sides), and reports per side the median solve time, statuses, gaps,
cost, hosted share and the verifier's verdict, and the ratio of the medians (goal: at most
1.5 on 200×12). ``mid`` (100×8×3×4, the seed-spread problem) is a size for this mode:

    .venv/bin/python -m benchmarks.bench_placement --hosted --sizes small mid medium
    .venv/bin/python -m benchmarks.bench_placement --hosted --sizes medium --time-limit 60
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from planner.placement.generator import generate_problem
from planner.placement.greedy import greedy_plan
from planner.placement.reference import CostBound, ReferenceTooHard, reference_cost_bound
from planner.placement.verify import verify

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
SECTION = "## Placement solver"
RUNS = 3
WORKERS = 2
# Relative slack when comparing a claimed bound with a plan's cost: the contract's tolerance.
BOUND_SLACK = 1e-6


@dataclass(frozen=True)
class Size:
    """One benchmark size, its problem seed, the solver's time limit (s) and the goal."""

    label: str
    tenants: int
    regions: int
    zones_per_region: int
    gpu_types: int
    seed: int
    time_limit_s: float
    goal: str
    goal_gap: float | None  # gap against the best bound the goal allows; None: proven optimal


SIZES: dict[str, Size] = {
    "small": Size("50×6×3×3", 50, 6, 3, 3, 1, 60.0, "proven optimal", None),
    "mid": Size("100×8×3×4", 100, 8, 3, 4, 1, 60.0, "(hosted comparison only)", 0.01),
    "medium": Size("200×12×3×4", 200, 12, 3, 4, 2, 10.0, "≤ 0.1 % of bound in 10 s", 0.001),
    "large": Size("1000×24×3×5", 1000, 24, 3, 5, 3, 60.0, "≤ 1 % of bound in 60 s", 0.01),
}


@dataclass
class Run:
    """One solver run: wall time (s), status, reported gap, cost ($/h), unserved (req/s)."""

    seed: int
    wall_s: float
    status: str
    gap: float | None
    cost_per_hour: float
    unserved_requests_per_s: float
    bound: float | None
    violations: list[str] = field(default_factory=list)


@dataclass
class Result:
    """Everything measured on one size."""

    size: Size
    demands: int
    shapes: int
    runs: list[Run]
    greedy_cost_per_hour: float
    greedy_unserved_requests_per_s: float
    greedy_wall_s: float
    greedy_violations: list[str]
    reference: CostBound | None
    reference_wall_s: float

    @property
    def median_wall_s(self) -> float:
        return statistics.median(r.wall_s for r in self.runs)

    @property
    def cheapest_known(self) -> float:
        """The cheapest verified plan any run (or the reference) found, $/hour."""
        costs = [r.cost_per_hour for r in self.runs if not r.violations]
        if self.reference is not None and self.reference.best is not None:
            costs.append(self.reference.best)
        return min(costs) if costs else float("inf")

    def bound_is_refuted(self, run: Run) -> bool:
        """A claimed bound above a plan someone found is no bound at all."""
        if run.bound is None:
            return False
        return run.bound > self.cheapest_known * (1 + BOUND_SLACK)

    @property
    def best_bound(self) -> float | None:
        """The highest cost bound that is proven and not refuted by a known plan."""
        bounds = [
            r.bound for r in self.runs if r.bound is not None and not self.bound_is_refuted(r)
        ]
        if self.reference is not None:
            bounds.append(self.reference.lower)
        return max(bounds) if bounds else None

    @property
    def median_run(self) -> Run:
        ordered = sorted(self.runs, key=lambda r: r.wall_s)
        return ordered[len(ordered) // 2]

    def gap_to_best_bound(self, run: Run) -> float | None:
        bound = self.best_bound
        if bound is None or run.cost_per_hour <= 0:
            return None
        return max(0.0, (run.cost_per_hour - bound) / run.cost_per_hour)

    @property
    def saving(self) -> float | None:
        """Share of the baseline's $/hour the median run saves (when both serve alike)."""
        if self.greedy_cost_per_hour <= 0:
            return None
        return 1.0 - self.median_run.cost_per_hour / self.greedy_cost_per_hour

    @property
    def goal_met(self) -> bool:
        if any(r.violations or self.bound_is_refuted(r) for r in self.runs):
            return False
        if self.size.goal_gap is None:
            optimal = all(r.status == "optimal" for r in self.runs)
            if self.reference is not None and self.reference.proven:
                exact = self.reference.lower
                optimal = optimal and all(
                    abs(r.cost_per_hour - exact) <= 1e-6 * exact for r in self.runs
                )
            return optimal
        gaps = [self.gap_to_best_bound(r) for r in self.runs]
        within_time = all(r.wall_s <= self.size.time_limit_s * 1.05 for r in self.runs)
        return within_time and all(g is not None and g <= self.size.goal_gap for g in gaps)


def _bound(solution: dict[str, Any]) -> float | None:
    """The cost lower bound a run proved: a reported bound, else cost × (1 − gap)."""
    for key in ("best_bound", "bound", "lower_bound"):
        value = solution.get(key)
        if isinstance(value, int | float):
            return float(value)
    gap, cost = solution.get("gap"), solution.get("cost_per_hour")
    if isinstance(gap, int | float) and isinstance(cost, int | float):
        return float(cost) * (1.0 - float(gap))
    return None


class _QuietStdout:
    """Silence file descriptor 1 (HiGHS writes progress lines to it from C++)."""

    def __enter__(self) -> None:
        sys.stdout.flush()
        self._saved = os.dup(1)
        self._null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(self._null, 1)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 1)
        os.close(self._saved)
        os.close(self._null)


def measure(size: Size, bound_limit_s: float) -> Result:
    """Generate the size's problem, solve it ``RUNS`` times, run the baseline, and (with a
    positive ``bound_limit_s``) let the reference MILP prove a cost bound."""
    from planner.placement import solve  # the solver's entry point (placement-v1 solution)

    problem = generate_problem(
        tenants=size.tenants,
        regions=size.regions,
        zones_per_region=size.zones_per_region,
        gpu_types=size.gpu_types,
        seed=size.seed,
    )
    runs: list[Run] = []
    for seed in range(RUNS):
        started = time.perf_counter()
        solution = solve(problem, time_limit_s=size.time_limit_s, workers=WORKERS, seed=seed)
        wall = time.perf_counter() - started
        gap = solution.get("gap")
        runs.append(
            Run(
                seed=seed,
                wall_s=wall,
                status=str(solution.get("status")),
                gap=float(gap) if isinstance(gap, int | float) else None,
                cost_per_hour=float(solution.get("cost_per_hour", 0.0)),
                unserved_requests_per_s=float(solution.get("unserved_requests_per_s", 0.0)),
                bound=_bound(solution),
                violations=verify(problem, solution),
            )
        )
    started = time.perf_counter()
    baseline = greedy_plan(problem)
    greedy_wall = time.perf_counter() - started
    reference: CostBound | None = None
    started = time.perf_counter()
    if bound_limit_s > 0:
        try:
            with _QuietStdout():
                reference = reference_cost_bound(problem, time_limit_s=bound_limit_s)
        except ReferenceTooHard:
            reference = None
    reference_wall = time.perf_counter() - started
    return Result(
        size=size,
        demands=len(problem["demands"]),
        shapes=len(problem["shapes"]),
        runs=runs,
        greedy_cost_per_hour=float(baseline["cost_per_hour"]),
        greedy_unserved_requests_per_s=float(baseline["unserved_requests_per_s"]),
        greedy_wall_s=greedy_wall,
        greedy_violations=verify(problem, baseline),
        reference=reference,
        reference_wall_s=reference_wall,
    )


def _percent(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{100.0 * value:.{digits}f} %"


def machine() -> str:
    """CPU model, usable cores, Python and OR-Tools versions."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        ortools_version = metadata.version("ortools")
    except metadata.PackageNotFoundError:
        ortools_version = "absent"
    return (
        f"{cores} cores ({model}), Python {platform.python_version()}, "
        f"OR-Tools {ortools_version}, solver workers={WORKERS}"
    )


def _money(value: float | None) -> str:
    return "–" if value is None else f"{value:,.2f}"


def table(results: Sequence[Result]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| size | demands | limit | median solve | statuses | solver gap (max) | "
        "refuted gaps | best bound $/h | gap to best bound (max) | cost $/h (runs) | "
        "greedy $/h | saving | verified | goal | met |",
        "|" + "---|" * 15,
    ]
    for r in results:
        kinds = sorted({run.status for run in r.runs})
        statuses = ", ".join(f"{sum(run.status == k for run in r.runs)}× {k}" for k in kinds)
        reported = [run.gap for run in r.runs if run.gap is not None]
        to_bound = [g for g in (r.gap_to_best_bound(run) for run in r.runs) if g is not None]
        refuted = sum(r.bound_is_refuted(run) for run in r.runs)
        verified = not r.greedy_violations and not any(run.violations for run in r.runs)
        costs = sorted(run.cost_per_hour for run in r.runs)
        bound = r.best_bound
        source = ""
        if bound is not None and r.reference is not None and bound == r.reference.lower:
            source = " (reference, proven optimal)" if r.reference.proven else " (reference)"
        lines.append(
            f"| {r.size.label} | {r.demands} | {r.size.time_limit_s:g} s | "
            f"{r.median_wall_s:.2f} s | {statuses} | "
            f"{_percent(max(reported) if reported else None)} | {refuted} of {len(r.runs)} | "
            f"{_money(bound)}{source} | {_percent(max(to_bound) if to_bound else None)} | "
            f"{' / '.join(_money(c) for c in costs)} | {_money(r.greedy_cost_per_hour)} | "
            f"{_percent(r.saving, 1)} | {'yes' if verified else 'NO'} | {r.size.goal} | "
            f"{'yes' if r.goal_met else 'no'} |"
        )
    return "\n".join(lines)


def section(
    results: Sequence[Result], command: str, bound_limit_s: float, revision: str | None
) -> str:
    """The "## Placement solver" section of docs/benchmarks.md."""
    return "\n".join(
        [
            SECTION,
            "",
            "Generated fleets (`planner.placement.generator`, ample inventory, fixed seeds; "
            "size = tenants × regions × zones per region × GPU types), each solved "
            f"{RUNS} times (solver seeds 0–{RUNS - 1}, {WORKERS} workers) and once by the "
            "greedy baseline (`planner.placement.greedy`: the seeds' per-region sizing, "
            "equal replicas per zone, cheapest shape, no spill). Every plan is checked by "
            "the independent verifier (`planner.placement.verify`).",
            "",
            "- *solver gap*: the gap the solver reports. A run's reported gap implies a cost "
            "bound, cost × (1 − gap); *refuted gaps* counts runs whose implied bound lies "
            "above a verified plan that another run or the reference found, so the reported "
            "gap cannot be true.",
            "- *best bound*: the highest unrefuted bound, including the one the reference "
            f"MILP (`planner.placement.reference`, scipy/HiGHS, {bound_limit_s:g} s) proves "
            "independently of the solver; *gap to best bound* is each run's cost against it.",
            "- *saving*: the share of the baseline's $/hour that the median-time run saves.",
            "",
            f"Command: `{command}`",
            "",
            f"Machine: {machine()}; measured {time.strftime('%Y-%m-%d')}"
            + (f" at revision {revision}." if revision else "."),
            "",
            table(results),
            "",
        ]
    )


def write_docs(text: str, docs: Path = DOCS) -> None:
    """Replace (or append) the placement section of ``docs``, leaving other sections alone."""
    if docs.exists():
        current = docs.read_text()
    else:
        current = "# Benchmarks\n"
    start = current.find(SECTION)
    if start == -1:
        updated = current.rstrip("\n") + "\n\n" + text
    else:
        end = current.find("\n## ", start + len(SECTION))
        tail = "" if end == -1 else current[end + 1 :]
        updated = current[:start] + text + ("\n" + tail if tail else "")
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(updated)


#: The most the 200×12 median solve may grow with hosted providers present.
HOSTED_RATIO_GOAL = 1.5


@dataclass
class HostedRun:
    """One solve of one side of the hosted comparison."""

    hosted: bool
    wall_s: float
    status: str
    gap: float | None
    cost_per_hour: float
    hosted_cost_per_hour: float
    hosted_requests_per_s: float
    planned_requests_per_s: float
    unserved_requests_per_s: float
    violations: list[str] = field(default_factory=list)
    load_average: float = 0.0

    @property
    def hosted_share(self) -> float:
        if self.planned_requests_per_s <= 0:
            return 0.0
        return self.hosted_requests_per_s / self.planned_requests_per_s


@dataclass
class HostedResult:
    """Both sides of one size."""

    size: Size
    demands: int
    providers: int
    overflowing_demands: int
    eligible_pairs: int
    runs: list[HostedRun]

    def side(self, hosted: bool) -> list[HostedRun]:
        return [r for r in self.runs if r.hosted == hosted]

    def median_s(self, hosted: bool) -> float:
        return statistics.median(r.wall_s for r in self.side(hosted))

    @property
    def ratio(self) -> float:
        base = self.median_s(False)
        return self.median_s(True) / base if base > 0 else float("inf")


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def measure_hosted(size: Size, runs: int) -> HostedResult:
    """Solve the size's problem without and with hosted providers, alternating."""
    from planner.placement import parse_problem, solve

    arguments: dict[str, Any] = {
        "tenants": size.tenants,
        "regions": size.regions,
        "zones_per_region": size.zones_per_region,
        "gpu_types": size.gpu_types,
        "seed": size.seed,
    }
    problems = {
        False: generate_problem(**arguments),
        True: generate_problem(**arguments, hosted=True),
    }
    parsed = parse_problem(problems[True])
    pairs = sum(
        parsed.hosted_ineligible_reason(d, p) is None for d in parsed.demands for p in parsed.hosted
    )
    out: list[HostedRun] = []
    for seed in range(runs):
        for hosted in (False, True):
            problem = problems[hosted]
            load = _load_average()
            started = time.perf_counter()
            solution = solve(problem, time_limit_s=size.time_limit_s, workers=WORKERS, seed=seed)
            wall = time.perf_counter() - started
            gap = solution.get("gap")
            rows = solution.get("hosted", [])
            out.append(
                HostedRun(
                    hosted=hosted,
                    wall_s=wall,
                    status=str(solution.get("status")),
                    gap=float(gap) if isinstance(gap, int | float) else None,
                    cost_per_hour=float(solution.get("cost_per_hour", 0.0)),
                    hosted_cost_per_hour=float(solution.get("hosted_cost_per_hour", 0.0)),
                    hosted_requests_per_s=sum(float(r["requests_per_s"]) for r in rows),
                    planned_requests_per_s=sum(
                        float(d["requests_per_s"]) * float(d.get("burst", 1.0))
                        for d in problem["demands"]
                    ),
                    unserved_requests_per_s=float(solution.get("unserved_requests_per_s", 0.0)),
                    violations=verify(problem, solution),
                    load_average=load,
                )
            )
    return HostedResult(
        size=size,
        demands=len(problems[True]["demands"]),
        providers=len(problems[True]["hosted"]),
        overflowing_demands=sum(bool(d.get("hosted_overflow")) for d in problems[True]["demands"]),
        eligible_pairs=pairs,
        runs=out,
    )


def hosted_table(results: Sequence[HostedResult]) -> str:
    """The hosted comparison as a Markdown table: one row per size and side."""
    lines = [
        "| size | hosted | limit | median solve | solve s (runs) | ratio | statuses | "
        "gap (max) | cost $/h (runs) | hosted $/h | hosted share | unserved req/s | verified |",
        "|" + "---|" * 13,
    ]
    for r in results:
        for hosted in (False, True):
            side = r.side(hosted)
            kinds = sorted({run.status for run in side})
            statuses = ", ".join(f"{sum(run.status == k for run in side)}× {k}" for k in kinds)
            gaps = [run.gap for run in side if run.gap is not None]
            label = (
                f"{r.providers} providers, {r.overflowing_demands} demands may overflow "
                f"({r.eligible_pairs} pairs)"
                if hosted
                else "none"
            )
            lines.append(
                f"| {r.size.label} | {label} | {r.size.time_limit_s:g} s | "
                f"{r.median_s(hosted):.2f} s | "
                f"{' / '.join(f'{run.wall_s:.2f}' for run in side)} | "
                f"{f'{r.ratio:.2f}×' if hosted else '–'} | {statuses} | "
                f"{_percent(max(gaps) if gaps else None)} | "
                f"{' / '.join(_money(run.cost_per_hour) for run in side)} | "
                f"{_money(statistics.median(run.hosted_cost_per_hour for run in side))} | "
                f"{_percent(statistics.median(run.hosted_share for run in side), 1)} | "
                f"{statistics.median(run.unserved_requests_per_s for run in side):.3f} | "
                f"{'yes' if not any(run.violations for run in side) else 'NO'} |"
            )
    return "\n".join(lines)


def main_hosted(args: argparse.Namespace) -> int:
    results: list[HostedResult] = []
    for name in args.sizes:
        size = SIZES[name]
        if args.time_limit is not None:
            size = replace(size, time_limit_s=args.time_limit)
        print(
            f"{size.label}: without and with hosted providers, {args.runs}× each "
            f"(limit {size.time_limit_s:g} s)…",
            flush=True,
        )
        result = measure_hosted(size, args.runs)
        for run in result.runs:
            print(
                f"  {'hosted' if run.hosted else 'plain '}: {run.status} in {run.wall_s:.2f} s "
                f"(load {run.load_average:.1f}), cost {run.cost_per_hour:,.2f} $/h, "
                f"hosted {run.hosted_cost_per_hour:,.2f} $/h, share "
                f"{100 * run.hosted_share:.1f} %, gap {run.gap}, "
                f"{len(run.violations)} violations",
                flush=True,
            )
            for violation in run.violations[:5]:
                print(f"    {violation}")
        verdict = ""
        if name == "medium":
            met = result.ratio <= HOSTED_RATIO_GOAL
            verdict = f" (goal ≤ {HOSTED_RATIO_GOAL:g}: {'met' if met else 'NOT met'})"
        print(f"  ratio of medians: {result.ratio:.2f}{verdict}", flush=True)
        results.append(result)
    print()
    print(hosted_table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2, default=str))
    verified = all(not any(run.violations for run in r.runs) for r in results)
    return 0 if verified else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--sizes",
        nargs="+",
        choices=sorted(SIZES),
        default=["small", "medium", "large"],
        help="which sizes to run (default: all three)",
    )
    parser.add_argument(
        "--bound-limit",
        type=float,
        default=120.0,
        help="seconds the reference MILP may spend proving a cost bound per size (0: skip)",
    )
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the file --write-docs updates")
    parser.add_argument("--revision", help="the code revision measured, named in the docs")
    parser.add_argument("--json", type=Path, help="also write the raw measurements here")
    parser.add_argument(
        "--hosted",
        action="store_true",
        help="solve each size with and without hosted providers, side by side",
    )
    parser.add_argument(
        "--runs", type=int, default=RUNS, help="with --hosted: solves per side (default 3)"
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        help="with --hosted: the solver's limit in seconds for every size (default: each "
        "size's own)",
    )
    args = parser.parse_args(argv)
    if args.hosted:
        return main_hosted(args)

    results: list[Result] = []
    for name in args.sizes:
        size = SIZES[name]
        print(f"{size.label}: solving {RUNS}× (limit {size.time_limit_s:g} s)…", flush=True)
        result = measure(size, args.bound_limit)
        for run in result.runs:
            print(
                f"  seed {run.seed}: {run.status} in {run.wall_s:.2f} s, "
                f"cost {run.cost_per_hour:,.2f} $/h, gap {run.gap}, bound {run.bound}, "
                f"{len(run.violations)} violations",
                flush=True,
            )
            for violation in run.violations[:5]:
                print(f"    {violation}")
        print(
            f"  greedy: {result.greedy_cost_per_hour:,.2f} $/h in {result.greedy_wall_s:.2f} s, "
            f"{len(result.greedy_violations)} violations"
        )
        print(f"  reference: {result.reference} in {result.reference_wall_s:.1f} s")
        results.append(result)

    # The command that reproduces the table (where it is written to is beside the point).
    words = [".venv/bin/python -m benchmarks.bench_placement"]
    if args.sizes != ["small", "medium", "large"]:
        words += ["--sizes", *args.sizes]
    if args.bound_limit != parser.get_default("bound_limit"):
        words += ["--bound-limit", f"{args.bound_limit:g}"]
    command = " ".join([*words, "--write-docs"])
    print()
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2, default=str))
    if args.write_docs:
        write_docs(section(results, command, args.bound_limit, args.revision), args.docs)
        print(f"\nwritten to {args.docs}")
    verified = all(
        not r.greedy_violations and not any(x.violations for x in r.runs) for r in results
    )
    return 0 if verified else 1


if __name__ == "__main__":
    sys.exit(main())
