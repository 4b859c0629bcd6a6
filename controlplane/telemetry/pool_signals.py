"""Pool signal alerts: a pool's engines' own latency and capacity signals against what its plan
assumed (``PoolSignalAlert``).

The engines measure what the profiles cannot: how long each output token takes (inter-token
latency), how long a request waits before it runs (queue time), and how many tokens of KV
cache each engine holds. These belong to a pool (a model in a region: the engines serving it),
not to a tenant, so they are checked per pool:

- ``pool_signals_measure`` reads them from the stored samples of a window, every label set
  of a pool together (histograms summed bucket by bucket, the KV capacity averaged over the
  label sets that report it);
- ``pool_signal_check`` raises, updates or resolves a pool's alerts against references it is
  given (``SignalReference``). What the plan assumed (its shapes' capacity figures, the
  context its demands hold) is the plans app's to say (``plans.assumptions``), which calls
  this after each derivation.

A signal that is not measured in a window (the engine does not expose it, too few
observations) leaves its alert as it stands: no data is not a recovery.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controlplane.fleet.models import LlmModel, Region
from controlplane.telemetry import histograms, selectors
from controlplane.telemetry.conf import PoolSignalThresholds
from controlplane.telemetry.derive import collect
from controlplane.telemetry.metrics import ITL_HIST, KV_CAPACITY, QUEUE_HIST
from controlplane.telemetry.models import DriftAlert, PoolSignalAlert, ProfileDerivation

logger = logging.getLogger(__name__)

Kind = PoolSignalAlert.Kind


@dataclass(frozen=True)
class PoolSignals:
    """One pool's signals over [start, end): p95s in seconds (None: not measured, or fewer
    than the minimum observations), the observations they were read from, and the mean
    KV-cache capacity per engine in tokens (None: not exposed)."""

    model: str
    region: str
    start: datetime
    end: datetime
    itl_p95_s: float | None = None
    itl_observations: float = 0.0
    queue_time_p95_s: float | None = None
    queue_observations: float = 0.0
    kv_capacity_tokens: float | None = None

    @property
    def window_s(self) -> int:
        return int((self.end - self.start).total_seconds())

    def value(self, kind: str) -> float | None:
        return {
            Kind.ITL_P95: self.itl_p95_s,
            Kind.QUEUE_TIME_P95: self.queue_time_p95_s,
            Kind.KV_CAPACITY: self.kv_capacity_tokens,
        }[Kind(kind)]


def _p95(buckets: Mapping[str, float], count: float, minimum: float) -> float | None:
    if not buckets or count <= 0 or count < minimum:
        return None
    try:
        return histograms.histogram_quantile(0.95, buckets)
    except histograms.HistogramError:
        return None


def pool_signals_measure(
    *, bucket_s: int, start: datetime, end: datetime, min_observations: float
) -> dict[tuple[str, str], PoolSignals]:
    """Every pool's signals over [start, end), by (model, region) label values.

    A latency p95 needs at least ``min_observations`` observations in its histogram (tokens
    for the inter-token latency, requests for the queue time), else it is None.
    """
    grouped = collect(selectors.window_totals(bucket_s=bucket_s, start=start, end=end))
    hist: dict[tuple[str, str], dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    counts: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    capacity: dict[tuple[str, str], list[float]] = defaultdict(list)
    pools: set[tuple[str, str]] = set()
    for labels, collected in grouped.items():
        pool = (labels.model, labels.region)
        for family in (ITL_HIST, QUEUE_HIST):
            buckets = collected.histograms.get(family + "_bucket")
            if not buckets:
                continue
            pools.add(pool)
            for le, value in buckets.items():
                hist[pool][family][le] += value
            counts[pool][family] += collected.totals.get(family + "_count", 0.0)
        n = collected.buckets.get(KV_CAPACITY, 0)
        if n:
            pools.add(pool)
            capacity[pool].append(collected.totals[KV_CAPACITY] / n)
    out = {}
    for pool in sorted(pools):
        kv = capacity.get(pool)
        out[pool] = PoolSignals(
            model=pool[0],
            region=pool[1],
            start=start,
            end=end,
            itl_p95_s=_p95(hist[pool][ITL_HIST], counts[pool][ITL_HIST], min_observations),
            itl_observations=counts[pool][ITL_HIST],
            queue_time_p95_s=_p95(
                hist[pool][QUEUE_HIST], counts[pool][QUEUE_HIST], min_observations
            ),
            queue_observations=counts[pool][QUEUE_HIST],
            kv_capacity_tokens=math.fsum(kv) / len(kv) if kv else None,
        )
    return out


@dataclass(frozen=True)
class SignalReference:
    """What a pool's plan assumed of one signal, in the signal's unit, and what it was read
    from (``figures``: the plan, shapes, figures; ``shape_id``: the one shape, if one)."""

    value: float
    shape_id: int | None = None
    figures: Mapping[str, Any] = field(default_factory=dict)


def _threshold(kind: str, thresholds: PoolSignalThresholds) -> float:
    return {
        Kind.ITL_P95: thresholds.itl_p95_rel,
        Kind.QUEUE_TIME_P95: thresholds.queue_time_p95_s,
        Kind.KV_CAPACITY: thresholds.kv_capacity_rel,
    }[Kind(kind)]


def beyond(kind: str, measured: float, reference: float, threshold: float) -> bool:
    """Whether a measured signal is beyond what the plan allows: the ITL above its reference
    by more than ``threshold`` (relative), the queue time above ``threshold`` seconds, the KV
    capacity under its reference by more than ``threshold`` (relative)."""
    if kind == Kind.ITL_P95:
        return measured > reference * (1.0 + threshold)
    if kind == Kind.QUEUE_TIME_P95:
        return measured > threshold
    return measured < reference * (1.0 - threshold)


def pool_signal_check(
    *,
    model: LlmModel,
    region: Region,
    measured: PoolSignals,
    references: Mapping[str, SignalReference | None],
    thresholds: PoolSignalThresholds,
    now: datetime,
    derivation: ProfileDerivation | None = None,
) -> list[PoolSignalAlert]:
    """Raise, update or resolve the pool's signal alerts; returns those it touched.

    Per kind: a measured value beyond its reference raises an alert (or updates the active
    one: measured value, reference, occurrences, last seen); back within resolves it. A kind
    without a reference (the queue time needs none; the others need a planned shape with a
    figure) resolves its active alert: the plan no longer assumes anything it could
    contradict. An unmeasured kind leaves its alert as it stands.
    """
    active = {
        a.kind: a
        for a in PoolSignalAlert.objects.select_for_update().filter(
            model=model, region=region, status__in=PoolSignalAlert.ACTIVE
        )
    }
    touched: list[PoolSignalAlert] = []
    for kind in Kind.values:
        value = measured.value(kind)
        if value is None:
            continue
        threshold = _threshold(kind, thresholds)
        reference = (
            SignalReference(threshold) if kind == Kind.QUEUE_TIME_P95 else references.get(kind)
        )
        alert = active.get(kind)
        if reference is None:
            if alert is not None:
                _resolve(alert, now, derivation, value, reason="the plan runs no figure for it")
                touched.append(alert)
            continue
        if alert is None:
            if not beyond(kind, value, reference.value, threshold):
                continue
            alert = PoolSignalAlert(
                model=model,
                region=region,
                kind=kind,
                raised_value=value,
                first_seen_at=now,
                raised_by=derivation,
                occurrences=0,
            )
        elif not beyond(kind, value, reference.value, threshold):
            alert.reference_value = reference.value
            alert.figures = dict(reference.figures)
            alert.threshold = threshold
            _resolve(alert, now, derivation, value, reason="back within its threshold")
            touched.append(alert)
            continue
        alert.measured_value = value
        alert.reference_value = reference.value
        alert.threshold = threshold
        alert.window_s = measured.window_s
        alert.shape_id = reference.shape_id
        alert.figures = dict(reference.figures)
        alert.last_seen_at = now
        alert.changed_by = derivation
        alert.occurrences += 1
        alert.message = pool_signal_message(alert=alert)
        alert.full_clean()
        alert.save()
        touched.append(alert)
        logger.warning("pool signal alert %s: %s", alert.pk, alert.message)
    return touched


def _resolve(
    alert: PoolSignalAlert,
    now: datetime,
    derivation: ProfileDerivation | None,
    value: float,
    *,
    reason: str,
) -> None:
    alert.measured_value = value
    alert.status = DriftAlert.Status.RESOLVED
    alert.resolved_at = now
    alert.last_seen_at = now
    alert.changed_by = derivation
    alert.message = f"{pool_signal_message(alert=alert)}: resolved ({reason})"
    alert.save()


# -- messages -------------------------------------------------------------------------------------


def duration_text(seconds: float) -> str:
    """A latency as people read it: "75 ms", "2.40 s"."""
    if seconds < 1.0:
        return f"{seconds * 1000:,.0f} ms"
    return f"{seconds:,.2f} s"


def _window(seconds: int) -> str:
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return "the last hour" if hours == 1 else f"the last {hours} h"
    if seconds % 60 == 0:
        return f"the last {seconds // 60} min"
    return f"the last {seconds} s"


def _shapes(figures: Mapping[str, Any]) -> str:
    """ "chat-70b/gpu80x2: 12 sequences at 160 tokens/s" for each shape the reference read."""
    return "; ".join(
        f"{row['shape']}: {row['max_concurrency']:,g} sequences at "
        f"{row['decode_tokens_per_s']:,g} tokens/s"
        for row in figures.get("shapes", [])
    )


def pool_signal_message(*, alert: PoolSignalAlert) -> str:
    """One line for an operator, e.g. "p95 inter-token latency of chat-70b in eu-west 110 ms
    over the last hour, +47% over the capacity figure's 75 ms (chat-70b/gpu80x2: 12 sequences
    at 160 tokens/s): the engines decode slower than the plan assumed"."""
    head = f"{alert.get_kind_display()} of {alert.model.name} in {alert.region.name}"
    value, reference = alert.measured_value, alert.reference_value
    window = _window(alert.window_s)
    if alert.kind == Kind.ITL_P95:
        change = (value - reference) / reference if reference else math.inf
        return (
            f"{head} {duration_text(value)} over {window}, {change:+.0%} against the capacity "
            f"figure's {duration_text(reference)} ({_shapes(alert.figures)}): the engines decode "
            "slower than the plan assumed"
        )
    if alert.kind == Kind.QUEUE_TIME_P95:
        return (
            f"{head} {duration_text(value)} over {window}, against at most "
            f"{duration_text(alert.threshold)}: requests wait before they run"
        )
    context = float(alert.figures.get("context_tokens", 0.0))
    concurrency = float(alert.figures.get("max_concurrency", 0.0))
    change = (value - reference) / reference if reference else 0.0
    bound = value / context if context else 0.0
    return (
        f"{head} {value:,.0f} tokens per engine over {window}, {change:+.0%} against the "
        f"{reference:,.0f} the capacity figure's {concurrency:,g} sequences of "
        f"{context:,.0f} tokens need ({_shapes(alert.figures)}): the KV-bound concurrency is "
        f"{bound:,.1f}, not {concurrency:,g}"
    )


def pool_signal_alerts_active() -> list[PoolSignalAlert]:
    """Every active pool signal alert, by pool and kind."""
    return list(
        PoolSignalAlert.objects.filter(status__in=PoolSignalAlert.ACTIVE)
        .select_related("model", "region", "shape")
        .order_by("model__name", "region__name", "kind")
    )
