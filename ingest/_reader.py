"""Bytes to lines, fast: big chunks split at newlines into a Polars Series without a Python loop."""

from __future__ import annotations

import gzip
import io
import sys
from collections.abc import Iterator
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


def iter_chunks(path: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """Chunks of whole lines (each ends at a newline, except possibly the last one)."""
    handle = open_binary(path)
    carry = b""
    try:
        while True:
            try:
                block = handle.read(chunk_bytes)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                raise InputError(path, f"cannot read: {exc}") from exc
            if not block:
                break
            block = carry + block if carry else block
            cut = block.rfind(b"\n")
            if cut < 0:
                carry = block
                continue
            carry = block[cut + 1 :]
            yield block[: cut + 1]
        if carry:
            yield carry
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def _valid_utf8(chunk: bytes) -> bytes:
    if chunk.isascii():
        return chunk
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError:
        # Damaged bytes become U+FFFD; the line is kept, never dropped.
        return chunk.decode("utf-8", "replace").encode("utf-8")
    return chunk


def split_lines(chunk: bytes) -> pl.Series:
    """One String per physical line, trailing newline kept (patterns tolerate it).

    Newlines are found by Polars on a zero-copy UInt8 view and the strings are built by Arrow
    from the same buffer, so no Python object is made per line.
    """
    chunk = _valid_utf8(chunk)
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
    count = offsets.len() - 1
    array = pa.LargeStringArray.from_buffers(count, offsets.to_arrow().buffers()[1], buffer)
    lines = pl.from_arrow(array)
    assert isinstance(lines, pl.Series)
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
