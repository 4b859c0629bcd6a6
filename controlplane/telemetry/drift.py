"""Drift alerts with their replica impact (``planner.capacity``): checking a new profile
version against the one it supersedes, pool sizing, alert messages and acknowledgement.
"""

from __future__ import annotations

import copy
import logging
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.models import LlmModel, Region
from controlplane.policies.models import WorkloadProfile
from controlplane.telemetry import selectors
from controlplane.telemetry.conf import DriftThresholds
from controlplane.telemetry.models import DriftAlert, ProfileDerivation, RunStatus
from planner.capacity.sizing import replicas_needed
from planner.capacity.workload import request_cost

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolSizing:
    """Replicas a pool needs for a demand, on one shape at its planning target."""

    shape_name: str
    shape_id: int
    target_utilization: float
    demand_replica_s_per_s: float
    replicas: int


def profile_cost_s(profile: WorkloadProfile, prefill: float, decode: float) -> float:
    """Replica-seconds of this profile's mean request on a replica of the given rates."""
    return request_cost(
        profile.prompt_tokens_mean,
        profile.output_tokens_mean,
        prefill,
        decode,
        profile.prefix_cache_hit_rate,
    )


def pool_sizing(
    *, model: LlmModel, region: Region, replace: Mapping[int, WorkloadProfile] | None = None
) -> PoolSizing | None:
    """Replicas for the peak demand of every tenant's current profile in the pool.

    ``replace`` maps a tenant id to the profile that stands for that tenant instead (the
    "before" of a change). Demand is Σ peak rate × mean request cost, in replica-seconds per
    second, sized with ``planner.capacity.sizing.replicas_needed`` at the shape's target (or
    the fleet default). None when the model has no shape with a whole-mix capacity figure.
    """
    shape = selectors.pool_shape(model=model)
    if shape is None:
        return None
    profiles: dict[int, list[WorkloadProfile]] = {}
    for profile in selectors.pool_profiles(model=model, region=region):
        profiles.setdefault(profile.tenant_id, []).append(profile)
    for tenant_id, profile in (replace or {}).items():
        profiles[tenant_id] = [profile]
    demand = math.fsum(
        p.peak_requests_per_s
        * profile_cost_s(p, shape.prefill_tokens_per_s, shape.decode_tokens_per_s)
        for group in profiles.values()
        for p in group
    )
    target = shape.shape.target_utilization or float(settings.HEADROOM_DEFAULT_TARGET_UTILIZATION)
    return PoolSizing(
        shape_name=shape.shape.name,
        shape_id=shape.shape.pk,
        target_utilization=target,
        demand_replica_s_per_s=demand,
        replicas=replicas_needed(demand, 1.0, target),
    )


def _token_rate(profile: WorkloadProfile) -> float:
    """Prompt and output tokens per second at the profile's peak rate."""
    return profile.peak_requests_per_s * (profile.prompt_tokens_mean + profile.output_tokens_mean)


def pool_token_shares(*, model: LlmModel, region: Region) -> dict[int, float]:
    """Each tenant's share (0..1) of the pool's tokens per second at peak, by tenant id."""
    rates: dict[int, float] = defaultdict(float)
    for profile in selectors.pool_profiles(model=model, region=region):
        rates[profile.tenant_id] += _token_rate(profile)
    total = math.fsum(rates.values())
    return {tenant: rate / total if total > 0 else 0.0 for tenant, rate in rates.items()}


@dataclass(frozen=True)
class DriftOutcome:
    raised: int = 0
    updated: int = 0
    resolved: int = 0


def _kind_value(kind: str, profile: WorkloadProfile, region: Region) -> float:
    """The figure an alert kind watches, for a profile as it stands in its pool now."""
    if kind == DriftAlert.Kind.PROMPT_MEAN:
        return float(profile.prompt_tokens_mean)
    if kind == DriftAlert.Kind.OUTPUT_MEAN:
        return float(profile.output_tokens_mean)
    if kind == DriftAlert.Kind.CACHE_HIT_RATE:
        return float(profile.prefix_cache_hit_rate)
    shares = pool_token_shares(model=profile.model, region=region)
    return shares.get(profile.tenant_id, 0.0)


