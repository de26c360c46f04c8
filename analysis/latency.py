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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np
import polars as pl
from preemptscope.analysis.report import LatencyMetric, LatencyStats
from preemptscope.ingest.schema import has_number

__all__ = [
    "HISTOGRAM_METRICS",
    "SERIES_KEYS",
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
]

SERIES_KEYS = ["source", "deployment", "model_name", "engine", "labels"]

# Canonical histogram names per latency kind, preferred first. V0's
# time_per_output_token_seconds was observed per decode step, i.e. inter-token latency; V1
# renamed it inter_token_latency_seconds (0.11 kept both, with the same observations).
HISTOGRAM_METRICS: dict[LatencyMetric, tuple[str, ...]] = {
    "e2e": ("e2e_request_latency_seconds",),
    "ttft": ("time_to_first_token_seconds",),
    "itl": ("inter_token_latency_seconds", "time_per_output_token_seconds"),
    "tpot": ("request_time_per_output_token_seconds",),
    "queue": ("request_queue_time_seconds",),
}
_KIND_OF: dict[str, LatencyMetric] = {
    name: kind for kind, names in HISTOGRAM_METRICS.items() for name in names
}

Window = tuple[datetime, datetime]


# ---------------------------------------------------------------------------------------------
# Windows


def usable_samples(metrics: pl.DataFrame | None) -> pl.DataFrame | None:
    """The /metrics samples with a number to analyse (None when there are none): NaN,
    infinite and past-64-bit values are no reading (the source's notes say how many:
    ingest/metrics.snapshot_notes). The analysis and the replay read only these."""
    if metrics is None:
        return None
    kept = metrics.filter(has_number())
    return kept if kept.height else None


def _check_windows(windows: Sequence[Window]) -> None:
    for (start, end), following in zip(windows, [*windows[1:], None], strict=True):
        if start.tzinfo is None or end.tzinfo is None:
            raise ValueError("window bounds must be timezone-aware")
        if end <= start:
            raise ValueError(f"window end {end} is not after its start {start}")
        if following is not None and following[0] < end:
            raise ValueError("windows must be sorted and must not overlap")


def _window_index(
    frame: pl.DataFrame, windows: Sequence[Window], *, cumulative: bool
) -> pl.DataFrame:
    """Add `window` (index into windows) to rows whose timestamp falls in one; drop the rest.

    cumulative=True: start < t <= end (pair increases); False: start <= t < end (gauges, requests).
    """
    _check_windows(windows)
    if frame.is_empty() or not windows:
        return frame.with_columns(window=pl.lit(None, pl.Int64)).clear()
    dtype = frame.schema["timestamp"]
    starts = _moments([w[0] for w in windows], dtype)
    ends = _moments([w[1] for w in windows], dtype)
    side: Literal["left", "right"] = "left" if cumulative else "right"
    position = starts.search_sorted(frame["timestamp"], side=side).cast(pl.Int64) - 1
    frame = frame.with_columns(window=position)
    frame = frame.filter(pl.col("window") >= 0)
    window_end = ends.gather(frame["window"])
    inside = frame["timestamp"] <= window_end if cumulative else frame["timestamp"] < window_end
    return frame.filter(inside)


