"""Derive workload profiles from the stored samples (``workload_profiles_derive``).

Per (tenant, model, region[, class]) over a window: the peak request rate (p99 of the bucket
rates), prompt and output percentiles from the histograms (interpolated inside buckets as
Prometheus' ``histogram_quantile`` does; means from ``_sum / _count``), the prefix-cache hit
rate (hits / queries), p95 TTFT and the residence time (mean end-to-end latency). A new
``WorkloadProfile`` version (source "telemetry") is written where the figures changed; drift
against the version it supersedes is checked by ``drift.drift_check``.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.models import LlmModel, Region, WorkloadClass
from controlplane.policies.models import PROFILE_FIGURES, Tenant, WorkloadProfile
from controlplane.telemetry import histograms, selectors, traces
from controlplane.telemetry.conf import TelemetrySettings, telemetry_settings
from controlplane.telemetry.drift import drift_check, pool_drift_update, pool_token_shares
from controlplane.telemetry.metrics import (
    ARRIVALS,
    E2E_HIST,
    GATEWAY_OUTPUT_TOKENS,
    GATEWAY_PROMPT_TOKENS,
    GATEWAY_REQUESTS,
    ITL_HIST,
    KV_CAPACITY,
    KV_USAGE,
    OUTPUT_HIST,
    PREEMPTIONS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_HIST,
    QUEUE_HIST,
    REQUESTS,
    RUNNING,
    TTFT_HIST,
    WAITING,
)
from controlplane.telemetry.models import (
    OBSERVED_CLASS,
    DriftAlert,
    ObservedWorkload,
    ProfileDerivation,
    RunStatus,
    TelemetryPull,
)
from planner.capacity import burstiness

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LabelSet:
    tenant: str
    model: str
    region: str
    workload_class: str

    def __str__(self) -> str:
        return f"{self.tenant}/{self.model}/{self.region}/{self.workload_class}"


@dataclass
class _Collected:
    """The window's totals of one label set, by metric (and ``le`` for buckets)."""

    totals: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, int] = field(default_factory=dict)
    histograms: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    request_series: list[int] = field(default_factory=list)
    gateway_series: list[int] = field(default_factory=list)
    arrival_series: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Observation:
    """Figures measured for one label set; see ``ObservedWorkload`` for units."""

    labels: LabelSet
    requests: float
    buckets: int
    mean_requests_per_s: float
    peak_requests_per_s: float
    prompt: tuple[float, float, float, float]  # p50, mean, p95, p99 (tokens)
    output: tuple[float, float, float, float]
    prompt_p90: float
    output_p90: float
    censored: tuple[str, ...]  # profile figures that are lower bounds ("≥ bound")
    # Each length percentile's bucket, [lower, upper] (upper None: censored), and those whose
    # bucket is coarse (``histograms.BucketQuantile.coarse``).
    percentile_bounds: dict[str, list[float | None]]
    coarse: tuple[str, ...]
    prefix_cache_hit_rate: float | None  # None: the engine has no prefix-cache counters
    ttft_p95_s: float | None
    residence_s: float | None
    kv_cache_usage_mean: float | None
    running_mean: float | None
    waiting_mean: float | None
    preemptions_per_s: float | None
    burstiness: Mapping[str, float | int | None] = field(default_factory=dict)
    # The engine's latency and capacity signals (None: the engine does not expose them).
    latency: Latency = field(default_factory=lambda: Latency())
    rate_source: str = "completions"  # what the request rates count: arrivals or completions


@dataclass(frozen=True)
class Latency:
    """Inter-token latency and queue time (seconds: mean from ``_sum / _count``, p95 from the
    buckets) and the KV-cache capacity per engine (tokens)."""

    itl_mean_s: float | None = None
    itl_p95_s: float | None = None
    queue_mean_s: float | None = None
    queue_p95_s: float | None = None
    kv_capacity_tokens: float | None = None


