"""The reader's line split (ingest/_reader.py over ingest/_arrow.py): every physical line,
its newline kept, CRLF kept, invalid UTF-8 as U+FFFD line by line, and no buffer kept alive
once Polars drops the lines."""

from __future__ import annotations

import gc

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _arrow
from preemptscope.ingest._reader import split_lines


def _by_newline(data: bytes) -> list[str]:
    parts = data.split(b"\n")
    out = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return [line.decode("utf-8", "replace") for line in out]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.sampled_from([b"\n", b"\r\n", b"\r", b"\xff", b"\xe2\x82", b"\xc3\xa9", b"ab"]),
        ),
        max_size=30,
    )
)
def test_the_split_is_pythons_line_by_line(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    got = split_lines(data)
    assert got.dtype == pl.String and got.name == "raw"
    assert got.to_list() == _by_newline(data)
    # The same over a writable buffer, as the reader hands it (a view of a numpy chunk).
    chunk = np.frombuffer(data, dtype=np.uint8).copy() if data else np.empty(0, np.uint8)
    assert split_lines(chunk.data.cast("B")).to_list() == _by_newline(data)


def test_the_buffers_are_released_when_the_lines_are_dropped() -> None:
    gc.collect()
    before = len(_arrow._ALIVE)
    for _ in range(20):
        lines = split_lines(b"first line of the chunk\n" * 1000 + b"\xff last")
        assert lines.len() == 1001
        kept = lines.filter(lines.str.contains("first")).str.len_bytes().sum()
        assert kept == 24 * 1000
        del lines
    gc.collect()
    assert len(_arrow._ALIVE) == before
