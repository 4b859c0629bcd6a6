"""API load benchmark: gunicorn on loopback under an open-loop mix of reads and policy writes.

The script prepares its own PostgreSQL database (dropped and created again), migrates it, loads
the generated fleet (``planner.placement.generator``: 200 tenants, 12 regions of 3 zones, 3 GPU
types, seed 7, written by ``bench_replan.load_generated``) with a quota per tenant, re-plans
once (the plan becomes active), creates a ``policy-admin`` user with an API token and a signed-in
session, collects the static files and starts gunicorn with the web container's own command
(``deploy/kubernetes/web.yaml``, bound to a free loopback port) and the production settings
(``DEBUG=false``, a generated ``SECRET_KEY``, ``ALLOWED_HOSTS=127.0.0.1``). Each request carries
``X-Forwarded-Proto: https``, as the load balancer in front of the web pods sends it.

The load is open-loop: each step sends requests at Poisson arrival times drawn in advance for
its rate (``--arrivals fixed`` for evenly spaced ones), whether or not earlier requests have
been answered, and each latency runs from the request's scheduled send time to the end of its
response body, so a server that falls behind shows as latency (no coordinated omission). The mix
(``MIX``): tenant list and detail, the plan list and the active plan, the finance forecast (by
region, by tenant) and showback, the operators' fleet overview, plan list and tenant pages, and
policy writes (``PATCH`` of a tenant quota with the ``If-Match`` of the ETag last seen). An error
is a timeout, a refused connection, or any status other than 200. Steps go up through
``--rates`` (``--step-s`` seconds each) and stop after the first step whose p99 exceeds ten
times the limit or whose errors pass 5%.

With ``--side-jobs`` a second process runs, for the whole measurement, what the workers do
beside the web: a re-plan of the fleet (after nudging one tenant's declared rate so that the
inputs differ and the solve really runs), then a telemetry pull of six hours from the fleet
simulator (a Prometheus stand-in, in that process), again and again. The table gives how many of
each finished.

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_load                   # alone
    .venv/bin/python -m benchmarks.bench_load --side-jobs       # during re-plans and pulls

The load generator, gunicorn, PostgreSQL and the side jobs share the machine: on two cores the
generator's own CPU use is part of what each step measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from benchmarks.bench_replan import REPO, load_generated

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/headroom_load_bench"
WEB_MANIFEST = REPO / "deploy" / "kubernetes" / "web.yaml"
RATES = (50, 100, 200, 300, 400, 500, 600)
P99_LIMIT_MS = 100.0
GOAL_RPS = 500
REQUEST_TIMEOUT_S = 10.0
USERNAME = "bench-load-admin"
SIDE_START_S = 300.0

# (name, weight): what one scheduled request is, drawn with these weights.
MIX: tuple[tuple[str, int], ...] = (
    ("api tenants list", 12),
    ("api tenant detail", 14),
    ("api plans list", 8),
    ("api active plan", 6),
    ("api finance forecast by region", 8),
    ("api finance forecast by tenant", 4),
    ("api finance showback", 4),
    ("page fleet overview", 8),
    ("page plans", 8),
    ("page tenant", 12),
    ("api tenant quota detail", 8),
    ("api tenant quota PATCH", 8),
)


# -- the database and the fleet -------------------------------------------------------------


def create_database(url: str) -> None:
    """Drop and create the database ``url`` names (its server's ``postgres`` database is used
    to do it)."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@dataclass(frozen=True)
class Fixture:
    token: str
    session: str
    tenant_ids: list[int]
    tenant_names: list[str]
    quota_ids: list[int]
    plan_version: int


