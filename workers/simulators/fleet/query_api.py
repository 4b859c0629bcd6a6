"""A Prometheus-compatible ``/api/v1/query_range`` over the simulated history.

It answers exactly the queries Headroom's telemetry pull sends
(``controlplane.telemetry.metrics.pull_queries``), so that the pull runs unchanged against the
simulator where no Prometheus is installed:

- ``sum by (<labels>) (avg_over_time(<gauge>[<w>s]))`` and ``avg by (…) (…)``: the gauge's
  mean over the window;
- ``sum by (<labels>) (increase(<counter>[<w>s]))``, also for a histogram's ``_sum`` and
  ``_count``: the increase over the window;
- ``sum by (<labels>, le) (increase(<histogram>_bucket[<w>s]))``: the cumulative bucket counts'
  increase, one series per bound (``le`` as the exposition writes it, ``+Inf`` last).

``<labels>`` must name the simulator's tenant, model and region labels (any order; other label
names are allowed and, as in Prometheus, absent from the answer); ``le`` only, and always, for
``_bucket``. The window and the step must be whole multiples of the history's bucket, the
start on its grid. The point at time t covers (t − w, t], as Prometheus' does; points whose
window reaches before the history's start or after what has been simulated are left out.
Anything else is refused as Prometheus refuses a bad query: HTTP 400 with
``{"status": "error", "errorType": "bad_data", "error": "…"}``.

vLLM series the simulator does not simulate (``NOT_SIMULATED``: inter-token latency, queue
time, the cache configuration) are answered as Prometheus answers for a series it holds no
samples of: a well-formed query over them returns no series.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from workers.simulators.fleet.exposition import COUNTERS, GAUGES, HISTOGRAMS, LabelNames
from workers.simulators.fleet.history import HISTOGRAM_BOUNDS, FleetHistory, FloatArray

# Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS = 11_000

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_QUERY = re.compile(
    r"^\s*(?P<agg>[a-z_]+)\s+by\s*\((?P<by>[^()]*)\)\s*"
    r"\(\s*(?P<fn>[a-z_]+)\s*\(\s*(?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*"
    r"\[\s*(?P<window>[0-9]+)s\s*\]\s*\)\s*\)\s*$"
)


# vLLM V1 series (vllm/v1/metrics/loggers.py) the pull asks for and the simulator leaves out.
_NOT_SIMULATED_HISTOGRAMS = (
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:request_queue_time_seconds",
)
NOT_SIMULATED = frozenset(
    [
        f"{name}{suffix}"
        for name in _NOT_SIMULATED_HISTOGRAMS
        for suffix in ("_bucket", "_sum", "_count")
    ]
    + ["vllm:cache_config_info"]
)


# The series a query's range functions select.
_SELECTED = re.compile(r"[a-z_]+\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\[")


class QueryError(ValueError):
    """A query the simulator does not answer; the message is Prometheus' ``error``."""


Kind = Literal["gauge", "counter", "bucket", "sum", "count"]


@dataclass(frozen=True)
class Series:
    """What a stored series name reads: its kind and the history quantity behind it."""

    kind: Kind
    quantity: str  # a SeriesState attribute (history.COUNTER_ATTRS, GAUGE_ATTRS, histograms)


def series_catalogue() -> dict[str, Series]:
    """Every series name the simulator answers for, as the exposition names them."""
    names: dict[str, Series] = {}
    for name, _, attr in GAUGES:
        names[name] = Series("gauge", attr)
    for name, _, attr in COUNTERS:
        names[name + "_total"] = Series("counter", attr)
    for name, _, attr in HISTOGRAMS:
        names[name + "_bucket"] = Series("bucket", attr)
        names[name + "_sum"] = Series("sum", attr)
        names[name + "_count"] = Series("count", attr)
    return names


@dataclass(frozen=True)
class RangeQuery:
    aggregation: Literal["sum", "avg"]
    function: Literal["increase", "avg_over_time"]
    metric: str
    series: Series
    window_s: int
    by: tuple[str, ...]


def parse_query(text: str, labels: LabelNames) -> RangeQuery:
    """The query, checked against the forms the pull sends; raises ``QueryError``."""
    match = _QUERY.match(text)
    if match is None:
        raise QueryError(
            f"unsupported query {text!r}: the simulator answers "
            "'sum|avg by (labels) (avg_over_time(gauge[Ns]))' and "
            "'sum by (labels) (increase(counter[Ns]))' only"
        )
    aggregation, function, metric = match["agg"], match["fn"], match["metric"]
    if aggregation not in ("sum", "avg"):
        raise QueryError(f"unsupported aggregation {aggregation!r}: use sum or avg")
    if function not in ("increase", "avg_over_time"):
        raise QueryError(f"unsupported function {function!r}: use increase or avg_over_time")
    series = series_catalogue().get(metric)
    if series is None:
        raise QueryError(f"unknown series {metric!r}: the simulator has vLLM's serving metrics")
    if function == "avg_over_time" and series.kind != "gauge":
        raise QueryError(f"avg_over_time() needs a gauge; {metric} is a {series.kind} series")
    if function == "increase" and series.kind == "gauge":
        raise QueryError(f"increase() needs a counter; {metric} is a gauge")
    if function == "increase" and aggregation != "sum":
        raise QueryError("increase() is answered summed: use 'sum by'")
    window = int(match["window"])
    if window <= 0:
        raise QueryError("the range of a range vector must be positive")
    by = tuple(part.strip() for part in match["by"].split(","))
    if any(not _LABEL.match(name) for name in by):
        raise QueryError(f"invalid label list in 'by ({match['by']})'")
    if len(set(by)) != len(by):
        raise QueryError(f"a label is named twice in 'by ({match['by']})'")
    missing = [name for name in (labels.tenant, labels.model, labels.region) if name not in by]
    if missing:
        raise QueryError(
            f"'by' must keep the labels {labels.tenant}, {labels.model} and {labels.region}; "
            f"missing {', '.join(missing)}"
        )
    if ("le" in by) != (series.kind == "bucket"):
        raise QueryError("group by 'le' for a histogram's _bucket series, and only for it")
    return RangeQuery(
        aggregation,  # type: ignore[arg-type]
        function,  # type: ignore[arg-type]
        metric,
        series,
        window,
        by,
    )


