"""Column-wise extraction of the kinds the vectorised path claims (stats, requests, access,
other): a routed part of raw lines becomes its kind's columns before timestamps are resolved.

Bulk lines are taken apart with positions and small regexes on short slices; what repeats
across lines (prefixes, logger locations, request parts) is parsed once per distinct value.
Never decides which lines a kind claims (the router does) and never dates a row.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import polars as pl
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._envelope import process_of
from preemptscope.ingest._time import SMALL_FRAME
from preemptscope.ingest.schema import FRAME_SCHEMAS

# Helper columns carried until timestamps are resolved.
_HELPERS: dict[str, pl.DataType] = {
    **{k: pl.String() for k in ("_mon", "_day", "_hms", "_wts", "_ats")},
    # Rows of the bulk kinds (requests, access, other) extracted by the vectorised path. They
    # take their year from the nearest other record, so summary mode (which skips them) and
    # full mode date every record the same way.
    "_bulk": pl.Boolean(),
}
_REC_COLS = ("process", "pid", "level")
# Rows of the lines read but not taken (the router's and the stats checks'): `unrecognized`
# before its source and deployment are added.
_UNRECOGNIZED_ROWS = {"line": pl.Int64, "text": pl.String, "reason": pl.String}
_STATS_EXTRACT = cat.ENVELOPE + r"(?P<msg>[^\r\n]*)"


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
    # Polars turns `/ 100` into `* 0.01`; the per-line path does the same (_classify._fraction).
    return expr.cast(pl.Float64, strict=False) * 0.01


def _stats_invalid(msg: pl.Expr) -> pl.Expr:
    """The first stats field whose text is no number of its column (null when all fit)."""
    checks = []
    for name, pattern in cat.STATS_FIELDS:
        if name not in cat.STATS_INT_FIELDS and name not in cat.STATS_FLOAT_FIELDS:
            continue
        text = msg.str.extract(pattern, 1)
        value = text.cast(pl.Int64 if name in cat.STATS_INT_FIELDS else pl.Float64, strict=False)
        bad = text.is_not_null() & (value.is_null() | ~value.cast(pl.Float64).is_finite())
        checks.append(pl.when(bad).then(pl.lit(f"scheduler_stats.{name}")))
    return pl.coalesce(checks)


# What a stats field's number needs to fail its column (the fields' patterns capture ASCII
# digits and dots, which always parse otherwise): 19 digits or more (Int64 overflow; a float
# needs 309), two dots in one number, or dots alone where a float stands. Lines with none of
# these skip the checks (a dozen extractions a chunk, whatever its stats lines).
_STATS_SUSPECT = r"[0-9]{19}|\.[0-9]*\.|: \.+(?: tokens/s|%)"


def _stats_frames(sub: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(stats rows, unrecognised rows: lines whose numbers do not fit their columns)."""
    raw = pl.col("raw")
    suspect = raw.str.contains(_STATS_SUSPECT)
    checked = sub.filter(suspect)
    if checked.height == 0:  # (an empty frame costs the checks' expressions all the same)
        return _stats_frame(sub), pl.DataFrame(schema=_UNRECOGNIZED_ROWS)
    message = raw.str.extract_groups(_STATS_EXTRACT).struct.field("msg")
    # The message once as a column: as an expression it is re-extracted for every field.
    bad = (
        checked.with_columns(message.alias("_msg"))
        .with_columns(_stats_invalid(pl.col("_msg")).alias("_invalid"))
        .filter(pl.col("_invalid").is_not_null())
    )
    if bad.height:
        sub = sub.filter(~pl.col("line").is_in(bad["line"].implode()))
    rejected = bad.select(
        pl.col("line"),
        pl.col("raw").str.strip_chars_end("\r\n").alias("text"),
        pl.concat_str([pl.lit("number not valid: "), pl.col("_invalid")]).alias("reason"),
    )
    return _stats_frame(sub), rejected


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
_DELTA = " (streaming delta):"  # after the id of a `Generated response` delta
# The lead words (with their space, `(s)` or not): their event.
_LEAD_EVENTS = {
    f"{lead}{plural} ": event for lead, event in _REQ_EVENTS.items() for plural in ("", "(s)")
}
# `Aborted request(s) a,b.` (v0.10.1+); no lead starts another, so at most one matches.
# The message may start with the header's space: the words are matched with it.
_REQ_WORDS = "^ ?(?:" + "|".join(_REQ_EVENTS) + r")(?:\(s\))? "
_WORDS_EVENTS = {
    f"{space}{words}": event for words, event in _LEAD_EVENTS.items() for space in ("", " ")
}
# Every text the words pattern matches has its event (so a request id is null where the
# event is, and needs no condition).
assert all(re.fullmatch(_REQ_WORDS[1:], words) for words in _WORDS_EVENTS)
assert len(_WORDS_EVENTS) == 4 * len(_REQ_EVENTS)
# The word an id is read from: up to an ASCII blank or `,`, less the `:` or `.` the row's
# format puts after the id (`Received request %s: `, `Added request %s.`); a `:` inside an id
# stays (`tenant:7`). The router claims the lines whose id ends so (ingest/_claims.py
# `_claimed`). A find over a set of single bytes costs less than one over `\s`, which holds
# wider characters, or one that looks for a `:` with a blank after it. The delta suffix
# starts with a blank.
_ID_END = r"[\t-\r ,]"
_ID_TAIL = ".:"
assert _DELTA[0] == " "
# How much of a message the lead words and the id are looked for in; an id that may run
# past it (with the delta suffix after it) is read again in the whole message.
_REQ_HEAD = 200


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


