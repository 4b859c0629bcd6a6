"""The embedded SQLite file's journal mode, set once per file and safely under contention.

``PRAGMA journal_mode=wal`` takes the file's exclusive lock, and SQLite answers "database is
locked" at once, without waiting out the busy timeout, when another connection holds any
lock while the mode changes. Several processes opening a fresh file together (web workers,
task threads and isolated task processes starting at one moment) then failed their first
connection. The mode is a property of the file and persists: each new connection reads it
(no lock needed) and changes it only when it differs, retrying a locked change until the
busy timeout runs out.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from django.conf import settings
from django.db import OperationalError

RETRY_EVERY_S = 0.01


def journal_mode(cursor: Any) -> str:
    cursor.execute("PRAGMA journal_mode")
    return str(cursor.fetchone()[0]).lower()


def set_journal_mode(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: make the file's journal mode the configured one."""
    wanted = getattr(settings, "SQLITE_JOURNAL_MODE", None)
    if connection.vendor != "sqlite" or not wanted:
        return
    raw = connection.connection
    cursor = raw.cursor()
    try:
        if journal_mode(cursor) == wanted:
            return
        timeout_s = float(connection.settings_dict.get("OPTIONS", {}).get("timeout", 5))
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                cursor.execute(f"PRAGMA journal_mode={wanted}")
                if str(cursor.fetchone()[0]).lower() == wanted:
                    return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise OperationalError(str(exc)) from exc
                if time.monotonic() >= deadline:
                    raise OperationalError(
                        f"could not set the SQLite journal mode to {wanted}: {exc}"
                    ) from exc
            else:
                # The mode did not change (an in-memory database cannot use "wal"): keep it.
                return
            time.sleep(RETRY_EVERY_S)
    finally:
        cursor.close()
