"""Routing: every line of a batch to its kind (column-wise), the odd ones to the per-line path.

A cascade of literal probes and Rust-regex checks (linear time) claims the well-formed common
lines for column-wise extraction (ingest/_extract.py); preemption, KV-sizing and config lines
and every odd line (JSON, foreign formats, glued records, hard-wraps, damage) go to the
per-line path (ingest/_lines.py) in line order; lines nothing could read are unrecognised
here. `_assemble` puts a batch together so its accounting adds up.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

import polars as pl
from preemptscope.ingest import _cues, _envelope, _glue, _lines, prompts
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._extract import (
    _BLANKS,
    _UNRECOGNIZED_ROWS,
    _access_frame,
    _chars,
    _kind_columns,
    _other_frame,
    _requests_frame,
    _stats_frames,
)
from preemptscope.ingest.schema import FRAME_SCHEMAS, LineAccounting

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
# uvicorn's access literals: ` HTTP/` and, around the client, `INFO:` and ` - "`.
_ACCESS_HTTP, _ACCESS_LEVEL, _ACCESS_DASH = " HTTP/", "INFO:", ' - "'


@dataclass
class _Batch:
    frames: dict[str, list[pl.DataFrame]]
    accounting: LineAccounting
    summarized: dict[str, int]  # rows recognised but not extracted (summary mode)
    # PROMPTS rows (ingest/prompts.py) of the request lines showing ids, when requests are kept.
    prompts: list[pl.DataFrame] = field(default_factory=list)


def _unwrap_json_file(raw: pl.Series) -> pl.Series:
    """docker's json-file lines (`{"log": "...\\n", "stream": ..., "time": ...}`) as
    `<time> <log>`, the form docker --timestamps prints, so they take the vectorised path.

    Lines that do not decode (or carry no container time: the per-line path reads the log
    alone then, and `x <log>` would be another text in front of it; or a log that is no
    string) are left as they are for the per-line path.
    Only lines that may be JSON objects are decoded (a `{"log": [[[[...` line 5,000 deep cost
    its decoding twice).
    """
    index = _cues.json_objects(raw, raw.str.starts_with('{"log":')).arg_true()
    if index.len() == 0:
        return raw.rename("raw")
    # The log and the time decoded once each, as columns (an eager select decodes an
    # expression again for each use).
    frame = pl.DataFrame({"raw": raw.gather(index)}).with_columns(
        pl.col("raw").str.json_path_match("$.log").str.strip_chars_end("\r\n").alias("log"),
        pl.col("raw").str.json_path_match("$.time").alias("time"),
    )
    log, time = pl.col("log"), pl.col("time")
    unwrapped = pl.concat_str([time, pl.lit(" "), log])
    container = time.str.contains(f"^{cat.WRAPPER_TIME}$")
    # A string, as the per-line path needs it (json_path_match gives an array's JSON text).
    text = pl.col("raw").str.contains(r'^\{"log": ?"')
    decoded = frame.select(
        pl.when(container & text & ~log.str.contains("\n", literal=True))
        .then(unwrapped)
        .otherwise(pl.col("raw"))
    ).to_series()
    return raw.clone().rename("raw").scatter(index, decoded)


_BLANK = rf"^(?:\s|{cat.ANSI_SGR})*$"
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


def _route(
    raw: pl.Series,
    first_line: int,
    previous: str | None,
    keep: frozenset[str],
    *,
    max_line: int,
    cut: Mapping[int, int] | None = None,
    fast: bool = True,
) -> _Batch:
    """Route every line of a Series and extract the vectorised kinds.

    Lines longer than `max_line` bytes, and those in `cut` (line number -> real length: cut
    by the reader), are unrecognised with their real length and not parsed. With `fast`,
    short lines of noise are settled in bulk first (_short_noise); without it, every line
    takes the cascade (the reading _short_noise must give, which the tests compare it with).
    """
    n = raw.len()
    if n == 0:
        return _Batch({kind: [] for kind in FRAME_SCHEMAS}, LineAccounting(lines=0), {})
    df = pl.DataFrame({"raw": raw}).with_columns(
        pl.int_range(first_line, first_line + n, dtype=pl.Int64).alias("line")
    )
    noise = _short_noise(raw, df["line"], max_line, cut or {}) if fast else None
    if noise is not None:
        df = df.filter(~noise[0])
    too_long = _too_long(df, max_line, cut or {})
    if too_long is not None:
        df = df.filter(~pl.col("line").is_in(too_long["line"].implode()))
    before = _before(raw, first_line, previous)
    routed, odd_parts = _cascade(df, before)
    if too_long is not None:
        routed["cut"] = [too_long]
    if noise is not None:
        routed["noise"] = [noise[1]]

    def physical(lines: pl.Series) -> pl.Series:
        return raw.gather(lines - first_line).str.strip_chars_end("\r\n")

    return _assemble(routed, odd_parts, {}, n, before, keep, physical)


def _before(
    raw: pl.Series, first_line: int, previous: str | None
) -> Callable[[pl.DataFrame], pl.Series]:
    """`before(part)`: the physical line before each line of `part` (a frame with `line`),
    as the per-line path reads it (_as_read); `previous` is the line before `raw`'s first."""

    def before(odd: pl.DataFrame) -> pl.Series:
        index = odd["line"] - first_line
        outside = index == 0
        inside = raw.gather((index - 1).clip(lower_bound=0))
        prev = pl.select(
            pl.when(outside)
            .then(pl.lit(previous, dtype=pl.String))
            .when(index > 0)  # (none known before the line before the batch)
            .then(inside)
        ).to_series()
        return _as_read(prev, outside)

    return before


