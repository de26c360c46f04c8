"""The per-line path's cheaper forms give what the patterns they replaced gave.

Each rewrite (ingest/_lines.py) was made for cost per byte on hostile lines
(docs/benchmarks.md, adversarial section); here only results are compared, on random text
built from the characters each pattern turns on.
"""

from __future__ import annotations

import ast

import polars as pl
import regex
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _lines
from preemptscope.ingest import catalogue as cat

# The ANSI patterns as the catalogue writes them, in the engine they ran in before.
REFERENCE_ESC = regex.compile(cat.ANSI_ESC, regex.VERSION0)
REFERENCE_SGR = regex.compile(cat.ANSI_SGR, regex.VERSION0)
REFERENCE_ANSI = regex.compile(cat.ANSI, regex.VERSION0)
ANSI_TEXT = st.text(alphabet="\x1b#03^[1;2mAx ]", max_size=60)


@settings(max_examples=600, deadline=None)
@given(ANSI_TEXT)
def test_ansi_stripping_is_the_catalogue_passes(text: str) -> None:
    two_passes = REFERENCE_SGR.sub("", REFERENCE_ESC.sub("", text))
    assert _lines.strip_ansi(text) == two_passes
    column_wise = pl.Series([text]).str.replace_all(cat.ANSI_ESC, "")
    assert column_wise.str.replace_all(cat.ANSI_SGR, "")[0] == two_passes
    if "\x1b" not in text:  # the passes differ from one only around an escape sequence
        assert two_passes == REFERENCE_ANSI.sub("", text)


def test_ansi_forms_are_stripped() -> None:
    for coloured in ("\x1b[32mINFO\x1b[0m", "[32mINFO[0m", "#033[32mINFO#033[0m", "^[[1;32mINFO"):
        assert _lines.strip_ansi(coloured) == "INFO"
    assert _lines.strip_ansi("x=[1, 'a'] [[[[") == "x=[1, 'a'] [[[["


def _reference_pairs(payload: str) -> dict[str, str]:
    """config_pairs' key=value loop as it was (Match objects, the `regex` module)."""
    values: dict[str, str] = {}
    for match in regex.finditer(_lines._PAIR_RE.pattern, payload, regex.VERSION0):
        key = match.group("key")
        if key in cat.CONFIG_KEYS and cat.CONFIG_KEYS[key] not in values:
            value = match.group("value").strip("'\"")
            if value not in ("None", ""):
                values[cat.CONFIG_KEYS[key]] = value
    return values


PAIR_PIECES = st.sampled_from(
    [
        "model=",
        "max_num_seqs=",
        "max_seq_len=",
        "dtype=",
        "x=",
        "'",
        '"',
        "\\",
        "[",
        "]",
        ", ",
        " ",
        ")",
        "(",
        "None",
        "8",
        "a",
        "=",
        "_",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(PAIR_PIECES, max_size=40).map("".join))
def test_config_pairs_match_the_match_object_loop(payload: str) -> None:
    assert _lines.config_pairs("engine_config", payload) == _reference_pairs(payload)


def test_config_pairs_read_the_first_16_kib_only() -> None:
    filler = "speculative_config=None, " * (_lines.CONFIG_BUDGET // 25 + 1)
    pairs = _lines.config_pairs("engine_config", "model='m', " + filler + "max_num_seqs=8")
    assert pairs == {"model": "m"}


def _reference_dict(payload: str) -> dict[str, str]:
    """config_pairs on non-default args as it was: ast.literal_eval of the whole payload."""
    parsed = ast.literal_eval(payload)
    values: dict[str, str] = {}
    for key, value in parsed.items():
        if key in cat.CONFIG_KEYS:
            if isinstance(value, list) and len(value) == 1:
                value = value[0]
            values[cat.CONFIG_KEYS[key]] = str(value)
    return values


DICT_VALUES = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(),
    st.none(),
    st.text(alphabet="ab'\"\\ ,:{}[]/-_.=", max_size=12),
    st.lists(st.text(alphabet="ab' ,", max_size=5), min_size=1, max_size=2),
)
DICT_KEYS = st.sampled_from([*cat.CONFIG_KEYS, "model_tag", "host", "api_key", "x"])


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(DICT_KEYS, DICT_VALUES, max_size=8))
def test_non_default_args_match_the_literal_eval(args: dict[str, object]) -> None:
    payload = repr(args)  # as vLLM prints them
    assert _lines.config_pairs("non_default_args", payload) == _reference_dict(payload)
