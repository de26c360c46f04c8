"""Client results (vllm bench serve, GuideLLM, CSV, JSONL) into REQUEST_LATENCIES."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from preemptscope.analysis.latency import samples_window_stats
from preemptscope.ingest.bench import REQUEST_ROWS, read_bench, read_latencies
from preemptscope.ingest.schema import REQUEST_LATENCIES

from preemptscope.errors import InputError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "bench"
T = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def test_vllm_bench_detailed_places_requests_in_time() -> None:
    frame = read_latencies(FIXTURES / "vllm_bench_0_33_detailed.json", deployment="d")
    assert frame.schema == REQUEST_ROWS
    assert frame.drop("priority").schema == REQUEST_LATENCIES
    assert frame["priority"].null_count() == 12  # the file gives none
    assert frame.height == 12
    assert frame["origin"].unique().to_list() == ["vllm_bench"]
    # date 10:02:10 minus duration 10 s; start_times are perf_counter offsets 0.25 s apart
    assert frame["start"][0] == T + timedelta(minutes=2)
    assert frame["start"][4] == T + timedelta(minutes=2, seconds=1)
    first = frame.row(0, named=True)
    assert first["ttft"] == pytest.approx(0.05)
    assert first["e2e"] == pytest.approx(0.05 + 63 * 0.02)
    assert first["tpot"] == pytest.approx(0.02)  # (e2e - ttft) / (64 - 1)
    assert first["prompt_tokens"] == 512 and first["output_tokens"] == 64
    failed = frame.row(5, named=True)
    assert failed["success"] is False and failed["e2e"] is None
    assert frame["success"].sum() == 11


def test_vllm_bench_start_reanchors() -> None:
    start = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    frame = read_latencies(FIXTURES / "vllm_bench_0_33_detailed.json", deployment="d", start=start)
    assert frame["start"].min() == start
    assert frame["start"][1] == start + timedelta(seconds=0.25)


def test_vllm_bench_whole_run_figures_and_notes() -> None:
    result = read_bench(FIXTURES / "vllm_bench_0_33_detailed.json", deployment="d")
    (run,) = result.runs
    assert run.start == T + timedelta(minutes=2) and run.end == T + timedelta(minutes=2, seconds=10)
    assert run.requests == 11
    assert run.stats["e2e"].p99 == pytest.approx(1.419)
    assert run.stats["ttft"].mean == pytest.approx(0.10545)
    assert run.stats["ttft"].p50 == pytest.approx(0.105)
    assert any("local time" in note for note in result.notes)


def test_vllm_bench_0_10_has_no_start_times() -> None:
    result = read_bench(FIXTURES / "vllm_bench_0_10_detailed.json", deployment="d")
    frame = result.latencies
    assert frame.height == 12
    assert frame["start"].null_count() == 12
    # e2e rebuilt from ttft + sum(itls) when `latencies` is missing
    assert frame["e2e"][0] == pytest.approx(0.05 + 63 * 0.02)
    assert any("start_times" in note for note in result.notes)
    assert "e2e" not in result.runs[0].stats  # e2el was not a selected percentile metric
    assert samples_window_stats(frame, "e2e", T - timedelta(days=999), T) is None


def test_vllm_bench_without_detail_has_only_run_figures() -> None:
    result = read_bench(FIXTURES / "vllm_bench_summary_only.json", deployment="d")
    assert result.latencies.is_empty()
    assert result.runs[0].stats["tpot"].mean == pytest.approx(0.02)
    with pytest.raises(InputError, match="--save-detailed"):
        read_latencies(FIXTURES / "vllm_bench_summary_only.json", deployment="d")


def test_vllm_bench_appended_results(tmp_path: Path) -> None:
    source = json.loads((FIXTURES / "vllm_bench_0_33_detailed.json").read_text())
    second = dict(source, date="20261129-101010", request_rate=8.0)
    target = tmp_path / "appended.json"
    target.write_text(json.dumps(source) + "\n" + json.dumps(second) + "\n")
    result = read_bench(target, deployment="d")
    assert len(result.runs) == 2
    assert result.latencies.height == 24
    assert result.latencies["request_id"].n_unique() == 24
    assert result.latencies["start"].max() == datetime(2026, 11, 29, 10, 10, 2, 750000, tzinfo=UTC)


def test_vllm_bench_mismatched_arrays(tmp_path: Path) -> None:
    source = json.loads((FIXTURES / "vllm_bench_0_33_detailed.json").read_text())
    source["start_times"] = source["start_times"][:3]
    target = tmp_path / "bad.json"
    target.write_text(json.dumps(source))
    with pytest.raises(InputError, match="start_times` has 3 entries, expected 12"):
        read_latencies(target, deployment="d")


def test_guidellm_report() -> None:
    result = read_bench(FIXTURES / "guidellm_benchmarks.json", deployment="d")
    frame = result.latencies
    assert result.origin == "guidellm"
    assert frame.height == 22 and frame["success"].sum() == 20
    first = frame.filter(pl.col("request_id") == "req-0000").row(0, named=True)
    assert first["start"] == T
    assert first["e2e"] == pytest.approx(2.0)
    assert first["ttft"] == pytest.approx(0.1)
    assert first["tpot"] == pytest.approx((2.0 - 0.1) / 127)  # inter_token_latency_ms
    assert first["prompt_tokens"] == 512 and first["output_tokens"] == 128
    errored = frame.filter(~pl.col("success")).row(0, named=True)
    assert errored["e2e"] is None and errored["start"] is not None
    assert [run.label for run in result.runs] == ["bench-0", "bench-1"]
    assert result.runs[1].start == T + timedelta(seconds=120)
    assert result.runs[1].stats["e2e"].mean == pytest.approx(3.0 * 2.45)
    assert result.runs[0].stats["ttft"].p99 == pytest.approx(0.1 + 0.01 * 8.91)
    assert any("sample" in note for note in result.notes)
    # the second (8 req/s, 3x slower) run lands in its own window
    late = samples_window_stats(
        frame, "e2e", T + timedelta(seconds=120), T + timedelta(seconds=180)
    )
    assert late is not None and late.count == 10 and late.mean == pytest.approx(7.35)


def test_guidellm_v02_request_fields() -> None:
    frame = read_latencies(FIXTURES / "guidellm_v02_benchmarks.json", deployment="d")
    assert frame["e2e"].to_list() == pytest.approx([2.0, 4.0])
    assert frame["ttft"].to_list() == pytest.approx([0.5, 0.5])
    assert frame["tpot"].to_list() == pytest.approx([0.15, 0.175])
    assert frame["start"][0] == T + timedelta(seconds=1)


def test_guidellm_yaml(tmp_path: Path) -> None:
    import yaml

    document = json.loads((FIXTURES / "guidellm_v02_benchmarks.json").read_text())
    target = tmp_path / "benchmarks.yaml"
    target.write_text(yaml.safe_dump(document))
    assert read_latencies(target, deployment="d").height == 2


def test_generic_csv() -> None:
    frame = read_latencies(FIXTURES / "gateway.csv", deployment="gw")
    assert frame["origin"].unique().to_list() == ["csv"]
    assert frame["request_id"].to_list() == ["gw-1", "gw-2", "gw-3", "gw-4", "gw-5"]
    assert frame["start"].to_list() == [
        T + timedelta(seconds=1.25),
        T + timedelta(seconds=2),
        T + timedelta(seconds=3.5),
        T + timedelta(seconds=4),  # no zone: UTC
        T + timedelta(seconds=5),  # +01:00 converted
    ]
    assert frame["e2e"].to_list()[:3] == pytest.approx([1.83, 2.41, 9.95])
    assert frame["ttft"][2] == pytest.approx(4.1)
    assert frame["success"].to_list() == [True, True, True, False, True]
    assert frame["tpot"][0] == pytest.approx((1.83 - 0.12) / 95)


def test_generic_jsonl() -> None:
    frame = read_latencies(FIXTURES / "gateway.jsonl", deployment="gw")
    assert frame["origin"].unique().to_list() == ["jsonl"]
    assert frame["e2e"].to_list() == pytest.approx([1.5, 3.5, 0.9])  # r2 from end - start
    assert frame["success"].to_list() == [True, True, False]
    stats = samples_window_stats(frame, "e2e", T, T + timedelta(seconds=60))
    assert stats is not None and stats.count == 2


def test_priority_column_and_bench_priorities(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"start": 1795946400, "e2e": 1.0, "priority": 0}\n'
        '{"start": 1795946401, "e2e": 2.0, "priority": 1.0}\n'
        '{"start": 1795946402, "e2e": 2.0}\n'
    )
    assert read_latencies(rows, deployment="d")["priority"].to_list() == [0, 1, None]
    csv_rows = tmp_path / "rows.csv"
    csv_rows.write_text("start,e2e,priority\n1795946400,1.0,-2\n1795946401,1.0,x\n")
    with pytest.raises(InputError, match=r"rows.csv:3: `priority` must be an integer, got 'x'"):
        read_latencies(csv_rows, deployment="d")
    document = json.loads((FIXTURES / "vllm_bench_0_33_detailed.json").read_text())
    document["priorities"] = [i % 2 for i in range(12)]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(document))
    assert read_latencies(bench, deployment="d")["priority"].to_list() == [i % 2 for i in range(12)]
    document["priorities"][3] = 0.5
    bench.write_text(json.dumps(document))
    with pytest.raises(InputError, match=r"`priorities` must hold integers, got 0.5"):
        read_latencies(bench, deployment="d")


def test_json_array_of_rows(tmp_path: Path) -> None:
    target = tmp_path / "rows.json"
    target.write_text(
        json.dumps([{"start": 1795946400, "e2e": 1.0}, {"start": 1795946401, "e2e": 2.0}])
    )
    assert read_latencies(target, deployment="d")["e2e"].to_list() == [1.0, 2.0]


@pytest.mark.parametrize(
    ("name", "content", "line", "reason"),
    [
        ("a.csv", "start,e2e\n2026-11-29T10:00:00Z,1.0\nyesterday,2.0\n", 3, "neither ISO"),
        ("b.csv", "start,e2e\n2026-11-29T10:00:00Z,fast\n", 2, "not a number"),
        ("c.csv", "start,e2e\n2026-11-29T10:00:00Z,-1\n", 2, "non-negative"),
        ("d.csv", "when,latency\n2026-11-29T10:00:00Z,1\n", 1, "need columns `start` and `e2e`"),
        ("e.csv", "start,e2e\n2026-11-29T10:00:00Z,1,extra\n", 2, "more fields"),
        ("f.csv", "start,e2e,success\n2026-11-29T10:00:00Z,1,maybe\n", 2, "true or false"),
        ("g.csv", "start,ttft\n2026-11-29T10:00:00Z,1\n", 1, "need columns"),
        ("h.csv", "start,e2e,end\n2026-11-29T10:00:00Z,,2026-11-29T09:00:00Z\n", 2, "before"),
        ("i.jsonl", '{"start": 1, "e2e": 1}\n{"start": 2, "e2e": \n', 2, "not JSON"),
        ("j.jsonl", '{"start": 1, "e2e": 1}\n[1, 2]\n{"start": 3}\n', 2, "JSON object"),
        ("k.jsonl", '{"start": 1, "e2e": 1}\n{"start": 3}\n', 2, "no latency"),
        ("l.txt", "INFO 11-29 10:00:00 some log line\n", 1, "not a recognised"),
    ],
)
def test_bad_rows_name_file_line_reason(
    tmp_path: Path, name: str, content: str, line: int, reason: str
) -> None:
    target = tmp_path / name
    target.write_text(content)
    with pytest.raises(InputError) as caught:
        read_latencies(target, deployment="d")
    assert caught.value.path == str(target)
    assert caught.value.line == line
    assert reason in caught.value.reason


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_latencies(tmp_path / "nope.json", deployment="d")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(InputError, match="empty file"):
        read_latencies(tmp_path / "empty.csv", deployment="d")
    (tmp_path / "header.csv").write_text("start,e2e\n")
    with pytest.raises(InputError, match="no per-request latencies"):
        read_latencies(tmp_path / "header.csv", deployment="d")


def test_vllm_bench_date_layouts(tmp_path: Path) -> None:
    source = json.loads((FIXTURES / "vllm_bench_0_33_detailed.json").read_text())
    target = tmp_path / "r.json"
    target.write_text(json.dumps(dict(source, date="2026-11-29 10:02:10")))
    assert read_latencies(target, deployment="d")["start"][0] == T + timedelta(minutes=2)
    target.write_text(json.dumps(dict(source, date="yesterday")))
    with pytest.raises(InputError, match="YYYYMMDD-HHMMSS"):
        read_latencies(target, deployment="d")


def test_summary_only_results_are_run_level_sources() -> None:
    """vllm bench serve --save-result (no --save-detailed), benchmark_serving.py and
    TensorRT-LLM's port write whole-run figures only: read them, do not refuse the file."""
    result = read_bench(FIXTURES / "vllm_bench_summary_only.json", deployment="d")
    (run,) = result.runs
    assert result.latencies.is_empty()
    assert run.start == datetime(2026, 11, 29, 10, 2, 0, tzinfo=UTC)  # date - duration
    assert run.requests == 11 and run.failed == 1 and run.duration_s == 10.0
    assert run.request_throughput == pytest.approx(1.1) and run.goodput is None  # not given
    assert run.input_tokens == 5632 and run.output_tokens == 704
    assert any("whole-run figures only" in note for note in result.notes)


