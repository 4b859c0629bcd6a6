"""Telemetry: serving metrics pulled from Prometheus, the workload they show, and drift.

- ``TelemetrySeries`` names one stored time series: the tenant, model, region (and class, when
  a class label is configured) label values as Prometheus reported them, the metric, the
  histogram bound ``le`` and the bucket width. Label values are kept as text, not foreign
  keys, so that traffic for a tenant the database does not know is still stored and reported.
- ``TelemetrySample`` is one bucket of one series, narrow and keyed by (series, bucket start):
  storing the same bucket twice stores nothing the second time. A counter's value is its
  increase over the bucket, a gauge's its mean over the bucket.
- ``TelemetryPull`` reports every pull attempt; ``ProfileDerivation`` every derivation run, and
  ``ObservedWorkload`` what it measured per (tenant, model, region, class).
- ``DriftAlert`` is a capacity-relevant change of one tenant's figures; at most one alert per
  series and kind is active (open or acknowledged) at a time.
- ``PoolDriftAlert`` sums every active tenant drift of one pool (a model in a region) and
  holds its price: the placement re-solved with the profiles before and after, replicas per
  region and shape, GPUs and $/h, and each tenant's share. At most one is active per pool.
- ``PoolSignalAlert`` is a pool's measured inter-token latency, queue time or KV-cache
  capacity against what its plan assumed; at most one per pool and kind is active.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from simple_history.models import HistoricalRecords

from controlplane.core.jobs import Job, JobStatus
from controlplane.fleet.models import LlmModel, Region, ReplicaShape, WorkloadClass
from controlplane.policies.models import (
    BUCKET_PERCENTILES,
    Tenant,
    WorkloadProfile,
    bucket_ranges,
)

# The workload class telemetry profiles are filed under when no class label is configured.
OBSERVED_CLASS = "observed"


class TelemetrySeries(models.Model):
    tenant = models.CharField(max_length=128)
    model = models.CharField(max_length=128)
    region = models.CharField(max_length=128)
    workload_class = models.CharField(
        max_length=128, blank=True, help_text="Empty when no class label is configured."
    )
    metric = models.CharField(max_length=128, help_text="Prometheus series name.")
    le = models.CharField(
        max_length=32, blank=True, help_text="Upper bound of a histogram bucket; else empty."
    )
    bucket_s = models.PositiveIntegerField(help_text="Width of each sample's bucket, seconds.")
    first_seen_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        db_table = "telemetry_series"
        verbose_name_plural = "telemetry series"
        ordering = ["tenant", "model", "region", "workload_class", "metric", "le"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "model", "region", "workload_class", "metric", "le", "bucket_s"],
                name="unique_telemetry_series",
            )
        ]
        indexes = [models.Index(fields=["tenant", "model", "region"], name="telemetry_series_key")]

    def __str__(self) -> str:
        le = f",le={self.le}" if self.le else ""
        cls = f"/{self.workload_class}" if self.workload_class else ""
        return f"{self.metric}{{{self.tenant}/{self.model}/{self.region}{cls}{le}}}"


class TelemetrySample(models.Model):
    pk = models.CompositePrimaryKey("series_id", "bucket_start")
    # The primary key's index leads with series_id: a second index on it would only slow
    # inserts down. No database constraint either: PostgreSQL checks a (deferred) foreign key
    # row by row at commit, which cost more than the insert itself (about 1.5 s per 200,000
    # samples, docs/benchmarks.md). Samples are only written with ids ``series_ids`` just
    # returned, in the same transaction, and deleting a series deletes its samples through
    # the ORM (on_delete=CASCADE).
    series = models.ForeignKey(
        TelemetrySeries,
        on_delete=models.CASCADE,
        related_name="samples",
        db_index=False,
        db_constraint=False,
    )
    bucket_start = models.DateTimeField()
    value = models.FloatField()

    class Meta:
        db_table = "telemetry_sample"
        ordering = ["series_id", "bucket_start"]

    def __str__(self) -> str:
        return f"{self.series_id} @ {self.bucket_start:%Y-%m-%d %H:%M:%S}: {self.value:g}"


# The one set of job statuses; pulls and derivations start running.
RunStatus = JobStatus
# A pull answered with warnings: its samples are stored but not final; the next pull takes its
# window again and overwrites them.
PULL_PARTIAL = "partial"


class TelemetryPull(Job):
    """One attempt to pull a window of telemetry from Prometheus."""

    task_id = models.CharField(max_length=64, blank=True)
    attempt = models.PositiveIntegerField(default=1, help_text="1 for the first try.")
    status = models.CharField(
        max_length=16,
        choices=[*JobStatus.choices, (PULL_PARTIAL, "partial (answered with warnings)")],
        default=JobStatus.RUNNING,
    )
    started_at = models.DateTimeField(default=timezone.now)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    bucket_s = models.PositiveIntegerField()
    queries = models.PositiveIntegerField(default=0)
    series_fetched = models.PositiveIntegerField(default=0)
    samples_fetched = models.PositiveIntegerField(default=0)
    samples_stored = models.PositiveIntegerField(
        default=0, help_text="New samples; buckets stored before are not counted."
    )
    skipped_series = models.PositiveIntegerField(
        default=0, help_text="Series without a model or region label."
    )
    unknown_labels = models.JSONField(
        default=list, blank=True, help_text="Label values no tenant, model or region has."
    )
    missing_metrics = models.JSONField(
        default=list,
        blank=True,
        help_text="Metrics no series answered, each with the names asked for "
        "('stored: exposed | fallback').",
    )

    class Meta:
        ordering = ["-started_at", "-pk"]
        indexes = [models.Index(fields=["status", "bucket_s", "-window_end"])]

    def __str__(self) -> str:
        return (
            f"pull {self.window_start:%Y-%m-%d %H:%M}–{self.window_end:%Y-%m-%d %H:%M} "
            f"(attempt {self.attempt}): {self.status}"
        )

    def summary(self) -> dict[str, Any]:
        """The report as plain data (a task's result)."""
        return {
            "pull": self.pk,
            "status": self.status,
            "attempt": self.attempt,
            "window_start": self.window_start.isoformat(),
            "window_end": self.window_end.isoformat(),
            "bucket_s": self.bucket_s,
            "samples_fetched": self.samples_fetched,
            "samples_stored": self.samples_stored,
            "unknown_labels": list(self.unknown_labels),
            "missing_metrics": list(self.missing_metrics),
            "error": self.error,
        }


class ProfileDerivation(Job):
    """One run deriving workload profiles from stored samples."""

    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.RUNNING)
    started_at = models.DateTimeField(default=timezone.now)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    profiles_created = models.PositiveIntegerField(default=0)
    profiles_unchanged = models.PositiveIntegerField(default=0)
    alerts_raised = models.PositiveIntegerField(default=0)
    alerts_updated = models.PositiveIntegerField(default=0)
    alerts_resolved = models.PositiveIntegerField(default=0)
    unknown_labels = models.JSONField(
        default=list, blank=True, help_text="Label values no tenant, model or region has."
    )
    skipped = models.JSONField(
        default=list, blank=True, help_text="Series left without a profile, and why."
    )

    class Meta:
        ordering = ["-started_at", "-pk"]

    def __str__(self) -> str:
        return (
            f"derivation {self.window_start:%Y-%m-%d %H:%M}–{self.window_end:%Y-%m-%d %H:%M}: "
            f"{self.status}"
        )

    def summary(self) -> dict[str, Any]:
        """The report as plain data (a task's result)."""
        return {
            "derivation": self.pk,
            "status": self.status,
            "window_start": self.window_start.isoformat(),
            "window_end": self.window_end.isoformat(),
            "profiles_created": self.profiles_created,
            "profiles_unchanged": self.profiles_unchanged,
            "alerts_raised": self.alerts_raised,
            "alerts_updated": self.alerts_updated,
            "alerts_resolved": self.alerts_resolved,
            "unknown_labels": list(self.unknown_labels),
            "skipped": list(self.skipped),
            "error": self.error,
        }


