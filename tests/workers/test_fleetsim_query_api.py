"""The fleet simulator's Prometheus-compatible range-query API over its simulated history: the
pull service stores from it what the spec says (rates, prompt means, the Friday review's
growth, an hour-of-week pattern); the history is the same whenever it starts; queries other
than the pull's are refused as Prometheus refuses them; the command line's history options."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controlplane.scenarios.services import scenario_load
from controlplane.telemetry import selectors
from controlplane.telemetry.conf import LabelConfig
from controlplane.telemetry.metrics import (
    E2E_HIST,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_HIST,
    PROMPT_TOKENS,
    REQUESTS,
    RUNNING,
    TTFT_HIST,
    pull_queries,
)
from controlplane.telemetry.models import TelemetrySeries
from controlplane.telemetry.prometheus import PrometheusClient, PrometheusQueryError
from controlplane.telemetry.pull import telemetry_pull
from workers.simulators.fleet import FleetSimulator, fleet_from_scenario, scaled_fleet
from workers.simulators.fleet.__main__ import main
from workers.simulators.fleet.history import FleetHistory, TrafficPattern
from workers.simulators.fleet.query_api import NOT_SIMULATED, QueryApi
from workers.simulators.fleet.server import make_server, serving

SCENARIO = Path(__file__).resolve().parents[2] / "docs" / "scenarios" / "support-assistant.yaml"
BUCKET_S = 300
# Tuesday 2026-03-03 18:00 UTC: a weekday evening, on the hour.
NOW = datetime(2026, 3, 3, 18, 0, tzinfo=UTC).timestamp()
DRIFT = NOW - 3 * 3600
FLAT = TrafficPattern(night_factor=1.0, weekend_factor=1.0)
SCALE = 20  # 20 times the scenario's fleet: a few hours hold tens of thousands of requests


def _history(
    pattern: TrafficPattern = FLAT, days: float = 1.0, bucket_s: int = BUCKET_S, **kwargs: Any
) -> FleetHistory:
    spec = scaled_fleet(fleet_from_scenario(SCENARIO), SCALE)
    return FleetHistory(spec, now=NOW, days=days, bucket_s=bucket_s, pattern=pattern, **kwargs)


@pytest.fixture
def flat_fleet() -> Iterator[tuple[str, FleetHistory]]:
    history = _history(drift=[(DRIFT, 1200.0)])
    server = make_server(
        FleetSimulator(history.spec, start_time=NOW), port=0, clock=lambda: NOW, history=history
    )
    with serving(server) as url:
        yield url, history


def _get(url: str, **params: str) -> tuple[int, dict[str, Any]]:
    query = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query_range?{query}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _pull(url: str, start: float, end: float) -> None:
    pull = telemetry_pull(
        window_start=datetime.fromtimestamp(start, UTC),
        window_end=datetime.fromtimestamp(end, UTC),
        client=PrometheusClient(url, retries=0),
    )
    assert pull.status == "succeeded", pull.error
    assert pull.samples_stored > 0 and pull.unknown_labels == []


def _totals(start: float, end: float) -> dict[tuple[str, str, str, str], float]:
    """Sum of stored samples per (tenant, region, metric, le) in [start, end)."""
    rows = selectors.window_totals(
        bucket_s=BUCKET_S,
        start=datetime.fromtimestamp(start, UTC),
        end=datetime.fromtimestamp(end, UTC),
    )
    return {(r.tenant, r.region, r.metric, r.le): r.total for r in rows}


@pytest.mark.django_db
def test_the_pull_stores_the_specs_rates_and_prompt_means_and_the_prompt_growth(
    flat_fleet: tuple[str, FleetHistory], settings: Any
) -> None:
    settings.HEADROOM_TELEMETRY_BUCKET_S = BUCKET_S
    url, history = flat_fleet
    scenario_load(path=SCENARIO)
    before, after = (DRIFT - 3 * 3600, DRIFT), (DRIFT, NOW)
    _pull(url, before[0], NOW)

    series = {(s.tenant, s.region): s for s in history.spec.streams}
    assert TelemetrySeries.objects.filter(metric=REQUESTS).count() == len(series) == 7
    for lo, hi, extra in (*before, 0.0), (*after, 1200.0):
        totals = _totals(lo, hi)
        for (tenant, region), stream in series.items():
            requests = totals[(tenant, region, REQUESTS, "")]
            # Poisson: thousands of requests per stream, within 4 standard deviations.
            expected = stream.requests_per_s * (hi - lo)
            assert abs(requests - expected) < 4 * math.sqrt(expected) + 1, (tenant, region)
            count = totals[(tenant, region, PROMPT_HIST + "_count", "")]
            assert count == requests == totals[(tenant, region, PROMPT_HIST + "_bucket", "+Inf")]
            prompt_mean = totals[(tenant, region, PROMPT_HIST + "_sum", "")] / count
            want = math.fsum(c.share * c.prompt_mean for c in stream.classes) + extra
            # Heavy-tailed lengths: a few percent on the smaller streams.
            assert prompt_mean == pytest.approx(want, rel=0.05), (tenant, region, extra)
            hits = totals[(tenant, region, PREFIX_HITS, "")]
            queries = totals[(tenant, region, PREFIX_QUERIES, "")]
            assert hits / queries == pytest.approx(0.35, abs=0.01)
            assert totals[(tenant, region, PROMPT_TOKENS, "")] == pytest.approx(prompt_mean * count)
            assert totals[(tenant, region, TTFT_HIST + "_count", "")] == count
            assert totals[(tenant, region, E2E_HIST + "_sum", "")] > 0
            assert totals[(tenant, region, RUNNING, "")] > 0


@pytest.mark.django_db
def test_the_pulled_history_follows_the_hour_of_week_pattern_and_growth(settings: Any) -> None:
    # Hourly buckets: eight days of them pull in seconds.
    settings.HEADROOM_TELEMETRY_BUCKET_S = 3600
    pattern = TrafficPattern(weekly_growth=0.05)
    history = _history(pattern, days=8, bucket_s=3600)
    server = make_server(
        FleetSimulator(history.spec, start_time=NOW), port=0, clock=lambda: NOW, history=history
    )
    scenario_load(path=SCENARIO)
    start = NOW - 8 * 86400
    with serving(server) as url:
        _pull(url, start, NOW)

    rates = selectors.request_rate_history(
        start=datetime.fromtimestamp(start, UTC), end=datetime.fromtimestamp(NOW, UTC)
    )
    hours, observed = (np.asarray(x) for x in rates[("keystone-mutual", "chat-70b", "us-east")])
    assert hours.size == 8 * 24
    expected = 2.0 * SCALE * pattern.factor(hours + 1800, NOW)
    # Each hour holds 40 req/s × its factor × 3,600 s of Poisson arrivals: within 5%.
    assert np.max(np.abs(observed / expected - 1)) < 0.05
    by_hour = {datetime.fromtimestamp(h, UTC): r for h, r in zip(hours, observed, strict=True)}
    tuesday_peak = by_hour[datetime(2026, 3, 3, 15, tzinfo=UTC)]
    tuesday_night = by_hour[datetime(2026, 3, 3, 3, tzinfo=UTC)]
    sunday_peak = by_hour[datetime(2026, 3, 1, 15, tzinfo=UTC)]
    last_week_peak = by_hour[datetime(2026, 2, 24, 15, tzinfo=UTC)]
    assert tuesday_night < 0.3 * tuesday_peak
    assert sunday_peak == pytest.approx(0.6 * tuesday_peak, rel=0.05)
    assert last_week_peak == pytest.approx(tuesday_peak / 1.05, rel=0.04)
    # The weekday peak is the spec's rate (the scenario's peak), grown to now.
    assert tuesday_peak == pytest.approx(2.0 * SCALE * 1.05 ** (-2.5 / 168), rel=0.03)


def test_the_same_seed_gives_the_same_buckets_whenever_the_history_starts() -> None:
    long, short = _history(days=3), _history(days=1)
    stream = ("keystone-mutual", "chat-70b", "us-east")
    first = int((NOW - 86400) // BUCKET_S)
    for quantity in ("requests_succeeded", "prompt_hist:counts", "e2e_hist:sum", "kv_usage"):
        assert np.array_equal(
            long.values(stream, quantity, first, 288), short.values(stream, quantity, first, 288)
        )
    other = _history(days=1, seed=1)
    assert not np.array_equal(
        other.values(stream, "requests_succeeded", first, 288),
        short.values(stream, "requests_succeeded", first, 288),
    )


def test_prompt_growth_changes_no_bucket_before_it() -> None:
    history = _history(days=1)
    stream = ("nordlicht-versicherung", "chat-70b", "eu-west")
    first = int((NOW - 86400) // BUCKET_S)
    quantities = ("prompt_hist:counts", "prompt_hist:sum", "output_hist:counts", "ttft_hist:counts")
    old = {q: history.values(stream, q, first, 288) for q in quantities}
    history.set_extra_prompt_tokens(at=NOW - 6 * 3600, tokens=1200.0)
    cut = 18 * 3600 // BUCKET_S  # the buckets of the 18 hours before the growth
    for quantity in quantities:
        new = history.values(stream, quantity, first, 288)
        assert np.array_equal(new[:cut], old[quantity][:cut]), quantity
    assert history.values(stream, "prompt_hist:sum", first, 288)[cut:].sum() > (
        old["prompt_hist:sum"][cut:].sum() + 1000 * 0.5 * 288
    )


@pytest.mark.parametrize("class_label", [None, "request_class"])
def test_every_query_the_pull_sends_is_answered(class_label: str | None) -> None:
    history = _history(days=0.5)
    api = QueryApi(history, clock=lambda: NOW)
    labels = LabelConfig("tenant", "model_name", "region", class_label)
    start = NOW - 3600 + BUCKET_S
    for query in pull_queries(labels, BUCKET_S):
        status, body = api.answer(
            {"query": query.promql, "start": str(start), "end": str(NOW), "step": "300"}
        )
        assert status == 200, (query.promql, body)
        result = body["data"]["result"]
        assert body["data"]["resultType"] == "matrix"
        if set(query.names) <= NOT_SIMULATED:  # vLLM has them; the simulator holds none
            assert result == []
            continue
        if query.by_le:  # one series per bound and +Inf, per stream
            assert len(result) % 7 == 0 and len(result) > 7
        else:
            assert len(result) == 7
        for series in result:
            assert len(series["values"]) == 12
            assert {"tenant", "model_name", "region"} <= set(series["metric"])
            assert ("le" in series["metric"]) == query.by_le


def test_a_window_is_summed_over_its_buckets_and_no_point_leaves_the_history() -> None:
    history = _history(days=0.25)  # from 12:00 UTC
    api = QueryApi(history, clock=lambda: NOW - 90)  # 17:58:30: the 18:00 bucket is not over
    stream = ("keystone-mutual", "chat-70b", "us-east")
    query = "sum by (tenant, model_name, region) (increase(vllm:request_success_total[900s]))"
    status, body = api.answer(
        {"query": query, "start": str(NOW - 86400), "end": str(NOW + 3600), "step": "900"}
    )
    assert status == 200
    values = next(s["values"] for s in body["data"]["result"] if s["metric"]["tenant"] == stream[0])
    stamps = [t for t, _ in values]
    # From the first whole 15-minute window of the history to the last ended one.
    assert stamps[0] == NOW - 6 * 3600 + 900 and stamps[-1] == NOW - 900
    per_bucket = history.values(stream, "requests_succeeded", int((NOW - 6 * 3600) // 300), 3)
    assert float(values[0][1]) == per_bucket.sum()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"query": "up"}, "unsupported query"),
        (
            {"query": "rate(vllm:request_success_total[300s])"},
            "unsupported query",
        ),
        (
            {
                "query": "max by (tenant, model_name, region) (increase(vllm:request_success_total[300s]))"
            },
            "unsupported aggregation",
        ),
        (
            {
                "query": "sum by (tenant, model_name, region) (delta(vllm:request_success_total[300s]))"
            },
            "unsupported function",
        ),
        (
            {"query": "sum by (tenant, model_name, region) (increase(vllm:nothing_total[300s]))"},
            "unknown series",
        ),
        (
            {
                "query": "sum by (tenant, model_name, region) (increase(vllm:num_requests_running[300s]))"
            },
            "needs a counter",
        ),
        (
            {
                "query": "sum by (tenant, model_name, region) (avg_over_time(vllm:request_success_total[300s]))"
            },
            "needs a gauge",
        ),
        (
            {
                "query": "avg by (tenant, model_name, region) (increase(vllm:request_success_total[300s]))"
            },
            "summed",
        ),
        (
            {"query": "sum by (tenant, region) (increase(vllm:request_success_total[300s]))"},
            "missing model_name",
        ),
        (
            {
                "query": "sum by (tenant, model_name, region) (increase(vllm:request_prompt_tokens_bucket[300s]))"
            },
            "group by 'le'",
        ),
        (
            {
                "query": "sum by (tenant, model_name, region, le) (increase(vllm:request_prompt_tokens_sum[300s]))"
            },
            "group by 'le'",
        ),
        (
            {
                "query": "sum by (tenant, tenant, model_name, region) (increase(vllm:request_success_total[300s]))"
            },
            "named twice",
        ),
        (
            {
                "query": "sum by (tenant, model_name, region) (increase(vllm:request_success_total[7s]))"
            },
            "off the simulator's 300 s bucket grid",
        ),
        ({"step": "0"}, "zero or negative"),
        ({"step": "30"}, "off the simulator's 300 s bucket grid"),
        ({"start": str(NOW - 3600 + 150)}, "off the simulator's 300 s bucket grid"),
        ({"start": "yesterday"}, 'invalid parameter "start"'),
        ({"end": "1"}, "end timestamp must not be before start time"),
        ({"end": str(NOW + 11_000 * 300)}, "exceeded maximum resolution of 11,000 points"),
        ({"query": ""}, "missing parameter 'query'"),
    ],
)
def test_other_queries_are_refused_as_prometheus_refuses_them(
    flat_fleet: tuple[str, FleetHistory], params: dict[str, str], message: str
) -> None:
    url, _ = flat_fleet
    good = {
        "query": "sum by (tenant, model_name, region) (increase(vllm:request_success_total[300s]))",
        "start": str(NOW - 3600),
        "end": str(NOW),
        "step": "300",
    }
    status, body = _get(url, **{**good, **params})
    assert status == 400
    assert body["status"] == "error" and body["errorType"] == "bad_data"
    assert message in body["error"]


def test_the_client_reports_a_refused_query_as_a_query_error(
    flat_fleet: tuple[str, FleetHistory],
) -> None:
    url, _ = flat_fleet
    with pytest.raises(PrometheusQueryError, match="unsupported query"):
        PrometheusClient(url, retries=0).query_range("up", start=NOW - 600, end=NOW, step_s=300)


def test_post_drift_reaches_the_history_from_then_on() -> None:
    clock = [NOW]
    history = _history(days=0.5)
    server = make_server(
        FleetSimulator(history.spec, start_time=NOW),
        port=0,
        clock=lambda: clock[0],
        history=history,
    )
    with serving(server) as url:
        request = urllib.request.Request(
            url + "/drift", data=b'{"extra_prompt_tokens": 1200}', method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
        clock[0] = NOW + 2 * 3600
        query = (
            "sum by (tenant, model_name, region) (increase(vllm:request_prompt_tokens_sum[3600s]))"
        )
        count_query = query.replace("_sum", "_count")
        means = []
        for at in (NOW, NOW + 2 * 3600):
            sums = _get(url, query=query, start=str(at), end=str(at), step="300")[1]
            counts = _get(url, query=count_query, start=str(at), end=str(at), step="300")[1]
            means.append(
                sum(float(s["values"][0][1]) for s in sums["data"]["result"])
                / sum(float(s["values"][0][1]) for s in counts["data"]["result"])
            )
    assert 1100 < means[1] - means[0] < 1300


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--history-days", "-1"], "--history-days must be zero or more"),
        (["--bucket-s", "7"], "--bucket-s must be a positive number of seconds that divides a day"),
        (["--weekly-growth", "-1.5"], "--weekly-growth must be a number above -1"),
        (["--drift-at", "next tuesday"], "expected an ISO 8601 date-time"),
        (["--drift-at", "nan"], "expected a finite moment"),
        (["--drift-hours-ago", "-2"], "--drift-hours-ago must be zero or more"),
        (["--drift-at", "2026-03-03T12:00", "--drift-hours-ago", "2"], "not allowed with"),
    ],
)
def test_command_line_refuses_bad_history_options(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
