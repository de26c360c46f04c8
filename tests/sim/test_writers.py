"""Simulated artefacts have the shapes real vLLM produces, and the ingest layer reads them back."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from preemptscope.analysis.kvmodel import GPU_PRESETS
from preemptscope.analysis.sim import writers
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import SimResult, simulate
from preemptscope.analysis.sim.workload import synthetic
from preemptscope.ingest.logs import ParseOptions, parse_path
from prometheus_client.parser import text_string_to_metric_families

from tests.sim.traffic import long_chat

START = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def preempting() -> SimResult:
    config = SimConfig(gpu=GPU_PRESETS["L4"], max_num_seqs=64)
    workload = long_chat(rate=1.2, duration=240, seed=4)
    result = simulate(workload, config)
    assert result.total_preemptions > 120  # enough for 1, 51, 101 warnings
    return result


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("container", [True, False])
def test_v0_log_round_trip_every_50th_warning(
    preempting: SimResult, tmp_path: Path, container: bool
) -> None:
    lines = writers.render_log(preempting, era="v0", start=START, container_timestamps=container)
    frames = parse_path(write(tmp_path, "v0.log", lines), options=_opts())
    total = preempting.total_preemptions
    warnings = frames["preemption_warning"]
    expected = list(range(1, total + 1, 50))
    assert warnings["cumulative"].to_list() == expected
    assert warnings["mode"].unique().to_list() == ["RECOMPUTE"]
    assert frames.vllm_version == "0.6.1.post2"
    assert frames.log_era == "v0"
    assert frames.accounting.unrecognized_lines == 0
    stats = frames["scheduler_stats"]
    records = writers.stats_records(preempting, "v0")
    assert stats.height == len(records)
    assert stats["waiting"].to_list() == [r.waiting for r in records]
    assert stats["gpu_kv_cache_usage"].max() == pytest.approx(
        max(round(r.kv_usage * 100, 1) for r in records) / 100
    )
    gaps = np.diff(stats["timestamp"].dt.epoch("s").to_numpy())
    assert gaps.min() >= 4  # V0 logs at most every 5 s (1-s timestamp resolution)


def test_v1_logs_have_no_preemption_lines_and_10s_stats(
    preempting: SimResult, tmp_path: Path
) -> None:
    lines = writers.render_log(preempting, era="v1", start=START)
    frames = parse_path(write(tmp_path, "v1.log", lines), options=_opts())
    assert frames["preemption_warning"].height == 0
    assert not any("reempt" in line for line in lines)
    stats = frames["scheduler_stats"]
    assert stats["era"].unique().to_list() == ["v1"]
    assert stats["preemptions"].null_count() == stats.height
    assert set(np.diff(stats["timestamp"].dt.epoch("s").to_numpy()).tolist()) <= {10}
    assert frames.accounting.unrecognized_lines == 0
    kv = frames["kv_capacity"]
    tokens = kv.filter(pl.col("kind") == "kv_cache_tokens")["value"].to_list()
    assert tokens == [preempting.capacity.kv_cache_tokens]


def test_v1_preemptions_field_sums_to_the_truth(preempting: SimResult, tmp_path: Path) -> None:
    lines = writers.render_log(preempting, era="v1-preemptions", start=START)
    frames = parse_path(write(tmp_path, "v1p.log", lines), options=_opts())
    assert frames["scheduler_stats"]["preemptions"].sum() == preempting.total_preemptions


def test_request_lifecycle_lines_match_finished_requests(
    preempting: SimResult, tmp_path: Path
) -> None:
    lines = writers.render_log(preempting, era="v0", start=START)
    frames = parse_path(write(tmp_path, "req.log", lines), options=_opts())
    events = frames["requests"]["event"].value_counts().sort("event")
    counts = dict(zip(events["event"].to_list(), events["count"].to_list(), strict=True))
    assert counts["finished"] == int(preempting.finished_mask.sum())
    assert counts["added"] == len(preempting.workload)


def test_metrics_snapshots_are_valid_and_monotonic(preempting: SimResult) -> None:
    snaps = writers.render_metrics_snapshots(preempting, start=START, interval=15)
    assert len(snaps) == math.ceil(preempting.end_time / 15)
    previous: dict[str, float] = {}
    for _, text in snaps:
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = sample.name + json.dumps(sample.labels, sort_keys=True)
                values[key] = sample.value
        for key, value in values.items():
            if key.startswith(("vllm:num_preemptions_total", "vllm:e2e_request_latency_seconds_")):
                assert value >= previous.get(key, 0.0)
        previous = values
    final = {k.split("{")[0]: v for k, v in previous.items() if "_count" in k or "total" in k}
    assert final["vllm:num_preemptions_total"] == preempting.total_preemptions
    assert final["vllm:e2e_request_latency_seconds_count"] == preempting.finished_mask.sum()
    assert final["vllm:generation_tokens_total"] == preempting.steps.generation_tokens.sum()


def test_bench_result_matches_simulation(preempting: SimResult) -> None:
    bench = writers.render_bench_result(preempting, start=START)
    e2e = preempting.e2e()
    assert bench["completed"] == len(e2e)
    assert len(bench["latencies"]) == len(bench["start_times"]) == bench["num_prompts"]
    assert bench["p99_e2el_ms"] == pytest.approx(np.percentile(e2e, 99) * 1000)
    assert bench["start_times"][0] == pytest.approx(
        START.timestamp() + preempting.workload.arrival[0]
    )
    assert sum(len(x) for x in bench["itls"]) == len(preempting.itls()[2])
    json.dumps(bench, allow_nan=False)


def test_ground_truth_lists_every_preemption(preempting: SimResult) -> None:
    truth = writers.ground_truth(preempting, start=START, window=60)
    assert len(truth["preemptions"]) == preempting.total_preemptions
    assert sum(w["preemptions"] for w in truth["windows"]) == preempting.total_preemptions
    assert truth["over_capacity"] is True
    assert truth["totals"]["v0_warning_lines"] == len(
        range(1, preempting.total_preemptions + 1, 50)
    )
    json.dumps(truth, allow_nan=False)


def test_healthy_ground_truth() -> None:
    result = simulate(synthetic(rate=2, duration=120, seed=1), SimConfig(gpu=GPU_PRESETS["H100"]))
    truth = writers.ground_truth(result, start=START)
    assert truth["over_capacity"] is False
    assert not any(w["over_capacity"] for w in truth["windows"])


def _opts() -> ParseOptions:
    return ParseOptions(year=START.year)
