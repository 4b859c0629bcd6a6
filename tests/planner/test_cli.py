"""``python -m planner``: solve prints the solution JSON; bad input exits 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from planner.cli import main
from planner.placement.verify import verify

DATA = Path(__file__).resolve().parent.parent / "data" / "placement"
ZONAL = DATA / "sizing-zonal.json"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_help_works_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "planner", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert "solve" in done.stdout


def test_solve_prints_the_solution_and_nothing_else(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["solve", str(ZONAL)], capsys)
    assert status == 0
    solution: dict[str, Any] = json.loads(out)
    assert solution["status"] == "optimal"
    assert sum(r["replicas"] for r in solution["replicas"]) == 27
    assert verify(json.loads(ZONAL.read_text()), solution) == []
    assert err == ""


def test_explain_writes_a_summary_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["solve", str(ZONAL), "--explain", "--time-limit", "20"], capsys)
    assert status == 0
    solution = json.loads(out)
    assert verify(json.loads(ZONAL.read_text()), solution) == []
    assert solution["cost_per_hour"] == pytest.approx(54.0)
    assert "plan: optimal, 27 replicas, $54.00/hour" in err
    assert "promises relaxed to n+1: 19 replicas, $38.00/hour" in err
    assert "promises relaxed to none: 18 replicas, $36.00/hour" in err
    assert "binding: zone loss r1-a, r1-b, r1-c for m/gpu80x1 in r1" in err


def test_solve_reads_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(ZONAL.read_text()))
    status, out, _ = run(["solve", "-", "--workers", "1"], capsys)
    assert status == 0
    solution = json.loads(out)
    assert solution["status"] == "optimal"
    assert verify(json.loads(ZONAL.read_text()), solution) == []


def test_invalid_problem_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = json.loads(ZONAL.read_text())
    problem["demands"][0]["prefix_cache_hit_rate"] = 1.5
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem))
    status, out, err = run(["solve", str(path)], capsys)
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "demands[0].prefix_cache_hit_rate" in err and "[0, 1]" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "words"),
    [(None, "cannot read"), ("{not json", "not valid JSON"), ("[1, 2]", "problem: must be")],
)
def test_unreadable_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, words: str
) -> None:
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    status, out, err = run(["solve", str(path)], capsys)
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1 and words in err and str(path) in err


def test_bad_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["solve", str(ZONAL), "--time-limit", "-3"])
    assert info.value.code == 2
    assert "positive number of seconds" in capsys.readouterr().err


def test_invalid_file_from_the_shell_has_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            {
                "regions": [{"name": "r", "zones": []}],
                "accelerators": [],
                "shapes": [],
                "demands": [{"id": "d"}],
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "planner", "solve", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().count("\n") == 0
    assert "demands[0].model: is required" in done.stderr
