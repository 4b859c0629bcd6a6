"""The engine benchmark's harness: devices, timing (CUDA events or ``time.perf_counter``), the
measured roofline, and the run itself (``run_benchmark``, and ``run_job`` for a job as the
control plane describes it, plain data in and out).

Units: tokens, seconds, bytes, FLOP.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from planner.capacity import memory
from workers.benchmarks.engine.config import (
    AcceleratorSpec,
    BenchmarkPlan,
    EngineBenchmarkError,
    ModelDims,
    Roofline,
    Workload,
    decode_bytes_per_step,
    prefill_flops,
)
from workers.benchmarks.engine.model import Decoder
from workers.benchmarks.engine.results import (
    DecodePoint,
    EngineResult,
    PrefillPoint,
    roofline_fraction,
    saturation_batch,
)


def _synchronize(devices: Sequence[torch.device]) -> None:
    for device in devices:
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def time_calls(
    fn: Callable[[], object],
    devices: Sequence[torch.device],
    *,
    warmup: int,
    repeats: int,
    before: Callable[[], object] | None = None,
) -> list[float]:
    """Seconds per call of ``fn``, ``repeats`` times after ``warmup`` untimed calls.

    ``before`` runs untimed before each call (resetting state). One CUDA device: CUDA events
    around the call on its stream; several devices: all synchronized, then wall time; CPU:
    ``time.perf_counter``.
    """
    for _ in range(warmup):
        if before is not None:
            before()
        fn()
    _synchronize(devices)
    single_cuda = len(devices) == 1 and devices[0].type == "cuda"
    out = []
    for _ in range(repeats):
        if before is not None:
            before()
        if single_cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1000.0)
        else:
            _synchronize(devices)
            began = time.perf_counter()
            fn()
            _synchronize(devices)
            out.append(time.perf_counter() - began)
    return out


def measure_roofline(device: torch.device, dtype: torch.dtype) -> Roofline:
    """The device's ceiling as measured: the best matmul FLOP/s and the best copy bandwidth
    (bytes read + written per second) over a few sizes, so that a cache-resident working set
    meets a cache-resident peak."""
    gpu = device.type == "cuda"
    sizes = (1024, 4096, 8192) if gpu else (128, 256, 512, 1024)
    best_flops = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        seconds = min(time_calls(partial(torch.matmul, a, b), [device], warmup=1, repeats=5))
        best_flops = max(best_flops, 2.0 * n**3 / seconds)
    mib = 1024 * 1024
    byte_sizes = (64 * mib, 256 * mib, 1024 * mib) if gpu else (256 * 1024, 4 * mib, 64 * mib)
    best_bandwidth = 0.0
    for size in byte_sizes:
        src = torch.ones(size // 4, device=device, dtype=torch.float32)
        dst = torch.empty_like(src)
        seconds = min(time_calls(partial(dst.copy_, src), [device], warmup=1, repeats=5))
        best_bandwidth = max(best_bandwidth, 2.0 * size / seconds)
    return Roofline(best_flops, best_bandwidth, f"measured on {device.type}")


def hardware_info(devices: Sequence[torch.device]) -> dict[str, Any]:
    """The GPU name and count, or the CPU model and thread count."""
    if devices[0].type == "cuda":
        props = torch.cuda.get_device_properties(devices[0])
        return {
            "gpu": props.name,
            "gpus": len(devices),
            "gpu_memory_bytes": int(props.total_memory),
            "compute_capability": f"{props.major}.{props.minor}",
        }
    return {"cpu": cpu_model(), "cpu_threads": torch.get_num_threads(), "gpus": 0}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def software_info() -> dict[str, Any]:
    """torch, Ray, Python and CUDA versions (None where absent)."""
    try:
        import ray

        ray_version: str | None = str(ray.__version__)
    except ImportError:
        ray_version = None
    cuda = torch.cuda.is_available()
    cudnn = torch.backends.cudnn.version() if cuda else None  # type: ignore[no-untyped-call]
    return {
        "torch": str(torch.__version__),
        "ray": ray_version,
        "python": platform.python_version(),
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "platform": platform.platform(),
    }


def host_available_bytes() -> float:
    """Memory the host can still give (MemAvailable), bytes."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    pages = os.sysconf("SC_AVPHYS_PAGES") if hasattr(os, "sysconf") else 0
    return float(pages * os.sysconf("SC_PAGE_SIZE")) if pages else 0.0


