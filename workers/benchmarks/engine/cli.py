"""``python -m workers.benchmarks.engine``: run the engine benchmark from the command line, here
or as a Ray task (``--ray``), and print the figure (``--help`` for the options)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from workers.benchmarks.engine.config import ACCELERATORS, GB, PRESETS, BenchmarkPlan, Workload
from workers.benchmarks.engine.harness import run_job


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workers.benchmarks.engine",
        description="Measure prefill and decode throughput of a Llama-style model with random "
        "weights, and its KV-bound concurrency, against the hardware roofline.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--accelerator", choices=sorted(ACCELERATORS), help="data-sheet roofline")
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when visible")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per replica (default 1)")
    parser.add_argument("--prompt-tokens", type=int, default=1024, help="mean prompt")
    parser.add_argument("--prompt-tokens-p95", type=int, help="default: 2 × the mean")
    parser.add_argument("--output-tokens", type=int, default=256, help="mean output")
    parser.add_argument("--output-tokens-p95", type=int, help="default: 2 × the mean")
    parser.add_argument(
        "--reserve-gb", type=float, default=6.0, help="runtime reserve per GPU, decimal GB"
    )
    parser.add_argument("--max-batch", type=int, help="largest decode batch tried")
    parser.add_argument("--repeats", type=int, help="timed repeats per point")
    parser.add_argument("--no-cuda-graphs", action="store_true", help="decode eagerly on GPU")
    parser.add_argument("--ray", action="store_true", help="run as a Ray task asking for --gpus")
    parser.add_argument("--ray-address", help="Ray cluster address (default: a local Ray)")
    parser.add_argument("--output", type=Path, help="write the full result as JSON here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    workload = Workload(
        prompt_tokens_mean=args.prompt_tokens,
        prompt_tokens_p95=args.prompt_tokens_p95 or 2 * args.prompt_tokens,
        output_tokens_mean=args.output_tokens,
        output_tokens_p95=args.output_tokens_p95 or 2 * args.output_tokens,
    )
    plan = BenchmarkPlan.for_workload(workload, device)
    changes: dict[str, Any] = {}
    if args.max_batch:
        changes["max_batch"] = args.max_batch
    if args.repeats:
        changes["repeats"] = args.repeats
    if args.no_cuda_graphs:
        changes["cuda_graphs"] = False
    plan = replace(plan, **changes)
    spec = ACCELERATORS[args.accelerator] if args.accelerator else None
    job: dict[str, Any] = {
        "model": asdict(PRESETS[args.preset]),
        "workload": asdict(workload),
        "device": device,
        "gpus": args.gpus if device == "cuda" else 0,
        "reserve_bytes_per_device": args.reserve_gb * GB,
        "accelerator": asdict(spec) if spec else None,
        "plan": asdict(plan),
    }
    if args.ray:
        # Ray is needed only with --ray: a local run works without it.
        from workers.benchmarks import ray_runner

        result = ray_runner.run_engine_job(job, address=args.ray_address)
    else:
        result = run_job(job, log=lambda message: print(message, file=sys.stderr, flush=True))
    text = json.dumps(result, indent=2, default=str)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    print(json.dumps({"preset": args.preset, **result["figure"]}, indent=2))
    print(
        f"hardware: {result['hardware']}; software: torch {result['software']['torch']}, "
        f"cuda {result['software']['cuda']}; {result['seconds']:.1f} s",
        file=sys.stderr,
    )
    return 0
