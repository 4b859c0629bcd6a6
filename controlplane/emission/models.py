"""Emission: where activated plans go, and the outbox that takes them there.

- ``AllocationSink`` is one configured destination: an HTTP webhook (signed), a folder of JSON
  files, a folder of Kubernetes manifests (optionally applied with kubectl), or a folder of
  LiteLLM proxy configurations (the gateway's routing weights). Its secret is
  write-only: the admin and the API show a hint, never the value, and its history leaves it out
  (an entry that rotates it says "secret rotated" as its change reason).
- ``OutboxEntry`` is one region's allocation for one sink, written in the same transaction as
  the plan's activation, so a plan is emitted if and only if it was activated. Dispatchers
  claim due rows with a conditional UPDATE (see ``OutboxEntryQuerySet.claimable``) and record
  the outcome only while their claim holds, so two dispatchers never deliver one row at once.
- ``DeliveryAttempt`` logs each attempt: when, by which dispatcher, the outcome, the HTTP
  status and the error. Outbox rows change by conditional UPDATEs, which model history cannot
  see; this log is their audit trail.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from simple_history.models import HistoricalRecords

from controlplane.core.validators import finite
from controlplane.emission.conf import emission_settings
from controlplane.plans.models import Plan

# Webhook secrets are HMAC keys: shorter than this is guessable offline from one signed body.
MIN_SECRET_LENGTH = 16
# The change reason of a history entry whose change is the secret (which history leaves out).
SECRET_ROTATED = "secret rotated"
SECRET_REMOVED = "secret removed"
# How many trailing characters of a secret the admin and the API show, to tell secrets apart.
SECRET_HINT_CHARS = 4
# A sink's timeout bounds one delivery attempt, seconds.
MAX_TIMEOUT_S = 300.0

_DNS_LABEL = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "A Kubernetes namespace: lower-case letters, digits and '-', at most 63 characters.",
)
_SINK_NAME = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
    "Use letters, digits and . _ - (starting with a letter or digit).",
)
_DIRECTORY_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_DNS_SUBDOMAIN = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    "A Kubernetes object name: lower-case letters, digits, '-' and '.'.",
)
# A label key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters.
_LABEL_KEY = RegexValidator(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
    "A Kubernetes label key such as nvidia.com/gpu.product.",
)
# The GPU product label NVIDIA GPU feature discovery puts on GPU nodes.
DEFAULT_GPU_NODE_LABEL = "nvidia.com/gpu.product"

# LiteLLM: where a region's self-hosted pool of a model answers, by default the Service the
# Kubernetes sink writes for that region and model (in the sink's namespace).
DEFAULT_ENDPOINT_TEMPLATE = "http://{service}.{namespace}.svc.cluster.local/v1"
ENDPOINT_PLACEHOLDERS = ("region", "model", "service", "namespace")
# LiteLLM: what one hosted provider's entry in ``hosted_endpoints`` may say.
HOSTED_ENDPOINT_KEYS = ("provider", "api_base", "api_key_env", "models")
_LITELLM_PROVIDER = re.compile(r"^[a-z0-9][a-z0-9_]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def endpoint_template_problem(template: str) -> str:
    """Why ``template`` cannot give a pool's OpenAI base URL, or ''."""
    try:
        fields = [
            (name, spec, conversion)
            for _, name, spec, conversion in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as exc:
        return f"Not a valid template: {exc}."
    if any(spec or conversion for _, spec, conversion in fields):
        return "Write placeholders plainly, as {region}: no conversions or format specs."
    unknown = [n for n, _, _ in fields if n not in ENDPOINT_PLACEHOLDERS]
    if unknown:
        known = ", ".join("{" + p + "}" for p in ENDPOINT_PLACEHOLDERS)
        return f"Unknown placeholder {{{unknown[0]}}}; use {known}."
    url = template.format(**{p: "x" for p in ENDPOINT_PLACEHOLDERS})
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        return "Give an http:// or https:// URL."
    return ""


def hosted_endpoints_problem(value: object) -> str:
    """Why ``value`` is not a valid ``hosted_endpoints`` mapping, or ''.

    ``{provider name: {"provider": LiteLLM provider, "api_base": URL, "api_key_env": NAME,
    "models": {Headroom model: the provider's model id}}}``; only ``provider`` is required.
    Keys are referenced by environment variable name (``os.environ/NAME`` in the written
    config), never stored: an ``api_key`` entry is refused.
    """
    if not isinstance(value, Mapping):
        return "Give a mapping of hosted provider names to their endpoints."
    for name, entry in value.items():
        where = f"{name}: "
        if not isinstance(entry, Mapping):
            return where + "give a mapping with provider, api_base, api_key_env, models."
        for key in entry:
            if key == "api_key":
                return where + (
                    "API keys are not stored; give api_key_env, the environment variable "
                    "that holds the key on the proxy."
                )
            if key not in HOSTED_ENDPOINT_KEYS:
                return where + f"unknown key {key!r}; known: {', '.join(HOSTED_ENDPOINT_KEYS)}."
        provider = entry.get("provider")
        if not isinstance(provider, str) or not _LITELLM_PROVIDER.match(provider):
            return where + (
                "provider is required: LiteLLM's provider prefix, such as openai or together_ai."
            )
        api_base = entry.get("api_base")
        if api_base is not None and (
            not isinstance(api_base, str)
            or urlsplit(api_base).scheme not in ("http", "https")
            or not urlsplit(api_base).netloc
        ):
            return where + "api_base: give an http:// or https:// URL."
        env = entry.get("api_key_env")
        if env is not None and (not isinstance(env, str) or not _ENV_NAME.match(env)):
            return where + "api_key_env: give an environment variable name, such as API_KEY."
        models_map = entry.get("models")
        if models_map is not None and (
            not isinstance(models_map, Mapping)
            or not all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in models_map.items()
            )
        ):
            return where + "models: give a mapping of model names to the provider's model ids."
    return ""


