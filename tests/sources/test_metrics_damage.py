"""/metrics text that parses but holds no number to analyse, or a bucket without its bound.

A random mutation search (values set to `+Inf`, `NaN`, `1e309`, `-1`, labels cut) found two
tracebacks: a `_bucket` sample without `le` (KeyError) and a gauge at `+Inf`
(OverflowError while rounding the window's maximum). A bad snapshot now gives a one-line
error with its line; a sample with no number is not used, and the source says how many.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from preemptscope.ingest.metrics import snapshot_notes
from preemptscope.ingest.scrape import read_metrics_path

from preemptscope.cli import main

SERIES = Path(__file__).parent.parent / "fixtures" / "metrics" / "v1_033_series"
WAITING = 'vllm:num_requests_waiting{engine="0"'


def test_a_bucket_without_le_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.prom"
    path.write_text(
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{engine="0",model_name="m"} 3.0\n'
        'vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0\n'
        'vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 3.0\n'
    )
    assert main(["report", "--metrics", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"preemptscope: error: {path}:2: histogram bucket"
        " vllm:e2e_request_latency_seconds_bucket has no le label"
    )


def _series_with(tmp_path: Path, value: str) -> Path:
    """The fixture series with the waiting gauge of its third snapshot set to `value`."""
    target = tmp_path / "series"
    shutil.copytree(SERIES, target)
    third = sorted(target.glob("*.prom"))[2]
    lines = third.read_text().splitlines()
    changed = [
        line.rsplit(" ", 1)[0] + " " + value if line.startswith(WAITING) else line for line in lines
    ]
    assert changed != lines
    third.write_text("\n".join(changed) + "\n")
    return target


@pytest.mark.parametrize("value", ["+Inf", "-Inf", "NaN", "1e300"])
def test_a_gauge_with_no_number_is_not_used(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series = _series_with(tmp_path, value)
    assert snapshot_notes(read_metrics_path(series, deployment="d")) == [
        "1 vLLM sample(s) NaN, infinite or past 64 bits: not used (no number)"
    ]
    assert main(["report", "--metrics", str(series), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (source,) = report["sources"]
    assert source["notes"] == [
        "1 vLLM sample(s) NaN, infinite or past 64 bits: not used (no number)"
    ]
    waiting = [w["waiting_max"] for w in report["deployments"][0]["windows"]]
    assert all(x is None or 0 <= x < 1e6 for x in waiting), waiting