def _moments(moments: Sequence[datetime], dtype: pl.DataType) -> pl.Series:
    """Aware datetimes as a Series of `dtype`, through integer microseconds (the same instants
    as pl.Series(moments), many times faster than converting each datetime object)."""
    micros = [(moment - _EPOCH) // _MICROSECOND for moment in moments]
    return pl.Series(micros, dtype=pl.Int64).cast(pl.Datetime("us", "UTC")).cast(dtype)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


# ---------------------------------------------------------------------------------------------
# Counters


def _metric_rows(
    samples: pl.DataFrame, metric: str | Sequence[str], kinds: list[str]
) -> pl.DataFrame:
    """Rows of one metric's (or several's) `kinds` samples with the series' `created` value, in
    time order. Sorting by time alone is enough: `.over(series)` keeps the frame's order within
    a series.
    """
    names = [metric] if isinstance(metric, str) else list(metric)
    rows = samples.filter(
        pl.col("metric").is_in(names) & pl.col("sample").is_in([*kinds, "created"])
    ).select([*SERIES_KEYS, "metric", "timestamp", "sample", "le", "value"])
    if not (rows["sample"] == "created").any():  # no `_created` series: nothing to join
        return rows.with_columns(created=pl.lit(None, pl.Float64)).sort("timestamp")
    # A window over (series, scrape) is much cheaper than a join on these string keys.
    own_created = pl.when(pl.col("sample") == "created").then(pl.col("value"))
    rows = rows.with_columns(created=own_created.max().over([*SERIES_KEYS, "metric", "timestamp"]))
    rows = rows.filter(pl.col("sample") != "created")
    return rows.sort("timestamp")


def _restarted(keys: list[str]) -> pl.Expr:
    """The created timestamp changed since the previous scrape of the same series."""
    previous = pl.col("created").shift(1).over(keys)
    return (pl.col("created") != previous).fill_null(False)


def _counter_pairs(samples: pl.DataFrame, metric: str) -> pl.DataFrame:
    """One row per consecutive pair of scrapes of each series: timestamp (later) and increase."""
    series = _metric_rows(samples, metric, ["value"])
    previous = pl.col("value").shift(1).over(SERIES_KEYS)
    reset = (pl.col("value") < previous) | _restarted(SERIES_KEYS)
    increase = (
        pl.when(previous.is_null())
        .then(None)
        .when(reset)
        .then(pl.col("value"))
        .otherwise(pl.col("value") - previous)
    )
    return (
        series.with_columns(increase=increase, reset=reset)
        .filter(pl.col("increase").is_not_null())
        .select("timestamp", "increase", "reset")
    )


def counter_increases(
    samples: pl.DataFrame, metric: str, windows: Sequence[Window]
) -> list[float | None]:
    """`counter_increase` for many windows at once (one pass over the samples)."""
    pairs = _window_index(_counter_pairs(samples, metric), windows, cumulative=True)
    sums = dict(pairs.group_by("window").agg(pl.col("increase").sum()).iter_rows())
    return [float(sums[i]) if i in sums else None for i in range(len(windows))]


def counter_increase(
    samples: pl.DataFrame, metric: str, start: datetime, end: datetime
) -> float | None:
    """Increase of a counter (canonical name, e.g. "num_preemptions") during (start, end].

    Summed over series; restarts count the new value, never a negative step. None when no
    pair of consecutive scrapes ends inside the window (nothing is known about it).
    """
    return counter_increases(samples, metric, [(start, end)])[0]


# ---------------------------------------------------------------------------------------------
# Gauges


def _gauge_points(
    samples: pl.DataFrame,
    metric: str,
    across: Literal["sum", "max", "mean"] | None,
    labels: Mapping[str, str] | None,
) -> pl.DataFrame:
    frame = samples.filter((pl.col("metric") == metric) & (pl.col("sample") == "value"))
    for key, value in (labels or {}).items():
        frame = frame.filter(pl.col("labels").str.json_path_match(f"$.{key}") == value)
    how = across or ("max" if metric.endswith("_perc") else "sum")
    aggregate = {"sum": pl.col("value").sum(), "max": pl.col("value").max()}.get(
        how, pl.col("value").mean()
    )
    return frame.group_by("timestamp").agg(aggregate.alias("value")).sort("timestamp")


def gauge_windows(
    samples: pl.DataFrame,
    metric: str,
    windows: Sequence[Window],
    *,
    across: Literal["sum", "max", "mean"] | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[tuple[float | None, float | None]]:
    """`gauge_window` for many windows at once."""
    points = _window_index(
        _gauge_points(samples, metric, across, labels), windows, cumulative=False
    )
    stats = {
        row[0]: (row[1], row[2])
        for row in points.group_by("window")
        .agg(pl.col("value").max(), pl.col("value").mean().alias("mean"))
        .iter_rows()
    }
    return [stats.get(i, (None, None)) for i in range(len(windows))]


def gauge_window(
    samples: pl.DataFrame,
    metric: str,
    start: datetime,
    end: datetime,
    *,
    across: Literal["sum", "max", "mean"] | None = None,
    labels: Mapping[str, str] | None = None,
) -> tuple[float | None, float | None]:
    """(max, mean) of a gauge over the scrapes with start <= t < end; (None, None) when none.

    Series are combined per scrape first: `across` defaults to "max" for `*_perc` metrics and
    "sum" otherwise. `labels` filters on extra labels, e.g. {"reason": "capacity"}.
    """
    return gauge_windows(samples, metric, [(start, end)], across=across, labels=labels)[0]


def info_labels(samples: pl.DataFrame, metric: str = "cache_config_info") -> list[dict[str, str]]:
    """Labels of an info metric at its latest scrape, one dict per series (engine kept)."""
    frame = samples.filter((pl.col("metric") == metric) & (pl.col("sample") == "value"))
    if frame.is_empty():
        return []
    latest = frame.filter(pl.col("timestamp") == pl.col("timestamp").max())
    result: list[dict[str, str]] = []
    for row in latest.sort("engine", nulls_last=True).iter_rows(named=True):
        found = {
            str(k): str(v) for k, v in pl.Series([row["labels"]]).str.json_decode().item().items()
        }
        if row["engine"] is not None:
            found["engine"] = row["engine"]
        if row["model_name"] is not None:
            found["model_name"] = row["model_name"]
        result.append(found)
    return result


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
    frame = _metric_rows(samples, metric, ["bucket", "sum", "count"])
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
    if metric not in _KIND_OF:
        known = ", ".join(sorted([*HISTOGRAM_METRICS, *_KIND_OF]))
        raise ValueError(f"unknown latency histogram {metric!r}; known: {known}")
    return metric, _KIND_OF[metric]


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
    pairs = _window_index(_histogram_pairs(samples, metric, model_name), windows, cumulative=True)
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
    pairs = _window_index(_histogram_pairs(samples, name, model_name), windows, cumulative=True)
    return _stats_from_totals(kind, _totals(pairs), len(windows))


def histograms_windows_stats(
    samples: pl.DataFrame, names: Mapping[LatencyMetric, str], windows: Sequence[Window]
) -> dict[LatencyMetric, list[LatencyStats | None]]:
    """histogram_windows_stats of several histograms (kind -> canonical name) in one pass."""
    if not names:
        return {}
    pairs = _window_index(_histogram_pairs(samples, list(names.values()), None), windows,
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
    placed = _window_index(frame, windows, cumulative=False)
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
    _check_windows(windows)
    start = latencies["start"]
    lows = start.search_sorted(_moments([w[0] for w in windows], start.dtype), side="left")
    highs = start.search_sorted(_moments([w[1] for w in windows], start.dtype), side="left")
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