_PROCESS = pl.Struct({"process": pl.String(), "pid": pl.Int64()})


def _process_of(key: dict[str, object]) -> dict[str, object]:
    proc, pid = process_of(str(key["pre"]), bool(key["wrapped"]))
    return {"process": proc, "pid": pid}


def _process_columns(key: pl.Expr) -> list[pl.Expr]:
    # The per-line path's own reading (one implementation of process prefixes), once per
    # distinct text in front of the level: a few per log.
    found = key.map_elements(_process_of, return_dtype=_PROCESS, skip_nulls=False)
    return [found.struct.field("process"), found.struct.field("pid")]


def _with_prefix(frame: pl.DataFrame, pre: pl.Expr) -> pl.DataFrame:
    """process, pid, _wts from the text in front of the level."""
    frame = frame.with_columns(pre.alias("_pre")).with_columns(
        pl.col("_pre").str.extract(cat.LEADING_WRAPPER_TS, 1).alias("_wts")
    )
    # The container timestamp differs on every line; what follows it repeats.
    wrapped = pl.col("_wts").is_not_null()
    rest = (
        pl.when(wrapped)
        .then(pl.col("_pre").str.slice(pl.col("_wts").str.len_bytes() + 1))
        .otherwise(pl.col("_pre"))
    )
    key = pl.struct(wrapped.alias("wrapped"), rest.alias("pre"))
    return _by_distinct(frame, key, _process_columns).drop("_pre")


def _ascii(frame: pl.DataFrame) -> bool:
    """Whether every raw line of a part is ASCII: then byte offsets are character offsets."""
    raw = pl.col("raw")
    return bool(frame.select((raw.str.len_bytes() == raw.str.len_chars()).all()).item())


def _chars(text: pl.Expr, offset: pl.Expr, ascii: bool) -> pl.Expr:
    """A byte offset from `str.find` as the character offset `str.slice` wants.

    They differ as soon as non-ASCII text (a compose service name, a custom prefix) stands
    before the offset; the prefix up to a found ASCII pattern is always whole UTF-8. `ascii`
    (the part's lines are all ASCII, the usual case) skips the conversion: a when/then
    computes both branches on every row.
    """
    if ascii:
        return offset.cast(pl.Int64)
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


