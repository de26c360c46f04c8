"""The per-line path: rare kinds and damaged lines, with the `regex` module, in line order.

The vectorised path (ingest/_route.py, ingest/_extract.py) handles well-formed common lines.
Everything else comes here: preemption, KV-sizing and config lines (rare, rich payloads),
JSON-formatted lines, foreign logging formats, records glued on one physical line, terminal
hard-wraps, and lines nobody recognises (which end up in `unrecognized`). Both paths read the
same catalogue rows. This module is the driver: each line's envelope (_envelope.py), its
kind and columns (_classify.py), glue, wraps and repeats (_glue.py), and the rows it gives.
It never decides which lines come here (the router does).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import regex
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._classify import (
    BARE_LEADS,
    fill_rests,
    out_of_range,
    record,
    stats_complete,
)
from preemptscope.ingest._envelope import (
    FLAGS,
    Env,
    clean,
    envelope,
    has_envelope,
    names_writer,
)
from preemptscope.ingest._glue import (
    incomplete,
    is_continuation,
    open_ended,
    ray_repeat,
    split_glued,
)
from preemptscope.ingest.prompts import DETAILS_LITERAL, PROMPT_LITERAL

PLAIN_RES = [regex.compile(pattern, FLAGS) for _name, pattern in cat.PLAIN_LINES]
FRAME_RE = regex.compile(cat.TRACEBACK_FRAME, FLAGS)
RAY_TOO_MANY = f"Ray repeat count above {cat.RAY_REPEAT_MAX}"


# The reason of an unrecognised line that no catalogue row or envelope fits.
NO_FORMAT = "no known format"


@dataclass
class Parsed:
    """Records found in the per-line path, as plain rows per frame kind."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unrecognized: list[tuple[int, str, str]] = field(default_factory=list)  # line, text, reason
    parsed_lines: int = 0
    blank_lines: int = 0
    # (line, message) of the request lines that may show prompt ids (ingest/prompts.py).
    prompts: list[tuple[int, str]] = field(default_factory=list)

    def add(self, kind: str, row: dict[str, Any]) -> None:
        self.rows.setdefault(kind, []).append(row)


def _base(env: Env) -> dict[str, Any]:
    return {
        "process": env.process,
        "pid": env.pid,
        "level": env.level,
        "_mon": env.mon,
        "_day": env.day,
        "_hms": env.hms,
        "_wts": env.wts,
        "_ats": env.ats,
        "_bulk": False,
    }


def _emit(
    out: Parsed, line: int, env: Env, message: str, found: tuple[str, dict[str, Any]] | None
) -> None:
    base = {"line": line, **_base(env)}
    if PROMPT_LITERAL in message and (
        (found is None and DETAILS_LITERAL in message)
        or (found is not None and found[1].get("event") == "received")
    ):
        out.prompts.append((line, message.rstrip("\r\n")))
    if found is None:
        out.add(
            "other",
            {
                **base,
                "logger_file": env.file,
                "logger_line": env.lineno,
                "message": message.rstrip("\r\n"),
            },
        )
        return
    kind, columns = found
    many = columns.pop("_many", None)
    if many is None:
        out.add(kind, {**base, **columns})
    else:
        for item in many:
            out.add(kind, {**base, **item})


def _plain(message: str, previous: str | None) -> bool:
    """A line without an envelope that is plainly output: a traceback or a progress bar."""
    message = message.rstrip("\r\n")
    if any(pattern.match(message) for pattern in PLAIN_RES):
        return True
    # After a few symbols a paste put in front (a quote bar `▎ `), as records are (_bare_match).
    lead = BARE_LEADS[0].match(message)
    if lead is not None and lead.group().strip():
        rest = message[lead.end() :].lstrip(" ")
        if any(pattern.match(rest) for pattern in PLAIN_RES):
            return True
    # The code line of a traceback frame follows its `  File "…", line N` line.
    if previous is None or not message.startswith("  "):
        return False
    _env, before = envelope(clean(previous))
    return FRAME_RE.match(before.rstrip("\r\n")) is not None


def _repeat_rows(out: Parsed, before: dict[str, int], times: int) -> None:
    """Copy the rows added since `before` (row counts per kind) `times - 1` more times."""
    for kind, rows in out.rows.items():
        added = rows[before.get(kind, 0) :]
        for _ in range(times - 1):
            rows.extend(dict(row) for row in added)


