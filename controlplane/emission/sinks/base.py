"""What every sink shares: the delivery it is given, the result it returns, and writing files
safely (names, per-region locks, atomic replacement)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


class Outcome(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    FAILED = "failed"


@dataclass(frozen=True)
class Delivery:
    """One outbox row as a sink sees it."""

    idempotency_key: str
    region: str
    payload: Mapping[str, Any]

    @property
    def plan_version(self) -> int:
        return int(self.payload["plan"]["version"])


@dataclass(frozen=True)
class DeliveryResult:
    outcome: Outcome
    status_code: int | None = None
    error: str = ""
    retry_after_s: float | None = None
    detail: str = ""


def canonical_json(document: Mapping[str, Any]) -> bytes:
    """The bytes sent and signed: sorted keys, no insignificant whitespace, UTF-8."""
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


_SAFE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def safe_name(text: str, max_length: int = 63) -> str:
    """``text`` as a DNS label / file stem: lower-case letters, digits and '-'.

    A name that had to change (other characters, or too long) gets an 8-hex digest of the
    original appended, so two different names never map to the same label.
    """
    if _SAFE.match(text) and len(text) <= max_length:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    stem = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    stem = stem[: max_length - len(digest) - 1].rstrip("-")
    return f"{stem}-{digest}" if stem else digest


@contextmanager
def region_lock(directory: Path, stem: str) -> Iterator[None]:
    """An exclusive lock on one region's output, across threads and processes on this host:
    the version check and the rename happen under it, so an older plan never replaces a newer
    one written at the same moment."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f".{stem}.lock", "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def write_atomically(path: Path, data: bytes) -> bool:
    """Replace ``path`` with ``data`` via a temporary file and a rename; False if unchanged.

    Readers see the old file or the new one, never a partial write: the temporary file is
    flushed to disk before ``os.replace``, and the folder after it, so a crash leaves one of
    the two whole.
    """
    if path.exists() and path.read_bytes() == data:
        return False
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return True


def header_version(path: Path, header: re.Pattern[bytes]) -> int | None:
    """The plan version a written file's first line names (``header``'s one group), or None
    if there is no readable file or no such line."""
    try:
        with open(path, "rb") as handle:
            match = header.match(handle.readline())
    except OSError:
        return None
    return int(match.group(1)) if match else None


def write_newest(
    *,
    directory: Path,
    delivery: Delivery,
    path: Path,
    data: bytes,
    written_version: Callable[[Path], int | None],
    after_write: Callable[[], DeliveryResult | None] | None = None,
    done: str = "",
) -> DeliveryResult:
    """Write one region's file unless it already holds a newer plan, under the region's lock.

    ``after_write`` runs under the lock once the file is written (a failure it returns is the
    delivery's); ``done`` is added to the detail of a delivery that wrote or kept the file.
    A write that fails on the file system (a full disk, a permission) may be fixed by an
    operator: it is retried.
    """
    try:
        with region_lock(directory, safe_name(delivery.region)):
            newer = written_version(path)
            if newer is not None and newer > delivery.plan_version:
                return DeliveryResult(
                    Outcome.DELIVERED,
                    detail=f"{path.name} already holds plan v{newer}; left unchanged",
                )
            changed = write_atomically(path, data)
            failure = after_write() if after_write is not None else None
            if failure is not None:
                return failure
    except OSError as exc:
        return DeliveryResult(Outcome.RETRY, error=f"cannot write {path}: {exc!r}")
    action = f"wrote {path.name}" if changed else f"{path.name} unchanged"
    return DeliveryResult(Outcome.DELIVERED, detail=action + done)
