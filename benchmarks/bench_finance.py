"""Finance benchmark: the forecast endpoint on the generated 200-tenant, 12-region fleet.

The fleet (``planner.placement.generator``, loaded by ``bench_replan.load_generated``) is
re-planned once, then ``GET /api/finance/forecast/`` is timed through the Django test client
as a finance user:

- **first call**: no stored snapshot yet, so the call sizes the active plan hour by hour over
  the horizon (13 months and a week: the forecast per demand, the rolling weekly peak, the
  scaled replicas, the tenants' use), stores the snapshot, aggregates and stores the report.
  The snapshot and reports are deleted before each repeat.
- **cached call**: the same request again: it reads the stored report.
- **new grouping**: another ``group_by`` on the stored snapshot (aggregation only).

Each runs ``--repeats`` times (median reported), for the declared profiles (every demand
flat) and with three weeks of hourly rate history for every tenant (every group fitted and
forecast months ahead), grouped by region and by tenant.

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_finance                  # print the table
    .venv/bin/python -m benchmarks.bench_finance --write-docs     # also update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_replan import (
    DOCS,
    _django,
    _empty_database,
    _prose,
    load_generated,
    machine,
    synthetic_history,
    write_docs,
)

SECTION = "## Finance forecast"
OUTCOME = (
    "The first call after a new plan version pays for the sizing once; every later call reads "
    "stored rows. Without history the sizing is the scaling of the plan's pools over 9,000-odd "
    "hours; with history it is mostly forecasting each tenant's group hour by hour 13 months "
    "ahead (the forecast's mean, smeared over the residuals, is the dearest part), about a "
    "tenth of a second per group on this machine. A cached call is a stored report read and "
    "rendered: its time grows with the rows (2,400 by tenant, 144 by region). A new grouping "
    "aggregates the stored snapshot without sizing again."
)


@dataclass(frozen=True)
class Result:
    history: bool
    group_by: str
    demands: int
    allocations: int
    rows: int
    first_s: list[float]
    cached_s: list[float]
    regroup_s: list[float]
    snapshot_s: float


def _client() -> Any:
    from django.contrib.auth.models import Group, User
    from rest_framework.test import APIClient

    user, _ = User.objects.get_or_create(username="bench-finance")
    group, _ = Group.objects.get_or_create(name="finance")
    user.groups.add(group)
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    response = call()
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.content[:300]
    return elapsed, response


def measure(load: Callable[[], object], *, history: bool, repeats: int) -> list[Result]:
    from controlplane.finance import snapshot as finance_snapshot
    from controlplane.finance.models import FinanceSnapshot
    from controlplane.plans import services
    from controlplane.plans.models import Plan, ReplanRun

    _empty_database()
    load()
    originals = (services.rate_history, finance_snapshot.rate_history)  # type: ignore[attr-defined]
    if history:
        setattr(services, "rate_history", synthetic_history)  # noqa: B010
        setattr(finance_snapshot, "rate_history", synthetic_history)  # noqa: B010
    try:
        run = services.replan_request(trigger=Plan.Trigger.COMMAND, enqueue=False)
        done = services.replan_execute(run_id=run.pk)
        assert done is not None and done.status == ReplanRun.Status.SUCCEEDED, done
        plan = done.plan
        assert plan is not None
        client = _client()
        results = []
        for group_by, other in (("region", "zone"), ("tenant", "tier")):
            first, cached, regroup, snap = [], [], [], []
            rows = 0
            for _ in range(repeats):
                FinanceSnapshot.objects.all().delete()
                elapsed, response = _timed(
                    lambda g=group_by: client.get("/api/finance/forecast/", {"group_by": g})
                )
                first.append(elapsed)
                rows = len(response.json()["rows"])
                snap.append(FinanceSnapshot.objects.get().compute_seconds)
                elapsed, _ = _timed(
                    lambda g=group_by: client.get("/api/finance/forecast/", {"group_by": g})
                )
                cached.append(elapsed)
                elapsed, _ = _timed(
                    lambda g=other: client.get("/api/finance/forecast/", {"group_by": g})
                )
                regroup.append(elapsed)
            results.append(
                Result(
                    history=history,
                    group_by=group_by,
                    demands=len(plan.problem["demands"]),
                    allocations=plan.allocations.count(),
                    rows=rows,
                    first_s=first,
                    cached_s=cached,
                    regroup_s=regroup,
                    snapshot_s=statistics.median(snap),
                )
            )
        return results
    finally:
        setattr(services, "rate_history", originals[0])  # noqa: B010
        setattr(finance_snapshot, "rate_history", originals[1])  # noqa: B010


def table(results: Sequence[Result]) -> str:
    lines = [
        "| history | group_by | demands | allocations | rows (12 months) | first call s "
        "| of which sizing s | cached call s | new grouping s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {'yes' if r.history else 'no'} | {r.group_by} | {r.demands} | {r.allocations} | "
            f"{r.rows} | **{statistics.median(r.first_s):.2f}** | {r.snapshot_s:.2f} | "
            f"**{statistics.median(r.cached_s) * 1000:.1f} ms** | "
            f"{statistics.median(r.regroup_s):.3f} |"
        )
    return "\n".join(lines)


def section(results: Sequence[Result], database: str, repeats: int) -> str:
    intro = (
        "`benchmarks/bench_finance.py` times `GET /api/finance/forecast/` (12 months, by "
        "month) on the generated fleet (`generate_problem(tenants=200, regions=12, "
        "zones_per_region=3, gpu_types=3, seed=7)`, loaded and re-planned as in the re-plan "
        "benchmark), through the Django test client as a finance user. The first call sizes "
        "the active plan hour by hour over the horizon and stores the snapshot, then "
        "aggregates and stores the report; the cached call is the same request again (one "
        "stored report read); a new grouping aggregates the stored snapshot again. With "
        "history, every tenant has three weeks of hourly rates, so every group is fitted "
        f"and forecast 13 months ahead. Medians of {repeats} runs, each first call after "
        "deleting the stored snapshot."
    )
    return "\n".join(
        [
            SECTION,
            "",
            _prose(intro),
            "",
            "```sh",
            ".venv/bin/python -m benchmarks.bench_finance --write-docs",
            "```",
            "",
            _prose(f"Machine: {machine()}. Database: {database}."),
            "",
            table(results),
            "",
            _prose(OUTCOME),
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--database-url", help="benchmark on this database (default: SQLite)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the generated fleet")
    parser.add_argument("--repeats", type=int, default=5, help="runs per measurement")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the file --write-docs updates")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        print("--repeats: must be 1 or more", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-finance-") as tmp:
        _django(args.database_url, Path(tmp))
        from django.db import connection

        from planner.placement.generator import generate_problem

        generated = generate_problem(
            tenants=200, regions=12, zones_per_region=3, gpu_types=3, seed=args.seed
        )
        results = []
        for history in (False, True):
            for result in measure(
                lambda: load_generated(generated), history=history, repeats=args.repeats
            ):
                results.append(result)
                print(
                    f"history={history} group_by={result.group_by}: first "
                    f"{statistics.median(result.first_s):.2f} s, cached "
                    f"{statistics.median(result.cached_s) * 1000:.1f} ms",
                    file=sys.stderr,
                )
        database = f"{connection.vendor} ({'given' if args.database_url else 'temporary file'})"
        text = section(results, database, args.repeats)
        print(text)
        if args.write_docs:
            write_docs(text, args.docs, heading=SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