def _seconds(collected: _Collected, family: str) -> tuple[float | None, float | None]:
    """(mean, p95) of a time histogram; None for what it does not give."""
    count = collected.totals.get(family + "_count", 0.0)
    total = collected.totals.get(family + "_sum")
    mean = total / count if count > 0 and total is not None else None
    p95: float | None = None
    buckets = collected.histograms.get(family + "_bucket")
    if buckets and count > 0:
        try:
            p95 = histograms.histogram_quantile(0.95, buckets)
        except histograms.HistogramError:
            p95 = None
    return mean, p95


def latency(collected: _Collected) -> Latency:
    """The window's inter-token latency, queue time and KV capacity of one label set."""
    itl_mean, itl_p95 = _seconds(collected, ITL_HIST)
    queue_mean, queue_p95 = _seconds(collected, QUEUE_HIST)
    n = collected.buckets.get(KV_CAPACITY, 0)
    capacity = collected.totals[KV_CAPACITY] / n if n else None
    return Latency(itl_mean, itl_p95, queue_mean, queue_p95, capacity)


class NotEnoughData(Exception):
    """A label set whose samples make no profile; the message says why."""


@dataclass(frozen=True)
class Lengths:
    """A length histogram's figures (tokens), the percentiles that are censored (their rank
    is beyond the top finite bucket: the value is a lower bound), each percentile's bucket
    and those whose bucket is coarse (wider than ``COARSE_RELATIVE_WIDTH``; a bucket of one
    whole token is exact)."""

    p50: float
    mean: float
    p90: float
    p95: float
    p99: float
    censored: tuple[str, ...] = ()
    bounds: dict[str, list[float | None]] = field(default_factory=dict)
    coarse: tuple[str, ...] = ()


def _lengths(collected: _Collected, family: str, what: str) -> Lengths:
    buckets = collected.histograms.get(family + "_bucket")
    count = collected.totals.get(family + "_count", 0.0)
    total = collected.totals.get(family + "_sum")
    if not buckets or count <= 0 or total is None:
        raise NotEnoughData(f"no {what} histogram observations")
    figures: dict[str, float] = {}
    censored: list[str] = []
    bounds: dict[str, list[float | None]] = {}
    coarse: list[str] = []
    try:
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99)):
            found = histograms.bucket_quantile(q, buckets)
            figures[name] = found.value
            bounds[name] = [found.lower, found.upper]
            if found.censored:
                censored.append(name)
            elif found.coarse(unit=1.0):  # lengths are whole tokens
                coarse.append(name)
    except histograms.HistogramError as exc:
        raise NotEnoughData(f"{what} histogram: {exc}") from exc
    return Lengths(
        mean=total / count,
        censored=tuple(censored),
        bounds=bounds,
        coarse=tuple(coarse),
        **figures,
    )


def peak_rate(points: Sequence[tuple[datetime, float]], *, bucket_s: int, peak_s: int) -> float:
    """The busiest window's request rate: bucket counts summed into windows of ``peak_s``
    on the epoch grid, each over the seconds its stored buckets cover. A bucket wider than
    ``peak_s`` is its own window (the peak at the bucket's resolution)."""
    width = max(peak_s, bucket_s)
    counts: dict[int, float] = defaultdict(float)
    covered: dict[int, int] = defaultdict(int)
    for stamp, value in points:
        window = math.floor(stamp.timestamp() / width)
        counts[window] += value
        covered[window] += bucket_s
    return max(counts[w] / covered[w] for w in counts)


