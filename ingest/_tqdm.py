"""tqdm's output in the router: carriage-return redraws and progress bars.

A line with a `\r` inside and no vLLM header is read as its text after the last `\r`, as the
per-line path reads it (_envelope.clean): `redraws` rewrites such lines for the cascade,
`redrawn` gives a line before as step 6 judges it. A progress bar with no envelope is plain
output, an `other` row of its own text: `_bars` settles the common shape in two scans,
`_readings` and `_sure` answer for the rest. A line that may hold a header, a request's text
or another envelope is never settled here: it goes per line.
"""

from __future__ import annotations

import polars as pl
from preemptscope.ingest import _cues, _envelope
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._claims import _REQ_LIT

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


# tqdm's bar in its common form (`desc: 42%|####  | 42/100 [00:09<00:12, 4.2it/s, ...]`): a
# strict subset of _PROGRESS with no character a check of step 6 reads more in (no ESC, `{`,
# `-`, `"` or `=`; `[`, `]` and `|` only where the bar puts them; a description of at most 80
# characters). Its letters may still spell an envelope cue or a request literal: _BAR_CUES.
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
    (_route._continued's `plain`), in two scans instead of some twenty."""
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
