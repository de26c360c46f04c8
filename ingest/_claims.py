"""The patterns the cascade (ingest/_route.py) claims vLLM-header lines by.

The kind literals each step probes first, then what a stats or request line must be to be
claimed column-wise; `_LONG_PID` and `_REQ_LIT` serve the other steps too. Strings built from
the catalogue's rows: nothing here reads a line or holds a format of its own. A line no
pattern claims goes to the per-line path, which is the reading every claim must agree with.
"""

from __future__ import annotations

import re

from preemptscope.ingest import catalogue as cat

# Request rows whose message starts right after a vLLM header's `[file:line] `: a literal
# scan (Aho-Corasick), cheaper than a regex over a V0 log's biggest lines.
_REQ_STARTS = [f"] {row.literal}" for row in cat.REQUEST_ROWS if row.literal != "Request "]
_PY_LITERALS = sorted({row.literal for row in cat.PYTHON_ROWS})
_STATS_LITERALS = sorted({row.literal for row in cat.STATS_ROWS})
_PY_LIT = "|".join(re.escape(literal) for literal in _PY_LITERALS)
_STATS_LIT = "|".join(re.escape(literal) for literal in _STATS_LITERALS)
_REQ_LIT = "|".join(re.escape(literal) for literal in cat.REQUEST_LITERALS)
# A header whose line number fits in 64 bits (18 digits at most): the per-line path makes a
# line with a longer one unrecognised. The stats and request claims require this header;
# `other` lines, claimed by their header count, are checked for _LONG_LINENO.
_HEADER_FITS = cat.HEADER_CORE.replace(":(?:[0-9]+)\\] ", ":(?:[0-9]{1,18})\\] ")
assert _HEADER_FITS != cat.HEADER_CORE
_LONG_LINENO = r"[0-9]{19}\] "
# A stats line claimed column-wise: one record with the fields its columns read.
_STATS_VALID = (
    _HEADER_FITS
    + cat.STATS_RECORD_START
    + r"[^\n]*Running: [0-9]+ reqs[^\n]*(?:Waiting|Pending): [0-9]+ reqs"
    + r"[^\n]*KV cache usage: [0-9.]+%"
)
# A pid that may not fit in 64 bits (19 digits or more): the per-line path makes the line
# unrecognised with the reason, where the column-wise cast would give a null pid, so no claim
# takes it. One literal-led pass (~45 ns a line): cheaper than cutting the text in front of
# the header, which summary mode never does.
_LONG_PID = r" pid=[0-9]{19}"
# Stats lines whose process prefix cat.ENVELOPE reads otherwise than the per-line path: a `(`
# lost behind a wrapper, two ranks (the last one is the line's), a rank and a process prefix
# (the process wins), a pid past 64 bits.
_STATS_UNSURE = (
    rf"^{cat.no_groups(cat.WRAPPER_TS)}[A-Za-z_][^()\n]*? pid=|\[rank.*(?:\[rank| pid=)"
    rf"| pid=.*\[rank|{_LONG_PID}"
)
# A request line is claimed only where the column-wise word (ingest/_extract.py
# `_requests_frame`: up to an ASCII blank or `,`, less a trailing `.` or `:`) and the row's
# own group read the same id: one of no blank or `,` that does not end in `.` or `:` (every
# real id, `cmpl-<hex>-0`, and a client's `req.1`, `tenant:7`), an ASCII blank after it.
# Any other request line (an id with `,`, an id list, a no-break space) is read per line.
_PLAIN_ID = r"[^\s,]*[^\s:,.]"
_ROW_BLANK, _ASCII_BLANK = r"(?:\s|$)", r"(?:[\t-\r ]|$)"


def _claimed(row: cat.LineFormat) -> str:
    """`row`'s pattern with its id narrowed to _PLAIN_ID and its blank to an ASCII one."""
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
