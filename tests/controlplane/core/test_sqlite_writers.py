"""Processes sharing the embedded SQLite file write without "database is locked".

The embedded default runs the web workers, in-process task threads and isolated task
processes on one SQLite file. Two processes here each run many transactions that read a row
and then write it, the pattern of a job updating its run row, against one file with the
project's own settings. SQLite cannot turn a reader into a writer while another connection
writes: with transactions that begin deferred, one of two such transactions fails at once.
With the settings' immediate transactions and busy timeout each waits its turn, and every
increment lands. The file starts in the rollback journal, so both processes' first
connections also race to switch it to write-ahead logging, a change SQLite refuses at once
(without the busy timeout) while another connection holds a lock; neither may fail on it.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

REPO = Path(__file__).resolve().parents[3]
ROUNDS = 300
START_AFTER_S = 4.0

# Both writers start at one moment (after Django is set up in each), and each holds its read
# for a millisecond before writing, so that their transactions overlap.
WRITER = f"""
import os, time
import django
django.setup()
from django.db import connection, transaction
time.sleep(max(0.0, float(os.environ["START_AT"]) - time.time()))
for _ in range({ROUNDS}):
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT value FROM counter WHERE id = 1")
            (value,) = cursor.fetchone()
            time.sleep(0.001)
            cursor.execute("UPDATE counter SET value = %s WHERE id = 1", [value + 1])
print("done")
"""


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the embedded SQLite file only")
def test_two_processes_reading_then_writing_one_row_never_fail(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
        db.execute("INSERT INTO counter VALUES (1, 0)")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "HEADROOM_"))},
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DATABASE_URL": f"sqlite:///{path}",
        "HEADROOM_VAR_DIR": str(tmp_path),
        "START_AT": str(time.time() + START_AFTER_S),
    }
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outcomes = [w.communicate(timeout=300) for w in writers]
    for writer, (out, err) in zip(writers, outcomes, strict=True):
        assert writer.returncode == 0 and out.strip() == "done", err[-2000:]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM counter").fetchone() == (2 * ROUNDS,)


# A writer holds the write lock (an open immediate transaction with an uncommitted update)
# while a second process, with the project's settings, reads the row.
READER = """
import time
import django
django.setup()
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("PRAGMA journal_mode")
    mode = cursor.fetchone()[0]
    cursor.execute("PRAGMA synchronous")
    synchronous = cursor.fetchone()[0]
    started = time.monotonic()
    cursor.execute("SELECT value FROM counter WHERE id = 1")
    (value,) = cursor.fetchone()
print(mode, synchronous, value, round(time.monotonic() - started, 3))
"""


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the embedded SQLite file only")
@pytest.mark.parametrize(
    ("journal", "expected"),
    [("", ("wal", "1", "0")), ("delete", None)],
    ids=["wal-default", "rollback-journal"],
)
def test_a_read_does_not_wait_for_a_writer_in_the_default_journal_mode(
    tmp_path: Path, journal: str, expected: tuple[str, str, str] | None
) -> None:
    """In write-ahead-log mode (the default) a read sees the last committed value at once
    while another connection holds the write lock; in the rollback journal a writer that is
    committing (an exclusive lock, held for the disk flush) makes the same read wait (here
    until the busy timeout, 1 s, runs out)."""
    path = tmp_path / "shared.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
        db.execute("INSERT INTO counter VALUES (1, 0)")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "HEADROOM_"))},
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DATABASE_URL": f"sqlite:///{path}",
        "HEADROOM_VAR_DIR": str(tmp_path),
        "HEADROOM_SQLITE_BUSY_TIMEOUT_S": "1",
    }
    if journal:
        env["HEADROOM_SQLITE_JOURNAL_MODE"] = journal

    def read() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", READER],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    # The first connection with the project's settings sets the file's journal mode.
    first = read()
    assert first.returncode == 0, first.stderr[-2000:]
    writer = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        writer.execute("BEGIN EXCLUSIVE" if journal else "BEGIN IMMEDIATE")
        writer.execute("UPDATE counter SET value = 7 WHERE id = 1")
        done = read()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    if expected is None:
        assert done.returncode != 0 and "database is locked" in done.stderr
    else:
        assert done.returncode == 0, done.stderr[-2000:]
        assert tuple(done.stdout.split()[:3]) == expected
