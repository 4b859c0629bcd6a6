"""Fleet facts: geography, regions and zones, accelerators and inventory, models, replica
shapes and their measured capacity figures.

Validation lives in ``clean()`` so that the admin, the API and scenario loading refuse the
same nonsense with the same message. Derived figures (weight bytes, KV bytes per token, the KV
pool a shape leaves) come from ``planner.capacity.memory``, the one place those formulas live.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone
from simple_history.models import HistoricalRecords

from controlplane.core.validators import (
    GPU_COUNT,
    GPU_PRICE_PER_HOUR,
    PRICE_MULTIPLIER,
    RTT_MS,
    TOKENS_PER_REQUEST,
    UTILIZATION_TARGET,
    Bounds,
    finite,
    fraction_open_closed,
    non_negative,
    positive,
    slug_validator,
)
from planner.capacity import memory

GB = memory.GB

# The ranges of the fleet figures (``core.validators.Bounds``); the help texts quote them.
GPU_MEMORY_GB = Bounds(1, 1000, "GB")
PEAK_TFLOPS = Bounds(1, 100_000, "TFLOP/s")
# A spot price may be zero (capacity offered free to fill idle hardware); never negative.
SPOT_PRICE_PER_GPU_HOUR = Bounds(0, 500, "$ per GPU-hour")
PRICE_PER_MTOK = Bounds(0, 10_000, "$ per million tokens")
HOSTED_TPM = Bounds(1, 1_000_000_000_000, "tokens per minute")
HOSTED_RPM = Bounds(1, 1_000_000_000, "requests per minute")
HOSTED_TTFT_S = Bounds(0.001, 600, "s")
MEMORY_TBPS = Bounds(0.1, 100, "TB/s")
# From a test-sized model (a thousand parameters, as CPU benchmark runs use) to 10 trillion.
PARAMETERS_BILLIONS = Bounds(0.000001, 10_000, "billion")
BYTES_PER_ELEMENT = Bounds(0.125, 8, "bytes")  # 1-bit to fp64
LAYERS = Bounds(1, 1000)
HEADS = Bounds(1, 4096)
HEAD_DIM = Bounds(1, 4096)
WIDTH = Bounds(1, 1_000_000)
INTERMEDIATE_WIDTH = Bounds(1, 10_000_000)
VOCABULARY = Bounds(1, 10_000_000, "tokens")
GPUS_PER_REPLICA = Bounds(1, 256, "GPUs")
RUNTIME_RESERVE_GB = Bounds(0, 1000, "GB")
TOKENS_PER_S = Bounds(1, 100_000_000, "tokens per second")
CONCURRENCY = Bounds(1, 1_000_000, "sequences")
KNEE_REQUESTS_PER_S = Bounds(0.001, 1_000_000, "requests per second")

# A Kubernetes label value: at most 63 characters, alphanumeric at both ends.
_LABEL_VALUE = RegexValidator(
    r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$",
    "A Kubernetes label value: letters, digits, '-', '_' and '.', alphanumeric at both ends.",
)


class Geography(models.Model):
    """A legal/geographic area (eu, us, ap) that residency rules name."""

    name = models.CharField(max_length=32, unique=True, validators=[slug_validator])
    description = models.CharField(max_length=200, blank=True)
    history = HistoricalRecords()

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "geographies"

    def __str__(self) -> str:
        return self.name


class Region(models.Model):
    class Actuation(models.TextChoices):
        ACTUATE = "actuate", "actuate (activated plans go to the sinks)"
        SHADOW = "shadow", "shadow (plans are made and diffed; nothing is sent)"

    name = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    geography = models.ForeignKey(Geography, on_delete=models.PROTECT, related_name="regions")
    price_multiplier = models.FloatField(
        default=1.0,
        validators=PRICE_MULTIPLIER.validators,
        help_text=PRICE_MULTIPLIER.help(
            "Multiplies every GPU-hour price in this region (1.0 = list price)."
        ),
    )
    actuation = models.CharField(
        max_length=8,
        choices=Actuation.choices,
        default=Actuation.ACTUATE,
        help_text=(
            "Shadow: plans for this region are made, verified and diffed against what was "
            "last delivered to it, and nothing is sent to any sink."
        ),
    )
    history = HistoricalRecords()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Zone(models.Model):
    class State(models.TextChoices):
        UP = "up", "up"
        DEGRADED = "degraded", "degraded"
        DOWN = "down", "down"

    name = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="zones")
    state = models.CharField(max_length=16, choices=State.choices, default=State.UP)
    history = HistoricalRecords()

    class Meta:
        ordering = ["region__name", "name"]

    def __str__(self) -> str:
        return self.name


class RegionLink(models.Model):
    """Round-trip time between two regions; a missing pair means no traffic between them."""

    region_a = models.ForeignKey(Region, on_delete=models.CASCADE, related_name="+")
    region_b = models.ForeignKey(Region, on_delete=models.CASCADE, related_name="+")
    rtt_ms = models.FloatField(
        validators=RTT_MS.validators, help_text=RTT_MS.help("Round-trip time, ms.")
    )
    history = HistoricalRecords()

    class Meta:
        ordering = ["region_a__name", "region_b__name"]
        constraints = [
            models.UniqueConstraint(fields=["region_a", "region_b"], name="unique_region_link")
        ]

    def __str__(self) -> str:
        return f"{self.region_a} ↔ {self.region_b}: {self.rtt_ms:g} ms"

    def clean(self) -> None:
        if self.region_a_id is not None and self.region_a_id == self.region_b_id:
            raise ValidationError({"region_b": "A region's rtt to itself is always 0."})
        if self.region_a_id is not None and self.region_b_id is not None:
            reverse = RegionLink.objects.filter(
                region_a_id=self.region_b_id, region_b_id=self.region_a_id
            ).exclude(pk=self.pk)
            if reverse.exists():
                raise ValidationError(
                    {"region_b": "This pair is already linked in the other direction."}
                )


class AcceleratorType(models.Model):
    name = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    memory_gb = models.FloatField(
        validators=GPU_MEMORY_GB.validators, help_text=GPU_MEMORY_GB.help("GPU memory, decimal GB.")
    )
    peak_bf16_tflops = models.FloatField(
        validators=PEAK_TFLOPS.validators, help_text=PEAK_TFLOPS.help("Dense bf16 TFLOP/s.")
    )
    memory_tbps = models.FloatField(
        validators=MEMORY_TBPS.validators, help_text=MEMORY_TBPS.help("Memory bandwidth, TB/s.")
    )
    on_demand_price_per_gpu_hour = models.FloatField(
        validators=GPU_PRICE_PER_HOUR.validators,
        help_text=GPU_PRICE_PER_HOUR.help("List price of one GPU-hour on demand."),
    )
    reserved_price_per_gpu_hour = models.FloatField(
        validators=GPU_PRICE_PER_HOUR.validators,
        help_text=GPU_PRICE_PER_HOUR.help(
            "Price of one reserved GPU-hour; at most the on-demand price."
        ),
    )
    spot_price_per_gpu_hour = models.FloatField(
        null=True,
        blank=True,
        validators=SPOT_PRICE_PER_GPU_HOUR.validators,
        help_text=SPOT_PRICE_PER_GPU_HOUR.help(
            "Price of one spot (preemptible) GPU-hour, at most the on-demand price; empty when "
            "no spot capacity is bought. Spot capacity can be reclaimed at any time, so "
            "commitment advice puts only the interruptible part of demand on it."
        ),
    )
    gpu_product = models.CharField(
        max_length=63,
        blank=True,
        validators=[_LABEL_VALUE],
        help_text=(
            "The GPU's node label value, as NVIDIA GPU feature discovery writes it in "
            "nvidia.com/gpu.product (e.g. NVIDIA-H100-80GB-HBM3); emitted pods are placed on "
            "nodes carrying it. Empty = the accelerator's name."
        ),
    )
    history = HistoricalRecords()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def node_label_value(self) -> str:
        """The value emitted pods require of the GPU product node label."""
        return self.gpu_product or self.name

    def clean(self) -> None:
        if (
            self.spot_price_per_gpu_hour is not None
            and self.on_demand_price_per_gpu_hour is not None
            and self.spot_price_per_gpu_hour > self.on_demand_price_per_gpu_hour
        ):
            raise ValidationError(
                {
                    "spot_price_per_gpu_hour": (
                        "Spot price is above the on-demand price "
                        f"({self.spot_price_per_gpu_hour:g} > "
                        f"{self.on_demand_price_per_gpu_hour:g} per GPU-hour)."
                    )
                }
            )
        if (
            self.reserved_price_per_gpu_hour is not None
            and self.on_demand_price_per_gpu_hour is not None
            and self.reserved_price_per_gpu_hour > self.on_demand_price_per_gpu_hour
        ):
            raise ValidationError(
                {
                    "reserved_price_per_gpu_hour": (
                        "Reserved price is above the on-demand price "
                        f"({self.reserved_price_per_gpu_hour:g} > "
                        f"{self.on_demand_price_per_gpu_hour:g} per GPU-hour)."
                    )
                }
            )


class ZoneInventory(models.Model):
    zone = models.ForeignKey(Zone, on_delete=models.CASCADE, related_name="inventory")
    accelerator = models.ForeignKey(
        AcceleratorType, on_delete=models.PROTECT, related_name="inventory"
    )
    gpus_available = models.PositiveIntegerField(
        validators=GPU_COUNT.validators,
        help_text=GPU_COUNT.help("GPUs of this type the zone can give the fleet."),
    )
    history = HistoricalRecords()

    class Meta:
        ordering = ["zone__name", "accelerator__name"]
        verbose_name_plural = "zone inventories"
        constraints = [
            models.UniqueConstraint(fields=["zone", "accelerator"], name="unique_zone_inventory")
        ]

    def __str__(self) -> str:
        return f"{self.zone}: {self.gpus_available} × {self.accelerator}"


class LlmModel(models.Model):
    """A served model's architecture: enough to derive weight and KV-cache memory."""

    name = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    parameters_billions = models.FloatField(
        validators=PARAMETERS_BILLIONS.validators,
        help_text=PARAMETERS_BILLIONS.help("Parameters, billions."),
    )
    bytes_per_parameter = models.FloatField(
        default=2.0,
        validators=BYTES_PER_ELEMENT.validators,
        help_text=BYTES_PER_ELEMENT.help("2 for bf16, 1 for 8-bit, 0.5 for 4-bit."),
    )
    layers = models.PositiveIntegerField(
        validators=LAYERS.validators, help_text=LAYERS.help("Transformer layers.")
    )
    kv_heads = models.PositiveIntegerField(
        validators=HEADS.validators, help_text=HEADS.help("Key/value heads per layer.")
    )
    head_dim = models.PositiveIntegerField(
        validators=HEAD_DIM.validators, help_text=HEAD_DIM.help("Width of one head.")
    )
    kv_bytes_per_element = models.FloatField(
        default=2.0,
        validators=BYTES_PER_ELEMENT.validators,
        help_text=BYTES_PER_ELEMENT.help("2 for a bf16 KV cache, 1 for fp8."),
    )
    # The rest of the architecture, which the engine benchmark builds the model from (random
    # weights of these dimensions). Optional: weight and KV memory need only the fields above.
    hidden_size = models.PositiveIntegerField(
        null=True, blank=True, validators=WIDTH.validators, help_text=WIDTH.help("Model width.")
    )
    intermediate_size = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=INTERMEDIATE_WIDTH.validators,
        help_text=INTERMEDIATE_WIDTH.help("MLP width."),
    )
    attention_heads = models.PositiveIntegerField(
        null=True, blank=True, validators=HEADS.validators, help_text=HEADS.help("Query heads.")
    )
    vocab_size = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=VOCABULARY.validators,
        help_text=VOCABULARY.help("Vocabulary size."),
    )
    history = HistoricalRecords()

    ARCHITECTURE_FIELDS = ("hidden_size", "intermediate_size", "attention_heads", "vocab_size")

    class Meta:
        ordering = ["name"]
        verbose_name = "model"

    def __str__(self) -> str:
        return self.name

    @property
    def has_architecture(self) -> bool:
        """Whether every dimension the engine benchmark needs is known."""
        return all(getattr(self, name) is not None for name in self.ARCHITECTURE_FIELDS)

    def clean(self) -> None:
        given = [name for name in self.ARCHITECTURE_FIELDS if getattr(self, name) is not None]
        if given and len(given) != len(self.ARCHITECTURE_FIELDS):
            missing = [name for name in self.ARCHITECTURE_FIELDS if name not in given]
            raise ValidationError(
                {
                    name: (
                        "Give hidden size, intermediate size, attention heads and vocabulary "
                        "size together, or none of them."
                    )
                    for name in missing
                }
            )
        heads, kv_heads = self.attention_heads, self.kv_heads
        if heads and kv_heads and heads % kv_heads != 0:
            raise ValidationError(
                {
                    "attention_heads": (
                        f"{heads} attention heads do not split into groups of the {kv_heads} "
                        "KV heads: the attention heads must be a multiple of the KV heads."
                    )
                }
            )

    @property
    def weight_bytes(self) -> float:
        return memory.weight_bytes(self.parameters_billions * 1e9, self.bytes_per_parameter)

    @property
    def kv_bytes_per_token(self) -> float:
        return memory.kv_bytes_per_token(
            self.layers, self.kv_heads, self.head_dim, self.kv_bytes_per_element
        )