class ObservedWorkload(models.Model):
    """What one derivation measured for one (tenant, model, region, class) label set.

    Token lengths in tokens, rates in requests/s, times in seconds. ``profile`` is the workload
    profile version that holds these figures (new or unchanged), empty for label values the
    database does not know.
    """

    derivation = models.ForeignKey(
        ProfileDerivation, on_delete=models.CASCADE, related_name="observations"
    )
    tenant = models.CharField(max_length=128)
    model = models.CharField(max_length=128)
    region = models.CharField(max_length=128)
    workload_class = models.CharField(max_length=128)
    profile = models.ForeignKey(
        WorkloadProfile, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    requests = models.FloatField(help_text="Requests completed in the window.")
    buckets = models.PositiveIntegerField(help_text="Buckets with a request count.")
    mean_requests_per_s = models.FloatField()
    peak_requests_per_s = models.FloatField(
        help_text="Rate of the busiest peak window (HEADROOM_TELEMETRY_PEAK_S)."
    )
    prompt_tokens_p50 = models.FloatField()
    prompt_tokens_mean = models.FloatField()
    prompt_tokens_p90 = models.FloatField(null=True, blank=True)
    prompt_tokens_p95 = models.FloatField()
    prompt_tokens_p99 = models.FloatField()
    output_tokens_p50 = models.FloatField()
    output_tokens_mean = models.FloatField()
    output_tokens_p90 = models.FloatField(null=True, blank=True)
    output_tokens_p95 = models.FloatField()
    output_tokens_p99 = models.FloatField()
    prefix_cache_hit_rate = models.FloatField(
        null=True, blank=True, help_text="Empty: unknown (the engine has no prefix-cache counters)."
    )
    censored = models.JSONField(
        default=list, blank=True, help_text="Percentiles beyond the top bucket (lower bounds)."
    )
    percentile_bounds = models.JSONField(
        default=dict,
        blank=True,
        help_text="The bucket each length percentile was read in: {figure: [lower, upper]}, "
        "tokens; upper null beyond the top bucket.",
    )
    coarse = models.JSONField(
        default=list,
        blank=True,
        help_text="Percentiles read in a bucket wider than 10% of its upper bound "
        "(histograms.COARSE_RELATIVE_WIDTH): interpolated, rough figures.",
    )
    ttft_p95_s = models.FloatField(null=True, blank=True)
    residence_s = models.FloatField(null=True, blank=True, help_text="Mean end-to-end latency.")
    kv_cache_usage_mean = models.FloatField(null=True, blank=True)
    running_mean = models.FloatField(null=True, blank=True)
    waiting_mean = models.FloatField(null=True, blank=True)
    preemptions_per_s = models.FloatField(null=True, blank=True)
    burstiness = models.JSONField(
        default=dict,
        blank=True,
        help_text="How clumped the arrivals are (planner.capacity.burstiness): peaks over 1, "
        "10 and 60 s, the inter-arrival scv, the index of dispersion, and the resolution "
        "they were read at (1 s from a request log, the bucket width from a pull).",
    )

    class RateSource(models.TextChoices):
        ARRIVALS = "arrivals", "arrivals"
        COMPLETIONS = "completions", "completions"

    rate_source = models.CharField(
        max_length=16,
        choices=RateSource.choices,
        default=RateSource.COMPLETIONS,
        help_text="What the request rates count: arrivals (the engine's signal of requests "
        "admitted, metrics.ARRIVALS) or, where the engine has none, finished requests.",
    )
    itl_mean_s = models.FloatField(
        null=True, blank=True, help_text="Mean inter-token latency; empty: not exposed."
    )
    itl_p95_s = models.FloatField(null=True, blank=True)
    queue_time_mean_s = models.FloatField(
        null=True, blank=True, help_text="Mean time a request waited before it ran."
    )
    queue_time_p95_s = models.FloatField(null=True, blank=True)
    kv_cache_capacity_tokens = models.FloatField(
        null=True,
        blank=True,
        help_text="KV-cache capacity of one engine (replica), tokens: vLLM's num_gpu_blocks "
        "× block_size.",
    )

    class Meta:
        ordering = ["-derivation_id", "tenant", "model", "region", "workload_class"]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.model}/{self.region}/{self.workload_class}"

    def between(self) -> dict[str, str]:
        """The coarse percentiles as they read: "between 2,000 and 5,000"."""
        values = {name: getattr(self, name) for name in BUCKET_PERCENTILES}
        return bucket_ranges(values, self.percentile_bounds or {}, self.coarse or [])


