"""The workload: length distributions, request classes and their cost, token rates and quotas.

A request is not a unit of work. It carries a prompt that must be prefilled and an answer that
must be decoded, so its cost on a replica is measured in replica-seconds:
prompt / prefill_rate + output / decode_rate (a linear model around the benchmarked operating
point). A mix of classes has a mean cost, and the mean cost times the arrival rate is the work
the fleet must do, whatever the request rate says.

Units: tokens, seconds, tokens/s for prefill and decode rates, requests/s for arrival rates,
tokens per minute (TPM) for provider quotas, replica-seconds for costs.

Every public function raises ``PlannerInputError`` naming the argument for negative or
non-finite rates and token counts, hit rates or shares outside [0, 1], multipliers below 1, and
class mixes whose shares do not sum to 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from planner.capacity import _checks
from planner.errors import PlannerInputError

# A month, for averaging monthly request counts: 30 days of seconds (2,592,000 s), the
# convention the seeds' TPM table uses (1,000,000 requests a month → 0.39 req/s).
SECONDS_PER_MONTH = 30 * 24 * 60 * 60

# Class shares are written as rounded percentages; a mix whose shares sum to 1 within this
# tolerance is accepted, anything further off is a typo.
_SHARE_SUM_TOL = 1e-6

_STANDARD_NORMAL = NormalDist()


# -- length distributions -----------------------------------------------------------------------


@dataclass(frozen=True)
class LognormalFit:
    """A lognormal length distribution: ln(length) ~ Normal(mu, sigma²). Lengths in tokens."""

    mu: float
    sigma: float

    @property
    def median(self) -> float:
        """Median length, e^mu."""
        return math.exp(self.mu)

    @property
    def mean(self) -> float:
        """Mean length, e^(mu + sigma²/2)."""
        return math.exp(self.mu + self.sigma**2 / 2)

    def quantile(self, q: float) -> float:
        """Length at quantile q in (0, 1): e^(mu + sigma·z_q), z_q the standard normal quantile."""
        level = _checks.quantile_level("q", q)
        return math.exp(self.mu + self.sigma * _STANDARD_NORMAL.inv_cdf(level))


def lognormal_from_median_mean(median: float, mean: float) -> LognormalFit:
    """Fit a lognormal to a median and a mean: σ = √(2·ln(mean/median)), μ = ln(median).

    The mean-to-median ratio alone fixes the spread. Prompts with median 1,100 and mean 1,500
    tokens give σ = 0.79, p95 ≈ 4,000 and p99 ≈ 6,900; outputs with median 70 and mean 100
    give σ = 0.84, p95 ≈ 280 and p99 ≈ 500. A mean below the median is not lognormal.
    """
    med = _checks.positive("median", median)
    avg = _checks.positive("mean", mean)
    if avg < med:
        raise PlannerInputError("mean", f"must be at least the median {med!r}, got {avg!r}")
    return LognormalFit(mu=math.log(med), sigma=math.sqrt(2.0 * math.log(avg / med)))


# -- request cost -------------------------------------------------------------------------------


def request_cost(
    prompt_tokens: float,
    output_tokens: float,
    prefill_rate: float,
    decode_rate: float,
    prefix_cache_hit_rate: float = 0.0,
) -> float:
    """Replica-seconds one request consumes: prompt·(1 − h)/prefill_rate + output/decode_rate.

    ``prefill_rate`` and ``decode_rate`` are the replica's benchmarked tokens/s. The prefix-cache
    hit rate h is the fraction of prompt tokens served from the prefix cache; it removes prefill
    work only, never decode, so a 35% hit rate does not make a request 35% cheaper.
    1,300 in / 80 out at 4,000 and 160 tokens/s: 0.325 + 0.500 = 0.825 s.
    """
    prompt = _checks.non_negative("prompt_tokens", prompt_tokens)
    output = _checks.non_negative("output_tokens", output_tokens)
    prefill = _checks.positive("prefill_rate", prefill_rate)
    decode = _checks.positive("decode_rate", decode_rate)
    hit = _checks.probability("prefix_cache_hit_rate", prefix_cache_hit_rate)
    return prompt * (1.0 - hit) / prefill + output / decode


@dataclass(frozen=True)
class RequestClass:
    """One kind of request in a mix: its share of arrivals and its token counts.

    ``prompt_tokens`` and ``output_tokens`` are totals over all model calls the request makes
    (an order lookup's planning call plus its answer call).
    """

    name: str
    share: float
    prompt_tokens: float
    output_tokens: float


def _checked_mix(mix: Sequence[RequestClass]) -> tuple[RequestClass, ...]:
    classes = tuple(mix)
    _checks.non_empty("mix", classes)
    for cls in classes:
        _checks.probability(f"mix[{cls.name}].share", cls.share)
    total = math.fsum(cls.share for cls in classes)
    if abs(total - 1.0) > _SHARE_SUM_TOL:
        raise PlannerInputError("mix", f"class shares must sum to 1, got {total!r}")
    return classes


def mean_request_cost(
    mix: Sequence[RequestClass],
    prefill_rate: float,
    decode_rate: float,
    prefix_cache_hit_rate: float = 0.0,
) -> float:
    """Mean replica-seconds per request over a class mix: Σ share × request_cost.

    85/14/1 policy/order/summary at 4,000 and 160 tokens/s: 0.992 s; 80/12/8: 1.2485 s, 26%
    more work per request at the same request rate.
    """
    classes = _checked_mix(mix)
    return math.fsum(
        cls.share
        * request_cost(
            cls.prompt_tokens,
            cls.output_tokens,
            prefill_rate,
            decode_rate,
            prefix_cache_hit_rate,
        )
        for cls in classes
    )


def replica_request_rate(mean_cost_s: float) -> float:
    """Requests/s one replica completes at 100% busy: 1 / mean cost (0.992 s → 1.01 req/s)."""
    return 1.0 / _checks.positive("mean_cost_s", mean_cost_s)


def fleet_utilization(arrival_rate: float, mean_cost_s: float, replicas: int) -> float:
    """Share of the fleet's replica-seconds the load uses: λ × mean cost / replicas.

    8 req/s at 0.992 s on 12 replicas: 0.66; at 1.2485 s: 0.83. Above 1 the fleet is overloaded
    and the queue grows without bound; the value is returned as is so callers can report it.
    """
    lam = _checks.non_negative("arrival_rate", arrival_rate)
    cost = _checks.positive("mean_cost_s", mean_cost_s)
    n = _checks.positive_int("replicas", replicas)
    return lam * cost / n


def arrivals_after_exact_cache(arrival_rate: float, hit_rate: float) -> float:
    """Arrivals/s that still reach the model after an exact-answer cache: λ × (1 − h).

    Apply it to the cached class's arrival rate only: an exact hit costs no model work at all,
    unlike a prefix-cache hit, which only shortens prefill (see ``request_cost``).
    """
    lam = _checks.non_negative("arrival_rate", arrival_rate)
    hit = _checks.probability("hit_rate", hit_rate)
    return lam * (1.0 - hit)


# -- tokens per minute --------------------------------------------------------------------------


def tokens_per_minute(requests_per_s: float, tokens_per_request: float) -> float:
    """Quota consumption in tokens per minute: requests/s × tokens per request × 60.

    8 req/s × 1,600 tokens (1,500 in + 100 out) = 768,000 TPM; at 20 req/s, 1,920,000.
    """
    rate = _checks.non_negative("requests_per_s", requests_per_s)
    tokens = _checks.non_negative("tokens_per_request", tokens_per_request)
    return rate * tokens * 60.0


@dataclass(frozen=True)
class FeatureLoad:
    """Peak token demand of one feature, from its monthly request count."""

    name: str
    average_rps: float
    peak_rps: float
    tokens_per_request: float
    peak_tpm: float


def feature_load(
    name: str, monthly_requests: float, peak_factor: float, tokens_per_request: float
) -> FeatureLoad:
    """Average and peak requests/s and peak TPM for a feature.

    average = monthly requests / ``SECONDS_PER_MONTH``; peak = average × peak factor;
    TPM = peak × 60 × tokens per request. 1,000,000 requests a month, ×5 peak, 4,000 tokens:
    0.39 → 1.9 req/s, 462,963 TPM.
    """
    monthly = _checks.non_negative("monthly_requests", monthly_requests)
    factor = _checks.at_least_one("peak_factor", peak_factor)
    average = monthly / SECONDS_PER_MONTH
    peak = average * factor
    return FeatureLoad(
        name=name,
        average_rps=average,
        peak_rps=peak,
        tokens_per_request=tokens_per_request,
        peak_tpm=tokens_per_minute(peak, tokens_per_request),
    )


@dataclass(frozen=True)
class TpmPlan:
    """Peak TPM per feature, their total, and the total with headroom."""

    features: tuple[FeatureLoad, ...]
    peak_tpm: float
    headroom: float
    planned_tpm: float


def tpm_plan(features: Sequence[FeatureLoad], headroom: float = 1.5) -> TpmPlan:
    """Total peak TPM over features, and that total × headroom (usually 1.5).

    Support assistant 462,963 + order summaries 477,778 = 940,741 TPM; × 1.5 = 1,411,111.
    Peaks are added as if they coincide, which is the safe assumption without evidence
    that they do not.
    """
    items = tuple(features)
    _checks.non_empty("features", items)
    room = _checks.at_least_one("headroom", headroom)
    peak = math.fsum(f.peak_tpm for f in items)
    return TpmPlan(features=items, peak_tpm=peak, headroom=room, planned_tpm=peak * room)


def quota_request(planned_tpm: float, increment: float = 500_000.0) -> float:
    """The quota to ask a provider for: planned TPM rounded up to a whole ``increment``.

    Quota is granted in round steps, and asking for 1,411,111 TPM reads as false precision:
    the seeds ask for about 1,500,000.
    """
    planned = _checks.non_negative("planned_tpm", planned_tpm)
    step = _checks.positive("increment", increment)
    return _checks.ceil_count(planned / step) * step
