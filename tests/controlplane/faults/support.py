"""Helpers for the fault tests: a broker nobody listens on, and private PostgreSQL and Redis
servers that a test may stop and start (the shared ones are never touched)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from controlplane.celery import app

if TYPE_CHECKING:
    from controlplane.fleet.models import ReplicaShape

PG_BIN = Path("/usr/lib/postgresql/15/bin")
REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def broker_at(url: str) -> Iterator[None]:
    """The Celery app sends to ``url`` (not in-process) inside the block."""
    saved = (app.conf.task_always_eager, app.conf.broker_url)
    pools = (app._pool, app.amqp._producer_pool)
    # New pools for this URL; the app's own are put back untouched afterwards (kombu keeps a
    # registry of producer pools by connection, so closing them would break later sends).
    app._pool = app.amqp._producer_pool = None
    app.conf.task_always_eager = False
    app.conf.broker_url = url
    try:
        yield
    finally:
        if app._pool is not None:
            app._pool.force_close_all()
        app._pool, app.amqp._producer_pool = pools
        app.conf.task_always_eager, app.conf.broker_url = saved


@contextmanager
def closed_port_broker() -> Iterator[None]:
    """A Redis broker URL on a loopback port nothing listens on: every send is refused."""
    with broker_at(f"redis://127.0.0.1:{free_port()}/0"):
        yield


def make_shape() -> ReplicaShape:
    from tests.controlplane.test_benchmarks_helpers import make_bench_fleet

    return make_bench_fleet().shape


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(check: object, deadline_s: float, what: str) -> None:
    assert callable(check)
    stop = time.monotonic() + deadline_s
    while time.monotonic() < stop:
        if check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} within {deadline_s} s")


class PrivatePostgres:
    """A PostgreSQL cluster of its own in a temporary folder, on a free port, run as the
    ``postgres`` user when this process is root (initdb refuses root)."""

    ROOT_ENV = "HEADROOM_FAULTS_PG_ROOT"
    PORT_ENV = "HEADROOM_FAULTS_PG_PORT"

    def __init__(self, root: Path | None = None, port: int | None = None) -> None:
        """A new cluster's folder and port; or, given both, the cluster already there (the
        fault driver restarts the test's cluster with it)."""
        self.root = root or Path(tempfile.mkdtemp(prefix="headroom-faults-pg-"))
        self.data = self.root / "data"
        self.port = port or free_port()
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user is not None and root is None:
            pw = pwd.getpwnam(self._user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)

    @classmethod
    def from_env(cls) -> PrivatePostgres:
        return cls(Path(os.environ[cls.ROOT_ENV]), int(os.environ[cls.PORT_ENV]))

    def env(self) -> dict[str, str]:
        return {self.ROOT_ENV: str(self.root), self.PORT_ENV: str(self.port)}

    @staticmethod
    def available() -> bool:
        if not (PG_BIN / "initdb").exists():
            return False
        if os.geteuid() != 0:
            return True
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return False
        return True

    def _run(self, *args: str) -> None:
        command = [str(PG_BIN / args[0]), *args[1:]]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}\n{done.stderr}")

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/headroom_faults"

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        self.start()
        self._run(
            "createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
            "headroom_faults",
        )  # fmt: skip

    def start(self) -> None:
        # Durability is not under test: no fsync, so the migrations run fast.
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w",
            "start",
        )  # fmt: skip

    def stop(self) -> None:
        """Fast shutdown: open connections are ended, as a restart ends them."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """A redis-server of its own on a free port that keeps nothing on disk, so a restart
    loses every queued message, as a Redis without persistence does."""

    def __init__(self) -> None:
        assert REDIS_SERVER is not None
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tempfile.gettempdir()],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(lambda: port_open(self.port), 10, "redis-server did not answer")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()
