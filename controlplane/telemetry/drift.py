"""Drift alerts: a tenant's new profile version against the one it supersedes, and the drift of
each pool (a model in a region) summed over its tenants and priced the way the plan pays it.

- ``drift_check`` raises, updates or resolves one tenant's alerts (per kind: mean prompt or
  output length, prefix-cache hit rate, share of the pool's tokens) against thresholds.
- ``pool_drift_update`` gathers, after a derivation, every active tenant alert of each pool
  it touched into that pool's one active ``PoolDriftAlert``, to be priced.
- Pricing re-solves the placement (the re-plan's problem builder and solver) with the
  profiles before and after the drift; that needs the plans app, so it is not done here: the
  pipeline calls it after the derivation and records the result with ``pool_drift_priced``
  (or ``pool_drift_unpriced``). ``pool_drift_baselines`` says which profiles stood before.
- Messages: one line per alert for an operator, with the pool's replica and cost change.
"""

from __future__ import annotations

import copy
import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.models import LlmModel, Region, ReplicaShape
from controlplane.fleet.selectors import planning_target_utilization
from controlplane.policies.models import WorkloadProfile
from controlplane.telemetry import selectors
from controlplane.telemetry.conf import DriftThresholds
from controlplane.telemetry.models import DriftAlert, PoolDriftAlert, ProfileDerivation, RunStatus
from planner.placement.footprint import PoolChange

logger = logging.getLogger(__name__)


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
    """What one ``drift_check`` did; ``alerts`` are the alerts it raised, updated or resolved."""

    raised: int = 0
    updated: int = 0
    resolved: int = 0
    alerts: tuple[DriftAlert, ...] = ()


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


