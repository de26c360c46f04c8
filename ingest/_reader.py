"""Bytes to lines, fast: big chunks split at newlines into a Polars Series without a Python loop.

Owns opening an input (plain, gzip, stdin) under `ReadLimits`, where a chunk may be cut (never
inside a record a hard-wrap may continue), and decoding lines (bad UTF-8 kept as U+FFFD).
Never reads what a line says beyond that.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import polars as pl
from preemptscope.ingest._arrow import binary_lines

from preemptscope.errors import ConfigError, InputError

# Up to about eight chunks are alive at once (read, routed, dated, joined): 16 MiB costs the
# CPU time of larger chunks in less memory (docs/benchmarks.md, "Memory").
CHUNK_BYTES = 16 * 1024 * 1024


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        parsed = int(value)
    except ValueError as exc:
        raise ConfigError(f"{name}={value!r}: expected a number of bytes") from exc
    if parsed < 1024:
        raise ConfigError(f"{name}={value!r}: at least 1024 bytes")
    return parsed


@dataclass(frozen=True)
class ReadLimits:
    """What one input may cost (docs/frames.md, "Limits"); defaults from the environment.

    - max_line_bytes (PREEMPTSCOPE_MAX_LINE_BYTES, 1 MiB): a longer line is cut there,
      counted `unrecognized` with its real length, and reading goes on after its newline;
    - endless_bytes (PREEMPTSCOPE_MAX_ENDLESS_BYTES, 1 GiB): a "line" this long without a
      newline is no log (`/dev/zero`): an InputError;
    - gzip_max_ratio (200) and gzip_max_bytes (PREEMPTSCOPE_GZIP_MAX_BYTES, 64 GiB): a
      .gz input decompressing beyond either is a bomb: an InputError. Real logs compress
      10-50x; the ratio is checked once 64 MiB are out.
    """

    max_line_bytes: int = 1 << 20
    endless_bytes: int = 1 << 30
    gzip_max_ratio: float = 200.0
    gzip_max_bytes: int = 64 << 30

    @classmethod
    def from_env(cls) -> ReadLimits:
        return cls(
            max_line_bytes=_env_int("PREEMPTSCOPE_MAX_LINE_BYTES", cls.max_line_bytes),
            endless_bytes=_env_int("PREEMPTSCOPE_MAX_ENDLESS_BYTES", cls.endless_bytes),
            gzip_max_bytes=_env_int("PREEMPTSCOPE_GZIP_MAX_BYTES", cls.gzip_max_bytes),
        )


_RATIO_AFTER = 64 << 20


class _LimitedGzip(io.RawIOBase):
    """A gzip stream that stops with an InputError past the limits (a decompression bomb)."""

    def __init__(self, path: str, raw: BinaryIO, limits: ReadLimits) -> None:
        self._path = path
        self._raw = raw
        self._gzip = gzip.GzipFile(fileobj=raw, mode="rb")
        self._limits = limits
        self._out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        got = self._gzip.readinto(buffer)
        self._out += got
        limits = self._limits
        if self._out > limits.gzip_max_bytes:
            raise InputError(
                self._path,
                f"decompresses to more than {limits.gzip_max_bytes} bytes"
                " (PREEMPTSCOPE_GZIP_MAX_BYTES): refusing a possible gzip bomb",
            )
        if self._out > _RATIO_AFTER:
            packed = max(1, self._raw.tell())
            if self._out / packed > limits.gzip_max_ratio:
                raise InputError(
                    self._path,
                    f"decompresses more than {limits.gzip_max_ratio:g}x"
                    f" ({self._out} bytes from {packed}): refusing a possible gzip bomb",
                )
        return got

    def close(self) -> None:
        self._gzip.close()
        self._raw.close()
        super().close()


def open_binary(path: str, limits: ReadLimits | None = None) -> BinaryIO:
    """Open a plain or gzip file (or stdin for "-") for binary reading; InputError if unreadable.

    A gzip stream is read under `limits` (default: ReadLimits.from_env()): decompressing past
    its size or ratio cap raises InputError (uploads are read through here too).
    """
    if path == "-":
        return sys.stdin.buffer
    try:
        handle: BinaryIO = open(path, "rb")  # noqa: SIM115 - returned to the caller
    except OSError as exc:
        raise InputError(path, f"cannot open: {exc.strerror or exc}") from exc
    magic = handle.peek(2)[:2] if isinstance(handle, io.BufferedReader) else b""
    if magic == b"\x1f\x8b" or path.endswith(".gz"):
        stream = _LimitedGzip(path, handle, limits or ReadLimits.from_env())
        return io.BufferedReader(stream, 1 << 20)
    return handle


@dataclass
class Block:
    """Whole lines read from an input, and the lines cut at the maximum length."""

    view: memoryview
    cut: dict[int, int] = field(default_factory=dict)  # line index in view -> real length


def iter_chunks(
    path: str,
    chunk_bytes: int = CHUNK_BYTES,
    may_continue: Callable[[str], bool] | None = None,
) -> Iterator[memoryview]:
    """The views of iter_blocks (for callers that need no cut lines)."""
    for block in iter_blocks(path, chunk_bytes, may_continue):
        yield block.view


def iter_blocks(
    path: str,
    chunk_bytes: int = CHUNK_BYTES,
    may_continue: Callable[[str], bool] | None = None,
    limits: ReadLimits | None = None,
) -> Iterator[Block]:
    """Blocks of whole lines (each ends at a newline, except possibly the last one).

    Each chunk is read straight into a fresh buffer behind the carried-over partial line, so
    no chunk is copied again in Python. A line longer than `limits.max_line_bytes` is cut:
    its first max_line_bytes come as a block of their own (with its real length in `cut`),
    the rest is read past without being kept, so memory stays flat whatever the input.
    """
    limits = limits or ReadLimits.from_env()
    handle = open_binary(path, limits)
    carry = b""
    offset = 0  # bytes of the input before `carry`
    try:
        while True:
            # numpy's allocator hands out memory without zero-filling it (bytearray(n) zeroes
            # a whole chunk first); readinto overwrites what is used.
            buffer = np.empty(len(carry) + chunk_bytes, dtype=np.uint8)
            view = buffer.data.cast("B")
            view[: len(carry)] = carry
            got = _read_full(handle, path, view[len(carry) :])
            if not got:
                break
            end = len(carry) + got
            # Short of a full chunk: the input has ended (_read_full), so the block needs no
            # safe cut (on lines that could all continue, the search costs as much as parsing).
            at_end = got < chunk_bytes
            newline = _rfind_newline(view, end)
            if end - (newline + 1) > limits.max_line_bytes:
                # The last line is too long: emit what precedes it, then cut it.
                if newline >= 0:
                    yield Block(view[: newline + 1])
                start = newline + 1
                head = bytes(view[start : start + limits.max_line_bytes])
                block, carry = _skip_long_line(
                    handle, path, head, end - start, bytes(view[start:end]), limits, offset + start
                )
                offset += end - len(carry)
                yield block
                continue
            if at_end:
                carry = b""
                yield Block(view[:end])
                break
            cut = _cut_in(view, end, may_continue)
            if cut < 0 and end > _MAX_CARRY:
                cut = newline  # give up on finding a record boundary
            if cut < 0:
                carry = bytes(view[:end])
                continue
            carry = bytes(view[cut + 1 : end])
            offset += cut + 1
            yield Block(view[: cut + 1])
        if carry:
            yield Block(memoryview(carry))
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def _read(handle: BinaryIO, path: str, into: memoryview) -> int:
    try:
        return handle.readinto(into)  # type: ignore[attr-defined,no-any-return]
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(path, f"cannot read: {exc}") from exc


def _read_full(handle: BinaryIO, path: str, into: memoryview) -> int:
    """Read until `into` is full or the input ends (a pipe or a gzip stream may return less
    than asked before its end); the number of bytes read."""
    got = 0
    while got < len(into):
        more = _read(handle, path, into[got:])
        if not more:
            break
        got += more
    return got


def _rfind_newline(view: memoryview, end: int) -> int:
    """The last newline in view[:end], looking at a copied tail first."""
    window = _TAIL_WINDOW
    while True:
        low = max(0, end - window)
        found = bytes(view[low:end]).rfind(b"\n")
        if found >= 0:
            return found + low
        if low == 0:
            return -1
        window *= 4


def _skip_long_line(
    handle: BinaryIO,
    path: str,
    head: bytes,
    seen: int,
    pending: bytes,
    limits: ReadLimits,
    at: int,
) -> tuple[Block, bytes]:
    """Read past the rest of a line cut after `head`: (its block, the bytes after it).

    `seen` bytes of the line are read already; `pending` holds them (the newline may be in a
    later read). InputError when no newline comes within limits.endless_bytes.
    """
    scratch = bytearray(1 << 20)
    while True:
        if len(pending) > 0 and b"\n" in pending:
            index = pending.index(b"\n")
            real = seen - len(pending) + index
            return Block(memoryview(head + b"\n"), {0: real}), pending[index + 1 :]
        if seen > limits.endless_bytes:
            raise InputError(
                path,
                f"a line from byte {at} runs past {limits.endless_bytes} bytes without a"
                " newline: not a log (endless input such as /dev/zero?);"
                " PREEMPTSCOPE_MAX_ENDLESS_BYTES raises the limit",
            )
        got = _read(handle, path, memoryview(scratch))
        if not got:
            return Block(memoryview(head), {0: seen}), b""
        pending = bytes(scratch[:got])
        seen += got


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
# Nor more than this many bytes of them: each costs a per-line read (`may_continue`), and
# thousands of long lines that could all continue would cost as much again as parsing them.
_SAFE_SEARCH_BYTES = 1024 * 1024
# Past this, a block with no safe cut among its last _SAFE_SEARCH lines ends at its last
# newline (only noise has that many lines in a row that could continue), so memory stays
# bounded whatever the file's size.
_MAX_CARRY = 8 * 1024 * 1024
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
        if end - start > _SAFE_SEARCH_BYTES:
            return -1
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

    Newlines are found by numpy on a zero-copy view of the chunk, and Polars takes the lines
    as Arrow binary values over the same buffer (ingest/_arrow.py), so no Python object is
    made per line. Invalid UTF-8 becomes U+FFFD: the line is kept, never dropped.
    """
    size = len(chunk)
    if size == 0:
        return pl.Series("raw", [], dtype=pl.String)
    data = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(data == 10)
    count = len(ends) + (chunk[-1:] != b"\n")
    offsets = np.empty(count + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1 : len(ends) + 1] = ends + 1
    offsets[-1] = size
    return lines_from_buffers(count, offsets, data)


