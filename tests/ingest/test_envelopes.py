"""Column-wise extraction's shortcuts give what the full work gives: the envelope columns of
bulk lines once per distinct envelope (`_header_columns` against `_header_rows`), and stats
numbers checked only on lines that could hold one that does not fit."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from preemptscope.ingest._extract import (
    _STATS_EXTRACT,
    _ascii,
    _header_columns,
    _header_rows,
    _stats_frames,
    _stats_invalid,
)
from preemptscope.ingest._time import SMALL_FRAME

# Lines with one vLLM header whose envelope repeats, and the shapes where the text up to the
# first `] ` is no envelope: a `] ` in a prefix, a location past the 160 bytes looked at, a
# non-ASCII prefix, a `]` in the level's place.
_PREFIXES = [
    "",
    "(APIServer pid=1) ",
    "2025-01-15T14:00:00.123456789Z (APIServer pid=1) ",
    "[rank0]: ",
    "[a] (EngineCore_0 pid=7) ",
    "vllm-1  | ] x ",
    "сервис | (APIServer pid=2) ",
    "(VllmWorker rank=0 pid=9) ",
]
_LEVELS = ["INFO ", "WARNING ", "DEBUG ", ""]
_TIMES = ["01-15 14:00:00 ", "01-15 14:00:01 ", "12-31 23:59:59 "]
_LOCATIONS = ["[logger.py:43] ", "[async_llm.py:347] ", "logger.py:43] ", f"[{'x' * 170}.py:1] "]
_MESSAGES = [
    "Received request r1: prompt: 'a] b 01-15 14:00:00 [x.py:1] c'",
    "Added request r1-abc.",
    "Finished request r1.",
    "é] é",
    "",
]


def _lines(picks: list[tuple[int, int, int, int, int]]) -> pl.DataFrame:
    raw = [
        _PREFIXES[p] + _LEVELS[v] + _TIMES[t] + _LOCATIONS[loc] + _MESSAGES[m]
        for p, v, t, loc, m in picks
    ]
    return pl.DataFrame({"raw": raw, "line": list(range(1, len(raw) + 1))})


_PICK = st.tuples(
    st.integers(0, len(_PREFIXES) - 1),
    st.integers(0, len(_LEVELS) - 1),
    st.integers(0, len(_TIMES) - 1),
    st.integers(0, len(_LOCATIONS) - 1),
    st.integers(0, len(_MESSAGES) - 1),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(_PICK, min_size=1, max_size=40), st.booleans())
def test_distinct_envelopes_give_each_lines_columns(
    picks: list[tuple[int, int, int, int, int]], locations: bool
) -> None:
    # Repeated past SMALL_FRAME, so the distinct-envelope path runs.
    frame = _lines(picks * (SMALL_FRAME // len(picks) + 2))
    ascii = _ascii(frame)
    assert frame.height > SMALL_FRAME
    slow = _header_rows(frame, ascii, locations)
    # Told whether the lines are ASCII, or not (the request path: envelopes cut as bytes).
    for told in (ascii, None):
        fast = _header_columns(frame, told, locations)
        assert_frame_equal(fast, slow.select(fast.columns))


@pytest.mark.parametrize("locations", [True, False])
def test_every_shape_at_once(locations: bool) -> None:
    picks = [
        (p, v, t, loc, m)
        for p in range(len(_PREFIXES))
        for v in range(len(_LEVELS))
        for t in range(len(_TIMES))
        for loc in range(len(_LOCATIONS))
        for m in range(len(_MESSAGES))
    ]
    frame = _lines(picks)
    ascii = _ascii(frame)
    fast = _header_columns(frame, ascii, locations)
    slow = _header_rows(frame, ascii, locations)
    assert_frame_equal(fast, slow.select(fast.columns))
    assert_frame_equal(_header_columns(frame, None, locations), fast)
    # Some lines' first `] ` is no envelope, and some envelopes have no message offset.
    assert fast["_msg_at"].null_count() > 0
    assert (
        fast.filter(pl.col("raw").str.starts_with("[a] "))["level"].null_count()
        < fast.filter(pl.col("raw").str.starts_with("[a] ")).height
    )


# Numbers as a prompt, a damaged line or another locale could print them.
_NUMBER = st.one_of(
    st.text(alphabet="0123456789..١٣１", min_size=1, max_size=24),
    st.integers(10**16, 10**21).map(str),  # around Int64's 19 digits
    st.sampled_from([".", "..", "1.", ".5", "0.0", "1.2.3"]),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(_NUMBER, _NUMBER, _NUMBER, _NUMBER), min_size=1, max_size=8))
def test_stats_numbers_skip_checks_only_when_they_fit(
    rows: list[tuple[str, str, str, str]],
) -> None:
    # `_stats_frames` checks only lines that could hold a number that does not fit: what it
    # rejects is what checking every line rejects.
    raw = [
        f"(APIServer pid=1) INFO 12-31 20:00:10 [loggers.py:123] Engine {engine}: Avg prompt "
        f"throughput: {prompt} tokens/s, Avg generation throughput: 1.0 tokens/s, Running: "
        f"{running} reqs, Waiting: 0 reqs, GPU KV cache usage: {usage}%, Prefix cache hit "
        "rate: 0.0%"
        for engine, prompt, running, usage in rows
    ]
    frame = pl.DataFrame({"raw": raw, "line": list(range(1, len(raw) + 1))})
    stats, rejected = _stats_frames(frame)
    message = pl.col("raw").str.extract_groups(_STATS_EXTRACT).struct.field("msg")
    every = frame.select(pl.col("line"), _stats_invalid(message).alias("invalid"))
    expected = every.filter(pl.col("invalid").is_not_null())
    assert rejected["line"].to_list() == expected["line"].to_list()
    assert rejected["reason"].to_list() == [f"number not valid: {r}" for r in expected["invalid"]]
    assert sorted(stats["line"].to_list() + rejected["line"].to_list()) == frame["line"].to_list()
