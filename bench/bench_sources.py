"""Benchmark the /metrics sources: snapshot parsing (cached layout vs prometheus-client alone)
and the window math over a long scrape history.

Builds the history in memory from the V1 0.33 fixture (values grow between scrapes), so
nothing is written to disk. Timings on a shared machine are noisy: read the ratios. Usage:

    python bench/bench_sources.py [--snapshots 200] [--hours 24] [--interval 15]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import polars as pl
import preemptscope.ingest.metrics as metrics_module
from preemptscope.analysis import latency

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "metrics" / "v1_033.prom"
T0 = datetime(2026, 11, 29, tzinfo=UTC)


def _timed(label: str, action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    elapsed = time.perf_counter() - start
    print(f"{label:<48} {elapsed:8.3f} s")
    return elapsed


def parsing(snapshots: int) -> None:
    text = FIXTURE.read_text()
    samples = metrics_module.parse_metrics_text(
        text, timestamp=T0, source="x", deployment="d"
    ).height

    def run() -> None:
        for i in range(snapshots):
            metrics_module.parse_metrics_text(
                text, timestamp=T0 + timedelta(seconds=i), source="x", deployment="d"
            )

    fast = _timed(f"parse {snapshots} snapshots, cached layout", run)
    with mock.patch.object(metrics_module, "_split_lines", return_value=None):
        slow = _timed(f"parse {snapshots} snapshots, prometheus-client only", run)
    total = samples * snapshots
    print(f"  {total / fast:,.0f} vs {total / slow:,.0f} samples/s: {slow / fast:.1f}x")


def window_math(hours: float, interval: float) -> None:
    text = FIXTURE.read_text()
    one = metrics_module.parse_metrics_text(text, timestamp=T0, source="x", deployment="d")
    scrapes = int(hours * 3600 / interval)
    history = pl.concat(
        [
            one.with_columns(
                timestamp=pl.lit(T0 + timedelta(seconds=interval * i)).cast(
                    one.schema["timestamp"]
                ),
                value=pl.col("value") * (1 + 0.01 * i),
            )
            for i in range(scrapes)
        ]
    )
    print(f"history: {scrapes} scrapes, {history.height:,} rows")
    windows = [
        (T0 + timedelta(minutes=k), T0 + timedelta(minutes=k + 1)) for k in range(int(hours * 60))
    ]
    _timed(
        f"counter_increases, {len(windows)} windows",
        lambda: latency.counter_increases(history, "num_preemptions", windows),
    )
    _timed(
        f"gauge_windows, {len(windows)} windows",
        lambda: latency.gauge_windows(history, "kv_cache_usage_perc", windows),
    )
    _timed(
        f"histogram_windows_stats e2e, {len(windows)} windows",
        lambda: latency.histogram_windows_stats(history, "e2e", windows),
    )
    _timed(
        "histogram_window_stats e2e, one window",
        lambda: latency.histogram_window_stats(history, "e2e", *windows[5]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snapshots", type=int, default=200)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--interval", type=float, default=15.0)
    args = parser.parse_args()
    parsing(args.snapshots)
    window_math(args.hours, args.interval)


if __name__ == "__main__":
    main()