# Arguments the Kubernetes sink derives from the shape itself (vLLM's own spellings, checked
# against vllm/engine/arg_utils.py and vllm/entrypoints/openai/cli_args.py): a shape's extra
# arguments may not set them a second time.
SERVING_FLAGS_SET_BY_HEADROOM = (
    "--model",
    "--served-model-name",
    "--tensor-parallel-size",
    "-tp",
    "--max-model-len",
    "--host",
    "--port",
)
MAX_EXTRA_ARGS = 64
MAX_EXTRA_ARG_LENGTH = 500
_IMAGE_REFERENCE = RegexValidator(
    r"^[a-z0-9][a-z0-9._/:@-]*$",
    "A container image reference such as vllm/vllm-openai:v0.11.0 (lower-case, no spaces).",
)


def _serving_flag(argument: str) -> str:
    """``--max-model-len=4096`` → ``--max-model-len``; vLLM also accepts underscores."""
    return argument.split("=", 1)[0].replace("_", "-")


class HostedProvider(models.Model):
    """A hosted inference API the plan may send a demand's overflow to: the models it serves
    from one region (which residency rules judge), its per-token prices, its quotas and its
    latency. Placement routes overflow here only for tenants whose tier allows hosted
    overflow, inside the tokens-per-minute (and requests-per-minute) quota
    (``planner.placement``: the problem's ``hosted`` list)."""

    name = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="hosted_providers")
    served_models = models.ManyToManyField(
        LlmModel, related_name="hosted_providers", help_text="The models it serves."
    )
    input_price_per_mtok = models.FloatField(
        validators=PRICE_PER_MTOK.validators,
        help_text=PRICE_PER_MTOK.help("$ per million prompt (input) tokens."),
    )
    output_price_per_mtok = models.FloatField(
        validators=PRICE_PER_MTOK.validators,
        help_text=PRICE_PER_MTOK.help("$ per million generated (output) tokens."),
    )
    tpm_limit = models.PositiveBigIntegerField(
        validators=HOSTED_TPM.validators,
        help_text=HOSTED_TPM.help("The quota: tokens per minute, input and output together."),
    )
    rpm_limit = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        validators=HOSTED_RPM.validators,
        help_text=HOSTED_RPM.help("Requests per minute (empty: no request quota)."),
    )
    p95_ttft_s = models.FloatField(
        validators=HOSTED_TTFT_S.validators,
        help_text=HOSTED_TTFT_S.help(
            "Its p95 time to first token; a demand whose objective is tighter is not sent."
        ),
    )
    enabled = models.BooleanField(
        default=True, help_text="Off: plans send nothing here (the record is kept)."
    )
    history = HistoricalRecords()

    class Meta:
        ordering = ["name"]
        verbose_name = "hosted provider"

    def __str__(self) -> str:
        return self.name