def _alert_region(profile: WorkloadProfile) -> Region:
    # Telemetry profiles always name their region; a declared one is served from home.
    return profile.region if profile.region is not None else profile.tenant.home_region


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
    profile, last seen, occurrences). Without one, a change from the superseded version
    ``before`` beyond the threshold raises a new alert; for the token share the "before" is
    ``share_before``, the tenant's share of the pool before this derivation (None: it had
    none).

    What a drift costs is not decided here, one tenant at a time: ``pool_drift_update`` sums
    the pool's alerts and the pipeline prices them together.
    """
    region = _alert_region(after)
    raised = updated = resolved = 0
    touched: list[DriftAlert] = []
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
            current = _kind_value(kind, after, region)
            alert.current_value = current
            alert.current_profile = after
            alert.last_seen_at = now
            if not drifted(kind, alert.baseline_value, current, threshold):
                alert.status = DriftAlert.Status.RESOLVED
                alert.resolved_at = now
                alert.message = drift_message(alert=alert)
                alert.save()
                resolved += 1
            else:
                alert.threshold = threshold
                alert.occurrences += 1
                alert.message = drift_message(alert=alert)
                alert.save()
                updated += 1
            touched.append(alert)
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
            baseline_value=old,
            current_value=new,
            baseline_profile=before,
            current_profile=after,
            first_seen_at=now,
            last_seen_at=now,
            raised_by=derivation,
        )
        alert.message = drift_message(alert=alert)
        alert.full_clean()
        alert.save()
        raised += 1
        touched.append(alert)
        logger.warning("drift alert %s: %s", alert.pk, alert.message)
    return DriftOutcome(raised, updated, resolved, tuple(touched))


# -- the pool's drift ---------------------------------------------------------------------------


def pool_drift_update(
    *, derivation: ProfileDerivation, alerts: Iterable[DriftAlert], now: datetime
) -> list[PoolDriftAlert]:
    """Gather the tenant alerts of every pool ``alerts`` touch into the pool's drift.

    A pool with active tenant alerts gets (or keeps) one active ``PoolDriftAlert`` holding all
    of them, marked for pricing and ``changed_by`` this derivation; a pool whose tenant
    alerts have all resolved has its pool alert resolved. Returns the pool alerts to price,
    by pool.
    """
    pools = sorted({(a.model_id, a.region_id) for a in alerts})
    out: list[PoolDriftAlert] = []
    for model_id, region_id in pools:
        tenant_alerts = list(
            DriftAlert.objects.filter(
                model_id=model_id, region_id=region_id, status__in=DriftAlert.ACTIVE
            ).select_for_update()
        )
        pool = (
            PoolDriftAlert.objects.select_for_update()
            .filter(model_id=model_id, region_id=region_id, status__in=PoolDriftAlert.ACTIVE)
            .first()
        )
        if not tenant_alerts:
            if pool is not None:
                pool.status = DriftAlert.Status.RESOLVED
                pool.resolved_at = now
                pool.last_seen_at = now
                pool.changed_by = derivation
                pool.message = pool_drift_message(alert=pool)
                pool.save()
            continue
        if pool is None:
            pool = PoolDriftAlert(
                model_id=model_id,
                region_id=region_id,
                raised_by=derivation,
                first_seen_at=now,
                occurrences=0,
            )
        pool.changed_by = derivation
        pool.last_seen_at = now
        pool.occurrences += 1
        pool.pricing = PoolDriftAlert.Pricing.PENDING
        pool.pricing_error = ""
        pool.message = pool_drift_message(
            alert=pool, tenants=len({a.tenant_id for a in tenant_alerts})
        )
        pool.save()
        for alert in tenant_alerts:
            alert.pool_alert = pool
            alert.message = drift_message(alert=alert)
            alert.save(update_fields=["pool_alert", "message"])
        out.append(pool)
    return out


def pool_drift_alerts_to_price(*, derivation: ProfileDerivation) -> list[PoolDriftAlert]:
    """The active pool alerts ``derivation`` changed that wait for their price, by id."""
    if derivation.status != RunStatus.SUCCEEDED:
        return []
    return list(
        derivation.changed_pool_alerts.filter(
            status__in=PoolDriftAlert.ACTIVE, pricing=PoolDriftAlert.Pricing.PENDING
        )
        .select_related("model", "region")
        .order_by("pk")
    )


def pool_drift_alerts_active() -> list[PoolDriftAlert]:
    """Every active pool alert, by id."""
    return list(
        PoolDriftAlert.objects.filter(status__in=PoolDriftAlert.ACTIVE)
        .select_related("model", "region")
        .order_by("pk")
    )


# The profile field each length or cache alert watches. The "before" of a drift sets that
# field back to the baseline's at the current request rate: the Friday review's question is
# what the longer prompts cost at a flat rate, and rate noise between two short windows must
# not mask (or invert) it. A token-share alert compares whole profiles (the share moves with
# the rate), so its baseline stands for the tenant's before entire.
_WATCHED_FIELDS = {
    DriftAlert.Kind.PROMPT_MEAN: "prompt_tokens_mean",
    DriftAlert.Kind.OUTPUT_MEAN: "output_tokens_mean",
    DriftAlert.Kind.CACHE_HIT_RATE: "prefix_cache_hit_rate",
}


def pool_drift_baselines(*, alert: PoolDriftAlert) -> dict[int, WorkloadProfile]:
    """What stood before the pool's drift: for each current profile an active tenant alert
    of the pool watches (by its id), an unsaved profile with the alerts' baseline figures.

    Start from the current profile (or, with a token-share alert, that alert's baseline
    profile), then set each watched figure back to its alert's baseline. Alerts whose profiles
    are gone (deleted since) contribute nothing.
    """
    by_profile: dict[int, list[DriftAlert]] = defaultdict(list)
    for tenant_alert in alert.tenant_alerts.filter(status__in=DriftAlert.ACTIVE).select_related(
        "baseline_profile", "current_profile"
    ):
        if tenant_alert.baseline_profile is None or tenant_alert.current_profile is None:
            continue
        by_profile[tenant_alert.current_profile.pk].append(tenant_alert)
    out: dict[int, WorkloadProfile] = {}
    for profile_id, group in by_profile.items():
        current = group[0].current_profile
        assert current is not None
        share = [a for a in group if a.kind == DriftAlert.Kind.TOKEN_SHARE]
        base = share[0].baseline_profile if share else current
        assert base is not None
        standin = copy.copy(base)
        for tenant_alert in group:
            name = _WATCHED_FIELDS.get(DriftAlert.Kind(tenant_alert.kind))
            if name is not None:
                setattr(standin, name, getattr(tenant_alert.baseline_profile, name))
        out[profile_id] = standin
    return out


@dataclass(frozen=True)
class TenantShare:
    """One drifting tenant's load on the plan (replica-seconds per second) before and after,
    and its share of the pool's change (None when the loads did not change in sum)."""

    tenant: str
    load_before: float
    load_after: float
    share: float | None


