"""The patterns the cascade (ingest/_route.py) claims vLLM-header lines by.

The kind literals each step probes first, then what a stats or request line must be to be
claimed column-wise; `_LONG_PID` and `_REQ_LIT` serve the other steps too. Strings built from
the catalogue's rows: nothing here reads a line or holds a format of its own. A line no
pattern claims goes to the per-line path, which is the reading every claim must agree with.
"""

from __future__ import annotations

import re

from preemptscope.ingest import catalogue as cat

# Request rows whose message starts right after the `[file:line] ` of a vLLM header: a
# literal check (Aho-Corasick) instead of a regex over the biggest lines of a V0 log.
_REQ_STARTS = [f"] {row.literal}" for row in cat.REQUEST_ROWS if row.literal != "Request "]
_PY_LITERALS = sorted({row.literal for row in cat.PYTHON_ROWS})
_STATS_LITERALS = sorted({row.literal for row in cat.STATS_ROWS})
_PY_LIT = "|".join(re.escape(literal) for literal in _PY_LITERALS)
_STATS_LIT = "|".join(re.escape(literal) for literal in _STATS_LITERALS)
_REQ_LIT = "|".join(re.escape(literal) for literal in cat.REQUEST_LITERALS)
# A header whose line number fits in 64 bits (18 digits at most): the per-line path makes a
# line with a longer one unrecognised with the reason, as it does a pid past 64 bits. The
# request and stats claims read the header so (no pass of their own); `other` lines, claimed
# by their header count, are checked for _LONG_LINENO.
_HEADER_FITS = cat.HEADER_CORE.replace(":(?:[0-9]+)\\] ", ":(?:[0-9]{1,18})\\] ")
assert _HEADER_FITS != cat.HEADER_CORE
_LONG_LINENO = r"[0-9]{19}\] "
_STATS_VALID = (
    _HEADER_FITS
    + cat.STATS_RECORD_START
    + r"[^\n]*Running: [0-9]+ reqs[^\n]*(?:Waiting|Pending): [0-9]+ reqs"
    + r"[^\n]*KV cache usage: [0-9.]+%"
)
# A pid that may not fit in 64 bits (19 digits or more): the per-line path makes such a line
# unrecognised with the reason (one bad line costs one line), the column-wise cast a null
# pid, so every claimed kind leaves these lines to the per-line path. One literal-led regex
# pass over a line, ~45 ns: the text in front of the header, which extraction reads once per
# distinct prefix, is not cut in summary mode (the lines are only counted there), and
# finding it costs more than this pass.
_LONG_PID = r" pid=[0-9]{19}"
# Stats lines whose process prefix cat.ENVELOPE reads apart from the per-line path: its `(`
# lost behind a wrapper, two ranks (the last one is the line's), a rank and a process prefix
# (the process wins), a pid past 64 bits.
_STATS_UNSURE = (
    rf"^{cat.no_groups(cat.WRAPPER_TS)}[A-Za-z_][^()\n]*? pid=|\[rank.*(?:\[rank| pid=)"
    rf"| pid=.*\[rank|{_LONG_PID}"
)
# The request lines claimed column-wise: a row's pattern matches right after the header with
# an id of no blank or `,` that does not end in `.` or `:` (every real id, `cmpl-<hex>-0`,
# `chatcmpl-<hex>`, and a client's `req.1`, `tenant:7`), its blank after the id an ASCII
# one: the ids the column-wise word (ingest/_extract.py `_requests_frame`: up to an ASCII
# blank or `,`, its trailing `.` and `:` dropped) and the row's own group read the same,
# since every row's end right after such an id (`: `, `.` then a blank or the end, a blank)
# is where the word ends too, less that tail. Any other request line (an id with `,`, a
# trailing dot or colon, an id list, a no-break space after it) is read per line, by its row.
_PLAIN_ID = r"[^\s,]*[^\s:,.]"
_ROW_BLANK, _ASCII_BLANK = r"(?:\s|$)", r"(?:[\t-\r ]|$)"


def _claimed(row: cat.LineFormat) -> str:
    pattern = re.sub(r"\(\?P<request_id>[^()]*\)", lambda _: f"(?:{_PLAIN_ID})", row.pattern)
    pattern = pattern.replace(_ROW_BLANK, _ASCII_BLANK)
    assert r"\s" not in pattern.replace(_PLAIN_ID, ""), row.pattern  # no other blank to read
    return pattern


_REQ_CLAIM = (
    _HEADER_FITS
    + "(?:"
    + "|".join(_claimed(row) for row in cat.REQUEST_ROWS if row.literal != "Request ")
    + ")"
)