def _header_columns(
    frame: pl.DataFrame, ascii: bool | None, locations: bool = True
) -> pl.DataFrame:
    """Envelope of lines with exactly one vLLM header, plus `_msg_at` (message offset), and
    with `locations` the logger's file and line.

    The envelope (the text up to the header's `] `) repeats on every line a logger prints
    within one second, so it is taken apart once per distinct envelope. A header's only `]`
    is its last but one byte, so when the text up to a line's first `] ` holds a header, it
    is that line's first header and ends there: the same columns as the line's own. Lines
    whose first `] ` ends no header (a `] ` in a prefix) are taken apart one by one.
    `ascii`: whether every line is ASCII (`_ascii`), None when not known yet.
    """
    if frame.height <= SMALL_FRAME:
        return _header_rows(frame, _ascii(frame) if ascii is None else ascii, locations)
    raw = pl.col("raw")
    # The envelope as bytes, cut at the byte offset `str.find` gives (a string slice wants
    # characters, which costs knowing whether the line is ASCII): text up to an ASCII `] `
    # is whole UTF-8.
    end = raw.str.find("] ", literal=True).cast(pl.Int64)
    frame = frame.with_columns(raw.cast(pl.Binary).bin.slice(0, end + 2).alias("_env"))
    keys = frame.select(pl.col("_env").drop_nulls().unique())
    keys = keys.with_columns(pl.col("_env").cast(pl.String).alias("raw"))
    built = (
        _header_rows(keys, _ascii(keys), locations)
        .filter(pl.col("_msg_at") == pl.col("raw").str.len_chars().cast(pl.Int64) - 1)
        .drop("raw")
    )
    joined = frame.join(built, on="_env", how="left", maintain_order="left").drop("_env")
    missed = joined["_msg_at"].is_null()
    if not missed.any():
        return joined
    index = missed.arg_true()
    odd = frame.drop("_env").gather(index)
    redone = _header_rows(odd, _ascii(odd) if ascii is None else ascii, locations)
    return joined.with_columns(
        joined[name].scatter(index, redone[name]) for name in built.columns if name != "_env"
    )


def _header_rows(frame: pl.DataFrame, ascii: bool, locations: bool) -> pl.DataFrame:
    """`_header_columns` computed line by line."""
    raw = pl.col("raw")
    at = pl.col("_at")
    frame = frame.with_columns(
        _chars(raw, raw.str.find(_TS_FIND).cast(pl.Int64), ascii).alias("_at")
    )
    before = pl.min_horizontal(at, 9)
    word = raw.str.slice(at - before, before)
    # No level name ends another, so at most one can end the word.
    frame = frame.with_columns(word.str.extract(_LEVEL_BEFORE_TS, 1).alias("level"))
    pre_end = at - (pl.col("level").str.len_bytes().cast(pl.Int64) + 1).fill_null(0)
    location = raw.str.slice(at + 15, 160)
    close = _chars(location, location.str.find("]", literal=True).cast(pl.Int64), ascii)
    frame = _with_prefix(frame, raw.str.slice(0, pre_end)).with_columns(
        raw.str.slice(at, 2).alias("_mon"),
        raw.str.slice(at + 3, 2).alias("_day"),
        raw.str.slice(at + 6, 8).alias("_hms"),
        pl.lit(None, dtype=pl.String).alias("_ats"),
        (at + 15 + close + 1).alias("_msg_at"),
    )

    if not locations:
        return frame

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


def _word(text: pl.Expr, ascii: bool, delimiters: str = r"[ :,\r\n]") -> pl.Expr:
    """Text up to the first delimiter (a null length, when there is none, means to the end)."""
    found = text.str.find(delimiters, literal=len(delimiters) == 1).cast(pl.Int64)
    end = _chars(text, found, ascii)
    return text.str.slice(0, end)