def _threshold(kind: str, thresholds: DriftThresholds) -> float:
    return {
        DriftAlert.Kind.PROMPT_MEAN: thresholds.prompt_mean_rel,
        DriftAlert.Kind.OUTPUT_MEAN: thresholds.output_mean_rel,
        DriftAlert.Kind.CACHE_HIT_RATE: thresholds.cache_hit_rate_abs,
        DriftAlert.Kind.TOKEN_SHARE: thresholds.token_share_abs,
    }[DriftAlert.Kind(kind)]


def _relative(kind: str) -> bool:
    return kind in (DriftAlert.Kind.PROMPT_MEAN, DriftAlert.Kind.OUTPUT_MEAN)


def drifted(kind: str, before: float, after: float, threshold: float) -> bool:
    """Whether a change is beyond the threshold: relative for lengths, absolute otherwise."""
    if _relative(kind):
        return abs(after - before) > threshold * max(abs(before), 1e-9)
    return abs(after - before) > threshold


def drift_check(
    *,
    before: WorkloadProfile | None,
    after: WorkloadProfile,
    share_before: float | None,
    thresholds: DriftThresholds,
    now: datetime,
    derivation: ProfileDerivation | None = None,
) -> DriftOutcome:
    """Raise, update or resolve the drift alerts of one (tenant, model, region, class);
    a raised alert records ``derivation`` as what raised it.

    An active (open or acknowledged) alert of a kind compares the new figures with its own
    baseline: back within the threshold resolves it, else it is updated (current value,
    replica impact, last seen, occurrences). Without one, a change from the superseded
    version ``before`` beyond the threshold raises a new alert; for the token share the
    "before" is ``share_before``, the tenant's share of the pool before this derivation
    (None: it had none).

    The replica impact is the pool's replicas with this tenant at its baseline profile and
    everyone else as they are now, against the pool as it is now: what this tenant's change
    costs.
    """
    region = after.region
    if region is None:  # telemetry profiles always name their region
        region = after.tenant.home_region
    raised = updated = resolved = 0
    active = {
        a.kind: a
        for a in DriftAlert.objects.filter(
            tenant=after.tenant,
            model=after.model,
            region=region,
            workload_class=after.workload_class,
            status__in=DriftAlert.ACTIVE,
        )
    }
    for kind in DriftAlert.Kind.values:
        threshold = _threshold(kind, thresholds)
        alert = active.get(kind)
        if alert is not None:
            baseline = alert.baseline_profile
            current = _kind_value(kind, after, region)
            if not drifted(kind, alert.baseline_value, current, threshold):
                alert.status = DriftAlert.Status.RESOLVED
                alert.resolved_at = now
                alert.current_value = current
                alert.current_profile = after
                alert.last_seen_at = now
                alert.save()
                resolved += 1
                continue
            _fill_alert(alert, kind, alert.baseline_value, current, baseline, after, region)
            alert.threshold = threshold
            alert.occurrences += 1
            alert.last_seen_at = now
            alert.save()
            updated += 1
            continue
        if before is None or before.pk == after.pk:
            continue
        if kind == DriftAlert.Kind.TOKEN_SHARE:
            if share_before is None:
                continue
            old = share_before
        else:
            old = _kind_value(kind, before, region)
        new = _kind_value(kind, after, region)
        if not drifted(kind, old, new, threshold):
            continue
        alert = DriftAlert(
            tenant=after.tenant,
            model=after.model,
            region=region,
            workload_class=after.workload_class,
            kind=kind,
            threshold=threshold,
            first_seen_at=now,
            last_seen_at=now,
            raised_by=derivation,
        )
        _fill_alert(alert, kind, old, new, before, after, region)
        alert.full_clean()
        alert.save()
        raised += 1
        logger.warning("drift alert %s: %s", alert.pk, alert.message)
    return DriftOutcome(raised, updated, resolved)


# The profile field each length or cache alert watches. Its replica impact varies that field
# alone, at the current request rate: the Friday review's question is what the longer prompts
# cost at a flat rate, and rate noise between two short windows must not mask (or invert) it.
_WATCHED_FIELDS = {
    DriftAlert.Kind.PROMPT_MEAN: "prompt_tokens_mean",
    DriftAlert.Kind.OUTPUT_MEAN: "output_tokens_mean",
    DriftAlert.Kind.CACHE_HIT_RATE: "prefix_cache_hit_rate",
}