def observe(
    labels: LabelSet,
    collected: _Collected,
    request_buckets: Sequence[tuple[datetime, float]],
    *,
    bucket_s: int,
    min_requests: float,
    peak_s: int | None = None,
    arrival_buckets: Sequence[tuple[datetime, float]] = (),
) -> Observation:
    """Workload figures of one label set from its window totals; raises ``NotEnoughData``.

    Request counts come from ``request_success`` (finished requests); the rates (mean, and
    the peak: the busiest ``peak_s`` window's rate, ``peak_rate``) from the arrivals where the
    engine gives them (``arrival_buckets``, ``metrics.ARRIVALS``), else from the finished
    requests. Length percentiles beyond the top finite bucket
    are flagged as censored. The prefix-cache hit rate is unknown (None), not zero, when the
    engine reported no prefix-cache queries counter.
    """
    totals = collected.totals
    requests = totals.get(REQUESTS, 0.0)
    if not request_buckets or requests < max(min_requests, 1e-9):
        raise NotEnoughData(f"{requests:.0f} requests in the window, fewer than {min_requests:g}")
    prompt = _lengths(collected, PROMPT_HIST, "prompt length")
    output = _lengths(collected, OUTPUT_HIST, "output length")
    hit_rate: float | None = None
    if PREFIX_QUERIES in totals and PREFIX_HITS in totals:
        queries = totals[PREFIX_QUERIES]
        hit_rate = min(1.0, totals[PREFIX_HITS] / queries) if queries > 0 else 0.0
    ttft: float | None = None
    if collected.histograms.get(TTFT_HIST + "_bucket") and totals.get(TTFT_HIST + "_count", 0) > 0:
        try:
            ttft = histograms.histogram_quantile(0.95, collected.histograms[TTFT_HIST + "_bucket"])
        except histograms.HistogramError:
            ttft = None
    e2e_count = totals.get(E2E_HIST + "_count", 0.0)
    residence = totals[E2E_HIST + "_sum"] / e2e_count if e2e_count > 0 else None

    def gauge_mean(name: str) -> float | None:
        n = collected.buckets.get(name, 0)
        return totals[name] / n if n else None

    n_preempt = collected.buckets.get(PREEMPTIONS, 0)
    censored = tuple(f"prompt_tokens_{n}" for n in prompt.censored) + tuple(
        f"output_tokens_{n}" for n in output.censored
    )
    bounds = {f"prompt_tokens_{n}": b for n, b in prompt.bounds.items()} | {
        f"output_tokens_{n}": b for n, b in output.bounds.items()
    }
    coarse = tuple(f"prompt_tokens_{n}" for n in prompt.coarse) + tuple(
        f"output_tokens_{n}" for n in output.coarse
    )
    rated, source = (
        (arrival_buckets, "arrivals")
        if arrival_buckets
        else (
            request_buckets,
            "completions",
        )
    )
    rated_total = math.fsum(v for _, v in rated) if arrival_buckets else requests
    return Observation(
        labels=labels,
        requests=requests,
        buckets=len(request_buckets),
        mean_requests_per_s=rated_total / (len(rated) * bucket_s),
        peak_requests_per_s=peak_rate(
            rated, bucket_s=bucket_s, peak_s=peak_s if peak_s else bucket_s
        ),
        prompt=(prompt.p50, prompt.mean, prompt.p95, prompt.p99),
        output=(output.p50, output.mean, output.p95, output.p99),
        prompt_p90=prompt.p90,
        output_p90=output.p90,
        censored=censored,
        percentile_bounds=bounds,
        coarse=coarse,
        prefix_cache_hit_rate=hit_rate,
        ttft_p95_s=ttft,
        residence_s=residence if residence and residence > 0 else None,
        kv_cache_usage_mean=gauge_mean(KV_USAGE),
        running_mean=gauge_mean(RUNNING),
        waiting_mean=gauge_mean(WAITING),
        preemptions_per_s=totals[PREEMPTIONS] / (n_preempt * bucket_s) if n_preempt else None,
        latency=latency(collected),
        rate_source=source,
    )


def collect(totals: Iterable[selectors.SeriesTotal]) -> dict[LabelSet, _Collected]:
    """Group a window's series totals by label set."""
    grouped: dict[LabelSet, _Collected] = defaultdict(_Collected)
    for row in totals:
        labels = LabelSet(row.tenant, row.model, row.region, row.workload_class or OBSERVED_CLASS)
        target = grouped[labels]
        if row.le:
            target.histograms[row.metric][row.le] = row.total
            continue
        target.totals[row.metric] = row.total
        target.buckets[row.metric] = row.buckets
        if row.metric == REQUESTS:
            target.request_series.append(row.series_id)
        elif row.metric == GATEWAY_REQUESTS:
            target.gateway_series.append(row.series_id)
        elif row.metric == ARRIVALS:
            target.arrival_series.append(row.series_id)
    return grouped


