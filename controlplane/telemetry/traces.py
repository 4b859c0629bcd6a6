"""Request traces: the busiest hour of an imported request log, kept for replay.

A request log's buckets feed profiles like any pull; its arrival times and token counts are
also kept (``RequestTrace``), one row per (tenant, model, region) and import, so that a plan
can be replayed against the real arrivals (``planner.placement.replay``) and the profile can
carry the burstiness a bucket hides (``planner.capacity.burstiness``).
"""

from __future__ import annotations

import hashlib
import io
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Protocol

import numpy as np

from controlplane.telemetry.models import RequestTrace
from planner.capacity import burstiness


class _Record(Protocol):
    @property
    def at(self) -> datetime: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def tenant(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def region(self) -> str: ...


def peak_bucket_rate(arrival_s: np.ndarray, width_s: float) -> float:
    """The busiest aligned ``width_s`` window's rate, as ``derive.peak_rate`` reads buckets."""
    index = np.floor(arrival_s / width_s).astype(np.int64)
    counts = np.bincount(index - index[0])
    return float(counts.max()) / width_s


def encode(arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        arrival_s=arrival_s.astype(np.float64),
        prompt_tokens=prompt.astype(np.int32),
        output_tokens=output.astype(np.int32),
    )
    return buffer.getvalue()


def decode(raw: bytes | memoryview) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with np.load(io.BytesIO(bytes(raw))) as data:
        return (
            np.asarray(data["arrival_s"], dtype=np.float64),
            np.asarray(data["prompt_tokens"], dtype=np.float64),
            np.asarray(data["output_tokens"], dtype=np.float64),
        )


def traces_store(*, records: Iterable[_Record], peak_s: int) -> list[RequestTrace]:
    """Keep the busiest hour of each (tenant, model, region) of ``records``; a trace already
    stored (same arrays) is not stored again. Returns the traces, new or found."""
    groups: dict[tuple[str, str, str], list[_Record]] = defaultdict(list)
    for record in records:
        groups[(record.tenant, record.model, record.region)].append(record)
    out: list[RequestTrace] = []
    for (tenant, model, region), rows in sorted(groups.items()):
        out.append(_store_one(tenant, model, region, rows, peak_s))
    return out


def _store_one(
    tenant: str, model: str, region: str, rows: Sequence[_Record], peak_s: int
) -> RequestTrace:
    stamps = np.array([r.at.timestamp() for r in rows], dtype=np.float64)
    order = np.argsort(stamps, kind="stable")
    stamps = stamps[order]
    prompt = np.array([rows[i].prompt_tokens for i in order], dtype=np.int64)
    output = np.array([rows[i].output_tokens for i in order], dtype=np.int64)
    if stamps.shape[0] >= 2:
        start, end = burstiness.busiest_window(stamps)
    else:
        start = end = float(stamps[0])
    keep = (stamps >= start) & (stamps <= end)
    arrival = stamps[keep] - start
    raw = encode(arrival, prompt[keep], output[keep])
    digest = hashlib.sha256(f"{tenant}\0{model}\0{region}\0".encode() + raw).hexdigest()
    found = RequestTrace.objects.filter(digest=digest).first()
    if found is not None:
        return found
    figures = burstiness.from_arrivals(arrival).as_dict() if arrival.shape[0] >= 2 else {}
    return RequestTrace.objects.create(
        tenant=tenant,
        model=model,
        region=region,
        start=datetime.fromtimestamp(start, tz=UTC),
        end=datetime.fromtimestamp(end, tz=UTC),
        requests=int(arrival.shape[0]),
        peak_requests_per_s=peak_bucket_rate(stamps[keep], float(peak_s)),
        burstiness=figures,
        digest=digest,
        arrays=raw,
    )


def trace_latest(
    *,
    tenant: str,
    model: str,
    region: str,
    start: datetime | None = None,
    end: datetime | None = None,
) -> RequestTrace | None:
    """The newest trace of this (tenant, model, region), overlapping [start, end) if given."""
    rows = RequestTrace.objects.filter(tenant=tenant, model=model, region=region)
    if end is not None:
        rows = rows.filter(start__lt=end)
    if start is not None:
        rows = rows.filter(end__gte=start)
    return rows.order_by("-start", "-pk").first()