def prepare(seed: int) -> None:
    """Load the fleet, give every tenant a quota and re-plan once."""
    from controlplane.plans.models import Plan, ReplanRun
    from controlplane.plans.services import replan_execute, replan_request
    from controlplane.policies.models import Tenant, TenantQuota
    from planner.placement.generator import generate_problem

    load_generated(
        generate_problem(tenants=200, regions=12, zones_per_region=3, gpu_types=3, seed=seed)
    )
    TenantQuota.objects.bulk_create(
        TenantQuota(
            tenant=tenant,
            budget_rate_replica_s_per_s=10.0,
            budget_burst_replica_s=100.0,
            tokens_per_minute_limit=600_000,
            tokens_per_minute_burst=900_000,
        )
        for tenant in Tenant.objects.all()
    )
    run = replan_request(trigger=Plan.Trigger.COMMAND, enqueue=False)
    done = replan_execute(run_id=run.pk)
    assert done is not None and done.status == ReplanRun.Status.SUCCEEDED, done


def fixture() -> Fixture:
    """The user (policy-admin, with a token and a session) and the ids the mix asks for."""
    from django.conf import settings
    from django.contrib.auth.models import Group, User
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from controlplane.core.roles import POLICY_ADMIN
    from controlplane.plans.models import Plan
    from controlplane.policies.models import Tenant, TenantQuota

    user, _ = User.objects.get_or_create(username=USERNAME)
    user.groups.add(Group.objects.get_or_create(name=POLICY_ADMIN)[0])
    token, _ = Token.objects.get_or_create(user=user)
    client = Client()
    client.force_login(user)
    plan = Plan.objects.get(state=Plan.State.ACTIVE)
    tenants = list(Tenant.objects.order_by("name").values_list("id", "name"))
    return Fixture(
        token=token.key,
        session=client.cookies[settings.SESSION_COOKIE_NAME].value,
        tenant_ids=[t[0] for t in tenants],
        tenant_names=[t[1] for t in tenants],
        quota_ids=list(TenantQuota.objects.order_by("id").values_list("id", flat=True)),
        plan_version=plan.version,
    )


# -- gunicorn -------------------------------------------------------------------------------


def web_command(port: int, extra: Sequence[str]) -> list[str]:
    """The web container's command from the manifest, bound to ``port`` on loopback, with
    ``extra`` options after it (gunicorn takes the last of a repeated option)."""
    import yaml

    web = next(
        d
        for d in yaml.safe_load_all(WEB_MANIFEST.read_text())
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "headroom-web"
    )
    (container,) = web["spec"]["template"]["spec"]["containers"]
    command = list(container["command"])
    command[command.index("--bind") + 1] = f"127.0.0.1:{port}"
    return [sys.executable, "-m", *command, *extra]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_up(port: int, process: subprocess.Popen[bytes], deadline_s: float = 90) -> None:
    import http.client

    deadline = time.monotonic() + deadline_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/healthz", headers={"Host": "127.0.0.1"})
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("gunicorn did not answer /healthz in time")
        time.sleep(0.3)


