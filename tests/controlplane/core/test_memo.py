"""The per-process memo of values derived from rows that never change once written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.core.memo import RowMemo

WRITTEN = datetime(2026, 3, 6, 9, 30, tzinfo=UTC)


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> list[int]:
        self.calls += 1
        return [self.calls]


def test_a_row_is_computed_once_and_then_read_from_memory() -> None:
    memo: RowMemo[list[int]] = RowMemo(size=4)
    compute = Counter()
    first = memo.get(7, WRITTEN, compute)
    assert memo.get(7, WRITTEN, compute) is first
    assert compute.calls == 1


def test_a_reused_key_with_another_creation_time_is_another_row() -> None:
    memo: RowMemo[list[int]] = RowMemo(size=4)
    compute = Counter()
    old = memo.get(7, WRITTEN, compute)
    new = memo.get(7, WRITTEN + timedelta(microseconds=1), compute)
    assert (old, new) == ([1], [2])


def test_extra_key_parts_keep_values_of_one_row_apart() -> None:
    memo: RowMemo[str] = RowMemo(size=4)
    assert memo.get(1, WRITTEN, lambda: "pools", "pools") == "pools"
    assert memo.get(1, WRITTEN, lambda: "routing", "routing") == "routing"
    assert memo.get(1, WRITTEN, lambda: "other", "pools") == "pools"


def test_an_unsaved_row_is_computed_every_time() -> None:
    memo: RowMemo[list[int]] = RowMemo(size=4)
    compute = Counter()
    memo.get(None, WRITTEN, compute)
    memo.get(3, None, compute)
    memo.get(None, None, compute)
    assert compute.calls == 3 and len(memo) == 0


def test_the_least_recently_used_row_goes_first() -> None:
    memo: RowMemo[int] = RowMemo(size=2)
    memo.get(1, WRITTEN, lambda: 1)
    memo.get(2, WRITTEN, lambda: 2)
    memo.get(1, WRITTEN, lambda: -1)  # read: row 1 is now the most recent
    memo.get(3, WRITTEN, lambda: 3)  # row 2 goes
    assert len(memo) == 2
    assert memo.get(1, WRITTEN, lambda: -1) == 1
    assert memo.get(2, WRITTEN, lambda: 20) == 20


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="size"):
        RowMemo(size=0)
