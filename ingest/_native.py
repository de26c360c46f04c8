"""The native one-pass scanner (ingest/_scan.c): split a chunk and settle its plain lines.

The scanner gives every line a code; UNDECIDED lines take the Polars cascade in logs.py,
the others are what that cascade would have decided for them (tests/ingest/test_native.py
checks this line by line). The literals and their meanings come from the catalogue here, so
the C code knows no log format. Without the compiled module (no C compiler at install time)
`available()` is false and logs.py routes every line itself: slower, same frames.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

import numpy as np
import polars as pl
import pyarrow as pa
from preemptscope.ingest._reader import lines_from_buffers

try:  # pragma: no cover - which branch runs depends on the install
    from preemptscope.ingest import _scan as _compiled  # type: ignore[attr-defined]

    _module: ModuleType | None = _compiled
except ImportError:  # pragma: no cover
    _module = None

UNDECIDED, ACCESS, REQUEST, OTHER, BLANK = range(5)
Loop = Literal["best", "ssse3", "bytes"]
CODE_NAMES = ("undecided", "access", "requests", "other", "blank")

# Flag bits, as in _scan.c.
F_HTTP, F_INFO, F_DASH, F_PY, F_STATS, F_REQ_START, F_REQ, F_UNUSUAL = (1 << i for i in range(8))

# PREEMPTSCOPE_NATIVE=0 turns the scanner off (to compare the two paths, or to rule it out).
_ENABLED = os.environ.get("PREEMPTSCOPE_NATIVE", "1") != "0"


def available() -> bool:
    """True when the compiled scanner is installed and not turned off."""
    return _module is not None and _ENABLED


def _rarity(byte: int) -> int:
    """How common a byte is in log text (lower: rarer), to pick literal fingerprints."""
    char = chr(byte)
    if char == " ":
        return 10
    if char.islower():
        return 5
    if char.isdigit():
        return 4
    if char.isupper():
        return 2
    return 3 if char in ".:-/,'\"=[]()" else 1


def _anchor(literal: bytes) -> int:
    """Offset of the literal's rarest three-byte fingerprint (fewer false candidates)."""
    return min(
        range(len(literal) - 2),
        key=lambda i: (sum(_rarity(b) for b in literal[i : i + 3]), i),
    )


def literal_table(
    *,
    access_literals: tuple[str, str, str],
    python_literals: Sequence[str],
    stats_literals: Sequence[str],
    request_starts: Sequence[str],
    request_literals: Sequence[str],
    ansi_literals: Sequence[str],
) -> list[tuple[bytes, int, int]]:
    """(literal, flag, fingerprint offset) rows for the scanner, from the same lists the
    cascade's probes use (`access_literals`: uvicorn's ` HTTP/`, `INFO:` and ` - "`).

    Literals with non-ASCII bytes are left out: the scanner leaves every non-ASCII line
    UNDECIDED anyway, and so is every line with a control byte (ESC, the one literal under
    three bytes).
    """
    http, level, dash = access_literals
    groups = [
        ([http], F_HTTP),
        ([level], F_INFO),
        ([dash], F_DASH),
        (python_literals, F_PY),
        (stats_literals, F_STATS),
        (request_starts, F_REQ_START),
        (request_literals, F_REQ),
        (ansi_literals, F_UNUSUAL),
    ]
    table = [
        (literal.encode(), flag, _anchor(literal.encode()))
        for literals, flag in groups
        for literal in literals
        if literal.isascii() and len(literal) >= 3
    ]
    # Sorted by fingerprint: neighbours share a Teddy bucket, so its nibble sets stay small.
    return sorted(table, key=lambda row: row[0][row[2] : row[2] + 3])


@dataclass
class Scanned:
    """One chunk, scanned: line count, lines per code, the kept groups, line starts."""

    lines: int
    counts: tuple[int, ...]
    groups: dict[int, pl.DataFrame]  # code -> frame(raw, line) with chunk-local 0-based lines
    starts: np.ndarray[Any, np.dtype[np.int64]]
    kept_bytes: int  # text in `groups`


class Scanner:
    """A compiled literal table and the scan call."""

    def __init__(self, rows: list[tuple[bytes, int, int]]) -> None:
        assert _module is not None
        self._table = _module.compile(rows)

    def scan(
        self, chunk: bytes | memoryview, keep: Sequence[int], *, loop: Loop = "best"
    ) -> Scanned:
        """Split and classify `chunk`; the lines of the codes in `keep` come back as frames.

        `loop` picks the scanning loop: "best" (AVX2, else SSSE3, else bytes), or forces
        "ssse3" or the byte-by-byte "bytes" (what non-x86 machines run), so tests can
        compare them on any x86 machine.
        """
        assert _module is not None
        mask = sum(1 << code for code in set(keep))
        mode = {"bytes": 0, "best": 1, "ssse3": 2}[loop]
        lines, counts, groups, starts = _module.scan(chunk, self._table, mask, mode)
        kept = {code: group for code, group in enumerate(groups) if group is not None}
        frames = {code: _group_frame(*group) for code, group in kept.items()}
        size = sum(len(text) for text, _, _ in kept.values())
        return Scanned(lines, counts, frames, np.frombuffer(starts, dtype=np.int64), size)


def _group_frame(text: bytes, offsets: bytes, index: bytes) -> pl.DataFrame:
    raw = lines_from_buffers(len(index) // 8, pa.py_buffer(offsets), pa.py_buffer(text))
    lines = pl.Series("line", np.frombuffer(index, dtype=np.int64), dtype=pl.Int64)
    return pl.DataFrame({"raw": raw, "line": lines})
