"""Client result files with values no calendar holds, or fields of another type.

A random mutation search of the fixture files found tracebacks: a vllm bench `duration` of
1e30 s (OverflowError in the time arithmetic) and a GuideLLM `requests.successful` that is
a number (TypeError). Now a time past any calendar is unknown (null), and a field of another
type is a one-line error naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from preemptscope.ingest.bench import read_bench

from preemptscope.cli import main

FIXTURES = Path(__file__).parent.parent / "fixtures" / "bench"


def _write(tmp_path: Path, name: str, change: dict[str, Any]) -> Path:
    document = json.loads((FIXTURES / name).read_text())
    document.update(change)
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("duration", [1e30, -1e30, 1e18])
def test_a_duration_past_any_calendar_is_unknown(tmp_path: Path, duration: float) -> None:
    path = _write(tmp_path, "vllm_bench_0_33_detailed.json", {"duration": duration})
    result = read_bench(path, deployment="d")
    (run,) = result.runs
    assert run.start is None and run.end is None
    # The requests are still read, their latencies kept; no time places them.
    assert result.latencies.height == 12
    assert result.latencies["e2e"].drop_nulls().len() == 11
    assert result.latencies["start"].null_count() == 12


def test_a_count_past_64_bits_is_no_count(tmp_path: Path) -> None:
    path = _write(tmp_path, "vllm_bench_0_33_detailed.json", {"completed": 1e300})
    (run,) = read_bench(path, deployment="d").runs
    assert run.requests is None


def test_a_field_of_another_type_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads((FIXTURES / "guidellm_v02_benchmarks.json").read_text())
    document["benchmarks"][0]["requests"]["successful"] = 1.5
    path = tmp_path / "g.json"
    path.write_text(json.dumps(document))
    assert main(["report", "--bench", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"preemptscope: error: {path}: GuideLLM JSON with a field of an")
    assert "\n" not in err


def test_a_row_outside_the_calendar_range_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("start,e2e\n2026-11-29T10:00:00Z,1.0\n9999-12-31T23:59:59Z,1.2\n")
    assert main(["report", "--bench", str(path), "--json"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"preemptscope: error: {path}:3: `start` '9999-12-31T23:59:59Z' is not a time from"
        " 1970 to 2100"
    )


def test_a_run_time_outside_the_calendar_range_is_unknown(tmp_path: Path) -> None:
    document = json.loads((FIXTURES / "guidellm_v02_benchmarks.json").read_text())
    document["benchmarks"][0]["start_time"] = 1e12  # the year 33658
    path = tmp_path / "g.json"
    path.write_text(json.dumps(document))
    assert read_bench(path, deployment="d").runs[0].start is None