def _impact_baseline(
    kind: str, baseline: WorkloadProfile, current: WorkloadProfile
) -> WorkloadProfile:
    """The profile that stands for "before" when pricing an alert of this kind.

    A token-share alert compares whole profiles (the share moves with the rate); the others
    take the current profile with only the watched figure set back to the baseline's.
    """
    field = _WATCHED_FIELDS.get(DriftAlert.Kind(kind))
    if field is None:
        return baseline
    standin = copy.copy(current)
    setattr(standin, field, getattr(baseline, field))
    return standin


def _fill_alert(
    alert: DriftAlert,
    kind: str,
    old: float,
    new: float,
    baseline: WorkloadProfile | None,
    current: WorkloadProfile,
    region: Region,
) -> None:
    """Set an alert's values, profiles, replica impact and message."""
    alert.baseline_value = old
    alert.current_value = new
    alert.baseline_profile = baseline
    alert.current_profile = current
    before = after = None
    if baseline is not None:
        after = pool_sizing(model=current.model, region=region)
        before = pool_sizing(
            model=current.model,
            region=region,
            replace={current.tenant_id: _impact_baseline(kind, baseline, current)},
        )
    # Without a baseline version (deleted since) the impact measured earlier still stands.
    if before is not None and after is not None:
        alert.shape_id = after.shape_id
        alert.target_utilization = after.target_utilization
        alert.replicas_before = before.replicas
        alert.replicas_after = after.replicas
    alert.message = drift_message(
        kind=kind,
        old=old,
        new=new,
        tenant=current.tenant.name,
        model=current.model.name,
        region=region.name,
        before=before,
        after=after,
    )


def drift_message(
    *,
    kind: str,
    old: float,
    new: float,
    tenant: str,
    model: str,
    region: str,
    before: PoolSizing | None,
    after: PoolSizing | None,
) -> str:
    """One line for an operator, e.g. "mean prompt length 1,500 → 2,700 tokens (+80%) …"."""
    label = DriftAlert.Kind(kind).label
    if _relative(kind):
        change = (new - old) / old * 100 if old else math.inf
        what = f"{label} {old:,.0f} → {new:,.0f} tokens ({change:+.0f}%)"
    else:
        what = f"{label} {old:.0%} → {new:.0%} ({(new - old) * 100:+.0f} points)"
    text = f"{what} for {tenant} on {model} in {region}"
    if before is None or after is None:
        return (
            text + ": replica impact unknown (no shape of the model has a whole-mix capacity "
            "figure, or the baseline version is gone)"
        )
    delta = after.replicas - before.replicas
    return (
        f"{text}: {delta:+d} replicas in {region} at the "
        f"{after.target_utilization:.0%} target ({before.replicas} → {after.replicas} × "
        f"{after.shape_name})"
    )


def drift_alert_acknowledge(
    *, alert: DriftAlert, user: AbstractBaseUser | AnonymousUser | None
) -> DriftAlert:
    """Mark an open alert as seen by ``user``; acknowledging twice changes nothing.

    A resolved alert cannot be acknowledged (``ValidationError`` on ``status``).
    """
    with transaction.atomic():
        locked = DriftAlert.objects.select_for_update().get(pk=alert.pk)
        if locked.status == DriftAlert.Status.RESOLVED:
            raise ValidationError(
                {"status": "This alert is resolved; there is nothing to acknowledge."}
            )
        if locked.status == DriftAlert.Status.ACKNOWLEDGED:
            return locked
        locked.status = DriftAlert.Status.ACKNOWLEDGED
        locked.acknowledged_at = timezone.now()
        locked.acknowledged_by = user  # type: ignore[assignment]
        locked._history_user = user  # type: ignore[attr-defined]
        locked.full_clean()
        locked.save()
    return locked


def drift_alerts_raised(*, derivation: ProfileDerivation) -> list[DriftAlert]:
    """The drift alerts this derivation raised (not those it only updated), oldest first.
    Empty for a failed derivation (its alerts were rolled back with it) or one that raised
    none."""
    if derivation.status != RunStatus.SUCCEEDED:
        return []
    return list(derivation.raised_alerts.select_related("tenant", "region").order_by("pk"))
