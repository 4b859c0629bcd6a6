"""Tenant policy: tiers (SLO, failure promise, priority), tenants with residency and spill
rules, token budgets, and workload profiles per tenant, model and class.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from simple_history.models import HistoricalRecords

from controlplane.core.records import Revisioned
from controlplane.core.validators import (
    RTT_MS,
    SHARE,
    TOKENS_PER_REQUEST,
    UTILIZATION_TARGET,
    Bounds,
    at_least_one,
    fraction_closed,
    quantile_open,
    slug_validator,
)
from controlplane.fleet.models import Geography, LlmModel, Region, WorkloadClass
from planner.capacity.sizing import DEFAULT_TARGET_UTILIZATION

# The ranges of the policy figures (``core.validators.Bounds``); the help texts quote them.
TTFT_SLO_S = Bounds(0.01, 600, "s")  # 10 ms to 10 minutes
ITL_SLO_S = Bounds(0.001, 10, "s")  # 1 ms to 10 s between tokens
TIER_PRIORITY = Bounds(0, 1000)
BURST_FACTOR = Bounds(1, 10)
FORECAST_QUANTILE = Bounds(0.05, 0.999)
FAIR_SHARE_WEIGHT = Bounds(0.01, 1000)
BUDGET_RATE = Bounds(0.01, 100_000, "replica-seconds per second")  # up to a whole fleet
BUDGET_BURST = Bounds(0.01, 10_000_000_000, "replica-seconds")  # a day of a whole fleet
TOKENS_PER_MINUTE = Bounds(1, 1_000_000_000_000, "tokens per minute")
PROFILE_VERSION = Bounds(1, 1_000_000_000)
PEAK_REQUESTS_PER_S = Bounds(0, 100_000, "requests per second")
RESIDENCE_S = Bounds(0.001, 3600, "s")


class Tier(Revisioned):
    class Promise(models.TextChoices):
        NONE = "none", "none"
        N_PLUS_1 = "n+1", "N+1 (survive one replica)"
        ZONE = "zone", "survive a zone"

    name = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    p95_ttft_slo_s = models.FloatField(
        validators=TTFT_SLO_S.validators,
        help_text=TTFT_SLO_S.help("p95 time to first token, seconds."),
    )
    p95_itl_slo_s = models.FloatField(
        null=True,
        blank=True,
        validators=ITL_SLO_S.validators,
        help_text=ITL_SLO_S.help(
            "p95 inter-token latency, seconds; empty = no objective (only measured and shown)."
        ),
    )
    failure_promise = models.CharField(max_length=8, choices=Promise.choices, default=Promise.NONE)
    hosted_overflow = models.BooleanField(
        default=False,
        help_text=(
            "May this tier's demand overflow to a hosted provider (within residency, the "
            "provider's quota and this tier's TTFT objective) instead of going unserved or "
            "onto dearer replicas?"
        ),
    )
    priority = models.PositiveIntegerField(
        default=0,
        validators=TIER_PRIORITY.validators,
        help_text=TIER_PRIORITY.help(
            "0 is most important; lower numbers are served first in shortage."
        ),
    )
    target_utilization = models.FloatField(
        default=DEFAULT_TARGET_UTILIZATION,
        validators=UTILIZATION_TARGET.validators,
        help_text=UTILIZATION_TARGET.help(
            "Share of a replica this tier's load may fill; 1 = no headroom."
        ),
    )
    burst_factor = models.FloatField(
        default=1.0,
        validators=BURST_FACTOR.validators,
        help_text=BURST_FACTOR.help("Planned rate = peak rate × this (1 = no burst allowance)."),
    )
    forecast_quantile = models.FloatField(
        default=0.9,
        validators=FORECAST_QUANTILE.validators,
        help_text=FORECAST_QUANTILE.help(
            "Quantile of the demand forecast's band that re-planning sizes this tier for; "
            "premium tiers higher (0.99), best-effort ones lower."
        ),
    )
    history = HistoricalRecords()

    class Meta:
        ordering = ["priority", "name"]

    def __str__(self) -> str:
        return self.name


class Tenant(Revisioned):
    name = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    display_name = models.CharField(max_length=200, blank=True)
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="tenants")
    home_region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="+")
    residency_geography = models.ForeignKey(
        Geography,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Data may be served only in this geography (empty = anywhere).",
    )
    residency_regions = models.ManyToManyField(
        Region,
        blank=True,
        related_name="resident_tenants",
        help_text="Data may be served only in these regions (empty = no region list).",
    )
    spill_allowed = models.BooleanField(
        default=False, help_text="May traffic be served outside the home region?"
    )
    max_spill_rtt_ms = models.FloatField(
        null=True,
        blank=True,
        validators=RTT_MS.validators,
        help_text=RTT_MS.help("Largest round trip from the home region that spill may add."),
    )
    fair_share_weight = models.FloatField(
        default=1.0,
        validators=FAIR_SHARE_WEIGHT.validators,
        help_text=FAIR_SHARE_WEIGHT.help("Share of a shortage's capacity, relative to others."),
    )
    history = HistoricalRecords(m2m_fields=[residency_regions])

    class Meta:
        ordering = ["name"]

    @property
    def etag(self) -> str:
        """The tenant as the API shows it, its quota included: a quota change is a new tag.

        (Without the quota's revision, a client holding a stale quota would get 304.)
        """
        quota = getattr(self, "quota", None)  # a missing quota raises an AttributeError
        quota_revision = quota.revision if quota is not None else 0
        return f'"tenant-{self.pk}-{self.revision}-q{quota_revision}"'

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.spill_allowed and self.max_spill_rtt_ms is None:
            raise ValidationError(
                {"max_spill_rtt_ms": "Spill is allowed, so give the largest rtt it may add."}
            )
        if (
            self.residency_geography_id is not None
            and self.home_region_id is not None
            and self.home_region.geography_id != self.residency_geography_id
        ):
            raise ValidationError(
                {
                    "home_region": (
                        f"Home region {self.home_region.name} is in "
                        f"{self.home_region.geography.name}, outside the residency geography "
                        f"{self.residency_geography.name if self.residency_geography else ''}."
                    )
                }
            )

    def allowed_regions(self, every_region: Iterable[Region] | None = None) -> list[Region]:
        """Regions this tenant's data may be served in, by its residency rule.

        ``every_region``: all regions, read once by a caller that asks for many tenants (with
        their residency regions prefetched), so that no query is made per tenant."""
        regions = list(self.residency_regions.all())
        if regions:
            if self.residency_geography_id is not None:
                regions = [r for r in regions if r.geography_id == self.residency_geography_id]
            return sorted(regions, key=lambda r: r.name)
        if every_region is not None:
            return sorted(
                (
                    r
                    for r in every_region
                    if self.residency_geography_id is None
                    or r.geography_id == self.residency_geography_id
                ),
                key=lambda r: r.name,
            )
        qs = Region.objects.all()
        if self.residency_geography_id is not None:
            qs = qs.filter(geography_id=self.residency_geography_id)
        return list(qs.order_by("name"))


def validate_residency_regions(
    *,
    home_region: Region | None,
    geography: Geography | None,
    regions: Iterable[Region],
) -> None:
    """Check a residency region list against the home region and geography.

    Many-to-many values are not visible to ``Model.clean()``, so forms, serializers and the
    scenario loader call this before saving.
    """
    region_list = list(regions)
    if not region_list:
        return
    if geography is not None:
        outside = sorted(r.name for r in region_list if r.geography_id != geography.pk)
        if outside:
            raise ValidationError(
                {
                    "residency_regions": (
                        f"{', '.join(outside)} lie outside the residency geography "
                        f"{geography.name}."
                    )
                }
            )
    if home_region is not None and home_region.pk not in {r.pk for r in region_list}:
        raise ValidationError(
            {
                "residency_regions": (
                    f"The home region {home_region.name} must be one of the residency regions."
                )
            }
        )


class TenantQuota(Revisioned):
    """A tenant's budgets: a token bucket in estimated replica-seconds, and TPM limits."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")
    budget_rate_replica_s_per_s = models.FloatField(
        validators=BUDGET_RATE.validators,
        help_text=BUDGET_RATE.help("Refill rate of the budget, replica-seconds per second."),
    )
    budget_burst_replica_s = models.FloatField(
        validators=BUDGET_BURST.validators,
        help_text=BUDGET_BURST.help("Bucket size, replica-seconds."),
    )
    tokens_per_minute_limit = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        validators=TOKENS_PER_MINUTE.validators,
        help_text=TOKENS_PER_MINUTE.help("Sustained tokens per minute (input + output)."),
    )
    tokens_per_minute_burst = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        validators=TOKENS_PER_MINUTE.validators,
        help_text=TOKENS_PER_MINUTE.help("Short-term ceiling, tokens per minute."),
    )
    history = HistoricalRecords()

    class Meta:
        verbose_name = "tenant quota"

    def __str__(self) -> str:
        return f"quota of {self.tenant}"

    def clean(self) -> None:
        if (
            self.tokens_per_minute_limit is not None
            and self.tokens_per_minute_burst is not None
            and self.tokens_per_minute_burst < self.tokens_per_minute_limit
        ):
            raise ValidationError(
                {
                    "tokens_per_minute_burst": (
                        "The burst ceiling is below the sustained limit "
                        f"({self.tokens_per_minute_burst} < {self.tokens_per_minute_limit})."
                    )
                }
            )
        if (
            self.budget_burst_replica_s is not None
            and self.budget_rate_replica_s_per_s is not None
            and self.budget_burst_replica_s < self.budget_rate_replica_s_per_s
        ):
            raise ValidationError(
                {
                    "budget_burst_replica_s": (
                        "The bucket holds less than one second of refill; make the burst at "
                        "least the rate."
                    )
                }
            )