def lines_from_buffers(
    count: int, offsets: npt.NDArray[np.int64], data: npt.NDArray[np.uint8]
) -> pl.Series:
    """The String Series "raw" of `count` lines: line i is data[offsets[i]:offsets[i + 1]]
    (int64 offsets), without a Python object per line unless a line is not valid UTF-8.

    Invalid UTF-8 becomes U+FFFD, line by line (a newline is never part of a UTF-8 sequence,
    so this is what decoding the whole buffer would give): the line is kept, never dropped.
    """
    binary = binary_lines(count, offsets, data)
    try:
        lines = binary.cast(pl.String)
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError):
        # The lines with a byte past ASCII through Python's decoder; the others cast over a
        # copy of the chunk with those bytes blanked (Polars checks the whole buffer), so one
        # bad byte does not send every line of its chunk through Python.
        high = np.flatnonzero(data >= 0x80)
        rows = np.unique(np.searchsorted(offsets, high, side="right") - 1)
        texts = [
            bytes(data[offsets[row] : offsets[row + 1]]).decode("utf-8", "replace")
            for row in rows.tolist()
        ]
        ascii_only = data.copy()
        ascii_only[high] = 0x20
        lines = binary_lines(count, offsets, ascii_only).cast(pl.String)
        lines = lines.scatter(pl.Series(rows, dtype=pl.Int64), pl.Series(texts, dtype=pl.String))
    renamed: pl.Series = lines.rename("raw")
    return renamed


def display_name(path: str) -> str:
    """Default deployment name: the file stem without .log/.gz/.txt suffixes."""
    if path == "-":
        return "stdin"
    name = Path(path).name
    for suffix in (".gz", ".log", ".txt", ".jsonl", ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name
