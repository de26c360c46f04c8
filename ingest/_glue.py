"""Records glued on one physical line, terminal hard-wraps and Ray's repeated lines.

What the per-line path (ingest/_lines.py) does about lines that are not one record each:
where a physical line holds several records (a paste that lost its newlines), whether a line
looks cut by a terminal wrap and the next one may be its tail, and Ray's `[repeated Nx across
cluster]` suffix. Apart because these rules decide what may become a record at all: a cut is
made only after the server's own records, never inside a request line's text.
"""

from __future__ import annotations

from typing import Any

import regex
from preemptscope.ingest import _reader
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._classify import record, stats_complete
from preemptscope.ingest._envelope import FLAGS, HEADER_CORE_RE, clean, has_envelope, record_start

RAY_REPEAT_RE = regex.compile(cat.RAY_REPEAT, FLAGS)
KIND_LITERALS = tuple({row.literal for row in cat.ALL_ROWS if row.kind != "access"})
TERMINAL = tuple(_reader.TERMINAL)
# A hard-wrapped record is only joined when the first part is at least this long.
WRAP_MIN = _reader.WRAP_MIN


# Kinds a glued record may follow: what they print is the server's own text. A request line
# (its prompt, params, token ids, output, even its id from an X-Request-Id header) and an
# unknown message may hold anyone's text: a header inside them is data, never a cut.
_GLUE_AFTER = frozenset({"scheduler_stats", "preemption_warning", "kv_capacity", "config"})


def split_glued(text: str) -> list[str]:
    """Split records glued on one physical line (newlines lost in a paste) at vLLM headers.

    A cut is made only after a complete record of a kind in _GLUE_AFTER with a known
    envelope; the first segment that is anything else runs to the end of the line.
    """
    # Lazily: a request line full of fake headers ends at its first one, so a prompt of
    # back-to-back headers costs no record_start per header.
    # Every header ends in `] `: without one (after the first), no scan (of the rest).
    if "] " not in text:
        return [text]
    headers = HEADER_CORE_RE.finditer(text)
    first = next(headers, None)
    if first is None or text.find("] ", first.end()) < 0:
        return [text]
    segments: list[str] = []
    begin = 0
    for header in headers:
        cut = record_start(text, header.start())
        head = text[begin:cut]
        env, _message, found = record(head)
        if not env.known or found is None or found[0] not in _GLUE_AFTER:
            break
        if found[0] == "scheduler_stats" and not stats_complete(found[1]):
            break
        if head.strip(cat.SPACES):
            segments.append(head)
        begin = cut
    segments.append(text[begin:])
    return segments


def incomplete(kind_columns: tuple[str, dict[str, Any]] | None, text: str) -> bool:
    """A record that looks cut by a terminal wrap: worth joining with the next line."""
    if kind_columns is None:
        return any(literal in text for literal in KIND_LITERALS) and len(text) >= WRAP_MIN
    kind, columns = kind_columns
    return kind == "scheduler_stats" and not stats_complete(columns) and len(text) >= WRAP_MIN


def ray_repeat(text: str) -> tuple[str, int]:
    """The line without Ray's `[repeated Nx across cluster]` suffix, and how many lines it
    stands for (1 without the suffix)."""
    if cat.RAY_REPEAT_LITERAL not in text:
        return text, 1
    # The suffix ends the line: only its last start can match (one pass, whatever the text).
    start = text.rfind(" [repeated ")
    match = RAY_REPEAT_RE.fullmatch(text, start) if start >= 0 else None
    if match is None:
        return text, 1
    return text[:start], max(1, int(match.group("repeat")))


def is_continuation(previous: str, text: str) -> bool:
    """A hard-wrapped tail of a long record on the previous line (counted with that record)."""
    prev = clean(previous)
    if not open_ended(prev) or not has_envelope(prev):
        return False
    return not has_envelope(text)


_ACCESS_END_RE = regex.compile(cat.ACCESS_REQUEST + r"(?: [A-Za-z' -]*)?$", FLAGS)


def open_ended(text: str) -> bool:
    """A long line that does not end its record: no final punctuation, not an access line."""
    if len(text) < WRAP_MIN or text.endswith(TERMINAL):
        return False
    return _ACCESS_END_RE.search(text) is None
