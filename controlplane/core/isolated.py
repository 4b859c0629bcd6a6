"""Tasks that run in a process of their own when there is no broker.

Without a broker (the embedded default) a task runs where it is sent: at the commit of the web
request that asked for it. For most tasks that is only slow; for a task that starts Ray it is
fatal, because Ray ends the whole process when it cannot reach its cluster ("Failed to connect
to GCS within 60 seconds"): one benchmark request would take the web server down with it.

A task declared ``isolated=True`` is therefore, in embedded mode, run by a background thread
in a child process (``python -m controlplane.core.isolated NAME ARGS``), which runs the task
body exactly as a worker would. The request answers at once; whatever becomes of the child,
the web process goes on. When the child ends without finishing (a crash, a signal, the time
limit), the task's ``isolated_exit(args, reason)`` records why, so the run is failed with a
reason rather than left running. With a broker, isolated tasks go to the workers like any.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import django
from django.db import connections

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
# How much of the child's error output an exit reason quotes.
STDERR_TAIL_CHARS = 600


def exit_reason(returncode: int, stderr: str) -> str:
    """Why a child process ended, in words: the signal or exit status, and its last words."""
    if returncode < 0:
        try:
            how = f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"was killed by signal {-returncode}"
    else:
        how = f"exited with status {returncode}"
    tail = stderr.strip()[-STDERR_TAIL_CHARS:]
    return f"the task's process {how}" + (f"; its last output: {tail}" if tail else "")


def command(name: str, args: Sequence[Any]) -> list[str]:
    return [sys.executable, "-m", "controlplane.core.isolated", name, json.dumps(list(args))]


def run_in_child(
    name: str,
    args: Sequence[Any],
    *,
    on_exit: Callable[[Sequence[Any], str], None] | None,
    time_limit_s: float,
) -> threading.Thread:
    """Start a thread that runs task ``name`` in a child process and waits for it; a child
    that does not end cleanly is reported to ``on_exit`` with the reason."""

    def watch() -> None:
        try:
            done = subprocess.run(
                command(name, args),
                cwd=REPO,
                env=os.environ.copy(),
                capture_output=True,
                text=True,
                timeout=time_limit_s,
                check=False,
            )
            reason = None if done.returncode == 0 else exit_reason(done.returncode, done.stderr)
        except subprocess.TimeoutExpired:
            reason = f"the task's process ran past its time limit of {time_limit_s:g} s"
        except OSError as exc:
            reason = f"the task's process could not start: {exc}"
        if reason is not None:
            log.error("isolated task %s%s failed: %s", name, tuple(args), reason)
            if on_exit is not None:
                try:
                    on_exit(args, reason)
                except Exception:
                    log.exception("recording the end of isolated task %s failed", name)
        connections.close_all()  # this thread's connections, not the request's

    thread = threading.Thread(target=watch, name=f"isolated:{name}", daemon=True)
    thread.start()
    return thread


def main(argv: Sequence[str]) -> int:
    """The child: set Django up, run the task's body once, exit 0 (or non-zero on error)."""
    if len(argv) != 2:
        print("usage: python -m controlplane.core.isolated TASK_NAME ARGS_JSON", file=sys.stderr)
        return 2
    name, raw = argv
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()
    # After setup: the apps register their tasks when they are ready.
    from controlplane.celery import app

    args = json.loads(raw)
    app.tasks[name].run(*args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
