"""The per-line path: rare kinds and damaged lines, with the `regex` module.

The vectorised path in logs.py handles well-formed common lines. Everything else comes here,
in line order: preemption, KV-sizing and config lines (rare, rich payloads), JSON-formatted
lines, foreign logging formats, records glued on one physical line, terminal hard-wraps,
and lines nobody recognises (which end up in `unrecognized`). Both paths read the same
catalogue rows.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import regex
from preemptscope.ingest import _reader
from preemptscope.ingest import catalogue as cat

_FLAGS = regex.VERSION0

# Linear time, whatever the line: no pattern here has a lazy run before another run or a
# quantified group inside a quantified group; the envelope is found in steps (a wrapper at the
# start, the first vLLM header by search, the process prefix by walking back from ` pid=`).
# cat.ANSI_ESC then cat.ANSI_SGR (stdlib `re`, which skips to a literal start in C; the
# `regex` module tried the optional prefix at every character: 8-14 ms a MB of ordinary
# text, 170 ms on `[[[[`). Linear: `(?:;[0-9]{1,3})*` repeats after a `;` it must consume.
_ANSI_ESC_RE = re.compile(cat.ANSI_ESC)
_SGR = cat.ANSI_SGR_CORE
_ANSI_SGR_RE = re.compile(rf"#033{_SGR}|\^\[{_SGR}|{_SGR}")  # cat.ANSI_SGR, literal first
_ANSI_PROBE_RE = re.compile(_SGR)  # in every match of _ANSI_SGR_RE
WRAPPER_RE = regex.compile(rf"^{cat.WRAPPER_TS}", _FLAGS)
TIMESTAMP_RE = regex.compile(cat.TIMESTAMP, _FLAGS)
# The header from its timestamp on (the level in front is checked by hand): searching the
# whole header costs its optional level group at every character of a long line.
_HEADER_AT_RE = regex.compile(cat.HEADER[cat.HEADER.index("(?P<mon>") :], _FLAGS)
HEADER_CORE_RE = regex.compile(cat.HEADER_CORE, _FLAGS)
# Timestamps are looked for with stdlib `re` (an ASCII pattern: the same matches; its scan of
# `01-01-01...` runs is ~2x faster), each checked by _HEADER_AT_RE; after _STAMP_TRIES that
# start no header, one search for the first place where both match (a Python step per such
# timestamp cost ~26 ns a byte on runs of `01-15 14:00:00   File`, 19 so; the lookahead
# search alone is slower than the loop over `01-` runs: 84 ns a byte, where the loop's
# timestamp scan costs 18).
_TIMESTAMP_STD_RE = re.compile(cat.TIMESTAMP)
_HEADER_SEARCH_RE = regex.compile(f"(?={cat.TIMESTAMP}){_HEADER_AT_RE.pattern}", _FLAGS)
_STAMP_TRIES = 32
UVICORN_LEVEL_RE = regex.compile(r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+", _FLAGS)
# After ` pid=`: the rest of a process prefix, then text without parentheses up to the header.
_PID_TAIL_RE = regex.compile(r" pid=(?P<pid>\d{1,20})(?:, ip=[^)\n]{0,100})?\)", _FLAGS)
_NO_PARENS_RE = regex.compile(r"[^()\n]*\Z", _FLAGS)
_RANK_RE = regex.compile(r"\[(?P<rank>rank\d{1,9})\]: ?", _FLAGS)
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_MAX = 200
ELIDED_RE = regex.compile(cat.ELIDED_ENVELOPE, _FLAGS)
SYSLOG_RE = regex.compile(cat.SYSLOG, _FLAGS)
COMPOSE_RE = regex.compile(rf"^(?:{cat.WRAPPER_TS})?(?P<compose>{cat.COMPOSE})", _FLAGS)
COMPOSE_ONLY_RE = regex.compile(cat.COMPOSE, _FLAGS)
PLAIN_RES = [regex.compile(pattern, _FLAGS) for _name, pattern in cat.PLAIN_LINES]
FRAME_RE = regex.compile(cat.TRACEBACK_FRAME, _FLAGS)
RAY_REPEAT_RE = regex.compile(cat.RAY_REPEAT, _FLAGS)
RAY_TOO_MANY = f"Ray repeat count above {cat.RAY_REPEAT_MAX}"
# A line that starts with a process prefix but has no header (a worker's print, a traceback).
_PROCESS_AT_RE = regex.compile(
    r"(?:\((?P<proc>[A-Za-z_][^()\n]{0,200}?(?:\([^()\n]{0,60}\)[^()\n]{0,60}?)?),?"
    r" pid=(?P<pid>\d{1,20})(?:, ip=[^)\n]{0,100})?\) ?|\[(?P<rank>rank\d{1,9})\]: ?)",
    _FLAGS,
)
FOREIGN_RES = [(env, regex.compile(env.pattern, _FLAGS)) for env in cat.FOREIGN_ENVELOPES]
# One of these is in every match of FOREIGN_RES and UVICORN_LEVEL_RE (their level group).
_LEVEL_WORDS = ("DEBUG", "INFO", "WARN", "ERROR", "CRITICAL", "TRACE")
# How much of a line the per-line path reads: records are short; a config payload or a prompt
# beyond this is data nobody needs to parse (and no line costs more than this much work).
RECORD_BUDGET = 64 * 1024
STATS_BUDGET = 4096  # a stats record is a few hundred bytes; its fields come first
# Real engine-config lines are 1-4 KB with the capacity keys in their first KB; the pairs
# after 16 KiB are not read (a 256 KB config-like line cost 5,000 pairs per 64 KiB).
CONFIG_BUDGET = 16 * 1024
ROW_RES = [
    (row, regex.compile(row.pattern, _FLAGS))
    for row in cat.ALL_ROWS
    if row.kind not in ("access", "scheduler_stats")
]
ACCESS_RE = regex.compile(cat.ACCESS_ROW.pattern, _FLAGS)
STATS_START_RE = regex.compile(cat.STATS_RECORD_START, _FLAGS)
STATS_FIELD_RES = [(name, regex.compile(pattern, _FLAGS)) for name, pattern in cat.STATS_FIELDS]
STATS_KNOWN_RE = regex.compile(cat.STATS_KNOWN_FIELDS, _FLAGS)
KIND_LITERALS = tuple({row.literal for row in cat.ALL_ROWS if row.kind != "access"})
TERMINAL = tuple(_reader.TERMINAL)
# A hard-wrapped record is only joined when the first part is at least this long.
WRAP_MIN = _reader.WRAP_MIN


@dataclass
class Env:
    """What the envelope around one message said."""

    process: str | None = None
    pid: int | None = None
    level: str | None = None
    mon: str | None = None
    day: str | None = None
    hms: str | None = None
    wts: str | None = None  # container timestamp (RFC3339, zoned)
    ats: str | None = None  # absolute local time with year (JSON / foreign formats)
    file: str | None = None
    lineno: int | None = None
    known: bool = False  # a recognised log envelope (vLLM, uvicorn, foreign, JSON)


# The reason of an unrecognised line that no catalogue row or envelope fits.
NO_FORMAT = "no known format"


@dataclass
class Parsed:
    """Records found in the per-line path, as plain rows per frame kind."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unrecognized: list[tuple[int, str, str]] = field(default_factory=list)  # line, text, reason
    parsed_lines: int = 0
    blank_lines: int = 0

    def add(self, kind: str, row: dict[str, Any]) -> None:
        self.rows.setdefault(kind, []).append(row)


