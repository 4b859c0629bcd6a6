"""The engine benchmark on a CPU with a tiny Llama-shaped model: the model is right (GQA
attention against a plain reference; decoding with the KV cache gives the logits of a full
forward pass), the figures are sane, and the arithmetic behind the roofline fractions."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from workers.benchmarks import engine
from workers.benchmarks.engine import (
    BenchmarkPlan,
    Decoder,
    EngineBenchmarkError,
    ModelDims,
    Roofline,
    Workload,
)
from workers.benchmarks.engine.cli import main as engine_main

TINY = engine.PRESETS["tiny"]
CPU = [torch.device("cpu")]
SHORT = Workload(
    prompt_tokens_mean=40, prompt_tokens_p95=64, output_tokens_mean=12, output_tokens_p95=24
)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    # A tiny model gains nothing from threads, and on a shared machine they wait on each other.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(dims: ModelDims = TINY, positions: int = 64) -> Decoder:
    model = Decoder(dims, CPU, torch.float32, max_positions=positions, seed=3)
    # Larger weights than the benchmark's so that a wrong position or head shows in the logits.
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim > 1:
                parameter.normal_(0.0, 0.3)
    return model.eval()


def test_decoding_with_the_kv_cache_gives_the_full_forward_logits() -> None:
    model = _model()
    sequence = torch.randint(TINY.vocab_size, (3, 12), generator=torch.Generator().manual_seed(0))
    prompt = 7
    with torch.inference_mode():
        full = model(sequence, last_only=False)
        cache = model.new_cache(3, 16)
        first = model(sequence[:, :prompt], cache)
        torch.testing.assert_close(first, full[:, prompt - 1], rtol=1e-4, atol=1e-4)
        tokens = torch.zeros(3, dtype=torch.long)
        position = torch.tensor([prompt])
        for p in range(prompt, sequence.shape[1]):
            tokens.copy_(sequence[:, p])
            logits = model.decode_step(tokens, position, cache)
            torch.testing.assert_close(logits, full[:, p], rtol=1e-4, atol=1e-4)
            # The step left the greedy next token and the next position behind.
            assert torch.equal(tokens, logits.argmax(-1)) and position.item() == p + 1
    assert full.std() > 0.1  # logits that differ: the comparison above can fail


def test_prefill_attention_is_grouped_query_attention() -> None:
    dims = TINY
    model = _model()
    attention = model.layers[0].attention
    x = torch.randn(2, 9, dims.hidden_size, generator=torch.Generator().manual_seed(1))
    cos, sin = model.rotary[CPU[0]]
    with torch.inference_mode():
        got = attention(x, cos[:9], sin[:9])
        q, k, v = attention._project(x, cos[:9], sin[:9])
        group = dims.attention_heads // dims.kv_heads
        # Reference: every query head h reads KV head h // group; explicit causal softmax.
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dims.head_dim)
        causal = torch.ones(9, 9, dtype=torch.bool).tril()
        weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        expected = attention.wo((weights @ v).transpose(1, 2).reshape(2, 9, dims.q_size))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_the_tiny_model_gives_sane_figures_against_a_measured_roofline() -> None:
    result = engine.run_benchmark(TINY, SHORT, device="cpu")
    plan = BenchmarkPlan.from_mapping(result.plan)
    assert [p.prompt_length for p in result.prefill] == [40, 64]
    assert result.roofline["source"] == "measured on cpu"
    for point in result.prefill:
        assert point.tokens_per_s > 0 and point.tokens == point.batch * point.prompt_length
        assert 0 < point.roofline_fraction <= 1 and len(point.repeats_s) == plan.repeats
        assert point.flops == engine.prefill_flops(TINY, point.batch, point.prompt_length)
    contexts = sorted({d.context_length for d in result.decode})
    assert contexts == [46, 76]  # 40 + 12 / 2, and 64 + 24 / 2
    for point in result.decode:
        assert point.tokens_per_s > 0 and 0 < point.roofline_fraction <= 1
        assert not point.cuda_graph
    assert [d.batch for d in result.decode if d.context_length == 46] == [1, 2, 4, 8, 16]
    figure = result.figure
    assert figure["prefill_tokens_per_s"] == result.prefill[0].tokens_per_s
    assert figure["decode_tokens_per_s"] > 0 and 0 < figure["decode_roofline_fraction"] <= 1
    assert 0 < figure["prefill_roofline_fraction"] <= 1
    # The KV bound: the pool over the bytes of one 52-token sequence (float32 KV cache).
    assert result.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert result.max_concurrency == int(result.kv_pool_bytes // result.kv_bytes_per_token // 52)
    assert result.max_concurrency >= 1
    assert result.parameters == TINY.parameters == result.weight_bytes // 4
    assert result.hardware["gpus"] == 0 and result.hardware["cpu"]
    assert result.software["torch"] == torch.__version__ and result.software["python"]
    json.dumps(result.to_dict())  # plain data: it crosses to the control plane


def test_a_given_roofline_is_used_and_fractions_stay_in_range() -> None:
    plan = replace(
        BenchmarkPlan.for_workload(SHORT, "cpu"),
        prompt_lengths=(40,),
        context_lengths=(46,),
        max_batch=4,
        warmup=0,
        repeats=1,
    )
    h100 = engine.ACCELERATORS["h100"].roofline(1)
    result = engine.run_benchmark(TINY, SHORT, device="cpu", roofline=h100, plan=plan)
    assert result.roofline["peak_flops"] == 989e12
    assert [d.batch for d in result.decode] == [1, 2, 4]
    assert all(0 < p.roofline_fraction <= 1 for p in [*result.prefill, *result.decode])


def test_the_llama_3_8b_preset_has_8_billion_parameters() -> None:
    dims = engine.PRESETS["llama-3-8b"]
    assert dims.parameters == 8_030_261_248
    assert dims.kv_bytes_per_token(2) == 131_072  # 2 × 32 layers × 8 heads × 128 × 2 bytes


def test_prefill_flops_and_decode_bytes() -> None:
    dims = engine.PRESETS["llama-3-8b"]
    # 2 × 6.98e9 layer weights × 8192 tokens, the output projection for 4 rows, and causal
    # attention 2 × 4 × 32 × 2048² × 128 × 32 layers.
    flops = engine.prefill_flops(dims, batch=4, length=2048)
    layers = 2 * 32 * dims.layer_matmul_parameters * 8192
    assert flops == layers + 2 * dims.embedding_parameters * 4 + 2 * 32 * 4 * 32 * 2048**2 * 128
    moved = engine.decode_bytes_per_step(dims, batch=8, context=1000, bytes_per_element=2)
    weights = (dims.parameters - dims.embedding_parameters) * 2
    assert moved == weights + 8 * 4096 * 2 + 8 * 1000 * 131_072


def test_saturation_is_the_first_doubling_that_gains_under_the_threshold() -> None:
    series = [(1, 100.0), (2, 195.0), (4, 380.0), (8, 410.0), (16, 440.0)]
    assert engine.saturation_batch(series, 0.10) == 4
    assert engine.saturation_batch(series[:3], 0.10) is None
    assert engine.saturation_batch(series[:4], 0.10) == 4  # the last doubling needs no second
    assert engine.saturation_batch([(1, 100.0), (4, 105.0)], 0.10) is None  # not a doubling
    # One slow point (batch 2) is not the end of scaling when the next doubling gains again.
    noisy = [(1, 15.0), (2, 13.0), (4, 30.0), (8, 73.0), (16, 88.0)]
    assert engine.saturation_batch(noisy, 0.10) is None


def test_fractions_above_one_are_reported_as_one_and_flagged() -> None:
    assert engine.roofline_fraction(5.0, 10.0) == (0.5, False)
    assert engine.roofline_fraction(12.0, 10.0) == (1.0, True)


@pytest.mark.parametrize(
    ("change", "argument"),
    [
        ({"attention_heads": 5}, "attention_heads"),
        ({"layers": 0}, "layers"),
        ({"head_dim": 15, "attention_heads": 2, "kv_heads": 2}, "head_dim"),
    ],
)
def test_bad_dimensions_name_the_argument(change: dict[str, int], argument: str) -> None:
    with pytest.raises(ValueError, match=rf"^{argument}:"):
        replace(TINY, **change)


def test_roofline_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^peak_flops:"):
        Roofline(peak_flops=0.0, memory_bytes_per_s=1.0, source="x")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_graph_replays_the_eager_decode() -> None:
    device = torch.device("cuda")
    model = Decoder(TINY, [device], torch.float32, max_positions=64, seed=3).eval()
    with torch.inference_mode():
        ends = []
        for use_graph in (False, True):
            run, reset, held = engine.decode_runner(model, 4, 16, 6, [device], use_graph)
            reset()
            run()
            torch.cuda.synchronize()
            cache, tokens, position = held[0], held[1], held[2]
            ends.append((cache[-1].k.clone(), tokens.clone(), int(position.item())))
    (k_eager, tokens_eager, end_eager), (k_graph, tokens_graph, end_graph) = ends
    assert end_eager == end_graph == 22
    torch.testing.assert_close(k_graph, k_eager)
    assert torch.equal(tokens_graph, tokens_eager)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(EngineBenchmarkError, match="no CUDA device is visible"):
        engine.run_benchmark(TINY, SHORT, device="cuda")


def test_the_plan_follows_the_workload() -> None:
    workload = Workload(
        prompt_tokens_mean=1500,
        prompt_tokens_p95=6000,
        output_tokens_mean=200,
        output_tokens_p95=800,
    )
    plan = BenchmarkPlan.for_workload(workload, "cuda")
    assert plan.prompt_lengths == (128, 512, 1500, 2048, 6000)
    assert plan.context_lengths == (1600, 6400)
    assert (plan.figure_prompt_length, plan.figure_context_length) == (1500, 1600)
    assert plan.sequence_tokens == 1700 and plan.cuda_graphs


def test_the_command_line_writes_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tiny.json"
    code = engine_main(
        [
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--prompt-tokens",
            "24",
            "--output-tokens",
            "8",
            "--max-batch",
            "2",
            "--repeats",
            "1",
            "--output",
            str(out),
        ]
    )
    assert code == 0
    saved = json.loads(out.read_text())
    printed = json.loads(capsys.readouterr().out)
    assert printed["preset"] == "tiny" and printed["decode_tokens_per_s"] > 0
    assert saved["figure"]["max_concurrency"] == printed["max_concurrency"]
    assert saved["plan"]["prompt_lengths"] == [24, 48]
