"""Helpers for the tests that start real processes: a free loopback port, waiting for a
service to answer, stopping a process, and the fleet simulator scraped by a real Prometheus.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")


def redis_up(host: str = "127.0.0.1", port: int = 6379) -> bool:
    """Whether something accepts connections on Redis' port."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_url(url: str, deadline_s: float, process: subprocess.Popen[bytes]) -> None:
    """Until ``url`` answers 200; fails early if ``process`` (its server) exits."""
    stop = time.monotonic() + deadline_s
    while time.monotonic() < stop:
        if process.poll() is not None:
            raise RuntimeError(f"the process serving {url} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up within {deadline_s} s")


def wait_for_scrapes(prom_url: str, deadline_s: float) -> None:
    """Until Prometheus holds two scrapes of the fleet: "ready" comes before the first
    scrape, and on a loaded machine the first scrapes can lag by seconds, which would leave
    a test's first buckets short of requests."""
    query = urllib.parse.urlencode({"query": "count_over_time(vllm:request_success_total[1m])"})
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            with urllib.request.urlopen(f"{prom_url}/api/v1/query?{query}", timeout=2) as response:
                result = json.loads(response.read())["data"]["result"]
            if result and min(float(r["value"][1]) for r in result) >= 2:
                return
        except (urllib.error.URLError, OSError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"Prometheus at {prom_url} did not scrape the fleet within {deadline_s} s")


def stop(process: subprocess.Popen[bytes], timeout_s: float = 15) -> None:
    """Terminate ``process``, and kill it if it does not end within ``timeout_s``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)


def start_fleetsim(
    *, port: int, scenario: Path, rate_scale: float, seed: int = 11
) -> subprocess.Popen[bytes]:
    """The fleet simulator serving ``/metrics`` for ``scenario`` on ``port``."""
    return subprocess.Popen(
        [sys.executable, "-m", "workers.simulators.fleet", "--port", str(port), "--seed", str(seed),
         "--scenario", str(scenario), "--rate-scale", str(rate_scale)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def start_prometheus(
    *,
    port: int,
    target_port: int | None = None,
    workdir: Path,
    targets: Sequence[tuple[int, Mapping[str, str]]] = (),
) -> subprocess.Popen[bytes]:
    """Prometheus on ``port`` scraping 127.0.0.1:``target_port`` every second (and each of
    ``targets``: a port with the target labels Prometheus adds to its series, as a scrape
    config's ``static_configs`` labels do), with its configuration and data in ``workdir``."""
    assert PROMETHEUS is not None, "no prometheus binary on PATH"
    groups = [(target_port, {})] if target_port is not None else []
    groups += [(p, dict(labels)) for p, labels in targets]
    static = "".join(
        f"      - targets: ['127.0.0.1:{p}']\n"
        + (
            "        labels: {" + ", ".join(f"{k}: '{v}'" for k, v in labels.items()) + "}\n"
            if labels
            else ""
        )
        for p, labels in groups
    )
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: fleetsim\n"
        "    scrape_interval: 1s\n"
        "    scrape_timeout: 900ms\n"
        "    static_configs:\n" + static
    )
    return subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'prometheus'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def manage(env: dict[str, str], *args: str) -> str:
    """Run ``manage.py args`` in a subprocess with ``env``; its standard output. Fails the
    test, with the command's output, if it exits non-zero."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout
