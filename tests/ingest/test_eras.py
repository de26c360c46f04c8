"""Per-era fixtures built from the format reference: every line kind, every envelope."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from preemptscope.ingest.logs import ParseOptions, parse_path
from preemptscope.ingest.schema import FRAME_SCHEMAS
from preemptscope.ingest.summary import LogSummary, reconstruct_preemptions

from .conftest import ERA_LOGS


def _config(frames: object, key: str) -> list[str]:
    from preemptscope.ingest.schema import LogFrames

    assert isinstance(frames, LogFrames)
    config = frames["config"]
    return [v for k, v in config.select("key", "value").iter_rows() if k == key]


@pytest.mark.parametrize("path", sorted(ERA_LOGS.glob("*.log")), ids=lambda p: p.name)
def test_every_fixture_adds_up_and_has_schema_dtypes(path: object) -> None:
    frames = parse_path(str(path), options=ParseOptions(year=2025))
    assert frames.accounting.check()
    for kind, schema in FRAME_SCHEMAS.items():
        assert frames[kind].schema == schema, kind


def test_v0_preemption_counter_reconstruction_and_lookalikes() -> None:
    frames = parse_path(ERA_LOGS / "v0_6_preemption.log", options=ParseOptions(year=2024))
    warnings = frames["preemption_warning"]
    assert warnings["cumulative"].to_list() == [1, 51, 101, 1, 51, None]
    assert warnings["mode"].to_list() == ["RECOMPUTE", "RECOMPUTE", "SWAP", *["RECOMPUTE"] * 3]
    summary = LogSummary(path="x", deployment="x")
    summary.add(frames)
    result = summary.to_json()
    # Two runs (a restart in between): 101 + 51; the cut warning is one of those lines.
    assert result["preemptions"] == {
        "warning_lines": 6,
        "reconstructed_total": 152,
        "basis": "v0_warning_counter",
    }
    others = frames["other"]["message"].to_list()
    assert "Preempted request chat-bb has been resumed!" in others
    assert "request chat-cc will be preempted." in others
    assert frames.vllm_version == "0.6.3.post1"
    assert frames.log_era == "v0"
    assert _config(frames, "max_num_seqs") == ["256"]
    assert _config(frames, "scheduling_policy") == ["fcfs"]
    assert _config(frames, "max_model_len") == ["8192"]
    kv = {k: v for k, v in frames["kv_capacity"].select("kind", "value").iter_rows()}
    assert kv["gpu_blocks"] == 2048 and kv["cpu_blocks"] == 2048
    assert kv["memory_for_kv"] == pytest.approx(1.57)
    stats = frames["scheduler_stats"]
    assert stats["swapped"].to_list() == [0, 6]
    assert stats["cpu_kv_cache_usage"].to_list() == pytest.approx([0.0, 0.035])


def test_reconstruct_preemptions() -> None:
    assert reconstruct_preemptions([1, 51, 101, 151]) == 151
    assert reconstruct_preemptions([1, 51, 1, 51, 101]) == 152
    assert reconstruct_preemptions([None, 1]) == 1
    assert reconstruct_preemptions([]) == 0


def test_v02x_era() -> None:
    frames = parse_path(ERA_LOGS / "v0_2x_llm_engine.log", options=ParseOptions(year=2023))
    stats = frames["scheduler_stats"]
    assert stats["era"].to_list() == ["v0", "v0"]
    # v0.1 `Throughput:` line: the single throughput goes to generation_throughput.
    assert stats["generation_throughput"].to_list() == [0.0, 312.5]
    assert stats["prompt_throughput"].to_list() == [0.0, None]
    assert frames["requests"].select("event", "request_id").rows() == [
        ("received", "cmpl-45f7aa"),
        ("finished", "cmpl-45f7aa"),
    ]
    assert _config(frames, "tensor_parallel_size") == ["2"]
    assert frames["access"].row(0, named=True)["client"] == "::1:36100"


def test_v1_v010_docker_wrapper_timestamps() -> None:
    frames = parse_path(ERA_LOGS / "v1_v010_docker.log")
    assert frames.year_source == "wrapper"
    assert frames.vllm_version == "0.10.2"
    assert frames.log_era == "v1"
    stats = frames["scheduler_stats"].row(0, named=True)
    assert stats["timestamp"] == datetime(2025, 10, 3, 16, 23, 8, tzinfo=UTC)
    assert stats["process"] == "APIServer" and stats["pid"] == 1
    assert stats["preemptions"] is None  # V1 without `Preemptions:` says nothing
    assert (stats["running"], stats["waiting"], stats["engine"]) == (64, 12, 0)
    assert _config(frames, "scheduling_policy") == ["priority"]
    assert _config(frames, "served_model_name") == ["qwen3", "qwen3"]
    assert _config(frames, "engine_version") == ["V1"]
    kv = frames["kv_capacity"]
    tokens = kv.filter(kv["kind"] == "kv_cache_tokens").row(0, named=True)
    assert tokens["value"] == 42656 and tokens["process"] == "EngineCore_DP0"
    conc = kv.filter(kv["kind"] == "max_concurrency").row(0, named=True)
    assert conc["context_tokens"] == 32768 and conc["value"] == pytest.approx(1.3)
    assert frames["access"]["status"].to_list() == [200, 200, 400]
    assert frames["access"]["timestamp"].null_count() == 0


def test_v1_v033_envelopes() -> None:
    frames = parse_path(ERA_LOGS / "v1_v033_envelopes.log", options=ParseOptions(year=2026))
    assert frames.vllm_version == "0.33.0"
    assert _config(frames, "model") == ["models/final_dpo"]
    stats = frames["scheduler_stats"]
    by_line = {row["line"]: row for row in stats.iter_rows(named=True)}
    assert by_line[8]["deferred"] == 3
    nine = by_line[9]
    assert (nine["engine"], nine["preemptions"], nine["kv_device"]) == (1, 3, "XPU")
    assert nine["external_prefix_cache_hit_rate"] == pytest.approx(0.2)
    assert nine["mm_cache_hit_rate"] == pytest.approx(0.3)
    assert nine["extra"] == "KV fetch: 1 waiting to start, 0 in progress, 0 completed waiting"
    assert by_line[10]["engine"] is None and by_line[10]["level"] == "DEBUG"
    assert by_line[10]["kv_device"] == "CPU" and by_line[10]["cpu_kv_cache_usage"] is None
    # ANSI colour with ESC, JSON formatter, docker json-file, CRI, compose, Ray actor names.
    assert by_line[11]["running"] == 5 and by_line[11]["process"] == "APIServer"
    assert by_line[15]["timestamp"] == datetime(2026, 2, 19, 10, 20, 53, 123000, tzinfo=UTC)
    assert by_line[16]["extra"] is None and by_line[16]["running"] == 9
    assert by_line[16]["timestamp"] == datetime(2026, 2, 19, 10, 21, 3, 500000, tzinfo=UTC)
    assert by_line[17]["running"] == 11
    assert by_line[18]["running"] == 13 and by_line[18]["process"] == "APIServer"
    assert by_line[20]["process"] == "Llumlet(iid=1)" and by_line[20]["pid"] == 9
    kv = frames["kv_capacity"]
    assert kv.filter(kv["device"] == "GPU + host")["value"].to_list() == [600000, 146.48]
    worker = kv.filter(kv["kind"] == "available_kv_memory").row(0, named=True)
    assert (worker["process"], worker["value"]) == ("Worker_TP1", 9.05)  # ESC lost
    other = frames["other"]
    assert "VllmWorkerProcess" in other["process"].to_list()  # journald #033[
    # A raw traceback line behind a `[rankN]:` prefix is output of that rank, with no level.
    assert frames["unrecognized"].height == 0
    traceback = other.filter(other["message"] == "Traceback (most recent call last):")
    assert traceback.select("process", "level").rows() == [("rank0", None)]


def test_docker_json_file_equals_docker_timestamps() -> None:
    import json

    from preemptscope.ingest.logs import parse_lines

    plain = (ERA_LOGS / "v1_v010_docker.log").read_text(encoding="utf-8").splitlines()
    wrapped = []
    for line in plain:
        stamp, _, rest = line.partition(" ")
        wrapped.append(json.dumps({"log": rest + "\n", "stream": "stdout", "time": stamp}))
    a = parse_lines(plain, source="s", deployment="d", options=ParseOptions(year=2025))
    b = parse_lines(wrapped, source="s", deployment="d", options=ParseOptions(year=2025))
    assert b.accounting == a.accounting
    for kind in a.frames:
        assert b[kind].equals(a[kind]), kind


def test_lines_after_access_lines_are_not_continuations() -> None:
    from preemptscope.ingest.logs import parse_lines

    lines = [
        '(APIServer pid=1) INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 404 Not Found',
        "garbage that is no log line",
        '{"log": broken json',
    ]
    frames = parse_lines(lines, source="s", deployment="d")
    assert frames["unrecognized"]["line"].to_list() == [2, 3]