class AllocationSink(models.Model):
    class Kind(models.TextChoices):
        WEBHOOK = "webhook", "HTTP webhook"
        FILES = "files", "JSON files"
        KUBERNETES = "kubernetes", "Kubernetes manifests"
        LITELLM = "litellm", "LiteLLM proxy config"

    class Autoscaler(models.TextChoices):
        HPA = "hpa", "HorizontalPodAutoscaler (prometheus-adapter)"
        KEDA = "keda", "KEDA ScaledObject (Prometheus trigger)"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    name = models.CharField(max_length=64, unique=True, validators=[_SINK_NAME])
    enabled = models.BooleanField(
        default=True, help_text="Disabled sinks get no new outbox rows; queued rows still go."
    )
    url = models.URLField(
        max_length=500, blank=True, help_text="Webhook: where allocations are POSTed."
    )
    secret = models.CharField(
        max_length=256,
        blank=True,
        help_text=(
            f"Webhook: the HMAC-SHA256 key (at least {MIN_SECRET_LENGTH} characters). "
            "Write-only: never shown back."
        ),
    )
    directory = models.CharField(
        max_length=300,
        blank=True,
        help_text=(
            "Files and Kubernetes: folder relative to HEADROOM_EMISSION_ROOT (e.g. "
            "'allocations/prod'); created on first delivery."
        ),
    )
    timeout_s = models.FloatField(
        default=10.0,
        validators=[finite, MinValueValidator(0.1), MaxValueValidator(MAX_TIMEOUT_S)],
        help_text="Longest one delivery attempt may take, seconds (HTTP request or kubectl).",
    )
    namespace = models.CharField(
        max_length=63,
        blank=True,
        default="default",
        validators=[_DNS_LABEL],
        help_text=(
            "Kubernetes: namespace of the emitted Deployments and autoscalers; LiteLLM: of "
            "the Services the default endpoint template names."
        ),
    )
    container_image = models.CharField(
        max_length=255,
        blank=True,
        help_text=(
            "Kubernetes: the model server image (stock vLLM, e.g. vllm/vllm-openai:v0.11.0) for "
            "shapes whose record names none."
        ),
    )
    autoscaler = models.CharField(
        max_length=8,
        choices=Autoscaler.choices,
        default=Autoscaler.HPA,
        help_text=(
            "Kubernetes: a HorizontalPodAutoscaler on the vLLM metric served by "
            "prometheus-adapter (deploy/prometheus-adapter/), or a KEDA ScaledObject querying "
            "Prometheus itself."
        ),
    )
    prometheus_url = models.URLField(
        max_length=300,
        blank=True,
        help_text="Kubernetes with KEDA: the Prometheus the ScaledObjects query.",
    )
    gpu_node_label = models.CharField(
        max_length=253,
        default=DEFAULT_GPU_NODE_LABEL,
        validators=[_LABEL_KEY],
        help_text=(
            "Kubernetes: the node label naming the GPU type; pods require the accelerator's GPU "
            "product value in it (NVIDIA GPU feature discovery writes nvidia.com/gpu.product)."
        ),
    )
    cpu_per_gpu = models.FloatField(
        default=4.0,
        validators=[finite, MinValueValidator(0.1), MaxValueValidator(256)],
        help_text="Kubernetes: CPU cores each replica requests per GPU.",
    )
    memory_gib_per_gpu = models.FloatField(
        default=32.0,
        validators=[finite, MinValueValidator(1), MaxValueValidator(4096)],
        help_text="Kubernetes: memory (GiB) each replica requests, and is limited to, per GPU.",
    )
    env_secret = models.CharField(
        max_length=253,
        blank=True,
        validators=[_DNS_SUBDOMAIN],
        help_text=(
            "Kubernetes: a Secret whose keys become the model server's environment (HF_TOKEN "
            "for gated models); optional, so pods start without it."
        ),
    )
    kubectl_apply = models.BooleanField(
        default=False,
        help_text="Kubernetes: also run 'kubectl apply' on each written file.",
    )
    kubectl_context = models.CharField(
        max_length=128,
        blank=True,
        help_text="Kubernetes: the kubeconfig context to apply to (empty: the current one).",
    )
    endpoint_template = models.CharField(
        max_length=500,
        blank=True,
        help_text=(
            "LiteLLM: the OpenAI base URL of a region's self-hosted pool of a model, with "
            "{region}, {model}, {service} (the Kubernetes sink's Service name) and {namespace}; "
            f"empty = {DEFAULT_ENDPOINT_TEMPLATE}."
        ),
    )
    hosted_endpoints = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            'LiteLLM: per hosted provider, {"provider": "together_ai", "api_base": "https://…", '
            '"api_key_env": "TOGETHERAI_API_KEY", "models": {"chat-70b": "meta-llama/…"}}. '
            "Keys are named by environment variable, never stored."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The secret stays out of the audit trail: history rows are readable by every role.
    history = HistoricalRecords(excluded_fields=["secret"])
    # The secret as loaded from the database (``from_db``), to tell a rotation on save.
    _stored_secret: str | None = None

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # The history leaves the secret out, so a rotation alone would be an entry listing no
        # change: its change reason says what happened instead.
        stored = getattr(self, "_stored_secret", None)
        reason = None
        if self.pk is not None and stored is not None and self.secret != stored:
            reason = SECRET_ROTATED if self.secret else SECRET_REMOVED
            if not getattr(self, "_change_reason", None):
                self._change_reason = reason
        super().save(*args, **kwargs)
        self._stored_secret = self.secret
        if reason is not None and getattr(self, "_change_reason", None) == reason:
            del self._change_reason

    @classmethod
    def from_db(cls, db: str | None, field_names: Any, values: Any) -> AllocationSink:
        sink = super().from_db(db, field_names, values)
        # The secret as stored, to tell a rotation on save (absent when the field was deferred).
        sink._stored_secret = sink.__dict__.get("secret")
        return sink

    @property
    def secret_hint(self) -> str:
        """'' when no secret is set, else a mask ending in the secret's last characters."""
        if not self.secret:
            return ""
        return "•" * 8 + self.secret[-SECRET_HINT_CHARS:]

    def clean(self) -> None:
        super().clean()
        errors: dict[str, str] = {}
        if self.kind == self.Kind.WEBHOOK:
            if not self.url:
                errors["url"] = "A webhook sink needs a URL."
            elif urlsplit(self.url).scheme not in ("http", "https"):
                errors["url"] = "Use an http:// or https:// URL."
            if len(self.secret) < MIN_SECRET_LENGTH:
                errors["secret"] = (
                    f"A webhook sink needs a secret of at least {MIN_SECRET_LENGTH} characters."
                )
        else:
            problem = directory_problem(self.directory)
            if problem:
                errors["directory"] = problem
        if self.kind == self.Kind.KUBERNETES:
            if not self.namespace:
                errors["namespace"] = "A Kubernetes sink needs a namespace."
            if not self.container_image.strip():
                errors["container_image"] = "A Kubernetes sink needs a container image."
            if self.autoscaler == self.Autoscaler.KEDA:
                if not self.prometheus_url:
                    errors["prometheus_url"] = "A KEDA sink needs the Prometheus to query."
                elif urlsplit(self.prometheus_url).scheme not in ("http", "https"):
                    errors["prometheus_url"] = "Use an http:// or https:// URL."
        if self.kind == self.Kind.LITELLM and not self.namespace and not self.endpoint_template:
            errors["namespace"] = "The default endpoint template needs the Services' namespace."
        if self.endpoint_template:
            problem = endpoint_template_problem(self.endpoint_template)
            if problem:
                errors["endpoint_template"] = problem
        problem = hosted_endpoints_problem(self.hosted_endpoints)
        if problem:
            errors["hosted_endpoints"] = problem
        if errors:
            raise ValidationError(errors)

    def resolved_directory(self) -> Path:
        """The sink's folder: ``directory`` under the configured emission root."""
        problem = directory_problem(self.directory)
        if problem:
            raise ValueError(f"sink {self.name!r}: {problem}")
        return emission_settings().root / Path(*PurePosixPath(self.directory).parts)