def _num(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value.replace(",", ""))
    except ValueError:
        return None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.replace(",", ""))
    except ValueError:
        return None


def _fraction(percent: str | None) -> float | None:
    """A percentage as a fraction, computed as Polars does (x * 0.01) so both paths agree."""
    value = _num(percent)
    return None if value is None else value * 0.01


def _commas(text: str) -> str:
    """Runs of commas and the whitespace around them as one `, ` (the vectorised path's
    `(?:\\s*,\\s*)+` replace, without a regex that backtracks on long whitespace runs)."""
    if "," not in text:
        return text
    pieces = text.split(",")
    kept = [piece.strip() if 0 < i < len(pieces) - 1 else piece for i, piece in enumerate(pieces)]
    first, last = kept[0].rstrip(), kept[-1].lstrip()
    middle = [piece for piece in kept[1:-1] if piece]
    return ", ".join([first, *middle, last]) if len(pieces) > 1 else text


def stats_fields(message: str) -> dict[str, Any]:
    """Known fields of one stats record (fractions for percentages); the rest kept as `extra`."""
    found: dict[str, str | None] = {}
    for name, pattern in STATS_FIELD_RES:
        match = pattern.search(message)
        found[name] = match.group(1) if match else None
    pending = found.pop("pending_marker") is not None
    era: str | None = None
    if pending or found["swapped"] is not None:
        era = "v0"
    elif found["waiting"] is not None or found["engine"] is not None:
        era = "v1"
    gpu = _fraction(found["gpu_kv_cache_usage"])
    cpu = _fraction(found["cpu_kv_cache_usage"]) if era == "v0" else None
    generation = _num(found["generation_throughput"])
    if generation is None:
        generation = _num(found["throughput_v01"])
    ints, floats = cat.STATS_INT_FIELDS, cat.STATS_FLOAT_FIELDS
    # A field whose text is there but is no number of its column (`1.2.3`, 400 digits):
    # out_of_range makes the line unrecognised, as the vectorised path does.
    invalid = next(
        (
            name
            for name in (*ints, *floats)
            if found[name] is not None
            and (_int(found[name]) if name in ints else _num(found[name])) is None
        ),
        None,
    )
    return {
        "_invalid": invalid,
        "era": era,
        "engine": _int(found["engine"]),
        "prompt_throughput": _num(found["prompt_throughput"]),
        "generation_throughput": generation,
        "running": _int(found["running"]),
        "waiting": _int(found["waiting"]),
        "swapped": _int(found["swapped"]),
        "deferred": _int(found["deferred"]),
        "preemptions": _int(found["preemptions"]),
        "kv_device": found["kv_device"],
        "gpu_kv_cache_usage": gpu,
        "cpu_kv_cache_usage": cpu,
        "prefix_cache_hit_rate": _fraction(found["prefix_cache_hit_rate"]),
        "external_prefix_cache_hit_rate": _fraction(found["external_prefix_cache_hit_rate"]),
        "mm_cache_hit_rate": _fraction(found["mm_cache_hit_rate"]),
        # The rest after the known fields: computed for a batch's rows at once (_fill_rests).
        "extra": _Rest(message),
    }


