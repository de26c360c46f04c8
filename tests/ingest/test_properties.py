"""Property tests: nothing crashes, every line is accounted for, batches equal one go."""

from __future__ import annotations

import itertools

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._reader import split_lines
from preemptscope.ingest.logs import ParseOptions, ParseState, parse_lines
from preemptscope.ingest.schema import FRAME_SCHEMAS, LogFrames

from .conftest import CORPUS, ERA_LOGS

REAL_LINES = [
    line
    for path in [*sorted(CORPUS.glob("*.log")), *sorted(ERA_LOGS.glob("*.log"))]
    for line in path.read_text(encoding="utf-8").splitlines()
] + [row.example for row in cat.ALL_ROWS]
OPTIONS = ParseOptions(year=2025)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(frames: LogFrames, lines: int) -> None:
    acc = frames.accounting
    assert acc.lines == lines
    assert acc.parsed_lines + acc.unrecognized_lines + acc.blank_lines == lines
    for kind, schema in FRAME_SCHEMAS.items():
        assert frames[kind].schema == schema


@st.composite
def mutated_lines(draw: st.DrawFn) -> list[str]:
    picks = draw(st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=12))
    out = []
    for line in picks:
        action = draw(st.sampled_from(["keep", "cut", "drop_head", "glue", "insert", "wrap"]))
        if action == "cut" and line:
            line = line[: draw(st.integers(0, len(line)))]
        elif action == "drop_head" and line:
            line = line[draw(st.integers(0, len(line))) :]
        elif action == "glue":
            line = line + " " + draw(st.sampled_from(REAL_LINES))
        elif action == "insert":
            at = draw(st.integers(0, len(line)))
            line = line[:at] + draw(st.text(max_size=8)) + line[at:]
        elif action == "wrap" and len(line) > 10:
            at = draw(st.integers(1, len(line) - 1))
            out.append(line[:at])
            line = line[at:]
        out.append(line)
    return out


@SETTINGS
@given(st.binary(max_size=2000))
def test_random_bytes_never_crash(data: bytes) -> None:
    lines = split_lines(data).str.strip_suffix("\n").to_list()
    frames = parse_lines(
        [line or "" for line in lines], source="r", deployment="r", options=OPTIONS
    )
    _check(frames, len(lines))


@SETTINGS
@given(mutated_lines())
def test_mutated_real_lines_never_crash_and_add_up(lines: list[str]) -> None:
    lines = [line.replace("\n", " ") for line in lines]
    frames = parse_lines(lines, source="m", deployment="m", options=OPTIONS)
    _check(frames, len(lines))


def _comparable(frames: LogFrames) -> dict[str, list[str]]:
    return {
        kind: sorted(repr(row) for row in frame.rows()) for kind, frame in frames.frames.items()
    }


@SETTINGS
@given(mutated_lines(), st.lists(st.integers(0, 40), max_size=4))
def test_batches_with_state_equal_one_go(lines: list[str], cuts: list[int]) -> None:
    lines = [line.replace("\n", " ").replace("\r", " ") for line in lines]
    whole = parse_lines(lines, source="b", deployment="b", options=OPTIONS)
    state = ParseState()
    bounds = sorted({min(c, len(lines)) for c in cuts} | {0, len(lines)})
    combined: LogFrames | None = None
    for start, end in itertools.pairwise(bounds):
        part = parse_lines(
            lines[start:end],
            source="b",
            deployment="b",
            first_line=start + 1,
            options=OPTIONS,
            state=state,
            final=end == len(lines),
        )
        if combined is None:
            combined = part
        else:
            combined.extend(part)
    assert combined is not None
    assert combined.accounting == whole.accounting
    assert _comparable(combined) == _comparable(whole)


def test_split_lines_keeps_every_line() -> None:
    data = b"a\n\nb\r\n\xff\xfec\nlast"
    lines = split_lines(data)
    assert lines.to_list() == ["a\n", "\n", "b\r\n", "\ufffd\ufffdc\n", "last"]
    assert split_lines(b"").len() == 0
    assert isinstance(lines, pl.Series)
