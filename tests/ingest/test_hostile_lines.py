"""The per-line path's cheaper forms on long bare lines give what they replaced gave.

Each rewrite (ingest/_classify.py, ingest/_lines.py, ingest/_reader.py) was made for cost per
byte on 4 KB lines of catalogue literals without a header (docs/benchmarks.md, adversarial
section): the leads a bare record may stand behind found once per message, not once per row;
the logo rows skipped when their literal is absent; a possible hard-wrap tail's envelope read
once; the reader's search for a safe cut bounded in bytes. Here only results are compared.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _classify
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._envelope import Env
from preemptscope.ingest.logs import ParseOptions, iter_parse_path, parse_lines

from .test_adversarial import HOSTILE

OPTIONS = ParseOptions(year=2025)
_EXCEPTION_LEAD = regex.compile(r"[A-Z]\w{0,60}(?:Error|Exception): ", regex.VERSION0)


def _reference_bare_match(pattern: regex.Pattern[str], message: str) -> regex.Match[str] | None:
    """_bare_match as it was (the leads matched again for every row)."""
    match = pattern.match(message)
    for lead_re in _classify.BARE_LEADS:
        if match is not None:
            break
        lead = lead_re.match(message)
        if lead is not None:
            match = pattern.match(message, lead.end())
    return match


def _reference_classify(message: str, known: bool) -> tuple[str, dict[str, Any]] | None:
    """classify as it was (for a message outside uvicorn's envelope)."""
    message = message.rstrip("\r\n")
    if _classify.STATS_START_RE.match(message) or message.startswith("Throughput: "):
        return "scheduler_stats", _classify.stats_fields(message[: _classify.STATS_BUDGET])
    for row, pattern in _classify.ROW_RES:
        if row.kind == "requests" and not known:
            continue  # (since: request rows behind a known envelope only)
        match = pattern.match(message)
        if match is None and not known and row.bare_ok:
            match = _reference_bare_match(pattern, message)
        if match is None and not known and row.kind == "kv_capacity":
            lead = _EXCEPTION_LEAD.match(message)
            match = pattern.match(message, lead.end()) if lead is not None else None
        if match is None:
            continue
        return row.kind, _classify._row_columns(row, match)
    if not known:
        start = _reference_bare_match(_classify.STATS_START_RE, message)
        if start is not None:
            text = message[start.start() :][: _classify.STATS_BUDGET]
            return "scheduler_stats", _classify.stats_fields(text)
    return None


def _comparable(found: tuple[str, dict[str, Any]] | None) -> object:
    if found is None:
        return None
    kind, columns = found
    return kind, {k: (v.text if isinstance(v, _classify._Rest) else v) for k, v in columns.items()}


MESSAGE_PIECES = st.sampled_from(
    [
        *(row.example for row in cat.ALL_ROWS if row.kind not in ("access",) and row.example),
        *(row.literal for row in cat.ALL_ROWS),
        "▎ ",
        "# ",
        "INFO ... [gpu_worker.py:489] ",
        "[a.py:1] ",
        "ValueError: ",
        "RuntimeError: ",
        "1.{",
        "x",
        " ",
        "'",
    ]
)


@settings(max_examples=600, deadline=None)
@given(st.lists(MESSAGE_PIECES, max_size=5).map("".join), st.booleans())
def test_rows_are_matched_where_they_were(message: str, known: bool) -> None:
    got = _classify.classify(message, Env(known=known))
    assert _comparable(got) == _comparable(_reference_classify(message, known))


@pytest.mark.parametrize("row", [row for row, _p in _classify.ROW_RES if not row.literal.isascii()])
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_skipped_rows_literal_is_in_every_match(row: cat.LineFormat, data: st.DataObject) -> None:
    text = data.draw(st.from_regex(row.pattern))
    match = re.search(row.pattern, text)
    assert match is not None and row.literal in match.group(0)


def test_bare_literal_lines_stay_unrecognised_in_chunks(tmp_path: Path) -> None:
    """4 KB lines that could all be a hard-wrap's first half: the reader's search for a safe
    cut gives up after 1 MiB of them; the lines parse as in one go."""
    lines = HOSTILE.lines("bare_literal", 12_000_000)  # past the 8 MiB a block may carry
    path = tmp_path / "bare.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    whole = parse_lines(lines, source=str(path), deployment="b", options=OPTIONS)
    parts = list(iter_parse_path(path, options=OPTIONS, chunk_bytes=1 << 20))
    assert len(parts) > 1
    assert sum(part.accounting.lines for part in parts) == len(lines) == whole.accounting.lines
    assert sum(part.accounting.unrecognized_lines for part in parts) == len(lines)
    reasons = {r for part in parts for r in part["unrecognized"]["reason"].to_list()}
    assert reasons == {"no known format"} and whole.accounting.unrecognized_lines == len(lines)


def test_a_hard_wrap_is_joined_after_a_line_read_as_its_possible_tail() -> None:
    """The envelope of a line read as a possible tail is reused for it: a wrapped stats record
    after a bare literal line still joins, and the bare line stays unrecognised."""
    head = "INFO 01-15 14:00:00 [loggers.py:116] Engine 000: Avg prompt throughput: 1.0 tokens/s,"
    lines = [
        "1.{non-default args: '" * 4,
        head + " Avg generation throughput: 9.0 tokens/s, Running: 3 reqs,",
        " Waiting: 0 reqs, GPU KV cache usage: 12.5%, Prefix cache hit rate: 0.0%",
    ]
    frames = parse_lines(lines, source="w", deployment="w", options=OPTIONS)
    assert frames.accounting.check()
    assert frames["scheduler_stats"].height == 1
    assert frames["scheduler_stats"]["running"].to_list() == [3]
    assert frames["unrecognized"]["line"].to_list() == [1]


ELIDED_PIECES = st.sampled_from(
    [
        "x non-default args: '",
        "(EngineCore pid=1) ",
        "EngineCore pid=1) ",
        " pid=",
        "[rank0]: ",
        "web-1  | ",
        "2024-01-01T00:00:00Z ",
        "[Stage-0] ",
        "INFO ",
        "WARNING ",
        "... ",
        "… ",
        "[...] ",
        "14:00:00 ",
        "01-15 ",
        "[a.py:1] ",
        "(",
        ")",
        "x",
        " ",
    ]
)


@settings(max_examples=600, deadline=None)
@given(st.lists(ELIDED_PIECES, max_size=8).map("".join))
def test_the_elided_header_is_looked_for_only_where_it_may_be(text: str) -> None:
    """envelope() tries the elided header only in a line with a level word, and without its
    process prefix in a line without ` pid=` (its lazy run cost ~0.16 us a byte): the same
    matches as the whole pattern everywhere."""
    from preemptscope.ingest import _envelope

    whole = _envelope.ELIDED_RE.match(text)
    if not any(word in text for word in _envelope._LEVEL_WORDS):
        assert whole is None
        return
    if " pid=" in text:
        return
    part = _envelope._ELIDED_NO_PID_RE.match(text)
    assert (whole is None) == (part is None)
    if whole is not None and part is not None:
        assert whole.span() == part.span()
        assert whole.groupdict() == part.groupdict()
