"""Read vLLM logs of any version into typed Polars frames (see docs/frames.md).

Two paths share the catalogue (ingest/catalogue.py):
- vectorised: a chunk of lines becomes a Polars Series; literal prefilters and Rust-regex
  checks route every line, and well-formed stats, request, access and other lines are
  extracted column-wise;
- per line (ingest/_lines.py): preemption, KV-sizing and config lines, and every odd line
  (JSON, foreign formats, glued records, hard-wraps, damage) in Python.
Every physical line ends up in a frame, as the continuation of a record, as blank, or in
`unrecognized`; `LogFrames.accounting` adds up.
"""

from __future__ import annotations

import glob
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl
from preemptscope.ingest import _lines
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._reader import (
    CHUNK_BYTES,
    Block,
    ReadLimits,
    display_name,
    iter_blocks,
    last_line,
    split_lines,
)
from preemptscope.ingest._time import (
    SMALL_FRAME,
    YearState,
    anchor_first,
    bulk_years,
    line_years,
    stamp,
    time_from_name,
)
from preemptscope.ingest.schema import FRAME_SCHEMAS, LineAccounting, LogFrames

from preemptscope.errors import ConfigError, InputError

__all__ = [
    "ParseOptions",
    "ParseState",
    "ReadLimits",
    "iter_log_paths",
    "iter_parse_path",
    "parse_lines",
    "parse_path",
]


YEAR_RANGE = (1970, 2100)  # years --year and --start accept


@dataclass(frozen=True)
class ParseOptions:
    """How to read timestamps that have no year and no zone."""

    year: int | None = None  # --year
    start: datetime | None = None  # --start: time of the first record, anchors year inference
    tz: str = "UTC"  # zone of the log's naive timestamps (IANA name); frames hold UTC
    reference_time: datetime | None = None  # e.g. file mtime; used when nothing better tells
    name_time: datetime | None = None  # a date in the file name; before the mtime
    # Take the year from a wrapper/JSON time anywhere in the first batch, not only on the first
    # record. Files turn it on (their first batch is the first chunk, whatever the caller);
    # `parse_lines` batches keep it off, so batches of lines date exactly as one go does.
    year_from_content: bool = False

    def __post_init__(self) -> None:
        # Outside this, --year 0 overflows and --year 20260 silently nulls every timestamp.
        low, high = YEAR_RANGE
        if self.year is not None and not low <= self.year <= high:
            raise ConfigError(f"--year {self.year}: expected a year from {low} to {high}")
        if self.start is not None and not low <= self.start.year <= high:
            raise ConfigError(
                f"--start {self.start.isoformat()}: expected a year from {low} to {high}"
            )
        try:
            ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ConfigError(f"unknown time zone {self.tz!r} (expected an IANA name)") from exc


@dataclass
class ParseState:
    """What spans batches of one source: year inference, a held-back line, the last line."""

    years: YearState = field(default_factory=YearState)
    pending: list[tuple[int, str]] = field(default_factory=list)
    last_raw: str | None = None


# Helper columns carried until timestamps are resolved.
_HELPERS: dict[str, pl.DataType] = {
    **{k: pl.String() for k in ("_mon", "_day", "_hms", "_wts", "_ats")},
    # Rows of the bulk kinds (requests, access, other) extracted by the vectorised path. They
    # take their year from the nearest other record, so summary mode (which skips them) and
    # full mode date every record the same way.
    "_bulk": pl.Boolean(),
}
_REC_COLS = ("process", "pid", "level")

# Every ANSI form seen in logs ends a colour with a reset; ESC-less pastes keep `[0m`.
_ANSI_LITERALS = ["\x1b", "#033[", "[0m", "[0;0m"]
# Request rows whose message starts right after the `[file:line] ` of a vLLM header: a
# literal check (Aho-Corasick) instead of a regex over the biggest lines of a V0 log.
_REQ_STARTS = [f"] {row.literal}" for row in cat.REQUEST_ROWS if row.literal != "Request "]
_PY_LITERALS = sorted({row.literal for row in cat.PYTHON_ROWS})
_STATS_LITERALS = sorted({row.literal for row in cat.STATS_ROWS})
_REQ_LITERALS = sorted({row.literal for row in cat.REQUEST_ROWS})
_PY_LIT = "|".join(re.escape(literal) for literal in _PY_LITERALS)
_STATS_LIT = "|".join(re.escape(literal) for literal in _STATS_LITERALS)
_REQ_LIT = "|".join(re.escape(literal) for literal in _REQ_LITERALS)
# Anything an envelope the per-line path knows starts with: a process prefix, a rank, a date
# (wrappers, foreign formats), a level word (uvicorn, foreign formats), a syslog pid. A new
# envelope in ingest/_lines.py needs its cue here, or its lines are unrecognised unread.
_ENVELOPE_CUE = (
    r"pid=|\[rank|[0-9]{4}-[0-9]{2}-[0-9]{2}|(?:DEBUG|INFO|WARN|ERROR|CRITICAL|TRACE)"
    r"|\[[0-9]+\]: "  # syslog's `python3[28059]: `
)
_KIND_LITERALS = sorted(_lines.KIND_LITERALS)
# Plain program output the per-line path reads (tracebacks, progress bars; an indented line
# may be a frame's code line).
# The catalogue's patterns behind an optional lead that is a superset of what _lines allows
# in front (a few symbols such as a quote bar, a compose prefix), with ASCII classes: the
# Unicode ones compile past the Rust regex size limit. `  ` at the start or behind a compose
# bar: a traceback frame's code line.
_PLAIN_LEAD = r"^(?:[^A-Za-z0-9_\n]{1,8} *|[^\s|]{1,81} +\| )?"
_PLAIN_CUE = (
    _PLAIN_LEAD
    + "(?:"
    + "|".join(pattern.removeprefix("^") for _name, pattern in cat.PLAIN_LINES)
    + ")|^  |\\|  "
)
_UVICORN_PROBE = r"(?:^|\) )(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s"
_STATS_VALID = (
    cat.HEADER_CORE
    + cat.STATS_RECORD_START
    + r"[^\n]*Running: \d+ reqs[^\n]*(?:Waiting|Pending): \d+ reqs[^\n]*KV cache usage: [\d.]+%"
)
_REQ_GROUPS = "|".join(
    row.pattern.replace("(?P<request_id>", f"(?P<rid_{row.name}>") for row in cat.REQUEST_ROWS
)
_REQ_VALID = cat.HEADER_CORE + "(?:" + _REQ_GROUPS + ")"
_STATS_EXTRACT = cat.ENVELOPE + r"(?P<msg>[^\r\n]*)"
# uvicorn's access shape: ` HTTP/` and, around the client, `INFO:` and ` - "`.
_ACCESS_HTTP, _ACCESS_LEVEL, _ACCESS_DASH = " HTTP/", "INFO:", ' - "'


