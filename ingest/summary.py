"""The per-input summary behind `preemptscope parse --json`, built incrementally chunk by chunk.

The JSON object is a public contract (docs/frames.md, "parse --json"): keys are only ever added.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl
from preemptscope.ingest.schema import FRAME_SCHEMAS, LogFrames
from preemptscope.ingest.versions import v0_warns_preemption

LAST_STATS_KEYS = (
    "timestamp",
    "line",
    "era",
    "engine",
    "running",
    "waiting",
    "swapped",
    "deferred",
    "preemptions",
    "kv_device",
    "gpu_kv_cache_usage",
    "cpu_kv_cache_usage",
    "prefix_cache_hit_rate",
    "prompt_throughput",
    "generation_throughput",
)

TIMESPAN_KINDS = ("scheduler_stats", "preemption_warning", "kv_capacity", "config")


@dataclass
class PreemptionCounter:
    """Reconstructs the V0 preemption total from `total_num_cumulative_preemption` values.

    V0 prints the counter on the 1st, 51st, 101st ... preemption of a scheduler; it restarts
    from 1 when the process restarts. The total is the maximum of each run of the counter,
    summed over runs (a drop in the value starts a new run). It is a lower bound: up to 49
    preemptions after the last printed value are invisible. Warning lines cut before the
    counter still count as at least one preemption each.
    """

    completed_runs: int = 0
    run_max: int = 0
    last: int | None = None
    warning_lines: int = 0

    def update(self, cumulative: Iterable[int | None], lines: int) -> None:
        self.warning_lines += lines
        for value in cumulative:
            if value is None:
                continue
            if self.last is not None and value < self.last:
                self.completed_runs += self.run_max
                self.run_max = 0
            self.run_max = max(self.run_max, value)
            self.last = value

    @property
    def total(self) -> int:
        return max(self.completed_runs + self.run_max, self.warning_lines)


def reconstruct_preemptions(cumulative: Iterable[int | None]) -> int:
    """Total preemptions implied by a sequence of printed cumulative counters (see above)."""
    values = list(cumulative)
    counter = PreemptionCounter()
    counter.update(values, 0)
    return counter.completed_runs + counter.run_max


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, float):
        return round(value, 6)
    return value


@dataclass
class LogSummary:
    """Accumulates the `parse --json` object for one input from its LogFrames chunks."""

    path: str
    deployment: str
    lines: int = 0
    parsed_lines: int = 0
    unrecognized_lines: int = 0
    blank_lines: int = 0
    records: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FRAME_SCHEMAS, 0))
    vllm_version: str | None = None
    log_era: str | None = None
    timezone: str = "UTC"
    year_source: str | None = None
    preemptions: PreemptionCounter = field(default_factory=PreemptionCounter)
    last_stats: dict[str, Any] | None = None
    first_timestamp: datetime | None = None
    last_timestamp: datetime | None = None
    stats_with_preemption_count: int = 0
    stats_preemption_sum: int = 0

    def add(self, frames: LogFrames) -> None:
        acc = frames.accounting
        self.lines += acc.lines
        self.parsed_lines += acc.parsed_lines
        self.unrecognized_lines += acc.unrecognized_lines
        self.blank_lines += acc.blank_lines
        for kind, count in frames.record_counts().items():
            self.records[kind] = self.records.get(kind, 0) + count
        self.vllm_version = self.vllm_version or frames.vllm_version
        if frames.log_era is not None:
            if self.log_era not in (None, frames.log_era):
                self.log_era = "mixed"
            else:
                self.log_era = frames.log_era
        self.timezone = frames.timezone
        self.year_source = self.year_source or frames.year_source
        warnings = frames["preemption_warning"]
        if warnings.height:
            self.preemptions.update(warnings["cumulative"].to_list(), warnings["line"].n_unique())
        stats = frames["scheduler_stats"]
        if stats.height:
            counted = stats["preemptions"].drop_nulls()
            self.stats_with_preemption_count += counted.len()
            self.stats_preemption_sum += int(counted.sum() or 0)
            complete = stats.filter(
                pl.col("running").is_not_null()
                & pl.col("waiting").is_not_null()
                & pl.col("gpu_kv_cache_usage").is_not_null()
            )
            if complete.height:
                row = complete.row(complete.height - 1, named=True)
                self.last_stats = {key: _jsonable(row[key]) for key in LAST_STATS_KEYS}
        # Only kinds every mode extracts, so `--json` alone and `--json --out` agree.
        for kind in TIMESPAN_KINDS:
            frame = frames[kind]
            if frame.height == 0:
                continue
            ts = frame["timestamp"].drop_nulls()
            if ts.len():
                low, high = ts.min(), ts.max()
                assert isinstance(low, datetime) and isinstance(high, datetime)
                if self.first_timestamp is None or low < self.first_timestamp:
                    self.first_timestamp = low
                if self.last_timestamp is None or high > self.last_timestamp:
                    self.last_timestamp = high

    def to_json(self) -> dict[str, Any]:
        """The documented `parse --json` object."""
        warning_lines = self.preemptions.warning_lines
        if warning_lines:
            total: int | None = self.preemptions.total
            basis = "v0_warning_counter"
        elif self.stats_with_preemption_count:
            # V1 `Preemptions: N` is per stats interval: the total is their sum.
            total = self.stats_preemption_sum
            basis = "v1_stats_field"
        else:
            # V0 warns from v0.4.3 only: a 0 needs a version that would have warned.
            warns = self.log_era not in ("v1", None) and v0_warns_preemption(self.vllm_version)
            total = 0 if warns else None
            basis = "none" if total is None else "v0_no_warnings"
        return {
            "path": self.path,
            "deployment": self.deployment,
            "lines": self.lines,
            "parsed_lines": self.parsed_lines,
            "unrecognized_lines": self.unrecognized_lines,
            "blank_lines": self.blank_lines,
            "vllm_version": self.vllm_version,
            "log_era": self.log_era,
            "timezone": self.timezone,
            "year_source": self.year_source,
            "first_timestamp": _jsonable(self.first_timestamp),
            "last_timestamp": _jsonable(self.last_timestamp),
            "records": dict(self.records),
            "preemptions": {
                "warning_lines": warning_lines,
                "reconstructed_total": total,
                "basis": basis,
            },
            "last_scheduler_stats": self.last_stats,
        }