def cpu_seconds(master: int) -> float:
    """CPU seconds (user + system) the gunicorn master and its workers have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    except OSError:
        return math.nan
    total = 0.0
    for pid in [str(master), *children]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def stop(process: subprocess.Popen[bytes], timeout_s: float = 20) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)


# -- the load -------------------------------------------------------------------------------


@dataclass
class Sample:
    kind: str
    latency_ms: float
    status: int  # 0: no response (timeout, refused, reset)


@dataclass
class StepResult:
    rate: int
    scheduled: int
    achieved_rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    load_before: str
    server_cpu_ms: float = math.nan
    client_cpu_pct: float = math.nan
    by_kind: dict[str, tuple[int, float, int]] = field(default_factory=dict)
    side: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.errors == 0 and self.p99_ms < P99_LIMIT_MS


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (sorted here)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


class Load:
    """Builds and sends the mix's requests; remembers each quota's last ETag."""

    def __init__(
        self, base: str, fx: Fixture, seed: int, only: Sequence[str] | None = None
    ) -> None:
        self.base = base
        self.fx = fx
        self.rng = random.Random(seed)
        mix = [(name, weight) for name, weight in MIX if not only or name in only]
        self.kinds = [name for name, _ in mix]
        self.weights = [weight for _, weight in mix]
        self.etags: dict[int, str] = {}
        self.next_quota = 0
        common = {"Host": "127.0.0.1", "X-Forwarded-Proto": "https"}
        self.api = {**common, "Authorization": f"Token {fx.token}"}
        self.page = {**common, "Cookie": f"sessionid={fx.session}"}

    def request(self, kind: str) -> tuple[str, str, dict[str, str], Any]:
        fx, rng = self.fx, self.rng
        tenant = rng.randrange(len(fx.tenant_ids))
        quota = fx.quota_ids[rng.randrange(len(fx.quota_ids))]
        match kind:
            case "api tenants list":
                offset = 50 * rng.randrange(4)
                return "GET", f"/api/tenants/?limit=50&offset={offset}", self.api, None
            case "api tenant detail":
                return "GET", f"/api/tenants/{fx.tenant_ids[tenant]}/", self.api, None
            case "api plans list":
                return "GET", "/api/plans/", self.api, None
            case "api active plan":
                return "GET", "/api/plans/active/", self.api, None
            case "api finance forecast by region":
                return "GET", "/api/finance/forecast/?group_by=region", self.api, None
            case "api finance forecast by tenant":
                return "GET", "/api/finance/forecast/?group_by=tenant", self.api, None
            case "api finance showback":
                return "GET", "/api/finance/showback/", self.api, None
            case "page fleet overview":
                return "GET", "/", self.page, None
            case "page plans":
                return "GET", "/plans/", self.page, None
            case "page tenant":
                return "GET", f"/tenants/{fx.tenant_names[tenant]}/", self.page, None
            case "api tenant quota detail":
                return "GET", f"/api/tenant-quotas/{quota}/", self.api, None
            case "api tenant quota PATCH":
                # Round-robin over the quotas: two writes of one quota are never in flight at
                # once at these rates, so a 412 would be a real lost update, not a race here.
                quota = fx.quota_ids[self.next_quota % len(fx.quota_ids)]
                self.next_quota += 1
                headers = {
                    **self.api,
                    "If-Match": self.etags.get(quota, "*"),
                    "Content-Type": "application/json",
                }
                body = {"budget_burst_replica_s": float(100 + self.next_quota % 50)}
                return "PATCH", f"/api/tenant-quotas/{quota}/", headers, json.dumps(body)
        raise ValueError(kind)

    async def fire(self, session: Any, scheduled: float, kind: str) -> Sample:
        import aiohttp

        method, path, headers, body = self.request(kind)
        loop = asyncio.get_running_loop()
        status = 0
        try:
            async with session.request(
                method, self.base + path, headers=headers, data=body, allow_redirects=False
            ) as response:
                await response.read()
                status = response.status
                if method == "PATCH" and status == 200 and "ETag" in response.headers:
                    self.etags[int(path.rstrip("/").rsplit("/", 1)[1])] = response.headers["ETag"]
        except (TimeoutError, aiohttp.ClientError, OSError):
            status = 0
        return Sample(kind, (loop.time() - scheduled) * 1000, status)

    async def step(self, rate: int, seconds: float, arrivals: str) -> tuple[list[Sample], float]:
        import aiohttp

        count = int(rate * seconds)
        if arrivals == "poisson":
            gaps = [self.rng.expovariate(rate) for _ in range(count)]
        else:
            gaps = [1.0 / rate] * count
        kinds = self.rng.choices(self.kinds, self.weights, k=count)
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        async with aiohttp.ClientSession(
            timeout=timeout, connector=connector, cookie_jar=aiohttp.DummyCookieJar()
        ) as session:
            loop = asyncio.get_running_loop()
            start = loop.time() + 0.05
            at = start
            tasks = []
            for gap, kind in zip(gaps, kinds, strict=True):
                at += gap
                delay = at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(self.fire(session, at, kind)))
            samples = list(await asyncio.gather(*tasks))
            elapsed = loop.time() - start
        return samples, elapsed

    async def warm(self, rounds: int) -> None:
        """Every kind once, one after the other (the finance snapshot and reports are computed
        and stored by these first calls, as after any new plan version), then ``rounds`` times
        all at once, so that every worker has served every kind (a worker imports a view's
        modules and compiles its templates on its first request)."""
        import aiohttp

        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=300), cookie_jar=aiohttp.DummyCookieJar()
        ) as session:
            loop = asyncio.get_running_loop()
            for kind in self.kinds:
                sample = await self.fire(session, loop.time(), kind)
                if sample.status != 200:
                    raise RuntimeError(f"warm-up: {kind} answered {sample.status}")
            for _ in range(rounds):
                samples = await asyncio.gather(
                    *(self.fire(session, loop.time(), kind) for kind in self.kinds)
                )
                failed = [s for s in samples if s.status != 200]
                if failed:
                    raise RuntimeError(f"warm-up: {failed[0].kind} answered {failed[0].status}")


def summarize(rate: int, samples: list[Sample], elapsed: float, load_before: str) -> StepResult:
    latencies = [s.latency_ms for s in samples]
    by_kind: dict[str, tuple[int, float, int]] = {}
    for kind, _ in MIX:
        own = [s for s in samples if s.kind == kind]
        if own:
            by_kind[kind] = (
                len(own),
                percentile([s.latency_ms for s in own], 0.99),
                sum(s.status != 200 for s in own),
            )
    done = sum(s.status != 0 for s in samples)
    return StepResult(
        rate=rate,
        scheduled=len(samples),
        achieved_rps=done / elapsed if elapsed > 0 else math.nan,
        p50_ms=percentile(latencies, 0.50),
        p95_ms=percentile(latencies, 0.95),
        p99_ms=percentile(latencies, 0.99),
        max_ms=max(latencies, default=math.nan),
        errors=sum(s.status != 200 for s in samples),
        load_before=load_before,
        by_kind=by_kind,
    )


def uptime_load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


# -- side jobs: re-plans and telemetry pulls ------------------------------------------------


def side_jobs(log: Path, seed: int) -> None:
    """Re-plan, then pull six hours of telemetry, until terminated; one JSON line per job."""
    from dataclasses import replace
    from datetime import UTC, datetime, timedelta

    from controlplane.plans.models import Plan
    from controlplane.plans.services import replan_execute, replan_request
    from controlplane.policies.models import WorkloadProfile
    from controlplane.telemetry.conf import telemetry_settings
    from controlplane.telemetry.pull import prometheus_client, telemetry_pull
    from workers.simulators.fleet.exposition import LabelNames
    from workers.simulators.fleet.fleet import FleetSimulator, support_assistant_fleet
    from workers.simulators.fleet.history import FleetHistory
    from workers.simulators.fleet.server import make_server, serving

    stopping = False

    def _stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    conf = telemetry_settings()
    now = time.time()
    spec = support_assistant_fleet()
    history = FleetHistory(spec, now=now, days=14, bucket_s=conf.bucket_s, seed=seed)
    labels = LabelNames(conf.labels.tenant, conf.labels.model, conf.labels.region)
    simulator = FleetSimulator(spec, seed=seed, start_time=now)
    server = make_server(simulator, port=0, labels=labels, history=history)
    rng = random.Random(seed)
    end = datetime.fromtimestamp(math.floor(now / 3600) * 3600, tz=UTC)
    with serving(server) as url, log.open("a") as out:
        client = prometheus_client(replace(conf, prometheus_url=url))
        while not stopping:
            profile = WorkloadProfile.objects.order_by("?").first()
            assert profile is not None
            profile.peak_requests_per_s = round(
                profile.peak_requests_per_s * rng.uniform(0.9, 1.1), 6
            )
            profile.save(update_fields=["peak_requests_per_s"])
            began = time.monotonic()
            run = replan_request(trigger=Plan.Trigger.COMMAND, enqueue=False)
            done = replan_execute(run_id=run.pk)
            status = done.status if done is not None else "none"
            out.write(
                json.dumps({"job": "replan", "status": status, "s": time.monotonic() - began})
            )
            out.write("\n")
            out.flush()
            if stopping:
                break
            began = time.monotonic()
            pull = telemetry_pull(
                window_start=end - timedelta(hours=6), window_end=end, client=client
            )
            end -= timedelta(hours=6)
            out.write(
                json.dumps(
                    {
                        "job": "pull",
                        "status": pull.status,
                        "samples": pull.samples_stored,
                        "s": time.monotonic() - began,
                    }
                )
            )
            out.write("\n")
            out.flush()


def side_counts(log: Path, since: int) -> tuple[dict[str, int], int]:
    """Jobs finished in the log's lines after line ``since``; and the number of lines now."""
    lines = log.read_text().splitlines() if log.exists() else []
    counts: dict[str, int] = {}
    for line in lines[since:]:
        row = json.loads(line)
        counts[row["job"]] = counts.get(row["job"], 0) + 1
    return counts, len(lines)