def _kind_columns(kind: str) -> dict[str, pl.DataType]:
    """Columns of a kind before timestamps are resolved (no source/deployment/timestamp)."""
    schema = FRAME_SCHEMAS[kind]
    cols: dict[str, pl.DataType] = {"line": pl.Int64()}
    for name in _REC_COLS:
        cols[name] = schema[name]
    cols.update(_HELPERS)
    for name, dtype in schema.items():
        if name not in ("source", "line", "deployment", "timestamp", *_REC_COLS):
            cols[name] = dtype
    return cols


_KIND_SCHEMAS = {
    kind: pl.Schema(_kind_columns(kind)) for kind in FRAME_SCHEMAS if kind != "unrecognized"
}


def _envelope_columns() -> list[pl.Expr]:
    return [
        pl.coalesce(pl.col("proc").str.strip_chars(), pl.col("rank")).alias("process"),
        pl.col("pid").cast(pl.Int64, strict=False),
        pl.col("level"),
        pl.col("mon").alias("_mon"),
        pl.col("day").alias("_day"),
        pl.col("hms").alias("_hms"),
        pl.col("wts").alias("_wts"),
        pl.lit(None, dtype=pl.String).alias("_ats"),
    ]


def _pct(expr: pl.Expr) -> pl.Expr:
    # Polars turns `/ 100` into `* 0.01`; the per-line path does the same (_lines._fraction).
    return expr.cast(pl.Float64, strict=False) * 0.01


_STATS_INTS = ("engine", "running", "waiting", "swapped", "deferred", "preemptions")
_STATS_FLOATS = (
    "prompt_throughput",
    "generation_throughput",
    "throughput_v01",
    "gpu_kv_cache_usage",
    "cpu_kv_cache_usage",
    "prefix_cache_hit_rate",
    "external_prefix_cache_hit_rate",
    "mm_cache_hit_rate",
)


def _stats_invalid(msg: pl.Expr) -> pl.Expr:
    """The first stats field whose text is no number of its column (null when all fit)."""
    checks = []
    for name, pattern in cat.STATS_FIELDS:
        if name not in _STATS_INTS and name not in _STATS_FLOATS:
            continue
        text = msg.str.extract(pattern, 1)
        value = text.cast(pl.Int64 if name in _STATS_INTS else pl.Float64, strict=False)
        bad = text.is_not_null() & (value.is_null() | ~value.cast(pl.Float64).is_finite())
        checks.append(pl.when(bad).then(pl.lit(f"scheduler_stats.{name}")))
    return pl.coalesce(checks)


