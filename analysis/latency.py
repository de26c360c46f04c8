"""Latency and counter math over METRIC_SAMPLES and REQUEST_LATENCIES frames. Pure: no I/O.

Window conventions (documented in docs/sources.md):

* Counters and histograms are cumulative, so what happened between two scrapes is known only
  at the later one. The increase of a pair of consecutive scrapes (t0, t1] belongs to the window
  with start < t1 <= end. Windows that tile time therefore split every increase exactly once.
* A counter that goes down restarted: the increase of that pair is the new value (counted from
  zero), never negative. A changed `_created` sample also marks a restart, even when the new
  value has already passed the old one. For histograms a restart is decided per series and
  scrape (any bucket, `_count` or `_sum` going down), so the buckets stay consistent.
* Gauges are read at scrapes with start <= t < end; per scrape, series are combined first
  (summed for counts, max for `_perc` fractions: the fullest engine is what preempts).
* Per-request samples belong to the window in which the request started.

Series are told apart by (source, deployment, model_name, engine, labels).

This module owns the per-request sample statistics; counters and gauges are
`analysis/series.py`'s, histogram quantiles `analysis/histograms.py`'s; all are re-exported
here, the one import the rest of the product uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import polars as pl
from preemptscope.analysis.histograms import (
    bucket_quantile,
    histogram_metric,
    histogram_window_stats,
    histogram_windows_counts,
    histogram_windows_stats,
    histograms_windows_stats,
    resolved_tail,
)
from preemptscope.analysis.report import LatencyMetric, LatencyStats
from preemptscope.analysis.series import (
    HISTOGRAM_METRICS,
    SERIES_KEYS,
    Window,
    check_windows,
    counter_increase,
    counter_increases,
    gauge_window,
    gauge_windows,
    info_labels,
    moments_series,
    usable_samples,
    window_of,
)
from preemptscope.analysis.series import _restarted as _restarted  # events.py reads it here

__all__ = [
    "HISTOGRAM_METRICS",
    "SERIES_KEYS",
    "Window",
    "bucket_quantile",
    "counter_increase",
    "counter_increases",
    "gauge_window",
    "gauge_windows",
    "histogram_metric",
    "histogram_window_stats",
    "histogram_windows_counts",
    "histogram_windows_stats",
    "histograms_windows_stats",
    "info_labels",
    "resolved_tail",
    "samples_window_stats",
    "samples_windows_stats",
    "usable_samples",
]


# ---------------------------------------------------------------------------------------------
# Per-request samples


def _sample_stats(kind: LatencyMetric, values: pl.Series) -> LatencyStats | None:
    values = values.drop_nulls().drop_nans()
    if values.is_empty():
        return None
    mean = float(values.mean())  # type: ignore[arg-type]

    def quantile(q: float) -> float:
        return float(values.quantile(q, interpolation="linear"))  # type: ignore[arg-type]

    p99 = quantile(0.99)
    return LatencyStats(
        metric=kind,
        source="samples",
        count=values.len(),
        mean=mean,
        p50=quantile(0.5),
        p90=quantile(0.9),
        p99=p99,
        p99_over_mean=p99 / mean if mean > 0 else None,
        bucket_limited=False,
    )


def samples_windows_stats(
    latencies: pl.DataFrame,
    metric: Literal["e2e", "ttft", "tpot"],
    windows: Sequence[Window],
) -> list[LatencyStats | None]:
    """`samples_window_stats` for many windows at once."""
    start = latencies["start"]
    if windows and start.null_count() == 0 and start.is_sorted():
        return _sorted_windows_stats(latencies, metric, windows)
    return _placed_windows_stats(latencies, metric, windows)


def _placed_windows_stats(
    latencies: pl.DataFrame, metric: LatencyMetric, windows: Sequence[Window]
) -> list[LatencyStats | None]:
    """Rows in any order: each placed in its window, then grouped."""
    # The three columns first: a filter writes out every column it keeps (log latencies have
    # several constant ones, free until then).
    frame = latencies.select("start", metric, "success").filter(
        pl.col("success").fill_null(True) & pl.col("start").is_not_null()
    )
    frame = frame.select(pl.col("start").alias("timestamp"), pl.col(metric))
    placed = window_of(frame, windows, cumulative=False)
    groups = placed.partition_by("window", as_dict=True)
    return [
        _sample_stats(metric, groups[(i,)][metric]) if (i,) in groups else None
        for i in range(len(windows))
    ]


def _sorted_windows_stats(
    latencies: pl.DataFrame, metric: LatencyMetric, windows: Sequence[Window]
) -> list[LatencyStats | None]:
    """Rows sorted by start (log latencies are): each window's rows are one slice, found by
    two searches, so nothing the size of the input is copied (on millions of requests the
    filtered and partitioned copies were the report's peak memory)."""
    check_windows(windows)
    start = latencies["start"]
    lows = start.search_sorted(moments_series([w[0] for w in windows], start.dtype), side="left")
    highs = start.search_sorted(moments_series([w[1] for w in windows], start.dtype), side="left")
    values = latencies[metric]
    ok = latencies["success"].fill_null(True)
    failures = not ok.all()  # else no window needs a filter (tens of thousands in a week)
    result: list[LatencyStats | None] = []
    for low, high in zip(lows.to_list(), highs.to_list(), strict=True):
        if high <= low:
            result.append(None)
            continue
        part = values.slice(low, high - low)
        if failures:
            part = part.filter(ok.slice(low, high - low))
        result.append(_sample_stats(metric, part))
    return result


def samples_window_stats(
    latencies: pl.DataFrame,
    metric: Literal["e2e", "ttft", "tpot"],
    start: datetime,
    end: datetime,
) -> LatencyStats | None:
    """Exact p50/p90/p99 (linear interpolation between order statistics) and mean of the
    successful requests that started in [start, end); None when there are none."""
    return samples_windows_stats(latencies, metric, [(start, end)])[0]
