"""A per-process memo of values derived from stored rows that never change once written.

A stored plan's documents (problem, solution, binding) and a stored finance report's rows are
written once and never updated: a new plan version or a new snapshot is a new row. What a
request derives from them (the pool loads of a plan, a report's rows) is therefore the same on
every request, and a web process keeps the last few in memory instead of reading and parsing
the documents again.

The key names the row by its primary key and its creation time, so a row deleted and another
written under a reused key (SQLite reuses the largest rowid after a rollback) is a different
entry. Entries are evicted least recently used first; the memo holds ``size`` entries per
``RowMemo``. Thread-safe: two threads that miss at once both compute, and the second stores
the same value again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Generic, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Recent(Generic[K, V]):
    """The last ``size`` values stored, least recently used evicted first; thread-safe."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size: must be at least 1")
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def _find(self, key: K) -> V | None:
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def _keep(self, key: K, value: V) -> None:
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.size:
                self._values.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()

    def __len__(self) -> int:
        return len(self._values)


class RowMemo(_Recent[Hashable, tuple[T]]):
    """Values derived from immutable rows, keyed by ``(pk, created_at, *extra)``."""

    def get(
        self, pk: object, created_at: datetime | None, compute: Callable[[], T], *extra: Hashable
    ) -> T:
        """The value stored for the row, or ``compute()`` stored and returned. A row without a
        primary key or creation time (not saved yet) is computed every time."""
        if pk is None or created_at is None:
            return compute()
        key = (pk, created_at.isoformat(), *extra)
        found = self._find(key)
        if found is not None:
            return found[0]
        value = compute()
        self._keep(key, (value,))
        return value


class IdentityMemo(_Recent[Hashable, tuple[object, T]]):
    """Values derived from objects that are never changed once made (a stored report's rows as
    a shared ``RowMemo`` value), keyed by the object's identity and a variant.

    The entry keeps the object itself, so its identity cannot be reused by another object
    while the entry lives; a lookup checks that the entry's object is the one asked about.
    """

    def get(self, source: object, variant: Hashable, compute: Callable[[], T]) -> T:
        """The value stored for ``source`` and ``variant``, or ``compute()`` stored and
        returned."""
        key = (id(source), variant)
        found = self._find(key)
        if found is not None and found[0] is source:
            return found[1]
        value = compute()
        self._keep(key, (source, value))
        return value
