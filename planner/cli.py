"""``python -m planner``: the planner's command line.

Subcommands (one function each, registered in ``build_parser``, so that more can be added):

- ``solve PROBLEM.json``: solve a placement problem (``placement-v1``); the solution JSON goes
  to stdout, ``--explain`` writes a human summary to stderr.

A problem file that cannot be read, is not JSON or breaks the spec exits with status 2 and
one line on stderr naming the file and the field; no traceback. A solver failure on a valid
problem (``PlannerSolverError``) exits with status 1 and one line naming the failed part.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from planner.errors import PlannerInputError, PlannerSolverError

EXIT_USAGE = 2
EXIT_SOLVER_FAILED = 1


class CommandFailed(Exception):
    """A command cannot run on this input; the message is the one line to print."""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def _read_json(path: str) -> Any:
    """The JSON document at ``path`` ("-" reads stdin); CommandFailed with one line if not."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise CommandFailed(f"{path}: cannot read: {reason}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandFailed(
            f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None


@contextmanager
def _native_stdout_to_stderr() -> Iterator[None]:
    """Send what native solver code prints to file descriptor 1 to stderr meanwhile.

    stdout carries the solution JSON and must hold nothing else; HiGHS can print a stray
    line from C++ even with its output switched off.
    """
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _solve(args: argparse.Namespace) -> int:
    from planner.placement import ProblemInvalid, parse_problem, solve
    from planner.placement.explain import explain

    data = _read_json(args.problem)
    try:
        problem = parse_problem(data)
    except ProblemInvalid as error:
        raise CommandFailed(f"{args.problem}: invalid problem: {error}") from None
    with _native_stdout_to_stderr():
        solution = solve(
            problem,
            time_limit_s=args.time_limit,
            workers=args.workers,
            seed=args.seed,
            executor=args.executor,
            ray_address=args.ray_address,
        )
        explanation = (
            explain(
                problem,
                solution,
                time_limit_s=args.time_limit,
                workers=args.workers,
                seed=args.seed,
            )
            if args.explain
            else None
        )
    json.dump(solution, sys.stdout, indent=2)
    sys.stdout.write("\n")
    sys.stdout.flush()
    if explanation is not None:
        for line in explanation.lines():
            print(line, file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m planner`` parser with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="python -m planner",
        description="Headroom's planner: size and place LLM inference fleets.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    solve = commands.add_parser(
        "solve",
        help="solve a placement problem (placement-v1); the solution JSON goes to stdout",
        description="Solve a placement problem (placement-problem/v1) and print the solution "
        "(placement-solution/v1) as JSON on stdout.",
    )
    solve.add_argument("problem", help="problem JSON file, or - for stdin")
    solve.add_argument(
        "--explain",
        action="store_true",
        help="also print a human summary to stderr: binding constraints, shortfalls, and the "
        "price of each promise (re-solves with promises relaxed)",
    )
    solve.add_argument(
        "--time-limit",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="wall-clock limit for the solve (default 60); the best plan found is returned",
    )
    solve.add_argument(
        "--workers", type=_positive_int, default=2, help="solver threads (default 2)"
    )
    solve.add_argument("--seed", type=int, default=0, help="solver random seed (default 0)")
    solve.add_argument(
        "--executor",
        choices=("process", "ray"),
        default="process",
        help="where independent parts are solved: forked processes (default) or Ray tasks",
    )
    solve.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="with --executor ray: the cluster (auto, ray://host:10001); default a local Ray "
        "of --workers CPUs",
    )
    solve.set_defaults(run=_solve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.run(args)
    except (CommandFailed, PlannerInputError) as error:
        print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except PlannerSolverError as error:
        print(f"{parser.prog} {args.command}: solver failed: {error}", file=sys.stderr)
        return EXIT_SOLVER_FAILED
    return status
