"""Per-window facts of one deployment: preemptions (with their evidence), KV, queue, throughput.

This module owns the window grid (`data_windows`) and the one window table the verdict reads
(`build_window_table`: log facts and /metrics facts joined, then derived). The facts come from
`log_windows` (log records) and `scrape_windows` (/metrics samples); names and dtypes are in
`window_schema`. Everything is re-exported here. Vectorised over rows; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
from preemptscope.analysis.log_windows import (
    iteration_tokens_means,
    running_plateau,
    stats_windows,
    v0_warning_windows,
)
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.scrape_windows import (
    gauge_columns,
    metric_evidence_times,
    metric_windows,
)
from preemptscope.analysis.window_schema import (
    EPOCH,
    LIMIT_BUDGET,
    LIMIT_KV,
    LIMIT_SEQS,
    M_GENERATION_TOKENS,
    M_ITERATION_TOKENS,
    M_KV,
    M_PREEMPTIONS,
    M_PROMPT_TOKENS,
    M_RUNNING,
    M_WAITING,
    M_WAITING_BY_REASON,
    MAX_GRID_WINDOWS,
    METRIC_WINDOW_COLUMNS,
    STATS_COLUMNS,
    WINDOW_COLUMNS,
    Gauge,
    MetricWindows,
    V0Counter,
    finite,
    whole,
    window_index,
    window_start,
)
from preemptscope.ingest.schema import TIMESTAMP

__all__ = [
    "EPOCH",
    "LIMIT_BUDGET",
    "LIMIT_KV",
    "LIMIT_SEQS",
    "MAX_GRID_WINDOWS",
    "METRIC_WINDOW_COLUMNS",
    "M_GENERATION_TOKENS",
    "M_ITERATION_TOKENS",
    "M_KV",
    "M_PREEMPTIONS",
    "M_PROMPT_TOKENS",
    "M_RUNNING",
    "M_WAITING",
    "M_WAITING_BY_REASON",
    "STATS_COLUMNS",
    "WINDOW_COLUMNS",
    "Gauge",
    "MetricWindows",
    "V0Counter",
    "build_window_table",
    "data_windows",
    "finite",
    "gauge_columns",
    "iteration_tokens_means",
    "metric_evidence_times",
    "metric_windows",
    "running_plateau",
    "stats_windows",
    "v0_warning_windows",
    "whole",
    "window_index",
    "window_start",
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
    table = table.join(_or_empty(s, STATS_COLUMNS), on="win", how="left")
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