def _number(params: Mapping[str, str], name: str) -> float:
    raw = params.get(name)
    if raw is None or raw == "":
        raise QueryError(f"missing parameter {name!r}")
    text = raw[:-1] if name == "step" and raw.endswith("s") else raw
    try:
        value = float(text)
    except ValueError:
        raise QueryError(
            f'invalid parameter "{name}": cannot parse "{raw}" to a valid '
            + ("duration" if name == "step" else "timestamp (unix seconds)")
        ) from None
    if not math.isfinite(value):
        raise QueryError(f'invalid parameter "{name}": {raw!r} is not a finite number')
    return value


def _format(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _le(bound: float) -> str:
    return repr(float(bound))


class QueryApi:
    """Evaluates range queries over ``history``; ``clock`` is "now" (what has happened)."""

    def __init__(
        self,
        history: FleetHistory,
        labels: LabelNames | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.history = history
        self.labels = labels or LabelNames()
        self.clock = clock

    def answer(self, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for a ``query_range`` request's parameters."""
        try:
            return 200, {"status": "success", "data": self.query_range(params)}
        except QueryError as exc:
            return 400, {"status": "error", "errorType": "bad_data", "error": str(exc)}

    def query_range(self, params: Mapping[str, str]) -> dict[str, Any]:
        query_text = params.get("query")
        if not query_text:
            raise QueryError("missing parameter 'query'")
        unsimulated = _SELECTED.findall(query_text)
        if unsimulated and set(unsimulated) <= NOT_SIMULATED:
            for name in ("start", "end", "step"):
                _number(params, name)
            return {"resultType": "matrix", "result": []}
        query = parse_query(query_text, self.labels)
        start, end, step = (_number(params, name) for name in ("start", "end", "step"))
        width = self.history.bucket_s
        if end < start:
            raise QueryError("end timestamp must not be before start time")
        if step <= 0:
            raise QueryError(
                "zero or negative query resolution step widths are not accepted. "
                "Try a positive integer"
            )
        points = math.floor((end - start) / step) + 1
        if points > MAX_POINTS:
            raise QueryError(
                "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing "
                "the query resolution (?step=XX)"
            )
        for name, value in (("step", step), ("range", query.window_s), ("start", start)):
            if abs(value / width - round(value / width)) > 1e-9:
                raise QueryError(f"{name} {value:g} s is off the simulator's {width} s bucket grid")
        step_b = round(step / width)
        window_b = round(query.window_s / width)
        first_t = round(start / width)  # bucket index at which the first point ends
        # Points whose window lies inside the simulated history and has ended.
        earliest = math.ceil(self.history.start / width) + window_b
        latest = math.floor(self.clock() / width)
        ends = first_t + step_b * np.arange(points, dtype=np.int64)
        ends = ends[(ends >= earliest) & (ends <= latest)]
        result: list[dict[str, Any]] = []
        if ends.size == 0:
            return {"resultType": "matrix", "result": result}
        lo = int(ends[0]) - window_b
        count = int(ends[-1]) - lo
        stamps = [int(e) * width for e in ends]
        offsets_end = ends - lo
        offsets_start = offsets_end - window_b
        for stream in self.history.streams:
            tenant, model, region = stream
            metric = {self.labels.model: model, self.labels.tenant: tenant}
            metric[self.labels.region] = region
            for extra_labels, values in self._evaluate(query, stream, lo, count):
                cumulative = np.concatenate(([0.0], np.cumsum(values)))
                totals = cumulative[offsets_end] - cumulative[offsets_start]
                if query.series.kind == "gauge":
                    totals = totals / window_b
                # A difference of running sums can come out a rounding error below zero.
                totals = np.maximum(totals, 0.0)
                result.append(
                    {
                        "metric": {**metric, **extra_labels},
                        "values": [
                            [t, _format(v)] for t, v in zip(stamps, totals.tolist(), strict=True)
                        ],
                    }
                )
        return {"resultType": "matrix", "result": result}

    def _evaluate(
        self, query: RangeQuery, stream: tuple[str, str, str], first: int, count: int
    ) -> list[tuple[dict[str, str], FloatArray]]:
        """Per series of the stream: (extra labels, per-bucket values over the range)."""
        kind, quantity = query.series.kind, query.series.quantity
        if kind in ("gauge", "counter"):
            return [({}, self.history.values(stream, quantity, first, count))]
        if kind == "sum":
            return [({}, self.history.values(stream, quantity + ":sum", first, count))]
        counts = self.history.values(stream, quantity + ":counts", first, count)
        if kind == "count":
            return [({}, counts.sum(axis=1))]
        cumulative = np.cumsum(counts, axis=1)
        bounds = HISTOGRAM_BOUNDS[quantity]
        out = [({"le": _le(b)}, cumulative[:, i]) for i, b in enumerate(bounds)]
        out.append(({"le": "+Inf"}, cumulative[:, -1]))
        return out
