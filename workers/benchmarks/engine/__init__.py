"""Engine benchmark: what one replica of a model sustains on the hardware it runs on.

The model is a Llama-style decoder built from the model's dimensions with random weights
(nothing is downloaded): token embedding, per layer RMSNorm → attention (rotary position
embeddings, grouped-query attention through ``torch.nn.functional.scaled_dot_product_attention``)
→ RMSNorm → SwiGLU MLP, each with a residual, then a final RMSNorm and the output projection.
bf16 on GPU, float32 on CPU.

Measured (``run_benchmark``):

- **Prefill** tokens/s across prompt lengths: ``batch × length`` prompt tokens in one forward
  pass (the batch fills a token budget), logits for the last position only, as serving engines
  compute them. FLOPs ≈ 2 × matmul parameters × tokens + causal attention
  (2 × batch × heads × length² × head dim per layer, the half of QKᵀ and AV a causal mask
  keeps), as a fraction of the peak FLOP/s.
- **Decode** tokens/s across batch sizes at the workload's context lengths, with a real
  preallocated KV cache: each step embeds one token per sequence, writes its keys and values
  into the cache at the current position, attends over the cache, computes the logits and
  picks the next token (greedy). On one GPU the step is captured once as a CUDA graph and
  replayed; on CPU (and across several GPUs) it runs eagerly. Bytes read per step ≈ weights +
  the batch's KV cache, as a fraction of the peak memory bandwidth. The batch at which decode
  stops scaling is the first batch whose doubling gains less than ``scaling_threshold`` (10 %).
- **Max concurrency**: sequences of the workload's length whose KV cache fits in the memory
  left after the weights (``planner.capacity.memory``); on GPU the free memory is measured
  after the weights are loaded, less the runtime reserve per device.

Timing: warm-up runs first; on GPU CUDA events around the work (all devices synchronized when
the layers span several), on CPU ``time.perf_counter``; several repeats, median.

The roofline: on GPU the accelerator's peak figures (× devices) when given, else measured; on
CPU measured on the host (the best matmul FLOP/s and copy bandwidth over a few sizes). A
fraction above 1 means the measured peak was not a ceiling (e.g. a working set that fits in a
CPU cache): it is reported as 1 and the point is flagged.

Several GPUs: the layers are split across the devices and run one after the other (no tensor
parallelism); the figures are then a lower bound on what a tensor-parallel runtime sustains.

Modules: ``config`` (dimensions, presets, rooflines, workload, plan, FLOP and byte counts; no
torch), ``model`` (the decoder), ``results`` (the measured points; no torch), ``harness``
(timing and the run: ``run_benchmark``, ``run_job``) and ``cli``
(``python -m workers.benchmarks.engine --preset llama-3-8b --accelerator h200 --device cuda``,
``--help`` for the rest). Units: tokens, seconds, bytes, FLOP.
"""

from workers.benchmarks.engine.config import (
    ACCELERATORS,
    GB,
    PRESETS,
    AcceleratorSpec,
    BenchmarkPlan,
    EngineBenchmarkError,
    ModelDims,
    Roofline,
    Workload,
    decode_bytes_per_step,
    prefill_flops,
)
from workers.benchmarks.engine.harness import (
    cpu_model,
    decode_runner,
    hardware_info,
    host_available_bytes,
    measure_roofline,
    run_benchmark,
    run_job,
    software_info,
    time_calls,
)
from workers.benchmarks.engine.model import (
    MLP,
    Attention,
    Decoder,
    DecoderLayer,
    KVCache,
    RMSNorm,
    apply_rotary,
    rotary_tables,
)
from workers.benchmarks.engine.results import (
    DecodePoint,
    EngineResult,
    PrefillPoint,
    roofline_fraction,
    saturation_batch,
)

__all__ = [
    "ACCELERATORS",
    "GB",
    "MLP",
    "PRESETS",
    "AcceleratorSpec",
    "Attention",
    "BenchmarkPlan",
    "DecodePoint",
    "Decoder",
    "DecoderLayer",
    "EngineBenchmarkError",
    "EngineResult",
    "KVCache",
    "ModelDims",
    "PrefillPoint",
    "RMSNorm",
    "Roofline",
    "Workload",
    "apply_rotary",
    "cpu_model",
    "decode_bytes_per_step",
    "decode_runner",
    "hardware_info",
    "host_available_bytes",
    "measure_roofline",
    "prefill_flops",
    "roofline_fraction",
    "rotary_tables",
    "run_benchmark",
    "run_job",
    "saturation_batch",
    "software_info",
    "time_calls",
]
