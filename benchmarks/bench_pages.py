"""Operators' pages benchmark: server time and SQL queries of the fleet overview and the plan page.

Each case loads a generated fleet (``planner.placement.generator``, 12 regions of 3 zones, 3
GPU types, seed 7) into a fresh database with ``bench_replan.load_generated``, re-plans once,
then requests each page through Django's test client as a viewer: the time is the whole
request in the server process (URL routing, middleware, session and role checks, the
selectors' queries, template rendering), without a network or a browser. Each page is
requested ``--repeat`` times after one warm-up request; the table gives the median and the
spread, and the number of SQL queries of one request. Cases of 50 and 200 tenants on the same
fleet show that the query count does not grow with tenants.

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_pages                 # print the table
    .venv/bin/python -m benchmarks.bench_pages --write-docs    # also update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.bench_replan import (
    DOCS,
    _django,
    _empty_database,
    _prose,
    load_generated,
    machine,
)

SECTION = "## Operators' pages"
TENANT_CASES = (50, 200)


@dataclass(frozen=True)
class Result:
    tenants: int
    demands: int
    allocations: int
    page: str
    url: str
    queries: int
    median_ms: float
    low_ms: float
    high_ms: float
    bytes: int


def measure(tenants: int, repeat: int, seed: int) -> list[Result]:
    from django.contrib.auth.models import Group, User
    from django.db import connection, reset_queries
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from controlplane.plans.models import Plan, ReplanRun
    from controlplane.plans.services import replan_execute, replan_request
    from planner.placement.generator import generate_problem

    _empty_database()
    User.objects.filter(username="bench-viewer").delete()
    load_generated(
        generate_problem(tenants=tenants, regions=12, zones_per_region=3, gpu_types=3, seed=seed)
    )
    run = replan_request(trigger=Plan.Trigger.COMMAND, enqueue=False)
    done = replan_execute(run_id=run.pk)
    assert done is not None and done.status == ReplanRun.Status.SUCCEEDED, done
    plan = done.plan
    assert plan is not None
    user = User.objects.create_user(username="bench-viewer", password="x")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    client = Client()
    client.force_login(user)
    out = []
    for page, url in (("fleet overview", "/"), ("plan page", f"/plans/v{plan.version}/")):
        warm = client.get(url)
        assert warm.status_code == 200, (url, warm.status_code)
        # Each request clears the query log as it starts; start the capture from an empty one.
        reset_queries()
        with CaptureQueriesContext(connection) as captured:
            client.get(url)
        # Read now: the next request clears the log the capture points into.
        queries = len(captured)
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
        out.append(
            Result(
                tenants=tenants,
                demands=len(plan.problem["demands"]),
                allocations=plan.allocations.count(),
                page=page,
                url=url.replace(str(plan.version), "N"),
                queries=queries,
                median_ms=statistics.median(times),
                low_ms=min(times),
                high_ms=max(times),
                bytes=len(warm.content),
            )
        )
    return out


def table(results: Sequence[Result]) -> str:
    lines = [
        "| page | tenants | demands | allocations | SQL queries | median ms | min–max ms | HTML kB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in sorted(results, key=lambda r: (r.page, r.tenants)):
        lines.append(
            f"| {r.page} (`{r.url}`) | {r.tenants} | {r.demands} | {r.allocations} | "
            f"{r.queries} | **{r.median_ms:.1f}** | {r.low_ms:.1f}–{r.high_ms:.1f} | "
            f"{r.bytes / 1000:.0f} |"
        )
    return "\n".join(lines)


def section(results: Sequence[Result], repeat: int, database: str) -> str:
    by_page: dict[str, set[int]] = {}
    for r in results:
        by_page.setdefault(r.page, set()).add(r.queries)
    constant = all(len(counts) == 1 for counts in by_page.values())
    intro = (
        "`benchmarks/bench_pages.py` times the fleet overview and the plan page on a generated "
        "fleet (`generate_problem(tenants=T, regions=12, zones_per_region=3, gpu_types=3, "
        "seed=7)` loaded by `bench_replan.load_generated`, then one re-plan), as a viewer "
        "through Django's test client: the whole request in the server process (routing, "
        "middleware, session, role check, queries, template rendering), no network and no "
        f"browser. Median of {repeat} requests after a warm-up; the query count is of one "
        "request."
    )
    verdict = (
        "The query count is the same for 50 and 200 tenants on every page"
        if constant
        else "The query count differs between 50 and 200 tenants"
    )
    outcome = (
        f"{verdict}: each page reads the active plan's stored documents and a fixed set of "
        "rows (a regression test, `test_query_counts_do_not_grow_with_tenants`, holds this "
        "for the scenario). The time grows with the plan's size: the plan page lists the "
        "routing of every demand, and both pages read each pool's load back from the stored "
        "problem and solution (`planner.placement.pools`)."
    )
    return "\n".join(
        [
            SECTION,
            "",
            _prose(intro),
            "",
            "```sh",
            ".venv/bin/python -m benchmarks.bench_pages --write-docs",
            "```",
            "",
            _prose(f"Machine: {machine()}. Database: {database}."),
            "",
            table(results),
            "",
            _prose(outcome),
            "",
        ]
    )


def write_docs(text: str, docs: Path = DOCS) -> None:
    """Replace (or append) this section of ``docs``, leaving other sections alone."""
    current = docs.read_text() if docs.exists() else "# Benchmarks\n"
    start = current.find(SECTION + "\n")
    if start == -1:
        updated = current.rstrip("\n") + "\n\n" + text
    else:
        end = current.find("\n## ", start + len(SECTION))
        tail = "" if end == -1 else current[end + 1 :]
        updated = current[:start] + text + ("\n" + tail if tail else "")
    docs.write_text(updated)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--database-url", help="benchmark on this database (default: SQLite)")
    parser.add_argument("--repeat", type=int, default=15, help="requests per page (median)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the generated fleet")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the file --write-docs updates")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        print("bench_pages: --repeat must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        _django(args.database_url, Path(tmp))
        from django.conf import settings
        from django.db import connection

        # As in production: DEBUG off (no query log kept on every request).
        settings.DEBUG = False
        results: list[Result] = []
        for tenants in TENANT_CASES:
            rows = measure(tenants, args.repeat, args.seed)
            results += rows
            for r in rows:
                print(
                    f"{r.page}, {tenants} tenants: {r.median_ms:.1f} ms, {r.queries} queries",
                    file=sys.stderr,
                )
        database = f"{connection.vendor} ({'given' if args.database_url else 'temporary file'})"
        text = section(results, args.repeat, database)
        print(text)
        if args.write_docs:
            write_docs(text, args.docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
