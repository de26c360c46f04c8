"""A line too long for the follower, cut and skipped across restarts: counted once, forging none.

`serve` follows a log with exporter/follower.py and parses each chunk as exporter/service.py
does (one ParseState per file incarnation). A prompt of 3 MiB holding a vLLM record at its
middle is cut at MAX_LINE_BYTES (1 MiB); a restart in the middle of it must go on skipping,
or the record in its tail would be read as a line of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

from preemptscope.exporter.follower import (
    MAX_LINE_BYTES,
    Chunk,
    FileCheckpoint,
    FileFollower,
    FollowerCheckpoint,
)
from preemptscope.ingest.logs import ParseOptions, ParseState, parse_lines
from preemptscope.ingest.schema import LogFrames

OPTIONS = ParseOptions(year=2025)
HEADER = "(APIServer pid=1) INFO 01-15 13:59:55 [logger.py:43] "
FORGED = (
    "INFO 01-15 14:00:00 [scheduler.py:1491] Sequence group e is preempted by"
    " PreemptionMode.RECOMPUTE mode because there is not enough KV cache space."
    " total_num_cumulative_preemption=5000"
)
STATS = (
    "INFO 01-15 13:59:50 [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s,"
    " Avg generation throughput: 90.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs,"
    " GPU KV cache usage: 12.5%, Prefix cache hit rate: 0.0%"
)
PREEMPTED = (
    "INFO 01-15 14:00:05 [scheduler.py:1491] Sequence group r7 is preempted by"
    " PreemptionMode.RECOMPUTE mode because there is not enough KV cache space."
    " total_num_cumulative_preemption=1"
)
LONG = 3 << 20


def _long_line() -> tuple[bytes, bytes]:
    """A 3 MiB request line in two halves; the second starts with a record of its own."""
    start = f"{HEADER}Received request chatcmpl-9: prompt: '".encode()
    first = start + b"x" * (LONG // 2 - len(start))
    second = (FORGED + " ").encode()
    second += b"y" * (LONG - len(first) - len(second) - 1) + b"'"
    assert len(first) + len(second) == LONG
    return first, second


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def _restart(follower: FileFollower, path: Path, drain_grace: float = 2.0) -> FileFollower:
    """Checkpoint (through JSON, as serve stores it), stop, start again from it."""
    saved = json.loads(json.dumps(follower.checkpoint().to_dict()))
    follower.close()
    return FileFollower(str(path), FollowerCheckpoint.from_dict(saved), drain_grace=drain_grace)


def _parse(chunks: list[Chunk], states: dict[str, ParseState]) -> list[LogFrames]:
    out = []
    for chunk in chunks:
        state = states.setdefault(chunk.incarnation, ParseState())
        out.append(
            parse_lines(
                chunk.lines,
                source="live.log",
                deployment="live",
                first_line=chunk.first_line,
                options=OPTIONS,
                state=state,
                final=False,
                cut_lengths=chunk.cut,
            )
        )
    for state in states.values():  # the service's flush of a line held back at the end
        out.append(
            parse_lines(
                [], source="live.log", deployment="live", options=OPTIONS, state=state, final=True
            )
        )
    return out


def _totals(batches: list[LogFrames]) -> tuple[int, int, int, list[str]]:
    """(preemption rows, stats rows, lines, unrecognised reasons) over all batches."""
    preemptions = sum(b["preemption_warning"].height for b in batches)
    stats = sum(b["scheduler_stats"].height for b in batches)
    lines = sum(b.accounting.lines for b in batches)
    reasons = [r for b in batches for r in b["unrecognized"]["reason"].to_list()]
    for batch in batches:
        assert batch.accounting.check(), batch.accounting
    return preemptions, stats, lines, reasons


def test_a_restart_inside_a_cut_line_goes_on_skipping_it(tmp_path: Path) -> None:
    assert MAX_LINE_BYTES == 1 << 20  # the default: 3 MiB is three times it
    log = tmp_path / "live.log"
    first, second = _long_line()
    _append(log, STATS.encode() + b"\n" + first)
    follower = FileFollower(str(log))
    chunks = follower.poll()
    assert [len(line) for chunk in chunks for line in chunk.lines] == [len(STATS)]
    checkpoint = follower.checkpoint()
    assert checkpoint.current is not None
    assert checkpoint.current.offset == len(STATS) + 1  # the cut line's start
    assert checkpoint.current.cut_read == len(first)

    follower = _restart(follower, log)
    _append(log, second + b"\n" + STATS.encode() + b"\n" + PREEMPTED.encode() + b"\n")
    chunks += follower.poll()
    follower.close()

    lines = [line for chunk in chunks for line in chunk.lines]
    assert len(lines) == 4
    assert lines[1] == first[:MAX_LINE_BYTES].decode() and lines[2:] == [STATS, PREEMPTED]
    cut = {k: v for chunk in chunks for k, v in chunk.cut.items()}
    assert cut == {2: LONG}
    preemptions, stats, total, reasons = _totals(_parse(chunks, {}))
    assert (preemptions, stats, total) == (1, 2, 4)
    assert reasons == [f"line longer than {MAX_LINE_BYTES} bytes ({LONG} bytes): cut, not parsed"]


def test_restarts_again_and_again_inside_one_cut_line(tmp_path: Path) -> None:
    log = tmp_path / "live.log"
    first, second = _long_line()
    _append(log, first)
    follower = FileFollower(str(log))
    chunks = follower.poll()
    for start in range(0, len(second), len(second) // 5 + 1):
        follower = _restart(follower, log)
        _append(log, second[start : start + len(second) // 5 + 1])
        chunks += follower.poll()
    follower = _restart(follower, log)
    _append(log, b"\n" + PREEMPTED.encode() + b"\n")
    chunks += follower.poll()
    follower.close()
    assert [chunk.first_line for chunk in chunks if chunk.lines] == [1]
    assert {k: v for chunk in chunks for k, v in chunk.cut.items()} == {1: LONG}
    preemptions, stats, total, reasons = _totals(_parse(chunks, {}))
    assert (preemptions, stats, total, len(reasons)) == (1, 0, 2, 1)


def test_a_cut_line_without_its_newline_counts_once_when_the_file_is_let_go(
    tmp_path: Path,
) -> None:
    log = tmp_path / "live.log"
    first, second = _long_line()
    _append(log, first)
    follower = FileFollower(str(log))
    chunks = follower.poll()
    follower = _restart(follower, log, drain_grace=0.0)
    _append(log, second)  # no newline: the writer stopped, the file is rotated away
    log.rename(tmp_path / "live.log.1")
    _append(log, STATS.encode() + b"\n")
    chunks += follower.poll() + follower.poll()
    follower.close()
    cut = {(chunk.incarnation, k): v for chunk in chunks for k, v in chunk.cut.items()}
    assert list(cut.values()) == [LONG]
    preemptions, stats, total, reasons = _totals(_parse(chunks, {}))
    assert (preemptions, stats, total, len(reasons)) == (0, 1, 2, 1)


def test_a_checkpoint_of_an_earlier_version_still_loads() -> None:
    entry = FileCheckpoint(dev=1, inode=2, offset=3, line=4, fingerprint="ab", fp_len=2, key="k")
    old = {k: v for k, v in entry.to_dict().items() if k != "cut_read"}
    assert FileCheckpoint.from_dict(old) == entry and entry.cut_read == 0