@dataclass(frozen=True)
class _Rest:
    """A stats record's text whose `extra` (what is left after the known fields) is due."""

    text: str


# Above this many bytes of stats text in one batch, Polars removes the known fields (one
# call costs ~0.3 ms, then ~1 ns a byte); below, the `regex` module does (~5 us a record,
# but its alternation of nine fields is tried at every position: ~280 ns a byte on digits).
_REST_IN_POLARS = 32 * 1024


def _fill_rests(out: Parsed) -> None:
    """Set `extra` of the stats rows of `out`, with the vectorised path's steps, so both paths
    give the same `extra`."""
    rows = [row for row in out.rows.get("scheduler_stats", ()) if isinstance(row["extra"], _Rest)]
    if not rows:
        return
    texts = [row["extra"].text for row in rows]
    if sum(len(text) for text in texts) > _REST_IN_POLARS:
        known = pl.Series(texts, dtype=pl.String).str.replace_all(cat.STATS_KNOWN_FIELDS, "")
        rests = known.to_list()
    else:
        rests = [STATS_KNOWN_RE.sub("", text) for text in texts]
    for row, rest in zip(rows, rests, strict=True):
        row["extra"] = _commas(rest).strip(" ,.") or None


def stats_complete(fields: dict[str, Any]) -> bool:
    return all(fields[k] is not None for k in ("running", "waiting", "gpu_kv_cache_usage"))


# `\b`: a key is tried once per word, not at every letter of it; quoted values are bounded,
# so an unclosed quote costs 4 KiB, not the rest of the line, per key.
# stdlib `re` (findall 30 % faster than `regex` here; the same pattern, linear in both).
_PAIR_RE = re.compile(
    r"\b(?P<key>[A-Za-z_]\w{0,80})="
    r"(?P<value>'(?:[^'\\]|\\.){0,4096}'|\"(?:[^\"\\]|\\.){0,4096}\"|\[[^\]]{0,4096}\]|[^,\s)]{1,4096})"
)


# The same for the `'key': value` items of a dict literal (non-default args). Not
# ast.literal_eval of the whole payload: it costs ~0.45 us a byte (a file of such lines
# 60x a log); only the value of a capacity key, short, is evaluated.
_DICT_PAIR_RE = re.compile(
    r"'(?P<key>[A-Za-z_]\w{0,80})': "
    r"(?P<value>'(?:[^'\\]|\\.){0,4096}'|\"(?:[^\"\\]|\\.){0,4096}\"|\[[^\]]{0,4096}\]|[^,}\s]{1,4096})"
)
_EVAL_MAX = 1024


def _dict_value(text: str) -> str:
    """One value of a dict literal as str(): a one-item list as its item."""
    if len(text) > _EVAL_MAX:
        return text.strip("'\"")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text.strip("'\"")
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return str(value)


