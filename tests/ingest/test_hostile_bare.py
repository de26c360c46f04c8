"""Lines in which no record can start are settled without the per-line path's reading.

ingest/_cues.starts_no_record marks lines with a kind literal in which no record can start,
alone or as a hard-wrap's first half joined with the lines after it; the per-line path then
only checks whether such a line continues the one before (ingest/_lines.parse_odd_lines). A
file of 4 KB lines of `1.{non-default args: '` cost ~0.2 ms a line before (docs/benchmarks.md,
adversarial section). Here every batch is also parsed with the mark off: the frames must agree,
including for lines a join with the next one makes a record (the shapes the mark leaves out).
"""

from __future__ import annotations

import re

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _cues, _envelope, _glue
from preemptscope.ingest import catalogue as cat

from .test_hostile_routing import FILLER, _frames

CONFIG = "non-default args: {'max_num_seqs': 8}"
PIECES = st.sampled_from(
    [
        *sorted(_glue.KIND_LITERALS),
        FILLER,
        CONFIG,
        "Sequence group x is preempted by SWAP mode",
        "Avg prompt throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs,",
        " GPU KV cache usage: 1.0%",
        "Avg prompt thro",
        "ughput: 1.0 tokens/s,",
        "Engine 000: ",
        "GPU KV cache size: 10 tokens",
        "INFO ",
        "INFO: ",
        "INF",
        "O: ",
        "ERR",
        "OR:x:",
        "(EngineCore pid=1) ",
        " pid=1) ",
        " pi",
        "d=1) ",
        "01-15 14:00:00 ",
        "01-15 14:0",
        "0:00 [a.py:1] ",
        "[a.py:1] ",
        "[a.py:1]",
        ":1] ",
        "2024-01-01 00:00:00 - INFO - ",
        "2024",
        "-01-01 00:00:00 - INFO - ",
        "web-1  | ",
        "web-1 | ",
        "Jan  1 00:00:00 host ",
        "proc[12]: ",
        "ValueError: ",
        "Traceback (most recent call last):",
        "[rank0]: ",
        "  ",
        "# ",
        "▎ ",
        "1.{",
        "'",
        "x",
        " ",
        "(",
        ")",
        "[",
        "-",
        "7",
        "A",
        "\x1b[0m",
        "{",
    ]
)
LINES = st.lists(st.lists(PIECES, max_size=7).map("".join), min_size=1, max_size=6)


def _no_mark(text: pl.Series) -> pl.Series:
    return pl.Series([False] * text.len(), dtype=pl.Boolean)


def _unmarked(monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> dict[str, object]:
    with monkeypatch.context() as patch:
        patch.setattr(_cues, "starts_no_record", _no_mark)
        return _frames(lines)


@settings(max_examples=500, deadline=None)
@given(LINES)
def test_settled_lines_agree_with_the_per_line_path(lines: list[str]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _frames(lines) == _unmarked(monkeypatch, lines)


LONG = " and more text of a prompt that someone wrote into the log"


@pytest.mark.parametrize(
    ("lines", "kind"),
    [
        # The bench class: nothing, whatever follows.
        (["1.{non-default args: '" * 8, "1.{non-default args: '" * 8], None),
        # A process prefix the next line completes (`Name` ... ` pid=1) INFO ... `).
        (["Foo non-default args: x" + LONG, " pid=1) INFO ... " + CONFIG], "config"),
        # ... but not with a name longer than any process name (ingest/_envelope.py bounds it).
        (["Foo non-default args: x" * 20, " pid=1) INFO ... " + CONFIG], None),
        # A foreign timestamp the next line completes.
        (
            ["x non-default args: y" + LONG + " 2024", "-01-01 00:00:00 - INFO - " + CONFIG],
            "config",
        ),
        # A vLLM header the next line completes.
        (["1.{non-default args: x" + LONG + " 01-15 14:0", "0:00 [a.py:1] " + CONFIG], "config"),
        # A level word the next line completes (Python's basic format).
        (["1.{non-default args: x" + LONG + " I", "NFO:vllm:" + CONFIG], "config"),
        # A row's head behind symbols, completed by the next line.
        (["# non-default args: x" + LONG, "tail"], None),
        (["▎ Avg prompt throughput: 1.0 tokens/s," + LONG, " Running: 1 reqs"], "scheduler_stats"),
    ],
)
def test_joins_the_mark_leaves_to_the_per_line_path(
    monkeypatch: pytest.MonkeyPatch, lines: list[str], kind: str | None
) -> None:
    got = _frames(lines)
    assert got == _unmarked(monkeypatch, lines)
    kinds = {k for k in got if k not in ("accounting", "unrecognized")}
    assert kinds == ({kind} if kind else set())


def test_the_bench_lines_are_marked() -> None:
    lines = ["1.{non-default args: '" * 186 + "\n", "x non-default args: '" * 195 + "\n"]
    assert _cues.starts_no_record(pl.Series(lines)).to_list() == [True, True]


def test_a_process_prefix_fits_in_the_bound() -> None:
    """The start of a line a process prefix may still complete (`(Name`, a nested part, `, pid`)
    is at most PROCESS_NAME_MAX characters, which _cues._PROCESS_PREFIX covers."""
    start = r"\(?" + _envelope._PROC_BOUNDED + ",? pid"
    assert _width(start) <= _envelope.PROCESS_NAME_MAX + 2


def _head(heads: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("(?:" + "|".join(heads) + ")")


@pytest.mark.parametrize(
    "row", [row for row in cat.ALL_ROWS if row.kind != "access"], ids=lambda row: row.name
)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_every_match_of_a_row_starts_with_its_head(
    row: cat.LineFormat, data: st.DataObject
) -> None:
    text = data.draw(st.from_regex(row.pattern, fullmatch=True))
    assert _head(_cues._START_HEADS).match(text)
    # Stats rows stand bare only as a record start (the next test): _classify.classify.
    if row.bare_ok and row.kind != "scheduler_stats":
        assert _head(_cues._BARE_HEADS).match(text)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_every_stats_record_starts_with_a_head(data: st.DataObject) -> None:
    text = data.draw(st.from_regex(cat.STATS_RECORD_START, fullmatch=True))
    assert _head(_cues._BARE_HEADS).match(text)


def _width(head: str) -> int:
    return int(re._parser.parse(head).getwidth()[1])  # type: ignore[attr-defined]


@pytest.mark.parametrize("head", _cues._START_HEADS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_head_is_short_or_its_prefixes_are_covered(head: str, data: st.DataObject) -> None:
    """A head match a join could complete: a proper prefix of it at the end of a line. Bounded
    heads are shorter than any line a join is tried for (less the lead); the others' proper
    prefixes, behind up to 8 symbols, match _HEAD_PREFIXES."""
    if _width(head) < 10_000:
        assert _width(head) <= _cues._HEAD_MAX
        assert _cues._HEAD_MAX + 8 < _glue.WRAP_MIN
        return
    text = data.draw(st.from_regex(head, fullmatch=True).filter(lambda t: "\n" not in t))
    lead = data.draw(st.sampled_from(["", "# ", "▎ ", "--------"]))
    for end in range(len(text)):
        assert re.match(_cues._HEAD_PREFIXES, lead + text[:end]), text[:end]