# The measured figures of a workload profile: what a derivation compares to decide whether a
# measurement is a new version, and what the telemetry API shows of each.
PROFILE_FIGURES = (
    "peak_requests_per_s",
    "prompt_tokens_p50",
    "prompt_tokens_mean",
    "prompt_tokens_p90",
    "prompt_tokens_p95",
    "prompt_tokens_p99",
    "output_tokens_p50",
    "output_tokens_mean",
    "output_tokens_p90",
    "output_tokens_p95",
    "output_tokens_p99",
    "prefix_cache_hit_rate",
    "residence_s",
)

# The figures a telemetry derivation reads from histogram buckets (the length percentiles):
# each carries its bucket's bounds in ``percentile_bounds``.
BUCKET_PERCENTILES = tuple(
    name for name in PROFILE_FIGURES if name.rsplit("_", 1)[-1] in ("p50", "p90", "p95", "p99")
)


def bucket_ranges(
    values: Mapping[str, float | None],
    bounds: Mapping[str, Sequence[float | None]],
    coarse: Iterable[str],
) -> dict[str, str]:
    """How each coarse percentile reads: "between 2,000 and 5,000", its bucket's bounds in
    tokens (the lower rounded down, the upper up). A figure whose value no longer lies in its
    bucket (edited since) reads as its value alone and is left out."""
    out: dict[str, str] = {}
    for name in coarse:
        bucket = bounds.get(name)
        value = values.get(name)
        if not bucket or len(bucket) != 2 or value is None:
            continue
        lower, upper = bucket
        if lower is None or upper is None or not lower <= value <= upper:
            continue
        out[name] = f"between {math.floor(lower):,} and {math.ceil(upper):,}"
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _bounds_errors(bounds: Any, coarse: Any) -> dict[str, str]:
    """What is wrong with a ``percentile_bounds`` and ``coarse`` pair, by field."""
    errors: dict[str, str] = {}
    if not isinstance(bounds, dict):
        return {"percentile_bounds": "Must be an object of figure: [lower, upper]."}
    for name, bucket in bounds.items():
        if name not in BUCKET_PERCENTILES:
            errors["percentile_bounds"] = f"{name!r} is not a length percentile."
        elif (
            not isinstance(bucket, list | tuple)
            or len(bucket) != 2
            or not _number(bucket[0])
            or not (bucket[1] is None or _number(bucket[1]))
            or (bucket[1] is not None and bucket[1] < bucket[0])
        ):
            errors["percentile_bounds"] = (
                f"{name}: must be [lower, upper] with lower ≤ upper (upper null: censored)."
            )
    if not isinstance(coarse, list) or not all(isinstance(n, str) for n in coarse):
        errors["coarse"] = "Must be a list of figure names."
    elif unknown := [n for n in coarse if n not in bounds]:
        errors["coarse"] = f"{', '.join(unknown)}: no bucket bounds for these figures."
    return errors