def _requests_frame(sub: pl.DataFrame) -> pl.DataFrame:
    # The message starts with the row's lead words and the id: positions and anchored regexes
    # with no capture group (a capture runs the slow engine over the id), on the first
    # _REQ_HEAD characters of the message. Each step is a column of its own: an eager select
    # computes a shared sub-expression once per use, and these run on millions of rows; each
    # string column costs a pass, so there are few.
    frame = _header_columns(sub, None, locations=False)
    frame = _request_columns(frame, pl.col("raw").str.slice(pl.col("_msg_at"), _REQ_HEAD))
    # An id the head may have cut (no end in it, or too near its end for the delta suffix,
    # in a message longer than the head): those rows from their whole message (a client's
    # id of ~150 characters or more; the router claims ids of any length).
    cut = (pl.col("_end").is_null() | (pl.col("_end") + len(_DELTA) > pl.col("_after_len"))) & (
        pl.col("raw").str.len_bytes() - pl.col("_msg_at") >= _REQ_HEAD
    )
    index = frame.select(cut.fill_null(False)).to_series().arg_true()
    if index.len():
        whole = _request_columns(frame.gather(index), pl.col("raw").str.slice(pl.col("_msg_at")))
        frame = frame.with_columns(
            frame[name].scatter(index, whole[name]) for name in ("_event", "_id", "_delta")
        )
    return frame.select(
        *_header_envelope(),
        pl.when(pl.col("_delta")).then(pl.lit("delta")).otherwise("_event").alias("event"),
        # Null where the event is: the words match only forms `_WORDS_EVENTS` names.
        pl.col("_id").str.strip_chars_end(_ID_TAIL).alias("request_id"),
    )


def _request_columns(frame: pl.DataFrame, head: pl.Expr) -> pl.DataFrame:
    """`_event`, `_id` (the word, with its tail), `_delta`, `_end` (its end in `_after`,
    the message after the lead words, of `_after_len` bytes) from the message's `head`."""
    frame = frame.with_columns(head.alias("_head"))
    # The lead words with the space before them (the header's `] `), if any: one regex pass;
    # the event is looked up from them.
    frame = frame.with_columns(pl.col("_head").str.extract(_REQ_WORDS, 0).alias("_words"))
    words = pl.col("_words")
    frame = frame.with_columns(
        words.replace_strict(_WORDS_EVENTS, default=None, return_dtype=pl.String).alias("_event"),
        pl.col("_head").str.slice(words.str.len_chars()).alias("_after"),
    )
    after = pl.col("_after")
    event = pl.col("_event")
    # The id runs to the first delimiter: cut as bytes at the byte offset `str.find` gives
    # (text before an ASCII delimiter is whole UTF-8; a null end is the end of the text).
    end = after.str.find(_ID_END).cast(pl.Int64)
    frame = frame.with_columns(end.alias("_end"), after.str.len_bytes().alias("_after_len"))
    # `Generated response X (streaming delta):` is a streamed request's progress, not its end
    # (catalogue row generated_delta): the suffix right after the id says which. It starts
    # with a delimiter, so its first occurrence is right after the id when it is there.
    delta = (event == "generated") & (
        after.str.find(_DELTA, literal=True).cast(pl.Int64) == pl.col("_end")
    )
    return frame.with_columns(
        after.cast(pl.Binary).bin.slice(0, pl.col("_end")).cast(pl.String).alias("_id"),
        delta.alias("_delta"),
    )


# What uvicorn's `INFO:` is followed by, as the per-line path's `\s+` reads it in ASCII (the
# router's client checks too).
_BLANKS = " \t\x0b\x0c\r"


def _access_frame(sub: pl.DataFrame) -> pl.DataFrame:
    raw = pl.col("raw")
    ascii = _ascii(sub)
    frame = sub.with_columns(
        _chars(raw, raw.str.find("INFO:", literal=True).cast(pl.Int64), ascii).alias("_info"),
        _chars(raw, raw.str.find(' - "', literal=True).cast(pl.Int64), ascii).alias("_dash"),
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
        _word(client.str.strip_chars_start(_BLANKS), ascii, " ").alias("client"),
        pl.col("method"),
        pl.col("path"),
        pl.col("http_version"),
        pl.col("status"),
    )


def _other_frame(sub: pl.DataFrame, uvicorn: bool) -> pl.DataFrame:
    if uvicorn:
        raw = pl.col("raw")
        start = _chars(raw, raw.str.find(_LEVEL_FIND).cast(pl.Int64), _ascii(sub))
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
        frame = _header_columns(sub, _ascii(sub)).with_columns(
            _message(pl.col("_msg_at")).alias("message")
        )
    return frame.select(
        *_header_envelope(),
        pl.col("logger_file"),
        pl.col("logger_line"),
        pl.col("message"),
    )
