"""Benchmark runs: one row per measurement of one replica shape, whatever its outcome.

A ``BenchmarkRun`` is a job: it is queued (by the schedule, an admin or the API), runs (the
engine benchmark on a Ray worker with the shape's GPUs, or the endpoint load test), and ends
succeeded, with the capacity figures it measured, or failed, with the error; a failed run
stores no figure, so the previous figures stay. At most one run per shape and kind is queued or
running at a time (a partial unique constraint), which makes requesting a run idempotent.

``BenchmarkEndpoint`` is where the endpoint load test of a shape sends its load: the base URL of
a live replica of that shape (at most one per shape), the model name it serves, the API, the
name of an environment variable holding its bearer key (never the key), the per-request timeout,
the replica's batch limit and the requests sent per rate. A shape with an enabled endpoint is
measured by the load test when its figures need refreshing (see ``services``).

``ShapeFreshness`` is a proxy of ``ReplicaShape`` that the admin lists to show how fresh each
shape's capacity figure is and why it would be measured again.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from simple_history.models import HistoricalRecords

from controlplane.core.jobs import Job
from controlplane.core.records import Revisioned
from controlplane.core.validators import finite
from controlplane.fleet.models import CapacityFigure, ReplicaShape
from controlplane.fleet.selectors import planning_figure

# One request of the load test may take this long at most, seconds (a long generation on a
# slow replica); and a point of the sweep sends at most this many requests.
MAX_ENDPOINT_TIMEOUT_S = 3600.0
MIN_REQUESTS_PER_POINT = 20
MAX_REQUESTS_PER_POINT = 100_000
MAX_ENDPOINT_CONCURRENCY = 100_000

_ENV_NAME = RegexValidator(
    r"^[A-Za-z_][A-Za-z0-9_]*$",
    "The name of an environment variable: letters, digits and _, not starting with a digit. "
    "Give the variable's name, never the key itself.",
)
_V1_SUFFIX = re.compile(r"/v1/?$")


class BenchmarkRun(Job):
    class Kind(models.TextChoices):
        ENGINE = "engine", "engine benchmark"
        ENDPOINT = "endpoint", "endpoint load test"

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule", "schedule"
        MANUAL = "manual", "requested by a user"

    class Device(models.TextChoices):
        GPU = "gpu", "the shape's GPUs"
        CPU = "cpu", "CPU (development only)"

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.ENGINE)
    shape = models.ForeignKey(ReplicaShape, on_delete=models.CASCADE, related_name="benchmark_runs")
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.MANUAL)
    reason = models.CharField(
        max_length=500, blank=True, help_text="Why the run was requested (stale figure, …)."
    )
    device = models.CharField(
        max_length=8,
        choices=Device.choices,
        default=Device.GPU,
        help_text="Where the engine benchmark runs; CPU figures describe the host, not the GPU.",
    )
    requested_at = models.DateTimeField(default=timezone.now)
    task_id = models.CharField(max_length=64, blank=True, help_text="Celery task id.")
    results = models.JSONField(
        default=dict, blank=True, help_text="Every measured point, in the units it names."
    )
    hardware = models.JSONField(
        default=dict, blank=True, help_text="GPU name and count, or the CPU model."
    )
    software = models.JSONField(
        default=dict, blank=True, help_text="torch, Ray, Python and CUDA versions."
    )
    inputs = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "What the run measured, as it was when it started: the workload (tokens), the "
            "model's architecture, the shape, the runtime version."
        ),
    )
    workload_profile_version = models.CharField(
        max_length=64,
        blank=True,
        help_text="Identifies the model's current workload profiles when the run started.",
    )
    figures = models.ManyToManyField(
        CapacityFigure, blank=True, related_name="benchmark_runs", editable=False
    )
    history = HistoricalRecords(excluded_fields=["results"])

    class Meta:
        ordering = ["-requested_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["shape", "kind"],
                condition=Q(status__in=["queued", "running"]),
                name="one_active_benchmark_run",
                violation_error_message=(
                    "This shape already has a queued or running benchmark run of this kind."
                ),
            )
        ]
        indexes = [models.Index(fields=["shape", "kind", "-requested_at"])]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} of {self.shape} #{self.pk}: {self.status}"

    @property
    def figure_source(self) -> str:
        """The ``CapacityFigure.source`` of the figures this kind of run measures."""
        if self.kind == self.Kind.ENDPOINT:
            return str(CapacityFigure.Source.ENDPOINT_LOAD_TEST)
        return str(CapacityFigure.Source.ENGINE_BENCHMARK)

    def is_overdue(self, *, timeout: timedelta, now: datetime | None = None) -> bool:
        """Whether an active run has been queued or running longer than ``timeout`` (its
        worker died, or the broker lost the message)."""
        if not self.is_active:
            return False
        since = self.started_at or self.requested_at
        return (now or timezone.now()) - since > timeout


def base_url_problem(url: str) -> str:
    """Why ``url`` cannot be a replica's base URL (``http(s)://host[:port][/prefix]``,
    without ``/v1``), or ''."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "Use an http:// or https:// URL of a replica, e.g. http://vllm-0.internal:8000."
    if parts.username or parts.password:
        return (
            "Leave credentials out of the URL (every role can read it): put the bearer key in "
            "an environment variable on the workers and name it in api_key_env."
        )
    if parts.query or parts.fragment:
        return "Give the base URL without a query string or fragment."
    if _V1_SUFFIX.search(parts.path):
        return "Give the base URL without /v1: requests go to <base URL>/v1/completions."
    return ""


