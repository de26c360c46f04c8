"""A fleet's /metrics windows from Prometheus' reductions, raw samples only where they matter.

The reductions are `analysis/fleet_queries.py`'s (window values of counters and histograms,
gauges' max, sum and count per window, restarts). Windows where a difference of window values
could differ from the scrape pairs are read raw (`/api/v1/query` of range selectors): each
server's first and last window (the range's edges), windows with a restart or a counter
that went down, the window after a gap, and a window where a series has no value while the
server has samples. Busy windows (preemptions, or a full KV cache with a queue) are read raw
for the preemption counter, KV, waiting, running, prompt tokens and ITL, so the evidence
times are the scrapes' own. Everything else
of the analysis reads those raw samples (restarts, capacity from cache_config_info, the
counter since start). docs/fleet.md ("How samples are read") says what is exact and what not.

It owns the analysis' /metrics windows as a Prometheus computes them (`MetricWindows`, the
same columns `metric_windows` gives from snapshots): one server's (`server_windows`) and a
deployment's (`group_windows`). With `fleet_queries` it is the only analysis code that asks
a server anything, and only through the `PromClient` it is handed: it opens no socket, reads
no file and judges nothing. The query side's names stay importable from here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import polars as pl
from preemptscope.analysis import latency
from preemptscope.analysis.analyze import HISTOGRAM_KINDS
from preemptscope.analysis.fleet_queries import (
    BATCH_POINTS,
    GAUGES,
    PARALLEL_QUERIES,
    POINTS_PER_ANSWER,
    STEPS_PER_QUERY,
    Batch,
    FleetReducer,
    Reduced,
    ServerSpec,
)
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import LatencyMetric, LatencyStats
from preemptscope.analysis.windows import (
    M_GENERATION_TOKENS,
    M_KV,
    M_PREEMPTIONS,
    M_PROMPT_TOKENS,
    M_RUNNING,
    M_WAITING,
    M_WAITING_BY_REASON,
    METRIC_WINDOW_COLUMNS,
    MetricWindows,
    gauge_columns,
    metric_evidence_times,
    whole,
)
from preemptscope.ingest import promapi
from preemptscope.ingest.promfleet import (
    AUTO_WINDOWS,
    SERIES_COLUMNS,
    auto_window,
    base_name,
)
from preemptscope.ingest.schema import METRIC_SAMPLES

__all__ = [
    "AUTO_WINDOWS",
    "BATCH_POINTS",
    "BUSY",
    "EPOCH",
    "GAUGES",
    "PARALLEL_QUERIES",
    "POINTS_PER_ANSWER",
    "SERIES_COLUMNS",
    "STEPS_PER_QUERY",
    "Batch",
    "FleetReducer",
    "Reduced",
    "ServerSpec",
    "ServerWindows",
    "auto_window",
    "base_name",
    "group_windows",
    "server_windows",
]

# Read raw in busy windows: the evidence (counter, KV, waiting) and the advice's calibration.
BUSY = (M_PREEMPTIONS, M_KV, M_WAITING, M_RUNNING, M_PROMPT_TOKENS,
        "inter_token_latency_seconds", "time_per_output_token_seconds")  # fmt: skip
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ServerWindows:
    """One server, reduced: what group_windows combines and the samples read raw."""

    table: pl.DataFrame  # per window with data: gauges, scrapes, evidence times (m_* columns)
    counters: pl.DataFrame  # METRIC_SAMPLES: window values, raw samples in raw windows
    samples: pl.DataFrame  # METRIC_SAMPLES: the samples read raw, and only those
    raw: set[int]  # windows read raw (every series)
    busy: set[int]  # windows read raw for the evidence and calibration series
    series: int = 0  # distinct SERIES_COLUMNS keys in `counters`


# --- One server: windows from the reduced answers and the raw reads ---------------------------


def server_windows(
    client: promapi.PromClient,
    reduced: Reduced,
    *,
    selector: Callable[[Sequence[str] | None], str],
    names: Sequence[str],
    source: str,
    deployment: str,
    drop: set[str],
    start: datetime,
    end: datetime,
    params: AnalysisParams,
) -> ServerWindows:
    """One server's windows from its reduced answers, reading raw what they cannot give."""
    w_us = params.window_us

    def frame(chunks: list[promapi.RawSamples], ids: bool = False) -> pl.DataFrame:
        rows = promapi.series_frame(
            chunks, source=source, deployment=deployment, drop=drop, series_ids=ids
        )
        return rows.with_columns(
            win=(pl.col("timestamp").dt.epoch("us") - 1) // w_us  # t = e or e - 1 ms: (s, e]
        )

    lasts = frame(reduced.lasts, ids=True)
    maxima, sums, counts = frame(reduced.maxima), frame(reduced.sums), frame(reduced.counts)
    lo_s, hi_s = start.timestamp(), end.timestamp()
    w_s = w_us / 1e6

    scrapes_q = dict(counts.group_by("win").agg(pl.col("value").max()).iter_rows())
    nonempty = sorted(
        {int(k) for k, v in scrapes_q.items() if v and v > 0} | set(lasts["win"].unique())
    )
    if not nonempty:
        none = lasts.clear().drop("win", "series_id")
        return ServerWindows(pl.DataFrame(), none, none, set(), set())
    present = set(nonempty)
    first, last = nonempty[0], nonempty[-1]
    suspect: set[int] = {first, last}
    # A series missing from a window that has samples (a target that stopped mid-window, a
    # staleness marker, a series that appeared late).
    per_win = dict(lasts.group_by("win").len().iter_rows())
    width = max(per_win.values(), default=0)
    suspect |= {k for k in nonempty if per_win.get(k, 0) < width}
    # A value that went down or a `_created` that changed between two window values: a restart.
    keyed = lasts.sort("series_id", "timestamp").with_columns(
        prev=pl.col("value").shift(1).over("series_id")
    )
    moved = (pl.col("value") < pl.col("prev")) | (
        (pl.col("sample") == "created") & (pl.col("value") != pl.col("prev"))
    )
    suspect |= set(keyed.filter(moved.fill_null(False))["win"].to_list())
    suspect |= {k for k in reduced.restarts if k in present}
    suspect |= {k + 1 for k in reduced.restarts if k + 1 in present}
    suspect |= {k for k in nonempty[1:] if k - 1 not in present}  # after a gap
    previous = {b: a for a, b in itertools.pairwise(nonempty)}
    # Each run read raw from its previous window on, so a restart's previous scrape is real.
    raw = set(suspect)
    raw |= {previous[k] for k in suspect if k in previous and k - 1 not in suspect}

    def runs(wins: set[int]) -> list[tuple[int, int]]:
        ordered = sorted(wins)
        out: list[tuple[int, int]] = []
        for k in ordered:
            if out and k == out[-1][1] + 1:
                out[-1] = (out[-1][0], k)
            else:
                out.append((k, k))
        return out

    def read(wins: set[int], metric_names: Sequence[str] | None) -> list[pl.DataFrame]:
        frames = []
        for a, b in runs(wins):
            lo = max(lo_s, a * w_s - 0.001)  # a gauge sample at exactly s belongs to window a
            hi = min(hi_s, (b + 1) * w_s)
            if hi <= lo:
                continue
            chunks = list(client.raw(selector(metric_names), _at(lo), _at(hi)))
            frames.append(
                promapi.series_frame(chunks, source=source, deployment=deployment, drop=drop)
            )
        return frames

    raw_frames = read(raw, None)
    sampled = _concat(raw_frames)
    # Counters and histograms: the raw samples of raw windows, the window values elsewhere.
    counter_win = (pl.col("timestamp").dt.epoch("us") - 1) // w_us
    raw_counters = sampled.filter(
        counter_win.is_in(sorted(raw)) & (pl.col("type") != "gauge") & (pl.col("type") != "info")
    )
    kept = lasts.filter(~pl.col("win").is_in(sorted(raw)))
    mixed = pl.concat([raw_counters, kept.drop("win", "series_id")], how="vertical").sort(
        "timestamp", maintain_order=True
    )
    # The series of `mixed`: those of its raw rows and one row per window-value series.
    series = pl.concat(
        [raw_counters.select(SERIES_COLUMNS),
         kept.unique("series_id", maintain_order=True).select(SERIES_COLUMNS)]
    ).n_unique()  # fmt: skip
    # Windows with data as the raw samples would have them: raw windows by their samples.
    floor_win = pl.col("timestamp").dt.epoch("us") // w_us
    # (a gauge's window by floor, a counter's by the pair convention: a scrape at exactly e
    # ends the pair of the window before)
    held = sampled.select(pl.concat([floor_win, counter_win]).alias("w"))["w"].unique()
    raw_data = set(held.to_list()) & raw
    data = sorted((present - raw) | raw_data)
    gauges = _gauges(maxima, sums, counts, sampled, data, raw, params)
    bounds = [(_at(k * w_s), _at((k + 1) * w_s)) for k in data]
    counter = mixed.filter(pl.col("metric") == M_PREEMPTIONS)
    preempted = latency.counter_increases(counter, M_PREEMPTIONS, bounds)
    hot = {
        k
        for k, p, kv, wait in zip(
            data, preempted, gauges["m_kv_max"], gauges["m_waiting_max"], strict=True
        )
        if (p or 0) > 0 or ((kv or 0) >= params.kv_saturated and (wait or 0) > 0)
    } - raw
    busy = _names_of(names, BUSY)
    busy_frames = read(hot, busy) if busy else []
    samples = _concat([*raw_frames, *busy_frames]).unique(maintain_order=True)
    samples = samples.sort("timestamp", maintain_order=True)
    # Evidence: a counter step needs the scrape before each run; a run's first sample is
    # compared with the previous window's value (exact; its time is not used).
    starts = [previous[a] for a, _ in runs(raw | hot) if a in previous and previous[a] not in raw]
    before = lasts.filter(pl.col("win").is_in(starts) & (pl.col("metric") == M_PREEMPTIONS))
    ev_frame = pl.concat([samples, before.drop("win", "series_id")], how="vertical").sort(
        "timestamp", maintain_order=True
    )
    evidence = metric_evidence_times(ev_frame, params)
    read_wins = raw | hot
    gauges["m_ev_first"] = [evidence[k][0] if k in evidence and k in read_wins else None
                            for k in data]  # fmt: skip
    gauges["m_ev_last"] = [evidence[k][1] if k in evidence and k in read_wins else None
                           for k in data]  # fmt: skip
    table = pl.DataFrame({"win": data, **gauges})
    return ServerWindows(table, mixed, samples, raw, hot, series)


