"""JSON-file sink: one file per region, ``<directory>/<region>.json``, replaced atomically.

Idempotent: writing the same document again changes nothing (not even the file's time), and a
file already holding a *newer* plan version is left alone, so a late retry of an old plan
cannot roll a region back. A region whose name is not a plain file stem is written under a
sanitised name (see ``safe_name``); the document itself always names the region.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from controlplane.emission.sinks.base import (
    Delivery,
    DeliveryResult,
    Outcome,
    safe_name,
    write_newest,
)

if TYPE_CHECKING:
    from controlplane.emission.models import AllocationSink


def region_path(directory: Path, region: str) -> Path:
    return directory / f"{safe_name(region)}.json"


def written_version(path: Path) -> int | None:
    """The plan version of the document at ``path``, or None if there is none (readable)."""
    try:
        document = json.loads(path.read_bytes())
        return int(document["plan"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def deliver(sink: AllocationSink, delivery: Delivery) -> DeliveryResult:
    try:
        directory = sink.resolved_directory()
    except ValueError as exc:
        return DeliveryResult(Outcome.FAILED, error=str(exc))
    path = region_path(directory, delivery.region)
    # Pretty-printed with sorted keys: the files are read by people and diffed by tools.
    try:
        data = json.dumps(
            delivery.payload, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False
        )
    except ValueError as exc:
        return DeliveryResult(Outcome.FAILED, error=f"the document is not valid JSON: {exc}")
    return write_newest(
        directory=directory,
        delivery=delivery,
        path=path,
        data=(data + "\n").encode("utf-8"),
        written_version=written_version,
    )
