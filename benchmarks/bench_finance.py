"""Finance benchmark: the forecast endpoint on the generated 200-tenant, 12-region fleet.

The fleet (``planner.placement.generator``, loaded by ``bench_replan.load_generated``) is
re-planned once, then ``GET /api/finance/forecast/`` is timed through the Django test client
as a finance user:

- **first call**: no stored snapshot yet, so the call sizes the active plan day by day over
  the horizon (13 months and a week: the forecast per demand, the rolling weekly peak, the
  placement re-solved per day within the solve budget, the tenants' use), stores the snapshot,
  aggregates and stores the report.
  The snapshot and reports are deleted before each repeat.
- **cached call**: the same request again: it reads the stored report.
- **new grouping**: another ``group_by`` on the stored snapshot (aggregation only).

Each runs ``--repeats`` times (median reported), for the declared profiles (every demand
flat) and with three weeks of hourly rate history for every tenant (every group fitted and
forecast months ahead), grouped by region and by tenant.

``--reads N`` measures the cost of reads instead (section "Finance reads"): on the same fleet
(declared profiles), after the warm-up, N distinct finance queries by a viewer (forecast by
every period, horizon and grouping, showback, commitments and OpenCost windows, no two alike),
with the growth of the database file, of the stored reports and of this process's resident
memory (the process is the web worker: the requests go through Django's test client in it).

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_finance                  # print the table
    .venv/bin/python -m benchmarks.bench_finance --write-docs     # also update docs/benchmarks.md
    .venv/bin/python -m benchmarks.bench_finance --reads 1000 --write-docs
"""

from __future__ import annotations

