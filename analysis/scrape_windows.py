"""Per-window facts from /metrics samples: gauges, counter increases, evidence times.

The same columns a Prometheus computes for `analysis/fleet_reduce.py` (METRIC_WINDOW_COLUMNS),
so both paths feed one window table. It never reads a log record.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import polars as pl
from preemptscope.analysis import latency
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.window_schema import (
    M_GENERATION_TOKENS,
    M_KV,
    M_PREEMPTIONS,
    M_PROMPT_TOKENS,
    M_RUNNING,
    M_WAITING,
    M_WAITING_BY_REASON,
    METRIC_WINDOW_COLUMNS,
    Gauge,
    finite,
    whole,
    window_index,
    window_start,
)


def metric_windows(
    samples: pl.DataFrame, grid: Sequence[int], params: AnalysisParams
) -> pl.DataFrame:
    """Gauges (max/mean over scrapes) and counter increases per window from /metrics samples.

    The window conventions (which scrape pair belongs to which window, how engines combine)
    are those of analysis/latency.py, shared with the exporter.
    """
    m = samples.filter(pl.col("timestamp").is_not_null())
    if m.is_empty() or not grid:
        return pl.DataFrame()
    bounds = [(window_start(w, params), window_start(w + 1, params)) for w in grid]
    kv = latency.gauge_windows(m, M_KV, bounds)
    running = latency.gauge_windows(m, M_RUNNING, bounds)
    waiting = latency.gauge_windows(m, M_WAITING, bounds)
    capacity = latency.gauge_windows(m, M_WAITING_BY_REASON, bounds, labels={"reason": "capacity"})
    preempted = latency.counter_increases(m, M_PREEMPTIONS, bounds)
    prompt = latency.counter_increases(m, M_PROMPT_TOKENS, bounds)
    generated = latency.counter_increases(m, M_GENERATION_TOKENS, bounds)
    scrapes = dict(
        m.with_columns(window_index("timestamp", params))
        .group_by("win")
        .agg(pl.col("timestamp").n_unique())
        .iter_rows()
    )

    evidence = metric_evidence_times(m, params)

    def rate(value: float | None) -> float | None:
        return value / params.window_s if value is not None else None

    return pl.DataFrame(
        {
            "win": list(grid),
            **gauge_columns(kv, running, waiting, capacity),
            "m_scrapes": [scrapes.get(w) for w in grid],
            "m_preemptions": [whole(x) for x in preempted],
            "m_prompt_tp": [rate(x) for x in prompt],
            "m_gen_tp": [rate(x) for x in generated],
            "m_ev_first": [evidence.get(w, (None, None))[0] for w in grid],
            "m_ev_last": [evidence.get(w, (None, None))[1] for w in grid],
        },
        schema=METRIC_WINDOW_COLUMNS,
    )


def gauge_columns(
    kv: Gauge, running: Gauge, waiting: Gauge, capacity: Gauge
) -> dict[str, list[float | None] | list[int | None]]:
    """The gauge columns of METRIC_WINDOW_COLUMNS from per-window (max, mean) pairs: from raw
    samples here, from Prometheus' reductions in analysis/fleet_reduce.py (which may be
    NaN or infinite: no number)."""
    return {
        "m_kv_max": [finite(x[0]) for x in kv],
        "m_kv_mean": [finite(x[1]) for x in kv],
        "m_running_mean": [finite(x[1]) for x in running],
        "m_running_max": [whole(x[0]) for x in running],
        "m_waiting_mean": [finite(x[1]) for x in waiting],
        "m_waiting_max": [whole(x[0]) for x in waiting],
        "m_wfc_max": [whole(x[0]) for x in capacity],
    }


def metric_evidence_times(
    m: pl.DataFrame, params: AnalysisParams
) -> dict[int, tuple[datetime, datetime]]:
    """Per window, the first and last scrape that shows the overload.

    A scrape shows it when the preemption counter went up since the series' previous scrape,
    or KV is saturated with requests waiting.
    """
    counter = (
        m.filter((pl.col("metric") == M_PREEMPTIONS) & (pl.col("sample") == "value"))
        .sort("timestamp")
        .with_columns(prev=pl.col("value").shift(1).over(["source", "model_name", "engine"]))
        .filter(pl.col("prev").is_not_null() & (pl.col("value") != pl.col("prev")))
        .select("timestamp")
    )

    def gauge(metric: str, how: pl.Expr) -> pl.DataFrame:
        rows = m.filter((pl.col("metric") == metric) & (pl.col("sample") == "value"))
        return rows.group_by("timestamp").agg(how.alias(metric))

    kv = gauge(M_KV, pl.col("value").max())
    waiting = gauge(M_WAITING, pl.col("value").sum())
    full = (
        kv.join(waiting, on="timestamp")
        .filter((pl.col(M_KV) >= params.kv_saturated) & (pl.col(M_WAITING) > 0))
        .select("timestamp")
    )
    times = pl.concat([counter, full.cast({"timestamp": counter.schema["timestamp"]})])
    if times.is_empty():
        return {}
    per = (
        times.with_columns(window_index("timestamp", params))
        .group_by("win")
        .agg(first=pl.col("timestamp").min(), last=pl.col("timestamp").max())
    )
    return {row[0]: (row[1], row[2]) for row in per.iter_rows()}