class RequestTrace(models.Model):
    """The busiest hour of an imported request log for one (tenant, model, region): each
    request's arrival (seconds from ``start``) and token counts, kept so that a plan can be
    replayed against the real arrivals (``planner.placement.replay``).

    ``arrays`` is a NumPy ``.npz`` archive (``arrival_s`` float64, ``prompt_tokens`` and
    ``output_tokens`` int32): 16 bytes a request, so an hour of 20,000 requests is 320 kB.
    ``peak_requests_per_s`` is the log's busiest bucket of ``HEADROOM_TELEMETRY_PEAK_S`` (the
    figure its profile's rate is), which a replay scales to the demand's sized rate.
    """

    tenant = models.CharField(max_length=128)
    model = models.CharField(max_length=128)
    region = models.CharField(max_length=128)
    start = models.DateTimeField()
    end = models.DateTimeField()
    requests = models.PositiveIntegerField()
    peak_requests_per_s = models.FloatField()
    burstiness = models.JSONField(default=dict, blank=True)
    digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the arrays.")
    arrays = models.BinaryField()
    imported_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["tenant", "model", "region", "-start"]
        indexes = [models.Index(fields=["tenant", "model", "region", "start"])]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.model}/{self.region} from {self.start:%Y-%m-%d %H:%M}"


