"""Thresholds of the analysis, in one place (documented in docs/report.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class AnalysisParams:
    """Every number the verdict depends on. Defaults follow vLLM's own dashboards."""

    window_s: float = 60.0
    # "now" for recency rules; None means the last timestamp in the data (the analysis never
    # reads a clock, so the same inputs always give the same report).
    now: datetime | None = None
    # vLLM's dashboards colour KV usage orange at 0.9 and red at 0.98.
    kv_saturated: float = 0.98
    kv_high: float = 0.90
    # A preemption burst is a cache reset (not capacity) when KV stays below this and the burst
    # preempts at least reset_fraction of the running requests at once.
    reset_kv_below: float = 0.5
    reset_fraction: float = 0.8
    # An over-capacity episode must last this long (isolated windows are "at risk", not "over").
    min_episode_s: float = 120.0
    # Non-over-capacity windows tolerated inside one episode (a 10-s stats line can miss a beat);
    # only windows with data of their own are bridged, never empty ones.
    episode_gap_windows: int = 1
    # An episode that ended more than this before `now` is history: "at risk", not "over capacity".
    stale_after_s: float = 3600.0
    # Fewer stats records / scrapes than this (and no counted preemption): insufficient data.
    min_samples: int = 3
    # Share of active windows with KV >= kv_high that makes a deployment "at risk".
    at_risk_kv_fraction: float = 0.25
    # A window is queue-bound when mean waiting >= this fraction of mean running (and >= 1).
    queue_fraction: float = 0.25
    # The batch is full when running reaches this fraction of max_num_seqs (per engine).
    batch_full_fraction: float = 0.9
    # Without a full batch, a queue is a backlog (a limit) only when it is at least as long as
    # the batch and present on this share of the window's stats records.
    queue_persistence: float = 0.8
    # ... or, behind a batch at max_num_seqs, on this share of them: bursts that fill the batch
    # and drain between records still hold requests back at the cap.
    pinned_persistence: float = 0.4
    # A queue-bound run is over capacity when its waiting grows by this factor from first to
    # last window (demand above the service rate); a steady queue is only "at risk".
    queue_growth: float = 2.0
    # The token budget binds when a window's steps schedule at least this fraction of
    # max_num_batched_tokens on average (iteration_tokens histogram, else the stats lines).
    budget_full_fraction: float = 0.9
    # max_num_seqs not printed: inferred from a plateau, the running count's peak held on at
    # least plateau_share of the stats records (or scrapes) with a queue, and on at least
    # plateau_records of them.
    plateau_share: float = 0.5
    plateau_records: int = 3
    # A limit binds for the deployment when it holds requests back in at least this share of
    # the flagged windows (over capacity or saturated).
    limit_share: float = 0.25
    # A rank correlation counts as evidence only from this many window pairs on, positive,
    # with a two-sided p-value below correlation_alpha (Bonferroni-adjusted over lags).
    min_correlation_windows: int = 10
    correlation_alpha: float = 0.05
    # Largest lag (in windows) tried when looking for the lag of strongest correlation.
    max_lag_windows: int = 5
    # Preferred latency metric for the correlation, first available wins. Inter-token latency
    # first: a preempted request's next token waits for the whole recompute, so preemption lands
    # straight in the ITL tail, while e2e p99/mean is dominated by the spread of output lengths
    # (measured on the demo: ITL p99/mean 12.3 with preemption vs 5.2 without; e2e 1.91 vs 1.91).
    latency_preference: tuple[str, ...] = ("itl", "e2e", "tpot", "ttft")

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise ValueError(f"window_s must be > 0, got {self.window_s}")
        if not 0 < self.kv_high <= self.kv_saturated <= 1:
            raise ValueError("thresholds must satisfy 0 < kv_high <= kv_saturated <= 1")

    @property
    def window_us(self) -> int:
        return max(1, round(self.window_s * 1_000_000))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out
