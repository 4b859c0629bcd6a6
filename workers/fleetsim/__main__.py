"""``python -m workers.fleetsim``: serve a simulated vLLM fleet's /metrics."""

from __future__ import annotations

import argparse
import sys
import time

from workers.fleetsim.exposition import LabelNames
from workers.fleetsim.fleet import FleetSimulator, scaled_fleet, support_assistant_fleet
from workers.fleetsim.scenario import ScenarioFleetError, fleet_from_scenario
from workers.fleetsim.server import make_server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.fleetsim", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--prompt-growth",
        action="store_true",
        help="start with the Friday-review prompt growth (+1,200 prompt tokens per request)",
    )
    parser.add_argument(
        "--scenario",
        metavar="FILE",
        help="build the streams and pools from a Headroom scenario file (YAML or JSON) "
        "instead of the built-in support-assistant fleet",
    )
    parser.add_argument(
        "--rate-scale",
        type=float,
        default=1.0,
        metavar="K",
        help="multiply every stream's request rate and every pool's replicas by K",
    )
    parser.add_argument("--tenant-label", default="tenant")
    parser.add_argument("--model-label", default="model_name")
    parser.add_argument("--region-label", default="region")
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error("--port must be between 1 and 65535")
    if not args.rate_scale > 0:
        parser.error("--rate-scale must be positive")
    extra = 1200.0 if args.prompt_growth else 0.0
    if args.scenario:
        try:
            spec = fleet_from_scenario(args.scenario, extra_prompt_tokens=extra)
        except ScenarioFleetError as exc:
            print(f"fleetsim: {exc}", file=sys.stderr)
            return 2
    else:
        spec = support_assistant_fleet(extra_prompt_tokens=extra)
    spec = scaled_fleet(spec, args.rate_scale)
    simulator = FleetSimulator(spec, seed=args.seed, start_time=time.time())
    labels = LabelNames(args.tenant_label, args.model_label, args.region_label)
    try:
        server = make_server(simulator, host=args.host, port=args.port, labels=labels)
    except OSError as exc:
        print(f"fleetsim: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    print(f"fleetsim: serving /metrics on http://{args.host}:{args.port}", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