# -- reporting ------------------------------------------------------------------------------


def table(results: Sequence[StepResult], side: bool) -> str:
    head = (
        "| rate req/s | achieved req/s | requests | p50 ms | p95 ms | p99 ms | max ms | errors "
        "| web CPU ms/request | generator CPU | load average before |"
    )
    rule = "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    if side:
        head += " re-plans / pulls done |"
        rule += " ---: |"
    lines = [head, rule]
    for r in results:
        mark = "**" if r.ok else ""
        row = (
            f"| {mark}{r.rate}{mark} | {r.achieved_rps:.0f} | {r.scheduled} | {r.p50_ms:.1f} | "
            f"{r.p95_ms:.1f} | {mark}{r.p99_ms:.1f}{mark} | {r.max_ms:.0f} | {r.errors} | "
            f"{r.server_cpu_ms:.1f} | {r.client_cpu_pct:.0f}% | {r.load_before} |"
        )
        if side:
            row += f" {r.side.get('replan', 0)} / {r.side.get('pull', 0)} |"
        lines.append(row)
    return "\n".join(lines)


def kinds_table(result: StepResult) -> str:
    lines = ["| request | count | p99 ms | errors |", "| --- | ---: | ---: | ---: |"]
    for kind, (count, p99, errors) in result.by_kind.items():
        lines.append(f"| {kind} | {count} | {p99:.1f} | {errors} |")
    return "\n".join(lines)


