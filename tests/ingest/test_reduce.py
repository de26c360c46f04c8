"""What `report` keeps of a log (ingest/reduce.py) tells the analysis what the full parse does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from preemptscope.analysis.analyze import DeploymentInputs, analyze
from preemptscope.analysis.params import AnalysisParams
from preemptscope.ingest.lifecycle import log_arrivals, log_latencies
from preemptscope.ingest.logs import ParseOptions, parse_path
from preemptscope.ingest.reduce import UNRECOGNIZED_KEPT, reduce_paths

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OPTIONS = ParseOptions(year=2025)
LOGS = sorted(
    [
        *(FIXTURES / "logs").glob("*.log"),
        *(FIXTURES / "corpus").glob("*.log"),
        *(FIXTURES / "round2").glob("*.log"),
    ]
)


def _report(frames: list) -> dict[str, object]:  # type: ignore[type-arg]
    report = analyze([DeploymentInputs(name="d", logs=frames)], AnalysisParams())
    data = report.to_dict()
    data.pop("generated_at", None)
    return data


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_reduced_log_gives_the_full_parse_report(path: Path) -> None:
    full = parse_path(path, deployment="d", options=OPTIONS)
    (reduced,) = reduce_paths([str(path)], deployment="d", options=OPTIONS)
    assert reduced.reduced and not full.reduced
    # Every row is kept or counted: the record counts are the same.
    assert reduced.record_counts() == full.record_counts()
    assert reduced.accounting == full.accounting
    for kind in ("scheduler_stats", "preemption_warning", "config", "kv_capacity"):
        assert reduced[kind].equals(full[kind]), kind
    lat_full, lat_reduced = log_latencies([full]), log_latencies([reduced])
    columns = ["source", "deployment", "start", "e2e", "success", "origin"]
    assert lat_reduced.select(columns).equals(lat_full.select(columns))
    assert log_arrivals([reduced]).equals(log_arrivals([full]))
    assert _report([reduced]) == _report([full])


def _request_lines(rid: str, second: int, event: str) -> str:
    text = {
        "received": f"Received request {rid}: prompt: 'hi', params: SamplingParams(n=1).",
        "finished": f"Finished request {rid}.",
    }[event]
    file = "logger.py:37" if event == "received" else "async_llm_engine.py:140"
    return f"INFO 05-01 10:00:{second:02d} {file}] {text}\n"


def test_a_request_is_joined_across_a_rotation(tmp_path: Path) -> None:
    # vllm.log.1 is the older file; the request starts there and finishes in vllm.log.
    older, newer = tmp_path / "vllm.log.1", tmp_path / "vllm.log"
    older.write_text(
        _request_lines("cmpl-a", 1, "received") + _request_lines("cmpl-b", 2, "received")
    )
    newer.write_text(
        _request_lines("cmpl-a", 7, "finished") + _request_lines("cmpl-b", 9, "finished")
    )
    os.utime(older, (1_000, 1_000))
    os.utime(newer, (2_000, 2_000))
    frames = reduce_paths([str(newer), str(older)], deployment="d", options=OPTIONS)
    assert [f.source for f in frames] == [str(newer), str(older)]  # the order given
    latencies = log_latencies(frames)
    assert latencies["e2e"].to_list() == [6.0, 7.0]
    # The rows belong to the file the request started in.
    assert latencies["source"].unique().to_list() == [str(older)]
    assert log_arrivals(frames).len() == 2


def test_unrecognised_rows_are_bounded_but_counted(tmp_path: Path) -> None:
    path = tmp_path / "noise.log"
    stats = (
        "INFO 05-01 10:00:00 metrics.py:349] Avg prompt throughput: 1.0 tokens/s, Avg generation "
        "throughput: 1.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV "
        "cache usage: 1.0%, CPU KV cache usage: 0.0%.\n"
    )
    n = UNRECOGNIZED_KEPT + 500
    path.write_text(stats + "".join(f"noise {i}\n" for i in range(n)))
    (reduced,) = reduce_paths([str(path)], deployment="d", options=OPTIONS)
    assert reduced["unrecognized"].height == UNRECOGNIZED_KEPT
    assert reduced.record_counts()["unrecognized"] == n
    assert reduced.accounting.unrecognized_lines == n
    assert reduced["unrecognized"]["text"][0] == "noise 0"


def test_activity_markers_keep_a_restart_visible(tmp_path: Path) -> None:
    # Two startups with request lines between them: a restart, as the full parse says.
    banner = "INFO 05-01 10:{m:02d}:00 api_server.py:528] vLLM API server version 0.6.3\n"
    body = "".join(_request_lines(f"cmpl-{i}", i, "received") for i in range(5))
    path = tmp_path / "vllm.log"
    path.write_text(banner.format(m=0) + body + banner.format(m=5) + body.replace("10:00", "10:06"))
    full = parse_path(path, deployment="d", options=OPTIONS)
    (reduced,) = reduce_paths([str(path)], deployment="d", options=OPTIONS)
    assert reduced["requests"].height < full["requests"].height
    events_full = _report([full])["deployments"][0]["events"]  # type: ignore[index]
    events_reduced = _report([reduced])["deployments"][0]["events"]  # type: ignore[index]
    assert events_reduced == events_full
    assert any(e["kind"] == "restart" for e in events_full)