@dataclass(frozen=True)
class PoolImpact:
    """A pool's drift priced by re-solving the placement before and after it.

    ``pools`` holds every region and shape either plan has; ``replicas_*`` count the pool's
    own replicas (its model in its region); GPUs and $/h are the whole plan's, with the drift
    of all ``drift_pools`` active pools reverted for "before". ``solver`` gives the two
    solves' statuses (before, after).
    """

    inputs_hash: str
    pools: tuple[PoolChange, ...]
    replicas_before: int
    replicas_after: int
    gpus_before: int
    gpus_after: int
    cost_per_hour_before: float
    cost_per_hour_after: float
    unserved_before: float
    unserved_after: float
    tenants: tuple[TenantShare, ...]
    drift_pools: int = 1
    solver: tuple[str, str] = ("optimal", "optimal")


def pool_drift_priced(*, alert: PoolDriftAlert, impact: PoolImpact, now: datetime) -> None:
    """Record a pool drift's price on it and on its active tenant alerts (share, the pool's
    replicas, shape and target, messages)."""
    with transaction.atomic():
        alert.pricing = PoolDriftAlert.Pricing.PRICED
        alert.pricing_error = ""
        alert.priced_at = now
        alert.inputs_hash = impact.inputs_hash
        alert.replicas_before = impact.replicas_before
        alert.replicas_after = impact.replicas_after
        alert.gpus_before = impact.gpus_before
        alert.gpus_after = impact.gpus_after
        alert.cost_per_hour_before = round(impact.cost_per_hour_before, 6)
        alert.cost_per_hour_after = round(impact.cost_per_hour_after, 6)
        alert.unserved_before = round(impact.unserved_before, 6)
        alert.unserved_after = round(impact.unserved_after, 6)
        alert.drift_pools = impact.drift_pools
        model, region = alert.model.name, alert.region.name
        alert.pools = [
            {
                "region": row.region,
                "shape": row.shape,
                "model": row.model,
                "replicas_before": row.replicas_before,
                "replicas_after": row.replicas_after,
                "gpus_before": row.gpus_before,
                "gpus_after": row.gpus_after,
                "cost_per_hour_before": round(row.cost_per_hour_before, 6),
                "cost_per_hour_after": round(row.cost_per_hour_after, 6),
            }
            for row in impact.pools
            if row.model == model or row.replica_delta != 0
        ]
        tenant_alerts = list(
            alert.tenant_alerts.filter(status__in=DriftAlert.ACTIVE).select_related("tenant")
        )
        ids: dict[str, list[int]] = defaultdict(list)
        kinds: dict[str, list[str]] = defaultdict(list)
        for tenant_alert in tenant_alerts:
            ids[tenant_alert.tenant.name].append(tenant_alert.pk)
            kinds[tenant_alert.tenant.name].append(tenant_alert.kind)
        alert.tenants = [
            {
                "tenant": share.tenant,
                "alerts": sorted(ids.get(share.tenant, [])),
                "kinds": sorted(set(kinds.get(share.tenant, []))),
                "load_before": round(share.load_before, 6),
                "load_after": round(share.load_after, 6),
                "share": None if share.share is None else round(share.share, 6),
            }
            for share in impact.tenants
        ]
        alert.message = pool_drift_message(alert=alert)
        alert.save()
        shape, target = _pool_shape(alert, region)
        shares = {share.tenant: share.share for share in impact.tenants}
        for tenant_alert in tenant_alerts:
            tenant_alert.pool_alert = alert
            tenant_alert.pool_share = shares.get(tenant_alert.tenant.name)
            tenant_alert.replicas_before = impact.replicas_before
            tenant_alert.replicas_after = impact.replicas_after
            tenant_alert.shape = shape
            tenant_alert.target_utilization = target
            tenant_alert.message = drift_message(alert=tenant_alert)
            tenant_alert.save()
    logger.warning("pool drift alert %s: %s", alert.pk, alert.message)