def highest_passing(results: Sequence[StepResult]) -> int | None:
    """The highest rate of the unbroken run of passing steps from the first."""
    best = None
    for r in results:
        if not r.ok:
            break
        best = r.rate
    return best


# -- main -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL, help="PostgreSQL")
    parser.add_argument(
        "--reuse-database", action="store_true", help="skip creating and loading the database"
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the fleet and the load")
    parser.add_argument(
        "--rates", type=int, nargs="+", default=list(RATES), help="req/s of each step"
    )
    parser.add_argument("--step-s", type=float, default=20.0, help="seconds per step")
    parser.add_argument("--arrivals", choices=("poisson", "fixed"), default="poisson")
    parser.add_argument("--side-jobs", action="store_true", help="re-plan and pull meanwhile")
    parser.add_argument(
        "--gunicorn",
        default="",
        help="extra gunicorn options after the manifest's, e.g. '--workers 4 --threads 2'",
    )
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    parser.add_argument(
        "--warm-rounds", type=int, default=8, help="rounds of the whole mix before the steps"
    )
    parser.add_argument("--all-steps", action="store_true", help="do not stop past the knee")
    parser.add_argument(
        "--only",
        action="append",
        choices=[name for name, _ in MIX],
        metavar="KIND",
        help="send only this kind of the mix (repeatable), e.g. 'api tenant quota detail'",
    )
    parser.add_argument("--side-jobs-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    tmp_dir = tempfile.TemporaryDirectory(prefix="bench-load-")
    tmp = Path(tmp_dir.name)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO", "HEADROOM_", "CELERY_", "DATABASE_")) and key != "DEBUG"
    }
    env.update(
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        DEBUG="false",
        SECRET_KEY=os.environ.get("BENCH_SECRET_KEY") or secrets.token_urlsafe(60),
        ALLOWED_HOSTS="127.0.0.1",
        DATABASE_URL=args.database_url,
        STATIC_ROOT=str(tmp / "static"),
        HEADROOM_VAR_DIR=str(tmp),
        LOG_LEVEL="WARNING",
    )
    for item in args.env:
        name, _, value = item.partition("=")
        env[name] = value
    os.environ.update(env)
    import django

    if args.side_jobs_worker is not None:
        django.setup()
        side_jobs(args.side_jobs_worker, args.seed)
        return 0

    if not args.reuse_database:
        create_database(args.database_url)
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    if not args.reuse_database:
        started = time.monotonic()
        prepare(args.seed)
        print(f"fleet loaded and planned in {time.monotonic() - started:.0f} s", file=sys.stderr)
    call_command("collectstatic", verbosity=0, interactive=False)
    fx = fixture()
    from django.db import connections

    connections.close_all()

    port = free_port()
    command = web_command(port, args.gunicorn.split())
    print("gunicorn:", " ".join(command[2:]), file=sys.stderr)
    access_log = tmp / "gunicorn.log"
    with access_log.open("wb") as log:
        web = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    side: subprocess.Popen[bytes] | None = None
    side_log = tmp / "side-jobs.jsonl"
    results: list[StepResult] = []
    try:
        wait_until_up(port, web)
        load = Load(f"http://127.0.0.1:{port}", fx, args.seed, args.only)
        asyncio.run(load.warm(rounds=args.warm_rounds))
        if args.side_jobs:
            side = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.bench_load",
                    "--database-url",
                    args.database_url,
                    "--seed",
                    str(args.seed),
                    "--side-jobs-worker",
                    str(side_log),
                ],
                cwd=REPO,
                env=env,
            )
            # The steps start once the first re-plan has finished: the side jobs are warm (the
            # solver loaded, the simulator serving) and run one after the other from then on.
            deadline = time.monotonic() + SIDE_START_S
            while not side_log.exists() or not side_log.read_text().strip():
                if side.poll() is not None:
                    raise RuntimeError(f"the side jobs exited with {side.returncode}")
                if time.monotonic() > deadline:
                    raise RuntimeError("the first re-plan of the side jobs did not finish")
                time.sleep(0.5)
        seen = 0
        for rate in args.rates:
            before = uptime_load()
            cpu_web, cpu_own = cpu_seconds(web.pid), time.process_time()
            samples, elapsed = asyncio.run(load.step(rate, args.step_s, args.arrivals))
            result = summarize(rate, samples, elapsed, before)
            answered = sum(s.status != 0 for s in samples)
            used_ms = (cpu_seconds(web.pid) - cpu_web) * 1000
            result.server_cpu_ms = used_ms / answered if answered else math.nan
            result.client_cpu_pct = (time.process_time() - cpu_own) * 100 / elapsed
            if args.side_jobs:
                result.side, seen = side_counts(side_log, seen)
            results.append(result)
            print(
                f"{rate} req/s: achieved {result.achieved_rps:.0f}, p50 {result.p50_ms:.1f} "
                f"p95 {result.p95_ms:.1f} p99 {result.p99_ms:.1f} ms, {result.errors} errors, "
                f"web CPU {result.server_cpu_ms:.1f} ms/request, load {before}, side {result.side}",
                file=sys.stderr,
            )
            print(kinds_table(result), file=sys.stderr)
            if not args.all_steps and (
                result.p99_ms > 10 * P99_LIMIT_MS or result.errors > 0.05 * result.scheduled
            ):
                break
    finally:
        if side is not None:
            stop(side, timeout_s=120)
        stop(web)
        tail = access_log.read_text(errors="replace").splitlines()
        errors = [line for line in tail if "Traceback" in line or "ERROR" in line]
        if errors:
            print("gunicorn log (errors):", *errors[:20], sep="\n", file=sys.stderr)
        tmp_dir.cleanup()

    best = highest_passing(results)
    print("gunicorn: " + " ".join(command[3:]))
    print()
    print(table(results, args.side_jobs))
    print()
    print(
        f"Highest rate with p99 < {P99_LIMIT_MS:.0f} ms and no errors: "
        f"{best if best is not None else 'none'} req/s (goal {GOAL_RPS})."
    )
    return 0 if best is not None and best >= GOAL_RPS else 1


if __name__ == "__main__":
    raise SystemExit(main())
