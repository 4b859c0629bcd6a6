"""The simulated OpenAI-compatible replica: its scheduler against the planner's queue, its prefix
cache, and its HTTP protocol (streaming completions and chat, usage, errors, aborts)."""

from __future__ import annotations

import http.client
import json
import math
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from planner.capacity.simulation import Requests, open_loop_times, unit_rate_arrivals
from planner.capacity.workload import request_cost
from planner.errors import PlannerInputError
from workers.simulators.replica import (
    BatchingEngine,
    PrefixCache,
    ReplicaConfig,
    ReplicaServer,
    block_hashes,
    replica_server_process,
)
from workers.simulators.replica.cli import main

# -- the scheduler, in virtual time --------------------------------------------------------------


def test_fifo_slots_replay_the_planners_c_server_queue_exactly() -> None:
    # c slots at 1/c of the rates each: the planner's FIFO pool of c servers whose service time
    # is request_cost at those per-slot rates. Wake-ups at random times in between must not
    # change any admission, first token or completion.
    rng = np.random.default_rng(5)
    n, slots, prefill, decode = 2000, 4, 16_000.0, 640.0
    prompt = rng.integers(1, 3000, n)
    output = rng.integers(1, 300, n)
    service = np.array(
        [
            request_cost(int(p), int(o), prefill / slots, decode / slots)
            for p, o in zip(prompt, output, strict=True)
        ]
    )
    arrival = unit_rate_arrivals(n, seed=3) / (0.9 * slots / service.mean())
    engine = BatchingEngine(ReplicaConfig.fifo_slots(slots, prefill, decode), 0.0)
    wakes = iter(np.sort(rng.uniform(0, arrival[-1] * 1.2, 5 * n)))
    wake = next(wakes)
    ids = []
    for p, o, t in zip(prompt, output, arrival, strict=True):
        while wake < t:
            engine.advance(wake)
            wake = next(wakes, math.inf)
        ids.append(engine.submit(int(p), int(o), float(t)))
    engine.advance(arrival[-1] + service.sum())
    seqs = [engine.sequences[i] for i in ids]

    # The planner's pure-Python engine: the same times as the compiled one, without loading numba.
    start, done = open_loop_times(Requests.from_arrays(service), arrival, slots, engine="python")
    np.testing.assert_allclose([s.admitted_s for s in seqs], start, rtol=0, atol=1e-9)
    np.testing.assert_allclose([s.done_s for s in seqs], done, rtol=0, atol=1e-9)
    first_token = start + prompt / (prefill / slots) + 1 / (decode / slots)
    np.testing.assert_allclose([s.first_token_s for s in seqs], first_token, rtol=0, atol=1e-9)
    assert engine.generated_tokens_total == output.sum()


def test_running_sequences_share_the_engine() -> None:
    # Share 1: a lone sequence gets the whole engine, two share it half and half.
    config = ReplicaConfig(prefill_tokens_per_s=1000.0, decode_tokens_per_s=100.0)
    engine = BatchingEngine(config, 0.0)
    a = engine.submit(100, 10, 0.0)  # alone: prefill 0.1 s, then decode at 100 tokens/s
    b = engine.submit(100, 10, 0.1)  # arrives as a starts decoding
    engine.advance(10.0)
    seq_a, seq_b = engine.sequences[a], engine.sequences[b]
    assert seq_a.prefill_done_s == pytest.approx(0.1)
    # Both run at half speed from 0.1: b's prefill takes 0.2 s, while a decodes 10 tokens.
    assert seq_a.first_token_s == pytest.approx(0.1 + 1 / 50)
    assert seq_b.prefill_done_s == pytest.approx(0.3)
    assert seq_a.done_s == pytest.approx(0.3)
    # Alone again from 0.3: b decodes at the full 100 tokens/s.
    assert seq_b.done_s == pytest.approx(0.3 + 10 / 100)
    assert engine.running == 0 and engine.waiting == 0


def test_concurrency_limit_queues_in_arrival_order() -> None:
    config = ReplicaConfig.fifo_slots(1, 1000.0, 100.0)
    engine = BatchingEngine(config, 0.0)
    ids = [engine.submit(100, 10, 0.0), engine.submit(100, 10, 0.01), engine.submit(50, 5, 0.02)]
    assert engine.running == 1 and engine.waiting == 2
    engine.advance(5.0)
    admitted = [engine.sequences[i].admitted_s for i in ids]
    assert admitted == pytest.approx([0.0, 0.2, 0.4])


