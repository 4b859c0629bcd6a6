"""Request-log import: per-request records (a gateway's log, a production trace) stored as the
same samples a Prometheus pull stores, so that profiles, drift, the forecast and re-plans read
them like any other telemetry.

Formats (``FORMATS``), one request per record:

- ``azure``: the Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``;
  Azure/AzurePublicDataset ``AzureLLMInferenceDataset2023.md``): timestamps in UTC with up to
  seven fractional digits. No tenant, model or region columns: the caller names them.
- ``csv``: a header row with ``timestamp``, ``prompt_tokens``, ``output_tokens`` and, optional,
  ``cached_tokens``, ``tenant``, ``model``, ``region``.
- ``jsonl``: one JSON object per line with the same keys.

A timestamp is an ISO 8601 date-time (UTC when it names no zone) or Unix seconds. A column the
log lacks (tenant, model, region) comes from the caller's default; a record without one and no
default is an error, as is a token count that is not a whole number ≥ 0 (``prompt_tokens`` and
``output_tokens`` ≥ 1). Errors name the line and the column.

What is stored, per (tenant, model, region) and bucket of ``HEADROOM_TELEMETRY_BUCKET_S``
(bucketed by arrival time): the request count (``vllm:request_success_total``), prompt and
output token totals, prefix-cache queries and hits when the log has ``cached_tokens``, and the
prompt and output length histograms (``_bucket``/``_sum``/``_count``). The histogram bounds
are a geometric grid of relative width ``resolution`` (1% by default; whole tokens below 100):
a percentile read from it is within one bucket, about 1%, of the file's own, and the means
are exact. Samples are inserted with "on conflict do nothing": importing a file twice stores
nothing the second time. The busiest hour of each (tenant, model, region) is also kept as a
``RequestTrace`` (arrival times and token counts), which profiles read their burstiness from
and re-plans replay (``controlplane.telemetry.traces``).
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from django.db import transaction

from controlplane.telemetry.conf import telemetry_settings
from controlplane.telemetry.derive import workload_profiles_derive
from controlplane.telemetry.metrics import (
    GENERATION_TOKENS,
    OUTPUT_HIST,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_HIST,
    PROMPT_TOKENS,
    REQUESTS,
)
from controlplane.telemetry.models import ProfileDerivation
from controlplane.telemetry.storage import SeriesKey, samples_store, series_ids
from controlplane.telemetry.traces import traces_store

FORMATS = ("azure", "jsonl", "csv")
DEFAULT_RESOLUTION = 0.01

_AZURE_COLUMNS = {"timestamp": "TIMESTAMP", "prompt": "ContextTokens", "output": "GeneratedTokens"}
_PLAIN_COLUMNS = {
    "timestamp": "timestamp",
    "prompt": "prompt_tokens",
    "output": "output_tokens",
    "cached": "cached_tokens",
    "tenant": "tenant",
    "model": "model",
    "region": "region",
}


class RequestLogError(ValueError):
    """A record the import refuses; the message names the line and the column."""


@dataclass(frozen=True)
class Request:
    at: datetime
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int | None
    tenant: str
    model: str
    region: str


@dataclass(frozen=True)
class Defaults:
    """Tenant, model and region for records whose log has no such column."""

    tenant: str = ""
    model: str = ""
    region: str = ""


def _timestamp(raw: Any, where: str) -> datetime:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        if not math.isfinite(raw):
            raise RequestLogError(f"{where}: {raw!r} is not a time")
        return datetime.fromtimestamp(float(raw), tz=UTC)
    text = str(raw).strip()
    try:
        return datetime.fromtimestamp(float(text), tz=UTC)
    except ValueError:
        pass
    # Python reads at most six fractional digits; the Azure trace writes seven.
    head, dot, tail = text.partition(".")
    if dot:
        digits = len(tail) - len(tail.lstrip("0123456789"))
        text = head + "." + tail[: min(digits, 6)] + tail[digits:]
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise RequestLogError(f"{where}: {raw!r} is not an ISO 8601 time or Unix seconds") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _tokens(raw: Any, where: str, *, minimum: int) -> int:
    if isinstance(raw, bool):
        raise RequestLogError(f"{where}: {raw!r} is not a whole number of tokens")
    try:
        value = float(str(raw).strip()) if not isinstance(raw, int | float) else float(raw)
    except ValueError:
        raise RequestLogError(f"{where}: {raw!r} is not a whole number of tokens") from None
    if not math.isfinite(value) or value != int(value):
        raise RequestLogError(f"{where}: {raw!r} is not a whole number of tokens")
    if value < minimum:
        raise RequestLogError(f"{where}: {int(value)} tokens; at least {minimum} expected")
    return int(value)


def _record(
    values: Mapping[str, Any], columns: Mapping[str, str], defaults: Defaults, line: int
) -> Request:
    def where(role: str) -> str:
        return f"line {line}, column {columns.get(role, role)}"

    def field_(role: str) -> Any:
        name = columns.get(role)
        value = values.get(name) if name else None
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return value

    for role in ("timestamp", "prompt", "output"):
        if field_(role) is None:
            raise RequestLogError(f"{where(role)}: missing")
    labels: dict[str, str] = {}
    for role in ("tenant", "model", "region"):
        value = field_(role)
        text = str(value).strip() if value is not None else getattr(defaults, role)
        if not text:
            raise RequestLogError(
                f"{where(role)}: missing, and no --{role} given for records without one"
            )
        labels[role] = text
    cached_raw = field_("cached")
    prompt = _tokens(field_("prompt"), where("prompt"), minimum=1)
    cached = None
    if cached_raw is not None:
        cached = _tokens(cached_raw, where("cached"), minimum=0)
        if cached > prompt:
            raise RequestLogError(f"{where('cached')}: {cached} cached of {prompt} prompt tokens")
    return Request(
        at=_timestamp(field_("timestamp"), where("timestamp")),
        prompt_tokens=prompt,
        output_tokens=_tokens(field_("output"), where("output"), minimum=1),
        cached_tokens=cached,
        **labels,
    )


def parse(stream: TextIO, *, fmt: str, defaults: Defaults) -> Iterator[Request]:
    """The records of a log, checked; raises ``RequestLogError`` at the first bad one."""
    if fmt not in FORMATS:
        raise RequestLogError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "jsonl":
        for line, text in enumerate(stream, start=1):
            if not text.strip():
                continue
            try:
                values = json.loads(text)
            except ValueError as exc:
                # Not only JSONDecodeError: an integer past Python's digit limit is a plain
                # ValueError, which has no ``msg``.
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise RequestLogError(f"line {line}: not JSON ({reason})") from None
            if not isinstance(values, dict):
                raise RequestLogError(f"line {line}: a JSON object expected")
            yield _record(values, _PLAIN_COLUMNS, defaults, line)
        return
    reader = csv.DictReader(stream)
    columns = _AZURE_COLUMNS if fmt == "azure" else _PLAIN_COLUMNS
    header = reader.fieldnames or []
    for role in ("timestamp", "prompt", "output"):
        if columns[role] not in header:
            raise RequestLogError(f"line 1, column {columns[role]}: missing from the header")
    try:
        for row in reader:
            yield _record(row, columns, defaults, reader.line_num)
    except csv.Error as exc:
        raise RequestLogError(f"line {reader.line_num}: {exc}") from None


def length_bounds(largest: int, resolution: float) -> list[int]:
    """Histogram upper bounds from 1 to at least ``largest``: every whole token while the grid
    is finer than one token, then a geometric grid of ratio 1 + ``resolution``."""
    bounds: list[int] = []
    bound = 1.0
    while not bounds or bounds[-1] < largest:
        value = math.ceil(bound - 1e-9)
        if not bounds or value > bounds[-1]:
            bounds.append(value)
        bound = max(bound * (1 + resolution), bounds[-1] + 1.0)
    return bounds


@dataclass
class _Bucket:
    requests: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    has_cached: bool = False
    prompts: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)


def samples_from(
    requests: Iterable[Request], *, bucket_s: int, resolution: float
) -> dict[SeriesKey, dict[datetime, float]]:
    """The samples a pull would store for these requests (see the module docstring)."""
    buckets: dict[tuple[str, str, str], dict[int, _Bucket]] = defaultdict(dict)
    largest = {PROMPT_HIST: 1, OUTPUT_HIST: 1}
    for request in requests:
        index = math.floor(request.at.timestamp() / bucket_s)
        bucket = buckets[(request.tenant, request.model, request.region)].setdefault(
            index, _Bucket()
        )
        bucket.requests += 1
        bucket.prompt_tokens += request.prompt_tokens
        bucket.output_tokens += request.output_tokens
        if request.cached_tokens is not None:
            bucket.has_cached = True
            bucket.cached_tokens += request.cached_tokens
        bucket.prompts.append(request.prompt_tokens)
        bucket.outputs.append(request.output_tokens)
        largest[PROMPT_HIST] = max(largest[PROMPT_HIST], request.prompt_tokens)
        largest[OUTPUT_HIST] = max(largest[OUTPUT_HIST], request.output_tokens)
    bounds = {family: length_bounds(top, resolution) for family, top in largest.items()}
    samples: dict[SeriesKey, dict[datetime, float]] = defaultdict(dict)
    for (tenant, model, region), by_index in buckets.items():

        def put(metric: str, at: datetime, value: float, le: str = "") -> None:
            samples[SeriesKey(tenant, model, region, "", metric, le)][at] = value  # noqa: B023

        for index, bucket in by_index.items():
            at = datetime.fromtimestamp(index * bucket_s, tz=UTC)
            put(REQUESTS, at, bucket.requests)
            put(PROMPT_TOKENS, at, bucket.prompt_tokens)
            put(GENERATION_TOKENS, at, bucket.output_tokens)
            if bucket.has_cached:
                put(PREFIX_QUERIES, at, bucket.prompt_tokens)
                put(PREFIX_HITS, at, bucket.cached_tokens)
            for family, lengths in ((PROMPT_HIST, bucket.prompts), (OUTPUT_HIST, bucket.outputs)):
                ordered = sorted(lengths)
                position = 0
                for bound in bounds[family]:
                    while position < len(ordered) and ordered[position] <= bound:
                        position += 1
                    if position:
                        put(family + "_bucket", at, position, f"{bound:.1f}")
                put(family + "_bucket", at, len(ordered), "+Inf")
                put(family + "_sum", at, math.fsum(ordered))
                put(family + "_count", at, len(ordered))
    return samples


@dataclass(frozen=True)
class ImportReport:
    requests: int
    series: int
    samples_stored: int
    samples_total: int
    window_start: datetime
    window_end: datetime
    derivation: ProfileDerivation | None


def requests_import(
    *,
    stream: TextIO,
    fmt: str,
    defaults: Defaults,
    resolution: float = DEFAULT_RESOLUTION,
    derive: bool = True,
) -> ImportReport:
    """Import a request log: check every record, store its samples in one transaction and,
    with ``derive``, derive profiles over the log's buckets. Raises ``RequestLogError`` (and
    stores nothing) for a bad record or an empty log."""
    if not 0 < resolution < 1:
        raise RequestLogError(f"resolution {resolution!r}: use a fraction between 0 and 1")
    conf = telemetry_settings()
    records = list(parse(stream, fmt=fmt, defaults=defaults))
    if not records:
        raise RequestLogError("the log holds no requests")
    samples = samples_from(records, bucket_s=conf.bucket_s, resolution=resolution)
    stamps = [at for points in samples.values() for at in points]
    start = min(stamps)
    end = datetime.fromtimestamp(max(stamps).timestamp() + conf.bucket_s, tz=UTC)
    with transaction.atomic():
        ids = series_ids(keys=samples, bucket_s=conf.bucket_s)
        rows = [
            (ids[key], at, value) for key, points in samples.items() for at, value in points.items()
        ]
        stored = samples_store(rows=rows)
        traces_store(records=records, peak_s=max(conf.peak_s, conf.bucket_s))
    run = workload_profiles_derive(window_start=start, window_end=end) if derive else None
    return ImportReport(
        requests=len(records),
        series=len(samples),
        samples_stored=stored,
        samples_total=len(rows),
        window_start=start,
        window_end=end,
        derivation=run,
    )