def _scaled(counts_by_le: Mapping[str, float], length: float, count: float) -> dict[str, float]:
    """A histogram with its bounds times ``length`` and its counts times ``count``."""
    out = {}
    for le, value in counts_by_le.items():
        bound = histograms.parse_le(le)
        out[le if math.isinf(bound) else repr(bound * length)] = value * count
    return out


def attribute(grouped: Mapping[LabelSet, _Collected]) -> dict[LabelSet, _Collected]:
    """Tenant label sets measured by a gateway (requests and tokens, no histograms), each
    completed from its pool's series (the same model, region and class with no tenant).

    A tenant's requests, rate and mean lengths are its own; the shape of its length
    distributions, its prefix-cache hit rate and its latencies are the pool's (the gateway
    counts tokens, it has no per-request lengths): the pool's length histograms are scaled so
    that their means are the tenant's. Gauges (running, waiting, KV usage) stay the pool's
    alone. A gateway label set without a pool keeps only its counts and makes no profile."""
    out = dict(grouped)
    for labels, collected in grouped.items():
        totals = collected.totals
        requests = totals.get(GATEWAY_REQUESTS, 0.0)
        if not labels.tenant or REQUESTS in totals or requests <= 0:
            continue
        pool = grouped.get(LabelSet("", labels.model, labels.region, labels.workload_class))
        if pool is None:
            continue
        made = _Collected(request_series=list(collected.gateway_series))
        made.totals[REQUESTS] = requests
        made.buckets[REQUESTS] = collected.buckets.get(GATEWAY_REQUESTS, 0)
        for family, tokens in (
            (PROMPT_HIST, totals.get(GATEWAY_PROMPT_TOKENS)),
            (OUTPUT_HIST, totals.get(GATEWAY_OUTPUT_TOKENS)),
        ):
            count = pool.totals.get(family + "_count", 0.0)
            pool_sum = pool.totals.get(family + "_sum", 0.0)
            buckets = pool.histograms.get(family + "_bucket")
            if tokens is None or not buckets or count <= 0 or pool_sum <= 0:
                continue
            length = (tokens / requests) / (pool_sum / count)
            made.histograms[family + "_bucket"] = _scaled(buckets, length, requests / count)
            made.totals[family + "_sum"] = tokens
            made.totals[family + "_count"] = requests
        for name in (PREFIX_QUERIES, PREFIX_HITS, E2E_HIST + "_sum", E2E_HIST + "_count"):
            if name in pool.totals:
                made.totals[name] = pool.totals[name]
        if TTFT_HIST + "_bucket" in pool.histograms:
            made.histograms[TTFT_HIST + "_bucket"] = dict(pool.histograms[TTFT_HIST + "_bucket"])
            made.totals[TTFT_HIST + "_count"] = pool.totals.get(TTFT_HIST + "_count", 0.0)
        for family in (ITL_HIST, QUEUE_HIST):  # the pool's latencies, as TTFT's
            if family + "_bucket" in pool.histograms:
                made.histograms[family + "_bucket"] = dict(pool.histograms[family + "_bucket"])
            for suffix in ("_sum", "_count"):
                if family + suffix in pool.totals:
                    made.totals[family + suffix] = pool.totals[family + suffix]
        out[labels] = made
    return out


