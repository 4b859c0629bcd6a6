"""The per-process memo of values derived from rows that never change once written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.core.memo import IdentityMemo, RowMemo

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


class Report:
    """A stand-in for an object that is never changed once made."""


def test_an_object_is_rendered_once_per_variant() -> None:
    memo: IdentityMemo[list[int]] = IdentityMemo(size=4)
    source, compute = Report(), Counter()
    json = memo.get(source, "json", compute)
    assert memo.get(source, "json", compute) is json
    assert memo.get(source, "csv", compute) == [2]
    assert compute.calls == 2


def test_another_object_is_another_entry_even_if_its_identity_is_reused() -> None:
    memo: IdentityMemo[list[int]] = IdentityMemo(size=4)
    compute = Counter()
    memo.get(Report(), "json", compute)
    # The entry keeps its object alive, so no new object can take its identity; and a lookup
    # checks the object itself, not just its id.
    others = [Report() for _ in range(3)]
    assert [memo.get(o, "json", compute) for o in others] == [[2], [3], [4]]


def test_the_least_recently_used_object_goes_first() -> None:
    memo: IdentityMemo[list[int]] = IdentityMemo(size=2)
    compute = Counter()
    a, b, c = Report(), Report(), Report()
    memo.get(a, "json", compute)
    memo.get(b, "json", compute)
    memo.get(a, "json", compute)  # a is now the most recently used
    memo.get(c, "json", compute)  # b goes
    assert len(memo) == 2
    assert memo.get(a, "json", compute) == [1]
    assert memo.get(b, "json", compute) == [4]
    with pytest.raises(ValueError, match="size"):
        IdentityMemo(size=0)
