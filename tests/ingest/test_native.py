"""The native scanner settles only lines the Polars cascade would settle the same way.

Checked line by line against `_cascade` (the reference), on every fixture and corpus file,
on generated logs of all eras, and on random lines built from the fragments that decide
routing; the AVX2 and SSSE3 loops are checked against the byte-by-byte loop; whole parses with and
without the scanner give the same frames.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _native, logs
from preemptscope.ingest._reader import split_lines
from preemptscope.ingest.logs import ParseOptions, iter_parse_path
from preemptscope.ingest.schema import LogFrames

from .conftest import CORPUS, ERA_LOGS

pytestmark = pytest.mark.skipif(
    logs._SCANNER is None, reason="native scanner not built (no C compiler at install)"
)

BENCH = Path(__file__).resolve().parents[2] / "bench"
OPTIONS = ParseOptions(year=2025)
CODE_TO_ROUTE = {
    _native.ACCESS: "access",
    _native.REQUEST: "requests",
    _native.OTHER: "other",
    _native.BLANK: "blank",
}
ALL_CODES = (_native.UNDECIDED, _native.ACCESS, _native.REQUEST, _native.OTHER, _native.BLANK)


def test_extension_is_built_where_required() -> None:
    # CI sets this: a wheel or editable install that silently lost the extension (optional=True)
    # would otherwise pass every test on the slow path.
    if os.environ.get("PREEMPTSCOPE_REQUIRE_NATIVE") == "1":
        assert _native.available()


def _cascade_routes(data: bytes) -> dict[int, str]:
    """line index (0-based) -> what the cascade does with it ("odd" for the per-line path)."""
    raw = split_lines(data)
    df = pl.DataFrame({"raw": raw, "line": pl.int_range(0, raw.len(), eager=True)})
    routed, odd = logs._cascade(df)
    routes: dict[int, str] = {}
    for name, parts in routed.items():
        for part in parts:
            routes.update(dict.fromkeys(part["line"].to_list(), name))
    for part in odd:
        routes.update(dict.fromkeys(part["line"].to_list(), "odd"))
    return routes


def _codes(data: bytes, *, loop: _native.Loop = "best") -> dict[int, int]:
    assert logs._SCANNER is not None
    scanned = logs._SCANNER.scan(data, ALL_CODES, loop=loop)
    codes: dict[int, int] = {}
    for code, frame in scanned.groups.items():
        codes.update(dict.fromkeys(frame["line"].to_list(), code))
    assert len(codes) == scanned.lines == sum(scanned.counts)
    return codes


def _assert_agrees(data: bytes) -> dict[int, int]:
    routes = _cascade_routes(data)
    codes = _codes(data)
    assert len(routes) == len(codes)
    wrong = {
        i: (code, routes[i])
        for i, code in codes.items()
        if code != _native.UNDECIDED and CODE_TO_ROUTE[code] != routes[i]
    }
    assert not wrong, {i: (c, r, data.splitlines()[i][:200]) for i, (c, r) in wrong.items()}
    assert _codes(data, loop="ssse3") == codes
    assert _codes(data, loop="bytes") == codes
    return codes


def _fixture_files() -> list[Path]:
    return [*sorted(ERA_LOGS.glob("*.log")), *sorted(CORPUS.glob("*.log"))]


@pytest.mark.parametrize("path", _fixture_files(), ids=lambda p: p.name)
def test_fixture_lines_route_as_the_cascade(path: Path) -> None:
    _assert_agrees(path.read_bytes())


def _generated(tmp_path: Path, size_mb: float, seed: int) -> Path:
    out = tmp_path / f"gen-{seed}.log"
    subprocess.run(
        [sys.executable, str(BENCH / "gen_logs.py"), "--seed", str(seed), str(out), str(size_mb)],
        check=True,
        capture_output=True,
    )
    return out


def test_generated_lines_route_as_the_cascade(tmp_path: Path) -> None:
    codes = _assert_agrees(_generated(tmp_path, 3, seed=7).read_bytes())
    counts = {code: list(codes.values()).count(code) for code in ALL_CODES}
    # The point of the scanner: almost every line of a busy log is settled natively.
    assert counts[_native.UNDECIDED] < 0.05 * len(codes)
    assert counts[_native.ACCESS] and counts[_native.REQUEST]


def test_crlf_lines_are_settled_as_the_cascade(tmp_path: Path) -> None:
    # A log saved with Windows line endings: the '\r' before each newline is ordinary.
    data = _generated(tmp_path, 1, seed=11).read_bytes().replace(b"\n", b"\r\n")
    codes = _assert_agrees(data)
    assert list(codes.values()).count(_native.UNDECIDED) < 0.05 * len(codes)


# Fragments that decide routing: headers (valid, near misses), every literal the scanner
# knows, the bytes that make a line UNDECIDED, and filler.
_HEADERS = [
    "INFO 05-09 00:49:33 scheduler.py:1057] ",
    "WARNING 12-31 23:59:60 [loggers.py:116] ",
    "05-09 00:49:33 [a:1] ",
    "05-09 00:49:33 x:1]",
    "25-09 00:49:33 x.py:1] ",
    "05-09 00:49:33 x py:1] ",
    "05-09 00:49:33 :1] ",
    "05-09 00:49:33 [:1] ",
    "05-09 00:49:33 x.py:] ",
    "15-39 29:59:69 [[x:12] ",
    "05-09 00:49:33 x.py:1\u0663] ",
    "05-09\u00a000:49:33 x.py:1] ",
]
_LITERALS = sorted({row[0].decode() for row in logs._SCANNER_ROWS})
_NOISE = ["\x1b[0m", "\r", "\t", " ", "{", '{"log": "x"}', "\u2588", "-", ":", "]", "\x7f", "é"]
_FILLER = ["abc", "0", "12", "Running: 3 reqs", "KV cache usage: 50.0%", 'GET /x HTTP/1.1" 200']
_FRAGMENT = st.sampled_from(_HEADERS + _LITERALS + _NOISE + _FILLER)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_FRAGMENT, max_size=8).map("".join), min_size=1, max_size=30))
def test_random_lines_route_as_the_cascade(lines: list[str]) -> None:
    data = "\n".join(line.replace("\n", " ") for line in lines).encode()
    _assert_agrees(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_simd_equals_bytewise(data: bytes) -> None:
    # Every length and alignment of the SIMD loops' tails, and arbitrary bytes.
    codes = _codes(data, loop="bytes")
    assert _codes(data) == codes
    assert _codes(data, loop="ssse3") == codes


def _rows(frames: LogFrames) -> dict[str, list[str]]:
    return {kind: sorted(map(repr, frame.rows())) for kind, frame in frames.frames.items()}


def _parse(path: Path, *, native: bool, summary: bool, chunk_bytes: int) -> LogFrames:
    saved = logs._SCANNER
    if not native:
        logs._SCANNER = None
    try:
        parts = list(
            iter_parse_path(
                path, options=OPTIONS, chunk_bytes=chunk_bytes, summary_only=summary, workers=2
            )
        )
    finally:
        logs._SCANNER = saved
    first = parts[0]
    for part in parts[1:]:
        first.extend(part)
    return first


@pytest.fixture(scope="module")
def mixed_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every fixture, corpus file and a generated log of all eras, shuffled by file."""
    tmp = tmp_path_factory.mktemp("native")
    sources = [*_fixture_files(), _generated(tmp, 1, seed=3)]
    random.Random(5).shuffle(sources)
    path = tmp / "mixed.log"
    path.write_bytes(b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in sources))
    return path


@pytest.mark.parametrize("summary", [False, True], ids=["frames", "summary"])
@pytest.mark.parametrize("chunk_bytes", [4096, 1 << 20])
def test_whole_parse_equals_cascade_only(mixed_log: Path, summary: bool, chunk_bytes: int) -> None:
    native = _parse(mixed_log, native=True, summary=summary, chunk_bytes=chunk_bytes)
    cascade = _parse(mixed_log, native=False, summary=summary, chunk_bytes=chunk_bytes)
    assert native.accounting == cascade.accounting
    assert native.record_counts() == cascade.record_counts()
    assert native.summarized == cascade.summarized
    assert _rows(native) == _rows(cascade)
    assert native.accounting.lines == mixed_log.read_bytes().count(b"\n")