class BenchmarkEndpoint(Revisioned):
    """A live replica of a shape that its endpoint load test measures (one per shape)."""

    class Api(models.TextChoices):
        COMPLETIONS = "completions", "completions (/v1/completions)"
        CHAT = "chat", "chat (/v1/chat/completions)"

    shape = models.OneToOneField(
        ReplicaShape, on_delete=models.CASCADE, related_name="benchmark_endpoint"
    )
    base_url = models.URLField(
        max_length=500,
        help_text=(
            "A replica of the shape, OpenAI-compatible and streaming: http(s)://host:port, "
            "without /v1. The load test sends it load up to past its knee: point it at a replica "
            "that serves no tenant."
        ),
    )
    served_model_name = models.CharField(
        max_length=200,
        help_text="The model name the endpoint serves (vLLM's --served-model-name).",
    )
    api = models.CharField(max_length=16, choices=Api.choices, default=Api.COMPLETIONS)
    api_key_env = models.CharField(
        max_length=128,
        blank=True,
        validators=[_ENV_NAME],
        help_text=(
            "Name of the environment variable, on the Celery workers, that holds the bearer "
            "key (empty: no key). The key itself is never stored."
        ),
    )
    timeout_s = models.FloatField(
        default=60.0,
        validators=[
            finite,
            MinValueValidator(0.1),
            MaxValueValidator(MAX_ENDPOINT_TIMEOUT_S),
        ],
        help_text="Longest one request may take, seconds; slower requests count as timeouts.",
    )
    max_concurrency = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_ENDPOINT_CONCURRENCY)],
        help_text=(
            "Sequences the replica runs at once (vLLM's --max-num-seqs); the token-rate probes "
            "run twice as many users. Empty: taken from the shape's freshest capacity figure "
            "when saved (required when the shape has none)."
        ),
    )
    ignore_eos = models.BooleanField(
        default=True,
        help_text=(
            "Ask for exactly max_tokens of output (vLLM and SGLang); turn off for servers "
            "that refuse unknown fields."
        ),
    )
    requests_per_point = models.PositiveIntegerField(
        default=1000,
        validators=[
            MinValueValidator(MIN_REQUESTS_PER_POINT),
            MaxValueValidator(MAX_REQUESTS_PER_POINT),
        ],
        help_text="Requests sent at each rate of the knee search (thousands for planning).",
    )
    enabled = models.BooleanField(
        default=True,
        help_text=(
            "Disabled: no endpoint load test runs (the schedule queues engine benchmarks "
            "for the shape instead)."
        ),
    )
    history = HistoricalRecords()

    class Meta:
        ordering = ["shape__name"]

    def __str__(self) -> str:
        return f"{self.shape} at {self.base_url}"

    def clean(self) -> None:
        super().clean()
        errors: dict[str, str] = {}
        if self.base_url:
            problem = base_url_problem(self.base_url)
            if problem:
                errors["base_url"] = problem
        if self.served_model_name and not self.served_model_name.strip():
            errors["served_model_name"] = "Give the model name the endpoint serves."
        if self.max_concurrency is None and self.shape_id is not None:
            figure = planning_figure(shape=self.shape)
            if figure is None:
                errors["max_concurrency"] = (
                    "Give the replica's maximum concurrency: the shape has no capacity figure "
                    "to take it from."
                )
            else:
                self.max_concurrency = figure.max_concurrency
        if errors:
            raise ValidationError(errors)


class ShapeFreshness(ReplicaShape):
    """A replica shape seen from its capacity figures: how old, and why to measure again."""

    class Meta:
        proxy = True
        verbose_name = "capacity figure freshness"
        verbose_name_plural = "capacity figure freshness"
