"""The envelope around a message: wrappers, vLLM headers, process prefixes, JSON lines.

The first step of the per-line path (ingest/_lines.py). Owns what wrote a line and when (a
container timestamp, a vLLM header, a foreign or uvicorn envelope, a process or rank prefix,
docker json-file or vLLM's JSON formatter), the message left after it, and the clean-up
before it (tqdm redraws, ANSI codes). A line's first envelope is its envelope. Never matches
a catalogue row (_classify.py does). Every pattern here stays linear on any text: the header
and the process prefix are found in steps, not by one pattern with lazy runs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import regex
from preemptscope.ingest import catalogue as cat

FLAGS = regex.VERSION0  # every `regex` pattern of the per-line path

# Linear time, whatever the line: no pattern here has a lazy run before another run or a
# quantified group inside a quantified group; the envelope is found in steps (a wrapper at the
# start, the first vLLM header by search, the process prefix by walking back from ` pid=`).
# cat.ANSI_ESC then cat.ANSI_SGR, in stdlib `re`: it skips to a literal start in C, where
# `regex` tries the optional prefix at every character. Linear: `(?:;[0-9]{1,3})*` repeats
# after a `;` it must consume.
_ANSI_ESC_RE = re.compile(cat.ANSI_ESC)
_SGR = cat.ANSI_SGR_CORE
_ANSI_SGR_RE = re.compile(rf"#033{_SGR}|\^\[{_SGR}|{_SGR}")  # cat.ANSI_SGR, literal first
_ANSI_PROBE_RE = re.compile(_SGR)  # in every match of _ANSI_SGR_RE
WRAPPER_RE = regex.compile(rf"^{cat.WRAPPER_TS}", FLAGS)
WRAPPER_TIME_RE = regex.compile(cat.WRAPPER_TIME, FLAGS)
TIMESTAMP_RE = regex.compile(cat.TIMESTAMP, FLAGS)
# The header from its timestamp on (the level in front is checked by hand): searching the
# whole header costs its optional level group at every character of a long line.
_HEADER_AT_RE = regex.compile(cat.HEADER[cat.HEADER.index("(?P<mon>") :], FLAGS)
HEADER_CORE_RE = regex.compile(cat.HEADER_CORE, FLAGS)
# Timestamps are looked for with stdlib `re` (an ASCII pattern: the same matches, a faster
# scan), each checked by _HEADER_AT_RE; after _STAMP_TRIES that start no header, one search
# for the first place where both match, so a run of false timestamps costs no Python step
# each (the search alone is slower than the loop on `01-` runs, hence the loop first).
_TIMESTAMP_STD_RE = re.compile(cat.TIMESTAMP)
_HEADER_SEARCH_RE = regex.compile(f"(?={cat.TIMESTAMP}){_HEADER_AT_RE.pattern}", FLAGS)
_STAMP_TRIES = 32
UVICORN_LEVEL_RE = regex.compile(r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+", FLAGS)
# After ` pid=`: the rest of a process prefix, then text without parentheses up to the header.
_PID_TAIL_RE = regex.compile(r" pid=(?P<pid>[0-9]{1,20})(?:, ip=[^)\n]{0,100})?\)", FLAGS)
_NO_PARENS_RE = regex.compile(r"[^()\n]*\Z", FLAGS)
_RANK_RE = regex.compile(r"\[(?P<rank>rank[0-9]{1,9})\]: ?", FLAGS)
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_MAX = 200
# An elided header's process name bounded as _PROCESS_AT_RE bounds it (a real one is a few
# dozen characters): a line that starts with a name is then no process prefix past ~330
# characters, so a hard-wrap join cannot make the next line's ` pid=1) INFO ...` complete it
# (ingest/_cues.starts_no_record relies on this).
_PROC = r"(?P<proc>[A-Za-z_][^()\n]*?(?:\([^()\n]*\)[^()\n]*?)?)"
_PROC_BOUNDED = r"(?P<proc>[A-Za-z_][^()\n]{0,200}?(?:\([^()\n]{0,60}\)[^()\n]{0,60}?)?)"
assert _PROC in cat.PROCESS
_ELIDED = cat.ELIDED_ENVELOPE.replace(cat.PROCESS, cat.PROCESS.replace(_PROC, _PROC_BOUNDED))
ELIDED_RE = regex.compile(_ELIDED, FLAGS)
# The same without its process prefix, for a line without ` pid=` (which every process prefix
# holds): the prefix's lazy run is costly on a line that starts with a name.
_ELIDED_PROCESS = f"(?:{cat.PROCESS}|{cat.RANK})?"
assert _ELIDED_PROCESS in cat.ELIDED_ENVELOPE
_ELIDED_NO_PID_RE = regex.compile(
    # (its groups kept, never matching)
    cat.ELIDED_ENVELOPE.replace(_ELIDED_PROCESS, f"(?:(?P<proc>(?!))(?P<pid>(?!))|{cat.RANK})?"),
    FLAGS,
)
PROCESS_NAME_MAX = 330  # the longest start of a line a process prefix may still complete
SYSLOG_RE = regex.compile(cat.SYSLOG, FLAGS)
COMPOSE_RE = regex.compile(rf"^(?:{cat.WRAPPER_TS})?(?P<compose>{cat.COMPOSE})", FLAGS)
COMPOSE_ONLY_RE = regex.compile(cat.COMPOSE, FLAGS)
# A line that starts with a process prefix but has no header (a worker's print, a traceback).
_PROCESS_AT_RE = regex.compile(
    r"(?:\((?P<proc>[A-Za-z_][^()\n]{0,200}?(?:\([^()\n]{0,60}\)[^()\n]{0,60}?)?),?"
    r" pid=(?P<pid>[0-9]{1,20})(?:, ip=[^)\n]{0,100})?\) ?|\[(?P<rank>rank[0-9]{1,9})\]: ?)",
    FLAGS,
)
FOREIGN_RES = [(env, regex.compile(env.pattern, FLAGS)) for env in cat.FOREIGN_ENVELOPES]
# One of these is in every match of FOREIGN_RES and UVICORN_LEVEL_RE (their level group).
_LEVEL_WORDS = ("DEBUG", "INFO", "WARN", "ERROR", "CRITICAL", "TRACE")
# A request row's literal (each row's message starts with one).
_REQUEST_LIT_RE = regex.compile("|".join(regex.escape(x) for x in cat.REQUEST_LITERALS), FLAGS)
# How much of a line the per-line path reads: records are short; a config payload or a prompt
# beyond this is data nobody needs to parse (and no line costs more than this much work).
RECORD_BUDGET = 64 * 1024


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


def to_num(value: str | None) -> float | None:
    """A captured number (thousands commas allowed) as a float, as to_int does."""
    return _number(value, float)


def to_int(value: str | None) -> int | None:
    """A captured number as the column-wise path's cast reads it (`cast(Int64, strict=False)`):
    ASCII digits only (`\\d` in a pattern is any script's digit, which Python's int() takes and
    Polars' cast refuses), None when it is none."""
    return _number(value, int)


_N = TypeVar("_N", int, float)


def _number(value: str | None, kind: Callable[[str], _N]) -> _N | None:
    if value is None or not value.isascii():
        return None
    try:
        return kind(value.replace(",", ""))
    except ValueError:
        return None


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
                return named[0].strip(cat.SPACES), to_int(tail.group("pid"))
    at = pre.rfind("[rank")
    if at >= 0:
        rank = _RANK_RE.match(pre, at)
        if rank is not None:
            return rank.group("rank"), None
    return None, None


# What a wrapper's match holds after its time (cat.WRAPPER_TS): the rest of its blank and a
# CRI stream tag.
_AFTER_WRAPPER_TIME_RE = regex.compile(r"\s*(?:(?:stdout|stderr) [FP] )?", FLAGS)


def process_of(pre: str, wrapped: bool) -> tuple[str | None, int | None]:
    """The process prefix in `pre`, the text in front of a level word as the column-wise path
    cuts it (after a wrapper's time and one blank, when `wrapped`), read as the per-line path
    reads the text between the wrapper and the level. A pid past 64 bits is None, so the
    column stays Int64; the router leaves such lines to the per-line path (ingest/_claims.py
    `_LONG_PID`), where they are unrecognised with the reason."""
    if wrapped:
        match = _AFTER_WRAPPER_TIME_RE.match(pre)
        pre = pre[match.end() :] if match is not None else pre
    proc, pid = _process_before(pre)
    return proc, pid if pid is None or pid < 1 << 63 else None


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


def _worded(text: str, end: int) -> bool:
    """Whether a level word stands in front of `end` other than a header's own level."""
    for level in cat.LEVELS:
        if text.endswith(level + " ", 0, end):
            end -= len(level) + 1
            break
    return any(text.find(word, 0, end) >= 0 for word in _LEVEL_WORDS)


def _first_or_none(
    text: str, begin: int, found: tuple[int, str | None, regex.Match[str]]
) -> tuple[int, str | None, regex.Match[str]] | None:
    """`found` (a header at found[0]) when no uvicorn level or foreign envelope starts in
    front of it, else None (that envelope is the line's; envelope() reads it)."""
    at = found[0]
    if UVICORN_LEVEL_RE.search(text, begin, at) is not None:
        return None
    for _env, pattern in FOREIGN_RES:
        # From the line start, as envelope() reads them (a foreign time may look like a
        # wrapper's); one that starts in front of the header is the line's envelope.
        match = pattern.search(text, 0, len(text))
        if match is not None and match.start() < at:
            return None
    return found


def envelope(text: str) -> tuple[Env, str]:
    """Find the envelope; return it and the message (the whole text when there is none)."""
    text = text[:RECORD_BUDGET]
    wrapper = WRAPPER_RE.match(text)
    wts = wrapper.group("wts") if wrapper is not None else None
    begin = wrapper.end() if wrapper is not None else 0
    # Every envelope but a bare process prefix has a colon (a time, `LEVEL:`).
    colon = ":" in text
    # A vLLM header has a `]` after its location: without one, no timestamp search.
    found = _find_header(text, begin) if colon and "]" in text else None
    # A line's first envelope is its envelope, and what follows it is its message: a header
    # behind uvicorn's `LEVEL:` or a foreign envelope is in that envelope's message (a prompt
    # logged by `vllm.entrypoints.logger` under any format, an access line's client from
    # X-Forwarded-For: anyone's text). Every such envelope holds a level word: without one
    # in front of the header, the header opens the line's record.
    if found is not None and _worded(text, found[0]):
        found = _first_or_none(text, begin, found)
    # Behind text of no known envelope, a header after a request row's literal is in that
    # request's text (vLLM logs a client's prompt, id and output only on request lines).
    if found is not None and _REQUEST_LIT_RE.search(text, begin, found[0]) is not None:
        found = None
    # Foreign envelopes and uvicorn's all hold a level word: without one, none of their
    # searches runs.
    worded = found is None and any(word in text for word in _LEVEL_WORDS)
    levelled = colon and worded
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
                lineno=to_int(match.group("lineno")),
                known=True,
            ),
            text[match.end() :],
        )
    # uvicorn's level first: a foreign envelope found after it is in its message (a client's
    # query string `?INFO:a:b` in an access line), not the line's envelope: the first wins.
    uvicorn = UVICORN_LEVEL_RE.search(text, begin) if levelled else None
    first = uvicorn.start() if uvicorn is not None else len(text)
    for _env, pattern in FOREIGN_RES if levelled else ():
        # From the line start: a foreign timestamp may be what looked like a wrapper's.
        match = pattern.search(text)
        if match is not None and match.start() <= first:
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
                    lineno=to_int(groups.get("lineno")),
                    known=True,
                ),
                groups.get("msg") or "",
            )
    match = uvicorn
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
    # An elided header holds a level word too.
    elided = (ELIDED_RE if " pid=" in text else _ELIDED_NO_PID_RE) if worded else None
    match = elided.match(text) if elided is not None else None
    if match is not None:
        proc = match.group("proc") or match.group("rank")
        return (
            Env(
                process=proc.strip(cat.SPACES) if proc else None,
                pid=to_int(match.group("pid")),
                level=match.group("level"),
                wts=match.group("wts"),
                file=match.group("file"),
                lineno=to_int(match.group("lineno")),
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
        return Env(process=proc, pid=to_int(process.group("pid")), wts=wts), text[process.end() :]
    if wrapped:
        return Env(wts=wts), text[begin:]
    match = SYSLOG_RE.match(text)
    if match is not None:
        return Env(process=match.group("proc"), pid=to_int(match.group("pid"))), text[match.end() :]
    match = COMPOSE_RE.match(text)
    if match is not None:
        # Output of a compose service with no prefix of its own (v0.31+ raw tracebacks).
        return Env(wts=match.group("wts")), text[match.end() :]
    return Env(), text


_JSON_MAX_OPEN = 512


def _utf8(obj: object) -> bool:
    """Whether a decoded JSON value holds no lone surrogate (`"\\ud807"`: json.loads takes
    it, Polars' decoder takes no document that holds one, so the router reads such a line as
    text, and so must this path)."""
    try:
        json.dumps(obj, ensure_ascii=False).encode()
    except (UnicodeEncodeError, RecursionError, ValueError):
        return False
    return True


def _finite(number: str) -> float:
    """A JSON number as json.loads reads it, but none past a float's range (`1e999`: no JSON to
    Polars' decoder, which the router reads such a line with)."""
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(number)
    return value


def _no_constant(name: str) -> float:
    raise ValueError(name)  # `NaN`, `Infinity`: JSON to json.loads only


def json_line(text: str) -> tuple[Env, str] | None:
    """docker json-file lines and vLLM's JSON formatter (v0.32+); None if not JSON (to
    Polars' decoder either, which the router reads them with)."""
    if text.count("[") + text.count("{") > _JSON_MAX_OPEN:
        return None  # `[[[[...` thousands deep: no log record, and costly to refuse
    try:
        obj = json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        # RecursionError: `[[[[...` thousands deep; such a line is not a log record.
        return None
    if not isinstance(obj, dict) or ("\\u" in text and not _utf8(obj)):
        return None
    if isinstance(obj.get("log"), str):
        inner = clean(obj["log"].rstrip("\r\n"))
        nested = json_line(inner) if inner.startswith("{") else None
        env, message = nested if nested is not None else envelope(inner)
        if isinstance(obj.get("time"), str):
            # docker's time is the outer wrapper: it wins, as in `<time> <log>` (the form
            # the router reads these lines in) the first wrapper does. A time that is no
            # container time (not ASCII digits, no time at all) gives none, and the router
            # leaves such a line to this path.
            time = obj["time"]
            env.wts = time if WRAPPER_TIME_RE.fullmatch(time) is not None else None
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


_LEVELS_BEFORE = tuple(f"{level} " for level in cat.LEVELS)


def record_start(text: str, at: int) -> int:
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


def has_envelope(text: str) -> bool:
    if text.startswith("{"):
        return True  # a JSON object (even a broken one) starts a line of its own
    env, _ = envelope(text)
    return names_writer(env)


def names_writer(env: Env) -> bool:
    """A known envelope, a process prefix or a wrapper: a line of its own, nobody's tail."""
    return env.known or env.process is not None or env.wts is not None


def clean(text: str) -> str:
    """The line without its newline, tqdm redraws and ANSI codes; a JSON line as it is (its
    strings are cleaned once decoded: `\\u001b[32m` is no code in its JSON form)."""
    line = text.rstrip("\n").rstrip("\r")
    cleaned = _clean(line)
    if cleaned != line and line.startswith("{") and json_line(line) is not None:
        return line
    return cleaned


def _clean(text: str) -> str:
    if "\r" in text:
        # tqdm redraws: the record is the part after a `\r` that holds the last header (no
        # header spans a `\r`; tqdm redraws before a record, which ends with its newline),
        # found in one scan, not a search per part. A request line ends the search: vLLM logs
        # a client's `request_id` as it is, `\r` included (the prompt goes through `repr`),
        # so a header behind a request header or a request row's literal (behind any
        # envelope) is the client's text, and the request line runs from the redraw it
        # starts after to the end of the line.
        last, request = None, False
        literal = _REQUEST_LIT_RE.search(text)
        for last in HEADER_CORE_RE.finditer(text) if "] " in text else ():
            if literal is not None and literal.start() < last.start():
                request = True
                break
            if text.startswith(cat.REQUEST_LITERALS, last.end()):
                request = True
                break
        if request and literal is not None and last is not None and literal.start() < last.start():
            at = literal.start()
            found = text[text.rfind("\r", 0, at) + 1 :]
        elif last is not None:
            at = last.start()
            end = -1 if request else text.find("\r", at)
            found = text[text.rfind("\r", 0, at) + 1 : end if end >= 0 else len(text)]
        elif literal is not None and literal.start() < text.rfind("\r"):
            # No header, but a request's text (its id) holds a `\r`: the line runs from the
            # redraw the request starts after to its end (a header in colours, which no
            # header search reads before the codes go, or a bare record behind the `\r` is
            # the client's text).
            found = text[text.rfind("\r", 0, literal.start()) + 1 :]
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
