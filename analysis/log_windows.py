"""Per-window facts from log records: stats lines, V0 warnings, running plateaus, step tokens.

Vectorised over rows (Polars group-bys on the window index); Python loops run only over V0
warning lines (at most one per 50 preemptions) and over windows. It never reads /metrics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta

import polars as pl
from preemptscope.analysis import latency
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.window_schema import (
    EPOCH,
    M_ITERATION_TOKENS,
    M_RUNNING,
    M_WAITING,
    V0Counter,
    window_index,
    window_start,
)


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