# Short lines of noise (`a_b`, tqdm's `a\rb`), settled in bulk. A line this short (newline
# included) cannot make the line after it a record's tail (_cues.may_be_continued and the
# cascade's own check need _glue.WRAP_MIN characters), so a short line whose text the
# cascade claims as noise after short lines (step 6: nothing the per-line path could read)
# is noise wherever it stands after two short lines: which texts those are is asked of the
# cascade itself, once per distinct text, not settled by a list of its own. The texts are
# found in a sample of the batch (most lines of such a file are alike); a line whose text
# the sample missed takes the cascade as any other, so the sample decides the cost, never
# the reading.
SHORT_NOISE_BYTES = 16
assert SHORT_NOISE_BYTES < _glue.WRAP_MIN
SHORT_NOISE_MIN = 4096  # lines settled in bulk in a batch before the bulk path pays for itself
SHORT_NOISE_SHARE = 4  # and at least a quarter of the sampled lines noise texts
_SAMPLE = 1 << 16  # lines sampled, about
_DISTINCT_MAX = 1024  # distinct short texts routed on their own, at most


def _short_noise(
    raw: pl.Series, lines: pl.Series, max_line: int, cut: Mapping[int, int]
) -> tuple[pl.Series, pl.DataFrame] | None:
    """(mask, unrecognised rows) of the lines of `raw` settled as noise in bulk, or None:
    short, a text the cascade claims as noise (_noise_texts), not cut, after two short lines
    of the batch (the line before the batch is not looked at: its first two lines take the
    cascade). The rows are the cascade's: line, the physical text without its line end, and
    the reason."""
    limit = min(SHORT_NOISE_BYTES, max_line)
    first_line = cast(int, lines[0])
    sample = raw.gather_every(max(1, raw.len() // _SAMPLE))
    short = sample.filter(sample.str.len_bytes() <= limit)
    distinct = short.unique()
    if distinct.len() == 0 or distinct.len() > _DISTINCT_MAX:
        return None
    noise = _noise_texts(distinct)
    if noise.len() == 0 or short.is_in(noise.implode()).sum() * SHORT_NOISE_SHARE < sample.len():
        return None
    # Which noise text each line is: one comparison a line where the file repeats one text
    # (`a\rb` over and over), else one hash lookup a line (null: none).
    one = noise.len() == 1
    codes = None if one else raw.cast(pl.Enum(noise), strict=False).to_physical()
    member = raw == noise[0] if codes is None else codes.is_not_null()
    lengths = raw.str.len_bytes() <= limit
    mask = member & lengths.shift(1, fill_value=False) & lengths.shift(2, fill_value=False)
    if cut:
        index = [line - first_line for line in cut if 0 <= line - first_line < raw.len()]
        if index:
            mask = mask.scatter(index, False)
    count = int(mask.sum())
    if count < SHORT_NOISE_MIN:
        return None
    texts = noise.str.strip_chars_end("\r\n")
    rows = pl.DataFrame(
        {
            "line": lines.filter(mask),
            "text": pl.repeat(texts[0], count, eager=True)
            if codes is None
            else texts.gather(codes.filter(mask)),
        }
    ).with_columns(pl.lit(_lines.NO_FORMAT, dtype=pl.String).alias("reason"))
    return mask, rows


def _noise_texts(texts: pl.Series) -> pl.Series:
    """Of distinct short line texts, those the cascade claims as noise (step 6's `unrec`)
    when each stands after two blank lines."""
    fake = pl.Series("raw", [x for t in texts.to_list() for x in ("\n", "\n", t)], dtype=pl.String)
    df = pl.DataFrame({"raw": fake}).with_columns(
        pl.int_range(1, fake.len() + 1, dtype=pl.Int64).alias("line")
    )
    routed, _ = _cascade(df, _before(fake, 1, "\n"))
    if "unrec" not in routed:
        return texts.clear()
    lines = pl.concat(routed["unrec"])["line"]
    lines = lines.filter(lines % 3 == 0)
    return fake.gather(lines - 1)


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
    The text is read here unwrapped (docker json-file) and without ANSI codes; the lines for
    _lines, and those unrecognised here, keep their physical text: the per-line path reads
    them as it reads any line, and an unrecognised row shows the line of the file.
    """
    original = df
    raw = df["raw"]
    raw_c = pl.col("raw")
    brace = raw.str.starts_with("{")
    wrapped = brace.any() and raw.str.starts_with('{"log":').any()
    if wrapped:
        raw = _unwrap_json_file(raw)
        df = df.with_columns(raw)
        brace = raw.str.starts_with("{")
    unusual = _cues.either(
        raw,
        lambda sub: sub.str.contains(r"\x1b|\r"),
        _cues.colour_code,
    )
    # tqdm redraws (a `\r` inside the line): with no vLLM header, the per-line path reads the
    # text after the last `\r` (_envelope._clean), which the router reads here as the line;
    # the rest (a header, a request's text, a process prefix kept in front) go per line.
    carriage = unusual & raw.str.contains("\r", literal=True) if unusual.any() else unusual
    redraw = pl.Series([], dtype=pl.Boolean)
    if carriage.any():
        carriage = carriage & ~raw.str.contains(_ONE_CLOSING_CR)
        redraw, raw = redraws(raw, carriage & ~original["raw"].str.starts_with("{"))
        if redraw.any():
            df = df.with_columns(raw.rename("raw"))
    # The lines whose text routing changed in a way the per-line path does not read them
    # (step 6 reads those again from their physical text, _continued). Not a settled redraw:
    # the per-line path reads every line after its redraws (_envelope.clean), as a record,
    # as a hard-wrap's half and as the line before another.
    changed = []
    ansi = _cues.both(unusual, raw, _cues.ansi) if unusual.any() else unusual
    if ansi.any():
        changed.append(df["line"].filter(ansi))
        df = df.with_columns(pl.when(ansi).then(_cues.strip_ansi(raw_c)).otherwise(raw_c))
    stripped = pl.concat(changed).unique() if changed else None
    rewritten = wrapped or redraw.any() or ansi.any()
    physical = _physical(original) if rewritten else _as_it_is
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

    def claim_fitting(name: str, part: pl.DataFrame, *unsure: str) -> None:
        # A number past 64 bits (`unsure`: where it may be): per line.
        if part.height:
            checks = [lambda sub, pattern=pattern: sub.str.contains(pattern) for pattern in unsure]
            long, part = split(part, _cues.either(part["raw"], *checks))
            odd_parts.append(physical(long.drop("hdr")))
            claim(name, part.drop("hdr"))

    # 0. Lines that take the per-line path whatever they contain: JSON, tqdm redraws, Ray's
    # deduplicated repeats (one line, several records).
    text = df["raw"]
    if brace.any():
        # Only a JSON value is read as JSON; a line that starts with `{` but does not parse
        # (`{"log": [[[[...`, a cut object) is text like any other.
        brace = _cues.both(
            _cues.json_objects(text, brace),
            text,
            lambda sub: sub.str.json_path_match("$").is_not_null(),
        )
    odd_mask = brace | text.str.contains(cat.RAY_REPEAT_LITERAL, literal=True)
    # On the text before its codes are stripped, as the per-line path reads it: `]: \r\x1b[32m`
    # is a redraw of codes alone (blank) there, and a line ending in `\r` once stripped.
    if carriage.any():
        odd_mask = odd_mask | (carriage & ~redraw if redraw.len() else carriage)
    if odd_mask.any():
        odd, df = split(df, odd_mask)
        odd_parts.append(physical(odd))
    # 1. uvicorn access lines, the bulk of a busy server's log: among the lines with
    # uvicorn's access literals in order, the common shape by one pattern proved to read as
    # ACCESS_ROW reads it per line (_ACCESS_CANON), any other by _access_verdicts' checks.
    access, rest = split(df, df["raw"].str.contains(_ACCESS_FAST))
    if access.height:
        text = access["raw"]
        canon = text.str.contains(_ACCESS_CANON) & (text.str.len_bytes() <= _envelope.RECORD_BUDGET)
        common, access = split(access, canon)
        claim("access", common)
    if access.height:
        # A vLLM header makes it a vLLM record (an access line quoted in a prompt is data).
        # (`] ` first: a literal scan; uvicorn's access lines have none.)
        text = access["raw"]
        header = text.str.contains("] ", literal=True)
        if header.any():
            header = header & text.str.contains(cat.HEADER_CORE)
        plain = _cues.both(~header, text, _dash_after_level)
        good, bad = split(access, plain)
        rest = join(rest, bad)
        if good.height:
            verdict = _access_verdicts(good["raw"])
            claim("access", good.filter(verdict == _CLAIM))
            odd_parts.append(physical(good.filter(verdict == _PER_LINE)))
            rest = join(rest, good.filter(verdict == _CASCADE))
    # A line's first envelope is its envelope: a vLLM header behind uvicorn's `LEVEL:`, a
    # foreign envelope or a request's text is in that message (a prompt logged under any
    # logging format, an access line's client from X-Forwarded-For: anyone's text). Such
    # lines go to the per-line path, which reads the first envelope (_envelope.envelope):
    # here any level word or request literal in front of the first header but its own level
    # (more lines than the per-line path reads so, never fewer).
    # (The headers of each line counted once, here: this step, the stats and request claims
    # and step 5 read the count.)
    rest = rest.with_columns(_cues.header_counts(rest["raw"]).alias("hdr"))
    if rest.height:
        behind = _header_not_first(rest["raw"], rest["hdr"])
        if behind.any():
            behind_other, rest = split(rest, behind)
            odd_parts.append(physical(behind_other.drop("hdr")))
    # 2. kinds parsed per line (preemption, KV sizing, config).
    py, rest = split(rest, rest["raw"].str.contains(_PY_LIT))
    odd_parts.append(_settled(physical(py.drop("hdr"))))
    # 3. scheduler stats: well-formed single records only; anything else is damage.
    candidates, rest = split(rest, rest["raw"].str.contains(_STATS_LIT))
    if candidates.height:
        single = candidates["hdr"] == 1
        valid = single & candidates["raw"].str.contains(_STATS_VALID)
        good, bad = split(candidates, valid & ~candidates["raw"].str.contains(_STATS_UNSURE))
        claim("stats", good.drop("hdr"))
        odd_parts.append(_settled(physical(bad.drop("hdr"))))
    # 4. request lifecycle lines; a request literal elsewhere in a message is just "other".
    candidates, rest = split(rest, rest["raw"].str.contains_any(_REQ_STARTS))
    if candidates.height:
        good, bad = split(
            candidates,
            (candidates["hdr"] == 1) & candidates["raw"].str.contains(_REQ_CLAIM),
        )
        claim_fitting("requests", good, _LONG_PID)
        # Glued records, no header, an id of another shape: per line.
        odd_parts.append(physical(bad.drop("hdr")))
    # `Request X aborted./failed …` (rare, several events per lead), and a request literal
    # elsewhere in a message behind one header: per line, which may join it with the next
    # line as a hard-wrap's first half (_glue.incomplete: a kind literal, no record).
    candidates, rest = split(rest, rest["raw"].str.contains(_REQ_LIT))
    if candidates.height:
        good, bad = split(candidates, candidates["hdr"] == 1)
        odd_parts.append(physical(good.drop("hdr")))
        rest = join(rest, bad)
    # 5. everything else: blank, one vLLM header (other), uvicorn's own lines, or odd.
    if rest.height:
        # Anchored: fails at the first byte that is no space and starts no colour code, so
        # cheap on ordinary lines. A line of ESC-less codes alone is blank, as the per-line
        # path (which strips every code) reads it.
        blank, rest = split(rest, rest["raw"].str.contains(_BLANK))
        claim("blank", blank)
        other, rest = split(rest, rest["hdr"] == 1)
        claim_fitting("other", other, _LONG_PID, _LONG_LINENO)
        uvicorn = _cues.both(
            rest["raw"].str.contains(_cues.UVICORN_LITERALS),
            rest["raw"],
            lambda sub: sub.str.contains(_cues.UVICORN_PROBE),
        )
        # A second level word may be a foreign envelope's, which the per-line path reads
        # first (`... - INFO - Finished request x.(APIServer pid=1) INFO:     Started ...`),
        # unless uvicorn's level opens the line: then it is the line's first envelope (an
        # access line's client from X-Forwarded-For may hold any level word).
        uvicorn = _cues.both(
            uvicorn,
            rest["raw"],
            lambda sub: ~sub.str.contains(_TWO_LEVEL_WORDS) | sub.str.contains(_UVICORN_FIRST),
        )
        uvi, rest = split(rest, (rest["hdr"] == 0) & uvicorn)
        claim_fitting("other_uvi", uvi, _LONG_PID)
        # 6. lines with nothing the per-line path could read (no header, no literal, no
        # envelope) after a line they cannot continue: unrecognised here, so a file of noise
        # costs what a log costs, not a Python call per line.
        # Each check only on the lines the ones before left (_cues.either).
        headerless, rest = split(rest, rest["hdr"] == 0)
        text = headerless["raw"].str.strip_chars_end("\r\n")
        # Progress bars of tqdm's common shape are read by it alone (_bars): the checks below
        # run on the other lines only.
        bar = _bars(headerless, stripped)
        bare, readable = _readings(text, bar)
        lone, more = split(headerless, ~readable)
        if more.height:
            # A progress bar (tqdm) opening a line the per-line path finds no envelope in is
            # an `other` row of its own text: read here unless the line before may make it a
            # record's tail (then the per-line path reads it in context).
            sure = _sure(text, bare, readable, bar)
            if sure.any():
                bars, more = split(more, sure.filter(readable))
                after = _continued(
                    bars,
                    text.filter(sure),
                    bare.filter(sure),
                    stripped,
                    before,
                    plain=bar.filter(sure),
                )(bars)
                tails, bars = split(bars, after)
                more = join(more, tails)
                claim("plain", bars.drop("hdr"))
        rest = join(rest, more)
        if lone.height:
            lonely = ~readable
            continued = _continued(lone, text.filter(lonely), bare.filter(lonely), stripped, before)
            # A line that starts with `{` is an envelope of its own: nobody's tail.
            own, others = split(lone, lone["raw"].str.starts_with("{"))
            claim("unrec", physical(own.drop("hdr")))
            if others.height:
                tails, noise = split(others, continued(others))
                claim("unrec", physical(noise.drop("hdr")))
                rest = join(rest, tails)
        odd_parts.append(physical(rest.drop("hdr")))

    return routed, odd_parts


# In front of the first `\r`: a process prefix or a rank the per-line path may keep in front
# of the last redraw (_envelope._clean).
_REDRAW_PREFIX = r"^[^\r]*(?:pid=|\[rank)"


def _settles(text: pl.Series) -> pl.Series:
    """Lines with a `\r` inside that the per-line path reads as their text after the last
    `\r` alone: no vLLM header anywhere (with codes, as _envelope._clean looks for one), no
    process prefix that may stand in front of the first `\r`, no request literal."""
    header = _cues.gated(text, "] ", cat.HEADER_CORE)
    # A request literal: its text may run over the `\r`s (_envelope._clean), per line.
    return ~header & ~text.str.contains(_REDRAW_PREFIX) & ~text.str.contains(_REQ_LIT)


# A line whose one `\r` closes it (before its newline): no redraw.
_ONE_CLOSING_CR = r"^[^\r]*\r\n?$"


def redraws(raw: pl.Series, candidates: pl.Series) -> tuple[pl.Series, pl.Series]:
    """Of `candidates` (lines with a `\r` inside, none of them a JSON object), those settled
    as their text after the last `\r` (_settles), and `raw` with those lines so rewritten."""
    redraw = _cues.both(candidates, raw, _settles)
    if not redraw.any():
        return redraw, raw
    index = redraw.arg_true()
    after = _after_redraws(raw.gather(index))
    # A JSON object after the redraw is read as one per line (docker json-file, vLLM's JSON
    # formatter): the router decodes one only where a line starts with it.
    json = after.str.starts_with("{")
    if json.any():
        redraw = redraw.scatter(index.filter(json), False)
        index, after = index.filter(~json), after.filter(~json)
    return redraw, raw.scatter(index, after)


def redrawn(prev: pl.Series) -> pl.Series:
    """Physical lines as routing reads them before their colour codes go (a redraw it
    settles as its text after the last `\r`, which the per-line path reads of it too): what
    step 6 judges a line before by."""
    candidates = (
        prev.str.contains("\r", literal=True)
        & ~prev.str.contains(_ONE_CLOSING_CR)
        & ~prev.str.starts_with("{")
    ).fill_null(False)
    if not candidates.any():
        return prev
    return redraws(prev, candidates)[1]


def _after_redraws(text: pl.Series) -> pl.Series:
    """The text after the last `\r` of each line, its closing `\r`s and newline first
    dropped, as _envelope.clean drops them (a line holds a `\n` at its end only)."""
    after = text.str.extract(r"\r([^\r\n]+)\r*\n?$", 1)
    missing = after.is_null().arg_true()  # `\r`s only after the text (`a\r\r`)
    if missing.len() == 0:
        return after
    return after.scatter(missing, text.gather(missing).str.strip_chars_end("\r\n"))


# A progress bar at the line start (cat.PLAIN_LINES), and what makes the per-line path read
# something else in such a line: a compose prefix in front (_envelope._process_only; here an
# ASCII superset of cat.COMPOSE, whose `\w` the two engines read apart).
_PROGRESS = next(pattern for name, pattern in cat.PLAIN_LINES if name == "progress")
_COMPOSE_FIRST = r"^[A-Za-z0-9][^ \n|]{0,80} +\| "
assert cat.COMPOSE == r"[A-Za-z0-9][\w.-]{0,80} +\| "


def _progress(text: pl.Series, bare: pl.Series) -> pl.Series:
    """Lines (without a header or a kind literal: step 6's) the per-line path reads as a
    progress bar of no envelope, message and all: the bar opens the text, which routing and
    as_cleaned leave as it is, within the per-line budget, with no envelope cue, wrapper or
    compose prefix (_cues.readable's other reasons)."""
    return _cues.both(
        text.str.contains(_PROGRESS),
        text,
        lambda sub: _cues.either(
            sub,
            _cues.envelope_cue,
            lambda part: part.str.contains(_cues.WRAPPER_START),
            lambda part: part.str.contains(_COMPOSE_FIRST),
            lambda part: part.str.len_bytes() > _envelope.RECORD_BUDGET,
        ).not_(),
    ) & (bare.str.len_bytes() == text.str.len_bytes())


# tqdm's bar in its common form (`desc: 42%|####  | 42/100 [00:09<00:12, 4.2it/s, ...]`), a
# strict subset of _PROGRESS, drawn so that no check of step 6 can read more in it: no ESC,
# `[` only before the elapsed time (no colour code), `]` only at the end (no syslog pid), no
# `{` or `-` (no JSON or wrapper start, no vLLM timestamp), no `"` or `=` and no `|` beyond
# the bar's two (no compose prefix); the description at most 80 characters, so far within
# the per-line budget. Its letters may still spell an envelope cue or a request literal:
# _BAR_CUES, one literal scan.
_BAR = (
    r'^[^|\n\r\x1b\[\]{}"=-]{0,80}: *[0-9]{1,3}%\|'
    "[ #0-9\u2588-\u258f]{0,200}"  # tqdm's ASCII and Unicode bars (blocks U+2588-U+258F)
    r"\|"
    r" *[0-9]+/[0-9]+ \[[0-9]{1,2}:[0-9]{2}[0-9A-Za-z:<?,./ ]{0,200}\]\r?\n?$"
)
_BAR_CUES = f"{_cues.ENVELOPE_LITERALS}|{_REQ_LIT}"
FAST_BARS = True  # off: every line takes the checks below (what tests compare _bars with)


def _bars(lines: pl.DataFrame, stripped: pl.Series | None) -> pl.Series:
    """Lines of `lines` (step 6's: no header, no kind literal) that are tqdm bars of _BAR's
    shape, as routing and as_cleaned leave them (not `stripped` of codes): step 6 reads each
    as readable, a bar (_progress) with no cue that makes the next line a record's tail
    (_continued's `plain`), in two scans instead of some twenty."""
    if not FAST_BARS or lines.height == 0:
        return pl.repeat(False, lines.height, dtype=pl.Boolean, eager=True)
    raw = lines["raw"]
    bar = _cues.both(
        raw.str.contains(_BAR), raw, lambda sub: ~sub.str.contains(_BAR_CUES)
    ).fill_null(False)
    if stripped is not None and bar.any():
        bar = bar & ~lines["line"].is_in(stripped.implode())
    return bar


def _readings(text: pl.Series, bar: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(bare, readable) of step 6 for `text`: the line without codes (as_cleaned), and may the
    per-line path read something in it; for the lines of `bar` (_bars) known without a
    check: their text, true."""
    index = (~bar).arg_true()
    if index.len() == text.len():
        bare = _cues.as_cleaned(text)
        return bare, _cues.readable(bare)
    if index.len() == 0:
        return text, bar
    some = _cues.as_cleaned(text.gather(index))
    return text.clone().scatter(index, some), bar.clone().scatter(index, _cues.readable(some))


def _sure(text: pl.Series, bare: pl.Series, readable: pl.Series, bar: pl.Series) -> pl.Series:
    """Of the `readable` lines, the bars of no envelope (_progress), known for `bar`'s."""
    index = (readable & ~bar).arg_true()
    if index.len() == text.len():
        return readable & _progress(text, bare)
    if index.len() == 0:
        return bar
    return bar.clone().scatter(index, _progress(text.gather(index), bare.gather(index)))


def _physical(df: pl.DataFrame) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """A part of a frame routed from `df` (raw, line; sorted by line) with the text `df`
    has: what _cascade gives the per-line path and unrecognised rows once it has rewritten
    the text it routes."""
    lines, text = df["line"], df["raw"]

    def physical(part: pl.DataFrame) -> pl.DataFrame:
        if part.height == 0:
            return part
        return part.with_columns(text.gather(lines.search_sorted(part["line"])))

    return physical


def _as_it_is(part: pl.DataFrame) -> pl.DataFrame:
    return part


def _continued(
    lone: pl.DataFrame,
    text: pl.Series,
    bare: pl.Series,
    stripped: pl.Series | None,
    before: Callable[[pl.DataFrame], pl.Series],
    plain: pl.Series | None = None,
) -> Callable[[pl.DataFrame], pl.Series]:
    """For lines of no format (a subset of `lone`): may the line before make it a record's
    tail (_cues.may_be_continued of that line)?

    The line before is mostly one of `lone` too (a file of noise): what step 6 found in it
    holds where routing did not change its text (`stripped`: the lines whose ANSI codes the
    router removed; `text`, `bare`: each line without its newline, and as step 6 read it), so
    only what the checks of a line of no format leave open is looked for: a request literal
    (the other kind literals sent it to the per-line path), a timestamp, a `{` at its start.
    (may_be_continued of each line before cost ~5 ms a MB of noise, as much as a log's parse.)
    The lines of `plain` (bars of _BAR's shape, _bars) are known to be so and to hold none.
    """
    same = bare.str.len_bytes() == text.str.len_bytes()  # as_cleaned removed nothing
    if stripped is not None:
        same = same & ~lone["line"].is_in(stripped.implode())
    long = lone["raw"].str.len_chars() >= _glue.WRAP_MIN  # as may_be_continued counts
    unsure = long & same if plain is None else long & same & ~plain
    cont = _cues.both(
        unsure,
        text,
        lambda sub: _cues.either(
            sub,
            lambda part: part.str.starts_with("{"),
            lambda part: part.str.contains(_REQ_LIT),
            _cues.timestamp,
        ),
    )
    index = (~same).arg_true()
    if index.len():
        read = before(lone[index].select(pl.col("line") + 1))  # the lines themselves
        cont = cont.scatter(index, _cues.may_be_continued(redrawn(read)))
    # By line number (a gather, not a join: ~1.8 ms a MB of noise).
    first = cast(int, lone["line"].min())
    span = cast(int, lone["line"].max()) - first + 2
    known = pl.repeat(None, span, dtype=pl.Boolean, eager=True).scatter(
        lone["line"] - first + 1, cont
    )

    def after_open(lines: pl.Series) -> pl.Series:
        """may_be_continued of the line before each of `lines`."""
        mask = known.gather((lines - first).clip(0, span - 1))
        mask = pl.select(pl.when((lines - first).is_between(0, span - 1)).then(mask)).to_series()
        unknown = mask.is_null().arg_true()
        if unknown.len():
            read = before(pl.DataFrame({"line": lines.gather(unknown)}))
            mask = mask.scatter(unknown, _cues.may_be_continued(redrawn(read)))
        return mask

    def continued(others: pl.DataFrame) -> pl.Series:
        # Two lines up too: a join that started there may go on through a short line (a
        # stats record wrapped over three lines, its middle one short: _lines joins a
        # record's lines while the record is incomplete, at most three).
        lines = others["line"]
        return after_open(lines) | after_open(lines - 1).fill_null(False)

    return continued


def _settled(part: pl.DataFrame) -> pl.DataFrame:
    """`part` (lines with a kind literal, for the per-line path) with `settled`: no record can
    start in the line, alone or as a hard-wrap's first half (_cues.starts_no_record), so the
    per-line path reads no more of it than whether it continues the line before (a file of
    4 KB such lines cost ~0.2 ms a line: its envelope, rows and joins with the next line)."""
    if part.height == 0:
        return part
    return part.with_columns(_cues.starts_no_record(part["raw"]).alias("settled"))


def _assemble(
    routed: dict[str, list[pl.DataFrame]],
    odd_parts: list[pl.DataFrame],
    settled: dict[str, int],
    n: int,
    before: Callable[[pl.DataFrame], pl.Series],
    keep: frozenset[str],
    physical: Callable[[pl.Series], pl.Series],
) -> _Batch:
    """Extract the claimed parts (or count them, in summary mode) and parse the odd lines.

    `settled` counts lines whose kind is known but whose text was not kept (summary mode);
    `before(odd)` gives the physical line before each line of `odd` (sorted by line), for
    hard-wrap continuations; `physical(lines)` the text of those lines in the file (without
    their newline), for the stats lines the checks reject (routed unwrapped).
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
        if rejected.height:
            rejected = rejected.with_columns(physical(rejected["line"]).alias("text"))
        frames["scheduler_stats"].append(stats)
        counts["stats"] -= rejected.height
    builders = {
        "requests": ("requests", _requests_frame),
        "access": ("access", _access_frame),
        "other": ("other", lambda sub: _other_frame(sub, uvicorn=False)),
        "other_uvi": ("other", lambda sub: _other_frame(sub, uvicorn=True)),
        "plain": ("other", _plain_frame),
    }
    for name, (kind, builder) in builders.items():
        if name not in counts:
            continue
        if kind in keep:
            frames[kind].append(builder(pl.concat(routed[name], how="diagonal")))
        else:
            summarized[kind] = summarized.get(kind, 0) + counts[name]

    messages = _prompt_messages(routed) if "requests" in keep else []

    odd_parts = [part for part in odd_parts if part.height]
    parsed = 0
    if odd_parts:
        no_flag = pl.lit(False).alias("settled")
        odd = pl.concat(
            [
                part.select("line", "raw", "settled" if "settled" in part.columns else no_flag)
                for part in odd_parts
            ]
        ).sort("line")
        odd = odd.with_columns(before(odd).rename("prev"))
        no_record = frozenset(odd.filter("settled")["line"].to_list())
        result = _lines.parse_odd_lines(
            [(int(a), str(b), c) for a, b, c in odd.select("line", "raw", "prev").iter_rows()],
            no_record,
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
        if result.prompts and "requests" in keep:
            messages.append(pl.DataFrame(result.prompts, schema=_MESSAGES, orient="row"))
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
    if "noise" in routed:  # rows already (_short_noise), mostly after the others in line order
        frames["unrecognized"].extend(routed["noise"])
        accounting.unrecognized_lines += counts["noise"]
    fast_parsed = sum(v for k, v in counts.items() if k not in ("blank", "unrec", "cut", "noise"))
    accounting.parsed_lines = fast_parsed + parsed
    found = [prompts.prompt_rows(pl.concat(messages))] if messages else []
    return _Batch(frames, accounting, summarized, found)


_MESSAGES = pl.Schema({"line": pl.Int64(), "message": pl.String()})


def _prompt_messages(routed: dict[str, list[pl.DataFrame]]) -> list[pl.DataFrame]:
    """(line, message) of the claimed lines that may show prompt ids: `Received request`
    lines and `Request %s details:` lines (`other`), found by their literals."""
    out = []
    # A claimed line has one vLLM header, its message right after it, and no request literal
    # in front of it (the router sends those per line): its first `] Received request ` or
    # `] Request ` is where its message starts.
    for name, literal, lead in (
        ("requests", prompts.PROMPT_LITERAL, "] Received request "),
        ("other", prompts.DETAILS_LITERAL, "] Request "),
    ):
        if name not in routed:
            continue
        part = pl.concat(routed[name], how="diagonal").select("line", "raw")
        text = part["raw"]
        part = part.filter(text.str.contains(literal, literal=True))
        if name == "other" and part.height:
            part = part.filter(part["raw"].str.contains(prompts.PROMPT_LITERAL, literal=True))
        if part.height:
            raw = pl.col("raw")
            at = raw.str.find(lead, literal=True).cast(pl.Int64) + 2
            message = raw.cast(pl.Binary).bin.slice(at).cast(pl.String)
            out.append(
                part.filter(at.is_not_null()).select(
                    "line", message.str.strip_chars_end("\r\n").alias("message")
                )
            )
    return out


def _plain_frame(sub: pl.DataFrame) -> pl.DataFrame:
    """`other` rows of plain output (no envelope): the line's text, every other column null,
    as the per-line path's rows (_lines._emit)."""
    columns = _kind_columns("other")
    known = {"line", "message", "_bulk"}
    return sub.select(
        pl.col("line"),
        *[
            pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in columns.items()
            if name not in known
        ],
        pl.lit(False).alias("_bulk"),
        pl.col("raw").str.strip_chars_end("\r\n").alias("message"),
    ).select(list(columns))


def _rows_frame(kind: str, rows: list[dict[str, object]]) -> pl.DataFrame:
    columns = _kind_columns(kind)
    data = {name: [row.get(name) for row in rows] for name in columns}
    return pl.DataFrame(data, schema=columns)
