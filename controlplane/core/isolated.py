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

``ChildPool`` bounds such children: at most ``size`` of one task at a time in this process,
each started again while work is pending (a task that drains a queue of job rows, such as the
what-if solves, ``controlplane.plans.whatif_jobs``).
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


# The child's CPU niceness, set before it imports anything (``ChildPool(nice=...)``).
NICE_ENV = "HEADROOM_ISOLATED_NICE"


def _run_child(
    name: str,
    args: Sequence[Any],
    *,
    on_exit: Callable[[Sequence[Any], str], None] | None,
    time_limit_s: float,
    nice: int = 0,
) -> None:
    """Run task ``name`` in a child process and wait for it; a child that does not end
    cleanly is reported to ``on_exit`` with the reason."""
    env = os.environ.copy()
    if nice:
        env[NICE_ENV] = str(nice)
    try:
        done = subprocess.run(
            command(name, args),
            cwd=REPO,
            env=env,
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
        _run_child(name, args, on_exit=on_exit, time_limit_s=time_limit_s)
        connections.close_all()  # this thread's connections, not the request's

    thread = threading.Thread(target=watch, name=f"isolated:{name}", daemon=True)
    thread.start()
    return thread


class ChildPool:
    """At most ``size()`` children running task ``name`` at once in this process, for a task
    that drains a queue: each ``kick`` for which ``start()`` gives the child's arguments is
    followed by a child that starts after it, so work queued before the kick is seen by a
    child.

    ``start()`` decides whether a new child would find work, and returns its arguments, or
    None for no child (for a job queue: nothing queued, or every drainer's lease is held by a
    child that will take the next job itself), so a kick costs no process start when none is
    needed. A watcher thread runs children one after another while kicks are pending; a kick
    starts a new watcher only when fewer than ``size()`` are alive. The pending flag is taken
    under the lock before each child starts, so a kick that lands while a child is finishing
    starts the next one instead of being lost. ``nice``: the children's CPU niceness, from
    their first instruction (0: the parent's).
    """

    def __init__(
        self,
        name: str,
        *,
        start: Callable[[], Sequence[Any] | None],
        size: Callable[[], int],
        time_limit_s: Callable[[], float],
        nice: Callable[[], int] = lambda: 0,
        on_exit: Callable[[Sequence[Any], str], None] | None = None,
    ) -> None:
        self.name = name
        self.start = start
        self.size = size
        self.time_limit_s = time_limit_s
        self.nice = nice
        self.on_exit = on_exit
        self._lock = threading.Lock()
        self._pending = False
        self._watchers: set[threading.Thread] = set()

    def kick(self) -> None:
        with self._lock:
            self._pending = True
            if len(self._watchers) < max(1, self.size()):
                thread = threading.Thread(
                    target=self._watch, name=f"isolated-pool:{self.name}", daemon=True
                )
                self._watchers.add(thread)
                thread.start()

    @property
    def alive(self) -> int:
        with self._lock:
            return len(self._watchers)

    def _watch(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._pending:
                        self._watchers.discard(threading.current_thread())
                        return
                    self._pending = False
                args = self.start()
                if args is None:
                    continue
                _run_child(
                    self.name,
                    args,
                    on_exit=self.on_exit,
                    time_limit_s=self.time_limit_s(),
                    nice=self.nice(),
                )
        except Exception:
            log.exception("the pool of task %s failed to start a child", self.name)
        finally:
            with self._lock:
                self._watchers.discard(threading.current_thread())
            connections.close_all()


def main(argv: Sequence[str]) -> int:
    """The child: set Django up, run the task's body once, exit 0 (or non-zero on error)."""
    if len(argv) != 2:
        print("usage: python -m controlplane.core.isolated TASK_NAME ARGS_JSON", file=sys.stderr)
        return 2
    name, raw = argv
    nice = int(os.environ.pop(NICE_ENV, "0") or 0)
    if nice:
        os.nice(nice)  # before the imports: a child's start is background work too
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()
    # After setup: the apps register their tasks when they are ready.
    from controlplane.celery import app

    args = json.loads(raw)
    app.tasks[name].run(*args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