class DriftAlert(models.Model):
    """A capacity-relevant change of one tenant's workload in one pool, and what it costs."""

    class Kind(models.TextChoices):
        PROMPT_MEAN = "prompt-mean", "mean prompt length"
        OUTPUT_MEAN = "output-mean", "mean output length"
        CACHE_HIT_RATE = "cache-hit-rate", "prefix-cache hit rate"
        TOKEN_SHARE = "token-share", "share of the pool's tokens"

    class Status(models.TextChoices):
        OPEN = "open", "open"
        ACKNOWLEDGED = "acknowledged", "acknowledged"
        RESOLVED = "resolved", "resolved"

    ACTIVE = (Status.OPEN, Status.ACKNOWLEDGED)

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="drift_alerts")
    model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="+")
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="+")
    workload_class = models.ForeignKey(WorkloadClass, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    baseline_value = models.FloatField(help_text="Before: tokens, or a fraction for rates.")
    current_value = models.FloatField(help_text="Now, in the same unit.")
    threshold = models.FloatField(
        help_text="The change that raises an alert: relative for lengths, absolute otherwise."
    )
    raised_by = models.ForeignKey(
        "ProfileDerivation",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="raised_alerts",
        help_text="The profile derivation that raised the alert.",
    )
    pool_alert = models.ForeignKey(
        "PoolDriftAlert",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="tenant_alerts",
        help_text="The drift of the whole pool this alert is part of, and its price.",
    )
    pool_share = models.FloatField(
        null=True,
        blank=True,
        help_text="This tenant's share (a fraction; negative where it shrank) of the change in "
        "the load the pool's drift puts on the plan, replica-seconds per second.",
    )
    baseline_profile = models.ForeignKey(
        WorkloadProfile, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    current_profile = models.ForeignKey(
        WorkloadProfile, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    shape = models.ForeignKey(
        ReplicaShape,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The shape the pool's replicas are planned on, where they use one.",
    )
    target_utilization = models.FloatField(null=True, blank=True)
    replicas_before = models.PositiveIntegerField(
        null=True, blank=True, help_text="The pool's replicas before its drift (re-solved)."
    )
    replicas_after = models.PositiveIntegerField(
        null=True, blank=True, help_text="The pool's replicas with its drift (re-solved)."
    )
    message = models.TextField()
    occurrences = models.PositiveIntegerField(default=1)
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    history = HistoricalRecords()

    class Meta:
        ordering = ["-last_seen_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "model", "region", "workload_class", "kind"],
                condition=Q(status__in=["open", "acknowledged"]),
                name="one_active_drift_alert",
            )
        ]
        indexes = [models.Index(fields=["status", "-last_seen_at"])]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} of {self.tenant} in {self.region}: {self.status}"

    @property
    def replica_delta(self) -> int | None:
        if self.replicas_before is None or self.replicas_after is None:
            return None
        return self.replicas_after - self.replicas_before

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE


class PoolDriftAlert(models.Model):
    """The drift of one pool (a model in a region), priced the way the plan will pay it.

    It sums every active tenant alert of the pool (``tenant_alerts``): the placement is solved
    with the profiles the drifting tenants had before (of every active pool drift at once,
    ``drift_pools`` of them) and with the current ones, the same problem and solver a re-plan
    uses. ``replicas_before``/``after`` count the model's replicas in the region; GPUs and $/h
    are the whole plan's, so they are the re-plan's change; ``pools`` lists every region
    and shape either solution holds, ``tenants`` each drifting tenant's load before and after
    (replica-seconds per second) and its share of the change.
    """

    class Pricing(models.TextChoices):
        PENDING = "pending", "pending"
        PRICED = "priced", "priced"
        FAILED = "failed", "failed"

    ACTIVE = DriftAlert.ACTIVE

    model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="+")
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="+")
    status = models.CharField(
        max_length=16, choices=DriftAlert.Status.choices, default=DriftAlert.Status.OPEN
    )
    raised_by = models.ForeignKey(
        ProfileDerivation,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="raised_pool_alerts",
        help_text="The profile derivation that raised the pool's drift.",
    )
    changed_by = models.ForeignKey(
        ProfileDerivation,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="changed_pool_alerts",
        help_text="The last profile derivation that changed one of its tenant alerts.",
    )
    pricing = models.CharField(max_length=16, choices=Pricing.choices, default=Pricing.PENDING)
    pricing_error = models.TextField(blank=True)
    priced_at = models.DateTimeField(null=True, blank=True)
    inputs_hash = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 of the two problems last priced."
    )
    replicas_before = models.PositiveIntegerField(null=True, blank=True)
    replicas_after = models.PositiveIntegerField(null=True, blank=True)
    gpus_before = models.PositiveIntegerField(null=True, blank=True)
    gpus_after = models.PositiveIntegerField(null=True, blank=True)
    cost_per_hour_before = models.FloatField(null=True, blank=True)
    cost_per_hour_after = models.FloatField(null=True, blank=True)
    unserved_before = models.FloatField(
        null=True, blank=True, help_text="Requests/s (planned) the plan before leaves unserved."
    )
    unserved_after = models.FloatField(
        null=True, blank=True, help_text="Requests/s (planned) the plan after leaves unserved."
    )
    drift_pools = models.PositiveIntegerField(
        default=1,
        help_text="Active pool drifts reverted together for the plan's GPUs and $/h before.",
    )
    pools = models.JSONField(
        default=list,
        blank=True,
        help_text="Per region and shape: replicas, GPUs and $/h before and after.",
    )
    tenants = models.JSONField(
        default=list,
        blank=True,
        help_text="Per drifting tenant: its alerts, load before and after, share of the change.",
    )
    message = models.TextField()
    occurrences = models.PositiveIntegerField(default=1)
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["model", "region"],
                condition=Q(status__in=["open", "acknowledged"]),
                name="one_active_pool_drift_alert",
            )
        ]

    def __str__(self) -> str:
        return f"drift of {self.model} in {self.region}: {self.status}"

    @property
    def replica_delta(self) -> int | None:
        if self.replicas_before is None or self.replicas_after is None:
            return None
        return self.replicas_after - self.replicas_before

    @property
    def cost_per_hour_delta(self) -> float | None:
        if self.cost_per_hour_before is None or self.cost_per_hour_after is None:
            return None
        return self.cost_per_hour_after - self.cost_per_hour_before


