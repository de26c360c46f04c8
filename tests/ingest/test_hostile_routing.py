"""The column-wise router's shortcuts give the records the per-line path gives.

Step 6 of ingest/_route.py marks lines unrecognised without the per-line path when nothing in
them or in the line before could make them a record; its checks (ingest/_cues.py) are staged
and gated for cost per byte on hostile lines (docs/benchmarks.md, adversarial section). Here
every batch is also parsed with that step off (every such line read by the per-line path): the
frames must agree.
Request literals are left out: a request line without its header is refused by the router on
purpose (it reads them at step 4), where the per-line path alone would match its row.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import polars as pl
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _cues, _route, _tqdm
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest.logs import ParseOptions, parse_lines

OPTIONS = ParseOptions(year=2025)
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
PIECES = st.sampled_from(
    [
        FILLER,
        "2024-01-01T00:00:00Z ",
        "x 2024-01-01 ",
        "(EngineCore pid=1) ",
        "[rank0]: ",
        "python3[12]: ",
        "Jan  1 00:00:00 host ",
        "web-1  | ",
        "{",
        '{"a": 1}',
        "INFO ",
        "INFO: ",
        "WARN",
        "01-15 14:00:00 ",
        "[a.py:1] ",
        "Avg prompt throughput: 1.0 tokens/s, ",
        "non-default args: {",
        "  ",
        "|  ",
        "Traceback (most recent call last):",
        '  File "a.py", line 1',
        "ValueError: x",
        "\x1b[32m",
        "\x1b[0m",
        "[0m",
        "#033[1m",
        "\r",
        "01-",
        "[",
        "]: ",
        "%|",
        " 50%| 1/2 [",
        "~",
        ".",
        "'",
    ]
)
LINES = st.lists(st.lists(PIECES, max_size=7).map("".join), min_size=1, max_size=6)


def _frames(lines: list[str]) -> dict[str, object]:
    frames = parse_lines(lines, source="r", deployment="r", options=OPTIONS)
    out: dict[str, object] = {}
    for kind, frame in frames.frames.items():
        if frame.height:
            out[kind] = frame.sort("line").to_dicts() if "line" in frame.columns else frame
    acc = frames.accounting
    out["accounting"] = (acc.lines, acc.parsed_lines, acc.unrecognized_lines, acc.blank_lines)
    return out


def _every_line(text: pl.Series) -> pl.Series:
    return pl.Series([True] * text.len(), dtype=pl.Boolean)


def _all_per_line(monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> dict[str, object]:
    with monkeypatch.context() as patch:
        # Every line "has an envelope cue": none is left to the column-wise unrecognised step.
        patch.setattr(_cues, "envelope_cue", _every_line)
        return _frames(lines)


# Derandomized, as test_hostile_agree is: CI runs the same examples every time (random
# searches go further in bench/hostile_search.py --agree).
@settings(max_examples=400, deadline=None, derandomize=True)
@given(LINES)
# A random run found it: a redraw of colour codes alone is blank per line, and the router read
# the line's `\r` once the codes were stripped (it then ended the line: unrecognised).
@example(["]: \r\x1b[32m"])
def test_routing_unrecognised_lines_agrees_with_the_per_line_path(lines: list[str]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _frames(lines) == _all_per_line(monkeypatch, lines)


@pytest.mark.parametrize(
    "lines",
    [
        # A broken JSON object is an envelope to the per-line path: the line after it may be
        # its hard-wrapped tail (it was unrecognised column-wise).
        ['{"x": "a long text without terminal punctuation at the end, more and more', "tail"],
        # A container timestamp behind ANSI codes, before a tail.
        ["\x1b[32m2024-01-01T00:00:00Z " + FILLER, "tail of it"],
        # A date alone names nobody: both lines unrecognised, in both paths.
        ["x 2024-01-01 " + FILLER + ".", "2024-01-01 " + FILLER + "."],
        # `{` lines are nobody's tail.
        ["2024-01-01T00:00:00Z " + FILLER, '{"log": ' + "[" * 100],
    ],
)
def test_known_routing_cases_agree(monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> None:
    assert _frames(lines) == _all_per_line(monkeypatch, lines)


# Each gate the router looks for before a costlier pattern, with that pattern: every text the
# pattern finds a match in holds the gate (or the cheap check would skip a line it matches).
GATES = [
    *((pattern, r"[\^~]|" + _cues.PLAIN_LITERALS) for _name, pattern in cat.PLAIN_LINES),
    (_cues.UVICORN_PROBE, _cues.UVICORN_LITERALS),
    (cat.HEADER_CORE, r"\] "),
    (cat.TIMESTAMP, ":"),
    (cat.TIMESTAMP, _cues.TIMESTAMP_GATE),
    (_cues.SYSLOG_PID, r"\]: "),
    (cat.ANSI_SGR_CORE, "[0-9]m"),
]


@pytest.mark.parametrize(("pattern", "gate"), GATES)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_every_match_holds_its_gate(pattern: str, gate: str, data: st.DataObject) -> None:
    text = data.draw(st.from_regex(pattern))
    assert re.search(pattern, text) and re.search(gate, text)


_CONTINUED = _route._continued


def _checked_continued(
    lone: pl.DataFrame,
    text: pl.Series,
    bare: pl.Series,
    stripped: pl.Series | None,
    before: Callable[[pl.DataFrame], pl.Series],
) -> Callable[[pl.DataFrame], pl.Series]:
    """_route._continued, each answer checked against may_be_continued of every line before
    and of the one before it (what it stands for)."""
    real = _CONTINUED(lone, text, bare, stripped, before)

    def continued(others: pl.DataFrame) -> pl.Series:
        got = real(others)
        # (A redraw the router settles is judged by its text after the last `\r`.)
        up = _tqdm.redrawn(before(others.select(pl.col("line") - 1)))
        want = _cues.may_be_continued(_tqdm.redrawn(before(others)))
        want = want | _cues.may_be_continued(up)
        assert got.to_list() == want.fill_null(False).to_list()
        return got

    return continued


CONTINUED_PIECES = st.sampled_from(
    [
        FILLER,
        "Received request x: ",
        "Request ",
        "non-default args: ",
        "01-15 14:00:00 ",
        "14:00:00",
        "{",
        "\x1b[1m",
        "[1m",
        "\x1b[0m",
        "\r",
        "INFO ",
        "(EngineCore pid=1) ",
        "x.",
        "\x1b[32mx",
        "2024-01-01T00:00:00Z ",
        "  ",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(CONTINUED_PIECES, max_size=6).map("".join), min_size=1, max_size=8))
@example([FILLER, "Received request x: " + FILLER, FILLER])
@example([FILLER, "01-15 14:00:00 " + FILLER, FILLER])
@example([FILLER, "{" + FILLER, FILLER, "\x1b[32m" + FILLER, FILLER, "[1m" + FILLER, FILLER])
def test_what_step_6_knows_of_the_line_before_agrees(lines: list[str]) -> None:
    """The line before a line of no format, when step 6 read it too, is judged from what it
    found there (_route._continued): the same as may_be_continued of that line."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_route, "_continued", _checked_continued)
        _frames(lines)