def directory_problem(directory: str) -> str:
    """Why ``directory`` cannot name a sink folder under the emission root, or ''."""
    if not directory:
        return "File and Kubernetes sinks need a directory."
    path = PurePosixPath(directory)
    if path.is_absolute() or "\\" in directory:
        return "Give a folder relative to HEADROOM_EMISSION_ROOT, with '/' between parts."
    if not all(_DIRECTORY_PART.match(part) for part in path.parts):
        return "Use letters, digits and . _ - in each part; '..' and hidden parts are refused."
    if str(path) != directory:
        return f"Write the folder plainly, as {str(path)!r}."
    return ""


class OutboxEntryQuerySet(models.QuerySet["OutboxEntry"]):
    def claimable(self, now: datetime) -> OutboxEntryQuerySet:
        """Rows a dispatcher may claim now: pending and due, or delivering under a claim that
        has expired (its dispatcher died or hung)."""
        return self.filter(
            Q(status=OutboxEntry.Status.PENDING, next_attempt_at__lte=now)
            | Q(status=OutboxEntry.Status.DELIVERING, claim_expires_at__lt=now)
        )

    def held_by(self, claim: str) -> OutboxEntryQuerySet:
        """The row(s) still being delivered under ``claim``: the only ones it may finish."""
        return self.filter(status=OutboxEntry.Status.DELIVERING, claimed_by=claim)


