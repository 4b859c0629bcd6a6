"""A small client for Prometheus' HTTP API (``/api/v1/query_range``).

Plain Python (no Django): it fetches, validates and returns typed series, and turns every way
Prometheus can fail into one of three exceptions so that a caller can retry, report and store
nothing partial:

- ``PrometheusUnavailable``: connection refused, timeout, 5xx or 429, after the client's own
  retries with exponential backoff; worth retrying later.
- ``PrometheusQueryError``: Prometheus answered 400/422 or ``status: error`` (a bad query);
  retrying will not help.
- ``PrometheusBadResponse``: the answer is not what the API documents (not JSON, wrong
  shape, values that are not numbers).

``PrometheusTooManySamples`` (a ``PrometheusQueryError``) is the one refusal a smaller query
mends: HTTP 422 "query processing would load too many samples into memory" (the
``--query.max-samples`` limit, ``promql/engine.go``) and HTTP 400 "exceeded maximum resolution
of 11,000 points per timeseries" (``web/api/v1/api.go``); the caller splits the range.

An answer may carry ``warnings`` (a remote-read or federated store that did not answer, a
query limit that truncated it): ``query_range_answer`` returns them beside the series, for
the caller to treat the answer as partial.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class PrometheusError(Exception):
    """Base of the client's errors."""


class PrometheusUnavailable(PrometheusError):
    pass


class PrometheusQueryError(PrometheusError):
    pass


class PrometheusBadResponse(PrometheusError):
    pass


class PrometheusTooManySamples(PrometheusQueryError):
    pass


_TOO_MANY = ("too many samples", "exceeded maximum resolution")


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range query: its labels and (unix seconds, value) points."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class RangeAnswer:
    """A range query's series and the warnings Prometheus sent with them (empty: complete)."""

    series: list[RangeSeries]
    warnings: tuple[str, ...] = ()


_RETRYABLE_STATUS = {429, 500, 502, 503, 504}


class PrometheusClient:
    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 10.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        opener: Callable[..., Any] = urllib.request.urlopen,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"Prometheus URL must start with http:// or https://: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._sleep = sleep
        self._open = opener

    def query_range(
        self, query: str, *, start: float, end: float, step_s: float
    ) -> list[RangeSeries]:
        """Evaluate ``query`` at every ``step_s`` from ``start`` to ``end`` (unix seconds)."""
        return self.query_range_answer(query, start=start, end=end, step_s=step_s).series

    def query_range_answer(
        self, query: str, *, start: float, end: float, step_s: float
    ) -> RangeAnswer:
        """``query_range`` with the answer's ``warnings``."""
        if end < start:
            raise ValueError("end is before start")
        if step_s <= 0:
            raise ValueError("step_s must be positive")
        params = {
            "query": query,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step_s:g}",
        }
        payload = self._get("/api/v1/query_range", params)
        warnings = payload.get("warnings") or []
        if not isinstance(warnings, list):
            raise PrometheusBadResponse("warnings is not a list")
        return RangeAnswer(_parse_matrix(payload["data"]), tuple(str(w) for w in warnings))

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                with self._open(url, timeout=self.timeout_s) as response:
                    body = response.read()
                return _decode(body)
            except urllib.error.HTTPError as exc:
                if exc.code in _RETRYABLE_STATUS:
                    last = exc
                    continue
                text = _error_text(exc)
                if exc.code in (400, 422) and any(s in text.lower() for s in _TOO_MANY):
                    raise PrometheusTooManySamples(text) from exc
                raise PrometheusQueryError(text) from exc
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = exc
                continue
        raise PrometheusUnavailable(
            f"Prometheus at {self.base_url} did not answer after {self.retries + 1} tries: {last}"
        ) from last


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        payload = json.loads(exc.read() or b"{}")
        return f"HTTP {exc.code}: {payload.get('error', exc.reason)}"
    except (ValueError, AttributeError):
        return f"HTTP {exc.code}: {exc.reason}"


def _decode(body: bytes) -> Any:
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise PrometheusBadResponse(f"answer is not JSON: {body[:80]!r}") from exc
    if not isinstance(payload, dict) or "status" not in payload:
        raise PrometheusBadResponse("answer has no status")
    if payload["status"] == "error":
        raise PrometheusQueryError(str(payload.get("error", "query failed")))
    if payload["status"] != "success" or not isinstance(payload.get("data"), dict):
        raise PrometheusBadResponse(f"unexpected status {payload.get('status')!r}")
    return payload


def _parse_matrix(data: Mapping[str, Any]) -> list[RangeSeries]:
    if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise PrometheusBadResponse(f"expected a matrix, got {data.get('resultType')!r}")
    series: list[RangeSeries] = []
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise PrometheusBadResponse("series without labels")
        values = item.get("values")
        if not isinstance(values, list):
            raise PrometheusBadResponse("series without values")
        points: list[tuple[float, float]] = []
        for pair in values:
            try:
                ts, raw = pair
                value = float(raw)
                stamp = float(ts)
            except (TypeError, ValueError) as exc:
                raise PrometheusBadResponse(f"malformed point {pair!r}") from exc
            if math.isnan(value) or math.isinf(stamp):
                continue  # Prometheus encodes "no value" (e.g. 0/0) as NaN
            points.append((stamp, value))
        labels = {str(k): str(v) for k, v in item["metric"].items()}
        series.append(RangeSeries(labels, tuple(points)))
    return series