def _stats_frames(sub: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(stats rows, unrecognised rows: lines whose numbers do not fit their columns)."""
    message = pl.col("raw").str.extract_groups(_STATS_EXTRACT).struct.field("msg")
    # The message once as a column: as an expression it is re-extracted for every field.
    sub = sub.with_columns(message.alias("_msg")).with_columns(
        _stats_invalid(pl.col("_msg")).alias("_invalid")
    )
    sub = sub.drop("_msg")
    bad = sub.filter(pl.col("_invalid").is_not_null())
    if bad.height:
        sub = sub.filter(pl.col("_invalid").is_null())
    rejected = bad.select(
        pl.col("line"),
        pl.col("raw").str.strip_chars_end("\r\n").alias("text"),
        pl.concat_str([pl.lit("number not valid: "), pl.col("_invalid")]).alias("reason"),
    )
    return _stats_frame(sub.drop("_invalid")), rejected


def _stats_frame(sub: pl.DataFrame) -> pl.DataFrame:
    groups = sub.select(
        pl.col("line"), pl.col("raw").str.extract_groups(_STATS_EXTRACT).alias("g")
    ).unnest("g")
    msg = pl.col("msg")
    field = {name: msg.str.extract(pattern, 1) for name, pattern in cat.STATS_FIELDS}
    era = (
        pl.when(field["pending_marker"].is_not_null() | field["swapped"].is_not_null())
        .then(pl.lit("v0"))
        .when(field["waiting"].is_not_null() | field["engine"].is_not_null())
        .then(pl.lit("v1"))
        .otherwise(pl.lit(None, dtype=pl.String))
    )
    extra = (
        msg.str.replace_all(cat.STATS_KNOWN_FIELDS, "")
        .str.replace_all(r"(?:\s*,\s*)+", ", ")
        .str.strip_chars(" ,.")
    )
    frame = groups.select(
        pl.col("line"),
        *_envelope_columns(),
        pl.lit(False).alias("_bulk"),
        era.alias("era"),
        field["engine"].cast(pl.Int64, strict=False).alias("engine"),
        field["prompt_throughput"].cast(pl.Float64, strict=False).alias("prompt_throughput"),
        pl.coalesce(field["generation_throughput"], field["throughput_v01"])
        .cast(pl.Float64, strict=False)
        .alias("generation_throughput"),
        field["running"].cast(pl.Int64, strict=False).alias("running"),
        field["waiting"].cast(pl.Int64, strict=False).alias("waiting"),
        field["swapped"].cast(pl.Int64, strict=False).alias("swapped"),
        field["deferred"].cast(pl.Int64, strict=False).alias("deferred"),
        field["preemptions"].cast(pl.Int64, strict=False).alias("preemptions"),
        field["kv_device"].alias("kv_device"),
        _pct(field["gpu_kv_cache_usage"]).alias("gpu_kv_cache_usage"),
        pl.when(era == "v0")
        .then(_pct(field["cpu_kv_cache_usage"]))
        .otherwise(None)
        .alias("cpu_kv_cache_usage"),
        _pct(field["prefix_cache_hit_rate"]).alias("prefix_cache_hit_rate"),
        _pct(field["external_prefix_cache_hit_rate"]).alias("external_prefix_cache_hit_rate"),
        _pct(field["mm_cache_hit_rate"]).alias("mm_cache_hit_rate"),
        pl.when(extra == "").then(None).otherwise(extra).alias("extra"),
    )
    return frame


# Bulk lines (requests, access, other) are taken apart with positions and small regexes on
# short slices: one envelope regex with captures over every line costs several times more.
# The timestamp of the header, with its location: a bare `MM-DD HH:MM:SS ` also matches inside
# a wrapper's date (`2025-07-10 08:59:40 ERROR 07-09 17:59:40 [core.py:586] `).
_TS_FIND = cat.HEADER_CORE
_LEVEL_FIND = cat.UVICORN_LEVEL
_ACCESS_TAIL = "^" + cat.ACCESS_REQUEST
_LEVEL_BEFORE_TS = r"(DEBUG|INFO|ERROR|WARNING|CRITICAL) $"
# Lead words of the request rows and their event; the first row of a lead wins (`Request X`:
# aborted). Leads are plain words (asserted), so they need no escaping in the pattern.
_REQ_EVENTS: dict[str, str] = {}
for _row in cat.REQUEST_ROWS:
    _REQ_EVENTS.setdefault(_row.literal.strip(), _row.constants["event"])
assert all(re.fullmatch(r"[A-Za-z ]+", lead) for lead in _REQ_EVENTS)
# `Aborted request(s) a,b.` (v0.10.1+); no lead starts another, so at most one matches.
_REQ_LEAD = "^(" + "|".join(_REQ_EVENTS) + r")(?:\(s\))? "


def _by_distinct(
    frame: pl.DataFrame, key: pl.Expr, build: Callable[[pl.Expr], list[pl.Expr]]
) -> pl.DataFrame:
    """Add `build(key)` columns computed on the distinct keys only, joined back.

    Prefixes, logger locations and request lines repeat across millions of log lines, so the
    regexes run once per distinct value instead of once per line. A small frame (a live batch)
    gets the columns directly: the same values without the four queries of the join.
    """
    if frame.height <= SMALL_FRAME:
        return frame.with_columns(build(key))
    frame = frame.with_columns(key.alias("_key"))
    distinct = frame.select(pl.col("_key").unique()).with_columns(build(pl.col("_key")))
    return frame.join(
        distinct, on="_key", how="left", nulls_equal=True, maintain_order="left"
    ).drop("_key")


def _process_columns(prefix: pl.Expr) -> list[pl.Expr]:
    proc = prefix.str.extract_groups(cat.LAST_PROCESS)
    return [
        pl.coalesce(
            proc.struct.field("proc").str.strip_chars(), prefix.str.extract(cat.RANK_PREFIX, 1)
        ).alias("process"),
        proc.struct.field("pid").cast(pl.Int64, strict=False).alias("pid"),
    ]


def _with_prefix(frame: pl.DataFrame, pre: pl.Expr) -> pl.DataFrame:
    """process, pid, _wts from the text in front of the level."""
    frame = frame.with_columns(pre.alias("_pre")).with_columns(
        pl.col("_pre").str.extract(cat.LEADING_WRAPPER_TS, 1).alias("_wts")
    )
    # The container timestamp differs on every line; what follows it repeats.
    rest = (
        pl.when(pl.col("_wts").is_null())
        .then(pl.col("_pre"))
        .otherwise(pl.col("_pre").str.slice(pl.col("_wts").str.len_bytes() + 1))
    )
    return _by_distinct(frame, rest, _process_columns).drop("_pre")


def _chars(text: pl.Expr, offset: pl.Expr) -> pl.Expr:
    """A byte offset from `str.find` as the character offset `str.slice` wants.

    They differ as soon as non-ASCII text (a compose service name, a custom prefix) stands
    before the offset; the prefix up to a found ASCII pattern is always whole UTF-8.
    """
    return (
        pl.when(text.str.len_bytes() == text.str.len_chars())
        .then(offset)
        .otherwise(
            text.cast(pl.Binary)
            .bin.slice(0, offset)
            .cast(pl.String, strict=False)
            .str.len_chars()
            .cast(pl.Int64)
        )
        .cast(pl.Int64)
    )


def _header_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """Envelope of lines with exactly one vLLM header, plus `_msg_at` (message offset)."""
    raw = pl.col("raw")
    at = pl.col("_at")
    frame = frame.with_columns(_chars(raw, raw.str.find(_TS_FIND).cast(pl.Int64)).alias("_at"))
    before = pl.min_horizontal(at, 9)
    word = raw.str.slice(at - before, before)
    # No level name ends another, so at most one can end the word.
    frame = frame.with_columns(word.str.extract(_LEVEL_BEFORE_TS, 1).alias("level"))
    pre_end = at - (pl.col("level").str.len_bytes().cast(pl.Int64) + 1).fill_null(0)
    location = raw.str.slice(at + 15, 160)
    close = _chars(location, location.str.find("]", literal=True).cast(pl.Int64))
    frame = _with_prefix(frame, raw.str.slice(0, pre_end)).with_columns(
        raw.str.slice(at, 2).alias("_mon"),
        raw.str.slice(at + 3, 2).alias("_day"),
        raw.str.slice(at + 6, 8).alias("_hms"),
        pl.lit(None, dtype=pl.String).alias("_ats"),
        (at + 15 + close + 1).alias("_msg_at"),
    )

    def location_columns(loc: pl.Expr) -> list[pl.Expr]:
        parts = loc.str.extract_groups(cat.LOCATION)
        return [
            parts.struct.field("file").alias("logger_file"),
            parts.struct.field("lineno").cast(pl.Int64, strict=False).alias("logger_line"),
        ]

    return _by_distinct(frame, raw.str.slice(at + 15, close + 1), location_columns)


def _header_envelope() -> list[pl.Expr]:
    """The envelope columns `_header_columns` made, as the vectorised (bulk) path's rows."""
    names = ("line", "process", "pid", "level", "_mon", "_day", "_hms", "_wts", "_ats")
    return [*(pl.col(name) for name in names), pl.lit(True).alias("_bulk")]


def _message(start: pl.Expr) -> pl.Expr:
    return pl.col("raw").str.slice(start).str.strip_prefix(" ").str.strip_chars_end("\r\n")


def _word(text: pl.Expr, delimiters: str = r"[ :,\r\n]") -> pl.Expr:
    """Text up to the first delimiter (a null length, when there is none, means to the end)."""
    end = _chars(text, text.str.find(delimiters, literal=len(delimiters) == 1).cast(pl.Int64))
    return text.str.slice(0, end)


def _requests_frame(sub: pl.DataFrame) -> pl.DataFrame:
    # The message starts with the row's lead words and the id: positions, no capture regex.
    head = pl.col("raw").str.slice(pl.col("_msg_at"), 200).str.strip_prefix(" ")
    frame = _header_columns(sub).with_columns(head.alias("_head"))
    message = pl.col("_head")
    # The lead words once per row (one regex pass); the event is looked up from them.
    frame = frame.with_columns(message.str.extract(_REQ_LEAD, 0).alias("_words"))
    words = pl.col("_words")
    event = (
        words.str.strip_suffix(" ")
        .str.strip_suffix("(s)")
        .replace_strict(_REQ_EVENTS, default=None, return_dtype=pl.String)
    )
    rid = _word(message.str.slice(words.str.len_chars())).str.strip_chars_end(".")
    return frame.select(
        *_header_envelope(),
        event.alias("event"),
        pl.when(event.is_not_null()).then(rid).alias("request_id"),
    )


def _access_frame(sub: pl.DataFrame) -> pl.DataFrame:
    raw = pl.col("raw")
    frame = sub.with_columns(
        _chars(raw, raw.str.find("INFO:", literal=True).cast(pl.Int64)).alias("_info"),
        _chars(raw, raw.str.find(' - "', literal=True).cast(pl.Int64)).alias("_dash"),
    )
    frame = _with_prefix(frame, raw.str.slice(0, pl.col("_info")))
    client = raw.str.slice(pl.col("_info") + 5, pl.col("_dash") - pl.col("_info") - 5)

    def request_columns(tail: pl.Expr) -> list[pl.Expr]:
        parts = tail.str.extract_groups(_ACCESS_TAIL)
        return [
            parts.struct.field("method").alias("method"),
            parts.struct.field("path").alias("path"),
            parts.struct.field("http_version").alias("http_version"),
            parts.struct.field("status").cast(pl.Int64, strict=False).alias("status"),
        ]

    frame = _by_distinct(frame, raw.str.slice(pl.col("_dash")), request_columns)
    return frame.select(
        pl.col("line"),
        pl.col("process"),
        pl.col("pid"),
        pl.lit("INFO").alias("level"),
        *[pl.lit(None, dtype=pl.String).alias(k) for k in ("_mon", "_day", "_hms")],
        pl.col("_wts"),
        pl.lit(None, dtype=pl.String).alias("_ats"),
        pl.lit(True).alias("_bulk"),
        # KServe prints `client pid - "…"`: the client is the first word.
        _word(client.str.strip_chars_start(" "), " ").alias("client"),
        pl.col("method"),
        pl.col("path"),
        pl.col("http_version"),
        pl.col("status"),
    )


def _other_frame(sub: pl.DataFrame, uvicorn: bool) -> pl.DataFrame:
    if uvicorn:
        raw = pl.col("raw")
        start = _chars(raw, raw.str.find(_LEVEL_FIND).cast(pl.Int64))
        level = raw.str.slice(start, 10).str.extract(r"^([A-Z]+):", 1)
        frame = _with_prefix(sub, raw.str.slice(0, start)).with_columns(
            level.alias("level"),
            *[pl.lit(None, dtype=pl.String).alias(k) for k in ("_mon", "_day", "_hms", "_ats")],
            pl.lit("uvicorn").alias("logger_file"),
            pl.lit(None, dtype=pl.Int64).alias("logger_line"),
            _message(start + level.str.len_bytes().cast(pl.Int64) + 1)
            .str.strip_chars_start()
            .alias("message"),
        )
    else:
        frame = _header_columns(sub).with_columns(_message(pl.col("_msg_at")).alias("message"))
    return frame.select(
        *_header_envelope(),
        pl.col("logger_file"),
        pl.col("logger_line"),
        pl.col("message"),
    )


_UNRECOGNIZED_ROWS = {"line": pl.Int64, "text": pl.String, "reason": pl.String}


@dataclass
class _Batch:
    frames: dict[str, list[pl.DataFrame]]
    accounting: LineAccounting
    summarized: dict[str, int]  # rows recognised but not extracted (summary mode)


def _unwrap_json_file(raw: pl.Series) -> pl.Series:
    """docker's json-file lines (`{"log": "...\\n", "stream": ..., "time": ...}`) as
    `<time> <log>`, the form docker --timestamps prints, so they take the vectorised path.

    Lines that do not decode (or carry no time) are left as they are for the per-line path.
    """
    frame = pl.DataFrame({"raw": raw})
    wrapped = pl.col("raw").str.starts_with('{"log":')
    log = pl.col("raw").str.json_path_match("$.log").str.strip_chars_end("\r\n")
    time = pl.col("raw").str.json_path_match("$.time")
    unwrapped = pl.concat_str([time, pl.lit(" "), log])
    return frame.select(
        pl.when(wrapped & unwrapped.is_not_null() & ~log.str.contains("\n", literal=True))
        .then(unwrapped)
        .otherwise(pl.col("raw"))
        .alias("raw")
    ).to_series()


# The three literals of uvicorn's access shape in their usual order, one DFA pass: a line it
# matches has all three, so only the others need the separate literal checks.
_ACCESS_FAST = "(?s)" + ".*".join(re.escape(x) for x in (_ACCESS_LEVEL, _ACCESS_DASH, _ACCESS_HTTP))


def _access_masks(raw: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(has ` HTTP/`, also has uvicorn's shape: `INFO:` and ` - "`) for every line."""
    fast = raw.str.contains(_ACCESS_FAST)
    others = (~fast).arg_true()
    if others.len() == 0:
        return fast, fast
    sub = raw.gather(others)
    http = sub.str.contains(_ACCESS_HTTP, literal=True)
    if not http.any():
        return fast, fast
    level = sub.str.contains(_ACCESS_LEVEL, literal=True)
    shape = http & level & sub.str.contains(_ACCESS_DASH, literal=True)
    return fast.clone().scatter(others, http), fast.clone().scatter(others, shape)


def _route(
    raw: pl.Series,
    first_line: int,
    previous: str | None,
    want_all: bool,
    *,
    max_line: int,
    cut: Mapping[int, int] | None = None,
) -> _Batch:
    """Route every line of a Series and extract the vectorised kinds.

    Lines longer than `max_line` bytes, and those in `cut` (line number -> real length: cut
    by the reader), are unrecognised with their real length and not parsed.
    """
    n = raw.len()
    if n == 0:
        return _Batch({kind: [] for kind in FRAME_SCHEMAS}, LineAccounting(lines=0), {})
    df = pl.DataFrame({"raw": raw}).with_columns(
        pl.int_range(first_line, first_line + n, dtype=pl.Int64).alias("line")
    )
    too_long = _too_long(df, max_line, cut or {})
    if too_long is not None:
        df = df.filter(~pl.col("line").is_in(too_long["line"].implode()))

    def before(odd: pl.DataFrame) -> pl.Series:
        index = odd["line"] - first_line
        outside = index == 0
        inside = raw.gather((index - 1).clip(lower_bound=0))
        prev = pl.select(
            pl.when(outside).then(pl.lit(previous, dtype=pl.String)).otherwise(inside)
        ).to_series()
        return _as_read(prev, outside)

    routed, odd_parts = _cascade(df, before)
    if too_long is not None:
        routed["cut"] = [too_long]
    return _assemble(routed, odd_parts, {}, n, before, want_all)


def _too_long(df: pl.DataFrame, max_line: int, cut: Mapping[int, int]) -> pl.DataFrame | None:
    """Unrecognised rows (line, text, reason) for the lines over the length limit, or None."""
    lengths = df["raw"].str.len_bytes()
    over = df.filter(lengths > max_line)  # with its `\r\n`: checked exactly below
    if over.height:
        exact = over["raw"].str.strip_chars_end("\r\n").str.len_bytes()
        over = over.filter(exact > max_line)
    if cut:
        over = pl.concat([over, df.filter(pl.col("line").is_in(list(cut)))]).unique(
            "line", keep="first", maintain_order=True
        )
    if over.height == 0:
        return None
    rows = []
    for line, text in over.select("line", "raw").iter_rows():
        data = text.rstrip("\r\n").encode()
        real = cut.get(line, len(data))
        reason = f"line longer than {max_line} bytes ({real} bytes): cut, not parsed"
        rows.append((line, data[:max_line].decode("utf-8", "replace"), reason))
    return pl.DataFrame(rows, schema=_UNRECOGNIZED_ROWS, orient="row").sort("line")


def _as_read(prev: pl.Series, outside: pl.Series) -> pl.Series:
    """Previous lines as the per-line path reads them: a docker json-file line unwrapped, as
    _cascade does, except the line before the chunk (`outside`), which is read as it is."""
    if not prev.str.starts_with('{"log":').any():
        return prev
    unwrapped = _unwrap_json_file(prev)
    return pl.select(pl.when(outside).then(prev).otherwise(unwrapped)).to_series()


def _cascade(
    df: pl.DataFrame, before: Callable[[pl.DataFrame], pl.Series]
) -> tuple[dict[str, list[pl.DataFrame]], list[pl.DataFrame]]:
    """Route the lines of `df` (raw, line): (claimed parts by name, parts for _lines).

    A cascade of filters: each probe runs only on the lines no earlier probe claimed, so the
    bulk (access lines) costs two scans, and the rare kinds pay for the detailed checks.
    Every line is routed on its own text alone, so any subset of lines routes the same.
    """
    raw = df["raw"]
    raw_c = pl.col("raw")
    brace = raw.str.starts_with("{")
    if brace.any() and raw.str.starts_with('{"log":').any():
        raw = _unwrap_json_file(raw)
        df = df.with_columns(raw)
        brace = raw.str.starts_with("{")
    unusual = raw.str.contains_any([*_ANSI_LITERALS, "\r"])
    ansi = unusual & raw.str.contains_any(_ANSI_LITERALS) if unusual.any() else unusual
    if ansi.any():
        df = df.with_columns(
            pl.when(ansi).then(raw_c.str.replace_all(cat.ANSI, "")).otherwise(raw_c)
        )
    routed: dict[str, list[pl.DataFrame]] = {}
    odd_parts: list[pl.DataFrame] = []

    def claim(name: str, part: pl.DataFrame) -> None:
        if part.height:
            routed.setdefault(name, []).append(part)

    def split(part: pl.DataFrame, mask: pl.Series) -> tuple[pl.DataFrame, pl.DataFrame]:
        # Each predicate is computed once; both sides are cheap view copies. A mask that is
        # all false or all true needs no filter (small live batches mostly take this way).
        if part.height == 0:
            return part, part
        if mask.null_count() == 0:
            hits = mask.sum()
            if hits == 0:
                return part.clear(), part
            if hits == part.height:
                return part, part.clear()
        return part.filter(mask), part.filter(~mask)

    def join(part: pl.DataFrame, extra: pl.DataFrame) -> pl.DataFrame:
        return pl.concat([part, extra]) if extra.height else part

    # 0. Lines that take the per-line path whatever they contain: JSON, tqdm redraws, Ray's
    # deduplicated repeats (one line, several records).
    text = df["raw"]
    if brace.any():
        # Only a JSON value is read as JSON; a line that starts with `{` but does not parse
        # (`{"log": [[[[...`, a cut object) is text like any other.
        brace = brace & text.str.json_path_match("$").is_not_null()
    odd_mask = brace | text.str.contains(cat.RAY_REPEAT_LITERAL, literal=True)
    carriage = unusual & text.str.contains("\r", literal=True) if unusual.any() else unusual
    if carriage.any():
        odd_mask = odd_mask | (carriage & ~text.str.contains(r"^[^\r]*\r\n?$"))
    if odd_mask.any():
        odd, df = split(df, odd_mask)
        odd_parts.append(odd)
    # 1. uvicorn access lines, the bulk of a busy server's log.
    http, shape = _access_masks(df["raw"])
    access, rest = split(df, http)
    if access.height:
        # A vLLM header makes it a vLLM record (an access line quoted in a prompt is data).
        # (`] ` first: a literal scan; uvicorn's access lines have none.)
        text = access["raw"]
        header = text.str.contains("] ", literal=True)
        if header.any():
            header = header & text.str.contains(cat.HEADER_CORE)
        plain = shape.filter(http) & ~header
        good, bad = split(access, plain)
        claim("access", good)
        rest = join(rest, bad)
    # 2. kinds parsed per line (preemption, KV sizing, config).
    py, rest = split(rest, rest["raw"].str.contains(_PY_LIT))
    odd_parts.append(py)
    # 3. scheduler stats: well-formed single records only; anything else is damage.
    candidates, rest = split(rest, rest["raw"].str.contains(_STATS_LIT))
    if candidates.height:
        single = candidates["raw"].str.count_matches(cat.HEADER_CORE) == 1
        good, bad = split(candidates, single & candidates["raw"].str.contains(_STATS_VALID))
        claim("stats", good)
        odd_parts.append(bad)
    # 4. request lifecycle lines; a request literal elsewhere in a message is just "other".
    rest = rest.with_columns(raw_c.str.count_matches(cat.HEADER_CORE).alias("hdr"))
    candidates, rest = split(rest, rest["raw"].str.contains_any(_REQ_STARTS))
    if candidates.height:
        good, bad = split(candidates, candidates["hdr"] == 1)
        claim("requests", good.drop("hdr"))
        odd_parts.append(bad.drop("hdr"))  # glued records or no header: per line
    # `Request X aborted./failed …` (rare, several events per lead): per line when valid.
    candidates, rest = split(rest, rest["raw"].str.contains(_REQ_LIT))
    if candidates.height:
        good, bad = split(
            candidates, (candidates["hdr"] == 1) & candidates["raw"].str.contains(_REQ_VALID)
        )
        odd_parts.append(good.drop("hdr"))
        rest = join(rest, bad)
    # 5. everything else: blank, one vLLM header (other), uvicorn's own lines, or odd.
    if rest.height:
        # Anchored: fails at the first non-space byte, so cheap on ordinary lines.
        blank, rest = split(rest, rest["raw"].str.contains(r"^\s*$"))
        claim("blank", blank)
        other, rest = split(rest, rest["hdr"] == 1)
        claim("other", other.drop("hdr"))
        uvi, rest = split(rest, (rest["hdr"] == 0) & rest["raw"].str.contains(_UVICORN_PROBE))
        claim("other_uvi", uvi.drop("hdr"))
        # 6. lines with nothing the per-line path could read (no header, no literal, no
        # envelope) after a line they cannot continue: unrecognised here, so a file of noise
        # costs what a log costs, not a Python call per line.
        bare = rest["raw"].str.strip_chars_end("\r\n")
        lone, rest = split(
            rest,
            (rest["hdr"] == 0) & ~bare.str.contains(_ENVELOPE_CUE) & ~bare.str.contains(_PLAIN_CUE),
        )
        if lone.height:
            prev = before(lone)
            joinable = (
                (prev.str.len_chars() >= _lines.WRAP_MIN)
                & (
                    prev.str.contains(_ENVELOPE_CUE)
                    | prev.str.contains(cat.TIMESTAMP)
                    | prev.str.contains_any(_KIND_LITERALS)
                )
            ).fill_null(False)
            tails, noise = split(lone, joinable)
            claim("unrec", noise.drop("hdr"))
            rest = join(rest, tails)
        odd_parts.append(rest.drop("hdr"))

    return routed, odd_parts


def _assemble(
    routed: dict[str, list[pl.DataFrame]],
    odd_parts: list[pl.DataFrame],
    settled: dict[str, int],
    n: int,
    before: Callable[[pl.DataFrame], pl.Series],
    want_all: bool,
) -> _Batch:
    """Extract the claimed parts (or count them, in summary mode) and parse the odd lines.

    `settled` counts lines whose kind is known but whose text was not kept (summary mode);
    `before(odd)` gives the physical line before each line of `odd` (sorted by line), for
    hard-wrap continuations.
    """
    frames: dict[str, list[pl.DataFrame]] = {kind: [] for kind in FRAME_SCHEMAS}
    accounting = LineAccounting(lines=n)
    counts = {name: sum(part.height for part in parts) for name, parts in routed.items()}
    for name, count in settled.items():
        counts[name] = counts.get(name, 0) + count
    accounting.blank_lines = counts.get("blank", 0)
    summarized: dict[str, int] = {}
    rejected = pl.DataFrame(schema=_UNRECOGNIZED_ROWS)
    if "stats" in routed:
        stats, rejected = _stats_frames(pl.concat(routed["stats"], how="diagonal"))
        frames["scheduler_stats"].append(stats)
        counts["stats"] -= rejected.height
    builders = {
        "requests": ("requests", _requests_frame),
        "access": ("access", _access_frame),
        "other": ("other", lambda sub: _other_frame(sub, uvicorn=False)),
        "other_uvi": ("other", lambda sub: _other_frame(sub, uvicorn=True)),
    }
    for name, (kind, builder) in builders.items():
        if name not in counts:
            continue
        if want_all:
            frames[kind].append(builder(pl.concat(routed[name], how="diagonal")))
        else:
            summarized[kind] = summarized.get(kind, 0) + counts[name]

    odd_parts = [part for part in odd_parts if part.height]
    parsed = 0
    if odd_parts:
        odd = pl.concat([part.select("line", "raw") for part in odd_parts]).sort("line")
        odd = odd.with_columns(before(odd).rename("prev"))
        result = _lines.parse_odd_lines(
            [(int(a), str(b), c) for a, b, c in odd.select("line", "raw", "prev").iter_rows()]
        )
        parsed = result.parsed_lines
        accounting.blank_lines += result.blank_lines
        for kind, rows in result.rows.items():
            frames[kind].append(_rows_frame(kind, rows))
        if result.unrecognized:
            frames["unrecognized"].append(
                pl.DataFrame(
                    result.unrecognized,
                    schema=_UNRECOGNIZED_ROWS,
                    orient="row",
                )
            )
        accounting.unrecognized_lines += len(result.unrecognized)
    if rejected.height:
        frames["unrecognized"].append(rejected)
        accounting.unrecognized_lines += rejected.height
    if "cut" in routed:
        frames["unrecognized"].extend(routed["cut"])
        accounting.unrecognized_lines += sum(part.height for part in routed["cut"])
    if "unrec" in routed:
        noise = pl.concat(routed["unrec"])
        frames["unrecognized"].append(
            noise.select(
                pl.col("line"),
                pl.col("raw").str.strip_chars_end("\r\n").alias("text"),
                pl.lit(_lines.NO_FORMAT).alias("reason"),
            )
        )
        accounting.unrecognized_lines += noise.height
    fast_parsed = sum(v for k, v in counts.items() if k not in ("blank", "unrec", "cut"))
    accounting.parsed_lines = fast_parsed + parsed
    return _Batch(frames, accounting, summarized)


def _rows_frame(kind: str, rows: list[dict[str, object]]) -> pl.DataFrame:
    columns = _kind_columns(kind)
    data = {name: [row.get(name) for row in rows] for name in columns}
    return pl.DataFrame(data, schema=columns)


def _finish(
    batch: _Batch,
    *,
    source: str,
    deployment: str,
    options: ParseOptions,
    state: ParseState,
    line_offset: int = 0,
) -> LogFrames:
    """Date a routed batch in order and assemble its frames.

    `line_offset` is added to every line number (chunks are routed with local numbers, since
    the line count of earlier chunks is only known once they are split).
    """
    if line_offset:
        batch.frames = {
            kind: [part.with_columns(pl.col("line") + line_offset) for part in parts]
            for kind, parts in batch.frames.items()
        }
    result = LogFrames(source=source, deployment=deployment, timezone=options.tz)
    result.accounting = batch.accounting
    result.summarized = dict(batch.summarized)
    # Kinds without rows keep the empty frames LogFrames starts with: dating and stamping
    # them would only cost (a dozen Polars queries per kind, whatever the batch size).
    kinds: dict[str, pl.DataFrame] = {}
    for kind, parts in batch.frames.items():
        if kind == "unrecognized" or not parts:
            continue
        target = _KIND_SCHEMAS[kind]
        # Parts already in the target schema (the usual case) need no select and cast.
        same = [p if p.schema == target else p.select(list(target)).cast(target) for p in parts]
        kinds[kind] = (same[0] if len(same) == 1 else pl.concat(same)).sort("line", nulls_last=True)
    if kinds:
        _date_and_stamp(
            kinds, result, source=source, deployment=deployment, options=options, state=state
        )
    unrec = batch.frames["unrecognized"]
    if unrec:
        result.frames["unrecognized"] = (
            pl.concat(unrec)
            .sort("line")
            .with_columns(
                pl.lit(source, dtype=pl.String).alias("source"),
                pl.lit(deployment, dtype=pl.String).alias("deployment"),
            )
            .select(list(FRAME_SCHEMAS["unrecognized"]))
        )
    result.year_source = state.years.source
    result.vllm_version, result.log_era = _version_and_era(result)
    return result


def _date_and_stamp(
    kinds: dict[str, pl.DataFrame],
    result: LogFrames,
    *,
    source: str,
    deployment: str,
    options: ParseOptions,
    state: ParseState,
) -> None:
    """Resolve the years of a batch's rows in order and store the stamped frames in `result`."""
    stamped_rows = pl.concat(
        [
            frame.select("line", "_mon", "_day", "_hms", "_wts", "_bulk").filter(
                pl.col("_mon").is_not_null()
            )
            for frame in kinds.values()
        ]
    ).sort("line")
    anchor_first(
        stamped_rows,
        state.years,
        carried=_carried_time(kinds) if options.year_from_content else None,
        name_time=options.name_time,
        tz=options.tz,
        year=options.year,
        start=options.start,
        reference=options.reference_time,
    )
    assert state.years.base_year is not None or stamped_rows.height == 0
    before = (
        state.years.last_year
        if state.years.last_year is not None
        else (state.years.base_year or 1970) + state.years.rollovers,
        state.years.last_month,
    )
    marks = stamped_rows.filter(~pl.col("_bulk").fill_null(False)).unique("line", keep="first")
    years = line_years(
        marks.sort("line"),
        state.years,
        tz=options.tz,
        year=options.year,
        start=options.start,
        reference=options.reference_time,
    )
    bulk = stamped_rows.filter(pl.col("_bulk").fill_null(False)).unique("line", keep="first")
    years = pl.concat([years, bulk_years(bulk.sort("line"), years, before)])
    if state.years.source is None and any(
        frame["_ats"].null_count() < frame.height for frame in kinds.values()
    ):
        state.years.source = "json"
    names = {
        "source": pl.lit(source, dtype=pl.String).alias("source"),
        "deployment": pl.lit(deployment, dtype=pl.String).alias("deployment"),
    }
    for kind, frame in kinds.items():
        stamped = stamp(frame, years, options.tz)
        schema = FRAME_SCHEMAS[kind]
        result.frames[kind] = stamped.select(
            [names.get(name, pl.col(name)) for name in schema]
        ).cast(schema)


def _carried_time(kinds: dict[str, pl.DataFrame]) -> tuple[int, str, str] | None:
    """(line, time, source) of the first row whose data carries a year: a wrapper or JSON time."""
    found: tuple[int, str, str] | None = None
    for frame in kinds.values():
        for column, source in (("_wts", "wrapper"), ("_ats", "json")):
            rows = frame.filter(pl.col(column).is_not_null())
            if rows.height:
                line, text = rows["line"][0], rows[column][0]
                if found is None or line < found[0]:
                    found = (int(line), str(text), source)
    return found


def _version_and_era(frames: LogFrames) -> tuple[str | None, str | None]:
    config = frames["config"]
    if config.height == 0 and frames["scheduler_stats"].height == 0:
        return None, None
    versions = config.filter(pl.col("key") == "vllm_version")["value"]
    version = versions[0] if versions.len() else None
    eras = set(frames["scheduler_stats"]["era"].drop_nulls().unique().to_list())
    engines = config.filter(pl.col("key") == "engine_version")["value"].to_list()
    eras |= {e.lower() for e in engines if e in ("V0", "V1")}
    if not eras:
        era = None
    elif len(eras) == 1:
        era = eras.pop()
    else:
        era = "mixed"
    return version, era


def _held_back(raw: str) -> bool:
    """A last line that may continue in the next batch (see _lines.may_continue)."""
    return _lines.may_continue(raw)


def _parse_series(
    raw: pl.Series,
    *,
    first_line: int,
    source: str,
    deployment: str,
    options: ParseOptions,
    state: ParseState,
    final: bool,
    want_all: bool,
    limits: ReadLimits,
    cut: Mapping[int, int] | None = None,
) -> LogFrames:
    if state.pending:
        first_line = state.pending[0][0]
        raw = pl.concat([pl.Series("raw", [t for _, t in state.pending], dtype=pl.String), raw])
        state.pending = []
    if not final and raw.len() and _held_back(raw[-1]):
        state.pending = [(first_line + raw.len() - 1, raw[-1])]
        raw = raw.head(raw.len() - 1)
    previous = state.last_raw
    if raw.len():
        state.last_raw = raw[-1]
    batch = _route(raw, first_line, previous, want_all, max_line=limits.max_line_bytes, cut=cut)
    return _finish(batch, source=source, deployment=deployment, options=options, state=state)


def parse_lines(
    lines: Iterable[str],
    *,
    source: str,
    deployment: str,
    first_line: int = 1,
    options: ParseOptions = ParseOptions(),
    state: ParseState | None = None,
    final: bool | None = None,
    limits: ReadLimits | None = None,
    cut_lengths: Mapping[int, int] | None = None,
) -> LogFrames:
    """Parse a batch of physical lines (no trailing newline needed).

    With a `state`, batches of one source give the same frames as one go: a last line that may
    be the first half of a hard-wrapped record is held back until the next batch, or until a
    call with `final=True` (default: final unless a state is given).
    A line longer than `limits.max_line_bytes` (default ReadLimits.from_env()) is unrecognised,
    not parsed; `cut_lengths` (line number -> real length) names lines the caller cut already
    (the follower), which are unrecognised with their real length.
    """
    own_state = state if state is not None else ParseState()
    is_final = final if final is not None else state is None
    raw = pl.Series("raw", list(lines), dtype=pl.String)
    return _parse_series(
        raw,
        first_line=first_line,
        source=source,
        deployment=deployment,
        options=options,
        state=own_state,
        final=is_final,
        want_all=True,
        limits=limits or ReadLimits.from_env(),
        cut=cut_lengths,
    )


def _options_for(path: str, options: ParseOptions) -> ParseOptions:
    reference = options.reference_time
    if reference is None and path != "-":
        try:
            reference = datetime.fromtimestamp(os.stat(path).st_mtime, tz=UTC)
        except OSError:
            reference = None
    return ParseOptions(
        year=options.year,
        start=options.start,
        tz=options.tz,
        reference_time=reference,
        name_time=options.name_time or (time_from_name(path) if path != "-" else None),
        year_from_content=True,
    )


def _route_chunk(block: Block, previous: str | None, want_all: bool, max_line: int) -> _Batch:
    # Lines are numbered from 1 in each block; `cut` holds 0-based indexes.
    cut = {index + 1: real for index, real in block.cut.items()}
    return _route(split_lines(block.view), 1, previous, want_all, max_line=max_line, cut=cut)


def iter_parse_path(
    path: str | Path,
    *,
    deployment: str | None = None,
    options: ParseOptions = ParseOptions(),
    chunk_bytes: int = CHUNK_BYTES,
    summary_only: bool = False,
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
    limits: ReadLimits | None = None,
) -> Iterator[LogFrames]:
    """Stream a file chunk by chunk: one LogFrames per chunk, memory flat in the file size.

    Chunks end only after a line that cannot continue on the next one (see
    _reader.safe_cut), so they are routed and extracted independently, `workers` at a time
    (Polars releases the GIL); timestamps are resolved in order in this thread.
    With `summary_only`, requests/access/other rows are counted (LogFrames.summarized) but
    not extracted: what `parse --json` needs, at a fraction of the cost.
    `progress` is called with the number of bytes of each chunk read. `limits` (default
    ReadLimits.from_env()) bound a line, an endless input and a .gz input (docs/frames.md).
    """
    name = str(path)
    dep = deployment or display_name(name)
    opts = _options_for(name, options)
    state = ParseState()
    threads = workers if workers is not None else max(1, min(2, os.cpu_count() or 1))
    previous: str | None = None
    in_flight: deque[Future[_Batch]] = deque()
    next_line = 1

    def finish(future: Future[_Batch]) -> LogFrames:
        nonlocal next_line
        batch = future.result()
        frames = _finish(
            batch,
            source=name,
            deployment=dep,
            options=opts,
            state=state,
            # Chunks are routed with local numbers (from 1): the count before them is known
            # only once the earlier ones are split.
            line_offset=next_line - 1,
        )
        next_line += batch.accounting.lines
        return frames

    with ThreadPoolExecutor(max_workers=threads) as pool:
        read_limits = limits or ReadLimits.from_env()
        max_line = read_limits.max_line_bytes
        for block in iter_blocks(name, chunk_bytes, _lines.may_continue, read_limits):
            if progress is not None:
                progress(len(block.view))
            in_flight.append(pool.submit(_route_chunk, block, previous, not summary_only, max_line))
            previous = last_line(block.view)
            while len(in_flight) > threads:
                yield finish(in_flight.popleft())
        while in_flight:
            yield finish(in_flight.popleft())


def parse_path(
    path: str | Path,
    *,
    deployment: str | None = None,
    options: ParseOptions = ParseOptions(),
    limits: ReadLimits | None = None,
) -> LogFrames:
    """Parse one file (plain or .gz) or "-" for stdin into frames; InputError if unreadable."""
    name = str(path)
    if name != "-" and Path(name).is_dir():
        raise InputError(name, "is a directory (use iter_log_paths to expand it)")
    combined: LogFrames | None = None
    for part in iter_parse_path(name, deployment=deployment, options=options, limits=limits):
        if combined is None:
            combined = part
        else:
            combined.extend(part)
    if combined is None:
        combined = LogFrames(
            source=name, deployment=deployment or display_name(name), timezone=options.tz
        )
    return combined


# Files a directory scan skips: documentation, data and code next to the logs (`.prom`:
# /metrics snapshots, as `preemptscope scrape` and `demo` write them beside vllm.log).
_NOT_LOGS = frozenset({".md", ".json", ".parquet", ".html", ".png", ".py", ".pyc", ".csv", ".prom"})


def iter_log_paths(specs: Sequence[str]) -> Iterator[tuple[str, str | None]]:
    """Expand files, directories (recursive), globs, "-" and "PATH=NAME" into (path, name)."""
    for spec in specs:
        path, name = spec, None
        if "=" in spec and not Path(spec).exists():
            path, _, name = spec.rpartition("=")
            name = name or None
        if path == "-":
            yield path, name
            continue
        candidate = Path(path)
        if candidate.is_dir():
            found = sorted(
                p
                for p in candidate.rglob("*")
                if p.is_file() and not p.name.startswith(".") and p.suffix.lower() not in _NOT_LOGS
            )
            if not found:
                raise InputError(path, "directory contains no files")
            for item in found:
                yield str(item), name
            continue
        if candidate.exists():
            yield path, name
            continue
        matches = sorted(glob.glob(path, recursive=True))
        if not matches:
            raise InputError(path, "no such file, directory or glob match")
        for match in matches:
            if Path(match).is_dir():
                yield from iter_log_paths(
                    [str(Path(match))] if name is None else [f"{match}={name}"]
                )
            else:
                yield match, name