def config_pairs(origin: str, payload: str) -> dict[str, str]:
    """Capacity settings out of `key=value, ...` lists or a Python dict literal."""
    values: dict[str, str] = {}
    if origin == "non_default_args":
        last: dict[str, str] = {}  # the last one wins, as in the dict; evaluated once
        pairs = _DICT_PAIR_RE.findall(payload[:CONFIG_BUDGET])
        for key, text in [pair for pair in pairs if pair[0] in cat.CONFIG_KEYS]:
            name = cat.CONFIG_KEYS[key]
            last.pop(name, None)  # keeps the dict's order of the last occurrences
            last[name] = text
        return {name: _dict_value(text) for name, text in last.items()}
    # findall builds the (key, value) pairs in C and a comprehension drops the keys of no
    # interest: a payload of 5,000 pairs took 8.5 ms per 64 KiB with Match objects.
    pairs = _PAIR_RE.findall(payload[:CONFIG_BUDGET])
    for key, value in [pair for pair in pairs if pair[0] in cat.CONFIG_KEYS]:
        name = cat.CONFIG_KEYS[key]
        if name not in values:
            value = value.strip("'\"")
            if value not in ("None", ""):
                values[name] = value
    return values


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


def _process_name(pre: str, at: int) -> tuple[str, int] | None:
    """(name, start) of the process prefix whose ` pid=` is at `at` (one level of nested
    parentheses allowed, as in `(Llumlet(iid=1) pid=9)`), or None when it is not one."""
    end = at - 1 if at > 0 and pre[at - 1] == "," else at
    depth = 0
    index = at - 1
    low = max(-1, at - _NAME_MAX)
    while index > low:
        char = pre[index]
        if char == "\n":
            return None
        if char == ")":
            depth += 1
            if depth > 1:
                return None
        elif char == "(":
            if depth == 0:
                break
            depth -= 1
        index -= 1
    if index == -1 and depth == 0:
        start = 0  # the leading `(` lost in a paste
    elif index > low and pre[index] == "(":
        start = index + 1
    else:
        return None
    name = pre[start:end]
    if not name or name[0] not in _NAME_START or depth:
        return None
    return name, max(0, start - 1)


def _process_before(pre: str) -> tuple[str | None, int | None]:
    """The last process prefix (or `[rankN]:`) in the text in front of a message."""
    at = pre.rfind(" pid=")
    if at >= 0:
        tail = _PID_TAIL_RE.match(pre, at)
        if tail is not None and _NO_PARENS_RE.match(pre, tail.end()) is not None:
            named = _process_name(pre, at)
            if named is not None:
                return named[0].strip(), _int(tail.group("pid"))
    at = pre.rfind("[rank")
    if at >= 0:
        rank = _RANK_RE.match(pre, at)
        if rank is not None:
            return rank.group("rank"), None
    return None, None


def _find_header(text: str, pos: int) -> tuple[int, str | None, regex.Match[str]] | None:
    """The first vLLM header at or after `pos`: (start, level or None, match from the
    timestamp on)."""
    start = pos
    for _ in range(_STAMP_TRIES):
        stamp = _TIMESTAMP_STD_RE.search(text, pos)
        if stamp is None:
            return None
        match = _HEADER_AT_RE.match(text, stamp.start())
        if match is not None:
            break
        pos = stamp.start() + 1
    else:
        # Many timestamps that start no header: the rest in one search, not a step each.
        match = _HEADER_SEARCH_RE.search(text, pos)
        if match is None:
            return None
    at = match.start()
    for level in cat.LEVELS:
        if text.endswith(level + " ", start, at):
            return at - len(level) - 1, level, match
    return at, None, match


