"""Year and zone inference: wrapper > JSON asctime > --year/--start > mtime, Dec → Jan."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from preemptscope.ingest._time import SMALL_FRAME
from preemptscope.ingest.logs import ParseOptions, parse_lines, parse_path

from preemptscope.errors import ConfigError

from .conftest import ERA_LOGS

STATS = (
    "INFO {md} {hms} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
    "generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: "
    "1.0%, Prefix cache hit rate: 0.0%"
)


def _stamps(lines: list[str], options: ParseOptions) -> list[datetime]:
    frames = parse_lines(lines, source="t", deployment="t", options=options)
    return list(frames["scheduler_stats"]["timestamp"].to_list())


def test_rollover_with_year_option() -> None:
    stamps = parse_path(ERA_LOGS / "year_rollover.log", options=ParseOptions(year=2025))[
        "scheduler_stats"
    ]["timestamp"].to_list()
    assert [t.year for t in stamps] == [2025, 2026, 2026]


def test_mtime_anchors_year_and_rollover(tmp_path: Path) -> None:
    path = tmp_path / "dep.log"
    path.write_text((ERA_LOGS / "year_rollover.log").read_text())
    mtime = datetime(2027, 1, 2, tzinfo=UTC).timestamp()
    os.utime(path, (mtime, mtime))
    frames = parse_path(path)
    assert frames.year_source == "mtime"
    assert [t.year for t in frames["scheduler_stats"]["timestamp"].to_list()] == [2026, 2027, 2027]


def test_start_option_picks_the_closest_year() -> None:
    lines = [STATS.format(md="12-31", hms="23:00:00")]
    start = datetime(2030, 1, 1, 0, 30, tzinfo=UTC)
    (stamp,) = _stamps(lines, ParseOptions(start=start))
    assert stamp == datetime(2029, 12, 31, 23, 0, tzinfo=UTC)


def test_timezone_option_converts_to_utc() -> None:
    lines = [STATS.format(md="07-01", hms="12:00:00")]
    (stamp,) = _stamps(lines, ParseOptions(year=2025, tz="America/New_York"))
    assert stamp == datetime(2025, 7, 1, 16, 0, tzinfo=UTC)
    frames = parse_lines(lines, source="t", deployment="t", options=ParseOptions(tz="Asia/Tokyo"))
    assert frames.timezone == "Asia/Tokyo"


def test_unknown_timezone_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Mars/Olympus"):
        ParseOptions(tz="Mars/Olympus")


def test_wrapper_year_beats_option_and_handles_new_year() -> None:
    line = "2026-01-01T00:00:05.000000000Z " + STATS.format(md="12-31", hms="16:00:05")
    frames = parse_lines([line], source="t", deployment="t", options=ParseOptions(year=1999))
    assert frames.year_source == "wrapper"
    (stamp,) = frames["scheduler_stats"]["timestamp"].to_list()
    assert stamp == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)


def test_json_asctime_carries_its_year() -> None:
    line = (
        '{"asctime": "2031-03-04 05:06:07,890", "levelname": "WARNING", "name": "vllm", '
        '"processName": "EngineCore", "process": 7, "message": "Sequence group 5 is preempted by '
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
        'total_num_cumulative_preemption=1"}'
    )
    frames = parse_lines([line], source="t", deployment="t")
    row = frames["preemption_warning"].row(0, named=True)
    assert row["timestamp"] == datetime(2031, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
    assert (row["process"], row["pid"], row["level"]) == ("EngineCore", 7, "WARNING")
    assert frames.year_source == "json"


@pytest.mark.parametrize("tz", ["UTC", "Europe/Berlin"])
def test_big_batches_date_like_small_ones(tz: str) -> None:
    # Batches above SMALL_FRAME rows parse each run of one local time once and spread it over
    # the run; smaller ones parse every row. Runs that come back (a time seen, another, then
    # the first again), a day change and a DST change must date the same either way.
    times = ["03-29 01:59:59", "03-29 01:59:59", "03-29 03:00:00", "03-29 01:59:59"]
    times += [
        f"03-29 {h:02d}:{m:02d}:{s:02d}"
        for h in (4, 23)
        for m in (0, 15, 30, 45, 59)
        for s in range(60)
    ]
    times += ["03-30 00:00:00"] * 3
    lines = [
        f"(APIServer pid=1) INFO {t} [logger.py:49] Received request r{i}: params: x."
        for i, t in enumerate(times)
    ]
    assert len(lines) > SMALL_FRAME
    options = ParseOptions(year=2026, tz=tz)
    big = parse_lines(lines, source="x.log", deployment="d", options=options)["requests"]
    small = [
        parse_lines(lines[i : i + 100], source="x.log", deployment="d", options=options)[
            "requests"
        ]["timestamp"]
        for i in range(0, len(lines), 100)
    ]
    assert big.height == len(lines)
    assert big["timestamp"].to_list() == [t for part in small for t in part.to_list()]