class OutboxEntry(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        DELIVERING = "delivering", "delivering"
        DELIVERED = "delivered", "delivered"
        FAILED = "failed", "failed"
        SUPERSEDED = "superseded", "superseded (a newer plan was queued first)"

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="outbox_entries")
    sink = models.ForeignKey(
        AllocationSink, on_delete=models.PROTECT, related_name="outbox_entries"
    )
    region = models.CharField(max_length=64)
    payload = models.JSONField(help_text="The region's allocation document (see docs).")
    idempotency_key = models.CharField(max_length=200, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    claimed_by = models.CharField(max_length=128, blank=True)
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = OutboxEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = "outbox entry"
        verbose_name_plural = "outbox entries"
        constraints = [
            models.UniqueConstraint(
                fields=["plan", "sink", "region"], name="unique_outbox_plan_sink_region"
            )
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="outbox_due"),
            models.Index(fields=["sink", "region", "status"], name="outbox_sink_region"),
        ]

    def __str__(self) -> str:
        return f"plan v{self.plan.version} → {self.sink.name} / {self.region} ({self.status})"


class ShadowDiff(models.Model):
    """What an activated plan would have changed in a region in shadow mode
    (``Region.actuation``), against what was last delivered there; nothing was sent.

    Written in the activation's transaction instead of that region's outbox rows. ``rows``
    lists, per zone and shape, the replicas delivered and planned (``{"zone", "shape",
    "accelerator", "gpus_per_replica", "delivered", "planned", "delivered_cost_per_hour",
    "planned_cost_per_hour"}``), changed rows first; the totals are the region's.
    """

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="shadow_diffs")
    region = models.CharField(max_length=64)
    delivered_plan = models.ForeignKey(
        Plan,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The plan whose allocation a sink last acknowledged for this region (none: "
        "nothing was ever delivered there).",
    )
    rows = models.JSONField(default=list)
    delivered_replicas = models.PositiveIntegerField(default=0)
    planned_replicas = models.PositiveIntegerField(default=0)
    delivered_gpus = models.PositiveIntegerField(default=0)
    planned_gpus = models.PositiveIntegerField(default=0)
    delivered_cost_per_hour = models.FloatField(default=0.0)
    planned_cost_per_hour = models.FloatField(default=0.0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = "shadow diff"
        constraints = [
            models.UniqueConstraint(fields=["plan", "region"], name="unique_shadow_plan_region")
        ]

    def __str__(self) -> str:
        return f"plan v{self.plan.version} / {self.region} (shadow)"

    @property
    def changed(self) -> bool:
        return any(row["delivered"] != row["planned"] for row in self.rows)

    @property
    def cost_change_per_hour(self) -> float:
        return self.planned_cost_per_hour - self.delivered_cost_per_hour

    @property
    def replica_change(self) -> int:
        return self.planned_replicas - self.delivered_replicas

    @property
    def gpu_change(self) -> int:
        return self.planned_gpus - self.delivered_gpus

    @property
    def changed_rows(self) -> list[dict[str, Any]]:
        """The rows whose replicas change, each with its ``change`` and ``cost_change``."""
        return [
            {
                **row,
                "change": row["planned"] - row["delivered"],
                "cost_change": row["planned_cost_per_hour"] - row["delivered_cost_per_hour"],
            }
            for row in self.rows
            if row["delivered"] != row["planned"]
        ]


class DeliveryAttempt(models.Model):
    class Outcome(models.TextChoices):
        DELIVERED = "delivered", "delivered"
        RETRY = "retry", "failed, will retry"
        FAILED = "failed", "failed, not retried"
        LOST_CLAIM = "lost-claim", "finished after its claim expired"

    entry = models.ForeignKey(OutboxEntry, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField(help_text="1 for the first attempt.")
    dispatcher = models.CharField(max_length=128)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    status_code = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The webhook's HTTP status, when it answered."
    )
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-pk"]

    def __str__(self) -> str:
        return f"attempt {self.number} of outbox entry {self.entry_id}: {self.outcome}"

    @property
    def duration_ms(self) -> float:
        return (self.finished_at - self.started_at).total_seconds() * 1000.0


# The name earlier migrations give this validator (it refused NaN only; infinity is
# refused by the range check anyway).
_finite_timeout = finite