def _envelope(text: str) -> tuple[Env, str]:
    """Find the envelope; return it and the message (the whole text when there is none)."""
    text = text[:RECORD_BUDGET]
    wrapper = WRAPPER_RE.match(text)
    wts = wrapper.group("wts") if wrapper is not None else None
    begin = wrapper.end() if wrapper is not None else 0
    # Every envelope but a bare process prefix has a colon (a time, `LEVEL:`).
    colon = ":" in text
    # A vLLM header has a `]` after its location: without one, no timestamp search.
    found = _find_header(text, begin) if colon and "]" in text else None
    # Foreign envelopes and uvicorn's all hold a level word: without one, none of their six
    # searches (~7.5 ns a byte each) runs (hypothesis found `1.{non-default args: '` runs
    # at 560 ms per MB).
    levelled = colon and found is None and any(word in text for word in _LEVEL_WORDS)
    if found is not None:
        start, level, match = found
        proc, pid = _process_before(text[begin:start])
        return (
            Env(
                process=proc,
                pid=pid,
                level=level,
                mon=match.group("mon"),
                day=match.group("day"),
                hms=match.group("hms"),
                wts=wts,
                file=match.group("file"),
                lineno=_int(match.group("lineno")),
                known=True,
            ),
            text[match.end() :],
        )
    for _env, pattern in FOREIGN_RES if levelled else ():
        # From the line start: a foreign timestamp may be what looked like a wrapper's.
        match = pattern.search(text)
        if match is not None:
            groups = match.groupdict()
            inside = match.start() < begin
            proc, pid = _process_before(text[0 if inside else begin : match.start()])
            ts = groups.get("ts")
            level = groups.get("level")
            return (
                Env(
                    process=proc,
                    pid=pid,
                    level={"WARN": "WARNING", "TRACE": "DEBUG"}.get(level or "", level),
                    wts=(None if inside else wts) or (ts if ts and ts.endswith("Z") else None),
                    ats=ts if ts and not ts.endswith("Z") else None,
                    file=groups.get("file") or groups.get("logger"),
                    lineno=_int(groups.get("lineno")),
                    known=True,
                ),
                groups.get("msg") or "",
            )
    match = UVICORN_LEVEL_RE.search(text, begin) if levelled else None
    if match is not None:
        proc, pid = _process_before(text[begin : match.start()])
        return (
            Env(
                process=proc,
                pid=pid,
                level=match.group("level"),
                wts=wts,
                file="uvicorn",
                known=True,
            ),
            text[match.end() :],
        )
    match = ELIDED_RE.match(text)
    if match is not None:
        proc = match.group("proc") or match.group("rank")
        return (
            Env(
                process=proc.strip() if proc else None,
                pid=_int(match.group("pid")),
                level=match.group("level"),
                wts=match.group("wts"),
                file=match.group("file"),
                lineno=_int(match.group("lineno")),
                known=True,
            ),
            text[match.end() :],
        )
    return _process_only(text, begin, wts, wrapper is not None)


def _process_only(text: str, begin: int, wts: str | None, wrapped: bool) -> tuple[Env, str]:
    """A line with no header: a process prefix (behind a compose prefix too), a wrapper, a
    syslog prefix, or a compose prefix alone."""
    lead = len(text) - len(text[begin:].lstrip())
    process = _PROCESS_AT_RE.match(text, lead)
    if process is None:
        compose = COMPOSE_ONLY_RE.match(text, lead)
        if compose is not None:
            process = _PROCESS_AT_RE.match(text, compose.end())
    if process is not None:
        proc = process.group("proc") or process.group("rank")
        return Env(process=proc, pid=_int(process.group("pid")), wts=wts), text[process.end() :]
    if wrapped:
        return Env(wts=wts), text[begin:]
    match = SYSLOG_RE.match(text)
    if match is not None:
        return Env(process=match.group("proc"), pid=_int(match.group("pid"))), text[match.end() :]
    match = COMPOSE_RE.match(text)
    if match is not None:
        # Output of a compose service with no prefix of its own (v0.31+ raw tracebacks).
        return Env(wts=match.group("wts")), text[match.end() :]
    return Env(), text


_JSON_MAX_OPEN = 512


def _json_line(text: str) -> tuple[Env, str] | None:
    """docker json-file lines and vLLM's JSON formatter (v0.32+); None if not JSON."""
    if text.count("[") + text.count("{") > _JSON_MAX_OPEN:
        return None  # `[[[[...` thousands deep: no log record, and costly to refuse
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        # RecursionError: `[[[[...` thousands deep; such a line is not a log record.
        return None
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("log"), str):
        inner = strip_ansi(obj["log"]).rstrip("\r\n")
        nested = _json_line(inner) if inner.startswith("{") else None
        env, message = nested if nested is not None else _envelope(inner)
        if isinstance(obj.get("time"), str) and env.wts is None:
            env.wts = obj["time"]
        return env, message
    if isinstance(obj.get("message"), str) and ("levelname" in obj or "asctime" in obj):
        asctime = obj.get("asctime")
        process = obj.get("processName")
        return (
            Env(
                process=process if isinstance(process, str) else None,
                pid=obj["process"] if isinstance(obj.get("process"), int) else None,
                level=obj.get("levelname") if isinstance(obj.get("levelname"), str) else None,
                ats=asctime if isinstance(asctime, str) else None,
                file=obj.get("name") if isinstance(obj.get("name"), str) else None,
                known=True,
            ),
            obj["message"],
        )
    return None