class ReplicaShape(models.Model):
    """One replica: a model on ``gpus_per_replica`` accelerators (tensor parallel).

    The serving fields (``container_image``, ``model_path``, ``max_model_len``,
    ``extra_args``) say how a cluster starts the replica: the Kubernetes sink runs vLLM's
    OpenAI server with ``--model <model_path>``, ``--served-model-name <model>``,
    ``--tensor-parallel-size <gpus_per_replica>`` and ``--max-model-len`` where given.
    """

    name = models.CharField(max_length=128, unique=True, validators=[slug_validator])
    model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="shapes")
    accelerator = models.ForeignKey(
        AcceleratorType, on_delete=models.PROTECT, related_name="shapes"
    )
    gpus_per_replica = models.PositiveIntegerField(
        validators=GPUS_PER_REPLICA.validators,
        help_text=GPUS_PER_REPLICA.help("GPUs one replica spans (tensor parallel)."),
    )
    runtime_reserve_gb_per_gpu = models.FloatField(
        default=6.0,
        validators=RUNTIME_RESERVE_GB.validators,
        help_text=RUNTIME_RESERVE_GB.help(
            "Memory per GPU held by the runtime and activations, decimal GB."
        ),
    )
    target_utilization = models.FloatField(
        null=True,
        blank=True,
        validators=UTILIZATION_TARGET.validators,
        help_text=UTILIZATION_TARGET.help(
            "Planning utilisation for this shape; empty = the fleet default."
        ),
    )
    runtime_version = models.CharField(max_length=64, blank=True)
    container_image = models.CharField(
        max_length=255,
        blank=True,
        validators=[_IMAGE_REFERENCE],
        help_text=(
            "The model server image, e.g. vllm/vllm-openai:v0.11.0; empty = the Kubernetes "
            "sink's image."
        ),
    )
    model_path = models.CharField(
        max_length=500,
        blank=True,
        help_text=(
            "What vLLM's --model loads: a Hugging Face repository id "
            "(meta-llama/Llama-3.3-70B-Instruct) or a path inside the pod; empty = the model's "
            "name."
        ),
    )
    max_model_len = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=TOKENS_PER_REQUEST.validators,
        help_text=TOKENS_PER_REQUEST.help(
            "vLLM's --max-model-len: prompt + output tokens of one sequence; empty = the "
            "model's own. At most what the KV pool holds."
        ),
    )
    extra_args = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            'Further vLLM arguments, one per item, e.g. ["--enable-prefix-caching", '
            '"--gpu-memory-utilization=0.92"].'
        ),
    )
    history = HistoricalRecords()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def served_model_path(self) -> str:
        """What vLLM loads: the model path, else the model's name."""
        return self.model_path or self.model.name

    @property
    def kv_pool_bytes(self) -> float:
        return memory.kv_pool_bytes(
            self.accelerator.memory_gb * GB,
            self.gpus_per_replica,
            self.model.weight_bytes,
            self.runtime_reserve_gb_per_gpu * GB,
        )

    @property
    def kv_pool_gb(self) -> float:
        return self.kv_pool_bytes / GB

    @property
    def context_tokens(self) -> int:
        return memory.context_tokens_that_fit(self.kv_pool_bytes, self.model.kv_bytes_per_token)

    def _clean_serving(self) -> None:
        errors: dict[str, str] = {}
        if self.model_path != self.model_path.strip() or any(
            c in self.model_path for c in "\n\r\t\0"
        ):
            errors["model_path"] = "No spaces at either end and no control characters."
        args = self.extra_args
        if args is None:
            args = self.extra_args = []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            errors["extra_args"] = "A list of strings, one argument each."
        elif len(args) > MAX_EXTRA_ARGS:
            errors["extra_args"] = f"At most {MAX_EXTRA_ARGS} arguments, got {len(args)}."
        else:
            for i, argument in enumerate(args):
                if not argument or len(argument) > MAX_EXTRA_ARG_LENGTH:
                    errors["extra_args"] = (
                        f"Argument {i + 1} must have 1 to {MAX_EXTRA_ARG_LENGTH} characters."
                    )
                elif any(c in argument for c in "\n\r\0"):
                    errors["extra_args"] = f"Argument {i + 1} has a line break or NUL."
                elif _serving_flag(argument) in SERVING_FLAGS_SET_BY_HEADROOM:
                    errors["extra_args"] = (
                        f"{_serving_flag(argument)} is set from the shape's own fields "
                        "(model path, model, GPUs per replica, max model length, the port); "
                        "remove it here."
                    )
                else:
                    continue
                break
        if errors:
            raise ValidationError(errors)

    def clean(self) -> None:
        self._clean_serving()
        if self.model_id is None or self.accelerator_id is None or not self.gpus_per_replica:
            return
        if self.runtime_reserve_gb_per_gpu is None or self.runtime_reserve_gb_per_gpu < 0:
            return
        if self.kv_pool_bytes > 0 and self.max_model_len:
            fits = self.context_tokens
            if self.max_model_len > fits:
                # vLLM refuses to start when one sequence of --max-model-len does not fit in
                # the KV cache it allocated.
                raise ValidationError(
                    {
                        "max_model_len": (
                            f"{self.max_model_len:,} tokens do not fit in the replica's KV pool "
                            f"({self.kv_pool_gb:,.1f} GB holds {fits:,} tokens of "
                            f"{self.model.name}): vLLM would refuse to start. Use at most "
                            f"{fits:,}, or more GPUs per replica."
                        )
                    }
                )
        if self.kv_pool_bytes <= 0:
            per_gpu = self.model.weight_bytes / self.gpus_per_replica / GB
            raise ValidationError(
                {
                    "gpus_per_replica": (
                        f"{self.model.name} needs {per_gpu:.1f} GB of weights per GPU on "
                        f"{self.gpus_per_replica} × {self.accelerator.name} plus "
                        f"{self.runtime_reserve_gb_per_gpu:g} GB reserve, but each GPU has "
                        f"{self.accelerator.memory_gb:g} GB: no room is left for the KV cache. "
                        "Use more GPUs per replica or a larger accelerator."
                    )
                }
            )


