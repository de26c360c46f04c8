"""The window table's contract: its columns, the /metrics names it reads, the window grid.

Windows are numbered on the Unix epoch (`window_index`), so live and batch runs agree on their
edges. This module owns names, dtypes and the small types (`MetricWindows`, `V0Counter`);
it computes no window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

import polars as pl
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import LatencyStats
from preemptscope.ingest.schema import TIMESTAMP

# A grid longer than this is not filled with empty windows (a year-less log can span years).
MAX_GRID_WINDOWS = 200_000

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Canonical /metrics names (ingest/metrics.py folds the renames into these).
M_PREEMPTIONS = "num_preemptions"
M_KV = "kv_cache_usage_perc"
M_RUNNING = "num_requests_running"
M_WAITING = "num_requests_waiting"
M_WAITING_BY_REASON = "num_requests_waiting_by_reason"
M_PROMPT_TOKENS = "prompt_tokens"
M_GENERATION_TOKENS = "generation_tokens"

# Columns of the window table, in order (one row per window).
WINDOW_COLUMNS: dict[str, pl.DataType] = {
    "win": pl.Int64(),
    "start": TIMESTAMP,
    "end": TIMESTAMP,
    "samples": pl.Int64(),
    "preemptions": pl.Int64(),
    "preemption_quality": pl.String(),
    "preemption_source": pl.String(),
    "likely_preempting": pl.Boolean(),
    "forced_preemptions": pl.Boolean(),
    "kv_usage_max": pl.Float64(),
    "kv_usage_mean": pl.Float64(),
    "running_mean": pl.Float64(),
    "running_max": pl.Int64(),
    "waiting_mean": pl.Float64(),
    "waiting_max": pl.Int64(),
    "waiting_for_capacity_max": pl.Int64(),
    "prompt_throughput": pl.Float64(),
    "generation_throughput": pl.Float64(),
    "idle": pl.Boolean(),
    "over_capacity": pl.Boolean(),
    "queue_bound": pl.Boolean(),
    "evidence_first": TIMESTAMP,
    "evidence_last": TIMESTAMP,
    "tokens_per_step": pl.Float64(),
    "tokens_per_step_source": pl.String(),
    "limits": pl.List(pl.String()),
}

# The three limits of vLLM's scheduler, as verdict.limit names them.
LIMIT_KV: Final = "kv_cache"
LIMIT_SEQS: Final = "max_num_seqs"
LIMIT_BUDGET: Final = "max_num_batched_tokens"
M_ITERATION_TOKENS = "iteration_tokens"


@dataclass(frozen=True)
class V0Counter:
    """What the V0 every-50th warnings say, beyond the per-window lower bounds."""

    placed: int  # preemptions attributed to windows (a lower bound)
    unplaced: int  # counted by warnings without a timestamp
    since_start: int | None  # largest cumulative counter (summed over restarts)
    warning_lines: int


@dataclass(frozen=True)
class MetricWindows:
    """/metrics facts per window computed before the analysis (by a Prometheus, fleet.py).

    `table` has the columns metric_windows() returns (METRIC_WINDOW_COLUMNS), one row per
    window with data; `latency` the histogram estimates per window number. `window_us` is the
    window they were reduced with: the analysis must use the same one.
    """

    window_us: int
    table: pl.DataFrame
    latency: dict[int, dict[str, LatencyStats]]

    def starts(self) -> pl.DataFrame:
        """The windows' start times (column `timestamp`), for the analysis' window grid."""
        micros = self.table["win"] * self.window_us
        return pl.DataFrame({"timestamp": micros.cast(TIMESTAMP)})


def window_index(column: str, params: AnalysisParams) -> pl.Expr:
    """Integer window number of a timestamp column: floor(epoch_us / window_us)."""
    return (pl.col(column).dt.epoch("us") // params.window_us).alias("win")


def window_start(win: int, params: AnalysisParams) -> datetime:
    """When window `win` starts; the calendar's last moment for a window past it (the end of
    a window that holds a time in 9999-12-31)."""
    try:
        return EPOCH + timedelta(microseconds=win * params.window_us)
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


Gauge = list[tuple[float | None, float | None]]  # (max, mean) per window


def finite(value: float | None) -> float | None:
    """A sample's value, or None when it is NaN or infinite (no number to analyse)."""
    return value if value is not None and math.isfinite(value) else None


def whole(value: float | None) -> int | None:
    """A count read from a float sample (or a sum of them), rounded; None stays None, and so
    does what no count can be (NaN, infinite, past 64 bits)."""
    if value is None or not math.isfinite(value) or abs(value) >= 2.0**63:
        return None
    return round(value)


STATS_COLUMNS: dict[str, pl.DataType] = {
    "win": pl.Int64(),
    "s_kv_max": pl.Float64(),
    "s_kv_mean": pl.Float64(),
    "s_running_mean": pl.Float64(),
    "s_running_max": pl.Int64(),
    "s_waiting_mean": pl.Float64(),
    "s_waiting_max": pl.Int64(),
    "s_prompt_tp": pl.Float64(),
    "s_gen_tp": pl.Float64(),
    "s_preemptions": pl.Int64(),
    "s_inferred": pl.Boolean(),
    "s_is_v0": pl.Boolean(),
    "s_records": pl.Int64(),
    "s_ev_first": TIMESTAMP,
    "s_ev_last": TIMESTAMP,
    "s_wait_share": pl.Float64(),
    "s_wait_records": pl.Int64(),
    "s_pinned_share": pl.Float64(),
    "s_pinned_records": pl.Int64(),
    "s_batch_full": pl.Boolean(),
}
METRIC_WINDOW_COLUMNS: dict[str, pl.DataType] = {
    "win": pl.Int64(),
    "m_kv_max": pl.Float64(),
    "m_kv_mean": pl.Float64(),
    "m_running_mean": pl.Float64(),
    "m_running_max": pl.Int64(),
    "m_waiting_mean": pl.Float64(),
    "m_waiting_max": pl.Int64(),
    "m_wfc_max": pl.Int64(),
    "m_scrapes": pl.Int64(),
    "m_preemptions": pl.Int64(),
    "m_prompt_tp": pl.Float64(),
    "m_gen_tp": pl.Float64(),
    "m_ev_first": TIMESTAMP,
    "m_ev_last": TIMESTAMP,
}