def parse_odd_lines(
    items: list[tuple[int, str, str | None]], settled: Collection[int] = ()
) -> Parsed:
    """Parse (line number, text, previous physical line or None) in line order.

    `settled`: numbers of lines in which no record can start, alone or as a hard-wrap's first
    half (ingest/_cues.starts_no_record): only whether one continues the line before is read.
    """
    out = Parsed()
    index = 0
    pending: tuple[str, tuple[Env, str]] | None = None
    while index < len(items):
        line, raw, previous = items[index]
        index += 1
        if line in settled:
            pending = None
            # No envelope of its own; the line before one has none either (is_continuation).
            if previous is not None and line - 1 not in settled and _continues(previous):
                out.parsed_lines += 1
            else:
                out.unrecognized.append((line, raw.rstrip("\r\n"), NO_FORMAT))
            continue
        text, times = ray_repeat(clean(raw))
        if not text.strip(cat.SPACES):  # blank as the router's `\s` reads it
            out.blank_lines += 1
            continue
        if times > cat.RAY_REPEAT_MAX:
            # Rows are copies: a count no real cluster buffers in seconds would only cost memory.
            out.unrecognized.append((line, raw.rstrip("\r\n"), RAY_TOO_MANY))
            continue
        before = {kind: len(rows) for kind, rows in out.rows.items()} if times > 1 else {}
        segments = split_glued(text)
        records: list[tuple[Env, str, tuple[str, dict[str, Any]] | None]] = []
        reason: str | None = None
        taken = 0
        for position, segment in enumerate(segments):
            # The envelope of a line read as a hard-wrap's possible tail just before.
            read = pending[1] if pending is not None and pending[0] == segment else None
            pending = None
            env, message, found = record(segment, read)
            last = position == len(segments) - 1
            # Terminal hard-wrap: join the following envelope-less lines while that helps.
            consumed = 0
            while last and incomplete(found, segment) and index + consumed < len(items):
                next_line, next_raw, _ = items[index + consumed]
                if next_line != line + consumed + 1:
                    break
                follow = clean(next_raw)
                if not follow.strip(cat.SPACES) or follow.startswith("{"):
                    break  # a JSON object (even a broken one) starts a line of its own
                pending = (follow, envelope(follow))
                if names_writer(pending[1][0]):
                    break
                joined = segment + follow
                env2, message2, found2 = record(joined)
                better = found2 is not None and (
                    found is None
                    or (found2[0] == "scheduler_stats" and stats_complete(found2[1]))
                    or (found2[0] == found[0] and found2[0] != "scheduler_stats")
                )
                if not better:
                    break
                segment, env, message, found = joined, env2, message2, found2
                consumed += 1
            # No known envelope: still output when a process prefix or a wrapper names who
            # wrote it (prints, raw tracebacks, bare `(EngineCore pid=N) ` lines) or when it
            # has a plain output shape; both become `other` with a null level.
            if (
                found is None
                and not env.known
                and env.process is None
                and not _plain(message, previous)
            ):
                continue
            reason = reason or out_of_range(env, found)
            records.append((env, message, found))
            taken = consumed
        if reason is not None:
            # One bad line costs one line: its records are dropped, the lines a hard-wrap
            # join took are read again on their own.
            out.unrecognized.append((line, raw.rstrip("\r\n"), reason))
            continue
        for env, message, found in records:
            _emit(out, line, env, message, found)
        if taken:
            index += taken
            out.parsed_lines += taken
        if records or (previous is not None and is_continuation(previous, text)):
            out.parsed_lines += 1
            if times > 1:
                _repeat_rows(out, before, times)
        else:
            out.unrecognized.append((line, raw.rstrip("\r\n"), NO_FORMAT))
    fill_rests(out.rows.get("scheduler_stats", []))
    return out


def _continues(previous: str) -> bool:
    """is_continuation(previous, text) for a text without an envelope."""
    prev = clean(previous)
    return open_ended(prev) and has_envelope(prev)


def may_continue(raw: str) -> bool:
    """Whether the next physical line could still belong to this one's record.

    True for the first half of a terminal hard-wrap (a record the join would complete) and for
    a long unterminated line (the next one may be its continuation). Batches and chunks only
    end after a line for which this is False, so they parse as one go does.
    """
    text = clean(raw)
    if not text.strip(cat.SPACES):
        return False
    if open_ended(text):
        return True
    segment = split_glued(text)[-1]
    _env, _message, found = record(segment)
    return incomplete(found, segment)
