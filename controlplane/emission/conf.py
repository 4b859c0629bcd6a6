"""Emission settings, read at call time.

Read with ``controlplane.core.conf`` (the Django setting of the same name, else the
environment variable, else the default below; a malformed value is an error).

- ``HEADROOM_EMISSION_ROOT``: the folder file and Kubernetes sinks write under; a sink's
  ``directory`` is relative to it (default ``<HEADROOM_VAR_DIR>/emission``). Keeping every
  sink inside one root means an admin-editable record cannot point the control plane at an
  arbitrary path on its host.
- ``HEADROOM_EMISSION_BACKOFF_BASE_S`` (10) and ``HEADROOM_EMISSION_BACKOFF_MAX_S`` (3600):
  the first retry delay and the cap of the exponential backoff, seconds.
- ``HEADROOM_EMISSION_CLAIM_S`` (300): how long a dispatcher's claim on a row lasts before
  another dispatcher may take the row over, seconds; never shorter than twice the sink's own
  timeout.
- ``HEADROOM_EMISSION_BATCH`` (100): rows one dispatch run claims at most.
- ``HEADROOM_KUBECTL`` (``kubectl``): the kubectl executable Kubernetes sinks apply with.
- ``HEADROOM_HPA_METRIC`` (``vllm_requests_in_flight``): the per-pod metric (vLLM's running +
  waiting requests) that the emitted HorizontalPodAutoscalers target; prometheus-adapter
  serves it with the rule shipped in ``deploy/prometheus-adapter/rules.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from controlplane.core.conf import setting_int, setting_number, setting_text

# The name prometheus-adapter gives vLLM's running + waiting requests per pod
# (deploy/prometheus-adapter/rules.yaml).
DEFAULT_HPA_METRIC = "vllm_requests_in_flight"


@dataclass(frozen=True)
class EmissionSettings:
    root: Path
    backoff_base_s: float
    backoff_max_s: float
    claim_s: float
    batch: int
    kubectl: str
    hpa_metric: str


def emission_settings() -> EmissionSettings:
    """The current emission settings, checked."""
    var_dir = Path(getattr(settings, "VAR_DIR", Path.cwd() / "var"))
    base = setting_number("HEADROOM_EMISSION_BACKOFF_BASE_S", 10.0, minimum=0.0)
    cap = setting_number("HEADROOM_EMISSION_BACKOFF_MAX_S", 3600.0, minimum=0.0)
    if cap < base:
        raise ImproperlyConfigured(
            "HEADROOM_EMISSION_BACKOFF_MAX_S must be at least HEADROOM_EMISSION_BACKOFF_BASE_S"
        )
    metric = setting_text("HEADROOM_HPA_METRIC", DEFAULT_HPA_METRIC)
    if not metric:
        raise ImproperlyConfigured("HEADROOM_HPA_METRIC must name a metric")
    return EmissionSettings(
        root=Path(setting_text("HEADROOM_EMISSION_ROOT", str(var_dir / "emission"))),
        backoff_base_s=base,
        backoff_max_s=cap,
        claim_s=setting_number("HEADROOM_EMISSION_CLAIM_S", 300.0, minimum=1.0),
        batch=setting_int("HEADROOM_EMISSION_BATCH", 100, minimum=1),
        kubectl=setting_text("HEADROOM_KUBECTL", "kubectl"),
        hpa_metric=metric,
    )
