"""The endpoint load test: sampled requests, run reports, the sweep against the simulated
replica, the load generators over HTTP, and the test recorded as a capacity figure.

The replica runs 20× faster than the seeds' cost model (prefill 4,000 and decode 160 tokens/s
per sequence, eight sequences at once) and the tier's 1.6 s p95 TTFT target shrinks with it
to 80 ms. Configured as ``ReplicaConfig.fifo_slots(8, ...)`` the replica is the planner's
8-server FIFO queue, so the planner's simulator predicts the knee of the very requests the load
test sends. Timing is asserted in virtual time (``VirtualReplicaPool``: the replica's engine
played on each run's own schedule), where that prediction holds exactly whatever else the
machine is doing; over HTTP on Ray the tests check what is sent and counted, never how fast.
The knee measured over HTTP against the prediction is in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from planner.capacity.search import KneeSearch
from planner.capacity.simulation import latency_quantile
from planner.capacity.workload import request_cost
from planner.errors import PlannerInputError
from tests.workers.live_services import free_port
from workers.benchmarks import loadtest
from workers.benchmarks.endpoint import Endpoint, RequestRecord
from workers.benchmarks.loadgen import LoadGeneratorPool, _send
from workers.benchmarks.loadtest import (
    KneeReport,
    LoadTestResult,
    RunReport,
    TokenRates,
    cost_model_knee,
    find_knee,
    measure_token_rates,
    run_open_loop,
    summarize_run,
)
from workers.benchmarks.loadtest.cli import main as loadtest_main
from workers.benchmarks.workload import (
    UNIQUE_TAIL_TOKENS,
    ClassProfile,
    LengthProfile,
    RequestSample,
    classes_from_profiles,
    prompt_words,
    sample_requests,
    shared_prefix_words,
    unit_rate_arrivals,
)
from workers.simulators.replica import ReplicaConfig, VirtualReplicaPool, replica_server_process

SPEEDUP = 20.0
SLOTS = 8
# Per sequence, as the seeds' cost model: 4,000 prefill and 160 decode tokens/s, 20× faster.
SLOT_PREFILL = 4000.0 * SPEEDUP
SLOT_DECODE = 160.0 * SPEEDUP
TARGET_TTFT_S = 1.6 / SPEEDUP

CLASSES = (
    ClassProfile(
        "chat",
        0.8,
        prompt=LengthProfile(p50=400, mean=600, p99=3000),
        output=LengthProfile(p50=60, mean=90, p99=400),
        prefix_cache_hit_rate=0.6,
    ),
    ClassProfile(
        "summary",
        0.2,
        prompt=LengthProfile(p50=2000, mean=2500, p99=8000),
        output=LengthProfile(p50=200, mean=250, p99=700),
        prefix_cache_hit_rate=0.3,
    ),
)
SWEEP_REQUESTS = 300


# -- sampled requests ------------------------------------------------------------------------------


def test_lengths_follow_the_profile_and_are_clipped_at_its_p99() -> None:
    sample = sample_requests(CLASSES, 20_000, seed=4, clip_multiple=2.0)
    chat = sample.class_index == 0
    assert chat.mean() == pytest.approx(0.8, abs=0.01)
    prompt = sample.prompt_tokens[chat]
    # The lognormal through p50 and mean: the sample's median is the profile's p50.
    assert np.median(prompt) == pytest.approx(400, rel=0.03)
    assert prompt.max() <= 2 * 3000 and prompt.min() >= 1
    # Clipping takes a little off the fitted mean, never adds to it.
    assert 540 < prompt.mean() <= 600
    summary_output = sample.output_tokens[~chat]
    assert np.median(summary_output) == pytest.approx(200, rel=0.05)
    assert summary_output.max() <= 1400


def test_a_seed_fixes_the_sample_and_warm_differs_from_cold_only_in_sharing() -> None:
    cold = sample_requests(CLASSES, 5000, seed=9)
    warm = sample_requests(CLASSES, 5000, seed=9, warm=True)
    for field in ("class_index", "prompt_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(cold, field), getattr(warm, field))
    assert not cold.shares_prefix.any()
    chat = warm.class_index == 0
    # The profile's hit rate of each class's requests share its prefix.
    assert warm.shares_prefix[chat].mean() == pytest.approx(0.6, abs=0.03)
    assert warm.shares_prefix[~chat].mean() == pytest.approx(0.3, abs=0.05)
    np.testing.assert_array_equal(warm.cold().shares_prefix, cold.shares_prefix)
    other = sample_requests(CLASSES, 5000, seed=10)
    assert not np.array_equal(other.prompt_tokens, cold.prompt_tokens)


def test_prompts_have_the_sampled_length_and_share_only_what_they_should() -> None:
    sample = sample_requests(CLASSES, 200, seed=1, warm=True)
    for i in range(sample.count):
        assert len(prompt_words(sample, i, run_key=7)) == sample.prompt_tokens[i]
    shared = [i for i in range(sample.count) if sample.shares_prefix[i]]
    own = [i for i in range(sample.count) if not sample.shares_prefix[i]]
    a, b = [i for i in shared if sample.class_index[i] == 0 and sample.prompt_tokens[i] > 64][:2]
    words_a, words_b = prompt_words(sample, a, 7), prompt_words(sample, b, 7)
    common = shared_prefix_words(sample.seed, 7, 0, 10_000)
    # A shared prompt is the class's common text, then a tail of its own.
    assert words_a[:-UNIQUE_TAIL_TOKENS] == common[: len(words_a) - UNIQUE_TAIL_TOKENS]
    assert words_b[:48] == words_a[:48]
    assert words_a[-UNIQUE_TAIL_TOKENS:] != words_b[-UNIQUE_TAIL_TOKENS:]
    # Prompts of their own differ from the first block, and another run shares nothing.
    firsts = {tuple(prompt_words(sample, i, 7)[:8]) for i in own}
    assert len(firsts) == len(own)
    assert prompt_words(sample, a, 8)[:8] != words_a[:8]
    # Every word is a plain vocabulary word, so a real endpoint sees about N tokens.
    assert all(" " not in w and w.isalpha() for w in words_a)


def test_bad_profiles_are_refused_naming_the_field() -> None:
    with pytest.raises(PlannerInputError) as info:
        LengthProfile(p50=100, mean=80, p99=300).fit()
    assert info.value.argument == "mean"
    with pytest.raises(PlannerInputError) as info:
        LengthProfile(p50=100, mean=120, p99=90)
    assert info.value.argument == "p99"
    with pytest.raises(PlannerInputError) as info:
        sample_requests([CLASSES[0]], 10)
    assert info.value.argument == "classes"
    with pytest.raises(PlannerInputError) as info:
        ClassProfile("x", 1.0, CLASSES[0].prompt, CLASSES[0].output, prefix_cache_hit_rate=1.5)
    assert info.value.argument == "prefix_cache_hit_rate"


def test_classes_from_profiles_weigh_by_peak_rate() -> None:
    def profile(tenant: str, klass: str, peak: float) -> Any:
        return SimpleNamespace(
            tenant=SimpleNamespace(name=tenant),
            workload_class=SimpleNamespace(name=klass),
            peak_requests_per_s=peak,
            prompt_tokens_p50=100,
            prompt_tokens_mean=120,
            prompt_tokens_p99=400,
            output_tokens_p50=20,
            output_tokens_mean=30,
            output_tokens_p99=90,
            prefix_cache_hit_rate=0.35,
        )

    classes = classes_from_profiles(
        [profile("acme", "chat", 6), profile("acme", "summary", 2), profile("acme", "chat", 0)]
    )
    assert [c.name for c in classes] == ["acme/chat", "acme/summary", "acme/chat#2"]
    assert [c.share for c in classes] == [0.75, 0.25, 0.0]
    assert classes[0].prompt == LengthProfile(100, 120, 400)
    assert classes[0].prefix_cache_hit_rate == 0.35


# -- run reports ----------------------------------------------------------------------------------


def _record(index: int, outcome: str, sent: float, ttft: float, e2e: float) -> RequestRecord:
    return RequestRecord(
        index=index,
        scheduled_s=sent,
        sent_s=sent,
        first_token_s=sent + ttft,
        done_s=sent + e2e if outcome == "ok" else math.nan,
        output_tokens=11,
        prompt_tokens=100,
        cached_tokens=25,
        outcome=outcome,  # type: ignore[arg-type]
        detail="" if outcome == "ok" else f"{outcome} #{index}",
    )


def _two_class_sample(n: int) -> RequestSample:
    index = np.array([i % 2 for i in range(n)], dtype=np.int64)
    tokens = np.full(n, 100, dtype=np.int64)
    return RequestSample(("a", "b"), index, tokens, tokens, np.zeros(n, dtype=np.bool_))


def test_a_report_counts_errors_and_timeouts_as_missed_targets() -> None:
    sample = _two_class_sample(100)
    records = [_record(i, "ok", i * 0.1, 0.05 + 0.001 * i, 0.5) for i in range(96)]
    records += [_record(96, "timeout", 9.6, math.nan, math.nan)]
    records += [_record(i, "error", i * 0.1, math.nan, math.nan) for i in (97, 98, 99)]
    report = summarize_run(
        records, sample, mode="open", cache="cold", target_ttft_s=0.1005, offered_rate=10.0
    )
    assert report.overall.requests == 100 and report.overall.completed == 96
    assert report.overall.errors == 3 and report.overall.timeouts == 1
    # The four requests without a first token rank above every TTFT: p95 of the 100 is the
    # largest completed one and p99 is infinite.
    assert report.ttft_quantile_s == pytest.approx(0.145) and not report.meets_target
    assert math.isinf(
        latency_quantile([r.ttft_s if r.outcome == "ok" else math.inf for r in records], 0.99)
    )
    # Nearest rank over the 96 completed TTFTs (0.050 … 0.145 s).
    assert report.overall.ttft.p50_s == pytest.approx(0.098)
    assert report.overall.itl.p50_s == pytest.approx((0.5 - 0.097) / 10)
    assert report.per_class["a"].requests == 50 and report.per_class["b"].requests == 50
    # Goodput: TTFT within the target (0.050 … 0.100: 51 requests) over the run's 9.5 + 0.5 s.
    assert report.duration_s == pytest.approx(10.0)
    assert report.goodput_per_s == pytest.approx(5.1)
    assert report.throughput_per_s == pytest.approx(9.6)
    assert report.cached_prompt_share == pytest.approx(0.25)
    # Three errors of 100 are over the 1% a run tolerates.
    assert report.failed and "3 of 100 requests failed" in report.failure
    assert report.error_samples == ("error #97", "error #98", "error #99")
    tolerant = summarize_run(
        records, sample, mode="open", cache="cold", target_ttft_s=0.1005, max_error_share=0.05
    )
    assert not tolerant.failed


def _closed_loop_records(users: int, slots: int, service_s: float, turnaround_s: float) -> list:
    """Records of ``users`` closed-loop clients on ``slots`` FIFO slots of equal requests
    (100 prompt, 10 output tokens), each client resending ``turnaround_s`` after an answer."""
    free = [0.0] * slots
    ready = [(0.0, u) for u in range(users)]
    records = []
    for index in range(20 * users):
        ready.sort()
        sent, user = ready.pop(0)
        free.sort()
        done = max(sent, free.pop(0)) + service_s
        free.append(done)
        ready.append((done + turnaround_s, user))
        records.append(RequestRecord(index, sent, sent, done, done, 10, 100, 0, "ok", "", user))
    return records


def test_steady_token_rates_follow_the_response_time_law() -> None:
    # Four slots of 0.4 s requests: 10 requests a second, finishing in waves of four.
    records = _closed_loop_records(users=12, slots=4, service_s=0.4, turnaround_s=0.0)
    assert loadtest.steady_token_rates(records, 12) == pytest.approx((1000.0, 100.0))
    # A slow client turnaround is time the client holds no request: with 12 clients and 4
    # slots the replica stays saturated, and the law still finds its rate.
    slow = _closed_loop_records(users=12, slots=4, service_s=0.4, turnaround_s=0.05)
    assert loadtest.steady_token_rates(slow, 12) == pytest.approx((1000.0, 100.0))
    assert all(math.isnan(v) for v in loadtest.steady_token_rates(records[:20], 12))


# -- the client against misbehaving endpoints --------------------------------------------------


async def _misbehaving(request: web.Request) -> web.StreamResponse:
    """Answers by the model name: a good stream, an HTTP error, garbage, a cut stream, silence."""
    body = await request.json()
    model = body["model"]
    if model == "http-error":
        return web.Response(status=503, text="overloaded")
    if model == "silent":
        await asyncio.sleep(1.5)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)

    async def send(data: str) -> None:
        await response.write(f"data: {data}\n\n".encode())

    if model == "garbage":
        await send("[1, 2]")
    elif model == "good":
        await send(json.dumps({"choices": [{"index": 0, "text": ""}]}))  # no text: not a token
        await asyncio.sleep(0.01)
        await send(json.dumps({"choices": [{"index": 0, "text": " one"}]}))
        await send(json.dumps({"choices": [{"index": 0, "text": " two three"}]}))
        usage = {"prompt_tokens": 2, "completion_tokens": 3, "prompt_tokens_details": None}
        await send(json.dumps({"choices": [], "usage": usage}))
        await send("[DONE]")
    else:  # "cut": text, then the stream ends without [DONE]
        await send(json.dumps({"choices": [{"index": 0, "text": " one"}]}))
    await response.write_eof()
    return response


def test_the_client_tells_answers_errors_and_timeouts_apart() -> None:
    async def scenario() -> dict[str, RequestRecord]:
        app = web.Application()
        app.router.add_post("/v1/completions", _misbehaving)
        runner = web.AppRunner(app)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        records = {}
        try:
            async with aiohttp.ClientSession() as session:
                for model in ("good", "http-error", "garbage", "cut", "silent"):
                    endpoint = Endpoint(url, model, timeout_s=0.5)
                    body = endpoint.body(["a", "b"], 3)
                    origin = time.monotonic()
                    records[model] = await _send(session, endpoint, body, 0, 0.0, origin)
        finally:
            await runner.cleanup()
        return records

    records = asyncio.run(scenario())
    good = records["good"]
    assert good.outcome == "ok" and good.output_tokens == 3 and good.prompt_tokens == 2
    assert good.cached_tokens == -1  # the server did not say
    assert 0 < good.ttft_s <= good.e2e_s and good.itl_s >= 0
    assert records["http-error"].outcome == "error"
    assert records["http-error"].detail == "HTTP 503: overloaded"
    assert records["garbage"].outcome == "error" and "malformed" in records["garbage"].detail
    cut = records["cut"]
    assert cut.outcome == "error" and "without [DONE]" in cut.detail and cut.ttft_s > 0
    assert records["silent"].outcome == "timeout" and math.isnan(records["silent"].ttft_s)


# -- in virtual time, against the simulated replica's model --------------------------------------
#
# Everything that depends on timing is checked here: the replica's engine plays each run on the
# run's own schedule (``VirtualReplicaPool``), so the figures are exact and the same on an idle
# machine and on one whose cores are all busy.


def _replica() -> ReplicaConfig:
    return ReplicaConfig.fifo_slots(
        SLOTS, SLOT_PREFILL * SLOTS, SLOT_DECODE * SLOTS, model="sim", stream_interval_s=0.02
    )


VIRTUAL = Endpoint("http://replica.virtual:8000", "sim", timeout_s=30.0)


@dataclass(frozen=True)
class Sweep:
    report: KneeReport
    predicted: KneeSearch
    saturation: float
    pool: VirtualReplicaPool


def _saturation(sample: RequestSample) -> float:
    service = [
        request_cost(float(p), float(o), SLOT_PREFILL, SLOT_DECODE)
        for p, o in zip(sample.prompt_tokens, sample.output_tokens, strict=True)
    ]
    return SLOTS * len(service) / sum(service)


@pytest.fixture(scope="session")
def sweep() -> Sweep:
    sample = sample_requests(CLASSES, SWEEP_REQUESTS, seed=0)
    unit = unit_rate_arrivals(SWEEP_REQUESTS, seed=0)
    saturation = _saturation(sample)
    predicted = cost_model_knee(
        sample,
        unit,
        servers=SLOTS,
        prefill_tokens_per_s=SLOT_PREFILL,
        decode_tokens_per_s=SLOT_DECODE,
        target_ttft_s=TARGET_TTFT_S,
        rel_tol=0.03,
    )
    pool = VirtualReplicaPool(_replica())
    report = find_knee(
        pool,
        VIRTUAL,
        CLASSES,
        TARGET_TTFT_S,
        first_rate=0.7 * saturation,
        upper_rate=saturation,
        n=SWEEP_REQUESTS,
        seed=0,
        rel_tol=0.03,
        closed_loop_users=2 * SLOTS,
    )
    return Sweep(report, predicted, saturation, pool)


@pytest.fixture(scope="session")
def rates() -> TokenRates:
    # Three users a slot keep requests waiting for every slot that frees; long prompts make
    # the prefill probe's point far from the decode probe's, so the two equations are well
    # conditioned.
    return measure_token_rates(
        VirtualReplicaPool(_replica()),
        VIRTUAL,
        users=3 * SLOTS,
        prompt_tokens=8192,
        output_tokens=256,
        requests_per_user=6,
    )


def test_the_knee_is_the_planners_prediction(sweep: Sweep) -> None:
    # Configured as fifo_slots, the replica is the planner's FIFO queue: the same search over
    # the same requests tries the same rates, meets at the same ones and finds the same knee.
    report = sweep.report
    assert not report.failed and report.bracketed
    assert [p.rate for p in report.points] == pytest.approx(list(sweep.predicted.rates))
    assert [p.meets for p in report.points] == list(sweep.predicted.meets)
    assert report.knee_rate == pytest.approx(sweep.predicted.knee_rate, rel=1e-9)
    # The knee of a replica at the SLO is below its saturation: the last requests per second
    # before it come with latency nobody accepts.
    assert report.knee_rate < sweep.saturation
    knee = report.knee
    assert knee is not None and knee.ttft_quantile_s <= TARGET_TTFT_S
    above = [p for p in report.points if p.rate > report.knee_rate]
    assert above and all(not p.meets for p in above)
    for point in report.points:
        assert point.report.overall.errors == 0 and point.report.overall.completed == 300
        assert point.report.goodput_per_s <= point.report.throughput_per_s
        # Sent on schedule: the generators never limit a run.
        assert point.report.send_lag_max_s == 0


def test_knee_run_reports_every_stage_per_class(sweep: Sweep) -> None:
    knee = sweep.report.knee
    assert knee is not None
    assert set(knee.per_class) == {"chat", "summary"}
    assert sum(s.requests for s in knee.per_class.values()) == SWEEP_REQUESTS
    for stats in (knee.overall, *knee.per_class.values()):
        for stage in (stats.ttft, stats.itl, stats.e2e):
            assert 0 < stage.p50_s <= stage.p95_s <= stage.p99_s
        assert stats.ttft.p50_s < stats.e2e.p50_s
    # Longer prompts take longer to prefill: the summaries' first tokens come later.
    assert knee.per_class["summary"].ttft.p50_s > knee.per_class["chat"].ttft.p50_s
    # Each sequence decodes at its slot's rate: a token follows the last every 1/3,200 s.
    assert knee.overall.itl.p50_s == pytest.approx(1 / SLOT_DECODE, rel=1e-9)
    assert knee.overall.itl.p99_s == pytest.approx(1 / SLOT_DECODE, rel=1e-9)
    # At a rate meeting p95 ≤ target, at least 95% of the requests meet it.
    assert knee.goodput_per_s >= 0.95 * knee.throughput_per_s
    assert knee.cached_prompt_share == 0.0  # cold: nothing is shared


def test_closed_loop_reports_more_throughput_than_the_capacity_at_the_slo(sweep: Sweep) -> None:
    closed = sweep.report.closed_loop
    assert closed is not None and closed.mode == "closed" and closed.users == 2 * SLOTS
    assert closed.overall.completed == SWEEP_REQUESTS
    # Sixteen users keep the eight slots busy: the replica runs flat out, above the knee,
    # and the users wait for slots, so the TTFT target is missed.
    assert closed.throughput_per_s > sweep.report.knee_rate
    assert closed.ttft_quantile_s > TARGET_TTFT_S
    # Flat out, the replica completes at most its saturation rate.
    assert closed.throughput_per_s <= 1.02 * sweep.saturation


def test_warm_prefix_cache_lowers_ttft_and_bursts_raise_it(sweep: Sweep) -> None:
    pool = VirtualReplicaPool(_replica())
    rate = 0.6 * sweep.saturation
    common: dict[str, Any] = {"target_ttft_s": TARGET_TTFT_S, "n": 150, "seed": 3}
    cold = run_open_loop(pool, VIRTUAL, CLASSES, rate, cache="cold", **common)
    warm = run_open_loop(pool, VIRTUAL, CLASSES, rate, cache="warm", **common)
    assert not cold.failed and not warm.failed
    assert cold.cached_prompt_share == 0.0
    # About the hit rate of the prompt tokens comes from the cache.
    assert 0.25 < warm.cached_prompt_share < 0.75
    assert warm.overall.ttft.p50_s < cold.overall.ttft.p50_s
    assert warm.per_class["summary"].ttft.p50_s < cold.per_class["summary"].ttft.p50_s
    # The same requests arriving in bursts (cv 3) at the same mean rate queue more.
    bursty = run_open_loop(pool, VIRTUAL, CLASSES, rate, cv=3.0, **common)
    assert bursty.overall.ttft.p95_s > cold.overall.ttft.p95_s


def test_token_rates_recover_the_replicas_rates(rates: TokenRates) -> None:
    assert not rates.failed
    assert rates.prefill_tokens_per_s == pytest.approx(SLOT_PREFILL * SLOTS, rel=1e-6)
    assert rates.decode_tokens_per_s == pytest.approx(SLOT_DECODE * SLOTS, rel=1e-6)


def test_a_client_that_gives_up_frees_its_slot_in_virtual_time() -> None:
    # One slot, 100 output tokens at 1,000 tokens/s: 0.1 s a request. Clients wait 0.15 s.
    # The first request is answered at 0.1 s; the second, queued behind it, has its first
    # token at 0.101 s and is dropped at its deadline, 0.15 s; the third (sent at 0.12 s) is
    # admitted then and finishes 0.1 s later, before its own deadline at 0.27 s.
    pool = VirtualReplicaPool(ReplicaConfig.fifo_slots(1, 1e9, 1000.0, model="sim"))
    sample = RequestSample(
        ("a",),
        np.zeros(3, dtype=np.int64),
        np.full(3, 4, dtype=np.int64),
        np.full(3, 100, dtype=np.int64),
        np.zeros(3, dtype=np.bool_),
    )
    impatient = Endpoint(VIRTUAL.base_url, "sim", timeout_s=0.15)
    first, second, third = pool.run_open(impatient, sample, [0.0, 0.0, 0.12], run_key=1)
    assert first.outcome == "ok" and first.done_s == pytest.approx(0.1)
    assert second.outcome == "timeout" and second.first_token_s == pytest.approx(0.101)
    assert third.outcome == "ok" and third.done_s == pytest.approx(0.25)
    # Another model name is the 404 the server answers, not a request.
    (refused, *_) = pool.run_open(Endpoint(VIRTUAL.base_url, "other"), sample, [0, 1, 2], run_key=2)
    assert refused.outcome == "error" and refused.detail.startswith("HTTP 404")


# -- on Ray, over HTTP, against the simulated replica -----------------------------------------
#
# The load generators and the protocol: what is sent and counted, not how fast (timing over
# HTTP depends on how busy the machine is; the sweep's figures are measured in
# docs/benchmarks.md).


@dataclass(frozen=True)
class Bench:
    endpoint: Endpoint
    pool: LoadGeneratorPool


# Session-scoped: pytest-django runs the database tests of every module before the others,
# so this module's tests do not run in one stretch, and a module-scoped Ray would start twice.
@pytest.fixture(scope="session")
def bench() -> Iterator[Bench]:
    import ray

    from workers.benchmarks.ray_runner import ray_init

    # A Ray another test module started for the test run is reused as it is.
    started_here = not ray.is_initialized()
    ray_init(num_cpus=2)
    try:
        # The generators reserve no CPU: they live for the whole test run, and the test run's Ray
        # (2 CPUs) must stay free for the tasks other modules send it.
        with (
            replica_server_process(_replica()) as url,
            LoadGeneratorPool(2, cpus_per_generator=0) as pool,
        ):
            yield Bench(Endpoint(url, "sim", timeout_s=30.0), pool)
    finally:
        if started_here:
            ray.shutdown()


def test_over_http_every_request_is_sent_answered_and_counted(bench: Bench) -> None:
    sample = sample_requests(CLASSES, 120, seed=5, warm=True)
    rate = 0.5 * _saturation(sample)
    common: dict[str, Any] = {"target_ttft_s": TARGET_TTFT_S, "n": 120, "seed": 5}
    for cache in ("cold", "warm"):
        over_http = run_open_loop(bench.pool, bench.endpoint, CLASSES, rate, cache=cache, **common)
        virtual = run_open_loop(
            VirtualReplicaPool(_replica()), VIRTUAL, CLASSES, rate, cache=cache, **common
        )
        assert not over_http.failed and over_http.overall.errors == 0
        assert over_http.overall.completed == 120 and over_http.overall.timeouts == 0
        assert set(over_http.per_class) == {"chat", "summary"}
        records = sorted(over_http.records, key=lambda r: r.index)
        # The replica saw the sampled prompts and produced the sampled outputs, exactly.
        assert [r.prompt_tokens for r in records] == sample.prompt_tokens.tolist()
        assert [r.output_tokens for r in records] == sample.output_tokens.tolist()
        assert all(0 < r.ttft_s <= r.e2e_s for r in records)
        assert all(r.sent_s >= r.scheduled_s for r in records)
        # The prefix cache served about the same tokens over HTTP as in virtual time. Not
        # exactly: two generators sending within the same instant can reach the replica in
        # either order on a busy machine, which moves a shared block from one request to the
        # other (seen: 16 tokens of one request in 120).
        assert all(0 <= r.cached_tokens <= r.prompt_tokens for r in records)
        http_cached = sum(r.cached_tokens for r in records)
        virtual_cached = sum(r.cached_tokens for r in virtual.records)
        assert abs(http_cached - virtual_cached) <= 0.05 * max(virtual_cached, 1)
        assert abs(over_http.cached_prompt_share - virtual.cached_prompt_share) <= 0.05
    assert 0.25 < over_http.cached_prompt_share < 0.75


# -- recording ------------------------------------------------------------------------------------


def _started_run(classes: Any, report: KneeReport, endpoint: Endpoint) -> Any:
    from controlplane.benchmarks import services
    from controlplane.benchmarks.models import BenchmarkRun
    from tests.controlplane.test_benchmarks_helpers import make_bench_fleet

    fleet = make_bench_fleet()
    run, _ = services.benchmark_run_request(
        shape=fleet.shape, kind=BenchmarkRun.Kind.ENDPOINT, enqueue=False
    )
    workload = loadtest.load_test_workload(
        classes,
        endpoint=endpoint,
        target_ttft_s=report.target_ttft_s,
        quantile=report.quantile,
        cache=report.cache,
        requests_per_point=report.requests_per_point,
        seed=report.seed,
        cv=report.cv,
    )
    return services.benchmark_run_start(run=run, workload=workload)


@pytest.mark.django_db
def test_results_are_stored_as_an_endpoint_load_test_figure(
    sweep: Sweep, rates: TokenRates
) -> None:
    from controlplane.benchmarks import services
    from controlplane.benchmarks.models import BenchmarkRun
    from controlplane.fleet.models import CapacityFigure

    run = _started_run(CLASSES, sweep.report, VIRTUAL)
    software = loadtest.load_test_software()
    figures = services.measurement_record(
        run=run,
        measurement=services.load_test_measurement(
            LoadTestResult(sweep.report, rates), max_concurrency=SLOTS
        ),
        hardware={"load_generators": list(sweep.pool.hosts)},
        software=software,
    )
    assert len(figures) == 1
    figure = CapacityFigure.objects.get(pk=figures[0].pk)
    assert figure.source == CapacityFigure.Source.ENDPOINT_LOAD_TEST
    assert figure.knee_requests_per_s == sweep.report.knee_rate
    assert figure.prefill_tokens_per_s == rates.prefill_tokens_per_s
    assert figure.max_concurrency == SLOTS
    assert figure.provenance["benchmark_run"] == run.pk
    assert figure.provenance["software"]["ray"] == software["ray"]
    assert figure.provenance["workload"]["target_ttft_s"] == TARGET_TTFT_S
    assert [c["name"] for c in figure.provenance["workload"]["classes"]] == ["chat", "summary"]
    run.refresh_from_db()
    assert run.status == BenchmarkRun.Status.SUCCEEDED
    points = run.results["load_test"]["points"]
    assert len(points) == len(sweep.report.points)
    assert run.results["load_test"]["closed_loop"]["users"] == 2 * SLOTS


@pytest.mark.django_db
def test_an_unreachable_endpoint_is_a_failed_run_that_stores_nothing(bench: Bench) -> None:
    from controlplane.benchmarks import services
    from controlplane.benchmarks.models import BenchmarkRun
    from controlplane.fleet.models import CapacityFigure
    from tests.controlplane.test_benchmarks_helpers import make_bench_fleet, make_figure

    nowhere = Endpoint(f"http://127.0.0.1:{free_port()}", "sim", timeout_s=5.0)
    report = find_knee(
        bench.pool, nowhere, CLASSES, TARGET_TTFT_S, first_rate=100.0, n=50, closed_loop_users=4
    )
    assert report.failed and report.knee_rate == 0 and report.closed_loop is None
    (point,) = report.points
    failed: RunReport = point.report
    assert failed.overall.errors == 50 and failed.overall.completed == 0
    assert failed.goodput_per_s == 0 and failed.throughput_per_s == 0
    assert "50 of 50 requests failed" in report.failure
    assert "Connect" in failed.error_samples[0] or "refused" in failed.error_samples[0]
    # A warm run whose warm-up fails sends nothing and fails with that reason.
    warm = run_open_loop(
        bench.pool, nowhere, CLASSES, 100.0, target_ttft_s=TARGET_TTFT_S, n=50, cache="warm"
    )
    assert warm.failed and "the warm-up failed" in warm.failure

    # The same through a queued run: failed with the reason, and the old figure stays.
    fleet = make_bench_fleet()
    previous = make_figure(fleet.shape)
    run, _ = services.benchmark_run_request(
        shape=fleet.shape, kind=BenchmarkRun.Kind.ENDPOINT, enqueue=False
    )
    plan = loadtest.LoadTestPlan(
        endpoint=nowhere, max_concurrency=SLOTS, first_rate=100.0, requests_per_point=50
    )
    ended = services.endpoint_run_execute(run_id=run.pk, plan=plan, pool=bench.pool)
    assert ended is not None and ended.status == BenchmarkRun.Status.FAILED
    assert "endpoint load test failed" in ended.error and "50 of 50" in ended.error
    assert ended.results["load_test"]["points"][0]["errors"] == 50
    assert list(CapacityFigure.objects.all()) == [previous]


@pytest.mark.django_db
def test_a_queued_endpoint_run_measures_the_models_profiles_at_its_tiers_target() -> None:
    from controlplane.benchmarks import services
    from controlplane.benchmarks.models import BenchmarkRun
    from controlplane.fleet.models import CapacityFigure
    from controlplane.policies.models import WorkloadProfile
    from tests.controlplane.test_benchmarks_helpers import make_bench_fleet

    fleet = make_bench_fleet()
    tier = fleet.tenant.tier
    tier.p95_ttft_slo_s = TARGET_TTFT_S
    tier.full_clean()
    tier.save()
    # A second version of the tenant's chat profile: the chat class above.
    chat = CLASSES[0]
    profile = WorkloadProfile(
        tenant=fleet.tenant,
        model=fleet.model,
        workload_class=fleet.workload_class,
        version=2,
        peak_requests_per_s=5,
        prompt_tokens_p50=chat.prompt.p50,
        prompt_tokens_mean=chat.prompt.mean,
        prompt_tokens_p95=2000,
        prompt_tokens_p99=chat.prompt.p99,
        output_tokens_p50=chat.output.p50,
        output_tokens_mean=chat.output.mean,
        output_tokens_p95=300,
        output_tokens_p99=chat.output.p99,
    )
    profile.full_clean()
    profile.save()
    run, _ = services.benchmark_run_request(
        shape=fleet.shape, kind=BenchmarkRun.Kind.ENDPOINT, enqueue=False
    )
    plan = loadtest.LoadTestPlan(
        endpoint=VIRTUAL,
        max_concurrency=SLOTS,
        first_rate=100.0,
        requests_per_point=80,
        rel_tol=0.2,
        probe_users=2 * SLOTS,
    )
    ended = services.endpoint_run_execute(
        run_id=run.pk, plan=plan, pool=VirtualReplicaPool(_replica())
    )
    assert ended is not None and ended.status == BenchmarkRun.Status.SUCCEEDED, ended.error
    figure = ended.figures.get()
    assert figure.source == CapacityFigure.Source.ENDPOINT_LOAD_TEST
    assert figure.knee_requests_per_s is not None and figure.knee_requests_per_s >= 100
    assert figure.max_concurrency == SLOTS
    workload = figure.provenance["workload"]
    assert workload["target_ttft_s"] == TARGET_TTFT_S
    assert [c["name"] for c in workload["classes"]] == ["acme/chat"]
    assert workload["classes"][0]["prompt_tokens"]["mean"] == chat.prompt.mean
    assert figure.provenance["workload_profile_version"] == ended.workload_profile_version
    assert ended.results["load_test"]["knee_rate_per_s"] == figure.knee_requests_per_s


# -- command line ---------------------------------------------------------------------------------


def _classes_file(tmp_path: Any, data: object) -> str:
    path = tmp_path / "classes.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_command_line_refuses_a_bad_classes_file_naming_the_field(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = [{**CLASSES[0].as_dict(), "output_tokens": {"p50": 10}}]
    argv = ["--base-url=http://127.0.0.1:9", "--model=m", "--target-ttft-s=1", "--first-rate=1"]
    assert loadtest_main([*argv, f"--classes={_classes_file(tmp_path, broken)}"]) == 2
    assert "output_tokens: must be an object with p50, mean and p99" in capsys.readouterr().err
    shares = [c.as_dict() for c in CLASSES[:1]]
    assert loadtest_main([*argv, f"--classes={_classes_file(tmp_path, shares)}"]) == 2
    assert "shares must sum to 1" in capsys.readouterr().err


def test_command_line_sweeps_and_writes_the_report(
    bench: Bench, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "report.json"
    status = loadtest_main(
        [
            f"--base-url={bench.endpoint.base_url}",
            "--model=sim",
            f"--classes={_classes_file(tmp_path, [c.as_dict() for c in CLASSES])}",
            # A target no run misses however busy the machine: this checks the command, not
            # the replica's speed.
            "--target-ttft-s=5",
            "--first-rate=40",
            "--max-points=2",
            "--requests=60",
            "--generators=1",
            f"--output={output}",
        ]
    )
    assert status == 0
    report = json.loads(output.read_text())
    points = report["load_test"]["points"]
    assert [p["rate_per_s"] for p in points] == [40, 80] and all(p["meets"] for p in points)
    assert report["load_test"]["knee_rate_per_s"] == 80 and not report["load_test"]["bracketed"]
    assert report["workload"]["classes"][1] == CLASSES[1].as_dict()
    assert "knee 80 req/s" in capsys.readouterr().err
