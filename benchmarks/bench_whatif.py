"""What-if benchmark: 20 viewers ask for a what-if preview at once while a client reads a
tenant quota's detail at 20 req/s; the reader's latency is what is measured.

The script prepares its own database (a new SQLite file, the embedded default, or with
``--database-url`` a PostgreSQL database it drops and creates again) and runs without a broker,
so the previews are solved by the web server's bounded pool of child processes; it loads the shipped example
(``docs/scenarios/support-assistant.yaml``), gives each tenant a quota, re-plans once (the plan
becomes active), creates one ``viewer`` account per previewer and a reader with an API token,
collects the static files and starts gunicorn with the web container's own command
(``deploy/kubernetes/web.yaml``: 3 sync workers) and the production settings, as
``bench_load`` does.

Then, in one run:

1. warm-up: every worker serves the quota detail, and one preview is solved (the solver's
   first import happens there, not in the measurement);
2. alone: the reader at 20 req/s for ``--alone-s`` seconds;
3. with previews: the reader at 20 req/s; one second in, ``--previewers`` viewers each send one
   preview at the same moment and follow it until it is done (polling every second, as the
   page does), and the reader goes on until every preview has finished and one more second.

The reader is open-loop (evenly spaced sends, latency from the scheduled send time to the end
of the body, so a stalled server shows as latency). ``--page`` sends the previews through the
page (``POST /what-if/``, then its progress poll) instead of the API
(``POST /api/plans/what-ifs/``); with ``--server-repo`` pointing at an older checkout it
measures that checkout's server (where a page preview is solved in the request).

Run from the repository root (on two cores, the load generator shares them with the server):

    .venv/bin/python -m benchmarks.bench_whatif
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_load import (
    REPO,
    create_database,
    free_port,
    percentile,
    stop,
    wait_until_up,
    web_command,
)

SCENARIO = REPO / "docs" / "scenarios" / "support-assistant.yaml"
READ_RPS = 20
P99_LIMIT_MS = 200.0
PREVIEWERS = 20
POLL_S = 1.0
PREVIEW_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 30.0
CSRF = "b" * 32  # an unmasked CSRF secret: the form sends the cookie's value back
TENANT = "nordlicht-versicherung"
# The window after the previews are sent in which their submits are answered.
BURST_S = 2.0


@dataclass(frozen=True)
class Fixture:
    reader_token: str
    quota_ids: list[int]
    viewer_tokens: list[str]
    viewer_sessions: list[str]
    warm_token: str


def prepare(previewers: int) -> Fixture:
    from django.conf import settings
    from django.contrib.auth.models import Group, User
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from controlplane.core.roles import POLICY_ADMIN, VIEWER
    from controlplane.plans.models import Plan, ReplanRun
    from controlplane.plans.services import replan_execute, replan_request
    from controlplane.policies.models import Tenant, TenantQuota
    from controlplane.scenarios.services import scenario_load

    scenario_load(path=SCENARIO)
    for tenant in Tenant.objects.all():
        TenantQuota.objects.get_or_create(
            tenant=tenant,
            defaults=dict(
                budget_rate_replica_s_per_s=10.0,
                budget_burst_replica_s=100.0,
                tokens_per_minute_limit=600_000,
                tokens_per_minute_burst=900_000,
            ),
        )
    run = replan_request(trigger=Plan.Trigger.COMMAND, enqueue=False)
    done = replan_execute(run_id=run.pk)
    assert done is not None and done.status == ReplanRun.Status.SUCCEEDED, done

    def user(name: str, role: str) -> User:
        account, _ = User.objects.get_or_create(username=name)
        account.groups.add(Group.objects.get_or_create(name=role)[0])
        return account

    def session(account: User) -> str:
        client = Client()
        client.force_login(account)
        return str(client.cookies[settings.SESSION_COOKIE_NAME].value)

    viewers = [user(f"bench-viewer-{n}", VIEWER) for n in range(previewers)]
    return Fixture(
        reader_token=Token.objects.get_or_create(user=user("bench-reader", VIEWER))[0].key,
        quota_ids=list(TenantQuota.objects.order_by("id").values_list("id", flat=True)),
        viewer_tokens=[Token.objects.get_or_create(user=v)[0].key for v in viewers],
        viewer_sessions=[session(v) for v in viewers],
        warm_token=Token.objects.get_or_create(user=user("bench-warm", POLICY_ADMIN))[0].key,
    )


COMMON = {"Host": "127.0.0.1", "X-Forwarded-Proto": "https"}


@dataclass
class Preview:
    post_ms: float = 0.0
    post_status: int = 0
    done_s: float = 0.0
    status: str = ""
    polls: int = 0


class Bench:
    def __init__(self, base: str, fx: Fixture, page: bool) -> None:
        self.base = base
        self.fx = fx
        self.page = page

    async def read(self, session: Any, scheduled: float, n: int) -> tuple[float, int, float]:
        import aiohttp

        quota = self.fx.quota_ids[n % len(self.fx.quota_ids)]
        headers = {**COMMON, "Authorization": f"Token {self.fx.reader_token}"}
        loop = asyncio.get_running_loop()
        status = 0
        try:
            async with session.get(
                f"{self.base}/api/tenant-quotas/{quota}/", headers=headers
            ) as response:
                await response.read()
                status = response.status
        except (TimeoutError, aiohttp.ClientError, OSError):
            status = 0
        return (loop.time() - scheduled) * 1000, status, scheduled

    async def reader(self, session: Any, stop_at: asyncio.Event) -> list[tuple[float, int, float]]:
        loop = asyncio.get_running_loop()
        at = loop.time() + 0.05
        tasks = []
        n = 0
        while not stop_at.is_set():
            at += 1.0 / READ_RPS
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self.read(session, at, n)))
            n += 1
        return list(await asyncio.gather(*tasks))

    async def preview_api(self, session: Any, token: str, go: asyncio.Event) -> Preview:
        headers = {**COMMON, "Authorization": f"Token {token}"}
        body = {"tenant": TENANT, "traffic_factor": 60}
        await go.wait()
        loop = asyncio.get_running_loop()
        start = loop.time()
        out = Preview()
        async with session.post(
            f"{self.base}/api/plans/what-ifs/", json=body, headers=headers
        ) as response:
            answer = await response.json()
            out.post_status = response.status
        out.post_ms = (loop.time() - start) * 1000
        if out.post_status != 202:
            out.status = f"refused {out.post_status}"
            return out
        url = f"{self.base}/api/plans/what-ifs/{answer['id']}/"
        while answer["status"] in ("queued", "running"):
            if loop.time() - start > PREVIEW_TIMEOUT_S:
                break
            await asyncio.sleep(POLL_S)
            async with session.get(url, headers=headers) as response:
                answer = await response.json()
            out.polls += 1
        out.status = answer["status"]
        out.done_s = loop.time() - start
        return out

    async def preview_page(self, session: Any, sessionid: str, go: asyncio.Event) -> Preview:
        headers = {
            **COMMON,
            "Cookie": f"sessionid={sessionid}; csrftoken={CSRF}",
            "Referer": "https://127.0.0.1/what-if/",
        }
        form = {
            "csrfmiddlewaretoken": CSRF,
            "tenant": TENANT,
            "traffic_factor": "60",
            "prompt_tokens_delta": "0",
            "do": "preview",
        }
        await go.wait()
        loop = asyncio.get_running_loop()
        start = loop.time()
        out = Preview()
        async with session.post(
            f"{self.base}/what-if/", data=form, headers=headers, allow_redirects=False
        ) as response:
            text = await response.text()
            out.post_status = response.status
            location = response.headers.get("Location", "")
        out.post_ms = (loop.time() - start) * 1000
        if out.post_status == 200:  # solved in the request (a server without jobs)
            out.status = "succeeded" if "Preview for" in text else "failed"
            out.done_s = loop.time() - start
            return out
        found = re.search(r"job=(\d+)", location)
        if out.post_status != 303 or found is None:
            out.status = f"refused {out.post_status}"
            return out
        url = f"{self.base}/what-if/jobs/{found.group(1)}/"
        state: dict[str, Any] = {"done": False, "status": "queued"}
        while not state["done"] and loop.time() - start < PREVIEW_TIMEOUT_S:
            await asyncio.sleep(POLL_S)
            async with session.get(url, headers=headers) as response:
                state = await response.json()
            out.polls += 1
        async with session.get(f"{self.base}{location}", headers=headers) as response:
            await response.read()
        out.status = str(state["status"])
        out.done_s = loop.time() - start
        return out

    async def warm(self) -> None:
        import aiohttp

        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
            loop = asyncio.get_running_loop()
            for n in range(12):
                _, status, _ = await self.read(session, loop.time(), n)
                if status != 200:
                    raise RuntimeError(f"warm-up: quota detail answered {status}")
            if not self.page:
                go = asyncio.Event()
                go.set()
                done = await self.preview_api(session, self.fx.warm_token, go)
                if done.status != "succeeded":
                    raise RuntimeError(f"warm-up preview: {done}")

    async def alone(self, seconds: float) -> list[tuple[float, int, float]]:
        import aiohttp

        stop_at = asyncio.Event()
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
            cookie_jar=aiohttp.DummyCookieJar(),
        ) as session:
            reader = asyncio.create_task(self.reader(session, stop_at))
            await asyncio.sleep(seconds)
            stop_at.set()
            return await reader

    async def with_previews(
        self, previewers: int
    ) -> tuple[list[tuple[float, int, float]], list[Any], float]:
        import aiohttp

        stop_at = asyncio.Event()
        go = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(
            timeout=timeout, connector=connector, cookie_jar=aiohttp.DummyCookieJar()
        ) as session:
            reader = asyncio.create_task(self.reader(session, stop_at))
            if self.page:
                asks = [self.preview_page(session, s, go) for s in self.fx.viewer_sessions]
            else:
                asks = [self.preview_api(session, t, go) for t in self.fx.viewer_tokens]
            previews = asyncio.gather(*asks[:previewers], return_exceptions=True)
            await asyncio.sleep(1.0)
            sent = asyncio.get_running_loop().time()
            go.set()
            results = await previews
            await asyncio.sleep(1.0)
            stop_at.set()
            return await reader, list(results), sent


def reader_line(name: str, samples: Sequence[tuple[float, int, float]]) -> str:
    latencies = [ms for ms, _, _ in samples]
    errors = sum(status != 200 for _, status, _ in samples)
    return (
        f"| {name} | {len(samples)} | {percentile(latencies, 0.5):.1f} | "
        f"{percentile(latencies, 0.95):.1f} | {percentile(latencies, 0.99):.1f} | "
        f"{max(latencies):.1f} | {errors} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--previewers", type=int, default=PREVIEWERS)
    parser.add_argument("--alone-s", type=float, default=15.0)
    parser.add_argument("--page", action="store_true", help="preview through the page")
    parser.add_argument(
        "--server-repo", type=Path, default=REPO, help="the checkout whose server runs"
    )
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    parser.add_argument(
        "--database-url", default="", help="PostgreSQL (dropped and created); default SQLite"
    )
    parser.add_argument(
        "--gunicorn", default="", help="extra gunicorn options after the manifest's"
    )
    parser.add_argument(
        "--keep-log", type=Path, help="copy gunicorn's log (access log included) here"
    )
    args = parser.parse_args(argv)

    tmp_dir = tempfile.TemporaryDirectory(prefix="bench-whatif-")
    tmp = Path(tmp_dir.name)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO", "HEADROOM_", "CELERY_", "DATABASE_")) and key != "DEBUG"
    }
    env.update(
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="127.0.0.1",
        DATABASE_URL=args.database_url or f"sqlite:///{tmp / 'headroom.sqlite3'}",
        STATIC_ROOT=str(tmp / "static"),
        HEADROOM_VAR_DIR=str(tmp),
        HEADROOM_FINANCE_WARM="false",
        LOG_LEVEL="WARNING",
    )
    for item in args.env:
        name, _, value = item.partition("=")
        env[name] = value
    os.environ.update(env)
    import django

    if args.database_url:
        create_database(args.database_url)
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    started = time.monotonic()
    fx = prepare(args.previewers)
    print(f"example loaded and planned in {time.monotonic() - started:.0f} s", file=sys.stderr)
    call_command("collectstatic", verbosity=0, interactive=False)
    from django.db import connections

    connections.close_all()

    port = free_port()
    command = web_command(port, shlex.split(args.gunicorn))
    log_path = tmp / "gunicorn.log"
    with log_path.open("wb") as log:
        web = subprocess.Popen(
            command, cwd=args.server_repo, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    load_before = Path("/proc/loadavg").read_text().split()[0]
    try:
        wait_until_up(port, web)
        bench = Bench(f"http://127.0.0.1:{port}", fx, args.page)
        asyncio.run(bench.warm())
        alone = asyncio.run(bench.alone(args.alone_s))
        loaded, previews, sent = asyncio.run(bench.with_previews(args.previewers))
    finally:
        stop(web)
        if args.keep_log is not None:
            args.keep_log.write_bytes(log_path.read_bytes())
        lines = log_path.read_text(errors="replace").splitlines()
        errors = [line for line in lines if "Error" in line or "ERROR" in line or "File " in line]
        if errors:
            print("gunicorn log (errors):", *errors[:20], sep="\n", file=sys.stderr)

    failed = [p for p in previews if isinstance(p, BaseException)]
    done = [p for p in previews if isinstance(p, Preview)]
    solve_s: list[float] = []
    if not args.page or args.server_repo == REPO:
        from controlplane.plans.models import WhatIfJob

        solve_s = [
            job.duration_s
            for job in WhatIfJob.objects.filter(requested_by__username__startswith="bench-viewer")
            if job.duration_s is not None
        ]
    tmp_dir.cleanup()
    statuses: dict[str, int] = {}
    for p in done:
        statuses[p.status] = statuses.get(p.status, 0) + 1
    p99 = percentile([ms for ms, _, _ in loaded], 0.99)
    print(
        f"\n{os.cpu_count()} CPUs (load average before: {load_before}); "
        f"{'PostgreSQL' if args.database_url else 'SQLite'}; {args.previewers} "
        f"previews through {'the page' if args.page else 'the API'}; reader at {READ_RPS} req/s\n"
    )
    print("| reader | requests | p50 ms | p95 ms | p99 ms | max ms | errors |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(reader_line("alone", alone))
    print(reader_line(f"with {args.previewers} previews", loaded))
    burst = [s for s in loaded if sent <= s[2] < sent + BURST_S]
    after = [s for s in loaded if s[2] >= sent + BURST_S]
    if burst:
        print(reader_line(f"… the {BURST_S:g} s after they are sent", burst))
    if after:
        print(reader_line("… while they are solved", after))
    if done:
        print(
            f"\npreviews: {statuses}; submit p50 {statistics.median(p.post_ms for p in done):.0f} "
            f"ms, max {max(p.post_ms for p in done):.0f} ms; done after p50 "
            f"{statistics.median(p.done_s for p in done):.1f} s, max "
            f"{max(p.done_s for p in done):.1f} s"
            + (
                f"; each solved in p50 {statistics.median(solve_s):.2f} s, max {max(solve_s):.2f} s"
                if solve_s
                else ""
            )
        )
    if failed:
        print(f"previews that raised: {failed[:3]}")
    verdict = "passes" if p99 < P99_LIMIT_MS else "fails"
    print(f"\nreader p99 with previews {p99:.1f} ms: {verdict} the {P99_LIMIT_MS:g} ms goal")
    return 0 if p99 < P99_LIMIT_MS and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
