"""Rows `report` keeps while a log streams (ingest/reduce.py `_Kept`): blocks made of the parts
as they come, never copied again; what they give back is every part, in order, unchanged.
And the analysis' window grid, numbered a slice at a time, is the one of all rows at once."""

from __future__ import annotations

import functools
import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.analysis import windows
from preemptscope.analysis.analyze import DeploymentInputs, analyze
from preemptscope.analysis.params import AnalysisParams
from preemptscope.ingest import reduce
from preemptscope.ingest.lifecycle import log_arrivals, log_latencies
from preemptscope.ingest.logs import ParseOptions, iter_parse_path, parse_path
from preemptscope.ingest.reduce import _Kept, reduce_paths
from preemptscope.ingest.schema import JOINED, TIMESTAMP

OPTIONS = ParseOptions(year=2025)
BENCH = Path(__file__).resolve().parents[2] / "bench"
_BASE = datetime(2026, 1, 15, 14, tzinfo=UTC)
_SCHEMA = pl.Schema({name: dtype for name, dtype in JOINED.items() if name != "source"})


def _part(starts: list[int], first_line: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "line": list(range(first_line, first_line + len(starts))),
            "pid": [None if s % 3 == 0 else s % 5 for s in starts],
            "start": [_BASE + timedelta(microseconds=s) for s in starts],
            "e2e": [s / 7 for s in starts],
            "success": [s % 2 == 0 for s in starts],
            # A list column too (the prompt's block hashes), nulls among them.
            "prompt_block_hashes": [[abs(s) % 7] * (s % 3) if s % 4 else None for s in starts],
            "prompt_tokens": [16 * (s % 3) if s % 4 else None for s in starts],
            "prompt_cut": [s % 5 == 0 if s % 4 else None for s in starts],
        },
        schema=_SCHEMA,
    )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=9), max_size=14),
    st.integers(1, 5),
)
def test_kept_blocks_give_back_every_part_in_order(parts: list[list[int]], every: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reduce, "COMPACT_EVERY", every)
        kept, frames, line = _Kept(), [], 1
        for starts in parts:
            frame = _part(starts, line)
            line += len(starts)
            kept.add(frame)
            frames.append(frame)
        got = kept.frame(_SCHEMA)
    expected = pl.concat(frames) if frames else pl.DataFrame(schema=_SCHEMA)
    assert got.schema == _SCHEMA
    assert got.equals(expected)
    assert got.rows() == expected.rows()  # values, nulls and order, column by column
    # Blocks are never merged again: one chunk per block (the parts left over make one).
    assert got.n_chunks() == max(1, -(-len(parts) // every))


def test_constant_columns_give_back_their_values() -> None:
    # A null pid, one pid, one start, one success: each held once, read back as every row's.
    rows = _part([3, 3, 3], 1).with_columns(pid=pl.lit(None, pl.Int32))
    other = _part([3, 3, 3], 4).with_columns(pid=pl.lit(7, pl.Int32))
    for parts in ([rows, rows], [rows, other], [other]):
        block = reduce._block(parts)
        assert block.schema == _SCHEMA
        assert block.rows() == pl.concat(parts).rows()


def _mixed_log(directory: Path) -> Path:
    spec = importlib.util.spec_from_file_location("gen_logs", BENCH / "gen_logs.py")
    assert spec is not None and spec.loader is not None
    gen_logs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_logs)
    path = directory / "mixed.log"
    gen_logs.generate(str(path), 0.4)
    return path


def _report(frames: list) -> dict[str, object]:  # type: ignore[type-arg]
    report = analyze([DeploymentInputs(name="d", logs=frames)], AnalysisParams())
    data = report.to_dict()
    data.pop("generated_at", None)
    return data


def test_a_log_kept_in_blocks_reduces_to_the_full_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small chunks and blocks of three: the kinds kept whole span many blocks, as a 4 GB log's do.
    path = _mixed_log(tmp_path)
    small = functools.partial(iter_parse_path, chunk_bytes=16_384)
    monkeypatch.setattr(reduce, "iter_parse_path", small)
    monkeypatch.setattr(reduce, "COMPACT_EVERY", 3)
    full = parse_path(path, deployment="d", options=OPTIONS)
    (reduced,) = reduce_paths([str(path)], deployment="d", options=OPTIONS)
    assert reduced["scheduler_stats"].n_chunks() > 2  # blocks, not one regrown frame
    assert reduced.record_counts() == full.record_counts()
    assert reduced.accounting == full.accounting
    for kind in ("scheduler_stats", "preemption_warning", "config", "kv_capacity"):
        assert reduced[kind].equals(full[kind]), kind
    # Requests of one start second come in the order they settled, not in line order (as
    # with one chunk): the same rows, sorted by start.
    columns = ["source", "deployment", "start", "e2e", "success", "origin"]
    got, want = log_latencies([reduced]).select(columns), log_latencies([full]).select(columns)
    assert got["start"].is_sorted()
    assert got.sort(columns).equals(want.sort(columns))
    assert log_arrivals([reduced]).equals(log_arrivals([full]))
    assert _report([reduced]) == _report([full])


_TIMES = st.lists(st.one_of(st.none(), st.integers(0, 10**13)), max_size=60)


@settings(max_examples=100, deadline=None)
@given(_TIMES, st.integers(1, 7), st.sampled_from([1, 10, 60]))
def test_window_grid_numbered_in_slices_is_the_one_of_all_rows(
    micros: list[int | None], slice_rows: int, seconds: int
) -> None:
    params = AnalysisParams(window_s=seconds)
    frame = pl.DataFrame(
        {"t": [None if m is None else _BASE + timedelta(microseconds=m) for m in micros]},
        schema={"t": TIMESTAMP},
    )
    base_us = int(_BASE.timestamp()) * 1_000_000
    wins = {(m + base_us) // params.window_us for m in micros if m is not None}
    expected = [] if not wins else list(range(min(wins), max(wins) + 1))
    if wins and max(wins) - min(wins) >= windows.MAX_GRID_WINDOWS:
        expected = sorted(wins)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(windows, "_GRID_SLICE", slice_rows)
        assert windows.data_windows(params, (frame, "t"), (None, "t")) == expected
