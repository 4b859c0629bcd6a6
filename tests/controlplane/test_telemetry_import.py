"""``manage.py import_requests``: a request log stored as telemetry samples and derived.

The worked example is the Azure LLM inference trace 2023, conversation service (CC-BY 4.0;
Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting", ISCA
2024; Azure/AzurePublicDataset), in ``/work/shared/data/azure-llm-trace-2023/conv.csv``.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from controlplane.policies.models import WorkloadProfile
from controlplane.telemetry.models import (
    ObservedWorkload,
    ProfileDerivation,
    TelemetrySample,
    TelemetrySeries,
)
from controlplane.telemetry.requestlog import (
    Defaults,
    RequestLogError,
    Window,
    length_bounds,
    parse,
)
from controlplane.telemetry.selectors import request_rate_history
from tests.controlplane.telemetry_fakes import make_fleet

pytestmark = pytest.mark.django_db

CONV = Path("/work/shared/data/azure-llm-trace-2023/conv.csv")
if not CONV.exists():  # the trace beside the repository's checkout
    CONV = Path(__file__).resolve().parents[3] / "shared/data/azure-llm-trace-2023/conv.csv"


@pytest.fixture(autouse=True)
def _settings(settings: Any) -> None:
    settings.HEADROOM_TELEMETRY_BUCKET_S = 60
    settings.HEADROOM_TELEMETRY_PEAK_S = 60
    settings.HEADROOM_TELEMETRY_MIN_REQUESTS = 50
    make_fleet(("northwind", "eu-west"))


def _import(path: Path | str, *args: str) -> str:
    out = io.StringIO()
    call_command("import_requests", str(path), *args, stdout=out)
    return out.getvalue()


def _raw_trace() -> tuple[np.ndarray, np.ndarray, float]:
    """Prompt and output lengths of conv.csv and its busiest minute's rate, read directly."""
    with CONV.open() as f:
        rows = list(csv.DictReader(f))
    prompts = np.array([int(r["ContextTokens"]) for r in rows], dtype=float)
    outputs = np.array([int(r["GeneratedTokens"]) for r in rows], dtype=float)
    minutes = Counter(r["TIMESTAMP"][:16] for r in rows)  # "YYYY-MM-DD HH:MM"
    return prompts, outputs, max(minutes.values()) / 60


