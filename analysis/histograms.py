"""Latency quantiles from /metrics histograms, per window: bucket increases, then quantiles.

Owns `bucket_quantile` and the per-window stats of every histogram kind, with the bucket floor
said (`bucket_limited`) when the tail lies in the last finite bucket. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl
from preemptscope.analysis.report import LatencyMetric, LatencyStats
from preemptscope.analysis.series import (
    HISTOGRAM_METRICS,
    KIND_OF,
    SERIES_KEYS,
    Window,
    metric_rows,
    window_of,
)

# ---------------------------------------------------------------------------------------------
# Histograms


def bucket_quantile(
    q: float, bounds: Sequence[float], cumulative: Sequence[float]
) -> tuple[float | None, bool]:
    """Prometheus-style quantile from cumulative bucket counts: (value, bucket_limited).

    Linear interpolation inside the bucket holding rank q*total, from 0 for the first bucket.
    In the +Inf bucket the answer is the highest finite bound (a lower bound of the truth);
    in the first bucket it is an interpolation with no data below. Both are flagged.
    """
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} outside [0, 1]")
    if len(bounds) != len(cumulative) or not bounds:
        return None, False
    counts = list(cumulative)
    for i in range(1, len(counts)):
        counts[i] = max(counts[i], counts[i - 1])  # guard against mixed-bound series
    total = counts[-1]
    if total <= 0 or not math.isinf(bounds[-1]):
        return None, False
    rank = q * total
    # The first non-empty bucket reaching the rank (q = 0 must not pick an empty first bucket).
    index = next(i for i, count in enumerate(counts) if count >= rank and count > 0)
    if index == len(bounds) - 1:
        return (bounds[-2], True) if len(bounds) > 1 else (None, True)
    upper = bounds[index]
    if index == 0:
        if upper <= 0:
            return upper, True
        # min(): rounding must never push an interpolated value past its bucket's bound.
        return min(upper, upper * (rank / counts[0])), True
    lower, below = bounds[index - 1], counts[index - 1]
    return min(upper, lower + (upper - lower) * (rank - below) / (counts[index] - below)), False


def histogram_metric(samples: pl.DataFrame, kind: LatencyMetric) -> str | None:
    """The canonical histogram present in `samples` for a latency kind, preferred name first."""
    present = set(samples.filter(pl.col("sample") == "bucket")["metric"].unique().to_list())
    return next((name for name in HISTOGRAM_METRICS[kind] if name in present), None)


def _histogram_pairs(
    samples: pl.DataFrame, metric: str | Sequence[str], model_name: str | None
) -> pl.DataFrame:
    """Per consecutive scrape pair of each series: the increase of every bucket, _sum, _count
    (of one histogram metric, or of several at once: then told apart by `metric`)."""
    frame = metric_rows(samples, metric, ["bucket", "sum", "count"])
    if model_name is not None:
        frame = frame.filter(pl.col("model_name") == model_name)
    line = [*SERIES_KEYS, "metric", "sample", "le"]
    # Both shifts in one context: the groups of `line` are computed once.
    frame = frame.with_columns(
        previous=pl.col("value").shift(1).over(line),
        created_before=pl.col("created").shift(1).over(line),
    )
    frame = frame.with_columns(
        restarted=(pl.col("value") < pl.col("previous")).fill_null(False)
        | (pl.col("created") != pl.col("created_before")).fill_null(False)
    )
    # One restart flag per series and scrape, so every bucket of that scrape agrees (nothing
    # to spread when no bucket restarted).
    reset: pl.Expr = pl.lit(False)
    if frame["restarted"].any():
        reset = pl.col("restarted").any().over([*SERIES_KEYS, "metric", "timestamp"])
    increase = (
        pl.when(pl.col("previous").is_null())
        .then(None)
        .when(reset)
        .then(pl.col("value"))
        .otherwise(pl.col("value") - pl.col("previous"))
    )
    return (
        frame.with_columns(increase=increase)
        .filter(pl.col("increase").is_not_null())
        .select("timestamp", "metric", "sample", "le", "increase")
    )


def _resolve(samples: pl.DataFrame, metric: str) -> tuple[str | None, LatencyMetric]:
    if metric in HISTOGRAM_METRICS:
        kind: LatencyMetric = metric
        return histogram_metric(samples, kind), kind
    if metric not in KIND_OF:
        known = ", ".join(sorted([*HISTOGRAM_METRICS, *KIND_OF]))
        raise ValueError(f"unknown latency histogram {metric!r}; known: {known}")
    return metric, KIND_OF[metric]


def histogram_windows_counts(
    samples: pl.DataFrame,
    metric: str,
    windows: Sequence[Window],
    *,
    model_name: str | None = None,
) -> list[list[tuple[float, float]] | None]:
    """Per window, the observations per bucket as (upper bound, count), not cumulative.

    For distributions that are not latencies, e.g. `request_num_preemptions` (bounds 1, 2, 3,
    4, 5, 10, 20: the first bucket mixes 0 and 1 preemption, so "preempted twice or more" is
    the count above 1). None when the window has no pair of scrapes.
    """
    pairs = window_of(_histogram_pairs(samples, metric, model_name), windows, cumulative=True)
    totals = (
        pairs.filter(pl.col("sample") == "bucket")
        .group_by("window", "le")
        .agg(pl.col("increase").sum())
        .sort("window", "le")
    )
    per_window: dict[int, list[tuple[float, float]]] = {}
    for window, le, increase in totals.iter_rows():
        per_window.setdefault(window, []).append((le, increase))
    result: list[list[tuple[float, float]] | None] = []
    for index in range(len(windows)):
        cumulative = per_window.get(index)
        if cumulative is None:
            result.append(None)
            continue
        counts, below = [], 0.0
        for le, total in cumulative:
            total = max(total, below)  # mixed-bound series can make the sum dip
            counts.append((le, total - below))
            below = total
        result.append(counts)
    return result


def histogram_windows_stats(
    samples: pl.DataFrame,
    metric: str,
    windows: Sequence[Window],
    *,
    model_name: str | None = None,
) -> list[LatencyStats | None]:
    """`histogram_window_stats` for many windows at once (one pass over the samples)."""
    name, kind = _resolve(samples, metric)
    if name is None:
        return [None] * len(windows)
    pairs = window_of(_histogram_pairs(samples, name, model_name), windows, cumulative=True)
    return _stats_from_totals(kind, _totals(pairs), len(windows))


def histograms_windows_stats(
    samples: pl.DataFrame, names: Mapping[LatencyMetric, str], windows: Sequence[Window]
) -> dict[LatencyMetric, list[LatencyStats | None]]:
    """histogram_windows_stats of several histograms (kind -> canonical name) in one pass."""
    if not names:
        return {}
    pairs = window_of(_histogram_pairs(samples, list(names.values()), None), windows,
                          cumulative=True)  # fmt: skip
    totals = _totals(pairs, "metric")
    parts = {key[0]: part for key, part in totals.partition_by("metric", as_dict=True).items()}
    return {
        kind: _stats_from_totals(kind, parts[name], len(windows))
        if name in parts
        else [None] * len(windows)
        for kind, name in names.items()
    }


def _totals(pairs: pl.DataFrame, *by: str) -> pl.DataFrame:
    """Summed increases per (*by, window, sample, le), in window and bound order within each
    (*by, sample): all their readers need (sorting on the strings too cost more than the sum)."""
    return (
        pairs.group_by(*by, "window", "sample", "le")
        .agg(pl.col("increase").sum())
        .sort("window", "le")
    )


def _stats_from_totals(
    kind: LatencyMetric, totals: pl.DataFrame, n_windows: int
) -> list[LatencyStats | None]:
    """Per window, the stats from its summed bucket, _sum and _count increases."""
    # The buckets as a matrix (one row per window), the quantiles for many windows at once.
    per_window = (
        totals.filter(pl.col("sample") == "bucket")
        .group_by("window", maintain_order=True)
        .agg(pl.col("le"), pl.col("increase"))
    )
    sums = dict(totals.filter(pl.col("sample") == "sum").select("window", "increase").iter_rows())
    counts = dict(
        totals.filter(pl.col("sample") == "count").select("window", "increase").iter_rows()
    )
    result: list[LatencyStats | None] = [None] * n_windows
    for bounds_list, group in per_window.group_by("le", maintain_order=True):
        members = group["window"].to_list()
        bounds = list(bounds_list[0])
        if not bounds:
            continue
        matrix = group["increase"].explode().to_numpy().astype(np.float64, copy=False)
        matrix = matrix.reshape(len(members), len(bounds))
        window_sums = [sums.get(w) for w in members]
        found = _stats_many(kind, bounds, matrix, window_sums, [counts.get(w) for w in members])
        for window, stats in zip(members, found, strict=True):
            result[window] = stats
    return result


def _quantiles(
    q: float, bounds: Sequence[float], cumulative: np.ndarray[Any, np.dtype[np.float64]]
) -> tuple[list[float | None], list[bool], list[float | None]]:
    """bucket_quantile for every row of `cumulative` (one window per row), the same floats,
    and the lower bound of the bucket holding each quantile (None in the first bucket: there
    the value is an interpolation from 0 that the buckets cannot resolve)."""
    rows, n = cumulative.shape
    if n == 0 or not math.isinf(bounds[-1]):
        return [None] * rows, [False] * rows, [None] * rows
    counts = np.maximum.accumulate(cumulative, axis=1)
    total = counts[:, -1]
    rank = q * total
    index = np.argmax((counts >= rank[:, None]) & (counts > 0), axis=1)
    at = np.arange(rows)
    upper = np.asarray(bounds, dtype=np.float64)[index]
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.minimum(upper, upper * (rank / counts[:, 0]))
        below = counts[at, np.maximum(index - 1, 0)]
        lower = np.asarray(bounds, dtype=np.float64)[np.maximum(index - 1, 0)]
        inner = np.minimum(
            upper, lower + (upper - lower) * (rank - below) / (counts[at, index] - below)
        )
    # The branches of bucket_quantile, per row: the +Inf bucket, the first one, inside.
    last, first_bucket = index == n - 1, index == 0
    picked = np.where(
        last,
        float(bounds[-2]) if n > 1 else np.nan,
        np.where(first_bucket, np.where(upper <= 0, upper, first), inner),
    )
    missing = ~(total > 0) | (last & (n == 1))
    limited = ((last | first_bucket) & (total > 0)).tolist()
    values = [None if gone else value for value, gone in zip(picked.tolist(), missing.tolist(),
                                                              strict=True)]  # fmt: skip
    floors = [
        None if gone or in_first else value
        for value, gone, in_first in zip(
            lower.tolist(), missing.tolist(), first_bucket.tolist(), strict=True
        )
    ]
    return values, limited, floors


def resolved_tail(p99: float | None, floor: float | None, mean: float | None) -> bool:
    """Whether a histogram p99 is a tail the buckets resolve: it lies above the first bucket
    (there it is an interpolation from 0: vLLM's request-latency buckets start at 0.3 s, so
    a queue of microseconds reads as a p99 of ~0.297 s) and its bucket starts at or above the
    mean (else the p99 could be the mean itself: p99/mean is anything from 1 up)."""
    return p99 is not None and floor is not None and mean is not None and floor >= mean


def _stats_many(
    kind: LatencyMetric,
    bounds: list[float],
    cumulative: np.ndarray[Any, np.dtype[np.float64]],
    sums: Sequence[float | None],
    counts: Sequence[float | None],
) -> list[LatencyStats | None]:
    """Per window with these bucket bounds: the quantiles and the exact mean. A p99 in the
    first bucket is no figure (None); p99/mean only where the tail is resolved
    (`resolved_tail`), so a bucket floor is never exported, quoted or alerted on as a tail."""
    p50, _, _ = _quantiles(0.5, bounds, cumulative)
    p90, _, _ = _quantiles(0.9, bounds, cumulative)
    p99, limited, floors = _quantiles(0.99, bounds, cumulative)
    out: list[LatencyStats | None] = []
    for r, (total_sum, count) in enumerate(zip(sums, counts, strict=True)):
        observations = count if count is not None else (float(cumulative[r, -1]) if bounds else 0.0)
        if observations <= 0:
            out.append(None)
            continue
        mean = total_sum / observations if total_sum is not None else None
        high = p99[r] if floors[r] is not None else None
        ratio = (
            high / mean
            if high is not None and mean is not None and mean > 0
            and resolved_tail(high, floors[r], mean)
            else None
        )  # fmt: skip
        out.append(
            LatencyStats(
                metric=kind,
                source="histogram",
                count=round(observations),
                mean=mean,
                p50=p50[r],
                p90=p90[r],
                p99=high,
                p99_over_mean=ratio,
                bucket_limited=limited[r],
            )
        )
    return out


def histogram_window_stats(
    samples: pl.DataFrame,
    metric: str,
    start: datetime,
    end: datetime,
    *,
    model_name: str | None = None,
) -> LatencyStats | None:
    """p50/p90/p99 (bucket interpolation over the window's bucket increases) and exact mean.

    `metric` is a canonical histogram name ("e2e_request_latency_seconds") or a latency kind
    ("e2e", "ttft", "itl", "tpot", "queue"; the first histogram present is used). Engines and
    models are summed unless `model_name` is given. None when nothing was observed.
    """
    return histogram_windows_stats(samples, metric, [(start, end)], model_name=model_name)[0]
