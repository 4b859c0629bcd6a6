"""Telemetry settings, read at call time.

Each value comes from the Django setting of the same name when the settings module defines
it (tests override them with pytest-django's ``settings``), else from the environment variable
of that name, else the default below. A value that is present but malformed is an error, as
everywhere in Headroom's settings.

- ``HEADROOM_PROMETHEUS_URL``: Prometheus' base URL (default ``http://127.0.0.1:9090``).
- ``HEADROOM_PROMETHEUS_TIMEOUT_S`` (10), ``HEADROOM_PROMETHEUS_RETRIES`` (2),
  ``HEADROOM_PROMETHEUS_BACKOFF_S`` (0.5): the client's own retries within one attempt.
- ``HEADROOM_TELEMETRY_LABELS``: label names, a mapping (or in the environment
  ``tenant=tenant,model=model_name,region=region[,class=...]``); ``class`` is optional.
- ``HEADROOM_TELEMETRY_ENGINE`` (``vllm-v1``): the serving engine's metric names, one of
  ``vllm-v1``, ``vllm-v0``, ``sglang`` (``controlplane.telemetry.metrics``).
- ``HEADROOM_TELEMETRY_LABELS``' ``tenant`` label may be absent from the engine's series (real
  vLLM has none): such series are the pool's, stored with an empty tenant.
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
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")

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
class TelemetrySettings:
    prometheus_url: str
    prometheus_timeout_s: float
    prometheus_retries: int
    prometheus_backoff_s: float
    labels: LabelConfig
    engine: str
    bucket_s: int
    peak_s: int
    lag_s: int
    lookback_s: int
    max_catchup_s: int
    profile_window_s: int
    min_requests: float
    profile_tolerance: float
    drift: DriftThresholds


def _read(name: str, parse: Callable[[str], T], default: T) -> T:
    if hasattr(settings, name):
        value: Any = getattr(settings, name)
        return parse(value) if isinstance(value, str) else value
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return parse(raw)


def _number(name: str, cast: Callable[[str], T]) -> Callable[[str], T]:
    def parse(raw: str) -> T:
        try:
            return cast(raw)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc

    return parse


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


ENGINE_NAMES = ("vllm-v1", "vllm-v0", "sglang")


def _engine(value: str) -> str:
    name = value.strip().lower()
    if name not in ENGINE_NAMES:
        raise ImproperlyConfigured(
            f"HEADROOM_TELEMETRY_ENGINE must be one of {', '.join(ENGINE_NAMES)}, got {value!r}"
        )
    return name


def _positive(name: str, value: T) -> T:
    if not isinstance(value, int | float) or value <= 0:
        raise ImproperlyConfigured(f"{name} must be positive, got {value!r}")
    return value


def _non_negative(name: str, value: T) -> T:
    if not isinstance(value, int | float) or value < 0:
        raise ImproperlyConfigured(f"{name} must be zero or more, got {value!r}")
    return value


def telemetry_settings() -> TelemetrySettings:
    """The current telemetry settings, checked."""

    def num(name: str, default: float) -> float:
        return float(_read(name, _number(name, float), default))

    def whole(name: str, default: int) -> int:
        return int(_read(name, _number(name, int), default))

    url = _read("HEADROOM_PROMETHEUS_URL", str, "http://127.0.0.1:9090")
    if not url.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"HEADROOM_PROMETHEUS_URL must be an http(s) URL: {url!r}")
    labels = _read("HEADROOM_TELEMETRY_LABELS", _labels, dict(DEFAULT_LABELS))
    drift = DriftThresholds(
        prompt_mean_rel=_positive(
            "HEADROOM_TELEMETRY_DRIFT_PROMPT_MEAN",
            num("HEADROOM_TELEMETRY_DRIFT_PROMPT_MEAN", 0.25),
        ),
        output_mean_rel=_positive(
            "HEADROOM_TELEMETRY_DRIFT_OUTPUT_MEAN",
            num("HEADROOM_TELEMETRY_DRIFT_OUTPUT_MEAN", 0.25),
        ),
        cache_hit_rate_abs=_positive(
            "HEADROOM_TELEMETRY_DRIFT_CACHE_HIT_RATE",
            num("HEADROOM_TELEMETRY_DRIFT_CACHE_HIT_RATE", 0.10),
        ),
        token_share_abs=_positive(
            "HEADROOM_TELEMETRY_DRIFT_TOKEN_SHARE",
            num("HEADROOM_TELEMETRY_DRIFT_TOKEN_SHARE", 0.10),
        ),
    )
    return TelemetrySettings(
        prometheus_url=url,
        prometheus_timeout_s=_positive(
            "HEADROOM_PROMETHEUS_TIMEOUT_S", num("HEADROOM_PROMETHEUS_TIMEOUT_S", 10.0)
        ),
        prometheus_retries=_non_negative(
            "HEADROOM_PROMETHEUS_RETRIES", whole("HEADROOM_PROMETHEUS_RETRIES", 2)
        ),
        prometheus_backoff_s=_non_negative(
            "HEADROOM_PROMETHEUS_BACKOFF_S", num("HEADROOM_PROMETHEUS_BACKOFF_S", 0.5)
        ),
        labels=label_config(labels),
        engine=_engine(_read("HEADROOM_TELEMETRY_ENGINE", str, "vllm-v1")),
        bucket_s=_positive("HEADROOM_TELEMETRY_BUCKET_S", whole("HEADROOM_TELEMETRY_BUCKET_S", 60)),
        peak_s=_positive("HEADROOM_TELEMETRY_PEAK_S", whole("HEADROOM_TELEMETRY_PEAK_S", 60)),
        lag_s=_non_negative("HEADROOM_TELEMETRY_LAG_S", whole("HEADROOM_TELEMETRY_LAG_S", 60)),
        lookback_s=_positive(
            "HEADROOM_TELEMETRY_LOOKBACK_S", whole("HEADROOM_TELEMETRY_LOOKBACK_S", 3600)
        ),
        max_catchup_s=_positive(
            "HEADROOM_TELEMETRY_MAX_CATCHUP_S",
            whole("HEADROOM_TELEMETRY_MAX_CATCHUP_S", 7 * 86400),
        ),
        profile_window_s=_positive(
            "HEADROOM_TELEMETRY_PROFILE_WINDOW_S",
            whole("HEADROOM_TELEMETRY_PROFILE_WINDOW_S", 86400),
        ),
        min_requests=_non_negative(
            "HEADROOM_TELEMETRY_MIN_REQUESTS", num("HEADROOM_TELEMETRY_MIN_REQUESTS", 50.0)
        ),
        profile_tolerance=_non_negative(
            "HEADROOM_TELEMETRY_PROFILE_TOLERANCE",
            num("HEADROOM_TELEMETRY_PROFILE_TOLERANCE", 0.02),
        ),
        drift=drift,
    )
