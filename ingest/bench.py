"""Client-side latency results into REQUEST_LATENCIES: vllm bench serve, GuideLLM, CSV, JSONL.

This module owns `read_bench`: the file read, its format detected from the content, the reader
of that format run (`bench_vllm`, `bench_guidellm`, `bench_generic`; what they share is
`bench_rows`) and the times re-anchored at a `start` you give. Every public name is
importable from here. Formats are described in docs/sources.md.

Rows carry REQUEST_LATENCIES' columns plus `priority` (vLLM's request priority, null where the
file gives none): a `priority` column, or a vllm bench JSON's `priorities` list beside its
other per-request lists. The what-if replays it (docs/simulator.md).

TPOT everywhere means vLLM's: (e2e - ttft) / (output_tokens - 1), excluding the first token
(GuideLLM's `inter_token_latency_ms`; its `time_per_output_token_ms` includes the first).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import yaml
from preemptscope.ingest.bench_generic import (
    GENERIC_COLUMNS,
    _jsonl_records,
    _read_csv,
    _read_records,
)
from preemptscope.ingest.bench_guidellm import _read_guidellm
from preemptscope.ingest.bench_rows import REQUEST_ROWS, BenchRun, RunLatency, _after
from preemptscope.ingest.bench_vllm import _is_vllm, _read_vllm

from preemptscope.errors import InputError

__all__ = [
    "GENERIC_COLUMNS",
    "REQUEST_ROWS",
    "BenchResult",
    "BenchRun",
    "RunLatency",
    "read_bench",
    "read_latencies",
]


@dataclass(frozen=True)
class BenchResult:
    path: str
    origin: str  # vllm_bench, guidellm, csv, jsonl
    latencies: pl.DataFrame  # REQUEST_LATENCIES
    runs: list[BenchRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # caveats to show the user


def _shift(frame: pl.DataFrame, start: datetime | None) -> pl.DataFrame:
    """Move all start times so that the earliest is `start` (None: leave as they are)."""
    if start is None or frame.is_empty() or frame["start"].null_count() == frame.height:
        return frame
    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware")
    earliest: datetime = frame["start"].min()  # type: ignore[assignment]
    return frame.with_columns(pl.col("start") + (start.astimezone(UTC) - earliest))


def _guarded(
    origin: str, path: str, read: Callable[[], tuple[pl.DataFrame, list[BenchRun]]]
) -> tuple[pl.DataFrame, list[BenchRun]]:
    """A structured reader's result: a field of another type than its format's (a number where
    a list belongs, a list where an object does) is bad input, not a crash."""
    try:
        return read()
    except (TypeError, AttributeError, KeyError, IndexError) as exc:
        raise InputError(
            path, f"{origin} JSON with a field of an unexpected type ({exc})"
        ) from None


def read_bench(path: str | Path, *, deployment: str, start: datetime | None = None) -> BenchResult:
    """Read any supported client-result file: per-request rows, whole-run figures and caveats.

    `start`: when the earliest request was sent; re-anchors relative times (vllm bench) and
    shifts absolute ones (clock skew between client and server).
    """
    file = Path(path)
    name = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(name, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(name, f"cannot read as UTF-8 text: {exc}") from None
    notes: list[str] = []
    stripped = text.lstrip()
    runs: list[BenchRun] = []
    if file.suffix.lower() in (".yaml", ".yml"):
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise InputError(name, f"not YAML: {exc}", mark.line + 1 if mark else None) from None
        if not (isinstance(document, Mapping) and "benchmarks" in document):
            raise InputError(name, "YAML without a GuideLLM `benchmarks` list")
        frame, runs = _guarded(
            "GuideLLM", name, lambda: _read_guidellm(document, name, deployment, notes)
        )
        origin = "guidellm"
    elif stripped.startswith(("{", "[")):
        try:
            whole: Any = json.loads(text)
            documents = [(1, whole)]
        except json.JSONDecodeError:
            documents = list(_jsonl_records(text, name))  # JSON Lines or appended results
        first = documents[0][1] if documents else None
        if isinstance(first, Mapping) and "benchmarks" in first and len(documents) == 1:
            frame, runs = _guarded(
                "GuideLLM", name, lambda: _read_guidellm(first, name, deployment, notes)
            )
            origin = "guidellm"
        elif _is_vllm(first):
            for line, document in documents:
                if not _is_vllm(document):
                    raise InputError(name, "not a vllm bench serve result like the first", line)
            results = [d for _, d in documents]
            frame, runs = _guarded(
                "vllm bench", name, lambda: _read_vllm(results, name, deployment, notes)
            )
            origin = "vllm_bench"
        elif len(documents) == 1 and isinstance(first, list):
            frame = _read_records(iter(enumerate(first, start=1)), name, deployment)
            origin = "jsonl"
        else:
            frame = _read_records(iter(documents), name, deployment)
            origin = "jsonl"
    elif stripped:
        header = stripped.splitlines()[0]
        if "," not in header and "start" not in header:
            raise InputError(
                name,
                "not a recognised latency file: expected vllm bench serve JSON, GuideLLM "
                "benchmarks.json, or CSV/JSONL per-request rows (see docs/sources.md)",
                1,
            )
        frame = _read_csv(text, name, deployment)
        origin = "csv"
    else:
        raise InputError(name, "empty file")
    try:
        delta = _offset(frame, runs, start)
        frame = _shift(frame, start)
    except ValueError as exc:
        raise InputError(name, str(exc)) from None
    runs = [_moved(run, delta, start) for run in runs]
    if frame.is_empty() and not any(run.stats or run.requests for run in runs):
        raise InputError(
            name, f"no per-request latencies and no whole-run figures in this {origin} file"
        )
    if frame.is_empty() and runs:
        notes.append(
            "whole-run figures only (vllm bench serve without --save-detailed, or a summary): "
            "shown per run; per-window latency needs per-request rows"
        )
    return BenchResult(name, origin, frame, runs, notes)


def _offset(frame: pl.DataFrame, runs: Sequence[BenchRun], start: datetime | None) -> timedelta:
    """How far a given `start` moves the runs: as far as it moves the earliest request."""
    if start is None:
        return timedelta(0)
    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware")
    if not frame.is_empty() and frame["start"].null_count() < frame.height:
        earliest: datetime = frame["start"].min()  # type: ignore[assignment]
        return start.astimezone(UTC) - earliest
    placed = [run.start for run in runs if run.start is not None]
    return start.astimezone(UTC) - min(placed) if placed else timedelta(0)


def _moved(run: BenchRun, delta: timedelta, start: datetime | None) -> BenchRun:
    """A run re-anchored by `delta`; a run that never said when it ran starts at `start`."""
    if run.start is not None:
        if not delta:
            return run
        end = run.end + delta if run.end is not None else None
        return replace(run, start=run.start + delta, end=end)
    if start is None:
        return run
    begin = start.astimezone(UTC)
    end = _after(begin, run.duration_s)
    return replace(run, start=begin, end=end)


def read_latencies(
    path: str | Path, *, deployment: str, start: datetime | None = None
) -> pl.DataFrame:
    """Per-request latencies (REQUEST_LATENCIES) from any supported client-result file.

    Raises InputError naming the file (and line) on anything unreadable, and when the file
    holds only whole-run figures (vllm bench without --save-detailed): use `read_bench`.
    """
    result = read_bench(path, deployment=deployment, start=start)
    if result.latencies.is_empty():
        hint = (
            " (rerun vllm bench serve with --save-detailed)"
            if result.origin == "vllm_bench"
            else ""
        )
        raise InputError(
            result.path, f"no per-request latencies in this {result.origin} file{hint}"
        )
    return result.latencies