def classify(message: str, env: Env) -> tuple[str, dict[str, Any]] | None:
    """Kind and columns of one message; None when no catalogue row fits."""
    message = message.rstrip("\r\n")
    if STATS_START_RE.match(message) or message.startswith("Throughput: "):
        return "scheduler_stats", stats_fields(message[:STATS_BUDGET])
    if env.file == "uvicorn":
        match = ACCESS_RE.match(message)
        if match is not None:
            return "access", {
                "client": match.group("client"),
                "method": match.group("method"),
                "path": match.group("path"),
                "http_version": match.group("http_version"),
                "status": int(match.group("status")),
            }
        return None
    for row, pattern in ROW_RES:
        match = pattern.match(message)
        if match is None and not env.known and row.bare_ok:
            match = _bare_match(pattern, message)
        if match is None and not env.known and row.kind == "kv_capacity":
            # vLLM's startup refusal raises its sizing line as an exception's message
            # (`ValueError: Free memory on device ...`). Sizing only: no count or verdict
            # rests on it, so an exception that echoes a user's text cannot forge one.
            lead = _EXCEPTION_LEAD.match(message)
            match = pattern.match(message, lead.end()) if lead is not None else None
        if match is None:
            continue
        return row.kind, _row_columns(row, match)
    if not env.known:
        start = _bare_match(STATS_START_RE, message)
        if start is not None:
            return "scheduler_stats", stats_fields(message[start.start() :][:STATS_BUDGET])
    return None


# What may stand in front of a message on a line without an envelope: a few symbols (a quote
# bar, `# `), or an elided header (`INFO ... [gpu_worker.py:489] `). Not a sentence: text
# written after a word (an exception's message, a user's text) never starts a record.
_BARE_LEADS = (
    regex.compile(r"[^\w\n]{1,8}", _FLAGS),
    regex.compile(
        r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )?[^\w\n\[]{0,16}\[?[\w.-]{1,80}:\d{1,9}\] ?",
        _FLAGS,
    ),
)


_EXCEPTION_LEAD = regex.compile(r"[A-Z]\w{0,60}(?:Error|Exception): ", _FLAGS)


def _bare_match(pattern: regex.Pattern[str], message: str) -> regex.Match[str] | None:
    """`pattern` at the start of `message` or right after a lead that _BARE_LEADS allow."""
    match = pattern.match(message)
    for lead_re in _BARE_LEADS:
        if match is not None:
            break
        lead = lead_re.match(message)
        if lead is not None:
            match = pattern.match(message, lead.end())
    return match


def _row_columns(row: cat.LineFormat, match: regex.Match[str]) -> dict[str, Any]:
    groups = match.groupdict()
    if row.kind == "preemption_warning":
        return {
            "request_id": groups["request_id"],
            "mode": groups["mode"],
            "cumulative": _int(groups.get("cumulative")),
        }
    if row.kind == "kv_capacity":
        device = groups.get("device")
        context = _int(groups.get("context"))
        quantities = []
        for group, kind, unit in row.quantities:
            value = _num(groups.get(group))
            if value is None:
                continue
            if unit == "GB" and groups.get("unit") == "GiB":
                unit = "GiB"
            if groups.get(f"{group}_unit") == "bytes":
                value /= 1024**3  # printed in bytes (v0.10.2 – v0.11.x); the row is in GiB
            quantities.append(
                {
                    "kind": kind,
                    "value": value,
                    "unit": unit,
                    "context_tokens": context if kind == "max_concurrency" else None,
                    "device": device if kind not in ("cpu_blocks",) else "CPU",
                }
            )
        return {"_many": quantities}
    if row.kind == "config":
        pairs: dict[str, str] = {}
        if row.config_origin in ("engine_config", "non_default_args", "args_namespace"):
            pairs.update(config_pairs(row.config_origin, groups.get("payload") or ""))
        for key in (
            "vllm_version",
            "engine_version",
            "model",
            "max_num_batched_tokens",
            "max_model_len",
        ):
            if groups.get(key):
                pairs[key] = groups[key]
        if groups.get("key") and groups.get("value"):
            pairs[groups["key"]] = groups["value"]
        return {
            "_many": [
                {"key": key, "value": value, "origin": row.config_origin}
                for key, value in pairs.items()
            ]
        }
    if row.kind == "requests":
        return {"event": row.constants["event"], "request_id": groups["request_id"].rstrip(".")}
    raise AssertionError(row.kind)