def test_output_is_streamed_on_the_interval_with_first_and_last_at_once() -> None:
    config = ReplicaConfig(
        prefill_tokens_per_s=1e6, decode_tokens_per_s=100.0, stream_interval_s=0.05
    )
    engine = BatchingEngine(config, 0.0)
    seq = engine.submit(10, 20, 0.0)
    first = engine.next_wake()
    assert first == pytest.approx(10 / 1e6 + 0.01)
    emitted = engine.advance(first)  # type: ignore[arg-type]
    assert [(e.first_token_index, e.tokens, e.finished) for e in emitted] == [(0, 1, False)]
    # Tokens between the first and the last are held for the stream interval.
    assert engine.advance(first + 0.03) == []  # type: ignore[operator]
    later = engine.advance(first + 0.06)  # type: ignore[operator]
    assert later[0].first_token_index == 1 and not later[0].finished
    rest = engine.advance(1.0)
    assert rest[-1].finished and rest[-1].first_token_index + rest[-1].tokens == 20
    assert engine.sequences[seq].done_s == pytest.approx(10 / 1e6 + 0.2)
    assert engine.next_wake() is None


def test_abort_frees_the_slot_for_the_next_request() -> None:
    engine = BatchingEngine(ReplicaConfig.fifo_slots(1, 1000.0, 100.0), 0.0)
    first = engine.submit(100, 100, 0.0)
    second = engine.submit(100, 10, 0.0)
    engine.abort(first, 0.05)
    assert engine.sequences[second].admitted_s == pytest.approx(0.05)
    assert first not in engine.sequences and engine.running == 1


def test_prefix_cache_skips_the_cached_blocks_of_a_shared_prefix() -> None:
    config = ReplicaConfig.fifo_slots(2, 1000.0, 100.0, block_tokens=4)
    engine = BatchingEngine(config, 0.0)
    shared = [f"s{i}" for i in range(10)]
    first = engine.submit(12, 1, 0.0, block_hashes([*shared, "a", "b"], 4))
    engine.advance(1.0)  # its prefill is done: its 3 full blocks are cached
    second = engine.submit(13, 1, 1.0, block_hashes([*shared, "c", "d", "e"], 4))
    other = engine.submit(12, 1, 1.0, block_hashes(["x", *shared, "y"], 4))
    # Blocks [s0..s3] and [s4..s7] match; the third differs (s8 s9 c d versus s8 s9 a b).
    assert engine.sequences[second].cached_tokens == 8
    assert engine.sequences[other].cached_tokens == 0  # one word in front: nothing matches
    assert engine.sequences[first].cached_tokens == 0
    # A prompt that is all cached still computes its last token.
    again = engine.submit(12, 1, 2.0, block_hashes([*shared, "a", "b"], 4))
    assert engine.sequences[again].cached_tokens == 11
    assert engine.cached_tokens_total == 8 + 11


def test_prefix_cache_evicts_the_least_recently_used_block() -> None:
    cache = PrefixCache(capacity_blocks=3)
    cache.insert([1, 2])
    cache.insert([10, 11])  # evicts 1 (the oldest)
    assert cache.cached_blocks([1, 2]) == 0 and len(cache) == 3
    assert cache.cached_blocks([10, 11]) == 2
    cache.insert([20])  # 2 is now the least recently used
    assert cache.cached_blocks([2]) == 0 and cache.cached_blocks([10, 11]) == 2


def test_chained_block_hashes_match_only_after_the_same_prefix() -> None:
    words = "a b c d e f g h i".split()
    assert len(block_hashes(words, 4)) == 2  # the partial last block is not cached
    assert block_hashes(words, 4)[1] != block_hashes([*"x b c d".split(), *words[4:]], 4)[1]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prefill_tokens_per_s", 0.0),
        ("decode_tokens_per_s", math.nan),
        ("max_sequence_share", 1.5),
        ("max_concurrency", 0),
        ("block_tokens", 0),
        ("stream_interval_s", -1.0),
        ("model", ""),
    ],
)
def test_bad_configuration_names_the_field(field: str, value: object) -> None:
    with pytest.raises(PlannerInputError) as info:
        ReplicaConfig(**{field: value})  # type: ignore[arg-type]
    assert info.value.argument == field


# -- HTTP -----------------------------------------------------------------------------------------

FAST = ReplicaConfig(
    model="sim",
    prefill_tokens_per_s=200_000.0,
    decode_tokens_per_s=20_000.0,
    max_concurrency=4,
    max_model_len=4096,
    block_tokens=16,
    stream_interval_s=0.005,
)


@pytest.fixture(scope="module")
def server() -> Iterator[ReplicaServer]:
    with ReplicaServer(FAST) as running:
        yield running


def _post(server: ReplicaServer, path: str, body: Any) -> http.client.HTTPResponse:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        server.base_url + path, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        return urllib.request.urlopen(request, timeout=30)  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        return exc  # type: ignore[return-value]


