"""What every client-result format fills: the row buffer, the whole-run figures, converters.

This module owns REQUEST_ROWS (REQUEST_LATENCIES plus the request's priority), `_Rows` (the
column buffers a reader appends to), `RunLatency` and `BenchRun` (whole-run figures as the
tool reported them) and the converters every format shares: a number that is not finite, a
time outside YEAR_RANGE or a priority that is not an integer is never taken as one. It never
reads a file or detects a format (`ingest/bench.py` does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from preemptscope.ingest.schema import REQUEST_LATENCIES, YEAR_RANGE

from preemptscope.errors import InputError

# Client rows: REQUEST_LATENCIES and the request's priority (null: not given).
REQUEST_ROWS = pl.Schema({**REQUEST_LATENCIES, "priority": pl.Int64()})


@dataclass(frozen=True)
class RunLatency:
    """Whole-run client latency of one metric ("e2e", "ttft", "tpot", "itl"), seconds.

    Plain numbers as the tool printed them (ingest does not depend on analysis types)."""

    metric: str
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


@dataclass(frozen=True)
class BenchRun:
    """One benchmark run's whole-run client figures, as the tool itself reported them.

    `start`/`end` are None when the file does not say when it ran; every figure is None when
    the file does not give it (never 0)."""

    label: str
    start: datetime | None
    end: datetime | None
    requests: int | None  # completed (successful) requests
    stats: dict[str, RunLatency] = field(default_factory=dict)
    duration_s: float | None = None
    failed: int | None = None
    request_throughput: float | None = None  # completed requests / s
    goodput: float | None = None  # requests / s meeting the run's SLOs (--goodput)
    input_tokens: int | None = None  # total over the run
    output_tokens: int | None = None
    max_concurrency: int | None = None  # the client's cap (--max-concurrency), if any
    request_rate: float | None = None  # offered rate (--request-rate); None for "inf"


class _Rows:
    """Column buffers for REQUEST_LATENCIES."""

    def __init__(self, source: str, deployment: str, origin: str) -> None:
        self.source, self.deployment, self.origin = source, deployment, origin
        self.columns: dict[str, list[Any]] = {name: [] for name in REQUEST_ROWS.names()}

    def add(
        self,
        request_id: str,
        start: datetime | None,
        e2e: float | None,
        ttft: float | None = None,
        tpot: float | None = None,
        prompt_tokens: int | None = None,
        output_tokens: int | None = None,
        success: bool = True,
        priority: int | None = None,
    ) -> None:
        if (
            tpot is None
            and e2e is not None
            and ttft is not None
            and output_tokens is not None
            and output_tokens > 1
        ):
            tpot = (e2e - ttft) / (output_tokens - 1)  # vLLM's TPOT: first token excluded
        values = (request_id, start, e2e, ttft, tpot, prompt_tokens, output_tokens, success)
        names = ("request_id", "start", "e2e", "ttft", "tpot", "prompt_tokens", "output_tokens")
        for name, value in zip((*names, "success"), values, strict=True):
            self.columns[name].append(value)
        self.columns["source"].append(self.source)
        self.columns["deployment"].append(self.deployment)
        self.columns["origin"].append(self.origin)
        self.columns["priority"].append(priority)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.columns, schema=REQUEST_ROWS)


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    return None


def _count(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and abs(number) < 2.0**63 else None


def _dated(moment: datetime | None) -> datetime | None:
    """`moment` when its year is in YEAR_RANGE, else None (no window or shift can hold it)."""
    low, high = YEAR_RANGE
    return moment if moment is not None and low <= moment.year <= high else None


def _unix(seconds: float | None) -> datetime | None:
    """Unix seconds as a time; None when there are none or they are outside YEAR_RANGE."""
    if seconds is None:
        return None
    try:
        return _dated(datetime.fromtimestamp(seconds, UTC))
    except (OverflowError, OSError, ValueError):
        return None


def _after(moment: datetime | None, seconds: float | None) -> datetime | None:
    """`moment` moved by `seconds`; None when either is missing or the result is outside
    YEAR_RANGE (a damaged file's duration of 1e30 s)."""
    if moment is None or seconds is None:
        return None
    try:
        return _dated(moment + timedelta(seconds=seconds))
    except OverflowError:
        return None


def _priority(raw: Any, where: tuple[str, int]) -> int | None:
    """vLLM's request priority: an integer (a float that is one is taken), null if empty."""
    if raw is None or raw == "":
        return None
    try:
        value = float(raw) if not isinstance(raw, bool) else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and abs(value) < 2.0**63):
        path, line = where
        if line:
            raise InputError(path, f"`priority` must be an integer, got {raw!r}", line)
        raise InputError(path, f"vllm bench `priorities` must hold integers, got {raw!r}")
    return int(value)
