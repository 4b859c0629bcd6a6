"""Queueing formulas: M/M/1 and M/M/c (Erlang C) waits, response times and their quantiles.

These are the textbook shapes behind the planning utilisation target: with random arrivals and
service times, latency grows without bound as utilisation approaches 1, and a pool of servers
fed from one queue stays flat much longer than a single server. LLM service times are far more
variable than exponential, so the numbers are a lower bound on real queueing; the queue
simulator (``planner.capacity.simulation``) compares itself against them.

Units: rates in requests per second, times in seconds, offered load in erlangs (λ·S, the mean
number of busy servers). ρ is utilisation: λ·S for one server, λ·S / c for c servers.

Every function raises ``PlannerInputError`` naming the argument for a negative or non-finite
rate or time, a server count below one, a quantile level outside (0, 1), and an unstable queue
(ρ ≥ 1), which has no steady state: it grows for as long as the overload lasts.
"""

from __future__ import annotations

import math

from planner.capacity import _checks
from planner.errors import PlannerInputError

# Bisection stops when the bracket is this small relative to the answer; 1e-12 is far below any
# latency anyone measures and still well above float resolution.
_QUANTILE_REL_TOL = 1e-12
_QUANTILE_MAX_STEPS = 400


def offered_load(arrival_rate: float, service_s: float) -> float:
    """Offered load a = λ·S in erlangs: the mean number of servers the work keeps busy.

    ``arrival_rate`` in requests/s, ``service_s`` the mean service time in seconds.
    8 req/s × 1.3 replica-seconds = 10.4 erlangs.
    """
    return _checks.non_negative("arrival_rate", arrival_rate) * _checks.positive(
        "service_s", service_s
    )


def _stable_utilization(utilization: float) -> float:
    rho = _checks.non_negative("utilization", utilization)
    if rho >= 1:
        raise PlannerInputError(
            "utilization", f"queue is unstable at utilisation {rho!r}; it must be below 1"
        )
    return rho


def mm1_mean_response(service_s: float, utilization: float) -> float:
    """M/M/1 mean response time S / (1 − ρ), seconds (queueing plus service).

    ρ = 0.5 → 2 S, 0.7 → 3.3 S, 0.8 → 5 S, 0.9 → 10 S, 0.95 → 20 S.
    """
    s = _checks.positive("service_s", service_s)
    rho = _stable_utilization(utilization)
    return s / (1.0 - rho)


def mm1_mean_wait(service_s: float, utilization: float) -> float:
    """M/M/1 mean time in queue before service, ρ·S / (1 − ρ), seconds."""
    s = _checks.positive("service_s", service_s)
    rho = _stable_utilization(utilization)
    return rho * s / (1.0 - rho)


def mm1_response_quantile(service_s: float, utilization: float, q: float) -> float:
    """Quantile q of the M/M/1 response time, seconds.

    The M/M/1 (FCFS) response time is exponential with rate (1 − ρ)/S, so its quantile is
    −ln(1 − q) · S / (1 − ρ): p95 ≈ 3.0 and p99 ≈ 4.6 times the mean response.
    """
    s = _checks.positive("service_s", service_s)
    rho = _stable_utilization(utilization)
    level = _checks.quantile_level("q", q)
    return -math.log1p(-level) * s / (1.0 - rho)


def erlang_c(servers: int, offered_load: float) -> float:
    """Erlang C: probability that an arrival to an M/M/c queue has to wait, in [0, 1).

    ``offered_load`` a = λ·S in erlangs must be below ``servers`` (ρ = a/c < 1).

    Computed through the Erlang B recursion B(k) = a·B(k−1) / (k + a·B(k−1)), then
    C = c·B / (c − a·(1 − B)). Every term stays in [0, 1], so there are no factorials or powers
    to overflow and the result is accurate for thousands of servers (O(c) work).
    """
    c = _checks.positive_int("servers", servers)
    a = _checks.non_negative("offered_load", offered_load)
    if a >= c:
        raise PlannerInputError(
            "offered_load",
            f"queue is unstable: {a!r} erlangs on {c} servers is utilisation {a / c!r} >= 1",
        )
    if a == 0:
        return 0.0
    blocking = 1.0
    for k in range(1, c + 1):
        blocking = a * blocking / (k + a * blocking)
    return c * blocking / (c - a * (1.0 - blocking))