def _profile_figures(obs: Observation, before: WorkloadProfile | None) -> dict[str, float | None]:
    """The profile figures an observation gives. An unknown hit rate (no prefix-cache
    counters) carries the previous version's figure, or 0 for a first version; either way
    the profile lists it as unmeasured."""
    hit_rate = obs.prefix_cache_hit_rate
    if hit_rate is None:
        hit_rate = before.prefix_cache_hit_rate if before is not None else 0.0
    return {
        "peak_requests_per_s": obs.peak_requests_per_s,
        "prompt_tokens_p50": obs.prompt[0],
        "prompt_tokens_mean": obs.prompt[1],
        "prompt_tokens_p90": obs.prompt_p90,
        "prompt_tokens_p95": obs.prompt[2],
        "prompt_tokens_p99": obs.prompt[3],
        "output_tokens_p50": obs.output[0],
        "output_tokens_mean": obs.output[1],
        "output_tokens_p90": obs.output_p90,
        "output_tokens_p95": obs.output[2],
        "output_tokens_p99": obs.output[3],
        "prefix_cache_hit_rate": hit_rate,
        "residence_s": obs.residence_s,
    }


def _changed(
    profile: WorkloadProfile, figures: Mapping[str, float | None], tolerance: float
) -> bool:
    """Whether any figure moved by more than ``tolerance`` (relative; absolute for the hit rate)."""
    for name in PROFILE_FIGURES:
        old, new = getattr(profile, name), figures[name]
        if old is None or new is None:
            if old != new:
                return True
            continue
        if name == "prefix_cache_hit_rate":
            if abs(new - old) > tolerance:
                return True
        elif abs(new - old) > tolerance * max(abs(old), 1e-9):
            return True
    return False


@dataclass
class _Resolved:
    """A label set whose values name a tenant, model, region and class."""

    tenant: Tenant
    model: LlmModel
    region: Region
    workload_class: WorkloadClass


def _resolve(
    labels: LabelSet, names: Mapping[str, Mapping[str, Any]], class_label: bool
) -> _Resolved | list[str]:
    """The rows the label values name, or ``kind: value`` for each unknown one."""
    missing = []
    tenant = names["tenant"].get(labels.tenant)
    model = names["model"].get(labels.model)
    region = names["region"].get(labels.region)
    cls = names["class"].get(labels.workload_class)
    if tenant is None:
        missing.append(f"tenant: {labels.tenant}")
    if model is None:
        missing.append(f"model: {labels.model}")
    if region is None:
        missing.append(f"region: {labels.region}")
    if cls is None and class_label:
        missing.append(f"workload class: {labels.workload_class}")
    if missing or tenant is None or model is None or region is None:
        return missing
    if cls is None:
        cls, _ = WorkloadClass.objects.get_or_create(
            name=OBSERVED_CLASS,
            defaults={"description": "All of a tenant's traffic, as telemetry sees it."},
        )
    return _Resolved(tenant, model, region, cls)


@dataclass
class _Versioned:
    resolved: _Resolved
    observation: Observation
    before: WorkloadProfile | None
    after: WorkloadProfile


def workload_profiles_derive(
    *,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
    now: datetime | None = None,
) -> ProfileDerivation:
    """Derive workload profiles from the samples of [start, end) and check them for drift.

    Default window: the ``profile_window_s`` up to the last pulled bucket. All writes happen in
    one transaction; a failure leaves a failed ``ProfileDerivation`` and nothing else.
    """
    # The width the samples were stored at, whatever this process's setting says.
    conf = replace(telemetry_settings(), bucket_s=selectors.stored_bucket_s())
    width = conf.bucket_s
    end = window_end or selectors.last_pulled_until(bucket_s=width) or (now or timezone.now())
    start = window_start or end - timedelta(seconds=conf.profile_window_s)
    run = ProfileDerivation.objects.create(window_start=start, window_end=end)
    try:
        with transaction.atomic():
            _derive(run, conf, start, end)
            run.status = RunStatus.SUCCEEDED
            run.finished_at = timezone.now()
            run.save()
    except Exception as exc:
        run.refresh_from_db()
        run.status = RunStatus.FAILED
        run.error = f"{type(exc).__name__}: {exc}"
        run.finished_at = timezone.now()
        run.save()
        raise
    if run.unknown_labels:
        logger.warning(
            "profile derivation %s: label values the database does not know: %s",
            run.pk,
            ", ".join(run.unknown_labels),
        )
    return run


