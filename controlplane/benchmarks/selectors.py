"""Reads for benchmarks: the workload a shape is measured on, how fresh its figures are, and
why it would be measured again.

A shape's figures are measured again when one of these holds (``refresh_reasons``):

- it has no capacity figure;
- its freshest figure is older than ``HEADROOM_CAPACITY_MAX_AGE_DAYS``;
- what the figure was measured on changed since, as its provenance records it: the model's
  architecture, the shape (accelerator, GPUs per replica), the runtime version, or the model's
  workload profiles (``workload_profile_version``). A figure whose provenance does not record
  one of these (a figure entered by hand) is not judged on it.

The freshest figure is the freshest whole-mix figure, else the freshest of any class: the one
the placement export plans on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from controlplane.benchmarks.conf import benchmark_settings
from controlplane.benchmarks.models import BenchmarkEndpoint, BenchmarkRun
from controlplane.fleet.models import CapacityFigure, LlmModel, ReplicaShape
from controlplane.fleet.selectors import planning_figure
from controlplane.policies.models import WorkloadProfile

# Used when a model has no workload profile yet (tokens): a chat-like mix.
DEFAULT_PROMPT_TOKENS = 1024
DEFAULT_OUTPUT_TOKENS = 256
NO_PROFILES = "none"

MODEL_FINGERPRINT_FIELDS = (
    "name",
    "parameters_billions",
    "bytes_per_parameter",
    "layers",
    "kv_heads",
    "head_dim",
    "kv_bytes_per_element",
    "hidden_size",
    "intermediate_size",
    "attention_heads",
    "vocab_size",
)


# -- workload ---------------------------------------------------------------------------------


def current_profiles(model: LlmModel) -> list[WorkloadProfile]:
    """The model's current workload profiles: the highest version of each (tenant, class,
    region), ordered by id."""
    latest: dict[tuple[int, int, int | None], WorkloadProfile] = {}
    for profile in WorkloadProfile.objects.filter(model=model).order_by("version", "pk"):
        latest[(profile.tenant_id, profile.workload_class_id, profile.region_id)] = profile
    return sorted(latest.values(), key=lambda p: p.pk)


def workload_profile_version(model: LlmModel) -> str:
    """Names the set of the model's current workload profiles: ``"none"`` without any, else
    ``"<count>:<digest>"`` of their ids. A new profile version is a new row, so any new or
    changed profile gives a new value; comparing two values says whether the workload changed.
    """
    profiles = current_profiles(model)
    if not profiles:
        return NO_PROFILES
    ids = ",".join(str(p.pk) for p in profiles)
    return f"{len(profiles)}:{hashlib.sha256(ids.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class WorkloadSummary:
    """What a shape is benchmarked on, tokens. Means are weighted by each profile's peak
    request rate (equal weights when every rate is 0); p95 is the largest of the profiles'
    p95, so the long end of the mix is measured."""

    prompt_tokens_mean: int
    prompt_tokens_p95: int
    output_tokens_mean: int
    output_tokens_p95: int
    profiles: int
    profile_version: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def workload_summary(model: LlmModel) -> WorkloadSummary:
    """The model's current workload, or the default chat-like mix when it has no profile."""
    profiles = current_profiles(model)
    if not profiles:
        return WorkloadSummary(
            prompt_tokens_mean=DEFAULT_PROMPT_TOKENS,
            prompt_tokens_p95=DEFAULT_PROMPT_TOKENS,
            output_tokens_mean=DEFAULT_OUTPUT_TOKENS,
            output_tokens_p95=DEFAULT_OUTPUT_TOKENS,
            profiles=0,
            profile_version=NO_PROFILES,
        )
    weights = [p.peak_requests_per_s for p in profiles]
    if sum(weights) <= 0:
        weights = [1.0] * len(profiles)
    total = sum(weights)

    def mean(field: str) -> int:
        value: float = sum(w * getattr(p, field) for w, p in zip(weights, profiles, strict=True))
        return max(1, round(value / total))

    prompt_mean = mean("prompt_tokens_mean")
    output_mean = mean("output_tokens_mean")
    return WorkloadSummary(
        prompt_tokens_mean=prompt_mean,
        prompt_tokens_p95=max(prompt_mean, round(max(p.prompt_tokens_p95 for p in profiles))),
        output_tokens_mean=output_mean,
        output_tokens_p95=max(output_mean, round(max(p.output_tokens_p95 for p in profiles))),
        profiles=len(profiles),
        profile_version=workload_profile_version(model),
    )


# -- what a figure was measured on --------------------------------------------------------------


def model_fingerprint(model: LlmModel) -> dict[str, Any]:
    """The model's architecture as plain data, as figure provenance records it."""
    return {name: getattr(model, name) for name in MODEL_FINGERPRINT_FIELDS}


def shape_fingerprint(shape: ReplicaShape) -> dict[str, Any]:
    """The shape's hardware as plain data, as figure provenance records it."""
    return {
        "name": shape.name,
        "accelerator": shape.accelerator.name,
        "gpus_per_replica": shape.gpus_per_replica,
    }


def freshest_figure(shape: ReplicaShape) -> CapacityFigure | None:
    """The figure planning uses for the shape (``fleet.selectors.planning_figure``): the one
    whose freshness and concurrency the benchmarks judge."""
    return planning_figure(shape=shape)


