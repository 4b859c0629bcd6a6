"""Placement at scale: generated fleets of 1,000 × 24 and 10,000 tenants × 50 regions, parts
solved in forked processes and as tasks on a local Ray, side by side in one run.

Each (size, executor) runs in a child process of its own, under a hard wall-clock limit
(the solver's limit plus a margin) so that an instance the solver cannot handle is measured
and killed rather than left to hang the machine. A child generates the problem (fixed
seed), builds the instance, solves it (solver seed 0, ``--workers`` worker processes or
Ray CPUs) and checks the plan with the independent verifier; it reports the generation,
solve and verification seconds, status, cost, the proven bound (cost × (1 − gap)), the gap,
the verifier's verdict, the instance's size and its peak memory. The 1-minute load average
at each start is recorded, since the machine may be shared.

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_placement_scale --json out.json
    .venv/bin/python -m benchmarks.bench_placement_scale --sizes 1000x24 --executors ray
    .venv/bin/python -m benchmarks.bench_placement_scale --table-from out.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORKERS = 2
SOLVER_SEED = 0


@dataclass(frozen=True)
class Size:
    tenants: int
    regions: int
    zones_per_region: int
    gpu_types: int
    seed: int
    time_limit_s: float

    @property
    def name(self) -> str:
        return f"{self.tenants}x{self.regions}"


SIZES = {
    "1000x24": Size(1000, 24, 3, 5, 3, 60.0),  # the placement benchmark's large size
    "10000x50": Size(10_000, 50, 3, 5, 1, 540.0),  # a plan within 10 minutes
}
# The child's hard limit: the solver's limit times this, plus MARGIN_S (generation, model
# building beyond the limit, verification, Ray's start).
OVERRUN_FACTOR = 1.5
MARGIN_S = 240.0


def child(size: Size, executor: str, workers: int, time_limit_s: float) -> dict[str, Any]:
    """In the child: generate, solve, verify; the measurements."""
    from planner.placement import parse_problem, solve
    from planner.placement.generator import generate_problem
    from planner.placement.model import Instance
    from planner.placement.verify import verify

    out: dict[str, Any] = {"size": size.name, "executor": executor, "limit_s": time_limit_s}
    t0 = time.perf_counter()
    problem = generate_problem(
        tenants=size.tenants,
        regions=size.regions,
        zones_per_region=size.zones_per_region,
        gpu_types=size.gpu_types,
        seed=size.seed,
    )
    out["generate_s"] = round(time.perf_counter() - t0, 2)
    instance = Instance.build(parse_problem(problem))
    out["demands"] = len(instance.demands)
    out["routes"] = len(instance.routes)
    out["parts"] = len(instance.parts())
    if executor == "ray":
        from planner.placement.remote import connect

        t1 = time.perf_counter()
        connect(None, num_cpus=workers)  # started before the clock, as a service would be
        out["ray_start_s"] = round(time.perf_counter() - t1, 2)
    out["load_at_start"] = os.getloadavg()[0]
    t2 = time.perf_counter()
    solution = solve(
        problem,
        time_limit_s=time_limit_s,
        workers=workers,
        seed=SOLVER_SEED,
        executor=executor,  # type: ignore[arg-type]
    )
    out["solve_s"] = round(time.perf_counter() - t2, 2)
    out["status"] = solution["status"]
    out["cost_per_hour"] = solution["cost_per_hour"]
    out["gap"] = solution["gap"]
    out["bound_per_hour"] = solution["cost_per_hour"] * (1 - solution["gap"])
    out["unserved_requests_per_s"] = solution["unserved_requests_per_s"]
    t3 = time.perf_counter()
    violations = verify(problem, solution)
    out["verify_s"] = round(time.perf_counter() - t3, 2)
    out["violations"] = len(violations)
    out["first_violation"] = str(violations[0]) if violations else None
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out["peak_rss_mb"] = round(
        max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, children) / 1024
    )
    return out


def run_child(size: Size, executor: str, workers: int, time_limit_s: float) -> dict[str, Any]:
    """One measurement in a child process, killed (its whole process group) past its limit."""
    hard = time_limit_s * OVERRUN_FACTOR + MARGIN_S
    command = [
        sys.executable,
        "-m",
        "benchmarks.bench_placement_scale",
        "--child",
        size.name,
        executor,
        str(workers),
        str(time_limit_s),
    ]
    started = time.perf_counter()
    load = os.getloadavg()[0]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=hard)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return {
            "size": size.name,
            "executor": executor,
            "limit_s": time_limit_s,
            "load_at_launch": load,
            "error": f"killed after {hard:.0f} s (no result)",
        }
    wall = round(time.perf_counter() - started, 1)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        return {
            "size": size.name,
            "executor": executor,
            "limit_s": time_limit_s,
            "load_at_launch": load,
            "error": f"exit {process.returncode}: {tail}",
            "child_wall_s": wall,
        }
    result: dict[str, Any] = json.loads(lines[-1])
    result["load_at_launch"] = load
    result["child_wall_s"] = wall
    return result


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| size | routes / parts | executor | limit s | solve s | status | cost $/h "
        "| bound $/h | gap | verified | load |\n"
        "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: |"
    )
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['size']} | | {r['executor']} | {r['limit_s']:g} | | {r['error']} "
                f"| | | | | {r['load_at_launch']:.1f} |"
            )
            continue
        verified = "yes" if r["violations"] == 0 else f"no ({r['violations']})"
        lines.append(
            f"| {r['size']} | {r['routes']:,} / {r['parts']} | {r['executor']} "
            f"| {r['limit_s']:g} | {r['solve_s']:.1f} | {r['status']} "
            f"| {r['cost_per_hour']:,.2f} | {r['bound_per_hour']:,.2f} | {100 * r['gap']:.2f} % "
            f"| {verified} | {r['load_at_start']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=list(SIZES))
    parser.add_argument("--executors", nargs="+", choices=("process", "ray"), default=None)
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--time-limit", type=float, default=None, help="override every size's")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--table-from", type=Path, default=None)
    parser.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, executor, workers, limit = args.child
        out = child(SIZES[name], executor, int(workers), float(limit))
        print(json.dumps(out), flush=True)
        return 0
    if args.table_from:
        print(table(json.loads(args.table_from.read_text())))
        return 0
    rows: list[dict[str, Any]] = []
    for name in args.sizes:
        size = SIZES[name]
        limit = args.time_limit or size.time_limit_s
        for executor in args.executors or ("process", "ray"):
            row = run_child(size, executor, args.workers, limit)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=2))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