def arrival_burstiness(
    labels: LabelSet,
    buckets: Sequence[tuple[datetime, float]],
    bucket_s: int,
    start: datetime,
    end: datetime,
) -> dict[str, float | int | None]:
    """How clumped the label set's arrivals are: from its request log's trace where one
    overlaps the window (1 s resolution), else from the request counts per bucket (at the
    bucket width, the finest a pull allows; a bucket with no sample counts 0)."""
    if labels.tenant:
        trace = traces.trace_latest(
            tenant=labels.tenant,
            model=labels.model,
            region=labels.region,
            start=start,
            end=end,
        )
        if trace is not None and trace.burstiness:
            return dict(trace.burstiness)
    if not buckets:
        return {}
    index = sorted({math.floor(stamp.timestamp() / bucket_s) for stamp, _ in buckets})
    counts = np.zeros(index[-1] - index[0] + 1)
    for stamp, value in buckets:
        counts[math.floor(stamp.timestamp() / bucket_s) - index[0]] += value
    return burstiness.from_counts(counts, float(bucket_s)).as_dict()


def _derive(
    run: ProfileDerivation, conf: TelemetrySettings, start: datetime, end: datetime
) -> None:
    grouped = attribute(
        collect(selectors.window_totals(bucket_s=conf.bucket_s, start=start, end=end))
    )
    request_values = selectors.bucket_values(
        series_ids=[i for c in grouped.values() for i in (*c.request_series, *c.arrival_series)],
        start=start,
        end=end,
    )
    names: dict[str, dict[str, Any]] = {
        "tenant": {t.name: t for t in Tenant.objects.select_related("home_region")},
        "model": {m.name: m for m in LlmModel.objects.all()},
        "region": {r.name: r for r in Region.objects.all()},
        "class": {c.name: c for c in WorkloadClass.objects.all()},
    }
    class_label = conf.labels.workload_class is not None
    unknown: set[str] = set()
    skipped: list[dict[str, str]] = []
    measured: list[tuple[Observation, _Resolved | None]] = []
    pools: list[Observation] = []
    for labels in sorted(grouped, key=str):
        collected = grouped[labels]
        buckets = [v for i in collected.request_series for v in request_values.get(i, [])]
        arrivals = [v for i in collected.arrival_series for v in request_values.get(i, [])]
        try:
            obs = observe(
                labels,
                collected,
                buckets,
                bucket_s=conf.bucket_s,
                min_requests=conf.min_requests,
                peak_s=conf.peak_s,
                arrival_buckets=arrivals,
            )
        except NotEnoughData as exc:
            skipped.append({"series": str(labels), "reason": str(exc)})
            continue
        # Arrivals where the engine counts them, else completions (as the rates are read).
        counted = arrivals or buckets
        obs = replace(
            obs, burstiness=arrival_burstiness(labels, counted, conf.bucket_s, start, end)
        )
        if not labels.tenant:
            pools.append(obs)
            continue
        found = _resolve(labels, names, class_label)
        if isinstance(found, list):
            unknown.update(found)
            skipped.append({"series": str(labels), "reason": "unknown " + "; ".join(found)})
            measured.append((obs, None))
        else:
            measured.append((obs, found))

    pool_tenants: dict[tuple[str, str], list[str]] = {}
    attributed = {(o.labels.model, o.labels.region) for o, _ in measured}
    for obs in pools:
        labels = obs.labels
        if (labels.model, labels.region) in attributed:
            # The tenants' demand is measured apart (a gateway, a request log): the pool's own
            # series are its capacity signals.
            skipped.append({"series": str(labels), "reason": "pool capacity signals only"})
            measured.append((obs, None))
            continue
        if conf.gateway:
            # The gateway is how tenants are told apart: a pool it measured no tenant in
            # (its names not found, the pool not behind it) is nobody's demand, never the
            # first tenant's.
            reason = f"the gateway ({conf.gateway}) measured no tenant in this pool"
            skipped.append({"series": str(labels), "reason": reason})
            measured.append((obs, None))
            continue
        model, region = names["model"].get(labels.model), names["region"].get(labels.region)
        tenants = (
            selectors.pool_tenant_names(model=model, region=region) if model and region else []
        )
        found = _resolve(
            LabelSet(
                tenants[0] if tenants else "", labels.model, labels.region, labels.workload_class
            ),
            names,
            class_label,
        )
        if isinstance(found, list):
            missing = [m for m in found if not m.startswith("tenant")]
            unknown.update(missing)
            reason = (
                "unknown " + "; ".join(missing)
                if missing
                else "no tenant label and no tenant has a profile in this pool"
            )
            skipped.append({"series": str(labels), "reason": reason})
            measured.append((obs, None))
            continue
        # Tenants that cannot be told apart: the pool is one demand, filed under the first of
        # its tenants by name, naming them all (a pool of one tenant is simply its traffic).
        pool_tenants[(labels.model, labels.region)] = tenants if len(tenants) > 1 else []
        measured.append((obs, found))

    # Each pool's token shares as they stand before this run writes anything: a tenant's
    # share is compared pool state to pool state, not against the others' new figures.
    shares_before = {
        (r.model.pk, r.region.pk): pool_token_shares(model=r.model, region=r.region)
        for _, r in measured
        if r is not None
    }
    observed: list[ObservedWorkload] = []
    versioned: list[_Versioned] = []
    for obs, resolved in measured:
        profile: WorkloadProfile | None = None
        if resolved is not None:
            try:
                before, profile = _version(
                    resolved,
                    obs,
                    conf.profile_tolerance,
                    pool_tenants.get((obs.labels.model, obs.labels.region), [])
                    if not obs.labels.tenant
                    else [],
                )
            except ValidationError as exc:
                skipped.append({"series": str(obs.labels), "reason": f"not a valid profile: {exc}"})
            else:
                if profile is before:
                    run.profiles_unchanged += 1
                else:
                    run.profiles_created += 1
                versioned.append(_Versioned(resolved, obs, before, profile))
        observed.append(_observed_row(run, obs, profile))
    ObservedWorkload.objects.bulk_create(observed)
    # Drift after every version is written, so each pool's "after" holds this run's figures.
    touched: list[DriftAlert] = []
    for item in versioned:
        pool = (item.resolved.model.pk, item.resolved.region.pk)
        outcome = drift_check(
            before=item.before,
            after=item.after,
            share_before=shares_before[pool].get(item.resolved.tenant.pk),
            thresholds=conf.drift,
            now=end,
            derivation=run,
        )
        run.alerts_raised += outcome.raised
        run.alerts_updated += outcome.updated
        run.alerts_resolved += outcome.resolved
        touched.extend(outcome.alerts)
    # Each pool's drift sums its tenants' alerts; it is priced after the derivation commits.
    pool_drift_update(derivation=run, alerts=touched, now=end)
    run.unknown_labels = sorted(unknown)
    run.skipped = skipped