@pytest.mark.skipif(not CONV.exists(), reason="the Azure trace is not beside the checkout")
def test_conv_trace_imports_to_a_profile_matching_numpy_on_the_raw_file() -> None:
    output = _import(
        CONV, "--format", "azure", "--tenant", "northwind", "--model", "chat-70b",
        "--region", "eu-west",
    )  # fmt: skip
    assert "19,366 requests" in output and "1 profiles new" in output
    profile = WorkloadProfile.objects.get(source=WorkloadProfile.Source.TELEMETRY)
    prompts, outputs, busiest = _raw_trace()
    # Means are exact (token sums over request counts); percentiles are read from a 1% grid
    # (whole tokens below 100), so they sit within 1% of numpy's on the raw lengths.
    assert profile.prompt_tokens_mean == pytest.approx(prompts.mean(), rel=1e-9)
    assert profile.output_tokens_mean == pytest.approx(outputs.mean(), rel=1e-9)
    for field, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        assert getattr(profile, f"prompt_tokens_{field}") == pytest.approx(
            np.percentile(prompts, q), rel=0.01
        ), field
        assert getattr(profile, f"output_tokens_{field}") == pytest.approx(
            np.percentile(outputs, q), rel=0.01
        ), field
    # The busiest minute: 502 requests, 8.37 req/s.
    assert busiest == pytest.approx(502 / 60)
    assert profile.peak_requests_per_s == pytest.approx(busiest)
    assert profile.censored == [] and profile.unmeasured == ["prefix_cache_hit_rate"]

    # Importing it again stores nothing twice and makes no new version.
    samples = TelemetrySample.objects.count()
    again = _import(
        CONV, "--format", "azure", "--tenant", "northwind", "--model", "chat-70b",
        "--region", "eu-west",
    )  # fmt: skip
    assert f"0 of {samples:,} samples new" in again
    assert TelemetrySample.objects.count() == samples
    assert WorkloadProfile.objects.filter(source=WorkloadProfile.Source.TELEMETRY).count() == 1

    # The forecast's history sees the imported hours: each hour's rate is its requests over
    # the seconds its buckets cover.
    history = request_rate_history(
        start=datetime(2023, 11, 16, tzinfo=UTC), end=datetime(2023, 11, 17, tzinfo=UTC)
    )
    assert history is not None
    stamps, rates = history[("northwind", "chat-70b", "eu-west")]
    with CONV.open() as f:
        minutes = {r["TIMESTAMP"][:16] for r in csv.DictReader(f)}
    seen_s = [60 * sum(1 for m in minutes if m[11:13] == hour) for hour in ("18", "19")]
    assert len(stamps) == 2
    assert math.fsum(r * s for r, s in zip(rates, seen_s, strict=True)) == pytest.approx(19366)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_jsonl_and_csv_logs_carry_their_own_tenants_models_regions_and_cache(
    tmp_path: Path,
) -> None:
    records = [
        {
            "timestamp": 1_700_000_000 + i,
            "prompt_tokens": 1000 + i,
            "output_tokens": 100,
            "cached_tokens": 400,
            "tenant": "northwind",
            "model": "chat-70b",
            "region": "eu-west",
        }
        for i in range(120)
    ]
    path = _write(tmp_path, "log.jsonl", "\n".join(json.dumps(r) for r in records) + "\n")
    _import(path, "--format", "jsonl")
    observed = ObservedWorkload.objects.get()
    assert observed.requests == 120
    assert observed.prefix_cache_hit_rate == pytest.approx(
        400 * 120 / sum(r["prompt_tokens"] for r in records)
    )
    assert observed.prompt_tokens_mean == pytest.approx(1059.5)

    lines = ["timestamp,prompt_tokens,output_tokens"] + [
        f"2023-11-16T18:{i // 60:02d}:{i % 60:02d}Z,200,20" for i in range(100)
    ]
    path = _write(tmp_path, "log.csv", "\n".join(lines) + "\n")
    out = _import(path, "--format", "csv", "--tenant", "northwind", "--model", "chat-70b",
                  "--region", "eu-west")  # fmt: skip
    assert "100 requests" in out


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"
            "2023-11-16 18:15:50.99,many,109\n",
            "line 3, column ContextTokens: 'many' is not a whole number of tokens",
        ),
        (
            "azure",
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n",
            "line 1, column GeneratedTokens: missing from the header",
        ),
        (
            "csv",
            "timestamp,prompt_tokens,output_tokens\nyesterday,10,10\n",
            "line 2, column timestamp: 'yesterday' is not an ISO 8601 time",
        ),
        (
            "jsonl",
            '{"timestamp": 1, "prompt_tokens": 5, "output_tokens": 1, "model": "chat-70b", '
            '"region": "eu-west"}\n',
            "line 1, column tenant: missing, and no --tenant given",
        ),
        ("jsonl", "{not json}\n", "line 1: not JSON"),
        # Past Python's integer digit limit json raises a plain ValueError, not JSONDecodeError.
        ("jsonl", '{"timestamp": ' + "1" * 5000 + "}\n", "line 1: not JSON"),
    ],
)
def test_a_bad_log_exits_2_naming_the_line_and_column_and_stores_nothing(
    tmp_path: Path, fmt: str, text: str, message: str
) -> None:
    path = _write(tmp_path, "bad", text)
    args = ["--format", fmt]
    if fmt != "jsonl":
        args += ["--tenant", "northwind", "--model", "chat-70b", "--region", "eu-west"]
    with pytest.raises(CommandError) as raised:
        _import(path, *args)
    assert raised.value.returncode == 2
    assert message in str(raised.value)
    assert not TelemetrySeries.objects.exists()


def test_a_missing_file_exits_2(tmp_path: Path) -> None:
    with pytest.raises(CommandError) as raised:
        _import(tmp_path / "absent.csv", "--format", "csv")
    assert raised.value.returncode == 2 and "absent.csv" in str(raised.value)


def test_the_length_grid_is_whole_tokens_then_one_percent() -> None:
    bounds = length_bounds(20_000, 0.01)
    assert bounds[:5] == [1, 2, 3, 4, 5] and bounds[-1] >= 20_000
    # Each bucket is at most 1% of its lower bound wide, rounded up to a whole token.
    assert all(a < b <= a + max(1, math.ceil(0.01 * a)) + 1 for a, b in itertools.pairwise(bounds))