def pool_drift_price_stands(*, alert: PoolDriftAlert, now: datetime) -> None:
    """Record that a pool drift's last price still holds: its inputs have not changed."""
    with transaction.atomic():
        alert.pricing = PoolDriftAlert.Pricing.PRICED
        alert.pricing_error = ""
        alert.priced_at = now
        alert.message = pool_drift_message(alert=alert)
        alert.save()
        for tenant_alert in alert.tenant_alerts.filter(status__in=DriftAlert.ACTIVE):
            tenant_alert.message = drift_message(alert=tenant_alert)
            tenant_alert.save()


def pool_drift_unpriced(*, alert: PoolDriftAlert, reason: str, now: datetime) -> None:
    """Record that a pool drift could not be priced, and why; its tenant alerts say so."""
    with transaction.atomic():
        alert.pricing = PoolDriftAlert.Pricing.FAILED
        alert.pricing_error = reason
        alert.priced_at = now
        alert.message = pool_drift_message(alert=alert)
        alert.save()
        for tenant_alert in alert.tenant_alerts.filter(status__in=DriftAlert.ACTIVE):
            tenant_alert.pool_share = None
            tenant_alert.message = drift_message(alert=tenant_alert)
            tenant_alert.save()
    logger.warning("pool drift alert %s: %s", alert.pk, alert.message)


def _pool_shape(alert: PoolDriftAlert, region: str) -> tuple[ReplicaShape | None, float | None]:
    """The one shape the pool's replicas are planned on (and its target), if it is one."""
    names = {
        row["shape"]
        for row in alert.pools
        if row["region"] == region
        and row["model"] == alert.model.name
        and (row["replicas_before"] or row["replicas_after"])
    }
    if len(names) != 1:
        return None, None
    shape = ReplicaShape.objects.filter(name=names.pop()).first()
    if shape is None:
        return None, None
    return shape, planning_target_utilization(shape=shape)


# -- messages -------------------------------------------------------------------------------------


# Unserved requests/s below this are the solver's rounding, not a shortage worth a word.
_UNSERVED_SHOWN = 1e-6


def _money(value: float) -> str:
    return f"${value:,.2f}/h"


def _signed_money(delta: float) -> str:
    """ "+$27.06/h", "-$3.10/h"; a change under half a cent is "+$0.00/h"."""
    sign = "+" if delta >= 0 or abs(delta) < 0.005 else "-"
    return f"{sign}{_money(abs(delta))}"


@dataclass(frozen=True)
class ShapeReplicas:
    """One shape of the pool's model in its region: replicas and GPUs before and after."""

    shape: str
    replicas_before: int
    replicas_after: int
    gpus_before: int
    gpus_after: int

    @property
    def replica_delta(self) -> int:
        return self.replicas_after - self.replicas_before