def _version(
    resolved: _Resolved, obs: Observation, tolerance: float, pool_tenants: list[str]
) -> tuple[WorkloadProfile | None, WorkloadProfile]:
    """(profile before, profile after): a new telemetry version when the figures moved.
    ``pool_tenants``: the tenants a pool-wide profile stands for (empty: this tenant's own)."""
    before = selectors.current_profile(
        tenant=resolved.tenant,
        model=resolved.model,
        workload_class_id=resolved.workload_class.pk,
        region=resolved.region,
    )
    figures = _profile_figures(obs, before)
    censored = list(obs.censored)
    unmeasured = ["prefix_cache_hit_rate"] if obs.prefix_cache_hit_rate is None else []
    if (
        before is not None
        and not _changed(before, figures, tolerance)
        and list(before.censored) == censored
        and _same_buckets(before, obs)
        and list(before.unmeasured) == unmeasured
        and list(before.pool_tenants) == pool_tenants
    ):
        return before, before
    profile = WorkloadProfile(
        tenant=resolved.tenant,
        model=resolved.model,
        workload_class=resolved.workload_class,
        region=resolved.region,
        version=(before.version + 1) if before is not None else 1,
        source=WorkloadProfile.Source.TELEMETRY,
        censored=censored,
        percentile_bounds=dict(obs.percentile_bounds),
        coarse=list(obs.coarse),
        unmeasured=unmeasured,
        pool_tenants=pool_tenants,
        burstiness=dict(obs.burstiness),
        **figures,
    )
    profile.full_clean()
    profile._change_reason = "derived from telemetry"  # type: ignore[attr-defined]
    profile.save()
    return before, profile