def refresh_reasons(
    shape: ReplicaShape,
    figure: CapacityFigure | None,
    *,
    now: datetime | None = None,
    max_age_days: int | None = None,
    profile_version: str | None = None,
) -> list[str]:
    """Why the shape's figures should be measured again (empty: they are fresh).

    ``profile_version`` is the model's current ``workload_profile_version`` when the caller
    already has it.
    """
    if figure is None:
        return ["no capacity figure"]
    now = now or timezone.now()
    max_age = benchmark_settings().max_age_days if max_age_days is None else max_age_days
    reasons = []
    age = now - figure.measured_at
    if age > timedelta(days=max_age):
        reasons.append(f"figure is {age.total_seconds() / 86400:.1f} days old (max {max_age})")
    provenance = figure.provenance if isinstance(figure.provenance, Mapping) else {}
    recorded_model = provenance.get("model")
    if isinstance(recorded_model, Mapping):
        current = model_fingerprint(shape.model)
        changed = sorted(
            key for key, value in recorded_model.items() if current.get(key, value) != value
        )
        if changed:
            reasons.append(f"model changed since measured ({', '.join(changed)})")
    recorded_shape = provenance.get("shape")
    if isinstance(recorded_shape, Mapping):
        current_shape = shape_fingerprint(shape)
        changed = sorted(
            key
            for key, value in recorded_shape.items()
            if key != "name" and current_shape.get(key, value) != value
        )
        if changed:
            reasons.append(f"shape changed since measured ({', '.join(changed)})")
    if "runtime_version" in provenance and provenance["runtime_version"] != shape.runtime_version:
        reasons.append(
            f"runtime version changed ({provenance['runtime_version'] or 'none'} → "
            f"{shape.runtime_version or 'none'})"
        )
    if "workload_profile_version" in provenance:
        current_version = profile_version or workload_profile_version(shape.model)
        if provenance["workload_profile_version"] != current_version:
            reasons.append("workload profiles changed since measured")
    return reasons


# -- runs and freshness ---------------------------------------------------------------------------


def active_run(shape: ReplicaShape, kind: str) -> BenchmarkRun | None:
    """The shape's queued or running run of ``kind``, if any."""
    return (
        BenchmarkRun.objects.filter(shape=shape, kind=kind, status__in=BenchmarkRun.ACTIVE)
        .order_by("-requested_at", "-pk")
        .first()
    )


def last_run(shape: ReplicaShape, kind: str | None = None) -> BenchmarkRun | None:
    runs = BenchmarkRun.objects.filter(shape=shape)
    if kind is not None:
        runs = runs.filter(kind=kind)
    return runs.order_by("-requested_at", "-pk").first()


def overdue_runs(*, timeout: timedelta, now: datetime | None = None) -> list[BenchmarkRun]:
    """Queued or running runs older than ``timeout``: their worker or message was lost."""
    now = now or timezone.now()
    runs = BenchmarkRun.objects.filter(status__in=BenchmarkRun.ACTIVE).select_related("shape")
    return [run for run in runs if run.is_overdue(timeout=timeout, now=now)]


@dataclass(frozen=True)
class Freshness:
    """How fresh one shape's capacity figures are."""

    shape: ReplicaShape
    figure: CapacityFigure | None
    reasons: list[str]
    active_run: BenchmarkRun | None
    last_run: BenchmarkRun | None

    @property
    def is_fresh(self) -> bool:
        return not self.reasons

    @property
    def age_days(self) -> float | None:
        if self.figure is None:
            return None
        return round(self.figure.age.total_seconds() / 86400, 2)


def shapes_freshness(shapes: Iterable[ReplicaShape] | None = None) -> list[Freshness]:
    """The freshness of each shape (every shape by default), in name order."""
    chosen: Sequence[ReplicaShape] = (
        list(ReplicaShape.objects.select_related("model", "accelerator").order_by("name"))
        if shapes is None
        else sorted(shapes, key=lambda s: s.name)
    )
    max_age = benchmark_settings().max_age_days
    now = timezone.now()
    versions: dict[int, str] = {}
    out = []
    for shape in chosen:
        if shape.model_id not in versions:
            versions[shape.model_id] = workload_profile_version(shape.model)
        figure = freshest_figure(shape)
        out.append(
            Freshness(
                shape=shape,
                figure=figure,
                reasons=refresh_reasons(
                    shape,
                    figure,
                    now=now,
                    max_age_days=max_age,
                    profile_version=versions[shape.model_id],
                ),
                active_run=(
                    BenchmarkRun.objects.filter(shape=shape, status__in=BenchmarkRun.ACTIVE)
                    .order_by("-requested_at", "-pk")
                    .first()
                ),
                last_run=last_run(shape),
            )
        )
    return out


def enabled_endpoint(shape: ReplicaShape) -> BenchmarkEndpoint | None:
    """The shape's benchmark endpoint when it has one and it is enabled."""
    return BenchmarkEndpoint.objects.filter(shape=shape, enabled=True).first()


def enabled_endpoint_shape_ids() -> set[int]:
    """Ids of the shapes that have an enabled benchmark endpoint."""
    return set(BenchmarkEndpoint.objects.filter(enabled=True).values_list("shape_id", flat=True))


def last_finished_run(shape: ReplicaShape, kind: str) -> BenchmarkRun | None:
    """The shape's most recently finished run of ``kind`` (succeeded or failed)."""
    return (
        BenchmarkRun.objects.filter(shape=shape, kind=kind, status__in=BenchmarkRun.FINISHED)
        .order_by("-finished_at", "-pk")
        .first()
    )