# Kinds a glued record may follow: what they print is the server's own text. A request line
# (its prompt, params, token ids, output, even its id from an X-Request-Id header) and an
# unknown message may hold anyone's text: a header inside them is data, never a cut.
_GLUE_AFTER = frozenset({"scheduler_stats", "preemption_warning", "kv_capacity", "config"})


_LEVELS_BEFORE = tuple(f"{level} " for level in cat.LEVELS)


def _record_start(text: str, at: int) -> int:
    """Where the record whose timestamp is at `at` starts: its level and process prefix."""
    for level in _LEVELS_BEFORE:
        if text.endswith(level, 0, at):
            at -= len(level)
            break
    end = at - 1 if at > 0 and text[at - 1] == " " else at
    if end > 0 and text[end - 1] == ")":
        pid = text.rfind(" pid=", max(0, end - _NAME_MAX - 130), end)
        tail = _PID_TAIL_RE.match(text, pid) if pid >= 0 else None
        if tail is not None and tail.end() == end:
            named = _process_name(text, pid)
            if named is not None and text[named[1]] == "(":
                return named[1]
    return at


def _segments(text: str) -> list[str]:
    """Split records glued on one physical line (newlines lost in a paste) at vLLM headers.

    A cut is made only after a complete record of a kind in _GLUE_AFTER with a known
    envelope; the first segment that is anything else runs to the end of the line.
    """
    # Lazily: a request line full of fake headers ends at its first one (a prompt of
    # back-to-back headers cost a _record_start per header before).
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
        cut = _record_start(text, header.start())
        head = text[begin:cut]
        env, _message, found = _record(head)
        if not env.known or found is None or found[0] not in _GLUE_AFTER:
            break
        if found[0] == "scheduler_stats" and not stats_complete(found[1]):
            break
        if head.strip():
            segments.append(head)
        begin = cut
    segments.append(text[begin:])
    return segments


def _record(text: str) -> tuple[Env, str, tuple[str, dict[str, Any]] | None]:
    decoded = _json_line(text) if text.startswith("{") else None
    env, message = decoded if decoded is not None else _envelope(text)
    return env, message, classify(message, env)


def _has_envelope(text: str) -> bool:
    if text.startswith("{"):
        return True  # a JSON object (even a broken one) starts a line of its own
    env, _ = _envelope(text)
    return env.known or env.process is not None or env.wts is not None


def _incomplete(kind_columns: tuple[str, dict[str, Any]] | None, text: str) -> bool:
    """A record that looks cut by a terminal wrap: worth joining with the next line."""
    if kind_columns is None:
        return any(literal in text for literal in KIND_LITERALS) and len(text) >= WRAP_MIN
    kind, columns = kind_columns
    return kind == "scheduler_stats" and not stats_complete(columns) and len(text) >= WRAP_MIN


_INT64 = (-(1 << 63), (1 << 63) - 1)


def out_of_range(env: Env, found: tuple[str, dict[str, Any]] | None) -> str | None:
    """Why a record cannot be stored (a number that does not fit its column), or None."""
    columns: dict[str, Any] = {"pid": env.pid, "logger_line": env.lineno}
    if found is not None:
        kind, values = found
        items = values.get("_many")
        for item in items if items is not None else [values]:
            columns.update({f"{kind}.{k}": v for k, v in item.items()})
    for name, value in columns.items():
        if name.endswith("._invalid") and value is not None:
            return f"number not valid: {name.removesuffix('._invalid')}.{value}"
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
            return f"number out of range: {name} does not fit in 64 bits"
        if isinstance(value, float) and not math.isfinite(value):
            return f"number out of range: {name} is not finite"
    return None


def _emit(
    out: Parsed, line: int, env: Env, message: str, found: tuple[str, dict[str, Any]] | None
) -> None:
    base = {"line": line, **_base(env)}
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


def clean(text: str) -> str:
    text = text.rstrip("\n").rstrip("\r")
    if "\r" in text:
        # tqdm redraws: the log record is what follows the last carriage return that has one.
        # The part holding the last header (no header spans a `\r`), found in one scan: a
        # search per part cost a Python step per `\r` (170 ns a byte on `\r]\r]...`).
        last = None
        for last in HEADER_CORE_RE.finditer(text) if "] " in text else ():  # noqa: B007
            pass  # the last one is wanted
        if last is not None:
            at = last.start()
            end = text.find("\r", at)
            found = text[text.rfind("\r", 0, at) + 1 : end if end >= 0 else len(text)]
        else:
            # No record: the last redraw, behind the process prefix the line started with.
            start, final = text[: text.find("\r")], text[text.rfind("\r") + 1 :]
            wrapper = WRAPPER_RE.match(start)
            first = start[wrapper.end() if wrapper is not None else 0 :]
            lead = len(start) - len(first.lstrip())
            head = _PROCESS_AT_RE.match(start, lead)
            found = start[: head.end()] + final if head is not None else final
        text = found
    return strip_ansi(text)


