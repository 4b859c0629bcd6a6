"""The same plan with parts on Ray as in forked processes: the hard fleets and 1,000 × 24.

Each instance is solved twice in this process, one run after the other: parts in forked
processes, then parts as tasks on a local Ray of ``--workers`` CPUs (started once, before
the first Ray run, its workers started and the solver imported in each, so that is not in
the solve: a service keeps them). Both at the command line's defaults
(60 s, 2 workers, solver seed 0). A run records its wall seconds, status, cost, gap and the
independent verifier's verdict; the Ray run whether its solution equals the processes'
(every key but ``solve_seconds``: replicas, routing, unserved, binding, status and gap).

The processes' run also counts, from the solver's DEBUG log (``planner.placement.linear``,
written to a file the forked children inherit), the MIP solves each limit stopped: ``TIME``
(the clock: the plan may then depend on the machine's load), ``NODE`` (a node count) and
solves that ended optimal within their gap. Ray workers log in their own processes, so the
Ray run has no counts; its plan's equality is the check. The 1-minute load average at each
start is recorded.

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_placement_identity --json out.json
    .venv/bin/python -m benchmarks.bench_placement_identity --hard 4 --scale --json out.json
    .venv/bin/python -m benchmarks.bench_placement_identity --table-from out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKERS = 2
SOLVER_SEED = 0
TIME_LIMIT_S = 60.0


def _problem(name: str) -> dict[str, Any]:
    from planner.placement.generator import generate_problem
    from planner.placement.hard import generate_hard_problem

    if name == "1000x24":
        # The placement benchmark's large size (benchmarks/bench_placement_scale.py).
        return generate_problem(tenants=1000, regions=24, zones_per_region=3, gpu_types=5, seed=3)
    return generate_hard_problem(seed=int(name.removeprefix("hard-")))


def _limits_hit(log: Path) -> dict[str, int]:
    counts = {"time": 0, "node": 0, "done": 0}
    for line in log.read_text().splitlines():
        if "(TIME)" in line:
            counts["time"] += 1
        elif "(NODE)" in line:
            counts["node"] += 1
        elif " nodes: " in line:
            counts["done"] += 1
    return counts


def _run(problem: dict[str, Any], executor: str, log: Path | None) -> dict[str, Any]:
    from planner.placement import solve
    from planner.placement.verify import verify

    logger = logging.getLogger("planner.placement.linear")
    handler: logging.Handler | None = None
    if log is not None:
        handler = logging.FileHandler(log, mode="w")
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        solution = solve(
            problem,
            time_limit_s=TIME_LIMIT_S,
            workers=WORKERS,
            seed=SOLVER_SEED,
            executor=executor,  # type: ignore[arg-type]
        )
    finally:
        if handler is not None:
            logger.removeHandler(handler)
            handler.close()
            logger.setLevel(logging.NOTSET)
    wall = time.perf_counter() - t0
    row: dict[str, Any] = {
        "executor": executor,
        "wall_s": round(wall, 1),
        "status": solution["status"],
        "cost_per_hour": solution["cost_per_hour"],
        "gap": solution["gap"],
        "verified": verify(problem, solution) == [],
        "load_at_start": round(load, 2),
    }
    if log is not None:
        row["limits_hit"] = _limits_hit(log)
    row["_plan"] = {k: v for k, v in solution.items() if k != "solve_seconds"}
    return row


def _import_solver() -> None:
    import planner.placement.solver  # noqa: F401


def _warm(ray: Any) -> None:
    """Start the local Ray's workers and have each import the solver, before any clock: a
    service keeps them. Fresh, eight workers importing at once took 3 s on the quiet
    machine and 18-21 s with both cores busy, out of the first solve's time."""
    from planner.placement.solver import PARTS_PER_WORKER

    task = ray.remote(num_cpus=1.0 / PARTS_PER_WORKER)(_import_solver)
    ray.get([task.remote() for _ in range(PARTS_PER_WORKER * WORKERS)])


def measure(names: list[str]) -> list[dict[str, Any]]:
    import ray

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            problem = _problem(name)
            here = _run(problem, "process", Path(tmp) / f"{name}.log")
            if not ray.is_initialized():
                ray.init(num_cpus=WORKERS, num_gpus=0, include_dashboard=False, log_to_driver=False)
                _warm(ray)
            on_ray = _run(problem, "ray", None)
            on_ray["same_plan"] = on_ray.pop("_plan") == here.pop("_plan")
            for row in (here, on_ray):
                rows.append({"instance": name, **row})
                print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| instance | executor | wall s | status | cost $/h | gap | verified "
        "| MIPs stopped by clock / nodes / done | same plan as processes | load |",
        "| --- | --- | ---: | --- | ---: | ---: | --- | --- | --- | ---: |",
    ]
    for r in rows:
        hit = r.get("limits_hit")
        stops = f"{hit['time']} / {hit['node']} / {hit['done']}" if hit else "–"
        same = {True: "yes", False: "no"}.get(r.get("same_plan"), "–")  # type: ignore[arg-type]
        lines.append(
            f"| {r['instance']} | {r['executor']} | {r['wall_s']:.1f} | {r['status']} "
            f"| {r['cost_per_hour']:,.4f} | {100 * r['gap']:.2f} % "
            f"| {'yes' if r['verified'] else 'no'} | {stops} | {same} "
            f"| {r['load_at_start']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hard",
        type=int,
        nargs="*",
        default=None,
        help="hard-fleet seeds (default: the benchmark's five)",
    )
    parser.add_argument("--scale", action="store_true", help="also 1,000 x 24 (seed 3)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--table-from", type=Path, help="print the table of a --json file")
    args = parser.parse_args(argv)
    if args.table_from is not None:
        try:
            rows = json.loads(args.table_from.read_text())
        except (OSError, ValueError) as error:
            print(f"--table-from: cannot read {args.table_from}: {error}", file=sys.stderr)
            return 2
        print(table(rows))
        return 0
    from planner.placement.hard import HARD_SEEDS

    seeds = HARD_SEEDS if args.hard is None else args.hard
    if any(s not in HARD_SEEDS for s in seeds):
        print(f"--hard: seeds are among {list(HARD_SEEDS)}", file=sys.stderr)
        return 2
    names = [f"hard-{s}" for s in seeds] + (["1000x24"] if args.scale else [])
    if not names:
        print("nothing to measure: give --hard seeds or --scale", file=sys.stderr)
        return 2
    rows = measure(names)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
