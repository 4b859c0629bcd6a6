"""``python -m workers.simulators.fleet``: serve a simulated vLLM fleet's /metrics and, over its
simulated history, Prometheus' range-query API."""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import UTC, datetime

from workers.simulators.fleet.exposition import LabelNames
from workers.simulators.fleet.fleet import FleetSimulator, scaled_fleet, support_assistant_fleet
from workers.simulators.fleet.history import (
    FRIDAY_REVIEW_EXTRA_TOKENS,
    FleetHistory,
    TrafficPattern,
)
from workers.simulators.fleet.scenario import ScenarioFleetError, fleet_from_scenario
from workers.simulators.fleet.server import make_server


def moment(text: str) -> float:
    """Epoch seconds from an ISO 8601 date-time (UTC when it names no zone) or a number."""
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite moment, got {text!r}")
        return value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 date-time or epoch seconds, got {text!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.simulators.fleet", description=__doc__)
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
    history = parser.add_argument_group(
        "history", "what /api/v1/query_range answers: simulated buckets before and after start"
    )
    history.add_argument(
        "--history-days",
        type=float,
        default=0.0,
        metavar="N",
        help="simulate N days of history before now (default 0: from now on)",
    )
    history.add_argument(
        "--bucket-s",
        type=int,
        default=300,
        metavar="S",
        help="width of the history's buckets, seconds; must divide a day (default 300); "
        "queries' steps and ranges must be multiples of it",
    )
    history.add_argument(
        "--weekly-growth",
        type=float,
        default=0.0,
        metavar="G",
        help="traffic growth per week, as a fraction (0.02: 2%% a week; default 0)",
    )
    drift = history.add_mutually_exclusive_group()
    drift.add_argument(
        "--drift-at",
        type=moment,
        metavar="WHEN",
        help="apply the Friday-review prompt growth from this moment on (ISO 8601, UTC "
        "unless a zone is given, or epoch seconds)",
    )
    drift.add_argument(
        "--drift-hours-ago",
        type=float,
        metavar="H",
        help="apply the Friday-review prompt growth from H hours before now on",
    )
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error("--port must be between 1 and 65535")
    if not (args.rate_scale > 0 and math.isfinite(args.rate_scale)):
        parser.error("--rate-scale must be positive")
    if not (args.history_days >= 0 and math.isfinite(args.history_days)):
        parser.error("--history-days must be zero or more")
    if args.bucket_s <= 0 or 86400 % args.bucket_s:
        parser.error("--bucket-s must be a positive number of seconds that divides a day")
    if not (args.weekly_growth > -1 and math.isfinite(args.weekly_growth)):
        parser.error("--weekly-growth must be a number above -1")
    if args.drift_hours_ago is not None and not (
        args.drift_hours_ago >= 0 and math.isfinite(args.drift_hours_ago)
    ):
        parser.error("--drift-hours-ago must be zero or more")
    extra = FRIDAY_REVIEW_EXTRA_TOKENS if args.prompt_growth else 0.0
    if args.scenario:
        try:
            spec = fleet_from_scenario(args.scenario, extra_prompt_tokens=extra)
        except ScenarioFleetError as exc:
            print(f"fleetsim: {exc}", file=sys.stderr)
            return 2
    else:
        spec = support_assistant_fleet(extra_prompt_tokens=extra)
    spec = scaled_fleet(spec, args.rate_scale)
    now = time.time()
    drift_at = args.drift_at
    if args.drift_hours_ago is not None:
        drift_at = now - args.drift_hours_ago * 3600
    fleet_history = FleetHistory(
        spec,
        now=now,
        days=args.history_days,
        bucket_s=args.bucket_s,
        pattern=TrafficPattern(weekly_growth=args.weekly_growth),
        seed=args.seed,
        drift=[(drift_at, FRIDAY_REVIEW_EXTRA_TOKENS)] if drift_at is not None else [],
    )
    simulator = FleetSimulator(spec, seed=args.seed, start_time=now)
    labels = LabelNames(args.tenant_label, args.model_label, args.region_label)
    try:
        server = make_server(
            simulator, host=args.host, port=args.port, labels=labels, history=fleet_history
        )
    except OSError as exc:
        print(f"fleetsim: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    print(
        f"fleetsim: serving /metrics and /api/v1/query_range on http://{args.host}:{args.port}",
        file=sys.stderr,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
