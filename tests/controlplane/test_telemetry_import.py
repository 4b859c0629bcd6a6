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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from controlplane.policies.models import WorkloadProfile
from controlplane.telemetry.models import ObservedWorkload, TelemetrySample, TelemetrySeries
from controlplane.telemetry.requestlog import Defaults, length_bounds, parse
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
