"""Stored reports parsed once per process, bounded in bytes.

A stored report never changes (a new plan version or a new day is a new report), so a web
process keeps the parsed ones it read last instead of reading and parsing their rows again.
The memo is bounded by the bytes of the reports' JSON (``size_bytes``, the figure the storage
caps count), not by their number: a 2,400-row report weighs what it weighs. The least
recently read are evicted first; a report heavier than a quarter of the budget is not kept at
all (it is parsed for its request). Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class ByteMemo(Generic[T]):
    """Values with a weight in bytes, at most ``budget()`` bytes of them in all."""

    def __init__(self, budget: Callable[[], int]) -> None:
        self._budget = budget
        self._values: OrderedDict[Hashable, tuple[int, T]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        """The weight of what is kept now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._bytes = 0

    def get(self, key: Hashable, weight: int, compute: Callable[[], T]) -> tuple[T, bool]:
        """The value kept for ``key``, or ``compute()``, kept when it fits; and whether the
        returned value is kept (a kept value is shared by every caller: never change it)."""
        with self._lock:
            found = self._values.get(key)
            if found is not None:
                self._values.move_to_end(key)
                return found[1], True
        value = compute()
        budget = self._budget()
        if weight > budget // 4:
            return value, False
        with self._lock:
            if key in self._values:  # another thread kept it meanwhile
                self._values.move_to_end(key)
                return self._values[key][1], True
            self._values[key] = (weight, value)
            self._bytes += weight
            while self._bytes > budget:
                _, (dropped, _value) = self._values.popitem(last=False)
                self._bytes -= dropped
        return value, True
