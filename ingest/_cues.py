"""Column-wise cues: what the per-line path could read in a line, found cheaply.

Owns the checks by which the router (ingest/_route.py) leaves a line to the per-line path:
something in it, or in the line before it, could make it a record. They must agree with the
per-line path (_envelope.py, _classify.py, _lines.py; tests/ingest/test_hostile_routing.py).
Never reads a record. Each check runs only on the lines the cheaper ones before it left
(`either`, `both`), a pattern only where a literal all its matches hold is present, so
hostile text costs about what a log costs (docs/benchmarks.md, adversarial inputs).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import polars as pl
from preemptscope.ingest import _glue
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._envelope import PROCESS_NAME_MAX

# Every ANSI form seen in logs ends a colour with a reset; ESC-less pastes keep `[0m`.
# A set of literals is one regex alternation (the regex crate's SIMD literal search), not
# `contains_any` (Aho-Corasick, several times slower on hostile runs). ESC stays apart: a
# one-byte literal in an alternation slows its search.
_ANSI_LITERALS = ["\x1b", "#033[", "[0m", "[0;0m"]
ESCLESS_LIT = "|".join(re.escape(literal) for literal in _ANSI_LITERALS[1:])
# What makes a line without a header and a kind literal output of its own, in the per-line
# path: a process prefix or a rank (`pid=`, `[rank`), a level word (uvicorn, foreign formats,
# an elided header), a syslog pid. A new envelope in ingest/_envelope.py that names a
# process or a level needs its cue here, or its lines are unrecognised unread. A container
# timestamp counts at the line start only, where the per-line path reads one (plain output
# may follow it); elsewhere a date names nobody.
# Looked for in parts (`either`): one alternation of all with the date is slow on `[` and
# `01-` runs.
ENVELOPE_LITERALS = r"pid=|\[rank|DEBUG|INFO|WARN|ERROR|CRITICAL|TRACE"
SYSLOG_PID = r"\[[0-9]+\]: "  # syslog's `python3[28059]: `
# What the per-line path reads at the start of a line as an envelope: a JSON object (even a
# broken one) or a container timestamp (ASCII digits, as cat.WRAPPER_TS has them).
WRAPPER_START = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}"
_ENVELOPE_START = r"^(?:\{|[0-9]{4}-[0-9]{2}-[0-9]{2})"
KIND_LIT = "|".join(re.escape(literal) for literal in sorted(_glue.KIND_LITERALS))
# Plain program output the per-line path reads (tracebacks, progress bars; an indented line
# may be a frame's code line).
# The catalogue's patterns behind an optional lead that is a superset of what _classify allows
# in front (a few symbols such as a quote bar, a compose prefix), with ASCII classes: the
# Unicode ones compile past the Rust regex size limit. `  ` at the start or behind a compose
# bar: a traceback frame's code line.
_PLAIN_LEAD = r"^(?:[^\s|]{1,81} +\| )?(?:[^A-Za-z0-9_\n]{1,8} *)?"
# Anchored; `^  ` and `|  ` are literal checks beside it: as alternatives in it, the
# unanchored `\|  ` would make it scan every byte.
PLAIN_CUE = (
    _PLAIN_LEAD
    + "(?:"
    + "|".join(pattern.removeprefix("^") for _name, pattern in cat.PLAIN_LINES)
    + ")"
)
# One of these literals (one of `^~` apart: one-byte literals in an alternation slow its search)
# is in every match of PLAIN_CUE: looked for first, the cue then runs on the lines holding one
# (its bounded runs read most of each line).
PLAIN_LITERALS = (
    r'Traceback \(most|During handling|The above exception|File "'
    r"|Error|Exception|Exit|Interrupt|Warning|%\||% Completed \|"
)
# uvicorn's level and a blank of its own: the per-line path drops a line's closing `\r` and
# `\n` first, so `INFO:\r` holds no envelope there.
UVICORN_PROBE = r"(?:^|\) )(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[^\S\r\n]"
UVICORN_LITERALS = r"DEBUG:|INFO:|WARNING:|ERROR:|CRITICAL:"  # in every match of the probe

_Text = TypeVar("_Text", pl.Series, pl.Expr)


def json_objects(text: pl.Series, braced: pl.Series) -> pl.Series:
    """`braced` (lines that start with `{`) where the line may be one JSON object: it ends in
    `}` but for whitespace (what Polars' decoder requires: no text after the value)."""
    return both(braced, text, lambda sub: sub.str.contains(r"\}\s*$"))


# Above this share of a Series, a check runs on all of it: gathering most of the lines copies
# them for little saved.
_GATHER_MAX = 0.5


def either(text: pl.Series, *checks: Callable[[pl.Series], pl.Series]) -> pl.Series:
    """The OR of `checks` on `text`, each run only on the texts no earlier one matched (a
    null text stays null, as in an OR of expressions); a new Series."""
    found = checks[0](text).clone()
    for check in checks[1:]:
        todo = (~found).arg_true()
        if todo.len() == 0:
            break
        if todo.len() > _GATHER_MAX * text.len():
            found = found | check(text)
            continue
        hit = check(text.gather(todo))
        if hit.any():
            found = found.scatter(todo.filter(hit), True)
    return found


def both(mask: pl.Series, text: pl.Series, check: Callable[[pl.Series], pl.Series]) -> pl.Series:
    """`mask & check(text)`, the check run only where `mask` is true (a new Series)."""
    index = mask.arg_true()
    if index.len() == 0:
        return mask.clone()
    if index.len() > _GATHER_MAX * text.len():
        return mask & check(text)
    return mask.clone().scatter(index, check(text.gather(index)))


def gated(text: pl.Series, literal: str, pattern: str) -> pl.Series:
    """`text.str.contains(pattern)`, run only on the texts holding `literal`, which every
    match of `pattern` holds."""
    mask = text.str.contains(literal, literal=True)
    return both(mask, text, lambda sub: sub.str.contains(pattern))


def ansi(text: pl.Series) -> pl.Series:
    """Lines holding an ESC or a colour code without one (`[32m`, with a reset or not: the
    per-line path strips every code, _envelope.strip_ansi)."""
    return either(
        text,
        lambda sub: sub.str.contains("\x1b", literal=True),
        colour_code,
    )


def colour_code(text: pl.Series) -> pl.Series:
    """Lines holding cat.ANSI_SGR_CORE (every code ends in a digit and `m`: a search for them
    first skips `[` runs, as as_cleaned does)."""
    return both(text.str.contains("[0-9]m"), text, lambda sub: sub.str.contains(cat.ANSI_SGR_CORE))


# Every literal one of the checks of `readable` needs (each pattern's own gate; PLAIN_CUE's
# `^~` apart): one scan of them settles a line of noise, where the checks in turn cost a scan
# each and the gathers between them.
_READABLE_LITERALS = "|".join((ENVELOPE_LITERALS, r"\]: ", r"\|  ", PLAIN_LITERALS))


def readable(bare: pl.Series) -> pl.Series:
    """Lines without a header the per-line path may read something in (an envelope cue, a
    wrapper, a traceback or progress shape), ANSI codes removed (as_cleaned)."""
    maybe = either(
        bare,
        lambda sub: sub.str.contains(_READABLE_LITERALS),
        lambda sub: sub.str.contains(r"[\^~]"),
        lambda sub: sub.str.contains(r"^(?:  |[0-9]{4}-[0-9]{2}-[0-9]{2})"),
    )
    return both(
        maybe,
        bare,
        lambda sub: either(
            sub,
            envelope_cue,
            lambda part: part.str.contains(WRAPPER_START),
            lambda part: part.str.starts_with("  "),
            lambda part: part.str.contains("|  ", literal=True),
            lambda part: both(
                either(
                    part,
                    lambda some: some.str.contains(r"[\^~]"),
                    lambda some: some.str.contains(PLAIN_LITERALS),
                ),
                part,
                lambda some: some.str.contains(PLAIN_CUE),
            ),
        ),
    )


def envelope_cue(text: pl.Series) -> pl.Series:
    """Lines the per-line path may read as output of their own (see ENVELOPE_LITERALS)."""
    return either(
        text,
        lambda sub: sub.str.contains(ENVELOPE_LITERALS),
        lambda sub: gated(sub, "]: ", SYSLOG_PID),
    )


def strip_ansi(text: _Text) -> _Text:
    """Two passes (catalogue.ANSI_ESC): one alternation of both is slow on `[` runs."""
    return text.str.replace_all(cat.ANSI_ESC, "").str.replace_all(cat.ANSI_SGR, "")


def as_cleaned(prev: pl.Series) -> pl.Series:
    """Lines without their ANSI codes, as the per-line path reads them (_envelope.clean strips
    every code, with a reset or not)."""
    coded = either(
        prev,
        lambda sub: sub.str.contains("\x1b", literal=True),
        # Every code ends in a digit and `m`: a search for them first skips `[` runs.
        lambda sub: both(
            sub.str.contains("[0-9]m"), sub, lambda part: part.str.contains(cat.ANSI_SGR_CORE)
        ),
    ).fill_null(False)
    index = coded.arg_true()
    if index.len() == 0:
        return prev
    return prev.clone().scatter(index, strip_ansi(prev.gather(index)))


# Every literal one of KIND_LIT and envelope_cue needs.
_CUED_LITERALS = "|".join((KIND_LIT, ENVELOPE_LITERALS, r"\]: "))


def may_be_continued(prev: pl.Series) -> pl.Series:
    """Lines before a line of no format that may make it a record's tail (a hard-wrap's second
    half, or _glue.is_continuation): long, and, read as the per-line path reads them, with a
    kind literal, a timestamp, an envelope cue or an envelope start, or with a tqdm redraw
    (the per-line path reads a part of it)."""
    long = (prev.str.len_chars() >= _glue.WRAP_MIN).fill_null(False)

    def cued(sub: pl.Series) -> pl.Series:
        cleaned = as_cleaned(sub)
        return either(
            cleaned,
            # The literals first, in one scan (the kind literals, the envelope cues' own):
            # a line of noise holds none, and one scan each would cost several.
            lambda part: both(
                part.str.contains(_CUED_LITERALS),
                part,
                lambda some: either(some, lambda one: one.str.contains(KIND_LIT), envelope_cue),
            ),
            timestamp,
            lambda part: part.str.contains(_ENVELOPE_START),
            lambda part: gated(part, "\r", r"\r[^\r\n]"),
        )

    return both(long, prev, cued)


# In every match of cat.TIMESTAMP, and found by a fast scan, where the timestamp pattern's
# own gate, a `:`, is in most lines of text.
TIMESTAMP_GATE = r":[0-5][0-9]:"


def timestamp(text: pl.Series) -> pl.Series:
    """Lines holding a vLLM timestamp (cat.TIMESTAMP)."""
    return both(
        text.str.contains(TIMESTAMP_GATE), text, lambda sub: sub.str.contains(cat.TIMESTAMP)
    )


def header_counts(text: pl.Series) -> pl.Series:
    """HEADER_CORE matches in each text, counted only where there is a `] ` (every header
    ends in one): counting is slow on `01-` runs."""
    gate = text.str.contains("] ", literal=True)
    index = gate.arg_true()
    if index.len() > _GATHER_MAX * text.len():
        return text.str.count_matches(cat.HEADER_CORE)
    counts = pl.zeros(text.len(), pl.UInt32, eager=True)
    if index.len() == 0:
        return counts
    return counts.scatter(index, text.gather(index).str.count_matches(cat.HEADER_CORE))


# Where a record may start in a line without an envelope (_classify.classify): at the start
# (any row) or behind a few symbols (rows that may stand bare, and the stats record). Each
# row's head: a prefix every match of the row starts with (tests/ingest/test_hostile_bare.py).
# All but three are at most _HEAD_MAX characters long; the unbounded three (a run of digits or
# capitals, the logo's run of blocks) are covered by _HEAD_PREFIXES.
_BARE_HEADS = (
    "Sequence group ",
    cat.STATS_RECORD_START,
    r"#? ?(?:GPU|CUDA|cuda|rocm|TPU|HPU|XPU|CPU|NPU|xpu|npu|hpu|tpu) blocks: ",
    r"[A-Z]+(?: \+ host)? KV cache size: ",
    "Maximum concurrency for ",
    "Available KV cache memory: ",
    "Loading model weights took ",
    "Model loading took ",
    "Memory profiling results: ",
    "model weights take ",
    "the current vLLM instance can use total_gpu_memory",
    "Initial free memory ",
    "Free memory on device",
    r"(?:Engine [0-9]+: |[0-9]+ Engines: )?vllm cache_config_info",
    "Overriding num_gpu_blocks=",
    r"vLLM (?:API )?server version ",
    r"Initializing an? ",
    "non-default args: ",
    r"(?:args: )?Namespace\(",
    "Chunked prefill is enabled with ",
    "Using max model len ",
    r"(?:Setting|Defaulting) ",
)
_START_HEADS = (
    *_BARE_HEADS,
    "Throughput: ",
    r"[\s▄█▀]*?▀▄▀ █",
    r"[\s▄█▀]*?█▄█▀ █",
    *(re.escape(row.literal) for row in cat.REQUEST_ROWS),  # each row's literal starts it
)
_HEAD_MAX = 50
# The shapes in front of a message that a hard-wrap join could complete with the next line,
# anchored at the line start: a compose prefix, a syslog prefix, an exception's name, a row's
# head (at the start or behind symbols), and text that may still be a proper prefix of an
# unbounded head, of a location lead (`[file.py:1] `), or of a process prefix (`Name pid=`).
# Each is a superset of the shape it stands for (a line it wrongly matches is only read in
# full), in ASCII classes where the shape has Unicode ones (`\w`, `\d`): Polars' cache keeps
# 32 compiled patterns, fewer than a batch uses, so each is compiled again per batch, and
# Unicode classes under counted repeats compile some fifty times slower.
# `_WORDISH`: every character but ASCII punctuation other than `+-.:_` (a superset of `\w`).
_WORDISH = r"[^!-*,/;-@\[-^`{-~\n]"
_HEAD_PREFIXES = rf"[^\n]{{0,17}}{_WORDISH}*$|[\s▄█▀]*$"
# A process prefix's name is bounded (ingest/_envelope.py: PROCESS_NAME_MAX).
_PROCESS_PREFIX = rf"\s*\(?[A-Za-z_][^\n]{{0,{PROCESS_NAME_MAX}}}$"
_START_SHAPES = (
    r"^(?:\s*[A-Za-z0-9][^ \n]* +\| "  # compose
    r"|[^ \n]{3,10} {1,2}[^ \n]{1,2} [0-2][^ \n]:[0-5][^ \n]:[0-6][^ \n] "  # syslog
    r"|[A-Z][^ \n]*(?:Error|Exception): "
    rf"|(?:{'|'.join(_START_HEADS)})"
    rf"|[^A-Za-z0-9_\n]{{1,8}}(?:{'|'.join(_BARE_HEADS)})"
    rf"|{_HEAD_PREFIXES}|{_PROCESS_PREFIX})"
)
# Anywhere: a location (`:1]`, every header and location lead holds one), a date (every
# foreign envelope's timestamp starts with one). Apart: as one alternation they are slower.
_LOCATION = r":[0-9]+\]"
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
# At the end: what may be the start of an envelope the next line completes (a vLLM header, a
# foreign timestamp, a level word).
_END_SHAPES = (
    rf"(?:[01][0-9 :-]{{0,14}}|{cat.TIMESTAMP}[^\]:\n]*(?::[^\]\n]*)?"
    r"|[0-9\[-]|[DIWECT][A-Z]{0,6})$"
)


def starts_no_record(text: pl.Series) -> pl.Series:
    """Lines in which no record can start, alone or joined with the lines after them as a
    hard-wrap (_lines.parse_odd_lines): no envelope, no process or plain shape, no catalogue
    row's head where a bare record may start, and nothing at the end that the next line could
    complete into an envelope. Conservative: false for any line with ANSI codes or a `\\r`.

    A line with a kind literal but none of these is unrecognised whatever follows it; the
    per-line path then only checks whether it continues the line before.
    """
    bare = text.str.strip_chars_end("\r\n")
    odd = either(
        bare,
        lambda sub: sub.str.contains(_LOCATION),  # first: every line with a header
        lambda sub: sub.str.contains(r"\x1b|\r"),
        lambda sub: sub.str.contains(r"^\s*$|^\{"),
        lambda sub: sub.str.contains(_START_SHAPES),
        lambda sub: sub.str.contains(_END_SHAPES),
        lambda sub: sub.str.contains(_DATE),
        lambda sub: sub.str.contains(ESCLESS_LIT),
        lambda sub: sub.str.contains(cat.ANSI_SGR_CORE),
        envelope_cue,
        lambda sub: sub.str.contains(WRAPPER_START),
        lambda sub: sub.str.contains("|  ", literal=True),
        lambda sub: both(
            either(
                sub,
                lambda part: part.str.contains(r"[\^~]"),
                lambda part: part.str.contains(PLAIN_LITERALS),
            ),
            sub,
            lambda part: part.str.contains(PLAIN_CUE),
        ),
        lambda sub: sub.str.contains(cat.RAY_REPEAT_LITERAL, literal=True),
    )
    return ~odd.fill_null(True)