import argparse
import os
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
READS_SECTION = "## Finance reads"
GROUPINGS = ("region", "zone", "accelerator", "shape", "model", "tenant", "tier")
OUTCOME = (
    "The first call after a new plan version pays for the sizing once (the warm-up on "
    "activation pays it before any read); every later call reads stored rows. Without history "
    "every day is at the plan's own rates, so the sizing is the plan itself, unsolved; with "
    "history each day is the placement re-solved at the day's forecast, on top of forecasting "
    "each tenant's group 13 months ahead. On this fleet a solve takes seconds and most days "
    "differ, so the solve budget binds (HEADROOM_FINANCE_SOLVE_BUDGET_S, 300 s): the sizing "
    "takes about that, and the days left unproven carry the cheapest fleet solved for a "
    "busier demand (an upper bound, said in the snapshot's notes). A cached call is a stored "
    "report read and "
    "rendered: its time grows with the rows. A new grouping aggregates the stored snapshot "
    "without sizing again."
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


def _rss_kib() -> tuple[int, int]:
    """(resident, peak resident) KiB of this process, from /proc/self/status."""
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


def distinct_queries(count: int) -> list[tuple[str, dict[str, str]]]:
    """``count`` distinct finance queries, cycling over endpoints and their parameters."""
    import itertools
    from datetime import UTC, datetime, timedelta

    groupings = [",".join(c) for n in range(0, 4) for c in itertools.combinations(GROUPINGS, n)]
    horizons = {"month": range(1, 13), "week": range(1, 14), "day": range(1, 32)}
    forecast = [
        ("/api/finance/forecast/", {"period": p, "horizon": str(h), "group_by": g})
        for g in groupings
        for p, hs in horizons.items()
        for h in hs
    ]
    others = [
        (url, {"period": p, "horizon": str(h)})
        for url in ("/api/finance/showback/", "/api/finance/commitments/")
        for p, hs in horizons.items()
        for h in hs
    ]
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    opencost = [
        (
            "/api/finance/forecast/opencost/",
            {
                "window": f"{(today + timedelta(days=a)).strftime('%Y-%m-%dT%H:%M:%SZ')},"
                f"{(today + timedelta(days=a + n)).strftime('%Y-%m-%dT%H:%M:%SZ')}",
                "step": "1d",
                "aggregate": g,
                "includeIdle": "true",
            },
        )
        for a in range(1, 8)
        for n in (1, 7, 14)
        for g in ("region", "tenant", "accelerator,tenant")
    ]
    # Interleaved, so every kind of query is in any prefix of the list.
    mixed = [q for batch in itertools.zip_longest(forecast, others, opencost) for q in batch if q]
    if len(mixed) < count:
        raise SystemExit(f"--reads: at most {len(mixed)} distinct queries, asked for {count}")
    return mixed[:count]


@dataclass(frozen=True)
class ReadsResult:
    queries: int
    tenants: int
    demands: int
    database_before: int
    database_after: int
    stored_reports: int
    stored_bytes: int
    rss_before_kib: int
    rss_after_kib: int
    peak_before_kib: int
    peak_after_kib: int
    seconds: float
    slowest_s: float


def measure_reads(load: Callable[[], object], *, reads: int, database: Path | None) -> ReadsResult:
    import gc

    from django.contrib.auth.models import Group, User
    from django.db import connection
    from rest_framework.test import APIClient

    from controlplane.finance import services as finance
    from controlplane.finance.models import FinanceReport
    from controlplane.plans import services
    from controlplane.plans.models import Plan, ReplanRun

    _empty_database()
    load()
    run = services.replan_request(trigger=Plan.Trigger.COMMAND, enqueue=False)
    done = services.replan_execute(run_id=run.pk)
    assert done is not None and done.status == ReplanRun.Status.SUCCEEDED, done
    plan = done.plan
    assert plan is not None
    # What the warm-up stores on activation: the snapshot, the monthly forecast and showback.
    finance.finance_warm(plan_id=plan.pk)
    user, _ = User.objects.get_or_create(username="bench-viewer")
    group, _ = Group.objects.get_or_create(name="viewer")
    user.groups.add(group)
    client = APIClient()
    client.force_authenticate(user=user)
    queries = distinct_queries(reads)
    # One request first: what any worker holds once it has served at all.
    _timed(lambda: client.get("/api/finance/forecast/"))
    connection.close()
    gc.collect()

    def size() -> int:
        return database.stat().st_size if database is not None and database.exists() else 0

    database_before = size()
    rss_before, peak_before = _rss_kib()
    started = time.perf_counter()
    slowest = 0.0
    for url, params in queries:
        elapsed, _ = _timed(lambda u=url, p=params: client.get(u, p))
        slowest = max(slowest, elapsed)
    seconds = time.perf_counter() - started
    connection.close()
    gc.collect()
    rss_after, peak_after = _rss_kib()
    stored = list(FinanceReport.objects.values_list("size_bytes", flat=True))
    return ReadsResult(
        queries=len(queries),
        tenants=len({d["tenant"] for d in plan.problem["demands"]}),
        demands=len(plan.problem["demands"]),
        database_before=database_before,
        database_after=size(),
        stored_reports=len(stored),
        stored_bytes=sum(stored),
        rss_before_kib=rss_before,
        rss_after_kib=rss_after,
        peak_before_kib=peak_before,
        peak_after_kib=peak_after,
        seconds=seconds,
        slowest_s=slowest,
    )


def reads_section(result: ReadsResult, database: str) -> str:
    mib = 1024 * 1024
    grew = (result.database_after - result.database_before) / mib
    rss = (result.rss_after_kib - result.rss_before_kib) / 1024
    peak = (result.peak_after_kib - result.peak_before_kib) / 1024
    intro = (
        "`benchmarks/bench_finance.py --reads N` issues N distinct finance queries as a viewer "
        "on the generated fleet (declared profiles), after the activation's warm-up: the "
        "forecast by every period, horizon and grouping of up to three groups, showback and "
        "commitments by period and horizon, and OpenCost windows by day, interleaved, no two "
        "alike. The requests go through Django's test client in the benchmark's process, so "
        "its resident memory is a web worker's. The bounds: stored reports at most "
        "`HEADROOM_FINANCE_MAX_REPORTS` (200) and `HEADROOM_FINANCE_REPORT_STORE_BYTES` "
        "(8 MiB of JSON), the least recently read evicted; per process, parsed reports within "
        "`HEADROOM_FINANCE_REPORT_CACHE_BYTES` (8 MiB of JSON)."
    )
    lines = [
        "| queries | tenants | demands | database growth | stored reports (JSON) "
        "| worker RSS growth | worker peak RSS growth | time | slowest query |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {result.queries} | {result.tenants} | {result.demands} | **{grew:.1f} MB** | "
        f"{result.stored_reports} ({result.stored_bytes / mib:.1f} MB) | **{rss:.0f} MB** | "
        f"{peak:.0f} MB | {result.seconds:.0f} s | {result.slowest_s:.2f} s |",
    ]
    return "\n".join(
        [
            READS_SECTION,
            "",
            _prose(intro),
            "",
            "```sh",
            f".venv/bin/python -m benchmarks.bench_finance --reads {result.queries} --write-docs",
            "```",
            "",
            _prose(f"Machine: {machine()}. Database: {database}."),
            "",
            *lines,
            "",
            _prose(
                "Acceptance: database growth at most 20 MB and worker RSS growth at most 150 MB "
                "for 1,000 distinct queries. Before the bounds, 50 such queries grew the "
                "database by 218 MB and each worker's memo to about 700 MB."
            ),
            "",
        ]
    )


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
        "the active plan day by day over the horizon and stores the snapshot, then "
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
    parser.add_argument(
        "--reads", type=int, default=0, help="measure N distinct viewer queries instead"
    )
    parser.add_argument("--tenants", type=int, default=200, help="tenants of the generated fleet")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        print("--repeats: must be 1 or more", file=sys.stderr)
        return 2
    if args.reads < 0 or args.tenants < 1:
        print("--reads, --tenants: must be 0 or more, 1 or more", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-finance-") as tmp:
        # The activation's warm-up would size the snapshot in a child process at the same time
        # (without this process's synthetic history): the benchmark times the sizing itself.
        os.environ["HEADROOM_FINANCE_WARM"] = "false"
        _django(args.database_url, Path(tmp))
        from django.db import connection

        from planner.placement.generator import generate_problem

        generated = generate_problem(
            tenants=args.tenants, regions=12, zones_per_region=3, gpu_types=3, seed=args.seed
        )
        if args.reads:
            name = connection.settings_dict["NAME"]
            file = None if args.database_url else Path(str(name))
            result = measure_reads(
                lambda: load_generated(generated), reads=args.reads, database=file
            )
            database = f"{connection.vendor} ({'given' if args.database_url else 'temporary file'})"
            text = reads_section(result, database)
            print(text)
            if args.write_docs:
                write_docs(text, args.docs, heading=READS_SECTION)
            return 0
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
