"""uvicorn's access lines (the cascade's step 1), and which envelope opens a line.

A line's first envelope is its envelope: the per-line path (_envelope.envelope) reads the
first one, and whatever follows it is that message's text. Here: the one pattern that claims
the common access line, the verdicts on the other lines with uvicorn's access literals, and
the check that sends a line whose vLLM header may stand behind another envelope to the
per-line path. Nothing here extracts columns (ingest/_extract.py `_access_frame` does) or
claims a line the per-line path could read otherwise.
"""

from __future__ import annotations

import re

import polars as pl
from preemptscope.ingest import _cues, _envelope
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._claims import _LONG_PID
from preemptscope.ingest._extract import _BLANKS, _chars

# uvicorn's access literals: ` HTTP/` and, around the client, `INFO:` and ` - "`.
_ACCESS_HTTP, _ACCESS_LEVEL, _ACCESS_DASH = " HTTP/", "INFO:", ' - "'
# The three literals in this order, one DFA pass. Out of order they are no access line: the
# client is read between `INFO:` and ` - "` (_dash_after_level).
_ACCESS_FAST = "(?s)" + ".*".join(re.escape(x) for x in (_ACCESS_LEVEL, _ACCESS_DASH, _ACCESS_HTTP))
# What may stand before a line's envelope that opens no envelope itself: docker's time and a
# process prefix, at most.
_LINE_OPENING = (
    r"^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?Z )?"
    r"(?:\([A-Za-z_][A-Za-z0-9_]{0,60} pid=[0-9]{1,18}\) )?"
)
# The common access line, claimed by this one pattern (one DFA pass, ~200 ns a line) because
# ACCESS_ROW per line and `_access_frame` read it alike: `INFO:` after _LINE_OPENING, an IP
# client (lowercase hex), the request, the status and its phrase to the line's end. Nothing in
# it can open another envelope first (a `LEVEL:` in the path comes after the access logger's);
# no digit, `:` or `[` in the phrase, no header, no pid past 64 bits.
_ACCESS_CANON = (
    _LINE_OPENING
    + r'INFO: +[0-9a-f.:\[\]]+ - "[A-Z]+ [!-~]+ HTTP/[0-9.]+" [0-9]{3}(?: [A-Za-z\' -]*)?\r?\n?$'
)
# _access_verdicts' answers: claim column-wise, down the cascade, to the per-line path.
_CLAIM, _CASCADE, _PER_LINE = 0, 1, 2
# The access logger's `INFO:` opening the line: the `INFO:` `_access_frame` reads after.
_ACCESS_FIRST = _LINE_OPENING + _ACCESS_LEVEL + " "
# Every level word a foreign envelope or uvicorn's holds. A line with one alone (the access
# logger's) holds no envelope but uvicorn's, unless as `[time] INFO: `.
_LEVEL_WORDS = "DEBUG|INFO|WARN|ERROR|CRITICAL|TRACE"
_TWO_LEVEL_WORDS = rf"(?:{_LEVEL_WORDS}).*(?:{_LEVEL_WORDS})"
# An access line the per-line path may read otherwise, unless its `INFO:` opens it: a second
# level word, a pid past 64 bits, a bracketed foreign time in front of the level.
_ACCESS_UNSURE = rf"{_TWO_LEVEL_WORDS}|{_LONG_PID}|\] (?:[^ ]+ )?INFO: "
# `_access_frame`'s client: a word behind ASCII blanks (`\s` to both engines), then a pid.
# Unsure: a first character that is neither blank nor printable ASCII (the engines' `\s`
# may differ on it), or a stats record (`Throughput: `).
_CLIENT = rf"^[{_BLANKS}]+[!-~][^ ]*(?: [0-9]+)?$"
_CLIENT_UNSURE = rf"^[{_BLANKS}]*[^ -~{_BLANKS}]|^[{_BLANKS}]*Throughput:"
_ACCESS_TAIL = "^" + cat.ACCESS_REQUEST
# A vLLM header that opens the line (after _LINE_OPENING and its level): no envelope can
# start in front of it.
_HEADER_OPENS = _LINE_OPENING + f"(?:(?:{'|'.join(cat.LEVELS)}) )?" + cat.HEADER_CORE
_OWN_LEVEL = f"(?:{'|'.join(cat.LEVELS)}) $"
# In front of a header, what may open another envelope (every foreign envelope and uvicorn's
# hold a level word) or a request's text (the header is message text then).
_NOT_FIRST = "|".join([_LEVEL_WORDS, *(re.escape(x) for x in cat.REQUEST_LITERALS)])
# uvicorn's level opening the line: no envelope can start before it.
_UVICORN_FIRST = _LINE_OPENING + cat.UVICORN_LEVEL + " "