def _mmc(arrival_rate: float, service_s: float, servers: int) -> tuple[float, float, int]:
    """Validated (λ, S, c) for a stable M/M/c queue."""
    lam = _checks.non_negative("arrival_rate", arrival_rate)
    s = _checks.positive("service_s", service_s)
    c = _checks.positive_int("servers", servers)
    a = lam * s
    if a >= c:
        raise PlannerInputError(
            "arrival_rate",
            f"queue is unstable: {lam!r} req/s × {s!r} s on {c} servers is utilisation "
            f"{a / c!r} >= 1",
        )
    return lam, s, c


def mmc_mean_wait(arrival_rate: float, service_s: float, servers: int) -> float:
    """M/M/c mean time in queue, C(c, a) · S / (c − a), seconds."""
    lam, s, c = _mmc(arrival_rate, service_s, servers)
    a = lam * s
    return erlang_c(c, a) * s / (c - a)


def mmc_mean_response(arrival_rate: float, service_s: float, servers: int) -> float:
    """M/M/c mean response time: mean wait plus S, seconds.

    With 12 servers: 1.05 S at ρ = 0.7, 1.15 S at 0.8, 1.53 S at 0.9, 2.35 S at 0.95 and
    4.8 S at 0.98.
    """
    _, s, _ = _mmc(arrival_rate, service_s, servers)
    return mmc_mean_wait(arrival_rate, service_s, servers) + s


def mmc_wait_quantile(arrival_rate: float, service_s: float, servers: int, q: float) -> float:
    """Quantile q of the M/M/c (FCFS) waiting time in queue, seconds.

    An arrival waits with probability C = C(c, a); given that it waits, the wait is exponential
    with rate (c − a)/S. So P(Wq > t) = C·exp(−(c − a)·t/S) and the quantile is
    S/(c − a) · ln(C/(1 − q)) when 1 − q < C, and 0 otherwise (at least q of arrivals find a
    free server and do not wait at all).
    """
    lam, s, c = _mmc(arrival_rate, service_s, servers)
    level = _checks.quantile_level("q", q)
    a = lam * s
    waits = erlang_c(c, a)
    tail = 1.0 - level
    if tail >= waits:
        return 0.0
    return s / (c - a) * math.log(waits / tail)


def _mmc_response_survival(t: float, service_s: float, servers: int, load: float) -> float:
    """P(T > t) for the M/M/c FCFS response time T = Wq + service.

    Wq is 0 with probability 1 − C and exponential with rate θ = (c − a)/S otherwise; the
    service is exponential with rate μ = 1/S and independent of Wq. The sum of the two
    exponentials has survival e^{−μt}·(1 − μ·expm1(−(θ − μ)t)/(θ − μ)), which tends to
    (1 + μt)·e^{−μt} as θ → μ; expm1 keeps it accurate near that point.
    """
    mu = 1.0 / service_s
    theta = (servers - load) / service_s
    waits = erlang_c(servers, load)
    delta = theta - mu
    if delta == 0.0:
        both = (1.0 + mu * t) * math.exp(-mu * t)
    else:
        both = math.exp(-mu * t) * (1.0 - mu * math.expm1(-delta * t) / delta)
    return (1.0 - waits) * math.exp(-mu * t) + waits * both


def mmc_response_quantile(arrival_rate: float, service_s: float, servers: int, q: float) -> float:
    """Quantile q of the M/M/c (FCFS) response time (wait plus service), seconds.

    For one server this is the closed form of ``mm1_response_quantile`` (the response time is
    exponential). For c > 1 the response time is a mixture of an exponential and a sum of two
    exponentials whose survival function is closed form (see ``_mmc_response_survival``) but
    has no closed-form inverse; we return its exact quantile, found by bisection on that
    survival function to a relative tolerance of 1e-12. It is not an approximation such as
    "wait quantile plus service quantile", which overstates the tail.
    """
    lam, s, c = _mmc(arrival_rate, service_s, servers)
    level = _checks.quantile_level("q", q)
    if c == 1:
        return mm1_response_quantile(s, lam * s, level)
    load = lam * s
    tail = 1.0 - level
    lo, hi = 0.0, s
    while _mmc_response_survival(hi, s, c, load) > tail:
        lo, hi = hi, hi * 2.0
    for _ in range(_QUANTILE_MAX_STEPS):
        if hi - lo <= _QUANTILE_REL_TOL * hi:
            break
        mid = 0.5 * (lo + hi)
        if _mmc_response_survival(mid, s, c, load) > tail:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
