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
# uvicorn's access shape: its three literals in this order, in one DFA pass. Out of order
# they are no access line (`WARNING: … - "GET / HTTP/1.1" … INFO:` made the client's slice
# negative: a crash).
_ACCESS_FAST = "(?s)" + ".*".join(re.escape(x) for x in (_ACCESS_LEVEL, _ACCESS_DASH, _ACCESS_HTTP))

# The common access line, read as ACCESS_ROW reads it per line and as `_access_frame` does:
# docker's time, `(Name pid=N) `, `INFO:`, spaces, an IP client, the request, the status and
# its phrase, to the end of the line (its newline too). Nothing in it can be another
# envelope: a `LEVEL:` in the path (a client's query string, `?INFO:a:b`) comes after the
# access logger's, and the per-line path reads a line's first envelope (_envelope.envelope);
# no digit, `:` or `[` in the phrase; a lowercase client; no header (no digit after the
# status); no pid past 64 bits.
# One DFA pass (~200 ns a line) on the lines with uvicorn's access literals in order, in
# place of the literal scans and finds the other shapes take.
_LINE_OPENING = (  # docker's time and a process prefix, at most
    r"^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?Z )?"
    r"(?:\([A-Za-z_][A-Za-z0-9_]{0,60} pid=[0-9]{1,18}\) )?"
)
_ACCESS_CANON = (
    _LINE_OPENING
    + r'INFO: +[0-9a-f.:\[\]]+ - "[A-Z]+ [!-~]+ HTTP/[0-9.]+" [0-9]{3}(?: [A-Za-z\' -]*)?\r?\n?$'
)
_CLAIM, _CASCADE, _PER_LINE = 0, 1, 2
# A vLLM header opening the line after the common prefixes (docker's time, a process prefix):
# no envelope can start in front of it.
_HEADER_OPENS = _LINE_OPENING + f"(?:(?:{'|'.join(cat.LEVELS)}) )?" + cat.HEADER_CORE
_OWN_LEVEL = f"(?:{'|'.join(cat.LEVELS)}) $"
# In front of the header, what may start another envelope (every foreign envelope and
# uvicorn's hold a level word) or a request's text (_envelope.envelope reads the header as
# message text then).
_NOT_FIRST = "|".join(
    ["DEBUG|INFO|WARN|ERROR|CRITICAL|TRACE", *(re.escape(x) for x in cat.REQUEST_LITERALS)]
)
# uvicorn's level opening the line: no envelope can start before it.
_UVICORN_FIRST = _LINE_OPENING + cat.UVICORN_LEVEL + " "
# The access logger's `INFO:` opening the line: the `INFO:` `_access_frame` reads after.
_ACCESS_FIRST = _LINE_OPENING + _ACCESS_LEVEL + " "
# Every level word a foreign envelope or uvicorn's may hold: with one alone (the access
# logger's), no envelope but uvicorn's can be read in the line but `[time] INFO: `.
_LEVEL_WORDS = "DEBUG|INFO|WARN|ERROR|CRITICAL|TRACE"
# What the per-line path does not read as `_access_frame` does, or reads as another record:
# a line past the per-line budget, a second level word, a pid past 64 bits, a bracketed
# foreign time in front of the level, a stats record (`Throughput: `).
_TWO_LEVEL_WORDS = rf"(?:{_LEVEL_WORDS}).*(?:{_LEVEL_WORDS})"
_ACCESS_UNSURE = rf"{_TWO_LEVEL_WORDS}|{_LONG_PID}|\] (?:[^ ]+ )?INFO: "
# `_access_frame`'s client word behind ASCII blanks (`\s` to both engines), then a pid; a
# first character that is none of them nor printable ASCII (`\s` may differ on it), a stats
# start (`Throughput: `).
_CLIENT = rf"^[{_BLANKS}]+[!-~][^ ]*(?: [0-9]+)?$"
_CLIENT_UNSURE = rf"^[{_BLANKS}]*[^ -~{_BLANKS}]|^[{_BLANKS}]*Throughput:"
_ACCESS_TAIL = "^" + cat.ACCESS_REQUEST


def _header_not_first(text: pl.Series, headers: pl.Series) -> pl.Series:
    """Lines with a vLLM header (`headers`: their count) in front of which another envelope
    or a request's text may start (see _NOT_FIRST): checked only where the header does not
    open the line."""
    odd = _cues.both(headers > 0, text, lambda sub: ~sub.str.contains(_HEADER_OPENS))

    def in_front(sub: pl.Series) -> pl.Series:
        # The first header's start by the DFA (`find`), the text before it a byte slice: a
        # capture of the lazy run in front (`^([^\n]*?)<header>`) cost ~27 ns a byte of 100 KB
        # lines, 5x a normal log per MB.
        at = sub.str.find(cat.HEADER_CORE)
        head = pl.lit(sub).cast(pl.Binary).bin.slice(0, at).cast(pl.String)
        before = pl.select(pl.when(at.is_not_null()).then(head)).to_series()
        return before.str.replace(_OWN_LEVEL, "").str.contains(_NOT_FIRST).fill_null(False)

    return _cues.both(odd, text, in_front)


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
    """Lines whose first ` - "` follows their first `INFO:`: the positions `_access_frame`
    reads the client between (a ` - "` in front of `INFO:` made its slice negative: a
    crash)."""
    info = text.str.find(_ACCESS_LEVEL, literal=True)
    return (text.str.find(_ACCESS_DASH, literal=True) > info).fill_null(False)