def strip_ansi(text: str) -> str:
    """The text without ANSI colour codes (with ESC, with the ESC lost, journald's `#033[`)."""
    if "\x1b" in text:
        text = _ANSI_ESC_RE.sub("", text)
    # The probe first: it starts with a literal (a fast scan); the three-way sub does not.
    if "[" in text and _ANSI_PROBE_RE.search(text) is not None:
        text = _ANSI_SGR_RE.sub("", text)
    return text


def _plain(message: str, previous: str | None) -> bool:
    """A line without an envelope that is plainly output: a traceback or a progress bar."""
    message = message.rstrip("\r\n")
    if any(pattern.match(message) for pattern in PLAIN_RES):
        return True
    # After a few symbols a paste put in front (a quote bar `▎ `), as records are (_bare_match).
    lead = _BARE_LEADS[0].match(message)
    if lead is not None and lead.group().strip():
        rest = message[lead.end() :].lstrip(" ")
        if any(pattern.match(rest) for pattern in PLAIN_RES):
            return True
    # The code line of a traceback frame follows its `  File "…", line N` line.
    if previous is None or not message.startswith("  "):
        return False
    _env, before = _envelope(clean(previous))
    return FRAME_RE.match(before.rstrip("\r\n")) is not None


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


def _repeat_rows(out: Parsed, before: dict[str, int], times: int) -> None:
    """Copy the rows added since `before` (row counts per kind) `times - 1` more times."""
    for kind, rows in out.rows.items():
        added = rows[before.get(kind, 0) :]
        for _ in range(times - 1):
            rows.extend(dict(row) for row in added)


def parse_odd_lines(items: list[tuple[int, str, str | None]]) -> Parsed:
    """Parse (line number, text, previous physical line or None) in line order."""
    out = Parsed()
    index = 0
    while index < len(items):
        line, raw, previous = items[index]
        index += 1
        text, times = ray_repeat(clean(raw))
        if not text.strip():
            out.blank_lines += 1
            continue
        if times > cat.RAY_REPEAT_MAX:
            # Rows are copies: a count no real cluster buffers in seconds would only cost memory.
            out.unrecognized.append((line, raw.rstrip("\r\n"), RAY_TOO_MANY))
            continue
        before = {kind: len(rows) for kind, rows in out.rows.items()} if times > 1 else {}
        segments = _segments(text)
        records: list[tuple[Env, str, tuple[str, dict[str, Any]] | None]] = []
        reason: str | None = None
        taken = 0
        for position, segment in enumerate(segments):
            env, message, found = _record(segment)
            last = position == len(segments) - 1
            # Terminal hard-wrap: join the following envelope-less lines while that helps.
            consumed = 0
            while last and _incomplete(found, segment) and index + consumed < len(items):
                next_line, next_raw, _ = items[index + consumed]
                if next_line != line + consumed + 1:
                    break
                follow = clean(next_raw)
                if not follow.strip() or _has_envelope(follow):
                    break
                joined = segment + follow
                env2, message2, found2 = _record(joined)
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
    _fill_rests(out)
    return out


def may_continue(raw: str) -> bool:
    """Whether the next physical line could still belong to this one's record.

    True for the first half of a terminal hard-wrap (a record the join would complete) and for
    a long unterminated line (the next one may be its continuation). Batches and chunks only
    end after a line for which this is False, so they parse as one go does.
    """
    text = clean(raw)
    if not text.strip():
        return False
    if _open_ended(text):
        return True
    segment = _segments(text)[-1]
    _env, _message, found = _record(segment)
    return _incomplete(found, segment)


def is_continuation(previous: str, text: str) -> bool:
    """A hard-wrapped tail of a long record on the previous line (counted with that record)."""
    prev = clean(previous)
    if not _open_ended(prev) or not _has_envelope(prev):
        return False
    return not _has_envelope(text)


_ACCESS_END_RE = regex.compile(cat.ACCESS_REQUEST + r"(?: [A-Za-z' -]*)?$", _FLAGS)


def _open_ended(text: str) -> bool:
    """A long line that does not end its record: no final punctuation, not an access line."""
    if len(text) < WRAP_MIN or text.endswith(TERMINAL):
        return False
    return _ACCESS_END_RE.search(text) is None
