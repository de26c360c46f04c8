"""Request rows taken apart column-wise (`_requests_frame`: byte offsets, anchored regexes
without captures) give what the rules say, written line by line in plain Python here: the
lead words at the start of the message and the id after them, however long (the extraction
looks in the first 200 characters, and again in the whole message where an id may run past
them), the `(streaming delta)` suffix right after the id; and bulk rows of a batch dated by
its one year give what the row-by-row dating gives."""

from __future__ import annotations

import re

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from preemptscope.ingest import _time
from preemptscope.ingest import logs as ingest_logs
from preemptscope.ingest._extract import _ascii, _header_rows, _requests_frame
from preemptscope.ingest._time import SMALL_FRAME
from preemptscope.ingest.logs import ParseOptions, parse_lines

_LEADS = {
    "Received request": "received",
    "Added request": "added",
    "Finished request": "finished",
    "Aborted request": "aborted",
    "Generated response": "generated",
    "Request": "aborted",
}
_LEAD_RE = re.compile("(" + "|".join(_LEADS) + r")(?:\(s\))? ")
# Up to an ASCII blank or `,`; the format's `:` or `.` after it dropped.
_ID_RE = re.compile(r"[^\t-\r ,]*")
_DELTA = " (streaming delta):"


def _expected(raw: str, msg_at: int | None) -> tuple[str | None, str | None]:
    """(event, request_id) of a request line by the rules, from its message offset."""
    if msg_at is None:
        return None, None
    head = raw[msg_at:]
    head = head[1:] if head.startswith(" ") else head
    lead = _LEAD_RE.match(head)
    if lead is None:
        return None, None
    after = head[lead.end() :]
    rid = _ID_RE.match(after)
    assert rid is not None
    event = _LEADS[lead.group(1)]
    if event == "generated" and after[rid.end() : rid.end() + len(_DELTA)] == _DELTA:
        event = "delta"
    return event, rid.group().rstrip(".:")


_PREFIXES = ["", "(APIServer pid=1) ", "[a] (APIServer pid=2) ", "сервис | ", "x] "]
_ENVELOPES = [
    "INFO 01-15 14:00:00 [logger.py:43]",
    "INFO 01-15 14:00:01 [async_llm.py:347]",
    "DEBUG 12-31 23:59:59 logger.py:43]",
]
_WORDS = [*_LEADS, "Received  request", "received request", "Generated responses", ""]
# Ids as clients and engines spell them, and as a prompt or damage could: dots, dashes,
# non-ASCII, tabs and no-break spaces (no delimiter), brackets, a delimiter at once.
_ID = st.one_of(
    st.text(alphabet="abc-._:é日\t\u00a0\x1c]()", max_size=12),
    st.sampled_from(["chatcmpl-1", "cmpl-9-0", "r1.", "r1..", "a,b", "é.", "t:7", "t:", ""]),
    st.integers(150, 230).map(lambda n: "i" * n),  # around the 200-character limit
)
_TAILS = st.sampled_from(
    [
        "",
        ".",
        ": prompt: 'Generated response x (streaming delta):'",
        " (streaming delta): output: 'a'",
        " (streaming delta)",
        " (streaming complete): output: 'a'",
        ",b.",
        "\r",
        ":",
        " é (streaming delta):",
    ]
)
_LINE = st.tuples(
    st.sampled_from(_PREFIXES),
    st.sampled_from(_ENVELOPES),
    st.sampled_from([" ", "  ", ""]),
    st.sampled_from(_WORDS),
    st.sampled_from(["", "(s)"]),
    st.sampled_from([" ", ""]),
    _ID,
    _TAILS,
).map(lambda parts: "".join(parts))


def _check(raw: list[str]) -> None:
    sub = pl.DataFrame({"raw": raw, "line": list(range(1, len(raw) + 1))})
    got = _requests_frame(sub)
    offsets = _header_rows(sub, _ascii(sub), False)["_msg_at"].to_list()
    expected = [_expected(text, at) for text, at in zip(raw, offsets, strict=True)]
    assert got["event"].to_list() == [event for event, _ in expected]
    assert got["request_id"].to_list() == [rid for _, rid in expected]