@dataclass(frozen=True)
class PricedChange:
    """A priced pool drift's figures as its message states them, for the message and for the
    drift page alike (``priced_change``): the pool's replicas (per shape where it runs on
    several, then its GPUs are what compares), changes elsewhere, and the whole re-plan's GPUs
    and $/h before and after."""

    region: str
    model: str
    shapes: tuple[ShapeReplicas, ...]
    replicas_before: int
    replicas_after: int
    elsewhere: tuple[str, ...]
    gpus_before: int
    gpus_after: int
    cost_before: float
    cost_after: float
    drift_pools: int
    unserved_before: float
    unserved_after: float

    @property
    def by_gpus(self) -> bool:
        """Several shapes: replicas of different shapes do not add up, GPUs do."""
        return len(self.shapes) > 1

    @property
    def pool_gpus_before(self) -> int:
        return sum(s.gpus_before for s in self.shapes)

    @property
    def pool_gpus_after(self) -> int:
        return sum(s.gpus_after for s in self.shapes)

    @property
    def cost_delta(self) -> float:
        return self.cost_after - self.cost_before

    @property
    def pool_text(self) -> str:
        """ "+3 replicas in eu-west (12 → 15 × chat-70b/gpu80x2)", or in GPUs for several
        shapes."""
        region = self.region
        if self.by_gpus:
            before, after = self.pool_gpus_before, self.pool_gpus_after
            parts = ", ".join(
                f"{s.shape} {s.replicas_before} → {s.replicas_after}" for s in self.shapes
            )
            return f"{after - before:+d} GPUs in {region} ({before} → {after}: {parts} replicas)"
        shape = f" × {self.shapes[0].shape}" if self.shapes else ""
        before, after = self.replicas_before, self.replicas_after
        return f"{after - before:+d} replicas in {region} ({before} → {after}{shape})"

    @property
    def replicas_text(self) -> str:
        """The page's replica column: "12 → 15 (+3)", per shape where there are several."""
        if self.by_gpus:
            return "; ".join(
                f"{s.shape} {s.replicas_before} → {s.replicas_after} ({s.replica_delta:+d})"
                for s in self.shapes
            )
        delta = self.replicas_after - self.replicas_before
        return f"{self.replicas_before} → {self.replicas_after} ({delta:+d})"

    @property
    def gpus_text(self) -> str:
        """The whole re-plan's GPUs: "24 → 30 (+6)"."""
        return f"{self.gpus_before} → {self.gpus_after} ({self.gpus_after - self.gpus_before:+d})"

    @property
    def cost_text(self) -> str:
        """The whole re-plan's $/h: "$108.24/h → $135.30/h (+$27.06/h)"."""
        return (
            f"{_money(self.cost_before)} → {_money(self.cost_after)} "
            f"({_signed_money(self.cost_delta)})"
        )

    @property
    def unserved_text(self) -> str:
        """ "3.80 → 4.77 req/s unserved"; empty when both are the solver's rounding."""
        if max(self.unserved_before, self.unserved_after) <= _UNSERVED_SHOWN:
            return ""
        return f"{self.unserved_before:,.2f} → {self.unserved_after:,.2f} req/s unserved"

    def summary(self) -> str:
        """ "+3 replicas in eu-west (12 → 15 × chat-70b/gpu80x2); the re-plan goes from 24 GPUs
        at $108.24/h to 30 GPUs at $135.30/h (+$27.06/h)"."""
        text = self.pool_text
        if self.elsewhere:
            text += "; elsewhere " + ", ".join(self.elsewhere)
        together = f" (with the drift of {self.drift_pools} pools)" if self.drift_pools > 1 else ""
        text += (
            f"; the re-plan{together} goes from {self.gpus_before} GPUs at "
            f"{_money(self.cost_before)} to {self.gpus_after} GPUs at {_money(self.cost_after)} "
            f"({_signed_money(self.cost_delta)})"
        )
        if self.unserved_text:
            text += f", leaving {self.unserved_text}"
        return text


def priced_change(alert: PoolDriftAlert) -> PricedChange | None:
    """The figures of a priced pool drift as stored on it (None unless priced)."""
    if alert.pricing != PoolDriftAlert.Pricing.PRICED:
        return None
    region, model = alert.region.name, alert.model.name
    shapes = tuple(
        ShapeReplicas(
            shape=r["shape"],
            replicas_before=r["replicas_before"],
            replicas_after=r["replicas_after"],
            gpus_before=r["gpus_before"],
            gpus_after=r["gpus_after"],
        )
        for r in alert.pools
        if r["region"] == region and r["model"] == model
    )
    elsewhere = tuple(
        f"{r['region']} {r['shape']} {r['replicas_after'] - r['replicas_before']:+d}"
        for r in alert.pools
        if r["region"] != region and r["replicas_after"] != r["replicas_before"]
    )
    return PricedChange(
        region=region,
        model=model,
        shapes=shapes,
        replicas_before=alert.replicas_before or 0,
        replicas_after=alert.replicas_after or 0,
        elsewhere=elsewhere,
        gpus_before=alert.gpus_before or 0,
        gpus_after=alert.gpus_after or 0,
        cost_before=alert.cost_per_hour_before or 0.0,
        cost_after=alert.cost_per_hour_after or 0.0,
        drift_pools=alert.drift_pools,
        unserved_before=alert.unserved_before or 0.0,
        unserved_after=alert.unserved_after or 0.0,
    )


