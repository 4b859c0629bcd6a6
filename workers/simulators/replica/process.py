"""The simulated replica as a subprocess (``replica_server_process``): its own interpreter keeps
its timing off the caller's."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from workers.simulators.replica.cli import READY_PREFIX
from workers.simulators.replica.config import ReplicaConfig


@contextlib.contextmanager
def replica_server_process(
    config: ReplicaConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout_s: float = 60.0,
) -> Iterator[str]:
    """Run ``python -m workers.simulators.replica`` as a subprocess; yields its base URL
    and terminates it on exit. Its own interpreter keeps its timing off the caller's."""
    root = Path(__file__).resolve().parents[3]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    args = [sys.executable, "-m", "workers.simulators.replica"]
    args += [f"--host={host}", f"--port={port}", *config.argv()]
    # Its log goes to a file: a pipe nobody reads would fill and stall the server.
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=root
        )
        try:
            url = _await_ready(proc, startup_timeout_s)
            if url is None:
                proc.kill()
                proc.wait()
                log.seek(0)
                raise RuntimeError(f"the replica server did not start: {log.read()[-2000:]}")
            yield url
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def _await_ready(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The base URL the server prints on its first line (None: it did not in time)."""
    found: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.startswith(READY_PREFIX):
            found.append(line[len(READY_PREFIX) :].strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    return found[0] if found else None
