"""Chunked, threaded reading gives the same frames as one batch; summary mode counts agree."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from preemptscope.ingest._reader import iter_chunks, safe_cut
from preemptscope.ingest.logs import SUMMARY, ParseOptions, iter_parse_path, parse_lines
from preemptscope.ingest.schema import LogFrames

from .conftest import CORPUS, ERA_LOGS

OPTIONS = ParseOptions(year=2025)
BENCH = Path(__file__).resolve().parents[2] / "bench"


def _combined(parts: list[LogFrames]) -> LogFrames:
    first = parts[0]
    for part in parts[1:]:
        first.extend(part)
    return first


def _rows(frames: LogFrames) -> dict[str, list[str]]:
    return {kind: sorted(map(repr, frame.rows())) for kind, frame in frames.frames.items()}


@pytest.fixture(scope="module")
def mixed_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every fixture and corpus file, one after another, as one log."""
    path = tmp_path_factory.mktemp("mixed") / "mixed.log"
    sources = [*sorted(ERA_LOGS.glob("*.log")), *sorted(CORPUS.glob("*.log"))]
    path.write_bytes(b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in sources))
    return path


@pytest.mark.parametrize("chunk_bytes", [150, 5000])
def test_small_chunks_equal_one_batch(mixed_log: Path, chunk_bytes: int) -> None:
    lines = mixed_log.read_text(encoding="utf-8").splitlines()
    whole = parse_lines(lines, source=str(mixed_log), deployment="mixed", options=OPTIONS)
    parts = list(
        iter_parse_path(
            mixed_log, deployment="mixed", options=OPTIONS, chunk_bytes=chunk_bytes, workers=2
        )
    )
    assert len(parts) > 1
    streamed = _combined(parts)
    assert streamed.accounting == whole.accounting
    assert _rows(streamed) == _rows(whole)


def test_summary_mode_counts_equal_full_counts(mixed_log: Path) -> None:
    full = _combined(list(iter_parse_path(mixed_log, options=OPTIONS, chunk_bytes=900)))
    summary = _combined(
        list(iter_parse_path(mixed_log, options=OPTIONS, chunk_bytes=900, keep=SUMMARY))
    )
    assert summary.record_counts() == full.record_counts()
    assert summary.accounting == full.accounting
    assert summary["requests"].height == 0 and summary.summarized["access"] > 0
    assert summary["scheduler_stats"].equals(full["scheduler_stats"])


def test_chunks_end_after_complete_records() -> None:
    wrapped = b"x" * 80 + b"\n" + b"tail.\n" + b"y" * 90 + b"\n" + b"rest"
    buffer = bytearray(wrapped)
    cut = safe_cut(buffer, len(buffer))
    # Not after the 90-char unterminated line (it may continue), but after "tail.".
    assert buffer[: cut + 1].endswith(b"tail.\n")
    assert safe_cut(bytearray(b"no newline"), 10) == -1


def test_chunks_cover_the_file(mixed_log: Path) -> None:
    data = mixed_log.read_bytes()
    assert b"".join(bytes(c) for c in iter_chunks(str(mixed_log), 333)) == data


def test_generated_bench_log_is_fully_understood(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("gen_logs", BENCH / "gen_logs.py")
    assert spec is not None and spec.loader is not None
    gen_logs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_logs)
    path = tmp_path / "gen.log"
    gen_logs.generate(str(path), 3.0, seed=7)
    text = path.read_text(encoding="utf-8")
    frames = _combined(list(iter_parse_path(path, chunk_bytes=256 * 1024)))
    assert frames.accounting.check()
    assert frames.accounting.unrecognized_lines == 0
    assert frames["preemption_warning"].height == text.count("is preempted by")
    assert frames["scheduler_stats"].height == text.count("Avg prompt throughput")
    assert frames["access"].height == text.count(' HTTP/1.1" ')
    # The generated log crosses New Year's Eve: timestamps keep increasing.
    stamps = frames["scheduler_stats"]["timestamp"].drop_nulls()
    assert stamps.is_sorted()


def test_crlf_line_endings_parse_like_lf(tmp_path: Path) -> None:
    source = ERA_LOGS / "v1_v033_envelopes.log"
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(source.read_bytes().replace(b"\n", b"\r\n"))
    lf = _combined(list(iter_parse_path(source, deployment="d", options=OPTIONS)))
    cr = _combined(list(iter_parse_path(crlf, deployment="d", options=OPTIONS)))
    assert cr.accounting == lf.accounting
    for kind in lf.frames:
        assert cr[kind].drop("source").equals(lf[kind].drop("source")), kind


def test_empty_and_blank_inputs(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert list(iter_parse_path(empty)) == []
    blank = tmp_path / "blank.log"
    blank.write_bytes(b"\n   \n\t\r\n")
    (frames,) = list(iter_parse_path(blank))
    assert frames.accounting.lines == 3 and frames.accounting.blank_lines == 3
