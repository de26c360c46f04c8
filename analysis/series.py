"""/metrics series per window: reset-safe counter increases, gauges, info labels.

Owns the window conventions of latency.py for counters and gauges (a scrape pair's increase
belongs to the window holding its later scrape; a counter that goes down restarted) and the
histogram names per latency kind. Pure: no I/O; it estimates no quantile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

import polars as pl
from preemptscope.analysis.report import LatencyMetric
from preemptscope.ingest.schema import has_number

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
KIND_OF: dict[str, LatencyMetric] = {
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


def check_windows(windows: Sequence[Window]) -> None:
    for (start, end), following in zip(windows, [*windows[1:], None], strict=True):
        if start.tzinfo is None or end.tzinfo is None:
            raise ValueError("window bounds must be timezone-aware")
        if end <= start:
            raise ValueError(f"window end {end} is not after its start {start}")
        if following is not None and following[0] < end:
            raise ValueError("windows must be sorted and must not overlap")


def window_of(frame: pl.DataFrame, windows: Sequence[Window], *, cumulative: bool) -> pl.DataFrame:
    """Add `window` (index into windows) to rows whose timestamp falls in one; drop the rest.

    cumulative=True: start < t <= end (pair increases); False: start <= t < end (gauges, requests).
    """
    check_windows(windows)
    if frame.is_empty() or not windows:
        return frame.with_columns(window=pl.lit(None, pl.Int64)).clear()
    dtype = frame.schema["timestamp"]
    starts = moments_series([w[0] for w in windows], dtype)
    ends = moments_series([w[1] for w in windows], dtype)
    side: Literal["left", "right"] = "left" if cumulative else "right"
    position = starts.search_sorted(frame["timestamp"], side=side).cast(pl.Int64) - 1
    frame = frame.with_columns(window=position)
    frame = frame.filter(pl.col("window") >= 0)
    window_end = ends.gather(frame["window"])
    inside = frame["timestamp"] <= window_end if cumulative else frame["timestamp"] < window_end
    return frame.filter(inside)


def moments_series(moments: Sequence[datetime], dtype: pl.DataType) -> pl.Series:
    """Aware datetimes as a Series of `dtype`, through integer microseconds (the same instants
    as pl.Series(moments), many times faster than converting each datetime object)."""
    micros = [(moment - _EPOCH) // _MICROSECOND for moment in moments]
    return pl.Series(micros, dtype=pl.Int64).cast(pl.Datetime("us", "UTC")).cast(dtype)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


# ---------------------------------------------------------------------------------------------
# Counters


def metric_rows(
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
    series = metric_rows(samples, metric, ["value"])
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
    pairs = window_of(_counter_pairs(samples, metric), windows, cumulative=True)
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
    points = window_of(_gauge_points(samples, metric, across, labels), windows, cumulative=False)
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
