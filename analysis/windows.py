"""Per-window facts of one deployment: preemptions (with their evidence), KV, queue, throughput.

Everything here is vectorised over rows (Polars group-bys on an integer window index aligned to
the Unix epoch, so live and batch runs agree on window edges); Python loops only run over V0
warning lines (at most one per 50 preemptions) and over windows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

import polars as pl
from preemptscope.analysis import latency
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


def _sum_or_null(column: str) -> pl.Expr:
    # Polars sums an all-null group to 0; a missing count must stay null, never read as 0.
    return pl.when(pl.col(column).count() > 0).then(pl.col(column).sum()).alias(column)


def stats_windows(
    stats: pl.DataFrame, params: AnalysisParams, max_num_seqs: int | None = None
) -> pl.DataFrame:
    """Scheduler-stats records (logs) per window; engines and files of one deployment are summed."""
    s = stats.filter(pl.col("timestamp").is_not_null())
    # An "N Engines Aggregated" line (no engine index) repeats what per-engine lines of the same
    # file say; keep the per-engine ones when a file has both, so nothing is counted twice.
    per_engine_too = (pl.col("engine").is_not_null() & (pl.col("era") == "v1")).any().over("source")
    s = s.filter(~(per_engine_too & pl.col("engine").is_null() & (pl.col("era") == "v1")))
    if s.is_empty():
        return pl.DataFrame()
    # A V1 source that prints `Preemptions: N` at least once omits it when N == 0, so its other
    # records count 0; a source that never prints it has no count at all.
    has_count = pl.col("preemptions").is_not_null().any().over("source")
    s = (
        s.with_columns(window_index("timestamp", params), eng=pl.col("engine").fill_null(-1))
        .sort("timestamp", maintain_order=True)
        .with_columns(
            preemptions=pl.when(has_count)
            .then(pl.col("preemptions").fill_null(0))
            .otherwise(pl.col("preemptions")),
            prev_running=pl.col("running").shift(1).over(["source", "eng"]),
            prev_kv=pl.col("gpu_kv_cache_usage").shift(1).over(["source", "eng"]),
        )
        .with_columns(
            # KV full, a queue, and fewer running than a moment ago: requests were evicted.
            inferred=(
                (pl.max_horizontal("gpu_kv_cache_usage", "prev_kv") >= params.kv_saturated)
                & (pl.col("waiting") > 0)
                & (pl.col("running") < pl.col("prev_running"))
            )
            # V0 "Swapped: N" > 0: N requests were preempted by swapping to CPU and wait there.
            | (pl.col("swapped").fill_null(0) > 0),
        )
        .with_columns(
            # This record itself shows the overload: a count, an inference, or a queue at full KV.
            overloaded=(pl.col("preemptions").fill_null(0) > 0)
            | pl.col("inferred").fill_null(False)
            | (
                (pl.col("gpu_kv_cache_usage").fill_null(0) >= params.kv_saturated)
                & (pl.col("waiting").fill_null(0) > 0)
            ),
        )
    )
    full_at = params.batch_full_fraction * max_num_seqs if max_num_seqs else None
    per_engine = s.group_by(["win", "source", "eng"]).agg(
        kv_max=pl.col("gpu_kv_cache_usage").max(),
        kv_mean=pl.col("gpu_kv_cache_usage").mean(),
        running_mean=pl.col("running").mean(),
        running_max=pl.col("running").max(),
        waiting_mean=pl.col("waiting").mean(),
        waiting_max=pl.col("waiting").max(),
        prompt_tp=pl.col("prompt_throughput").mean(),
        gen_tp=pl.col("generation_throughput").mean(),
        preemptions=_sum_or_null("preemptions"),
        inferred=pl.col("inferred").fill_null(False).any(),
        is_v0=(pl.col("era") == "v0").any(),
        records=pl.len(),
        ev_first=pl.col("timestamp").filter(pl.col("overloaded")).min(),
        ev_last=pl.col("timestamp").filter(pl.col("overloaded")).max(),
        wait_share=(pl.col("waiting").fill_null(0) > 0).mean(),
        wait_records=(pl.col("waiting").fill_null(0) > 0).sum(),
        batch_full=(pl.col("running").max() >= full_at) if full_at else pl.lit(False),
        # Records where requests wait behind a batch at its cap (bursts fill it, then drain).
        pinned=((pl.col("waiting").fill_null(0) > 0) & (pl.col("running") >= full_at)).sum()
        if full_at
        else pl.lit(0),
    )
    return per_engine.group_by("win").agg(
        s_kv_max=pl.col("kv_max").max(),
        s_kv_mean=pl.col("kv_mean").mean(),
        s_running_mean=pl.col("running_mean").sum(),
        s_running_max=pl.col("running_max").sum(),
        s_waiting_mean=pl.col("waiting_mean").sum(),
        s_waiting_max=pl.col("waiting_max").sum(),
        s_prompt_tp=pl.col("prompt_tp").sum(),
        s_gen_tp=pl.col("gen_tp").sum(),
        s_preemptions=pl.when(pl.col("preemptions").count() > 0).then(pl.col("preemptions").sum()),
        s_inferred=pl.col("inferred").any(),
        s_is_v0=pl.col("is_v0").any(),
        s_records=pl.col("records").sum(),
        s_ev_first=pl.col("ev_first").min(),
        s_ev_last=pl.col("ev_last").max(),
        s_wait_share=pl.col("wait_share").min(),
        s_wait_records=pl.col("wait_records").max(),
        s_pinned_share=(pl.col("pinned") / pl.col("records")).max(),
        s_pinned_records=pl.col("pinned").max(),
        s_batch_full=pl.col("batch_full").any(),
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


def v0_warning_windows(
    warnings: pl.DataFrame,
    params: AnalysisParams,
    high_kv_windows: set[int],
) -> tuple[dict[int, int], V0Counter]:
    """Lower-bound preemptions per window from V0's every-50th warnings.

    Between two warnings of one engine run with counters a < b, b - a preemptions happened in
    (t_a, t_b]; they are spread over that span's windows with KV >= kv_high (preemption needs a
    full cache), or over all its windows when none is known to be full. A counter that goes down
    starts a new run (restart); the first warning of a run places only itself.
    """
    per_window: dict[int, float] = {}
    unplaced = 0
    since_start = 0
    seen_counter = False
    prev: dict[str, tuple[int, int]] = {}  # source -> (cumulative, window)
    run_max: dict[str, int] = {}
    rows = warnings.sort("timestamp", nulls_last=True, maintain_order=True).select(
        "source", "timestamp", "cumulative"
    )
    for source, ts, cum in rows.iter_rows():
        if ts is None:
            unplaced += 1  # a preemption happened, nobody knows when
            if cum is not None:
                seen_counter = True
                run_max[source] = max(run_max.get(source, 0), cum)
            continue
        win = int((ts - EPOCH) // timedelta(microseconds=params.window_us))
        if cum is None:
            per_window[win] = per_window.get(win, 0) + 1
            continue
        seen_counter = True
        last = prev.get(source)
        if last is None or cum <= last[0]:
            if last is not None:
                since_start += run_max.get(source, 0)
                run_max[source] = 0
            per_window[win] = per_window.get(win, 0) + 1
        else:
            _spread(per_window, cum - last[0], last[1], win, high_kv_windows)
        prev[source] = (cum, win)
        run_max[source] = max(run_max.get(source, 0), cum)
    since_start += sum(run_max.values())
    counts = _round_preserving_sum(per_window)
    return counts, V0Counter(
        placed=sum(counts.values()),
        unplaced=unplaced,
        since_start=since_start if seen_counter else None,
        warning_lines=warnings.height,
    )


def _spread(
    per_window: dict[int, float], amount: int, first: int, last: int, full: set[int]
) -> None:
    span = range(first, last + 1)
    targets = [w for w in span if w in full] or list(span)
    share = amount / len(targets)
    for w in targets:
        per_window[w] = per_window.get(w, 0) + share


def _round_preserving_sum(values: dict[int, float]) -> dict[int, int]:
    """Largest-remainder rounding, so spread counts still add up to the counter deltas."""
    floors = {k: math.floor(v + 1e-9) for k, v in values.items()}
    missing = round(sum(values.values())) - sum(floors.values())
    by_remainder = sorted(values, key=lambda k: (floors[k] - values[k], k))
    for k in by_remainder[: max(0, missing)]:
        floors[k] += 1
    return floors


def running_plateau(
    stats: pl.DataFrame, metrics: pl.DataFrame | None, params: AnalysisParams
) -> int | None:
    """max_num_seqs read off the running count when no log line or label prints it.

    vLLM never runs more than max_num_seqs requests per engine, so a queue behind a batch that
    sits at one count is a batch at its cap: the engine's peak running count counts as the cap
    when it is held on at least plateau_share of the records that show a queue (and on at least
    plateau_records of them). Stats lines first (per file and engine), else the scrapes of
    num_requests_running / num_requests_waiting (per series). None: no plateau.
    """
    points = _running_points(stats, metrics)
    if points is None or points.is_empty():
        return None
    queued = points.filter(pl.col("waiting") > 0)
    if queued.is_empty():
        return None
    peaks = points.group_by("key").agg(peak=pl.col("running").max())
    at_peak = (
        queued.join(peaks, on="key")
        .group_by("key", "peak")
        .agg(
            held=(pl.col("running") >= pl.col("peak")).sum(),
            queued=pl.len(),
        )
        .filter(
            (pl.col("peak") > 0)
            & (pl.col("held") >= params.plateau_records)
            & (pl.col("held") >= params.plateau_share * pl.col("queued"))
        )
    )
    if at_peak.is_empty():
        return None
    # Every engine of one deployment runs with the same flag: the most common plateau.
    counts = at_peak.group_by("peak").agg(pl.col("held").sum()).sort(["held", "peak"])
    return int(counts["peak"][-1])


def _running_points(stats: pl.DataFrame, metrics: pl.DataFrame | None) -> pl.DataFrame | None:
    """(key, running, waiting) per stats record, else per scrape and series."""
    if not stats.is_empty():
        s = stats.filter(pl.col("running").is_not_null() & pl.col("waiting").is_not_null())
        if not s.is_empty():
            return s.select(
                key=pl.concat_str(
                    pl.col("source"), pl.col("engine").cast(pl.String).fill_null("-"),
                    separator="|",
                ),
                running=pl.col("running").cast(pl.Float64),
                waiting=pl.col("waiting").cast(pl.Float64),
            )  # fmt: skip
    if metrics is None or metrics.is_empty():
        return None
    rows = metrics.filter(
        pl.col("metric").is_in([M_RUNNING, M_WAITING]) & (pl.col("sample") == "value")
    )
    if rows.is_empty():
        return None
    key = pl.concat_str(
        pl.col("source"), pl.col("model_name").fill_null("-"), pl.col("engine").fill_null("-"),
        separator="|",
    )  # fmt: skip
    wide = (
        rows.with_columns(key=key)
        .group_by("key", "timestamp", "metric")
        .agg(pl.col("value").sum())
        .pivot(on="metric", index=["key", "timestamp"], values="value")
    )
    if M_RUNNING not in wide.columns or M_WAITING not in wide.columns:
        return None
    return wide.select("key", running=pl.col(M_RUNNING), waiting=pl.col(M_WAITING)).drop_nulls()


def iteration_tokens_means(
    metrics: pl.DataFrame | None, grid: Sequence[int], params: AnalysisParams
) -> list[float | None]:
    """Per window, the mean tokens per engine step from vllm:iteration_tokens_total.

    vLLM observes each step's generated tokens plus the prompt tokens of the requests whose
    prefill finished in it, so with chunked prefill one step's observation is not what it
    scheduled (a long prompt lands whole on its last chunk's step); over a window every token
    is counted once, so the increase of _sum over that of _count is the mean scheduled per
    step. None: no pair of scrapes in the window.
    """
    if metrics is None or not grid:
        return [None] * len(grid)
    rows = metrics.filter(
        (pl.col("metric") == M_ITERATION_TOKENS) & pl.col("sample").is_in(["sum", "count"])
    )
    if rows.is_empty():
        return [None] * len(grid)
    bounds = [(window_start(w, params), window_start(w + 1, params)) for w in grid]
    parts = {}
    for kind in ("sum", "count"):
        # Each as a counter of its own (the window conventions of analysis/latency.py).
        series = rows.filter(pl.col("sample") == kind).with_columns(
            metric=pl.lit(f"{M_ITERATION_TOKENS}_{kind}"), sample=pl.lit("value")
        )
        parts[kind] = latency.counter_increases(series, f"{M_ITERATION_TOKENS}_{kind}", bounds)
    return [
        total / steps if total is not None and steps else None
        for total, steps in zip(parts["sum"], parts["count"], strict=True)
    ]


_GRID_SLICE = 1 << 20  # rows per slice in data_windows


def data_windows(
    params: AnalysisParams, *frames_and_columns: tuple[pl.DataFrame | None, str]
) -> list[int]:
    """The window grid covering every timestamp of the given (frame, column) pairs, gaps filled."""
    wins: set[int] = set()
    for frame, column in frames_and_columns:
        if frame is None or frame.is_empty():
            continue
        # A slice at a time: a window number for every request row of a 4 GB log at once
        # was 36 MB (and its unique's table more) at the report's peak.
        for offset in range(0, frame.height, _GRID_SLICE):
            part = frame.slice(offset, _GRID_SLICE).select(window_index(column, params))
            wins |= set(part.drop_nulls()["win"].unique().to_list())
    if not wins:
        return []
    lo, hi = min(wins), max(wins)
    return list(range(lo, hi + 1)) if hi - lo < MAX_GRID_WINDOWS else sorted(wins)


def build_window_table(
    stats: pl.DataFrame,
    warnings: pl.DataFrame,
    metrics: pl.DataFrame | None,
    params: AnalysisParams,
    grid: Sequence[int],
    *,
    v0_warns: bool | None = None,
    max_num_seqs: int | None = None,
    reduced: MetricWindows | None = None,
    max_num_batched_tokens: int | None = None,
) -> tuple[pl.DataFrame, V0Counter]:
    """One row per window of `grid` (schema WINDOW_COLUMNS) from all evidence of a deployment.

    `v0_warns`: whether the V0 engine behind the log prints preemption warnings (v0.4.3+).
    Only then does a V0 window without a warning count 0 (a lower bound); before v0.4.3, or
    when nothing tells, such a window has no count. A warning seen proves it either way.
    `max_num_seqs` (printed or inferred from a plateau) tells a full batch from a momentary
    queue, `max_num_batched_tokens` a full step. `reduced`: the /metrics windows already
    computed (then `metrics` is not read for them).
    """
    s = stats_windows(stats, params, max_num_seqs)
    if reduced is not None:
        if reduced.window_us != params.window_us:
            raise ValueError("the /metrics windows were reduced with another window length")
        m = reduced.table.filter(pl.col("win").is_in(list(grid))) if grid else pl.DataFrame()
    elif metrics is not None:
        m = metric_windows(metrics, grid, params)
    else:
        m = pl.DataFrame()
    high_kv: set[int] = set()
    for part, col in ((s, "s_kv_max"), (m, "m_kv_max")):
        if not part.is_empty():
            high_kv |= set(part.filter(pl.col(col) >= params.kv_high)["win"].to_list())
    v0_counts, v0 = v0_warning_windows(warnings, params, high_kv)
    if not grid:
        return pl.DataFrame(schema=WINDOW_COLUMNS), v0
    v = pl.DataFrame(
        {"win": list(v0_counts), "v_preemptions": list(v0_counts.values())},
        schema={"win": pl.Int64(), "v_preemptions": pl.Int64()},
    )
    placed = warnings.filter(pl.col("timestamp").is_not_null())
    if placed.height:
        warned = (
            placed.with_columns(window_index("timestamp", params))
            .group_by("win")
            .agg(v_ev_first=pl.col("timestamp").min(), v_ev_last=pl.col("timestamp").max())
        )
        v = v.join(warned.cast({"win": pl.Int64()}), on="win", how="full", coalesce=True)
    else:
        v = v.with_columns(
            v_ev_first=pl.lit(None, dtype=TIMESTAMP), v_ev_last=pl.lit(None, dtype=TIMESTAMP)
        )
    table = pl.DataFrame({"win": list(grid)}, schema={"win": pl.Int64()})
    table = table.join(_or_empty(s, _STATS_COLS), on="win", how="left")
    table = table.join(_or_empty(m, METRIC_WINDOW_COLUMNS), on="win", how="left")
    table = table.join(v, on="win", how="left")
    means = iteration_tokens_means(metrics, grid, params)
    table = table.with_columns(it_mean=pl.Series(means, dtype=pl.Float64()))
    counts = v0.warning_lines > 0 or bool(v0_warns)
    return _derive(
        table,
        params,
        v0_counts=counts,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    ), v0


_STATS_COLS: dict[str, pl.DataType] = {
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


def _or_empty(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    if frame.is_empty():
        return pl.DataFrame(schema=schema)
    return frame.select([pl.col(name).cast(dtype) for name, dtype in schema.items()])


def _derive(
    table: pl.DataFrame,
    p: AnalysisParams,
    *,
    v0_counts: bool,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None = None,
) -> pl.DataFrame:
    # Where V0 warnings are a source, a window without one carries a lower bound of 0.
    v0_covered = pl.lit(v0_counts) & (
        pl.col("s_is_v0").fill_null(False) | pl.col("s_records").is_not_null()
    )
    v_pre = (
        pl.when(v0_covered)
        .then(pl.col("v_preemptions").fill_null(0))
        .otherwise(pl.col("v_preemptions"))
    )
    t = table.with_columns(
        start=(pl.lit(EPOCH) + pl.duration(microseconds=pl.col("win") * p.window_us)).cast(
            TIMESTAMP
        ),
        samples=pl.col("s_records").fill_null(0) + pl.col("m_scrapes").fill_null(0),
        kv_usage_max=pl.max_horizontal("s_kv_max", "m_kv_max"),
        kv_usage_mean=pl.coalesce("s_kv_mean", "m_kv_mean"),
        running_mean=pl.coalesce("s_running_mean", "m_running_mean"),
        running_max=pl.coalesce("s_running_max", "m_running_max"),
        waiting_mean=pl.coalesce("s_waiting_mean", "m_waiting_mean"),
        waiting_max=pl.coalesce("s_waiting_max", "m_waiting_max"),
        waiting_for_capacity_max=pl.col("m_wfc_max"),
        prompt_throughput=pl.coalesce("s_prompt_tp", "m_prompt_tp"),
        generation_throughput=pl.coalesce("s_gen_tp", "m_gen_tp"),
        v_pre=v_pre,
    )
    exact = pl.col("m_preemptions").is_not_null() | pl.col("s_preemptions").is_not_null()
    t = t.with_columns(
        end=pl.col("start") + pl.duration(microseconds=p.window_us),
        preemptions=pl.coalesce("m_preemptions", "s_preemptions", "v_pre"),
        likely_preempting=pl.col("s_inferred").fill_null(False) & ~exact,
    )
    t = t.with_columns(
        preemption_source=pl.when(pl.col("m_preemptions").is_not_null())
        .then(pl.lit("metrics_counter"))
        .when(pl.col("s_preemptions").is_not_null())
        .then(pl.lit("v1_stats_field"))
        .when(pl.col("v_pre").is_not_null())
        .then(pl.lit("v0_warning_counter"))
        .when(pl.col("likely_preempting"))
        .then(pl.lit("inferred"))
        .otherwise(pl.lit("none")),
    )
    t = t.with_columns(
        preemption_quality=pl.col("preemption_source").replace_strict(
            {
                "metrics_counter": "exact",
                "v1_stats_field": "exact",
                "v0_warning_counter": "lower_bound",
                "inferred": "inferred",
                "none": "none",
            },
            return_dtype=pl.String(),
        ),
        # Running before the burst: the larger of this and the previous window.
        running_ref=pl.max_horizontal("running_max", pl.col("running_max").shift(1)),
    )
    preempted = pl.col("preemptions").fill_null(0) > 0
    t = t.with_columns(
        forced_preemptions=preempted
        & pl.col("kv_usage_max").is_not_null()
        & (pl.col("kv_usage_max") < p.reset_kv_below)
        & (
            pl.col("running_ref").is_null()
            | (pl.col("preemptions") >= p.reset_fraction * pl.col("running_ref"))
        ),
    )
    activity_known = pl.any_horizontal(
        pl.col(c).is_not_null()
        for c in ("running_max", "waiting_max", "generation_throughput", "prompt_throughput")
    )
    t = t.with_columns(
        idle=activity_known
        & (pl.col("running_max").fill_null(0) == 0)
        & (pl.col("waiting_max").fill_null(0) == 0)
        & (pl.col("generation_throughput").fill_null(0) == 0)
        & (pl.col("prompt_throughput").fill_null(0) == 0)
        & ~preempted,
    )
    kv = pl.col("kv_usage_max").fill_null(0)
    t = t.with_columns(
        over_capacity=~pl.col("idle")
        & ~pl.col("forced_preemptions")
        & (
            preempted
            | pl.col("likely_preempting")
            | ((kv >= p.kv_saturated) & (pl.col("waiting_max").fill_null(0) > 0))
            | ((kv >= p.kv_high) & (pl.col("waiting_for_capacity_max").fill_null(0) > 0))
        ),
    )
    waiting = pl.col("waiting_mean").fill_null(0)
    running = pl.col("running_mean").fill_null(0)
    # A queue that holds requests back persists (on nearly every stats record of the window)
    # and is not a few arrivals beside a big batch. What holds it is one of the scheduler's
    # three limits: vLLM admits waiting requests each step until the slots (max_num_seqs), the
    # token budget (max_num_batched_tokens) or the free KV blocks run out.
    # One record is a moment (a burst arriving at once), not a queue that persists.
    # A queue behind a batch at its cap is a limit even when bursts let it drain in between
    # (pinned_persistence of the records, not queue_persistence).
    persistent = (
        pl.col("s_wait_share").is_null()
        | ((pl.col("s_wait_share") >= p.queue_persistence) & (pl.col("s_wait_records") >= 2))
        | ((pl.col("s_pinned_share") >= p.pinned_persistence) & (pl.col("s_pinned_records") >= 2))
    ).fill_null(False)
    queue = ~pl.col("idle") & (waiting >= 1) & (waiting >= p.queue_fraction * running) & persistent
    # Tokens per step: measured from the iteration_tokens histogram where it was scraped; else
    # estimated from the stats lines: every decoding request gets one token a step and at most
    # `running` decode, so steps/s >= generation throughput / running, and tokens per step <=
    # (prompt + generation throughput) x running / generation throughput: exact when every
    # running request decodes, an overestimate by the share still prefilling.
    gen = pl.col("generation_throughput")
    # (At least a token a second per running request: below that most of them are still
    # prefilling, and the bound means nothing.)
    estimate = pl.when((pl.col("running_mean") > 0) & (gen >= pl.col("running_mean"))).then(
        (pl.col("prompt_throughput").fill_null(0) + gen) * pl.col("running_mean") / gen
    )
    t = t.with_columns(
        tokens_per_step=pl.coalesce("it_mean", estimate),
        tokens_per_step_source=pl.when(pl.col("it_mean").is_not_null())
        .then(pl.lit("iteration_tokens"))
        .when(estimate.is_not_null())
        .then(pl.lit("stats_estimate")),
    )
    if max_num_seqs:
        at_cap = pl.col("s_batch_full").fill_null(
            pl.col("running_max") >= p.batch_full_fraction * max_num_seqs
        )
    else:
        at_cap = pl.lit(False)
    kv_pinned = pl.col("kv_usage_max").fill_null(0) >= p.kv_high
    if max_num_batched_tokens:
        measured = pl.col("tokens_per_step") >= p.budget_full_fraction * max_num_batched_tokens
        known = pl.col("tokens_per_step").is_not_null()
    else:
        measured, known = pl.lit(False), pl.lit(False)
    # Budget unmeasured (no throughput figures): what is left once slots and KV are free, for
    # a backlog at least as long as the batch. (Tokens per step known but the budget not
    # printed: the data cannot tell.)
    eliminated = (
        ~known & pl.col("tokens_per_step").is_null() & pl.lit(bool(max_num_seqs))
        & ~at_cap.fill_null(False) & ~kv_pinned & (waiting >= running)
    )  # fmt: skip
    budget_full = measured.fill_null(False) | eliminated
    # vLLM stops admitting when running == max_num_seqs before it asks for KV blocks, so a
    # queue behind a batch at its cap is the cap's, whatever KV reads; KV holds requests back
    # when it preempts them, or when a queue waits at full KV below the cap.
    pinned = at_cap.fill_null(False)
    evicting = (preempted | pl.col("likely_preempting")) & ~pl.col("forced_preemptions")
    held = queue | (pl.col("over_capacity") & (pl.col("waiting_max").fill_null(0) > 0))
    none = pl.lit([], dtype=pl.List(pl.String()))
    t = t.with_columns(
        limits=pl.concat_list(
            pl.when(evicting | (held & kv_pinned & ~pinned) | (pl.col("over_capacity") & ~held))
            .then(pl.lit([LIMIT_KV]))
            .otherwise(none),
            pl.when(held & pinned).then(pl.lit([LIMIT_SEQS])).otherwise(none),
            pl.when(queue & budget_full).then(pl.lit([LIMIT_BUDGET])).otherwise(none),
        ),
    )
    t = t.with_columns(
        # A plain queue at free slots, budget and KV with a backlog as long as the batch is
        # held back too (by what the data cannot tell: the cap or budget not printed).
        queue_bound=~pl.col("over_capacity")
        & queue
        & (pl.col("kv_usage_max").fill_null(0) < p.kv_saturated)
        & ((pl.col("limits").list.len() > 0) | (waiting >= running)),
    )
    over = pl.col("over_capacity")
    t = t.with_columns(
        evidence_first=pl.when(over).then(
            pl.min_horizontal("s_ev_first", "v_ev_first", "m_ev_first")
        ),
        evidence_last=pl.when(over).then(pl.max_horizontal("s_ev_last", "v_ev_last", "m_ev_last")),
    )
    return t.select([pl.col(name).cast(dtype) for name, dtype in WINDOW_COLUMNS.items()])