def _names_of(exposed: Sequence[str], canonical: Sequence[str]) -> list[str]:
    return [n for n in exposed if base_name(n) in canonical]


def _at(seconds: float) -> datetime:
    return EPOCH + timedelta(microseconds=round(seconds * 1e6))


def _concat(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    if not frames:
        return pl.DataFrame(schema=METRIC_SAMPLES)
    return pl.concat(frames, how="vertical")


def _gauges(
    maxima: pl.DataFrame,
    sums: pl.DataFrame,
    counts: pl.DataFrame,
    sampled: pl.DataFrame,
    data: Sequence[int],
    raw: set[int],
    params: AnalysisParams,
) -> dict[str, list[Any]]:
    """Per window with data: gauge max/mean and scrapes, from raw samples or the reductions."""
    w_us = params.window_us
    raw_wins = [k for k in data if k in raw]
    bounds = [(_at(k * w_us / 1e6), _at((k + 1) * w_us / 1e6)) for k in raw_wins]

    def reduced(metric: str, labels: dict[str, str] | None) -> dict[int, tuple[float, float]]:
        def pick(rows: pl.DataFrame) -> pl.DataFrame:
            rows = rows.filter((pl.col("metric") == metric) & (pl.col("sample") == "value"))
            for key, value in (labels or {}).items():
                rows = rows.filter(pl.col("labels").str.json_path_match(f"$.{key}") == value)
            return rows.select("win", *latency.SERIES_KEYS, "value")

        keys = ["win", *latency.SERIES_KEYS]
        both = (
            pick(maxima)
            .rename({"value": "max"})
            .join(pick(sums).rename({"value": "sum"}), on=keys, nulls_equal=True)
            .join(pick(counts).rename({"value": "n"}), on=keys, nulls_equal=True)
        )
        # Series of one server are combined as the scrapes are: the fullest for a fraction,
        # the sum for counts (of several series, the sum of each one's maximum: a bound).
        perc = metric.endswith("_perc")
        per = both.group_by("win").agg(
            mx=pl.col("max").max() if perc else pl.col("max").sum(),
            mean=(pl.col("sum") / pl.col("n")).max()
            if perc
            else (pl.col("sum") / pl.col("n")).sum(),
        )
        return {row[0]: (row[1], row[2]) for row in per.iter_rows()}

    def one(
        metric: str, labels: dict[str, str] | None = None
    ) -> list[tuple[float | None, float | None]]:
        q = reduced(metric, labels)
        exact = (
            dict(
                zip(
                    raw_wins,
                    latency.gauge_windows(sampled, metric, bounds, labels=labels),
                    strict=True,
                )
            )
            if raw_wins
            else {}
        )
        return [exact.get(k, (None, None)) if k in raw else q.get(k, (None, None)) for k in data]

    kv, running, waiting = one(M_KV), one(M_RUNNING), one(M_WAITING)
    capacity = one(M_WAITING_BY_REASON, {"reason": "capacity"})
    floor_win = pl.col("timestamp").dt.epoch("us") // w_us
    raw_scrapes = dict(
        sampled.with_columns(w=floor_win)
        .group_by("w")
        .agg(pl.col("timestamp").n_unique())
        .iter_rows()
    )
    q_scrapes = dict(counts.group_by("win").agg(pl.col("value").max()).iter_rows())
    return {
        **gauge_columns(kv, running, waiting, capacity),
        "m_scrapes": [raw_scrapes.get(k) if k in raw else whole(q_scrapes.get(k)) for k in data],
    }


def group_windows(
    members: Sequence[ServerWindows],
    data: Sequence[int],
    params: AnalysisParams,
) -> MetricWindows:
    """One deployment's MetricWindows from its servers' (gauge table, counters frame)."""
    tables = [m.table for m in members if m.table.height]
    mixed = pl.concat([m.counters for m in members], how="vertical").sort(
        "timestamp", maintain_order=True
    )
    w_s = params.window_us / 1e6
    bounds = [(_at(k * w_s), _at((k + 1) * w_s)) for k in data]
    # Each metric's rows apart once: the latency functions then filter small frames.
    by_metric = {
        str(key[0]): part for key, part in mixed.partition_by("metric", as_dict=True).items()
    }
    empty = mixed.clear()

    def of(metric: str) -> pl.DataFrame:
        return by_metric.get(metric, empty)

    def rate(value: float | None) -> float | None:
        return value / params.window_s if value is not None else None

    counters = pl.DataFrame(
        {
            "win": list(data),
            "m_preemptions": [
                whole(x)
                for x in latency.counter_increases(of(M_PREEMPTIONS), M_PREEMPTIONS, bounds)
            ],
            "m_prompt_tp": [
                rate(x)
                for x in latency.counter_increases(of(M_PROMPT_TOKENS), M_PROMPT_TOKENS, bounds)
            ],
            "m_gen_tp": [
                rate(x)
                for x in latency.counter_increases(
                    of(M_GENERATION_TOKENS), M_GENERATION_TOKENS, bounds
                )
            ],
        },
        schema={
            "win": pl.Int64(),
            "m_preemptions": pl.Int64(),
            "m_prompt_tp": pl.Float64(),
            "m_gen_tp": pl.Float64(),
        },
    )
    if tables:
        typed = [pl.col(c).cast(METRIC_WINDOW_COLUMNS[c]) for c in tables[0].columns]
        gauges = pl.concat([t.select(typed) for t in tables], how="vertical")
        gauges = gauges.group_by("win").agg(
            pl.col("m_kv_max").max(),
            pl.col("m_kv_mean").max(),
            *(pl.when(pl.col(c).count() > 0).then(pl.col(c).sum()).alias(c)
              for c in ("m_running_mean", "m_running_max", "m_waiting_mean", "m_waiting_max",
                        "m_wfc_max", "m_scrapes")),
            pl.col("m_ev_first").min(),
            pl.col("m_ev_last").max(),
        )  # fmt: skip
        table = counters.join(gauges, on="win", how="left")
    else:
        table = counters
    table = table.select(
        [
            (pl.col(c) if c in table.columns else pl.lit(None)).cast(dtype).alias(c)
            for c, dtype in METRIC_WINDOW_COLUMNS.items()
        ]
    )
    with_buckets = {m for m, part in by_metric.items() if (part["sample"] == "bucket").any()}
    # Each kind's first histogram present, as latency.histogram_metric picks it.
    names: dict[LatencyMetric, str] = {}
    for kind in (cast(LatencyMetric, k) for k in HISTOGRAM_KINDS):
        name = next((n for n in latency.HISTOGRAM_METRICS[kind] if n in with_buckets), None)
        if name is not None:
            names[kind] = name
    histograms = (
        pl.concat([of(n) for n in sorted(set(names.values()))], how="vertical") if names else empty
    )
    found = latency.histograms_windows_stats(histograms, names, bounds)
    by_win: dict[int, dict[str, LatencyStats]] = {k: {} for k in data}
    for kind, stats_list in found.items():
        for k, stats in zip(data, stats_list, strict=True):
            if stats is not None:
                by_win[k][kind] = stats
    return MetricWindows(params.window_us, table, {k: v for k, v in by_win.items() if v})
