"""``python -m workers.benchmarks.loadtest``: sweep any OpenAI-compatible streaming endpoint for
its knee on Ray load generators and print the report as JSON (exit status 0; 1 when the sweep
failed; 2 for bad arguments or a bad classes file)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from planner.errors import PlannerInputError
from workers.benchmarks.endpoint import Endpoint
from workers.benchmarks.loadgen import LoadGeneratorPool
from workers.benchmarks.loadtest.plan import load_test_software, load_test_workload
from workers.benchmarks.loadtest.rates import measure_token_rates
from workers.benchmarks.loadtest.sweep import find_knee
from workers.benchmarks.ray_runner import ray_init
from workers.benchmarks.workload import ClassProfile, sample_requests

__all__ = ["main"]


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m workers.benchmarks.loadtest",
        description="Find the highest open-loop rate at which an OpenAI-compatible streaming "
        "endpoint meets a TTFT target, on Ray load generators; prints the report as JSON.",
    )
    target = parser.add_argument_group("endpoint")
    target.add_argument("--base-url", required=True, help="http://host:port, without /v1")
    target.add_argument("--model", required=True)
    target.add_argument("--api", choices=("completions", "chat"), default="completions")
    target.add_argument("--api-key-env", help="environment variable holding a bearer key")
    target.add_argument("--timeout-s", type=float, default=60.0, help="per request")
    target.add_argument(
        "--no-ignore-eos", action="store_true", help="for servers that refuse ignore_eos"
    )
    load = parser.add_argument_group("load")
    load.add_argument(
        "--classes",
        required=True,
        help="JSON file: a list of {name, share, prompt_tokens: {p50, mean, p99}, "
        "output_tokens: {p50, mean, p99}, prefix_cache_hit_rate}",
    )
    load.add_argument("--requests", type=int, default=1000, help="per rate")
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--cv", type=float, default=1.0, help="arrival gaps' variation (1: Poisson)")
    load.add_argument("--cache", choices=("cold", "warm"), default="cold")
    sweep = parser.add_argument_group("sweep")
    sweep.add_argument("--target-ttft-s", type=float, required=True)
    sweep.add_argument("--quantile", type=float, default=0.95)
    sweep.add_argument("--first-rate", type=float, required=True, help="requests/s")
    sweep.add_argument("--upper-rate", type=float, help="a rate known to fail")
    sweep.add_argument("--max-rate", type=float, help="the most the generators may send")
    sweep.add_argument("--rel-tol", type=float, default=0.02)
    sweep.add_argument("--max-points", type=int, default=12)
    sweep.add_argument("--closed-loop-users", type=int)
    sweep.add_argument(
        "--probe-users", type=int, help="also measure the token rates with this many users"
    )
    ray_group = parser.add_argument_group("Ray")
    ray_group.add_argument("--generators", type=int, default=2)
    ray_group.add_argument("--ray-address", help="join this cluster (default: a local Ray)")
    ray_group.add_argument("--num-cpus", type=int, default=2, help="of a local Ray")
    parser.add_argument("--output", help="write the JSON report here instead of stdout")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a sweep from the command line; returns 0, or 1 when the sweep failed."""
    args = _parse_args(argv)
    try:
        with open(args.classes, encoding="utf-8") as handle:
            data = json.load(handle)
        if not isinstance(data, list):
            raise PlannerInputError("classes", "the file must hold a list of classes")
        classes = tuple(ClassProfile.from_dict(item) for item in data)
        endpoint = Endpoint(
            args.base_url,
            args.model,
            api=args.api,
            api_key=os.environ.get(args.api_key_env) if args.api_key_env else None,
            timeout_s=args.timeout_s,
            ignore_eos=not args.no_ignore_eos,
        )
        sample_requests(classes, 1)  # checks the mix before Ray starts
    except (OSError, ValueError) as exc:  # PlannerInputError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ray_init(args.ray_address, num_cpus=args.num_cpus)
    with LoadGeneratorPool(args.generators) as pool:
        report = find_knee(
            pool,
            endpoint,
            classes,
            args.target_ttft_s,
            first_rate=args.first_rate,
            upper_rate=args.upper_rate,
            max_rate=args.max_rate,
            quantile=args.quantile,
            n=args.requests,
            seed=args.seed,
            cv=args.cv,
            cache=args.cache,
            rel_tol=args.rel_tol,
            max_points=args.max_points,
            closed_loop_users=args.closed_loop_users,
        )
        rates = None
        if args.probe_users and not report.failed:
            rates = measure_token_rates(
                pool, endpoint, users=args.probe_users, target_ttft_s=args.target_ttft_s
            )
        hosts = list(pool.hosts)
    output = {
        "load_test": report.as_dict(),
        "token_rates": None if rates is None else rates.as_dict(),
        "workload": load_test_workload(
            classes,
            endpoint=endpoint,
            target_ttft_s=report.target_ttft_s,
            quantile=report.quantile,
            cache=report.cache,
            requests_per_point=report.requests_per_point,
            seed=report.seed,
            cv=report.cv,
        ),
        "load_generators": hosts,
        "software": load_test_software(),
    }
    text = json.dumps(output, indent=2)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    else:
        print(text)
    verdict = report.failure or (
        f"knee {report.knee_rate:.4g} req/s at p{report.quantile * 100:g} TTFT <= "
        f"{report.target_ttft_s:g} s" + ("" if report.bracketed else " (not bracketed)")
    )
    print(verdict, file=sys.stderr)
    return 1 if report.failed else 0