class WorkloadClass(models.Model):
    """A kind of request with its own cost (policy question, order lookup, long summary)."""

    name = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    description = models.CharField(max_length=200, blank=True)
    history = HistoricalRecords()

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "workload classes"

    def __str__(self) -> str:
        return self.name


class CapacityFigure(models.Model):
    """What one replica of a shape sustains on a workload class, as measured.

    ``workload_class`` empty means the figure holds for the shape's whole mix.
    """

    class Source(models.TextChoices):
        ENGINE_BENCHMARK = "engine-benchmark", "engine benchmark"
        ENDPOINT_LOAD_TEST = "endpoint-load-test", "endpoint load test"
        MANUAL = "manual", "entered by hand"
        VENDOR = "vendor", "vendor figure"

    shape = models.ForeignKey(ReplicaShape, on_delete=models.CASCADE, related_name="figures")
    workload_class = models.ForeignKey(
        WorkloadClass,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="figures",
    )
    prefill_tokens_per_s = models.FloatField(
        validators=TOKENS_PER_S.validators,
        help_text=TOKENS_PER_S.help("Prompt tokens one replica processes per second."),
    )
    decode_tokens_per_s = models.FloatField(
        validators=TOKENS_PER_S.validators,
        help_text=TOKENS_PER_S.help("Output tokens one replica generates per second."),
    )
    max_concurrency = models.PositiveIntegerField(
        validators=CONCURRENCY.validators,
        help_text=CONCURRENCY.help("Sequences one replica holds at once."),
    )
    knee_requests_per_s = models.FloatField(
        null=True,
        blank=True,
        validators=KNEE_REQUESTS_PER_S.validators,
        help_text=KNEE_REQUESTS_PER_S.help("Highest open-loop rate whose p95 TTFT met the target."),
    )
    measured_at = models.DateTimeField(default=timezone.now)
    source = models.CharField(max_length=32, choices=Source.choices, default=Source.MANUAL)
    provenance = models.JSONField(
        default=dict,
        blank=True,
        help_text="Benchmark run, hardware, software versions, workload profile version.",
    )
    history = HistoricalRecords()

    class Meta:
        ordering = ["shape__name", "-measured_at"]
        indexes = [models.Index(fields=["shape", "workload_class", "-measured_at"])]

    def __str__(self) -> str:
        cls = self.workload_class.name if self.workload_class is not None else "all classes"
        return f"{self.shape} / {cls} @ {self.measured_at:%Y-%m-%d}"

    @property
    def age(self) -> timedelta:
        return timezone.now() - self.measured_at

    @property
    def is_stale(self) -> bool:
        return self.age > timedelta(days=settings.HEADROOM_CAPACITY_MAX_AGE_DAYS)

    def clean(self) -> None:
        if self.measured_at is not None and self.measured_at > timezone.now() + timedelta(
            minutes=5
        ):
            raise ValidationError({"measured_at": "A measurement cannot be in the future."})
        if not isinstance(self.provenance, dict):
            raise ValidationError({"provenance": "Must be a JSON object."})


# The names earlier migrations give these validators.
_finite = finite
_positive = positive
_non_negative = non_negative
_fraction_open_closed = fraction_open_closed