def test_the_azure_timestamp_with_seven_fractional_digits_is_read_as_utc() -> None:
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
    (request,) = parse(io.StringIO(text), fmt="azure", defaults=Defaults("t", "m", "r"))
    assert request.at == datetime(2023, 11, 16, 18, 15, 46, 680590, tzinfo=UTC)
    assert (request.prompt_tokens, request.output_tokens, request.cached_tokens) == (374, 44, None)


def _jsonl(**record: Any) -> str:
    base = {
        "timestamp": 1_700_000_000,
        "prompt_tokens": 100,
        "output_tokens": 10,
        "tenant": "northwind",
        "model": "chat-70b",
        "region": "eu-west",
    }
    good = json.dumps(base)
    return good + "\n" + json.dumps({**base, **record}) + "\n"


def _csv_row(timestamp: str, prompt: str = "100", output: str = "10") -> str:
    return f"timestamp,prompt_tokens,output_tokens\n2023-11-16T18:00:00Z,5,5\n{timestamp},{prompt},{output}\n"


# The review's out-of-range values, and their neighbours: each exits 2 naming line 2.
OUT_OF_RANGE = [
    (
        "jsonl",
        _jsonl(prompt_tokens=1e30),
        "line 2, column prompt_tokens: 1e+30 tokens is out of range: from 1 to 10,000,000",
    ),
    ("jsonl", _jsonl(prompt_tokens=10**4000), "prompt_tokens: a 4001-digit number of tokens"),
    ("jsonl", _jsonl(prompt_tokens=10_000_001), "line 2, column prompt_tokens: 10,000,001 tokens"),
    ("jsonl", _jsonl(output_tokens=1e30), "line 2, column output_tokens: 1e+30 tokens"),
    ("jsonl", _jsonl(output_tokens=-3), "line 2, column output_tokens: -3 tokens is out of range"),
    ("jsonl", _jsonl(timestamp=1e300), "line 2, column timestamp: 1e+300 Unix seconds is out of"),
    ("jsonl", _jsonl(timestamp=-1e300), "line 2, column timestamp: -1e+300 Unix seconds"),
    ("jsonl", _jsonl(timestamp=10**400), "line 2, column timestamp:"),
    ("jsonl", _jsonl(timestamp=253_402_300_800), "line 2, column timestamp: 253402300800 Unix"),
    ("jsonl", _jsonl(timestamp="10000-01-01T00:00:00"), "line 2, column timestamp: '10000-01-01"),
    ("jsonl", _jsonl(timestamp="0001-01-01T00:00:00Z"), "0001-01-01T00:00:00Z is outside the"),
    ("jsonl", _jsonl(timestamp="0001-01-01T00:00:00+01:00"), "line 2, column timestamp:"),
    ("jsonl", _jsonl(timestamp="9999-12-31T23:59:59-01:00"), "line 2, column timestamp:"),
    ("jsonl", _jsonl(timestamp=0), "line 2, column timestamp: 1970-01-01T00:00:00Z is outside"),
    ("jsonl", _jsonl(timestamp="2100-01-01T00:00:00"), "2100-01-01T00:00:00Z is outside the"),
    ("csv", _csv_row("1e300"), "line 3, column timestamp: '1e300' Unix seconds is out of range"),
    ("csv", _csv_row("1999-12-31T23:59:59Z"), "line 3, column timestamp: 1999-12-31T23:59:59Z"),
    ("csv", _csv_row("2023-11-16T18:00:01Z", prompt="1e30"), "line 3, column prompt_tokens"),
]


@pytest.mark.parametrize(("fmt", "text", "message"), OUT_OF_RANGE)
def test_out_of_range_values_exit_2_naming_line_and_column(
    tmp_path: Path, fmt: str, text: str, message: str
) -> None:
    path = _write(tmp_path, "bad", text)
    args = ["--format", fmt]
    if fmt == "csv":
        args += ["--tenant", "northwind", "--model", "chat-70b", "--region", "eu-west"]
    with pytest.raises(CommandError) as raised:
        _import(path, *args)
    assert raised.value.returncode == 2
    assert message in str(raised.value), str(raised.value)
    assert not TelemetrySeries.objects.exists() and not TelemetrySample.objects.exists()


