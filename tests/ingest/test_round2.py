"""The round-2 corpus (tests/fixtures/round2, copied from ../shared/corpus/round2) and the line
classes it showed unread: bare process prefixes, tracebacks without a level, elided or
date-less headers, `[Stage-N]` tags, the new KV-sizing lines, Docker Desktop-style wrappers
and Ray's deduplicated repeats.

Hand counts come from the corpus's expected.json. Every file is read both ways (the file
path, with the native scanner when it is built, and `parse_lines`, the pure-Polars route);
both must give the same records and an accounting that adds up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from preemptscope.ingest.logs import ParseOptions, parse_lines, parse_path
from preemptscope.ingest.schema import LogFrames
from preemptscope.ingest.summary import LogSummary

from .conftest import FIXTURES

ROUND2 = FIXTURES / "round2"
EXPECTED: dict[str, dict[str, object]] = json.loads((ROUND2 / "expected.json").read_text())
LOGS = sorted(name for name in EXPECTED if name.endswith(".log"))


def _file(prefix: str) -> Path:
    (path,) = ROUND2.glob(f"{prefix}-*.log")
    return path


def _lines(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8").split("\n")[:-1]


def _both(lines: Sequence[str], tmp_path: Path, year: int = 2026) -> tuple[LogFrames, LogFrames]:
    """The same lines through parse_path (a file) and parse_lines (a batch)."""
    path = tmp_path / "excerpt.log"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    options = ParseOptions(year=year)
    return parse_path(path, options=options), parse_lines(
        lines, source=str(path), deployment="excerpt", options=options
    )


def test_every_round2_log_is_copied() -> None:
    assert {p.name for p in ROUND2.glob("*.log")} == set(LOGS)
    assert len(LOGS) == 15


@pytest.mark.parametrize("name", LOGS)
def test_round2_log_matches_hand_counts(name: str) -> None:
    expected = EXPECTED[name]
    frames = parse_path(ROUND2 / name, options=ParseOptions(year=2026))
    acc = frames.accounting
    assert acc.check(), acc
    assert acc.lines == len(_lines(ROUND2 / name))
    assert frames["preemption_warning"]["line"].n_unique() == expected["preemption_warnings"]
    assert frames["scheduler_stats"].height == expected["stats_records"]
    assert frames.vllm_version == expected["vllm_version"]
    summary = LogSummary(path=name, deployment=frames.deployment)
    summary.add(frames)
    last = summary.to_json()["last_scheduler_stats"]
    want = expected["last_stats"]
    if want is None:
        assert last is None
    else:
        assert isinstance(want, dict) and last is not None
        assert (last["running"], last["waiting"]) == (want["running"], want["waiting"])
        assert last["gpu_kv_cache_usage"] == pytest.approx(want["kv_pct"] / 100)


@pytest.mark.parametrize("name", LOGS)
def test_round2_both_routes_agree(name: str) -> None:
    path = ROUND2 / name
    whole = parse_path(path, options=ParseOptions(year=2026))
    batch = parse_lines(
        _lines(path), source=str(path), deployment=whole.deployment, options=ParseOptions(year=2026)
    )
    assert batch.accounting == whole.accounting
    assert batch.record_counts() == whole.record_counts()
    for kind in ("scheduler_stats", "kv_capacity", "other"):
        assert batch[kind].equals(whole[kind]), kind


# What is left unrecognised in the round-2 logs is text no program printed: shell commands,
# `...` elisions and the wrapped tail of a quoted exception (its `▎ ValueError: …` line is
# read). Every vLLM line is read; a fork's prints behind journald's `авг 18 14:14:59 llm
# python3[28148]: ` are that process's output.
LEFT_UNRECOGNISED = {
    "108": [1, 3],
    "124": [1, 2],
    "130": [3, 4],
}


@pytest.mark.parametrize("name", LOGS)
def test_round2_only_non_vllm_text_is_unrecognised(name: str) -> None:
    frames = parse_path(ROUND2 / name, options=ParseOptions(year=2026))
    assert frames["unrecognized"]["line"].to_list() == LEFT_UNRECOGNISED.get(name[:3], [])


def test_bare_process_prefix_and_prefixed_progress_bars() -> None:
    frames = parse_path(_file("120"), options=ParseOptions(year=2026))
    other = frames["other"]
    bare = other.filter(pl.col("line") == 29).row(0, named=True)
    assert (bare["process"], bare["pid"], bare["level"], bare["message"]) == (
        "EngineCore_DP0",
        508942,
        None,
        "",
    )
    # tqdm redraws behind the prefix: the last redraw, with the prefix's process.
    bars = other.filter(pl.col("line").is_in([24, 25, 26, 27, 28, 41]))
    assert bars["process"].unique().to_list() == ["EngineCore_DP0"]
    assert bars["message"][0].startswith("Loading safetensors checkpoint shards:  25%")


def test_v1_traceback_lines_without_a_level() -> None:
    frames = parse_path(_file("118"), options=ParseOptions(year=2026))
    other = frames["other"]
    assert frames.accounting.unrecognized_lines == 0
    traceback = other.filter(pl.col("line") >= 8)
    assert traceback["process"].unique().to_list() == ["EngineCore"]
    assert traceback["level"].null_count() == traceback.height
    # The error is counted once: the header line, not the lines of its traceback.
    errors = other.filter(pl.col("level") == "ERROR")
    assert errors.select("line", "message").rows() == [(7, "EngineCore failed to start.")]


def test_raw_traceback_without_prefix(tmp_path: Path) -> None:
    # v0.31+ prints raw tracebacks with no process prefix (constructed from vLLM's format).
    lines = [
        "(EngineCore pid=4179) ERROR 10-05 02:14:25 [core.py:1010] EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 1001, in run',
        "    engine_core = EngineCoreProc(*args, **kwargs)",
        "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "ValueError: No available memory for the cache blocks.",
        "    indented text after no frame line",
    ]
    for frames in _both(lines, tmp_path):
        assert frames["unrecognized"]["line"].to_list() == [7]
        other = frames["other"]
        assert other["line"].to_list() == [1, 2, 3, 4, 5, 6]
        assert other.filter(pl.col("line") > 1)["level"].null_count() == 5


def test_elided_timestamp_headers() -> None:
    frames = parse_path(_file("128"), options=ParseOptions(year=2026))
    kv = frames["kv_capacity"]
    assert kv.select("level", "kind", "value").rows() == [
        ("INFO", "available_kv_memory", 4.11),
        ("INFO", "kv_cache_tokens", 326112.0),
        ("INFO", "max_concurrency", 1.34),
    ]
    assert kv["context_tokens"].to_list()[2] == 180000
    assert kv["timestamp"].null_count() == 3  # the user removed the time: none is invented
    other = frames["other"].row(0, named=True)
    assert (other["level"], other["message"]) == ("INFO", "Application startup complete.")


def test_headers_without_a_date(tmp_path: Path) -> None:
    lines = [
        "(APIServer pid=1) INFO 18:45:57 [loggers.py:116] Engine 000: Avg prompt throughput: "
        "1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 1 "
        "reqs, GPU KV cache usage: 5.0%, Prefix cache hit rate: 0.0%",
        "WARNING 18:45:58 [scheduler.py:1057] Sequence group 7 is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
        "total_num_cumulative_preemption=1",
    ]
    for frames in _both(lines, tmp_path):
        assert frames.accounting.parsed_lines == 2
        stats = frames["scheduler_stats"].row(0, named=True)
        assert (stats["process"], stats["level"], stats["running"], stats["waiting"]) == (
            "APIServer",
            "INFO",
            3,
            1,
        )
        assert stats["timestamp"] is None
        warning = frames["preemption_warning"].row(0, named=True)
        assert (warning["level"], warning["cumulative"]) == ("WARNING", 1)


def test_stage_tag_after_the_process_prefix() -> None:
    frames = parse_path(_file("114"), options=ParseOptions(year=2026))
    kv = frames["kv_capacity"]
    assert kv.select("process", "pid").unique().rows() == [("EngineCore_DP0", 181642)]
    assert kv["value"].to_list() == [100.43, 2925232.0, 89.27]
    assert kv["timestamp"][0] == datetime(2026, 2, 2, 18, 25, 3, tzinfo=UTC)
    warning = frames["other"].filter(pl.col("level") == "WARNING").row(0, named=True)
    assert (warning["process"], warning["logger_file"]) == ("EngineCore_DP0", "scheduler.py")


def test_one_line_kv_cache_size(tmp_path: Path) -> None:
    lines = [  # real, v0.31.0 (the reference's example)
        "(EngineCore pid=4179) INFO 10-05 02:14:23 [kv_cache_utils.py:2464] GPU KV cache size: "
        "558,496 tokens, Maximum concurrency for 4,096 tokens per request: 136.35x",
        "(EngineCore pid=4179) INFO 10-05 02:14:23 [kv_cache_utils.py:2464] XPU KV cache size: "
        "1,024 tokens, Maximum concurrency for 512 tokens per request: 2.00x",
    ]
    for frames in _both(lines, tmp_path):
        rows = frames["kv_capacity"].select("kind", "value", "context_tokens", "device").rows()
        assert rows == [
            ("kv_cache_tokens", 558496.0, None, "GPU"),
            ("max_concurrency", 136.35, 4096, "GPU"),
            ("kv_cache_tokens", 1024.0, None, "XPU"),
            ("max_concurrency", 2.0, 512, "XPU"),
        ]


FREE_MEMORY = [
    # the line (v0.26+ ends in GiB)
    "(EngineCore pid=1) INFO 05-01 10:00:00 [gpu_worker.py:440] Free memory on device "
    "(46.99/47.37 GiB) on startup. Desired GPU memory utilization is (0.85, 40.27 GiB). Actual "
    "usage is 1.2 GiB for weight, 0.5 GiB for peak activation, 0.1 GiB for non-torch memory, "
    "and 0.3 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
    "`--kv-cache-memory=39598979072` to fit into requested memory, or "
    "`--kv-cache-memory=46291329024` to fully utilize gpu memory. Current kv cache memory in "
    "use is 36.88 GiB.",
    # seen in public repositories (v0.11, the kv part in bytes)
    "(Worker_TP1 pid=1806414) INFO 10-23 15:14:56 [gpu_worker.py:391] Free memory on device "
    "(139.21/139.81 GiB) on startup. Desired GPU memory utilization is (0.9, 125.83 GiB). Actual "
    "usage is 74.28 GiB for weight, 5.58 GiB for peak activation, 1.38 GiB for non-torch memory, "
    "and 2.37 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
    "`--kv-cache-memory=45175492096` to fit into requested memory, or "
    "`--kv-cache-memory=59540753920` to fully utilize gpu memory. Current kv cache memory in "
    "use is 47878721024 bytes.",
]


def test_free_memory_on_device(tmp_path: Path) -> None:
    for frames in _both(FREE_MEMORY, tmp_path):
        kv = frames["kv_capacity"]
        first = dict(kv.filter(pl.col("line") == 1).select("kind", "value").rows())
        assert first == {
            "memory_free": 46.99,
            "memory_total": 47.37,
            "gpu_memory_utilization": 0.85,
            "memory_budget": 40.27,
            "memory_for_kv": 36.88,
        }
        second = dict(kv.filter(pl.col("line") == 2).select("kind", "value").rows())
        assert second["memory_for_kv"] == pytest.approx(47878721024 / 1024**3)
        assert kv.filter(pl.col("kind") == "memory_for_kv")["unit"].to_list() == ["GiB", "GiB"]


def test_kv_cache_memory_bytes_reservation() -> None:
    frames = parse_path(_file("118"), options=ParseOptions(year=2026))
    kv = frames["kv_capacity"]
    assert kv.select("line", "process", "kind", "value").rows() == [
        (5, "EngineCore", "memory_free", 31.16),
        (5, "EngineCore", "memory_for_kv", 4.25),
    ]


# Docker Desktop shows the host's local time in front of each line (real shape, issue 10).
DESKTOP = [
    "2025-07-10 08:59:40 ERROR 07-09 17:59:40 [core.py:586] EngineCore failed to start.",
    "2025-07-10 08:59:40 INFO 07-09 17:59:40 [loggers.py:116] Engine 000: Avg prompt throughput: "
    "1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 5.0%, Prefix cache hit rate: 0.0%",
    "2025-07-10 08:59:41 Traceback (most recent call last):",
    "2025-07-10 08:59:41 (APIServer pid=1) INFO:     127.0.0.1:40000 - "
    '"GET /health HTTP/1.1" 200 OK',
]


def test_naive_iso_wrapper_gives_the_year_only(tmp_path: Path) -> None:
    lines = [
        "2025-07-10T08:59:40.123 ERROR 07-09 17:59:40 [core.py:586] EngineCore failed to start.",
        "2025-07-10T08:59:41.000000001Z INFO 07-10 08:59:41 [core.py:587] zoned: the time too",
    ]
    for frames in _both(lines, tmp_path, year=2020):
        assert frames.year_source == "wrapper"
        assert frames["other"]["timestamp"].to_list() == [
            datetime(2025, 7, 9, 17, 59, 40, tzinfo=UTC),
            datetime(2025, 7, 10, 8, 59, 41, tzinfo=UTC),
        ]


def test_docker_desktop_wrapper_keeps_level_location_and_gives_the_year(tmp_path: Path) -> None:
    path = tmp_path / "desktop.log"
    path.write_text("".join(f"{line}\n" for line in DESKTOP), encoding="utf-8")
    for frames in (
        parse_path(path),
        parse_lines(DESKTOP, source=str(path), deployment="desktop"),
    ):
        assert frames.accounting.check() and frames.accounting.unrecognized_lines == 0
        assert frames.year_source == "wrapper"
        error = frames["other"].filter(pl.col("level") == "ERROR").row(0, named=True)
        assert (error["logger_file"], error["logger_line"]) == ("core.py", 586)
        assert error["message"] == "EngineCore failed to start."
        # The wrapper's time is the viewer's zone, not the log's: only its year is taken.
        assert error["timestamp"] == datetime(2025, 7, 9, 17, 59, 40, tzinfo=UTC)
        stats = frames["scheduler_stats"].row(0, named=True)
        assert (stats["level"], stats["running"]) == ("INFO", 3)
        assert frames["access"]["status"].to_list() == [200]


RAY = [
    # real, vllm-project/vllm issue (DeepSeek R1 on MI300A over Ray)
    "(RayWorkerWrapper pid=394716, ip=10.65.144.3) INFO 02-05 09:08:19 rocm.py:121] Using "
    "Triton MLA backend.",
    "(RayWorkerWrapper pid=394716, ip=10.65.144.3) INFO 02-05 09:08:19 rocm.py:121] Using "
    "Triton MLA backend. [repeated 31x across cluster] (Ray deduplicates logs by default. Set "
    "RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/en/master/"
    "ray-observability/user-guides/configure-logging.html#log-deduplication for more options.)",
    "(RayWorkerWrapper pid=9, ip=10.0.0.2) WARNING 02-05 09:08:20 scheduler.py:1057] Sequence "
    "group 8 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
    "space. total_num_cumulative_preemption=51 [repeated 2x across cluster]",
    "(RayWorkerWrapper pid=9, ip=10.0.0.2) INFO 02-05 09:08:21 metrics.py:467] Avg prompt "
    "throughput: 0.0 tokens/s, Avg generation throughput: 9.0 tokens/s, Running: 4 reqs, "
    "Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 99.0%, CPU KV cache usage: 0.0%. "
    "[repeated 3x across cluster]",
]


def test_ray_repeated_lines_stand_for_their_count(tmp_path: Path) -> None:
    # Ray's own test (python/ray/tests/test_output.py, test_dedup_logs): 10 prints give the
    # first line and one line with `[repeated 9x across cluster]`. So the suffixed line stands
    # for N lines, N + 1 with the first one.
    for frames in _both(RAY, tmp_path):
        acc = frames.accounting
        # Physical lines still add up: a suffixed line is one parsed line with several rows.
        assert acc.check() and (acc.lines, acc.parsed_lines) == (4, 4)
        other = frames["other"]
        assert other["line"].to_list() == [1] + [2] * 31  # the first one, then 31 more
        assert other["message"].unique().to_list() == ["Using Triton MLA backend."]
        warnings = frames["preemption_warning"]
        assert warnings["line"].to_list() == [3, 3]
        assert warnings["cumulative"].to_list() == [51, 51]
        stats = frames["scheduler_stats"]
        assert stats["line"].to_list() == [4, 4, 4]
        assert stats["extra"].null_count() == 3  # the suffix is not a stats field
        assert stats["waiting"].to_list() == [2, 2, 2]


def test_ray_suffix_inside_a_message_is_not_a_repeat(tmp_path: Path) -> None:
    # Only a suffix at the very end counts; quoted elsewhere it is text.
    lines = [
        "(APIServer pid=1) INFO 02-05 09:08:19 [logger.py:39] Received request cmpl-1: prompt: "
        "'say [repeated 999x across cluster] twice', params: SamplingParams(n=1).",
    ]
    for frames in _both(lines, tmp_path):
        assert frames["requests"].height == 1


def _write(path: Path, lines: Sequence[str], mtime_year: int) -> Path:
    import os

    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    stamp = datetime(mtime_year, 6, 1, tzinfo=UTC).timestamp()
    os.utime(path, (stamp, stamp))
    return path


def test_a_later_wrapper_time_beats_the_mtime(tmp_path: Path) -> None:
    # The first records have no wrapper; a Docker Desktop line later in the file says the
    # year. Counting back over the Dec -> Jan rollover puts the first record in 2025.
    lines = [
        "INFO 12-31 23:59:50 [loggers.py:116] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV "
        "cache usage: 5.0%, Prefix cache hit rate: 0.0%",
        "2026-01-01 09:00:05 ERROR 01-01 00:00:05 [core.py:586] EngineCore failed to start.",
    ]
    frames = parse_path(_write(tmp_path / "vllm.log", lines, mtime_year=2031))
    assert frames.year_source == "wrapper"
    assert frames["scheduler_stats"]["timestamp"][0] == datetime(
        2025, 12, 31, 23, 59, 50, tzinfo=UTC
    )
    assert frames["other"]["timestamp"][0] == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)


def test_a_foreign_asctime_in_the_content_beats_the_mtime(tmp_path: Path) -> None:
    # round-2 114: FlashInfer's `2026-02-02 18:25:03,837 - INFO - …` lines carry the year.
    path = _write(tmp_path / "omni.log", _lines(_file("114")), mtime_year=2031)
    frames = parse_path(path)
    assert frames.year_source == "json"
    assert frames["kv_capacity"]["timestamp"][0] == datetime(2026, 2, 2, 18, 25, 3, tzinfo=UTC)


def test_a_date_in_the_file_name_beats_the_mtime(tmp_path: Path) -> None:
    lines = [
        "INFO 12-30 10:00:00 [api_server.py:1] vLLM API server version 0.6.3",
        "INFO 01-02 10:00:00 [api_server.py:2] Started server process",
    ]
    frames = parse_path(_write(tmp_path / "vllm-2024-12-30.log", lines, mtime_year=2031))
    assert frames.year_source == "name"
    assert frames["config"]["timestamp"][0] == datetime(2024, 12, 30, 10, tzinfo=UTC)
    assert frames["other"]["timestamp"][0] == datetime(2025, 1, 2, 10, tzinfo=UTC)
    # --year is the user's word: it wins over the name
    frames = parse_path(
        _write(tmp_path / "vllm-2024-12-30.log", lines, mtime_year=2031),
        options=ParseOptions(year=2023),
    )
    assert (frames.year_source, frames["config"]["timestamp"][0].year) == ("option", 2023)
    # without anything better, the mtime still decides
    frames = parse_path(_write(tmp_path / "vllm.log", lines, mtime_year=2031))
    assert (frames.year_source, frames["config"]["timestamp"][0].year) == ("mtime", 2030)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vllm-2025-07-10.log", datetime(2025, 7, 10)),
        ("server_20250710_1230.log.gz", datetime(2025, 7, 10)),
        ("/logs/2019-01-01/vllm.log", None),  # only the file's own name counts
        ("vllm-2025-13-40.log", None),
        ("run-12345678.log", None),
        ("vllm.log", None),
    ],
)
def test_time_from_name(name: str, expected: datetime | None) -> None:
    from preemptscope.ingest._time import time_from_name

    assert time_from_name(name) == expected


def test_journald_wrapped_prints_are_that_process_output() -> None:
    # round-2 106: a fork's print lines behind `авг 18 14:14:59 llm python3[28148]: `
    frames = parse_path(_file("106"), options=ParseOptions(year=2026))
    prints = frames["other"].filter(pl.col("level").is_null())
    assert prints.select("line", "process", "pid").rows() == [
        (1, "python3", 28148),
        (3, "python3", 28148),
        (4, "python3", 28147),
        (5, "python3", 28145),
    ]
    kv = frames["kv_capacity"]  # the vLLM lines behind the same wrapper keep their prefix
    assert kv.select("process", "kind").rows()[0] == ("Worker_TP0", "available_kv_memory")


def test_ray_repeat_count_is_bounded(tmp_path: Path) -> None:
    from preemptscope.ingest import catalogue as cat

    lines = [
        f"(task pid=1) INFO 02-05 09:08:19 [a.py:1] hi [repeated {cat.RAY_REPEAT_MAX}x across "
        "cluster]",
        "(task pid=1) INFO 02-05 09:08:19 [a.py:1] hi [repeated 999999999999x across cluster]",
    ]
    for frames in _both(lines, tmp_path):
        assert frames["other"].height == cat.RAY_REPEAT_MAX
        (reason,) = frames["unrecognized"]["reason"].to_list()
        assert reason == f"Ray repeat count above {cat.RAY_REPEAT_MAX}"


def test_other_shortened_headers(tmp_path: Path) -> None:
    lines = [
        "INFO 05-09 ... [gpu_worker.py:489] Available KV cache memory: 4.11 GiB",
        "(EngineCore pid=1) INFO [kv_cache_utils.py:1778] GPU KV cache size: 326,112 tokens",
        "WARNING … Something odd",
        "INFO done here",  # a level and a word: not a header
    ]
    for frames in _both(lines, tmp_path):
        kv = frames["kv_capacity"]
        assert kv.select("line", "process", "level", "value").rows() == [
            (1, None, "INFO", 4.11),
            (2, "EngineCore", "INFO", 326112.0),
        ]
        assert frames["other"].select("line", "level", "message").rows() == [
            (3, "WARNING", "Something odd")
        ]
        assert frames["unrecognized"]["line"].to_list() == [4]


def test_tracebacks_behind_a_compose_prefix(tmp_path: Path) -> None:
    # docker compose puts its service column in front of every line (round-2 104's shape).
    lines = [
        "vllm-1  | (EngineCore pid=1) ERROR 10-05 02:14:25 [core.py:1010] EngineCore failed.",
        "vllm-1  | (EngineCore pid=1) Traceback (most recent call last):",
        "vllm-1  | Traceback (most recent call last):",
        'vllm-1  |   File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 1001',
        "vllm-1  |     engine_core = EngineCoreProc(*args, **kwargs)",
        "vllm-1  | ValueError: No available memory for the cache blocks.",
        "vllm-1  | hello world",
    ]
    for frames in _both(lines, tmp_path):
        other = frames["other"]
        assert other.select("line", "process", "level").rows() == [
            (1, "EngineCore", "ERROR"),
            (2, "EngineCore", None),
            (3, None, None),
            (4, None, None),
            (5, None, None),
            (6, None, None),
        ]
        assert frames["unrecognized"]["line"].to_list() == [7]  # text of unknown shape


def test_python_warnings_are_output(tmp_path: Path) -> None:
    lines = [  # round-1 corpus 066's shape (torch), and one behind a worker prefix
        "/usr/local/lib/python3.12/dist-packages/torch/utils/cpp_extension.py:2356: UserWarning: "
        "TORCH_CUDA_ARCH_LIST is not set, all archs for visible cards are included.",
        "(Worker pid=3) /x/y.py:12: FutureWarning: `foo` is deprecated",
    ]
    for frames in _both(lines, tmp_path):
        assert frames["other"].select("line", "process", "level").rows() == [
            (1, None, None),
            (2, "Worker", None),
        ]
