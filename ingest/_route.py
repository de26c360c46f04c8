"""Routing: every line of a batch to its kind (column-wise), the odd ones to the per-line path.

`_cascade` runs literal probes and Rust-regex checks (linear time) in steps, each on the lines
the steps before left. Well-formed common lines are claimed for column-wise extraction
(ingest/_extract.py); preemption, KV-sizing and config lines and every odd line (JSON, foreign
formats, glued records, hard-wraps, damage) go to the per-line path (ingest/_lines.py); lines
nothing could read are unrecognised here. A claim must read a line as the per-line path would;
where that is unsure, the line goes per line. The steps' patterns and checks live beside it:
_claims (vLLM-header kinds), _access (access lines, a line's first envelope), _tqdm (redraws,
progress bars), _noise (short noise in bulk, before the cascade); _batch puts a routed batch
together. Nothing here extracts a column or parses a line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

import polars as pl
from preemptscope.ingest import _cues, _envelope, _glue
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._access import (
    _ACCESS_CANON,
    _ACCESS_FAST,
    _CASCADE,
    _CLAIM,
    _PER_LINE,
    _TWO_LEVEL_WORDS,
    _UVICORN_FIRST,
    _access_verdicts,
    _dash_after_level,
    _header_not_first,
)
from preemptscope.ingest._batch import _assemble
from preemptscope.ingest._batch import _Batch as _Batch  # logs.py reads it here
from preemptscope.ingest._claims import (
    _LONG_LINENO,
    _LONG_PID,
    _PY_LIT,
    _REQ_CLAIM,
    _REQ_LIT,
    _REQ_STARTS,
    _STATS_LIT,
    _STATS_UNSURE,
    _STATS_VALID,
)
from preemptscope.ingest._extract import _UNRECOGNIZED_ROWS
from preemptscope.ingest._noise import _short_noise
from preemptscope.ingest._tqdm import _ONE_CLOSING_CR, _bars, _readings, _sure, redrawn, redraws
from preemptscope.ingest.schema import FRAME_SCHEMAS, LineAccounting


def _unwrap_json_file(raw: pl.Series) -> pl.Series:
    """docker's json-file lines (`{"log": "...\\n", "stream": ..., "time": ...}`) as
    `<time> <log>`, the form docker --timestamps prints, so they take the vectorised path.

    Lines that do not decode, carry no container time (the per-line path reads the log alone
    then) or a log that is no string are left as they are for the per-line path. Only lines
    that may be JSON objects are decoded (_cues.json_objects: ending in `}`).
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
    noise = _short_noise(raw, df["line"], max_line, cut or {}, _noise_texts) if fast else None
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


_BLANK = rf"^(?:\s|{cat.ANSI_SGR})*$"


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
    # A `\r` inside a line with no vLLM header: the per-line path reads the text after the
    # last `\r`, and so does the router (_tqdm.redraws); the other such lines go per line.
    carriage = unusual & raw.str.contains("\r", literal=True) if unusual.any() else unusual
    redraw = pl.Series([], dtype=pl.Boolean)
    if carriage.any():
        carriage = carriage & ~raw.str.contains(_ONE_CLOSING_CR)
        redraw, raw = redraws(raw, carriage & ~original["raw"].str.starts_with("{"))
        if redraw.any():
            df = df.with_columns(raw.rename("raw"))
    # The lines whose ANSI codes routing strips (`stripped`): the per-line path may read them
    # otherwise, so step 6 judges them from their physical text (_continued). A settled redraw
    # is none of them: the per-line path reads every line after its redraws.
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
    # A line's first envelope is its envelope: a line whose vLLM header may stand behind
    # another envelope or a request's text goes per line (_header_not_first). The headers of
    # each line are counted once, here; steps 3 to 5 read the count.
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
    (may_be_continued of every line before costs ~5 ms a MB of noise, a log's whole parse.)
    The lines of `plain` (bars of _tqdm._BAR's shape, _bars) are known to be so and to hold none.
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