def _access_verdicts(text: pl.Series) -> pl.Series:
    """For lines with uvicorn's access literals in order, no header and their first ` - "`
    after their first `INFO:`: claim (_CLAIM: ACCESS_ROW reads the line per line with the
    columns `_access_frame` gives), down the cascade (_CASCADE: no access line per line),
    or per line (_PER_LINE: another reading may be the per-line path's)."""
    raw = pl.col("raw")
    info = _chars(raw, raw.str.find(_ACCESS_LEVEL, literal=True).cast(pl.Int64), False)
    dash = _chars(raw, raw.str.find(_ACCESS_DASH, literal=True).cast(pl.Int64), False)
    client = raw.str.slice(info + 5, dash - info - 5)
    # Behind the access logger's `INFO:` at the line's start, a level word, a bracket or a
    # pid in the client is the client's text: no envelope can start before it.
    unsure = (
        (raw.str.len_bytes() > _envelope.RECORD_BUDGET)
        | (raw.str.contains(_ACCESS_UNSURE) & ~raw.str.contains(_ACCESS_FIRST))
        | client.str.contains(_CLIENT_UNSURE)
    )
    fits = client.str.contains(_CLIENT) & raw.str.slice(dash).str.contains(_ACCESS_TAIL)
    return (
        pl.DataFrame({"raw": text})
        .select(
            pl.when(unsure)
            .then(_PER_LINE)
            .when(fits)
            .then(_CLAIM)
            .otherwise(_CASCADE)
            .cast(pl.Int8)
        )
        .to_series()
    )


def _dash_after_level(text: pl.Series) -> pl.Series:
    """Lines whose first ` - "` follows their first `INFO:`: `_access_frame` reads the client
    between the two, so no other line is an access line."""
    info = text.str.find(_ACCESS_LEVEL, literal=True)
    return (text.str.find(_ACCESS_DASH, literal=True) > info).fill_null(False)


def _header_not_first(text: pl.Series, headers: pl.Series) -> pl.Series:
    """Lines with a vLLM header (`headers`: their count) in front of which another envelope
    or a request's text may start (_NOT_FIRST), checked where the header does not open the
    line. Such a header is message text (a prompt logged in any format, a client from
    X-Forwarded-For): the line goes per line. Any level word but the header's own counts, so
    this sends more lines than needed, never fewer."""
    odd = _cues.both(headers > 0, text, lambda sub: ~sub.str.contains(_HEADER_OPENS))

    def in_front(sub: pl.Series) -> pl.Series:
        # The first header's start by the DFA (`find`), the text before it a byte slice: a
        # capture of the lazy run in front costs ~27 ns a byte on 100 KB lines.
        at = sub.str.find(cat.HEADER_CORE)
        head = pl.lit(sub).cast(pl.Binary).bin.slice(0, at).cast(pl.String)
        before = pl.select(pl.when(at.is_not_null()).then(head)).to_series()
        return before.str.replace(_OWN_LEVEL, "").str.contains(_NOT_FIRST).fill_null(False)

    return _cues.both(odd, text, in_front)