def _devices(device: str, gpus: int) -> list[torch.device]:
    if device == "cpu":
        return [torch.device("cpu")]
    if device != "cuda":
        raise ValueError(f"device: 'cuda' or 'cpu', not {device!r}")
    if not torch.cuda.is_available():
        raise EngineBenchmarkError(
            "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); run on a GPU worker"
        )
    count = torch.cuda.device_count()
    wanted = max(1, gpus)
    if count < wanted:
        raise EngineBenchmarkError(f"the shape needs {wanted} GPUs, {count} are visible")
    return [torch.device("cuda", i) for i in range(wanted)]


def _free_bytes(devices: Sequence[torch.device]) -> float:
    if devices[0].type == "cuda":
        torch.cuda.empty_cache()
        return float(sum(torch.cuda.mem_get_info(d)[0] for d in devices))
    return host_available_bytes()


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _release(devices: Sequence[torch.device]) -> None:
    if devices[0].type == "cuda":
        torch.cuda.empty_cache()


def run_benchmark(
    dims: ModelDims,
    workload: Workload,
    *,
    device: str = "cpu",
    gpus: int = 1,
    roofline: Roofline | None = None,
    reserve_bytes_per_device: float = 0.0,
    plan: BenchmarkPlan | None = None,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> EngineResult:
    """Measure ``dims`` on ``device`` (``cuda`` with ``gpus`` GPUs, or ``cpu``).

    ``roofline`` defaults to one measured on the device. ``reserve_bytes_per_device`` is
    memory per GPU the runtime keeps (activations, graphs), subtracted from the free memory
    before the KV-bound concurrency; it is not applied on CPU. Raises ``EngineBenchmarkError``
    when no CUDA device is visible or the weights do not fit.
    """
    began = time.perf_counter()
    say = log or (lambda message: None)
    devices = _devices(device, gpus)
    gpu = devices[0].type == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    plan = plan or BenchmarkPlan.for_workload(workload, device)
    notes: list[str] = []
    if gpu and len(devices) > 1:
        notes.append(
            f"layers split across {len(devices)} GPUs and run in sequence (no tensor "
            "parallelism): a lower bound on a tensor-parallel runtime"
        )
    if roofline is None:
        say("measuring the roofline")
        measured = measure_roofline(devices[0], dtype)
        roofline = replace(
            measured,
            peak_flops=measured.peak_flops * len(devices),
            memory_bytes_per_s=measured.memory_bytes_per_s * len(devices),
        )
    max_positions = max(max(plan.prompt_lengths), max(plan.context_lengths) + plan.decode_steps)
    torch.manual_seed(seed)
    say(f"building {dims.parameters / 1e9:.3f} B parameters on {len(devices)} × {devices[0].type}")
    try:
        model = Decoder(dims, devices, dtype, max_positions=max_positions, seed=seed)
    except Exception as exc:
        if _is_oom(exc):
            raise EngineBenchmarkError(
                f"the weights do not fit on {len(devices)} device(s)"
            ) from exc
        raise
    model.eval()
    element = torch.empty((), dtype=dtype).element_size()
    kv_per_token = dims.kv_bytes_per_token(element)
    weight_bytes = model.weight_bytes
    free = _free_bytes(devices)
    reserve = reserve_bytes_per_device if gpu else 0.0
    pool = free - reserve * len(devices)
    max_concurrency = memory.max_concurrent_sequences(pool, plan.sequence_tokens, kv_per_token)
    if max_concurrency < 1:
        notes.append("the KV pool left after the weights and reserve holds no whole sequence")

    def kv_bound(context: int) -> int:
        return memory.max_concurrent_sequences(pool, context + plan.decode_steps, kv_per_token)

    with torch.inference_mode():
        prefill = _measure_prefill(model, plan, roofline, devices, say)
        decode, saturation = _measure_decode(model, plan, roofline, devices, kv_bound, say, notes)

    figure = _figure(plan, prefill, decode, saturation, max_concurrency)
    say("done")
    return EngineResult(
        model=asdict(dims),
        device=devices[0].type,
        devices=len(devices),
        dtype=str(dtype).removeprefix("torch."),
        parameters=dims.parameters,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_per_token,
        free_bytes=free,
        reserve_bytes_per_device=reserve,
        kv_pool_bytes=pool,
        max_concurrency=max_concurrency,
        roofline=asdict(roofline),
        plan=asdict(plan),
        prefill=prefill,
        decode=decode,
        decode_saturation_batch={str(c): b for c, b in saturation.items()},
        figure=figure,
        hardware=hardware_info(devices),
        software=software_info(),
        notes=notes,
        seconds=time.perf_counter() - began,
    )


def _measure_prefill(
    model: Decoder,
    plan: BenchmarkPlan,
    roofline: Roofline,
    devices: Sequence[torch.device],
    say: Callable[[str], None],
) -> list[PrefillPoint]:
    points = []
    generator = torch.Generator().manual_seed(1)
    for length in plan.prompt_lengths:
        batch = max(1, plan.prefill_token_budget // length)
        while True:
            tokens = torch.randint(model.dims.vocab_size, (batch, length), generator=generator).to(
                devices[0]
            )
            try:
                times = time_calls(
                    partial(model, tokens),
                    devices,
                    warmup=plan.warmup,
                    repeats=plan.repeats,
                )
                break
            except Exception as exc:
                if not _is_oom(exc) or batch == 1:
                    raise
                del tokens
                _release(devices)
                batch //= 2
        seconds = statistics.median(times)
        flops = prefill_flops(model.dims, batch, length)
        fraction, above = roofline_fraction(flops / seconds, roofline.peak_flops)
        point = PrefillPoint(
            prompt_length=length,
            batch=batch,
            tokens=batch * length,
            seconds=seconds,
            tokens_per_s=batch * length / seconds,
            flops=flops,
            achieved_flops=flops / seconds,
            roofline_fraction=fraction,
            above_roofline=above,
            repeats_s=times,
        )
        say(
            f"prefill {length:>6} × {batch:<4} {point.tokens_per_s:12,.0f} tokens/s "
            f"({fraction:.1%} of peak FLOP/s)"
        )
        points.append(point)
        _release(devices)
    return points


def decode_runner(
    model: Decoder,
    batch: int,
    context: int,
    steps: int,
    devices: Sequence[torch.device],
    use_graph: bool,
) -> tuple[Callable[[], object], Callable[[], object], list[Any]]:
    """(run ``steps`` decode steps, reset to ``context``, things to free) for one point."""
    cache = model.new_cache(batch, context + steps)
    tokens = torch.zeros(batch, dtype=torch.long, device=devices[0])
    position = torch.full((1,), context, dtype=torch.long, device=devices[0])

    def reset() -> None:
        # Back to the first step: every timed run decodes the same tokens at the same positions.
        position.fill_(context)
        tokens.zero_()

    if not use_graph:

        def eager() -> None:
            for _ in range(steps):
                model.decode_step(tokens, position, cache)

        return eager, reset, [cache, tokens, position]

    # Warm up on a side stream before capture, as CUDA graph capture requires.
    stream = torch.cuda.Stream(devices[0])  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream(devices[0]))
    with torch.cuda.stream(stream):
        for _ in range(2):
            reset()
            model.decode_step(tokens, position, cache)
    torch.cuda.current_stream(devices[0]).wait_stream(stream)
    reset()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model.decode_step(tokens, position, cache)

    def replay() -> None:
        for _ in range(steps):
            graph.replay()

    return replay, reset, [cache, tokens, position, graph]


def _measure_decode(
    model: Decoder,
    plan: BenchmarkPlan,
    roofline: Roofline,
    devices: Sequence[torch.device],
    kv_bound: Callable[[int], int],
    say: Callable[[str], None],
    notes: list[str],
) -> tuple[list[DecodePoint], dict[int, int | None]]:
    gpu = devices[0].type == "cuda"
    use_graph = gpu and len(devices) == 1 and plan.cuda_graphs
    element = torch.empty((), dtype=model.dtype).element_size()
    points: list[DecodePoint] = []
    saturation: dict[int, int | None] = {}
    for context in plan.context_lengths:
        limit = min(plan.max_batch, kv_bound(context))
        if limit < 1:
            notes.append(f"decode at context {context}: not one sequence fits in the KV pool")
            saturation[context] = None
            continue
        batches = []
        batch = 1
        while batch <= limit:
            batches.append(batch)
            batch *= 2
        series: list[tuple[int, float]] = []
        for batch in batches:
            try:
                run, reset, held = decode_runner(
                    model, batch, context, plan.decode_steps, devices, use_graph
                )
                times = time_calls(
                    run, devices, warmup=plan.warmup, repeats=plan.repeats, before=reset
                )
            except Exception as exc:
                if not _is_oom(exc):
                    raise
                notes.append(f"decode at context {context}: out of memory at batch {batch}")
                _release(devices)
                break
            del held, run, reset
            step = statistics.median(times) / plan.decode_steps
            # The attended context grows by one per step: its mean over the timed steps.
            mean_context = context + (plan.decode_steps - 1) / 2 + 1
            moved = decode_bytes_per_step(model.dims, batch, mean_context, element)
            fraction, above = roofline_fraction(moved / step, roofline.memory_bytes_per_s)
            point = DecodePoint(
                context_length=context,
                batch=batch,
                step_seconds=step,
                tokens_per_s=batch / step,
                bytes_per_step=moved,
                achieved_bytes_per_s=moved / step,
                roofline_fraction=fraction,
                above_roofline=above,
                cuda_graph=use_graph,
                repeats_s=[t / plan.decode_steps for t in times],
            )
            say(
                f"decode  ctx {context:>6} batch {batch:<4} {point.tokens_per_s:12,.0f} tokens/s "
                f"({fraction:.1%} of peak bandwidth)"
            )
            points.append(point)
            series.append((batch, point.tokens_per_s))
            _release(devices)
        saturation[context] = saturation_batch(series, plan.scaling_threshold)
    return points, saturation


def _figure(
    plan: BenchmarkPlan,
    prefill: Sequence[PrefillPoint],
    decode: Sequence[DecodePoint],
    saturation: Mapping[int, int | None],
    max_concurrency: int,
) -> dict[str, Any]:
    """The capacity figure: prefill tokens/s at the workload's mean prompt; decode tokens/s
    at its mean context and the batch where decode stops scaling (the largest batch measured
    when it never stopped), never above the KV-bound concurrency; that concurrency."""
    at_prompt = [p for p in prefill if p.prompt_length == plan.figure_prompt_length]
    if not at_prompt:
        raise EngineBenchmarkError("no prefill point at the workload's prompt length")
    at_context = [d for d in decode if d.context_length == plan.figure_context_length]
    if not at_context:
        raise EngineBenchmarkError(
            f"no decode point at the workload's context ({plan.figure_context_length} tokens): "
            "the KV pool holds no such sequence"
        )
    knee = saturation.get(plan.figure_context_length)
    candidates = [d for d in at_context if knee is None or d.batch <= knee]
    chosen = max(candidates, key=lambda d: d.batch)
    return {
        "prefill_tokens_per_s": at_prompt[0].tokens_per_s,
        "decode_tokens_per_s": chosen.tokens_per_s,
        "max_concurrency": max_concurrency,
        "prompt_length": plan.figure_prompt_length,
        "context_length": plan.figure_context_length,
        "decode_batch": chosen.batch,
        "decode_saturation_batch": knee,
        "prefill_roofline_fraction": at_prompt[0].roofline_fraction,
        "decode_roofline_fraction": chosen.roofline_fraction,
    }


def run_job(job: Mapping[str, Any], log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run a job as the control plane describes it (plain data: ``model`` dimensions,
    ``workload`` lengths, ``device``, ``gpus``, ``reserve_bytes_per_device``, ``accelerator``
    peak figures or None) and return the result as plain data."""
    dims = ModelDims.from_mapping(job["model"])
    workload = Workload.from_mapping(job["workload"])
    device = str(job.get("device", "cpu"))
    gpus = int(job.get("gpus", 0) or 0)
    accelerator = job.get("accelerator")
    roofline = None
    if accelerator and device == "cuda":
        spec = AcceleratorSpec(
            name=str(accelerator["name"]),
            peak_tflops=float(accelerator["peak_tflops"]),
            memory_tbps=float(accelerator["memory_tbps"]),
            memory_gb=float(accelerator.get("memory_gb", 0.0)),
        )
        roofline = spec.roofline(max(1, gpus))
    plan = None
    if job.get("plan"):
        plan = BenchmarkPlan.from_mapping(job["plan"])
    result = run_benchmark(
        dims,
        workload,
        device=device,
        gpus=max(1, gpus),
        roofline=roofline,
        reserve_bytes_per_device=float(job.get("reserve_bytes_per_device", 0.0)),
        plan=plan,
        log=log,
    )
    return result.to_dict()
