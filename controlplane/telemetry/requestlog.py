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

A timestamp is an ISO 8601 date-time (UTC when it names no zone) or Unix seconds, inside the
import window (``import_window``: from ``HEADROOM_IMPORT_EARLIEST``, 2000-01-01 by default, to
a day, ``HEADROOM_IMPORT_FUTURE_S``, after now). A column the log lacks (tenant, model, region)
comes from the caller's default; a record without one and no default is an error, as is a token
count that is not a whole number within ``TOKENS_PER_REQUEST`` (1 to 10,000,000, the bound
profiles hold; ``cached_tokens`` from 0 to the prompt's). Each tenant, model and region must
be one the fleet has a record of, unless the caller passes ``create_missing`` (the samples are
then stored under the new names as telemetry only; derivations skip them, listing them as
unknown labels, until the records exist). Errors name the line and the column.

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from controlplane.core.conf import setting_int, setting_text
from controlplane.core.validators import TOKENS_PER_REQUEST
from controlplane.fleet.models import LlmModel, Region
from controlplane.policies.models import Tenant
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
    # Where the record is: its line, and the labels that came from the caller's defaults.
    line: int = 0
    defaulted: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Defaults:
    """Tenant, model and region for records whose log has no such column."""

    tenant: str = ""
    model: str = ""
    region: str = ""


@dataclass(frozen=True)
class Window:
    """The arrival times an import accepts: from ``earliest`` to ``latest``, inclusive."""

    earliest: datetime
    latest: datetime

    def check(self, moment: datetime, where: str) -> datetime:
        if not self.earliest <= moment <= self.latest:
            raise RequestLogError(
                f"{where}: {moment.isoformat().replace('+00:00', 'Z')} is outside the import "
                "window "
                f"{self.earliest:%Y-%m-%d %H:%M} to {self.latest:%Y-%m-%d %H:%M} UTC "
                f"(HEADROOM_IMPORT_EARLIEST, HEADROOM_IMPORT_FUTURE_S)"
            )
        return moment


def import_window() -> Window:
    """``HEADROOM_IMPORT_EARLIEST`` (an ISO date or time, UTC; default 2000-01-01) to now plus
    ``HEADROOM_IMPORT_FUTURE_S`` (default a day: clocks that run a little ahead)."""
    raw = setting_text("HEADROOM_IMPORT_EARLIEST", "2000-01-01")
    try:
        earliest = datetime.fromisoformat(raw)
    except ValueError:
        raise ImproperlyConfigured(
            f"HEADROOM_IMPORT_EARLIEST={raw!r}: use an ISO 8601 date or time"
        ) from None
    earliest = earliest.replace(tzinfo=UTC) if earliest.tzinfo is None else earliest
    ahead = setting_int("HEADROOM_IMPORT_FUTURE_S", 86_400, minimum=0, maximum=10 * 365 * 86_400)
    return Window(
        earliest=earliest.astimezone(UTC), latest=timezone.now() + timedelta(seconds=ahead)
    )


def _unix(value: float, raw: Any, where: str) -> datetime:
    if not math.isfinite(value):
        raise RequestLogError(f"{where}: {raw!r} is not a time")
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        # Beyond the years a date-time holds (1 to 9999) or the platform's clock.
        raise RequestLogError(f"{where}: {raw!r} Unix seconds is out of range") from None


def _timestamp(raw: Any, where: str, window: Window | None = None) -> datetime:
    moment = _moment(raw, where)
    return moment if window is None else window.check(moment, where)


def _moment(raw: Any, where: str) -> datetime:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        try:
            value = float(raw)
        except OverflowError:  # an integer past the float range
            raise RequestLogError(f"{where}: {raw!r} Unix seconds is out of range") from None
        return _unix(value, raw, where)
    text = str(raw).strip()
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        return _unix(number, raw, where)
    # Python reads at most six fractional digits; the Azure trace writes seven.
    head, dot, tail = text.partition(".")
    if dot:
        digits = len(tail) - len(tail.lstrip("0123456789"))
        text = head + "." + tail[: min(digits, 6)] + tail[digits:]
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except ValueError:
        raise RequestLogError(f"{where}: {raw!r} is not an ISO 8601 time or Unix seconds") from None
    except OverflowError:  # year 1 or 9999 moved past the calendar's end by its offset
        raise RequestLogError(f"{where}: {raw!r} is out of range") from None


def _tokens(raw: Any, where: str, *, minimum: int, maximum: int | None = None) -> int:
    """A whole number of tokens from ``minimum`` to ``maximum`` (default: the project's bound on
    tokens per request, ``TOKENS_PER_REQUEST``)."""
    top = int(TOKENS_PER_REQUEST.high) if maximum is None else maximum
    wrong = f"{where}: {raw!r} is not a whole number of tokens"
    if isinstance(raw, bool):
        raise RequestLogError(wrong)
    if isinstance(raw, int):
        value = raw
    else:
        try:
            number = float(str(raw).strip()) if not isinstance(raw, float) else raw
        except ValueError:
            raise RequestLogError(wrong) from None
        if not math.isfinite(number) or number != int(number):
            raise RequestLogError(wrong)
        value = int(number)
    if not minimum <= value <= top:
        if abs(value) < 10**15:
            shown = f"{value:,}"
        elif isinstance(raw, float | str):
            shown = str(raw).strip()
        else:
            shown = f"a {len(str(abs(value)))}-digit number of"
        raise RequestLogError(
            f"{where}: {shown} tokens is out of range: from {minimum:,} to {top:,} expected"
        )
    return value


def _record(
    values: Mapping[str, Any],
    columns: Mapping[str, str],
    defaults: Defaults,
    line: int,
    window: Window | None = None,
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
    defaulted = set()
    for role in ("tenant", "model", "region"):
        value = field_(role)
        if value is None:
            defaulted.add(role)
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
        at=_timestamp(field_("timestamp"), where("timestamp"), window),
        prompt_tokens=prompt,
        output_tokens=_tokens(field_("output"), where("output"), minimum=1),
        cached_tokens=cached,
        line=line,
        defaulted=frozenset(defaulted),
        **labels,
    )


def parse(
    stream: TextIO, *, fmt: str, defaults: Defaults, window: Window | None = None
) -> Iterator[Request]:
    """The records of a log, checked; raises ``RequestLogError`` at the first bad one.
    Arrival times must lie in ``window`` (default: ``import_window()``)."""
    window = import_window() if window is None else window
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
            yield _record(values, _PLAIN_COLUMNS, defaults, line, window)
        return
    reader = csv.DictReader(stream)
    columns = _AZURE_COLUMNS if fmt == "azure" else _PLAIN_COLUMNS
    header = reader.fieldnames or []
    for role in ("timestamp", "prompt", "output"):
        if columns[role] not in header:
            raise RequestLogError(f"line 1, column {columns[role]}: missing from the header")
    try:
        for row in reader:
            yield _record(row, columns, defaults, reader.line_num, window)
    except csv.Error as exc:
        raise RequestLogError(f"line {reader.line_num}: {exc}") from None


_NAMED: dict[str, Any] = {"tenant": Tenant, "model": LlmModel, "region": Region}
# How many of the fleet's names an "unknown name" error lists.
_KNOWN_SHOWN = 5


def _check_names(records: Sequence[Request], *, create_missing: bool) -> None:
    """Refuse a tenant, model or region the fleet has no record of, naming the first record
    that names it; with ``create_missing`` the samples are stored under such names anyway
    (telemetry only: derivations skip them, listing them as unknown labels, until the
    records exist)."""
    if create_missing:
        return
    for role, model in _NAMED.items():
        names = {getattr(r, role) for r in records}
        known = set(model.objects.filter(name__in=names).values_list("name", flat=True))
        unknown = names - known
        if not unknown:
            continue
        first = min((r for r in records if getattr(r, role) in unknown), key=lambda r: r.line)
        name = getattr(first, role)
        where = (
            f"line {first.line}, --{role}"
            if role in first.defaulted
            else f"line {first.line}, column {role}"
        )
        fleet = sorted(model.objects.values_list("name", flat=True)[: _KNOWN_SHOWN + 1])
        listed = ", ".join(fleet[:_KNOWN_SHOWN]) + (", ..." if len(fleet) > _KNOWN_SHOWN else "")
        others = f" ({len(unknown) - 1} more unknown)" if len(unknown) > 1 else ""
        raise RequestLogError(
            f"{where}: no {role} {name!r} in the fleet{others} (known: {listed or 'none'}); "
            "create it first, or pass --create-missing to store its samples anyway"
        )


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
    create_missing: bool = False,
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
    _check_names(records, create_missing=create_missing)
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