def test_a_result_that_does_not_say_when_it_ran_is_not_placed() -> None:
    result = read_bench(FIXTURES / "trtllm_benchmark_serving_summary.json", deployment="d")
    (run,) = result.runs
    assert run.start is None and run.end is None
    assert run.goodput == pytest.approx(2.9159) and run.max_concurrency == 32
    assert run.request_rate is None or not math.isfinite(run.request_rate)  # "inf"
    assert run.stats["e2e"].p99 == pytest.approx(11.9876)
    assert run.stats["itl"].p90 == pytest.approx(0.041)
    start = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    placed = read_bench(
        FIXTURES / "trtllm_benchmark_serving_summary.json", deployment="d", start=start
    ).runs[0]
    assert placed.start == start and placed.end == start + timedelta(seconds=61.73)
    moved = read_bench(FIXTURES / "vllm_bench_summary_only.json", deployment="d", start=start)
    assert moved.runs[0].start == start


def test_benchmark_serving_0_6_goodput_key_with_a_colon(tmp_path: Path) -> None:
    source = json.loads((FIXTURES / "vllm_bench_summary_only.json").read_text())
    source["request_goodput:"] = source.pop("request_goodput") or 0.9
    target = tmp_path / "old.json"
    target.write_text(json.dumps(source))
    assert read_bench(target, deployment="d").runs[0].goodput == pytest.approx(0.9)
