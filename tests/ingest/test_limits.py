"""Bounded memory, whatever the input: long lines cut, gzip bombs and endless input refused."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
from preemptscope.exporter import follower as follower_module
from preemptscope.exporter.follower import FileFollower
from preemptscope.ingest.logs import ParseOptions, ReadLimits, parse_lines, parse_path

from preemptscope.errors import InputError

from .test_hostile import PREEMPT, REAL_STATS, received

OPTIONS = ParseOptions(year=2025)
SMALL = ReadLimits(max_line_bytes=4096)


def _log(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "long.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("size", [5_000, 200_000])
def test_a_long_line_is_cut_counted_and_reading_goes_on(tmp_path: Path, size: int) -> None:
    # Its tail holds a record: nothing past the cut is read as a line of its own.
    long = received("x" * size + " " + PREEMPT)
    path = _log(tmp_path, [REAL_STATS, long, REAL_STATS])
    frames = parse_path(path, options=OPTIONS, limits=SMALL)
    assert frames.accounting.check() and frames.accounting.lines == 3
    assert frames["scheduler_stats"]["line"].to_list() == [1, 3]
    assert frames["preemption_warning"].height == 0 and frames["requests"].height == 0
    unrec = frames["unrecognized"].row(0, named=True)
    assert unrec["line"] == 2 and len(unrec["text"].encode()) == 4096
    assert f"({len(long)} bytes)" in unrec["reason"]


def test_a_long_line_across_small_chunks_is_cut_by_the_reader(tmp_path: Path) -> None:
    from preemptscope.ingest.logs import iter_parse_path

    long = "y" * 300_000 + PREEMPT
    path = _log(tmp_path, [REAL_STATS, long, REAL_STATS, long])
    parts = list(iter_parse_path(path, options=OPTIONS, chunk_bytes=8192, limits=SMALL))
    first = parts[0]
    for part in parts[1:]:
        first.extend(part)
    assert first.accounting.lines == 4 and first.accounting.check()
    assert first["scheduler_stats"]["line"].to_list() == [1, 3]
    assert first["unrecognized"]["line"].to_list() == [2, 4]
    assert all(f"({len(long)} bytes)" in r for r in first["unrecognized"]["reason"])


def test_lines_cut_by_a_caller_keep_their_real_length() -> None:
    frames = parse_lines(
        [REAL_STATS, "z" * 4096, REAL_STATS],
        source="s",
        deployment="s",
        options=OPTIONS,
        limits=SMALL,
        cut_lengths={2: 9_999_999},
    )
    assert frames["unrecognized"]["reason"].to_list() == [
        "line longer than 4096 bytes (9999999 bytes): cut, not parsed"
    ]


def test_a_gzip_bomb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.log.gz"
    path.write_bytes(gzip.compress((b"0" * 99 + b"\n") * 800_000))
    with pytest.raises(InputError, match="gzip bomb"):
        parse_path(path, options=OPTIONS)
    small = ReadLimits(gzip_max_bytes=1 << 20)
    with pytest.raises(InputError, match="more than 1048576 bytes"):
        parse_path(path, options=OPTIONS, limits=small)


def test_an_ordinary_gzip_log_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ok.log.gz"
    path.write_bytes(gzip.compress(("\n".join([REAL_STATS] * 50) + "\n").encode()))
    assert parse_path(path, options=OPTIONS)["scheduler_stats"].height == 50


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_endless_input_ends_with_a_clear_error() -> None:
    with pytest.raises(InputError, match="endless input"):
        parse_path("/dev/zero", options=OPTIONS, limits=ReadLimits(endless_bytes=8 << 20))
    env = {**os.environ, "PREEMPTSCOPE_MAX_ENDLESS_BYTES": str(8 << 20)}
    done = subprocess.run(
        [sys.executable, "-m", "preemptscope", "parse", "/dev/zero", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "/dev/zero" in done.stderr and "endless input" in done.stderr


def test_the_follower_skips_the_rest_of_a_cut_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follower_module, "MAX_LINE_BYTES", 4096)
    log = tmp_path / "live.log"
    log.write_text(REAL_STATS + "\n" + "p" * 6000, encoding="utf-8")
    follower = FileFollower(str(log))
    chunks = follower.poll()
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(" " + PREEMPT + "\n" + REAL_STATS + "\n")
    chunks += follower.poll()
    lines = [line for chunk in chunks for line in chunk.lines]
    assert len(lines) == 3 and lines[1] == "p" * 4096 and lines[2] == REAL_STATS
    cut = {k: v for chunk in chunks for k, v in chunk.cut.items()}
    assert list(cut) == [2]
    frames = parse_lines(
        lines, source="l", deployment="l", options=OPTIONS, limits=SMALL, cut_lengths=cut
    )
    assert frames["preemption_warning"].height == 0
    assert frames["unrecognized"]["line"].to_list() == [2]
