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

import polars as pl
from preemptscope.analysis import latency
from preemptscope.analysis.params import AnalysisParams
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
}


@dataclass(frozen=True)
class V0Counter:
    """What the V0 every-50th warnings say, beyond the per-window lower bounds."""

    placed: int  # preemptions attributed to windows (a lower bound)
    unplaced: int  # counted by warnings without a timestamp
    since_start: int | None  # largest cumulative counter (summed over restarts)
    warning_lines: int


def window_index(column: str, params: AnalysisParams) -> pl.Expr:
    """Integer window number of a timestamp column: floor(epoch_us / window_us)."""
    return (pl.col(column).dt.epoch("us") // params.window_us).alias("win")


def window_start(win: int, params: AnalysisParams) -> datetime:
    return EPOCH + timedelta(microseconds=win * params.window_us)


def _sum_or_null(column: str) -> pl.Expr:
    # Polars sums an all-null group to 0; a missing count must stay null, never read as 0.
    return pl.when(pl.col(column).count() > 0).then(pl.col(column).sum()).alias(column)


def stats_windows(stats: pl.DataFrame, params: AnalysisParams) -> pl.DataFrame:
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
    )
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

    def rate(value: float | None) -> float | None:
        return value / params.window_s if value is not None else None

    def whole(value: float | None) -> int | None:
        return round(value) if value is not None else None

    return pl.DataFrame(
        {
            "win": list(grid),
            "m_kv_max": [x[0] for x in kv],
            "m_kv_mean": [x[1] for x in kv],
            "m_running_mean": [x[1] for x in running],
            "m_running_max": [whole(x[0]) for x in running],
            "m_waiting_mean": [x[1] for x in waiting],
            "m_waiting_max": [whole(x[0]) for x in waiting],
            "m_wfc_max": [whole(x[0]) for x in capacity],
            "m_scrapes": [scrapes.get(w) for w in grid],
            "m_preemptions": [whole(x) for x in preempted],
            "m_prompt_tp": [rate(x) for x in prompt],
            "m_gen_tp": [rate(x) for x in generated],
        },
        schema=_METRIC_COLS,
    )


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


def data_windows(
    params: AnalysisParams, *frames_and_columns: tuple[pl.DataFrame | None, str]
) -> list[int]:
    """The window grid covering every timestamp of the given (frame, column) pairs, gaps filled."""
    wins: set[int] = set()
    for frame, column in frames_and_columns:
        if frame is None or frame.is_empty():
            continue
        found = frame.select(window_index(column, params)).drop_nulls()["win"].unique()
        wins |= set(found.to_list())
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
) -> tuple[pl.DataFrame, V0Counter]:
    """One row per window of `grid` (schema WINDOW_COLUMNS) from all evidence of a deployment."""
    s = stats_windows(stats, params)
    m = metric_windows(metrics, grid, params) if metrics is not None else pl.DataFrame()
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
    table = pl.DataFrame({"win": list(grid)}, schema={"win": pl.Int64()})
    table = table.join(_or_empty(s, _STATS_COLS), on="win", how="left")
    table = table.join(_or_empty(m, _METRIC_COLS), on="win", how="left")
    table = table.join(v, on="win", how="left")
    return _derive(table, params, v0_present=v0.warning_lines > 0), v0


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
}
_METRIC_COLS: dict[str, pl.DataType] = {
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
}


def _or_empty(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    if frame.is_empty():
        return pl.DataFrame(schema=schema)
    return frame.select([pl.col(name).cast(dtype) for name, dtype in schema.items()])


def _derive(table: pl.DataFrame, p: AnalysisParams, *, v0_present: bool) -> pl.DataFrame:
    # V0 windows without a warning still carry a (trivial) lower bound of 0 preemptions.
    v0_covered = pl.col("s_is_v0").fill_null(False) | (
        pl.lit(v0_present) & pl.col("s_records").is_not_null()
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
    t = t.with_columns(
        queue_bound=~pl.col("idle")
        & ~pl.col("over_capacity")
        & (waiting >= 1)
        & (waiting >= p.queue_fraction * pl.col("running_mean").fill_null(0))
        & (pl.col("kv_usage_max").fill_null(0) < p.kv_saturated),
    )
    return t.select([pl.col(name).cast(dtype) for name, dtype in WINDOW_COLUMNS.items()])