def _tokens(text: str, *, optional: bool = False) -> models.FloatField[float | None, float]:
    """A token-length figure of a workload profile, within ``TOKENS_PER_REQUEST``."""
    return models.FloatField(
        null=optional,
        blank=optional,
        validators=TOKENS_PER_REQUEST.validators,
        help_text=TOKENS_PER_REQUEST.help(text),
    )


class WorkloadProfile(models.Model):
    """What a tenant sends to one model in one class, as distributions (not averages).

    Versioned: a new measurement or declaration is a new row with a higher ``version``; the
    highest version of a (tenant, model, class, region) is the current one.
    """

    class Source(models.TextChoices):
        DECLARED = "declared", "declared"
        TELEMETRY = "telemetry", "from telemetry"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="profiles")
    model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="profiles")
    workload_class = models.ForeignKey(
        WorkloadClass, on_delete=models.PROTECT, related_name="profiles"
    )
    region = models.ForeignKey(
        Region,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Where this traffic originates; empty = the tenant's home region.",
    )
    version = models.PositiveIntegerField(
        default=1, validators=PROFILE_VERSION.validators, help_text=PROFILE_VERSION.help()
    )
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.DECLARED)
    peak_requests_per_s = models.FloatField(
        validators=PEAK_REQUESTS_PER_S.validators,
        help_text=PEAK_REQUESTS_PER_S.help(
            "Rate at peak: the busiest minute (telemetry: HEADROOM_TELEMETRY_PEAK_S)."
        ),
    )
    prompt_tokens_p50 = _tokens("Prompt tokens per request, median.")
    prompt_tokens_mean = _tokens("Prompt tokens per request, mean.")
    prompt_tokens_p90 = _tokens("Prompt tokens per request, p90.", optional=True)
    prompt_tokens_p95 = _tokens("Prompt tokens per request, p95.")
    prompt_tokens_p99 = _tokens("Prompt tokens per request, p99.")
    output_tokens_p50 = _tokens("Output tokens per request, median.")
    output_tokens_mean = _tokens("Output tokens per request, mean.")
    output_tokens_p90 = _tokens("Output tokens per request, p90.", optional=True)
    output_tokens_p95 = _tokens("Output tokens per request, p95.")
    output_tokens_p99 = _tokens("Output tokens per request, p99.")
    prefix_cache_hit_rate = models.FloatField(
        default=0.0,
        validators=SHARE.validators,
        help_text=SHARE.help("Share of prompt tokens served from the prefix cache."),
    )
    censored = models.JSONField(
        default=list,
        blank=True,
        help_text="Figures that are lower bounds (≥ the value): a telemetry percentile beyond "
        "the top histogram bucket.",
    )
    percentile_bounds = models.JSONField(
        default=dict,
        blank=True,
        help_text="The histogram bucket each telemetry percentile was read in, tokens: "
        '{"prompt_tokens_p99": [2000, 5000]}; the upper bound is null beyond the top bucket '
        "(censored). Empty for declared figures.",
    )
    coarse = models.JSONField(
        default=list,
        blank=True,
        help_text="Percentiles read in a bucket wider than 10% of its upper bound "
        '(telemetry.histograms.COARSE_RELATIVE_WIDTH): interpolated, they read "between" the '
        "bounds.",
    )
    unmeasured = models.JSONField(
        default=list,
        blank=True,
        help_text="Figures telemetry could not measure (e.g. the engine has no prefix-cache "
        "counters); their value is carried from the previous version.",
    )
    pool_tenants = models.JSONField(
        default=list,
        blank=True,
        help_text="Telemetry could not tell this pool's tenants apart: the profile is the whole "
        "pool's demand, standing for these tenants (empty: this tenant's own traffic).",
    )
    residence_s = models.FloatField(
        null=True,
        blank=True,
        validators=RESIDENCE_S.validators,
        help_text=RESIDENCE_S.help("Mean time a request stays in the model stage, seconds."),
    )
    burstiness = models.JSONField(
        default=dict,
        blank=True,
        help_text="How clumped the arrivals are, from telemetry (planner.capacity.burstiness): "
        "peaks over 1, 10 and 60 s, the inter-arrival scv, the index of dispersion, and the "
        "resolution they were read at. Empty for a declared profile (Poisson is assumed).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    history = HistoricalRecords()

    class Meta:
        ordering = ["tenant__name", "model__name", "workload_class__name", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "model", "workload_class", "region", "version"],
                name="unique_profile_version",
            ),
            # An empty region (the home region) is NULL, and SQL holds no two NULLs equal, so
            # the constraint above never sees home-region duplicates; this partial one does.
            models.UniqueConstraint(
                fields=["tenant", "model", "workload_class", "version"],
                condition=models.Q(region__isnull=True),
                name="unique_profile_version_home_region",
                violation_error_message=(
                    "This tenant already has this version of the profile for this model and "
                    "class from its home region."
                ),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.model}/{self.workload_class} v{self.version}"

    def between(self) -> dict[str, str]:
        """The coarse percentiles as they read: ``{"prompt_tokens_p99": "between 2,000 and
        5,000"}`` (``bucket_ranges``)."""
        values = {name: getattr(self, name) for name in BUCKET_PERCENTILES}
        return bucket_ranges(values, self.percentile_bounds or {}, self.coarse or [])

    def clean(self) -> None:
        errors = _bounds_errors(self.percentile_bounds, self.coarse)
        if not errors:
            # A percentile edited out of the bucket it was read in no longer carries it.
            for name, (lower, upper) in list(self.percentile_bounds.items()):
                value = getattr(self, name)
                if value is None or value < lower or (upper is not None and value > upper):
                    del self.percentile_bounds[name]
                    self.coarse = [n for n in self.coarse if n != name]
        for kind in ("prompt", "output"):
            p50 = getattr(self, f"{kind}_tokens_p50")
            p95 = getattr(self, f"{kind}_tokens_p95")
            p99 = getattr(self, f"{kind}_tokens_p99")
            if None in (p50, p95, p99):
                continue
            if p95 < p50:
                errors[f"{kind}_tokens_p95"] = f"p95 ({p95:g}) is below p50 ({p50:g})."
            elif p99 < p95:
                errors[f"{kind}_tokens_p99"] = f"p99 ({p99:g}) is below p95 ({p95:g})."
        if errors:
            raise ValidationError(errors)


# The names earlier migrations give these validators.
_fraction_closed = fraction_closed
_quantile_open = quantile_open
_at_least_one = at_least_one
