"""/metrics text of several vLLM eras into METRIC_SAMPLES, and the errors on bad input."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from preemptscope.analysis.latency import counter_increases, histogram_window_stats
from preemptscope.ingest.metrics import canonical_name, parse_metrics_text, snapshot_notes
from preemptscope.ingest.schema import METRIC_SAMPLES
from preemptscope.ingest.scrape import read_metrics_path, timestamp_from_name

from preemptscope.errors import InputError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"
T = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def _read(name: str) -> pl.DataFrame:
    return read_metrics_path(FIXTURES / name, deployment="llama")


def _metrics(frame: pl.DataFrame) -> set[str]:
    return set(frame["metric"].unique().to_list())


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("vllm:num_preemptions_total", "num_preemptions"),
        ("vllm:num_preemptions", "num_preemptions"),
        ("ray_vllm_num_preemptions_total", "num_preemptions"),
        ("ray_vllm:num_preemptions", "num_preemptions"),
        ("vllm:gpu_cache_usage_perc", "kv_cache_usage_perc"),
        ("vllm:kv_cache_usage_perc", "kv_cache_usage_perc"),
        ("vllm:gpu_prefix_cache_hits_total", "prefix_cache_hits"),
        ("vllm:time_per_output_token_seconds", "time_per_output_token_seconds"),
        ("vllm:inter_token_latency_seconds", "inter_token_latency_seconds"),
        ("process_cpu_seconds_total", "process_cpu_seconds"),
    ],
)
def test_canonical_names(raw: str, canonical: str) -> None:
    assert canonical_name(raw) == canonical


def test_v0_snapshot() -> None:
    frame = _read("v0_063.prom")
    assert frame.schema == METRIC_SAMPLES
    assert {"kv_cache_usage_perc", "time_per_output_token_seconds", "num_preemptions"} <= _metrics(
        frame
    )
    kv = frame.filter(pl.col("metric") == "kv_cache_usage_perc").row(0, named=True)
    assert kv["raw_name"] == "vllm:gpu_cache_usage_perc"
    assert kv["type"] == "gauge" and kv["value"] == pytest.approx(0.993)
    assert kv["model_name"] == "meta-llama/Llama-3.1-8B-Instruct" and kv["engine"] is None
    preempt = frame.filter((pl.col("metric") == "num_preemptions") & (pl.col("sample") == "value"))
    assert preempt["value"].to_list() == [151.0] and preempt["type"][0] == "counter"
    assert frame.schema["timestamp"] == pl.Datetime("us", "UTC")
    assert frame["deployment"].unique().to_list() == ["llama"]
    success = frame.filter(pl.col("metric") == "request_success").filter(
        pl.col("sample") == "value"
    )
    assert sorted(json.loads(x)["finished_reason"] for x in success["labels"]) == ["length", "stop"]


def test_v0_histogram_buckets_and_created() -> None:
    frame = _read("v0_063.prom")
    ttft = frame.filter(pl.col("metric") == "time_to_first_token_seconds")
    assert set(ttft["sample"].unique()) == {"bucket", "sum", "count", "created"}
    buckets = ttft.filter(pl.col("sample") == "bucket").sort("le")
    assert buckets["le"][0] == 0.001 and buckets["le"][-1] == float("inf")
    assert buckets["le"][-2] == 10.0  # the old V0 TTFT top bound
    assert buckets["value"][-1] == 1244
    created = frame.filter(
        (pl.col("metric") == "num_preemptions") & (pl.col("sample") == "created")
    )
    assert created["type"].to_list() == ["counter"]


def test_v1_010_engine_label_and_old_itl_name() -> None:
    frame = _read("v1_010.prom")
    assert "time_per_output_token_seconds" in _metrics(frame)
    assert "inter_token_latency_seconds" not in _metrics(frame)
    assert frame.filter(pl.col("metric") == "num_requests_running")["engine"].to_list() == ["0"]


def test_v1_033_capacity_signals() -> None:
    frame = _read("v1_033.prom")
    names = _metrics(frame)
    assert {
        "inter_token_latency_seconds",
        "request_time_per_output_token_seconds",
        "request_num_preemptions",
        "num_requests_waiting_by_reason",
    } <= names
    assert "time_per_output_token_seconds" not in names
    reasons = frame.filter(pl.col("metric") == "num_requests_waiting_by_reason")
    assert sorted(json.loads(x)["reason"] for x in reasons["labels"]) == [
        "capacity",
        "capacity",
        "deferred",
        "deferred",
    ]
    info = frame.filter(pl.col("metric") == "cache_config_info")
    assert info["type"].unique().to_list() == ["info"]
    labels = json.loads(info.filter(pl.col("engine") == "1")["labels"][0])
    assert labels["kv_cache_size_tokens"] == "441728" and labels["num_gpu_blocks"] == "27608"
    per_request = frame.filter(
        (pl.col("metric") == "request_num_preemptions") & (pl.col("sample") == "bucket")
    )
    assert sorted(per_request["le"].unique().to_list()) == [1, 2, 3, 4, 5, 10, 20, float("inf")]


def test_ray_variant_reads_like_vllm() -> None:
    ray = _read("ray_v1_033.prom")
    plain = _read("v1_033.prom")
    assert _metrics(ray) == _metrics(plain) - set()  # same canonical catalogue
    preempt = ray.filter(pl.col("metric") == "num_preemptions")
    assert preempt["type"].unique().to_list() == ["counter"]
    assert (
        preempt["value"].sum()
        == plain.filter((pl.col("metric") == "num_preemptions") & (pl.col("sample") == "value"))[
            "value"
        ].sum()
    )
    assert json.loads(preempt["labels"][0])["NodeAddress"] == "10.0.0.7"


def test_untyped_exposition_is_inferred() -> None:
    text = "\n".join(
        [
            'vllm:num_preemptions_total{engine="0"} 4',
            'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 2',
            'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 3',
            "vllm:e2e_request_latency_seconds_sum 4.5",
            "vllm:e2e_request_latency_seconds_count 3",
            "vllm:num_requests_running 5",
        ]
    )
    frame = parse_metrics_text(text + "\n", timestamp=T, source="x", deployment="d")
    kinds = {(row["metric"], row["sample"]): row["type"] for row in frame.iter_rows(named=True)}
    assert kinds[("num_preemptions", "value")] == "counter"
    assert kinds[("e2e_request_latency_seconds", "bucket")] == "histogram"
    assert kinds[("e2e_request_latency_seconds", "count")] == "histogram"
    assert kinds[("num_requests_running", "value")] == "unknown"


def test_metrics_filter_keeps_only_named() -> None:
    text = (FIXTURES / "v1_033.prom").read_text()
    frame = parse_metrics_text(
        text, timestamp=T, source="x", deployment="d", metrics={"num_preemptions"}
    )
    assert _metrics(frame) == {"num_preemptions"}


def test_empty_text_is_an_empty_frame() -> None:
    frame = parse_metrics_text("", timestamp=T, source="x", deployment="d")
    assert frame.is_empty() and frame.schema == METRIC_SAMPLES


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("# TYPE a gauge\na 1\na{b=c} 2\n", 3),
        ("a 1\nthis is not a metric line at all\n", 2),
        ("a 1\nb notanumber\n", 2),
        ("# TYPE a bogus\na 1\n", 1),
        ("<html><body>Login</body></html>\n", 1),
        ('{"error": "unauthorized"}\n', 1),
    ],
)
def test_bad_text_names_source_line_and_reason(text: str, line: int) -> None:
    with pytest.raises(InputError) as caught:
        parse_metrics_text(text, timestamp=T, source="snap.prom", deployment="d")
    assert caught.value.path == "snap.prom"
    assert caught.value.line == line
    assert "Prometheus text" in caught.value.reason


def test_naive_timestamp_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_metrics_text("a 1\n", timestamp=datetime(2026, 1, 1), source="x", deployment="d")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("20261129T100015Z", datetime(2026, 11, 29, 10, 0, 15, tzinfo=UTC)),
        ("20261129T100015.250Z", datetime(2026, 11, 29, 10, 0, 15, 250000, tzinfo=UTC)),
        ("snap-2026-11-29T10:00:15+01:00", datetime(2026, 11, 29, 9, 0, 15, tzinfo=UTC)),
        ("pod-a_2026-11-29T10-00-15", datetime(2026, 11, 29, 10, 0, 15, tzinfo=UTC)),
        ("metrics.1795946415", datetime(2026, 11, 29, 10, 0, 15, tzinfo=UTC)),
        ("1795946415500", datetime(2026, 11, 29, 10, 0, 15, 500000, tzinfo=UTC)),
        ("metrics", None),
        ("v0_063", None),
    ],
)
def test_timestamp_from_name(name: str, expected: datetime | None) -> None:
    assert timestamp_from_name(name) == expected


def test_directory_of_snapshots_is_one_series_with_restart() -> None:
    frame = _read("v1_033_series")
    assert frame["source"].unique().to_list() == [str(FIXTURES / "v1_033_series")]
    stamps = frame["timestamp"].unique().sort().to_list()
    assert len(stamps) == 9 and stamps[0] == T and stamps[-1] == T + timedelta(seconds=120)
    windows = [
        (T + timedelta(seconds=15 * i), T + timedelta(seconds=15 * (i + 1))) for i in range(8)
    ]
    # 69 preemptions per unit of scale across both engines; restart before the 7th scrape
    assert counter_increases(frame, "num_preemptions", windows) == [
        690,
        1380,
        2070,
        2760,
        3450,
        345,
        1035,
        1380,
    ]
    stats = histogram_window_stats(frame, "itl", windows[5][0], windows[5][1])
    assert stats is not None and stats.count == 345


def test_snapshot_time_falls_back_to_mtime(tmp_path: Path) -> None:
    target = tmp_path / "current.prom"
    shutil.copy(FIXTURES / "v1_010.prom", target)
    os.utime(target, (1795946415, 1795946415))
    frame = read_metrics_path(target, deployment="d")
    assert frame["timestamp"].unique().to_list() == [T + timedelta(seconds=15)]
    assert frame["source"].unique().to_list() == [str(target)]


def test_gzipped_snapshots_and_other_files_in_directory(tmp_path: Path) -> None:
    (tmp_path / "20261129T100000Z.prom.gz").write_bytes(
        gzip.compress((FIXTURES / "v1_010.prom").read_bytes())
    )
    (tmp_path / "README.md").write_text("not a snapshot")
    frame = read_metrics_path(tmp_path, deployment="d")
    assert frame["timestamp"].unique().to_list() == [T]


def test_path_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_metrics_path(tmp_path / "missing", deployment="d")
    with pytest.raises(InputError, match="no metrics snapshots"):
        read_metrics_path(tmp_path, deployment="d")
    bad = tmp_path / "20261129T100000Z.prom"
    bad.write_text("vllm:num_requests_running 1\nvllm:broken{ 2\n")
    with pytest.raises(InputError) as caught:
        read_metrics_path(tmp_path, deployment="d")
    assert caught.value.path == str(bad) and caught.value.line == 2
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="not UTF-8"):
        read_metrics_path(bad, deployment="d")


@pytest.mark.parametrize("name", ["v0_063.prom", "v1_010.prom", "v1_033.prom", "ray_v1_033.prom"])
def test_cached_fast_path_matches_prometheus_client(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import preemptscope.ingest.metrics as module

    text = (FIXTURES / name).read_text()
    fast = parse_metrics_text(text, timestamp=T, source="x", deployment="d")
    again = parse_metrics_text(text, timestamp=T, source="x", deployment="d")  # from the cache
    monkeypatch.setattr(module, "_split_lines", lambda _: None)
    slow = parse_metrics_text(text, timestamp=T, source="x", deployment="d")
    assert fast.equals(again)
    columns = [c for c in METRIC_SAMPLES.names() if c != "raw_name"]
    assert (
        fast.select(columns)
        .sort(columns, nulls_last=True)
        .equals(slow.select(columns).sort(columns, nulls_last=True))
    )
    # the fast path keeps names exactly as exposed (prometheus-client adds `_total` for Ray)
    exposed = {
        line.split("{")[0].split()[0] for line in text.splitlines() if line[:1] not in ("#", "")
    }
    assert set(fast["raw_name"]) == exposed


def test_layout_cache_follows_types_filters_and_values() -> None:
    counter = "# TYPE vllm:x counter\nvllm:x_total 5\n"
    gauge = "# TYPE vllm:x_total gauge\nvllm:x_total 7\n"
    first = parse_metrics_text(counter, timestamp=T, source="a", deployment="d")
    second = parse_metrics_text(gauge, timestamp=T, source="b", deployment="e")
    assert first["type"].to_list() == ["counter"] and first["value"].to_list() == [5.0]
    assert second["type"].to_list() == ["gauge"] and second["source"].to_list() == ["b"]
    text = (FIXTURES / "v1_033.prom").read_text()
    some = parse_metrics_text(
        text, timestamp=T, source="x", deployment="d", metrics={"num_preemptions"}
    )
    everything = parse_metrics_text(text, timestamp=T, source="x", deployment="d")
    assert set(some["metric"]) == {"num_preemptions"} and everything.height == 340
    key = 'vllm:num_preemptions_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}'
    doubled = text.replace(f"{key} 2300.0", f"{key} 4600.0")
    assert doubled != text
    later = parse_metrics_text(
        doubled, timestamp=T, source="x", deployment="d", metrics={"num_preemptions"}
    )
    values = later.filter(pl.col("sample") == "value").sort("engine")["value"].to_list()
    assert values == [4600.0, 4600.0]


def test_unusual_values_fall_back_to_prometheus_client() -> None:
    text = 'a{b="x}y"} 1 1700000000000\nc NaN\nd +Inf\n'
    frame = parse_metrics_text(text, timestamp=T, source="x", deployment="d")
    assert json.loads(frame["labels"][0]) == {"b": "x}y"}
    assert frame["value"][2] == float("inf")
    with pytest.raises(InputError) as caught:
        parse_metrics_text("a 1\nb 1_000\n", timestamp=T, source="x", deployment="d")
    assert caught.value.line == 2


ROUND2 = Path(__file__).parent.parent / "fixtures" / "round2"


def _round2(prefix: str) -> pl.DataFrame:
    (path,) = ROUND2.glob(f"{prefix}-*.prom")
    return read_metrics_path(path, deployment="r2")


def test_created_family_without_its_owner_is_folded() -> None:
    # round-2 m02 starts with `vllm:gpu_prefix_cache_queries_created` (a gauge family of its
    # own in prometheus-client's text) whose counter is outside the pasted window.
    frame = _round2("m02")
    assert not any(name.endswith("_created") for name in frame["metric"].to_list())
    created = frame.filter(pl.col("sample") == "created")
    assert sorted(created["metric"].to_list()) == ["prefix_cache_hits", "prefix_cache_queries"]
    hits = frame.filter(pl.col("metric") == "prefix_cache_hits")
    assert set(hits["type"].to_list()) == {"counter"}  # the owner is here: its type
    queries = created.filter(pl.col("metric") == "prefix_cache_queries").row(0, named=True)
    assert queries["type"] == "unknown" and queries["value"] == pytest.approx(1.7537953269352946e9)
    kv = frame.filter(pl.col("metric") == "kv_cache_usage_perc")
    assert kv["value"].to_list() == [pytest.approx(9.75010481363281e-06)]
    assert snapshot_notes(frame) == []


def test_created_of_a_histogram_is_its_sample() -> None:
    text = (
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 2.0\n'
        'vllm:e2e_request_latency_seconds_count{model_name="m"} 2.0\n'
        'vllm:e2e_request_latency_seconds_sum{model_name="m"} 3.0\n'
        "# TYPE vllm:e2e_request_latency_seconds_created gauge\n"
        'vllm:e2e_request_latency_seconds_created{model_name="m"} 1.7e9\n'
    )
    frame = parse_metrics_text(text, timestamp=T, source="t", deployment="d")
    assert frame["metric"].unique().to_list() == ["e2e_request_latency_seconds"]
    created = frame.filter(pl.col("sample") == "created").row(0, named=True)
    assert created["type"] == "histogram"


def test_help_type_only_snapshot_says_no_vllm_samples() -> None:
    frame = _round2("m04")  # metrics disabled: HELP/TYPE lines, zero samples
    assert frame.height == 0
    (note,) = snapshot_notes(frame)
    assert note.startswith("no vLLM sample in this file:") and "HELP/TYPE lines only" in note
    python_only = parse_metrics_text(
        "# TYPE python_gc_objects_collected_total counter\n"
        'python_gc_objects_collected_total{generation="0"} 1.0\n',
        timestamp=T,
        source="t",
        deployment="d",
    )
    assert snapshot_notes(python_only) == [
        "no vLLM sample in this file: 1 sample(s) of other exporters only (is this vLLM's "
        "/metrics?)"
    ]


def test_help_type_only_snapshot_in_a_report(capsys: pytest.CaptureFixture[str]) -> None:
    """Alone, it is an input error (issue 23); beside a log, a note on its source."""
    from preemptscope.cli import main

    (path,) = ROUND2.glob("m04-*.prom")
    assert main(["report", "--metrics", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: no vLLM sample in this file: HELP/TYPE lines only" in err
    log = FIXTURES.parent / "logs" / "v1_v010_docker.log"
    assert main(["report", str(log), "--metrics", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (source,) = [s for s in report["sources"] if s["kind"] == "metrics"]
    assert source["records"]["samples"] == 0
    assert source["notes"][0].startswith("no vLLM sample in this file:")


def test_multiprocess_bucket_fragment_without_type() -> None:
    frame = _round2("m06")  # 13 e2e buckets, sorted labels engine,le,model_name, no +Inf
    assert frame.height == 13
    assert set(frame["type"].to_list()) == {"histogram"}
    assert set(frame["engine"].to_list()) == {"0"}
    assert frame.filter(pl.col("le") == 10.0)["value"].to_list() == [3.0]


def test_triton_readme_ellipsis_names_its_line() -> None:
    (path,) = ROUND2.glob("m08-*.prom")
    with pytest.raises(InputError) as caught:
        read_metrics_path(path, deployment="r2")
    assert caught.value.line == 12  # the first `...` line (1-based)
    assert "'...'" in caught.value.reason
