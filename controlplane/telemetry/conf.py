"""Telemetry settings, read at call time.

Read with ``controlplane.core.conf`` (the Django setting of the same name, else the
environment variable, else the default below; a malformed value is an error).

- ``HEADROOM_PROMETHEUS_URL``: Prometheus' base URL (default ``http://127.0.0.1:9090``).
- ``HEADROOM_PROMETHEUS_TIMEOUT_S`` (10), ``HEADROOM_PROMETHEUS_RETRIES`` (2),
  ``HEADROOM_PROMETHEUS_BACKOFF_S`` (0.5): the client's own retries within one attempt.
- ``HEADROOM_TELEMETRY_LABELS``: label names, a mapping (or in the environment
  ``tenant=tenant,model=model_name,region=region[,class=...]``); ``class`` is optional.
- ``HEADROOM_TELEMETRY_ENGINE`` (``vllm-v1``): the serving engine's metric names, one of
  ``vllm-v1``, ``vllm-v0``, ``sglang``, ``tgi`` (``controlplane.telemetry.metrics``).
- ``HEADROOM_TELEMETRY_LABELS``' ``tenant`` label may be absent from the engine's series (real
  vLLM has none): such series are the pool's, stored with an empty tenant.
- ``HEADROOM_TELEMETRY_GATEWAY`` (empty: none): the gateway whose metrics attribute each
  pool's demand to tenants, ``litellm`` (``controlplane.telemetry.metrics.GATEWAYS``), with
  ``HEADROOM_TELEMETRY_GATEWAY_LABELS`` naming its tenant, model and region labels (default
  ``tenant=api_key_alias,model=requested_model,region=region``; the tenant may be any label
  the gateway writes: ``team_alias``, ``hashed_api_key``, ``end_user`` …).
- ``HEADROOM_TELEMETRY_BUCKET_S`` (60): bucket width of stored samples, seconds.
- ``HEADROOM_TELEMETRY_PEAK_S`` (60): the resolution of the peak request rate, seconds: the
  peak is the busiest such window's rate (a whole number of buckets; a bucket wider than this
  gives the peak at the bucket's width).
- ``HEADROOM_TELEMETRY_LAG_S`` (60): a bucket is pulled once it ended this long ago, so the
  last scrapes inside it have landed.
- ``HEADROOM_TELEMETRY_LOOKBACK_S`` (3600): the first pull's window; later pulls continue
  from the last successful one, catching up at most ``HEADROOM_TELEMETRY_MAX_CATCHUP_S``
  (7 days).
- ``HEADROOM_TELEMETRY_PROFILE_WINDOW_S`` (86400): samples a workload profile is derived from.
- ``HEADROOM_TELEMETRY_MIN_REQUESTS`` (50): fewer requests in the window make no profile.
- ``HEADROOM_TELEMETRY_PROFILE_TOLERANCE`` (0.02): relative change of any figure that makes
  a new profile version.
- ``HEADROOM_TELEMETRY_DRIFT_PROMPT_MEAN`` (0.25) and ``..._OUTPUT_MEAN`` (0.25): relative
  change of the mean prompt / output length that raises a drift alert;
  ``..._CACHE_HIT_RATE`` (0.10) and ``..._TOKEN_SHARE`` (0.10): absolute change of the
  prefix-cache hit rate and of a tenant's share of its pool's tokens.
- Pool signal alerts (``PoolSignalAlert``), measured over the last
  ``HEADROOM_TELEMETRY_POOL_SIGNAL_WINDOW_S`` (3600) of each derivation's window:
  ``HEADROOM_TELEMETRY_DRIFT_ITL_P95`` (0.25): relative excess of the p95 inter-token latency
  over the capacity figure's; ``HEADROOM_TELEMETRY_DRIFT_QUEUE_TIME_P95_S`` (1.0): p95 queue
  time, seconds; ``HEADROOM_TELEMETRY_DRIFT_KV_CAPACITY`` (0.10): relative shortfall of the
  engines' KV-cache tokens under what the figure's concurrency needs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

from controlplane.core.conf import setting_int, setting_number, setting_parsed, setting_text

LABEL_ROLES = ("tenant", "model", "region", "class")
DEFAULT_LABELS = {"tenant": "tenant", "model": "model_name", "region": "region"}
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class LabelConfig:
    """Prometheus label names that carry the tenant, model, region and (optionally) class."""

    tenant: str
    model: str
    region: str
    workload_class: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        base = (self.tenant, self.model, self.region)
        return (*base, self.workload_class) if self.workload_class else base


@dataclass(frozen=True)
class DriftThresholds:
    """When a change is capacity-relevant: relative for means, absolute for rates/shares."""

    prompt_mean_rel: float = 0.25
    output_mean_rel: float = 0.25
    cache_hit_rate_abs: float = 0.10
    token_share_abs: float = 0.10


@dataclass(frozen=True)
class PoolSignalThresholds:
    """When a pool's engine signals say the plan's figures are wrong (``PoolSignalAlert``):
    relative excess of the p95 ITL over the figure's, p95 queue time in seconds, relative
    shortfall of the KV-cache capacity; measured over ``window_s``."""

    itl_p95_rel: float = 0.25
    queue_time_p95_s: float = 1.0
    kv_capacity_rel: float = 0.10
    window_s: int = 3600


@dataclass(frozen=True)
class TelemetrySettings:
    prometheus_url: str
    prometheus_timeout_s: float
    prometheus_retries: int
    prometheus_backoff_s: float
    labels: LabelConfig
    engine: str
    gateway: str
    gateway_labels: LabelConfig
    bucket_s: int
    peak_s: int
    lag_s: int
    lookback_s: int
    max_catchup_s: int
    profile_window_s: int
    min_requests: float
    profile_tolerance: float
    drift: DriftThresholds
    signals: PoolSignalThresholds = PoolSignalThresholds()


def _labels(raw: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        role, sep, label = item.partition("=")
        if not sep or not label.strip():
            raise ImproperlyConfigured(
                f"HEADROOM_TELEMETRY_LABELS: expected role=label pairs, got {item!r}"
            )
        pairs[role.strip()] = label.strip()
    return pairs


def label_config(raw: Mapping[str, str]) -> LabelConfig:
    unknown = sorted(set(raw) - set(LABEL_ROLES))
    if unknown:
        raise ImproperlyConfigured(
            f"HEADROOM_TELEMETRY_LABELS: unknown roles {unknown}; use {', '.join(LABEL_ROLES)}"
        )
    merged = {**DEFAULT_LABELS, **raw}
    names = [merged["tenant"], merged["model"], merged["region"], merged.get("class")]
    present = [n for n in names if n]
    for name in present:
        if not _LABEL_NAME.match(name) or name == "le":
            raise ImproperlyConfigured(f"HEADROOM_TELEMETRY_LABELS: {name!r} is not a label name")
    if len(set(present)) != len(present):
        raise ImproperlyConfigured("HEADROOM_TELEMETRY_LABELS: each role needs its own label")
    return LabelConfig(merged["tenant"], merged["model"], merged["region"], merged.get("class"))


ENGINE_NAMES = ("vllm-v1", "vllm-v0", "sglang", "tgi")
GATEWAY_NAMES = ("litellm",)
DEFAULT_GATEWAY_LABELS = {"tenant": "api_key_alias", "model": "requested_model", "region": "region"}


def _gateway(value: str) -> str:
    name = value.strip().lower()
    if name and name not in GATEWAY_NAMES:
        raise ImproperlyConfigured(
            f"HEADROOM_TELEMETRY_GATEWAY must be empty or one of {', '.join(GATEWAY_NAMES)}, "
            f"got {value!r}"
        )
    return name


def _engine(value: str) -> str:
    name = value.strip().lower()
    if name not in ENGINE_NAMES:
        raise ImproperlyConfigured(
            f"HEADROOM_TELEMETRY_ENGINE must be one of {', '.join(ENGINE_NAMES)}, got {value!r}"
        )
    return name


def telemetry_settings() -> TelemetrySettings:
    """The current telemetry settings, checked."""
    url = setting_text("HEADROOM_PROMETHEUS_URL", "http://127.0.0.1:9090")
    if not url.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"HEADROOM_PROMETHEUS_URL must be an http(s) URL: {url!r}")
    labels = setting_parsed("HEADROOM_TELEMETRY_LABELS", _labels, dict(DEFAULT_LABELS))
    drift = DriftThresholds(
        prompt_mean_rel=setting_number("HEADROOM_TELEMETRY_DRIFT_PROMPT_MEAN", 0.25, positive=True),
        output_mean_rel=setting_number("HEADROOM_TELEMETRY_DRIFT_OUTPUT_MEAN", 0.25, positive=True),
        cache_hit_rate_abs=setting_number(
            "HEADROOM_TELEMETRY_DRIFT_CACHE_HIT_RATE", 0.10, positive=True
        ),
        token_share_abs=setting_number("HEADROOM_TELEMETRY_DRIFT_TOKEN_SHARE", 0.10, positive=True),
    )
    return TelemetrySettings(
        prometheus_url=url,
        prometheus_timeout_s=setting_number("HEADROOM_PROMETHEUS_TIMEOUT_S", 10.0, positive=True),
        prometheus_retries=setting_int("HEADROOM_PROMETHEUS_RETRIES", 2, minimum=0),
        prometheus_backoff_s=setting_number("HEADROOM_PROMETHEUS_BACKOFF_S", 0.5, minimum=0),
        labels=label_config(labels),
        engine=_engine(setting_text("HEADROOM_TELEMETRY_ENGINE", "vllm-v1")),
        gateway=_gateway(setting_text("HEADROOM_TELEMETRY_GATEWAY", "")),
        gateway_labels=label_config(
            {
                **DEFAULT_GATEWAY_LABELS,
                **setting_parsed("HEADROOM_TELEMETRY_GATEWAY_LABELS", _labels, {}),
            }
        ),
        bucket_s=setting_int("HEADROOM_TELEMETRY_BUCKET_S", 60, positive=True),
        peak_s=setting_int("HEADROOM_TELEMETRY_PEAK_S", 60, positive=True),
        lag_s=setting_int("HEADROOM_TELEMETRY_LAG_S", 60, minimum=0),
        lookback_s=setting_int("HEADROOM_TELEMETRY_LOOKBACK_S", 3600, positive=True),
        max_catchup_s=setting_int("HEADROOM_TELEMETRY_MAX_CATCHUP_S", 7 * 86400, positive=True),
        profile_window_s=setting_int("HEADROOM_TELEMETRY_PROFILE_WINDOW_S", 86400, positive=True),
        min_requests=setting_number("HEADROOM_TELEMETRY_MIN_REQUESTS", 50.0, minimum=0),
        profile_tolerance=setting_number("HEADROOM_TELEMETRY_PROFILE_TOLERANCE", 0.02, minimum=0),
        drift=drift,
        signals=PoolSignalThresholds(
            itl_p95_rel=setting_number("HEADROOM_TELEMETRY_DRIFT_ITL_P95", 0.25, positive=True),
            queue_time_p95_s=setting_number(
                "HEADROOM_TELEMETRY_DRIFT_QUEUE_TIME_P95_S", 1.0, positive=True
            ),
            kv_capacity_rel=setting_number(
                "HEADROOM_TELEMETRY_DRIFT_KV_CAPACITY", 0.10, positive=True, maximum=1
            ),
            window_s=setting_int("HEADROOM_TELEMETRY_POOL_SIGNAL_WINDOW_S", 3600, positive=True),
        ),
    )