class PoolSignalAlert(models.Model):
    """A pool's (a model in a region) serving signals against what its plan assumed.

    The engines' own latency and capacity signals, measured over the pool's last
    ``window_s`` (``HEADROOM_TELEMETRY_POOL_SIGNAL_WINDOW_S``), each against a reference:

    - ``itl-p95``: p95 inter-token latency above the capacity figure's (the seconds per token
      one sequence gets when a replica decodes its figure's full batch, ``max_concurrency /
      decode_tokens_per_s``) by more than ``threshold`` (relative);
    - ``queue-time-p95``: p95 time a request waited before it ran above ``threshold``
      (seconds; the reference is that threshold);
    - ``kv-capacity``: KV-cache tokens per engine below what the figure's concurrency needs
      (``max_concurrency`` sequences of the pool's mean prompt + output tokens) by more than
      ``threshold`` (relative): the plan's KV-bound concurrency is then wrong.

    ``figures`` keeps what the reference was read from (the shapes, their figures, the
    context per sequence) and ``shape`` the one shape, where the pool runs on one. At most
    one alert per pool and kind is active; it resolves when the signal is back within.
    """

    class Kind(models.TextChoices):
        ITL_P95 = "itl-p95", "p95 inter-token latency"
        QUEUE_TIME_P95 = "queue-time-p95", "p95 queue time"
        KV_CAPACITY = "kv-capacity", "KV-cache capacity"

    ACTIVE = DriftAlert.ACTIVE

    model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="+")
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    status = models.CharField(
        max_length=16, choices=DriftAlert.Status.choices, default=DriftAlert.Status.OPEN
    )
    shape = models.ForeignKey(
        ReplicaShape,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The shape the pool's replicas are planned on, where they use one.",
    )
    measured_value = models.FloatField(
        help_text="Now: seconds (latency, queue time) or tokens per engine (KV capacity)."
    )
    raised_value = models.FloatField(help_text="When raised, in the same unit.")
    reference_value = models.FloatField(
        help_text="What the plan assumed, in the same unit (for the queue time: the threshold)."
    )
    threshold = models.FloatField(
        help_text="The change that raises the alert: relative for latency and KV capacity, "
        "seconds for the queue time."
    )
    window_s = models.PositiveIntegerField(help_text="Seconds the signal was measured over.")
    figures = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the reference was read from: the plan, its shapes and figures.",
    )
    raised_by = models.ForeignKey(
        ProfileDerivation,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="raised_signal_alerts",
        help_text="The profile derivation after which the alert was raised.",
    )
    changed_by = models.ForeignKey(
        ProfileDerivation,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="changed_signal_alerts",
        help_text="The last profile derivation that checked the alert.",
    )
    message = models.TextField()
    occurrences = models.PositiveIntegerField(default=1)
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["model", "region", "kind"],
                condition=Q(status__in=["open", "acknowledged"]),
                name="one_active_pool_signal_alert",
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} of {self.model} in {self.region}: {self.status}"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE
