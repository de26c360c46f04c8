"""The per-line path's cheaper forms give what the patterns they replaced gave.

Each rewrite (the per-line path: ingest/_lines.py and the modules it drives) was made for
cost per byte on hostile lines (docs/benchmarks.md, adversarial section); here only results
are compared, on random text built from the characters each pattern turns on.
"""

from __future__ import annotations

import ast

import polars as pl
import regex
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _classify, _envelope, _lines
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
    assert _envelope.strip_ansi(text) == two_passes
    column_wise = pl.Series([text]).str.replace_all(cat.ANSI_ESC, "")
    assert column_wise.str.replace_all(cat.ANSI_SGR, "")[0] == two_passes
    if "\x1b" not in text:  # the passes differ from one only around an escape sequence
        assert two_passes == REFERENCE_ANSI.sub("", text)


def test_ansi_forms_are_stripped() -> None:
    for coloured in ("\x1b[32mINFO\x1b[0m", "[32mINFO[0m", "#033[32mINFO#033[0m", "^[[1;32mINFO"):
        assert _envelope.strip_ansi(coloured) == "INFO"
    assert _envelope.strip_ansi("x=[1, 'a'] [[[[") == "x=[1, 'a'] [[[["


def _reference_pairs(payload: str) -> dict[str, str]:
    """config_pairs' key=value loop as it was (Match objects, the `regex` module)."""
    values: dict[str, str] = {}
    for match in regex.finditer(_classify._PAIR_RE.pattern, payload, regex.VERSION0):
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
    assert _classify.config_pairs("engine_config", payload) == _reference_pairs(payload)


def test_config_pairs_read_the_first_16_kib_only() -> None:
    filler = "speculative_config=None, " * (_classify.CONFIG_BUDGET // 25 + 1)
    pairs = _classify.config_pairs("engine_config", "model='m', " + filler + "max_num_seqs=8")
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
    assert _classify.config_pairs("non_default_args", payload) == _reference_dict(payload)


def _reference_clean(text: str) -> str:
    """clean() as it was: a header search in each `\r` part, from the last one."""
    text = text.rstrip("\n").rstrip("\r")
    if "\r" in text:
        parts = text.split("\r")
        found = next((p for p in reversed(parts) if _envelope.HEADER_CORE_RE.search(p)), None)
        if found is None:
            wrapper = _envelope.WRAPPER_RE.match(parts[0])
            first = parts[0][wrapper.end() if wrapper is not None else 0 :]
            lead = len(parts[0]) - len(first.lstrip())
            head = _envelope._PROCESS_AT_RE.match(parts[0], lead)
            found = parts[0][: head.end()] + parts[-1] if head is not None else parts[-1]
        text = found
    return _envelope.strip_ansi(text)


CR_PIECES = st.sampled_from(
    ["\r", "\n", " ", "01-15 14:00:00 ", "[a.py:1] ", "x", "(EngineCore pid=3) ", "INFO "]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(CR_PIECES, max_size=14).map("".join))
def test_redraws_keep_the_same_record(text: str) -> None:
    assert _envelope.clean(text) == _reference_clean(text)


STATS_PIECES = st.sampled_from(
    [
        "Engine 000: ",
        "2 Engines Aggregated: ",
        "Avg prompt throughput: ",
        "Avg generation throughput: ",
        "Throughput: ",
        "1.5",
        "12",
        " tokens/s",
        ", ",
        "Running: ",
        "Pending: ",
        " reqs",
        "Preemptions: ",
        "GPU KV cache usage: ",
        "CPU + host KV cache usage: ",
        "%",
        "Prefix cache hit rate: ",
        "External prefix cache hit rate: ",
        "MM cache hit rate: ",
        "x",
        " ",
        ".",
        "\u0663",  # a digit outside ASCII: `\\d` is Unicode in both engines
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(STATS_PIECES, max_size=12).map("".join), min_size=1, max_size=4))
def test_stats_rest_is_the_same_in_polars_and_per_record(texts: list[str]) -> None:
    def rests(threshold: int) -> list[object]:
        out = _lines.Parsed()
        for text in texts:
            out.add("scheduler_stats", {"extra": _classify._Rest(text)})
        saved, _classify._REST_IN_POLARS = _classify._REST_IN_POLARS, threshold
        try:
            _classify.fill_rests(out.rows["scheduler_stats"])
        finally:
            _classify._REST_IN_POLARS = saved
        return [row["extra"] for row in out.rows["scheduler_stats"]]

    assert rests(-1) == rests(1 << 30)


def _reference_find_header(text: str, pos: int) -> tuple[int, str | None, int] | None:
    """_find_header as it was: timestamp searches, each checked by the header pattern."""
    while True:
        stamp = _envelope.TIMESTAMP_RE.search(text, pos)
        if stamp is None:
            return None
        at = stamp.start()
        match = _envelope._HEADER_AT_RE.match(text, at)
        if match is not None:
            for level in cat.LEVELS:
                if text.endswith(level + " ", pos, at):
                    return at - len(level) - 1, level, match.end()
            return at, None, match.end()
        pos = at + 1


HEADER_PIECES = st.sampled_from(
    ["01-15 14:00:00 ", "[a.py:1] ", "a.py:1] ", "INFO ", "WARNING ", "  ", "x", "1", "]", "\u0661"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(HEADER_PIECES, max_size=12).map("".join), st.integers(0, 3))
def test_the_first_header_is_found_where_it_was(text: str, pos: int) -> None:
    found = _envelope._find_header(text, pos)
    got = None if found is None else (found[0], found[1], found[2].end())
    assert got == _reference_find_header(text, pos)
