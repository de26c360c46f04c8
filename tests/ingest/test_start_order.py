"""JOINED rows kept in start order as they settle (ingest/reduce.py `_InStartOrder`): the
stable sort of all of them by start, marked sorted so the analysis copies nothing; rows that
settle before the watermark says they may (a clock that went back) are kept all the same."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.ingest.lifecycle import JOINED
from preemptscope.ingest.reduce import _InStartOrder

_BASE = datetime(2026, 1, 15, 14, tzinfo=UTC)
_SCHEMA = pl.Schema({name: dtype for name, dtype in JOINED.items() if name != "source"})


def _rows(starts: list[int], first_line: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "line": list(range(first_line, first_line + len(starts))),
            "pid": [1] * len(starts),
            "start": [_BASE + timedelta(seconds=s) for s in starts],
            "e2e": [0.5] * len(starts),
            "success": [True] * len(starts),
            "prompt_block_hashes": [[s] for s in starts],
            "prompt_tokens": [16] * len(starts),
            "prompt_cut": [False] * len(starts),
        },
        schema=_SCHEMA,
    )


# Batches of settled rows (their starts, seconds) and the watermark after each (seconds).
_BATCHES = st.lists(
    st.tuples(st.lists(st.integers(0, 60), max_size=12), st.integers(-5, 70)), max_size=10
)


@settings(max_examples=150, deadline=None)
@given(_BATCHES)
def test_kept_rows_are_the_stable_sort_of_what_settled(
    batches: list[tuple[list[int], int]],
) -> None:
    kept, parts, line = _InStartOrder(), [], 1
    for starts, mark in batches:
        part = _rows(starts, line)
        line += len(starts)
        kept.add(part)
        parts.append(part)
        kept.release(_BASE + timedelta(seconds=mark))
    frame = kept.frame(_SCHEMA)
    every = pl.concat(parts) if parts else pl.DataFrame(schema=_SCHEMA)
    # Nothing lost, nothing twice, whatever the watermarks said.
    assert sorted(frame["line"].to_list()) == every["line"].to_list()
    if frame["start"].flags["SORTED_ASC"]:
        # Marked sorted only when it is the stable sort (ties in the order they settled).
        assert frame.equals(every.sort("start", maintain_order=True))


def test_in_order_watermarks_keep_the_rows_sorted() -> None:
    kept = _InStartOrder()
    kept.add(_rows([5, 3, 9], 1))
    kept.release(_BASE + timedelta(seconds=6))  # 3 and 5 are kept, 9 waits
    kept.add(_rows([7, 9], 4))
    kept.release(_BASE + timedelta(seconds=8))  # 7 is kept
    kept.add(_rows([8], 6))  # settles later than the watermark promised: still sorted
    frame = kept.frame(_SCHEMA)
    assert frame["line"].to_list() == [2, 1, 4, 6, 3, 5]
    assert frame["start"].flags["SORTED_ASC"]


def test_a_row_before_the_kept_ones_leaves_them_unmarked() -> None:
    kept = _InStartOrder()
    kept.add(_rows([5, 6], 1))
    kept.release(_BASE + timedelta(seconds=10))
    kept.add(_rows([4], 3))  # the log's clock went back
    frame = kept.frame(_SCHEMA)
    assert sorted(frame["line"].to_list()) == [1, 2, 3]
    assert not frame["start"].flags["SORTED_ASC"]
