"""The router's Rust regex and the per-line path's `regex` module read each class alike.

Polars compiles the router's patterns with Rust's `regex` crate, the per-line path compiles
the catalogue's with the Python `regex` module; each engine has its own Unicode tables, so
`\\w`, `\\d` (and `\\b`, which `\\w` defines) are not the same sets to both, and Python's str
methods hold more whitespace than `\\s`. Every class in a pattern the router runs must be the
same set of code points to both engines; the classes that are not keep to per-line patterns
whose router cues are ASCII supersets. The lines they (and the two JSON decoders) read apart
before are in tests/ingest/test_hostile_agree.py (`ENGINE_CLASSES`, in `KNOWN`).
"""

from __future__ import annotations

import functools

import polars as pl
import pytest
import regex
from preemptscope.ingest import _access, _claims, _cues, _extract, _route, _tqdm
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._envelope import FLAGS

from tests.ingest.test_hostile_agree import ENGINE_CLASSES, _read_per_line
from tests.ingest.test_hostile_routing import _frames


def _text() -> str:
    """Every code point but the surrogates (no str holds them in UTF-8), in order."""
    return "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)


TEXT = _text()


def classes(pattern: str) -> set[str]:
    """The character classes of a pattern: `[...]` sets, `\\w \\W \\d \\D \\s \\S`, `.`;
    `\\b` and `\\B` too (they stand on `\\w`)."""
    found: set[str] = set()
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            if pattern[i + 1] in "wWdDsSbB":
                found.add(pattern[i : i + 2])
            i += 2
        elif char == "[":
            end = i + 1
            if pattern.startswith("^", end):
                end += 1
            if pattern.startswith("]", end):
                end += 1  # a leading `]` is a member
            while pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            found.add(pattern[i : end + 1])
            i = end + 1
        else:
            if char == ".":
                found.add(char)
            i += 1
    return found


def _router_patterns() -> dict[str, str]:
    """Every pattern the router's modules hold (their constants, with the catalogue's pieces
    built in) and the catalogue patterns they run as they are."""
    patterns: dict[str, str] = {}
    for module in (_route, _claims, _access, _tqdm, _extract, _cues):
        for name, value in vars(module).items():
            if isinstance(value, str) and name.lstrip("_").isupper():
                patterns[f"{module.__name__.rsplit('.', 1)[-1]}.{name}"] = value
    patterns.update({f"STATS_FIELDS.{name}": pattern for name, pattern in cat.STATS_FIELDS})
    patterns.update({f"REQUEST_ROWS.{row.name}": row.pattern for row in cat.REQUEST_ROWS})
    patterns.update({f"PLAIN_LINES.{i}": pattern for i, (_, pattern) in enumerate(cat.PLAIN_LINES)})
    for name in ("STATS_KNOWN_FIELDS", "LOCATION", "LEADING_WRAPPER_TS", "ANSI_ESC", "ANSI_SGR"):
        patterns[f"catalogue.{name}"] = getattr(cat, name)
    return patterns


ROUTER_CLASSES = sorted(
    {found for pattern in _router_patterns().values() for found in classes(pattern)}
    - {r"\b", r"\B"}  # none: each engine's `\w` (see below); no set of its own
)


@functools.cache
def _left_by_rust(cls: str) -> str:
    """TEXT without the code points `cls` matches, to Rust regex (as Polars runs it)."""
    return str(pl.Series([TEXT]).str.replace_all(cls, "").item())


@functools.cache
def _left_by_regex(cls: str) -> str:
    """TEXT without the code points `cls` matches, to the `regex` module (the per-line path's
    flags)."""
    return str(regex.compile(cls, FLAGS).sub("", TEXT))


def _apart(cls: str) -> set[str]:
    """The code points one engine's `cls` holds and the other's does not."""
    rust, python = _left_by_rust(cls), _left_by_regex(cls)
    return set() if rust == python else set(rust) ^ set(python)


def test_the_router_patterns_are_found() -> None:
    # The scan sees the router's patterns, and the classes the fix replaced are not in them.
    patterns = _router_patterns()
    assert {"_claims._STATS_VALID", "_cues.PLAIN_CUE", "STATS_FIELDS.kv_device"} <= set(patterns)
    assert {r"\s", "[0-9]", r"[\s,]", "[^\\n]", "."} <= set(ROUTER_CLASSES)
    assert not {r"\b", r"\w", r"\d", r"\W", r"\D"} & {
        found for pattern in patterns.values() for found in classes(pattern)
    }


@pytest.mark.parametrize("cls", ROUTER_CLASSES)
def test_a_router_class_is_one_set_to_both_engines(cls: str) -> None:
    apart = _apart(cls)
    assert not apart, f"{cls!r}: {len(apart)} code points apart, e.g. {sorted(apart)[:5]!r}"


# The classes whose sets differ (the `regex` module's Unicode tables are newer: 17,559 more
# code points are `\w` to it, ten more `\d`: U+11DE0-U+11DE9); per-line patterns only, where
# the router's cue for the line is an ASCII superset (ingest/_cues.py).
TABLE_CLASSES = (r"\w", r"\d", r"[^\W\d_]")


@pytest.mark.parametrize("cls", TABLE_CLASSES)
def test_a_table_class_differs_outside_ascii_only(cls: str) -> None:
    apart = _apart(cls)
    assert all(ord(char) > 0x7F for char in apart)
    # The ASCII members are what the catalogue writes for it.
    ascii_members = set(TEXT[:128]) - set(_left_by_regex(cls)[:128])
    assert (
        ascii_members
        == {
            r"\w": set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"),
            r"\d": set("0123456789"),
            r"[^\W\d_]": set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"),
        }[cls]
    )


def test_no_digit_past_ascii_is_a_stats_number_to_either_engine() -> None:
    # Every non-ASCII `\d` of either engine (U+11DE0, Tolong Siki zero, is one to the `regex`
    # module only): the stats fields read ASCII digits, so none is a number in either path.
    digits = set(TEXT) - set(_left_by_regex(r"\d")) | set(TEXT) - set(_left_by_rust(r"\d"))
    messages = [
        f"Preemptions: {d}, Running: {d} reqs, Engine {d}: " for d in digits - set("0123456789")
    ]
    assert len(messages) >= 750
    for _, pattern in cat.STATS_FIELDS:
        compiled = regex.compile(pattern, FLAGS)
        assert not any(compiled.search(message) for message in messages)
        assert not pl.Series(messages).str.contains(pattern).any()


def test_spaces_are_what_both_engines_call_whitespace() -> None:
    spaces = set(cat.SPACES)
    assert len(spaces) == len(cat.SPACES)
    assert set(TEXT) - set(_left_by_rust(r"\s")) == spaces
    assert set(TEXT) - set(_left_by_regex(r"\s")) == spaces
    # Polars' strip_chars() (the router's process names, uvicorn messages) strips these.
    chars = pl.Series(list(TEXT))
    assert set(chars.filter(chars.str.strip_chars() == "")) == spaces
    # Python's str methods strip four more (the per-line path strips cat.SPACES instead).
    assert {char for char in TEXT if char.isspace()} - spaces == set("\x1c\x1d\x1e\x1f")


@pytest.mark.parametrize("lines", ENGINE_CLASSES)
def test_lines_the_engines_read_apart_get_one_record(lines: list[str]) -> None:
    # Each line once had two readings (a class or a JSON decoder of one engine); the concrete
    # cases are also in KNOWN.
    assert _frames(lines) == _read_per_line(lines)
