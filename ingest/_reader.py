"""Bytes to lines, fast: big chunks split at newlines into a Polars Series without a Python loop."""

from __future__ import annotations

import gzip
import io
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import polars as pl
import pyarrow as pa

from preemptscope.errors import InputError

CHUNK_BYTES = 32 * 1024 * 1024


def open_binary(path: str) -> BinaryIO:
    """Open a plain or gzip file (or stdin for "-") for binary reading; InputError if unreadable."""
    if path == "-":
        return sys.stdin.buffer
    try:
        handle: BinaryIO = open(path, "rb")  # noqa: SIM115 - returned to the caller
    except OSError as exc:
        raise InputError(path, f"cannot open: {exc.strerror or exc}") from exc
    magic = handle.peek(2)[:2] if isinstance(handle, io.BufferedReader) else b""
    if magic == b"\x1f\x8b" or path.endswith(".gz"):
        return gzip.open(handle, "rb")  # type: ignore[return-value]
    return handle


def iter_chunks(
    path: str,
    chunk_bytes: int = CHUNK_BYTES,
    may_continue: Callable[[str], bool] | None = None,
) -> Iterator[memoryview]:
    """Chunks of whole lines (each ends at a newline, except possibly the last one).

    Each chunk is read straight into a fresh buffer behind the carried-over partial line, so
    no chunk is copied again in Python.
    """
    handle = open_binary(path)
    carry = b""
    try:
        while True:
            # Arrow's allocator hands out memory without zero-filling it (bytearray(n) zeroes
            # 32 MiB first: ~20 ms per chunk); readinto overwrites what is used.
            buffer = pa.allocate_buffer(len(carry) + chunk_bytes)
            view = memoryview(buffer).cast("B")
            view[: len(carry)] = carry
            try:
                got = handle.readinto(view[len(carry) :])  # type: ignore[attr-defined]
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                raise InputError(path, f"cannot read: {exc}") from exc
            if not got:
                break
            end = len(carry) + got
            cut = _cut_in(view, end, may_continue)
            if cut < 0 and end > _MAX_CARRY:
                # give up on finding a record boundary
                cut = bytes(view[:end]).rfind(b"\n")
            if cut < 0:
                carry = bytes(view[:end])
                continue
            carry = bytes(view[cut + 1 : end])
            yield view[: cut + 1]
        if carry:
            yield memoryview(carry)
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


_TAIL_WINDOW = 1 << 20


def _cut_in(view: memoryview, end: int, may_continue: Callable[[str], bool] | None) -> int:
    """safe_cut(view[:end]) looking only at a copied tail, grown until the answer is certain."""
    window = _TAIL_WINDOW
    while True:
        low = max(0, end - window)
        cut = safe_cut(bytes(view[low:end]), end - low, may_continue, partial=low > 0)
        if cut != _UNDECIDED:
            return cut + low if cut >= 0 else cut
        window *= 4


def last_line(view: memoryview) -> str:
    """The last line of a chunk (without reading more of it than that line)."""
    end = len(view)
    window = _TAIL_WINDOW
    while True:
        low = max(0, end - window)
        tail = bytes(view[low:end])
        newline = tail.rfind(b"\n", 0, len(tail) - 1)
        if newline >= 0 or low == 0:
            return tail[newline + 1 :].decode("utf-8", "replace")
        window *= 4


# A line ending in one of these (or shorter than WRAP_MIN) ends its record; a longer line
# ending otherwise may be the first half of a terminal hard-wrap.
TERMINAL = ".%)]}'\"!?"
WRAP_MIN = 60
_TERMINAL = frozenset(TERMINAL.encode())
_SAFE_SEARCH = 4096
_MAX_CARRY = 256 * 1024 * 1024
_UNDECIDED = -2


# The start of a line that cannot be the tail of a hard-wrapped record: a container
# timestamp, a process prefix, a level, a JSON object.
_ENVELOPE_START = re.compile(rb"\d{4}-\d\d-\d\d|\(|\{|\[|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")


def safe_cut(
    buffer: bytes | bytearray,
    end: int,
    may_continue: Callable[[str], bool] | None = None,
    *,
    partial: bool = False,
) -> int:
    """Index of a newline where a chunk may end, or -1 when none is found near the end.

    Terminal hard-wraps split one record over two lines; a chunk may end between two lines
    only if the second starts with an envelope (so it is not the tail of the first) or the
    first cannot continue (`may_continue`, default: short or ending in punctuation).
    With `partial`, `buffer` is the tail of a longer one (it may start mid-line): -2 when
    the answer depends on what comes before it.
    """
    cut = buffer.rfind(b"\n", 0, end)
    for _ in range(_SAFE_SEARCH):
        if cut < 0:
            return _UNDECIDED if partial else -1
        if cut + 1 < end and _ENVELOPE_START.match(buffer, cut + 1, end):
            return cut
        newline = buffer.rfind(b"\n", 0, cut)
        if newline < 0 and partial:
            return _UNDECIDED
        start = newline + 1
        if may_continue is not None:
            line = bytes(buffer[start:cut]).decode("utf-8", "replace")
            if not may_continue(line):
                return cut
        else:
            stop = cut - 1 if cut > start and buffer[cut - 1] == 13 else cut
            if stop - start < WRAP_MIN or buffer[stop - 1] in _TERMINAL:
                return cut
        cut = start - 1
    return -1


def split_lines(chunk: bytes | memoryview) -> pl.Series:
    """One String per physical line, trailing newline kept (patterns tolerate it).

    Newlines are found by Polars on a zero-copy UInt8 view and the strings are built by Arrow
    from the same buffer, so no Python object is made per line. Invalid UTF-8 becomes U+FFFD:
    the line is kept, never dropped.
    """
    size = len(chunk)
    if size == 0:
        return pl.Series("raw", [], dtype=pl.String)
    buffer = pa.py_buffer(chunk)
    as_bytes = pl.from_arrow(pa.Array.from_buffers(pa.uint8(), size, [None, buffer]))
    assert isinstance(as_bytes, pl.Series)
    ends = (as_bytes == 10).arg_true().cast(pl.Int64) + 1
    pieces = [pl.Series([0], dtype=pl.Int64), ends]
    if chunk[-1:] != b"\n":
        pieces.append(pl.Series([size], dtype=pl.Int64))
    offsets = pl.concat(pieces)
    return lines_from_buffers(offsets.len() - 1, offsets.to_arrow().buffers()[1], buffer)


def lines_from_buffers(count: int, offsets: pa.Buffer, data: pa.Buffer) -> pl.Series:
    """The String Series "raw" of `count` lines: line i is data[offsets[i]:offsets[i + 1]]
    (int64 offsets), without a Python object per line unless a line is not valid UTF-8.

    Invalid UTF-8 becomes U+FFFD, line by line (a newline is never part of a UTF-8 sequence,
    so this is what decoding the whole buffer would give): the line is kept, never dropped.
    """
    array = pa.LargeBinaryArray.from_buffers(pa.large_binary(), count, [None, offsets, data])
    binary = pl.from_arrow(array)
    assert isinstance(binary, pl.Series)
    try:
        lines = binary.cast(pl.String)
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError):
        lines = pl.Series([b.decode("utf-8", "replace") for b in binary.to_list()], dtype=pl.String)
    return lines.rename("raw")


def display_name(path: str) -> str:
    """Default deployment name: the file stem without .log/.gz/.txt suffixes."""
    if path == "-":
        return "stdin"
    name = Path(path).name
    for suffix in (".gz", ".log", ".txt", ".jsonl", ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name