@settings(max_examples=60, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=30), st.booleans())
def test_request_rows_follow_the_rules(lines: list[str], many: bool) -> None:
    # Repeated past SMALL_FRAME, the distinct-envelope path runs; else the direct one.
    _check(lines * (SMALL_FRAME // len(lines) + 2) if many else lines)


def test_request_row_shapes() -> None:
    head = "(APIServer pid=1) INFO 01-15 14:00:00 [logger.py:43] "
    lines = [
        head + "Generated response r1 (streaming delta): output: 'a'",
        head + "Generated response r1: output: 'b (streaming delta):'",
        head + "Generated response é-1 (streaming delta): x",
        head + "Aborted request(s) a,b.",
        head + "Finished request r1..",
        head + "Received request " + "i" * 190 + ": prompt: 'x'",  # id past 200 characters
        head + "Generated response " + "i" * 181 + " (streaming delta): x",  # suffix past them
        head + "Generated response " + "i" * 160 + " (streaming delta): x",  # suffix within
        "сервис | " + head + "Received request é日: prompt: 'x'",
        head + "Request\tr1 aborted",
        head + "Generated response r1 (streaming complete): output: 'a'",
    ]
    _check(lines)
    _check(lines * (SMALL_FRAME // len(lines) + 2))
    got = _requests_frame(pl.DataFrame({"raw": lines, "line": list(range(1, len(lines) + 1))}))
    assert got["event"].to_list()[:3] == ["delta", "generated", "delta"]
    assert got["event"].to_list()[6:8] == ["delta", "delta"]
    assert got["event"][-1] == "generated"
    # An id whole past the first 200 characters (a client's `X-Request-Id` may be long).
    assert got["request_id"][5] == "i" * 190


# Dating: stats records among request lines, months that go back (a new year), wrapper times.
_STATS = (
    "INFO {t} [loggers.py:116] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Running: 1 reqs, Waiting: 0 reqs"
)
_REQUEST = "(APIServer pid=1) INFO {t} [logger.py:43] Received request r{n}: prompt: 'x'"
_WRAPPED = "2026-01-01T00:00:0{s}.5Z " + _REQUEST
_TIME = st.sampled_from(
    ["12-31 23:59:58", "12-31 23:59:59", "01-01 00:00:00", "06-30 12:00:00", "07-01 00:00:00"]
)
_ROW = st.tuples(st.sampled_from([_STATS, _REQUEST, _WRAPPED]), _TIME, st.integers(0, 9))


def _rows_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest_logs, "constant_bulk_year", lambda *args: None)


@settings(max_examples=40, deadline=None)
@given(st.lists(_ROW, min_size=1, max_size=12), st.integers(1, 3), st.booleans())
def test_one_year_batches_date_as_row_by_row(
    rows: list[tuple[str, str, int]], repeat: int, many: bool
) -> None:
    lines = [form.format(t=t, n=n, s=n) for form, t, n in rows] * repeat
    if many:  # past SMALL_FRAME: the run-length path of `stamp`
        lines = lines * (SMALL_FRAME // len(lines) + 2)
    options = ParseOptions(year=2025)
    fast = parse_lines(lines, source="s", deployment="d", options=options)
    with pytest.MonkeyPatch.context() as patch:
        _rows_by_row(patch)
        slow = parse_lines(lines, source="s", deployment="d", options=options)
    for kind in ("requests", "scheduler_stats"):
        assert_frame_equal(fast[kind], slow[kind])


def test_constant_bulk_year_refuses_a_new_year() -> None:
    marks = pl.DataFrame(
        {"line": [1], "_year": [2025], "_m": [12]},
        schema={"line": pl.Int64, "_year": pl.Int32, "_m": pl.Int32},
    )
    december = pl.Series(["12", "12"])
    assert _time.constant_bulk_year([december], marks, (2025, 12)) == 2025
    # January after a December record is the next year; so is a record of another year.
    assert _time.constant_bulk_year([pl.Series(["12", "01"])], marks, (2025, 12)) is None
    assert _time.constant_bulk_year([december], marks, (2024, 12)) is None
    assert _time.constant_bulk_year([pl.Series(["1x"])], marks, (2025, 12)) is None


def test_glued_records_of_one_line_date_alike_in_batches() -> None:
    # Two stats records glued on one line, the first with a container time of another year:
    # the line's first record dates it, in one go as in batches (hypothesis found the case).
    stats = (
        "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 "
        "tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%"
    )
    lines = [
        "(APIServer pid=1) INFO 11-07 08:51:02 [async_llm.py:470] Request r1 aborted.",
        "",
        "2026-05-12T08:01:39.331095044Z (APIServer pid=1) INFO 05-12 08:01:39 "
        f"[loggers.py:271] {stats} INFO 06-16 10:03:14 [loggers.py:87] {stats}",
    ]
    options = ParseOptions(year=2025)
    whole = parse_lines(lines, source="s", deployment="d", options=options)
    state = ingest_logs.ParseState()
    parse_lines(lines[:1], source="s", deployment="d", options=options, state=state, final=False)
    rest = parse_lines(
        lines[1:], source="s", deployment="d", first_line=2, options=options, state=state
    )
    assert whole["scheduler_stats"].height == 2
    assert_frame_equal(rest["scheduler_stats"], whole["scheduler_stats"])