def test_the_bounds_are_inclusive(tmp_path: Path) -> None:
    path = _write(tmp_path, "edge.jsonl", _jsonl(prompt_tokens=10_000_000, output_tokens=1))
    assert "2 requests" in _import(path, "--format", "jsonl", "--no-derive")


def test_the_import_window_is_configurable(tmp_path: Path, settings: Any) -> None:
    settings.HEADROOM_IMPORT_EARLIEST = "2024-01-01"
    path = _write(tmp_path, "log.jsonl", _jsonl())
    with pytest.raises(CommandError) as raised:
        _import(path, "--format", "jsonl")
    assert raised.value.returncode == 2
    assert "line 1, column timestamp: 2023-11-14T22:13:20Z is outside the import window " in str(
        raised.value
    )
    assert "2024-01-01 00:00 to" in str(raised.value)
    settings.HEADROOM_IMPORT_EARLIEST = "last tuesday"
    with pytest.raises(CommandError) as raised:
        _import(path, "--format", "jsonl")
    assert raised.value.returncode == 2 and "HEADROOM_IMPORT_EARLIEST" in str(raised.value)


def test_the_window_ends_a_configurable_time_after_now() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    window = Window(earliest=datetime(2000, 1, 1, tzinfo=UTC), latest=now + timedelta(days=1))
    text = "timestamp,prompt_tokens,output_tokens\n2026-01-01T23:59:59Z,5,5\n2026-01-02T00:00:01Z,5,5\n"
    records = parse(io.StringIO(text), fmt="csv", defaults=Defaults("t", "m", "r"), window=window)
    assert next(records).at == datetime(2026, 1, 1, 23, 59, 59, tzinfo=UTC)
    with pytest.raises(RequestLogError, match="line 3, column timestamp: 2026-01-02T00:00:01Z"):
        next(records)


@pytest.mark.parametrize(
    ("fmt", "text", "args", "message"),
    [
        (
            "jsonl",
            _jsonl(tenant="ghost"),
            [],
            "line 2, column tenant: no tenant 'ghost' in the fleet (known: northwind)",
        ),
        ("jsonl", _jsonl(model="gpt-9"), [], "line 2, column model: no model 'gpt-9'"),
        ("jsonl", _jsonl(region="mars-1"), [], "line 2, column region: no region 'mars-1'"),
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n",
            ["--tenant", "nobody", "--model", "chat-70b", "--region", "eu-west"],
            "line 2, --tenant: no tenant 'nobody' in the fleet",
        ),
    ],
)
def test_an_unknown_tenant_model_or_region_is_refused_unless_create_missing(
    tmp_path: Path, fmt: str, text: str, args: list[str], message: str
) -> None:
    path = _write(tmp_path, "log", text)
    with pytest.raises(CommandError) as raised:
        _import(path, "--format", fmt, *args)
    assert raised.value.returncode == 2
    assert message in str(raised.value) and "--create-missing" in str(raised.value)
    assert not TelemetrySeries.objects.exists()
    # With --create-missing the samples are stored under the new name.
    assert "samples new" in _import(path, "--format", fmt, *args, "--create-missing")
    stored = {(s.tenant, s.model, s.region) for s in TelemetrySeries.objects.all()}
    assert any(set(labels) & {"ghost", "gpt-9", "mars-1", "nobody"} for labels in stored)


def test_create_missing_stores_telemetry_only_until_the_records_exist(tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {
                "timestamp": 1_700_000_000 + i,
                "prompt_tokens": 300,
                "output_tokens": 30,
                "tenant": "ghost",
                "model": "chat-70b",
                "region": "eu-west",
            }
        )
        for i in range(60)
    ]
    path = _write(tmp_path, "ghost.jsonl", "\n".join(lines) + "\n")
    out = _import(path, "--format", "jsonl", "--create-missing")
    assert "60 requests" in out and "unknown tenant: ghost" in out
    assert TelemetrySeries.objects.filter(tenant="ghost").exists()
    # No tenant record: no profile; the derivation names the label it could not place.
    run = ProfileDerivation.objects.get()
    assert run.unknown_labels == ["tenant: ghost"]
    assert not WorkloadProfile.objects.filter(source=WorkloadProfile.Source.TELEMETRY).exists()