def _same_buckets(before: WorkloadProfile, obs: Observation) -> bool:
    """Whether a measured profile's buckets still say what the observation's do. Bounds that
    moved with figures inside the tolerance make no new version (a 1% grid would make one each
    run); a figure turning coarse, or a measured profile stored without bounds, does. A
    declared profile the measurement matches stays as it is."""
    if before.source != WorkloadProfile.Source.TELEMETRY:
        return True
    return list(before.coarse) == list(obs.coarse) and set(before.percentile_bounds) == set(
        obs.percentile_bounds
    )


def _observed_row(
    run: ProfileDerivation, obs: Observation, profile: WorkloadProfile | None
) -> ObservedWorkload:
    return ObservedWorkload(
        derivation=run,
        tenant=obs.labels.tenant,
        model=obs.labels.model,
        region=obs.labels.region,
        workload_class=obs.labels.workload_class,
        profile=profile,
        requests=obs.requests,
        buckets=obs.buckets,
        mean_requests_per_s=obs.mean_requests_per_s,
        peak_requests_per_s=obs.peak_requests_per_s,
        prompt_tokens_p50=obs.prompt[0],
        prompt_tokens_mean=obs.prompt[1],
        prompt_tokens_p90=obs.prompt_p90,
        prompt_tokens_p95=obs.prompt[2],
        prompt_tokens_p99=obs.prompt[3],
        output_tokens_p50=obs.output[0],
        output_tokens_mean=obs.output[1],
        output_tokens_p90=obs.output_p90,
        output_tokens_p95=obs.output[2],
        output_tokens_p99=obs.output[3],
        prefix_cache_hit_rate=obs.prefix_cache_hit_rate,
        censored=list(obs.censored),
        percentile_bounds=dict(obs.percentile_bounds),
        coarse=list(obs.coarse),
        ttft_p95_s=obs.ttft_p95_s,
        residence_s=obs.residence_s,
        kv_cache_usage_mean=obs.kv_cache_usage_mean,
        running_mean=obs.running_mean,
        waiting_mean=obs.waiting_mean,
        preemptions_per_s=obs.preemptions_per_s,
        burstiness=dict(obs.burstiness),
        rate_source=obs.rate_source,
        itl_mean_s=obs.latency.itl_mean_s,
        itl_p95_s=obs.latency.itl_p95_s,
        queue_time_mean_s=obs.latency.queue_mean_s,
        queue_time_p95_s=obs.latency.queue_p95_s,
        kv_cache_capacity_tokens=obs.latency.kv_capacity_tokens,
    )


def derivation_follows_pull(*, pull: TelemetryPull) -> bool:
    """Whether a pull's task should go on to derive profiles: it succeeded, stored new samples
    (a window pulled again stores none, and would derive the same profiles) and
    ``HEADROOM_TELEMETRY_DERIVE_AFTER_PULL`` is on."""
    return (
        bool(settings.HEADROOM_TELEMETRY_DERIVE_AFTER_PULL)
        and pull.status == RunStatus.SUCCEEDED
        and pull.samples_stored > 0
    )