def _events(response: http.client.HTTPResponse) -> list[Any]:
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events: list[Any] = []
    for raw in response:
        line = raw.decode().strip()
        if not line:
            continue
        assert line.startswith("data: "), line
        payload = line[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def _words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_streaming_completion_sends_every_token_then_usage_and_done(
    server: ReplicaServer,
) -> None:
    body = {
        "model": "sim",
        "prompt": _words(40, "p"),
        "max_tokens": 25,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    events = _events(_post(server, "/v1/completions", body))
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert usage["prompt_tokens"] == 40 and usage["completion_tokens"] == 25
    assert usage["total_tokens"] == 65 and usage["prompt_tokens_details"]["cached_tokens"] == 0
    chunks = events[:-2]
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in chunks)
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert len(text.split()) == 25
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_streaming_chat_opens_with_the_role_and_reports_cached_prompt_tokens(
    server: ReplicaServer,
) -> None:
    system = _words(64, "sys")
    body = {
        "model": "sim",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": [{"type": "text", "text": "what is the policy"}]},
        ],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    first = _events(_post(server, "/v1/chat/completions", body))
    assert first[0]["object"] == "chat.completion.chunk"
    assert first[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in first[1:-2])
    assert len(content.split()) == 3
    assert first[-2]["usage"]["prompt_tokens"] == 68
    # The same system prompt again: its four full 16-word blocks come from the prefix cache.
    again = _events(_post(server, "/v1/chat/completions", body))
    assert again[-2]["usage"]["prompt_tokens_details"]["cached_tokens"] == 64


def test_without_stream_the_answer_is_one_json_object(server: ReplicaServer) -> None:
    response = _post(
        server,
        "/v1/chat/completions",
        {
            "model": "sim",
            "messages": [{"role": "user", "content": "hello there"}],
            "max_completion_tokens": 4,
        },
    )
    assert response.status == 200
    body = json.loads(response.read())
    assert body["object"] == "chat.completion"
    assert len(body["choices"][0]["message"]["content"].split()) == 4
    assert body["usage"]["completion_tokens"] == 4 and body["usage"]["prompt_tokens"] == 2


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/completions", b"{not json", 400, None),
        ("/v1/completions", {"model": "sim"}, 400, "prompt"),
        ("/v1/completions", {"model": "sim", "prompt": "a b", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"model": "other", "prompt": "a b"}, 404, "model"),
        ("/v1/completions", {"model": "sim", "prompt": "a", "max_tokens": 4096}, 400, "max_tokens"),
        ("/v1/completions", {"model": "sim", "prompt": "a", "n": 2}, 400, "n"),
        ("/v1/chat/completions", {"model": "sim", "messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"model": "sim", "messages": [{"x": 1}]}, 400, "messages"),
    ],
)
def test_bad_requests_get_an_openai_error(
    server: ReplicaServer, path: str, body: Any, status: int, param: str | None
) -> None:
    response = _post(server, path, body)
    assert response.status == status
    error = json.loads(response.read())["error"]
    assert error["code"] == status and error["param"] == param and error["message"]


def test_models_and_health(server: ReplicaServer) -> None:
    with urllib.request.urlopen(server.base_url + "/v1/models", timeout=10) as response:
        models = json.loads(response.read())
    assert [m["id"] for m in models["data"]] == ["sim"]
    with urllib.request.urlopen(server.base_url + "/health", timeout=10) as response:
        assert response.status == 200


def test_token_id_prompts_are_counted_as_tokens(server: ReplicaServer) -> None:
    response = _post(server, "/v1/completions", {"model": "sim", "prompt": [1, 2, 3, 4, 5]})
    body = json.loads(response.read())
    assert body["usage"]["prompt_tokens"] == 5 and body["usage"]["completion_tokens"] == 16


def test_a_client_that_goes_away_frees_its_slot() -> None:
    # One slot and a slow decode: the first stream is dropped after its first chunk, and the
    # second request, queued behind it, must then be admitted and finish quickly.
    slow = ReplicaConfig.fifo_slots(1, 1e6, 50.0, model="sim")
    with ReplicaServer(slow) as running:
        host, port = running.base_url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        body = {"model": "sim", "prompt": "a b c", "max_tokens": 10_000, "stream": True}
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "x"})
        first = conn.getresponse()
        assert first.readline().startswith(b"data:")
        held = set(running.engine.sequences)
        conn.close()
        # 10,000 tokens at 50/s would hold the slot for 200 s, past this request's timeout.
        response = _post(
            running, "/v1/completions", {"model": "sim", "prompt": "x", "max_tokens": 2}
        )
        assert json.loads(response.read())["usage"]["completion_tokens"] == 2
        assert len(held) == 1 and not held & set(running.engine.sequences)


def test_runs_as_a_module_on_a_free_port_and_stops_on_terminate() -> None:
    with replica_server_process(FAST) as url:
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as response:
            assert json.loads(response.read())["data"][0]["id"] == "sim"
        port = int(url.rsplit(":", 1)[1])
        assert port > 0
    # The port is released once the process has stopped.
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=5)


def test_a_server_that_cannot_start_says_why() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            RuntimeError, match=r"did not start: cannot listen on 127\.0\.0\.1:\d+: .*in use"
        ):
            with replica_server_process(FAST, port=port):
                pass


def test_command_line_refuses_a_bad_rate_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--decode-tokens-per-s=0"])
    assert info.value.code == 2
    assert "decode_tokens_per_s" in capsys.readouterr().err
