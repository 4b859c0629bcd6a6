"""``python -m workers.simulators.replica``: serve a simulated replica until SIGINT or SIGTERM;
the base URL is the first line on stdout (``--help`` for the options)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

from planner.errors import PlannerInputError
from workers.simulators.replica.config import ReplicaConfig
from workers.simulators.replica.server import make_app, serve

READY_PREFIX = "Headroom simulated replica listening on "


def _parse_args(argv: Sequence[str] | None) -> tuple[ReplicaConfig, str, int]:
    defaults = ReplicaConfig()
    parser = argparse.ArgumentParser(
        prog="python -m workers.simulators.replica",
        description="Serve a simulated OpenAI-compatible replica (continuous batching by the "
        "token cost model).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (default)")
    parser.add_argument("--model", default=defaults.model)
    parser.add_argument("--prefill-tokens-per-s", type=float, default=defaults.prefill_tokens_per_s)
    parser.add_argument("--decode-tokens-per-s", type=float, default=defaults.decode_tokens_per_s)
    parser.add_argument("--max-concurrency", type=int, default=defaults.max_concurrency)
    parser.add_argument(
        "--max-sequence-share",
        type=float,
        default=defaults.max_sequence_share,
        help="largest fraction of the engine one sequence uses (1/c: c independent slots)",
    )
    parser.add_argument("--max-model-len", type=int, default=defaults.max_model_len)
    parser.add_argument("--prefix-cache-tokens", type=int, default=defaults.prefix_cache_tokens)
    parser.add_argument("--block-tokens", type=int, default=defaults.block_tokens)
    parser.add_argument("--stream-interval-s", type=float, default=defaults.stream_interval_s)
    ns = parser.parse_args(argv)
    try:
        config = ReplicaConfig(
            model=ns.model,
            prefill_tokens_per_s=ns.prefill_tokens_per_s,
            decode_tokens_per_s=ns.decode_tokens_per_s,
            max_concurrency=ns.max_concurrency,
            max_sequence_share=ns.max_sequence_share,
            max_model_len=ns.max_model_len,
            prefix_cache_tokens=ns.prefix_cache_tokens,
            block_tokens=ns.block_tokens,
            stream_interval_s=ns.stream_interval_s,
        )
    except PlannerInputError as exc:
        parser.error(str(exc))
    return config, ns.host, ns.port


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until SIGINT or SIGTERM; prints the base URL on the first line of stdout."""
    config, host, port = _parse_args(argv)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def ready(url: str) -> None:
            print(READY_PREFIX + url, flush=True)

        await serve(make_app(config), host=host, port=port, ready=ready, stop=stop)

    try:
        asyncio.run(run())
    except OSError as exc:  # the address is taken or not this machine's
        sys.exit(f"cannot listen on {host}:{port}: {exc}")