def _pool_summary(alert: PoolDriftAlert) -> str:
    change = priced_change(alert)
    assert change is not None, "only a priced pool drift has a summary"
    return change.summary()


def share_text(share: float | None) -> str:
    """A tenant's share of its pool's drift: "20%", "n/a" when the loads did not change."""
    return _percent(share)


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.0%}"


def pool_drift_message(*, alert: PoolDriftAlert, tenants: int | None = None) -> str:
    """One line for an operator: the pool, its drifting tenants and what the drift costs."""
    head = f"drift of {alert.model.name} in {alert.region.name}"
    if alert.status == DriftAlert.Status.RESOLVED:
        return f"{head}: resolved (every tenant back within its thresholds)"
    if alert.pricing == PoolDriftAlert.Pricing.PRICED:
        shares = ", ".join(f"{t['tenant']} {_percent(t['share'])}" for t in alert.tenants)
        return f"{head} ({len(alert.tenants)} tenants: {shares}): {_pool_summary(alert)}"
    count = tenants if tenants is not None else len(alert.tenants)
    who = f" ({count} tenants)" if count else ""
    if alert.pricing == PoolDriftAlert.Pricing.FAILED:
        return f"{head}{who}: replica impact unknown ({alert.pricing_error})"
    return f"{head}{who}: being priced by re-solving the placement before and after"


def drift_change_text(alert: DriftAlert) -> str:
    """What changed, as an alert's message opens: "mean prompt length 1,500 → 2,700 tokens
    (+80%)", "prefix-cache hit rate 40% → 25% (-15 points)"."""
    kind, old, new = alert.kind, alert.baseline_value, alert.current_value
    label = DriftAlert.Kind(kind).label
    if _relative(kind):
        change = (new - old) / old * 100 if old else math.inf
        return f"{label} {old:,.0f} → {new:,.0f} tokens ({change:+.0f}%)"
    return f"{label} {old:.0%} → {new:.0%} ({(new - old) * 100:+.0f} points)"


def drift_message(*, alert: DriftAlert) -> str:
    """One line for an operator, e.g. "mean prompt length 1,500 → 2,700 tokens (+80%) for
    northwind on chat-70b in eu-west: 20% of the pool's drift (#4): +3 replicas …"."""
    text = f"{drift_change_text(alert)} for {alert.tenant.name} on {alert.model.name} in {alert.region.name}"
    if alert.status == DriftAlert.Status.RESOLVED:
        return f"{text}: resolved"
    pool = alert.pool_alert
    if pool is None:
        return f"{text}: to be priced with its pool's drift"
    if pool.pricing == PoolDriftAlert.Pricing.PENDING:
        return f"{text}: part of the pool's drift (#{pool.pk}), being priced"
    if pool.pricing == PoolDriftAlert.Pricing.FAILED:
        return f"{text}: replica impact unknown ({pool.pricing_error})"
    return (
        f"{text}: {_percent(alert.pool_share)} of the pool's drift (#{pool.pk}): "
        f"{_pool_summary(pool)}"
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
        # Every signed-in user is a stored User; an anonymous one is recorded as nobody
        # (assigning it to the foreign key would raise).
        recorded = user if isinstance(user, User) else None
        locked.acknowledged_by = recorded
        # simple_history's per-instance input to the history row, unknown to the model's type.
        locked._history_user = recorded  # type: ignore[attr-defined]
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
