"""The analyzer's entry point: frames of one or more deployments in, a typed Report out.

Pure: no file, socket or clock. The batch report, the exporter (on sliding windows) and the
demo all call `analyze` / `analyze_deployment`. This module owns the order of the analysis
(windows, verdict, limit, advice) and the group summaries; the capacity facts are
`analysis/facts.py`'s, what the inputs say about themselves `analysis/input_evidence.py`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import polars as pl
from preemptscope.analysis import latency
from preemptscope.analysis.advice import advise, check_label
from preemptscope.analysis.correlation import correlate, episodes
from preemptscope.analysis.events import find_events
from preemptscope.analysis.facts import capacity_facts, kind_frames
from preemptscope.analysis.input_evidence import (
    client_run,
    disjoint_evidence,
    run_evidence,
    run_times,
    source_paths,
    source_spans,
    span_end,
)
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import (
    DeploymentReport,
    GroupSummary,
    LatencyStats,
    Preemptions,
    PreemptionSource,
    Report,
    Window,
)
from preemptscope.analysis.sim.closedloop import calibrated
from preemptscope.analysis.sim.observed import build_replay, replay_inputs
from preemptscope.analysis.verdict import decide, settle_limit
from preemptscope.analysis.windows import (
    MetricWindows,
    V0Counter,
    build_window_table,
    data_windows,
    running_plateau,
    window_start,
)
from preemptscope.ingest.gathered import DeploymentInputs
from preemptscope.ingest.lifecycle import log_latencies
from preemptscope.ingest.schema import LogFrames
from preemptscope.ingest.versions import v0_warns_preemption

__all__ = [
    "AnalysisParams",
    "DeploymentInputs",
    "analyze",
    "analyze_deployment",
    "capacity_facts",
]

# Latency kinds read from client/per-request samples and from server histograms.
SAMPLE_KINDS: tuple[Literal["e2e", "ttft", "tpot"], ...] = ("e2e", "ttft", "tpot")
HISTOGRAM_KINDS = ("e2e", "ttft", "itl", "tpot", "queue")
SOURCE_RANK: tuple[PreemptionSource, ...] = (
    "metrics_counter",
    "v1_stats_field",
    "v0_warning_counter",
    "inferred",
    "none",
)


def analyze(inputs: Sequence[DeploymentInputs], params: AnalysisParams | None = None) -> Report:
    """Analyze every deployment; the report's sources are those of all inputs, in order."""
    p = params if params is not None else AnalysisParams()
    deployments = [analyze_deployment(item, p) for item in inputs]
    return Report(
        deployments=deployments,
        sources=[source for item in inputs for source in item.sources],
        parameters=p.to_dict(),
        groups=summarise_groups(deployments),
    )


# Worst first: the group's state is its worst member's.
_SEVERITY: dict[str, int] = {"over_capacity": 3, "at_risk": 2, "ok": 1, "insufficient_data": 0}


def summarise_groups(deployments: Sequence[DeploymentReport]) -> list[GroupSummary]:
    """One summary per group of servers, from the members' own reports (nothing re-added)."""
    by_group: dict[str, list[DeploymentReport]] = {}
    for d in deployments:
        if d.group is not None:
            by_group.setdefault(d.group, []).append(d)
    out = []
    for name, members in by_group.items():
        states = {d.name: d.verdict.state for d in members}
        worst = max(members, key=lambda d: _SEVERITY[d.verdict.state]).verdict.state
        counts = [d.preemptions.total for d in members if d.preemptions.total is not None]
        servers = [d for d in members if d.windows]
        total = sum(counts) if counts and len(counts) == len(servers) else None
        over = sum(1 for d in members if d.verdict.state == "over_capacity")
        peaks = {d.name: d.capacity.peak_running for d in members}
        each = ", ".join(f"{d.name} {d.verdict.state}" for d in members)
        running = ", ".join(
            f"{d.name} {d.capacity.peak_running}"
            for d in members
            if d.capacity.peak_running is not None
        )
        exact = total is not None and all(d.preemptions.exact for d in servers)
        quality = "exact" if exact else "lower bound"
        message = (
            f"group {name}: {len(members)} members ({each}); {over} over capacity; "
            + (f"preemptions {total} ({quality}, the members' counts added)"
               if total is not None else
               "no group preemption total (not every member has a count)")
            + (f"; peak running per server: {running} (not added: separate engines)"
               if running else "")
        )  # fmt: skip
        out.append(
            GroupSummary(
                name=name,
                members=[d.name for d in members],
                states=states,
                state=worst,
                servers_over_capacity=over,
                preemptions_total=total,
                preemptions_exact=total is not None and all(d.preemptions.exact for d in servers),
                peak_running=peaks,
                num_gpu_blocks={d.name: d.capacity.num_gpu_blocks for d in members},
                message=message,
            )
        )
    return out


def analyze_deployment(inputs: DeploymentInputs, params: AnalysisParams) -> DeploymentReport:
    stats = kind_frames(inputs.logs, "scheduler_stats")
    warnings = kind_frames(inputs.logs, "preemption_warning")
    metrics = latency.usable_samples(inputs.metrics)
    lat = inputs.latencies if inputs.latencies is not None and inputs.latencies.height else None
    if lat is None:
        # No client results: per-request latency from the log's received -> finished lines.
        derived = log_latencies(inputs.logs)
        lat = derived if derived.height else None

    grid = data_windows(
        params,
        (stats, "timestamp"),
        (warnings, "timestamp"),
        (metrics, "timestamp"),
        (lat, "start"),
        (inputs.reduced.starts() if inputs.reduced is not None else None, "timestamp"),
    )
    facts = capacity_facts(inputs.logs, metrics, lat, [])
    # max_num_seqs not printed: read off a plateau of the running count (said so wherever used).
    inferred_cap = running_plateau(stats, metrics, params) if facts.max_num_seqs is None else None
    v0_logs = [lf for lf in inputs.logs if lf.log_era in ("v0", "mixed")]
    table, v0 = build_window_table(
        stats,
        warnings,
        metrics,
        params,
        grid,
        v0_warns=any(v0_warns_preemption(lf.vllm_version) for lf in v0_logs),
        max_num_seqs=facts.max_num_seqs or inferred_cap,
        reduced=inputs.reduced,
        max_num_batched_tokens=facts.max_num_batched_tokens,
    )
    latency_by_window = _latency(grid, metrics, lat, params, inputs.reduced)
    windows = [
        Window(
            start=row["start"],
            end=row["end"],
            preemptions=row["preemptions"],
            preemption_quality=row["preemption_quality"],
            preemption_source=row["preemption_source"],
            likely_preempting=row["likely_preempting"],
            forced_preemptions=row["forced_preemptions"],
            kv_usage_max=row["kv_usage_max"],
            kv_usage_mean=row["kv_usage_mean"],
            running_mean=row["running_mean"],
            running_max=row["running_max"],
            waiting_mean=row["waiting_mean"],
            waiting_max=row["waiting_max"],
            waiting_for_capacity_max=row["waiting_for_capacity_max"],
            prompt_throughput=row["prompt_throughput"],
            generation_throughput=row["generation_throughput"],
            idle=row["idle"],
            over_capacity=row["over_capacity"],
            latency=latency_by_window[i],
            samples=row["samples"],
            queue_bound=row["queue_bound"],
            evidence_first=row["evidence_first"],
            evidence_last=row["evidence_last"],
            tokens_per_step=row["tokens_per_step"],
            tokens_per_step_source=row["tokens_per_step_source"],
            limits=list(row["limits"] or []),
        )
        for i, row in enumerate(table.iter_rows(named=True))
    ]
    spans = source_spans(
        {
            "log": [(stats, "timestamp"), (warnings, "timestamp")],
            "/metrics": [(metrics, "timestamp")],
            "client results": [(lat, "start"), (run_times(inputs.runs), "start")],
        }
    )
    runs = [client_run(path, run) for path, run in inputs.runs]
    preemptions = _preemption_summary(windows, v0, metrics)
    running = [w.running_max for w in windows if w.running_max is not None]
    capacity = dataclasses.replace(
        facts,
        peak_running=max(running) if running else None,
        # The demand from the client's own totals when no request row gives it.
        mean_tokens_per_request=facts.mean_tokens_per_request
        or next((r.mean_tokens_per_request for r in runs if r.mean_tokens_per_request), None),
    )
    correlation = correlate(windows, params)
    found = episodes(windows, params, correlation.metric, _sampling_interval(stats, metrics))
    over = [w for w in windows if w.over_capacity]
    # The last over-capacity window's evidence (or start) lies inside its sources' span.
    last_over = (over[-1].evidence_last or over[-1].start) if over else None
    now = params.now or span_end(spans, last_over)
    verdict = decide(
        windows,
        found,
        correlation,
        preemptions,
        capacity,
        params,
        now,
        _no_count_reason(inputs.logs, metrics),
        max_num_seqs_inferred=inferred_cap,
    )
    disjoint = disjoint_evidence(spans, judged=params.now is None and len(spans) > 1)
    if disjoint is not None:
        verdict = dataclasses.replace(verdict, evidence=[*verdict.evidence, disjoint])
    if runs:
        extra = [run_evidence(i, r, correlation.metric, params) for i, r in enumerate(runs)]
        verdict = dataclasses.replace(verdict, evidence=[*verdict.evidence, *extra])
    events = find_events(
        config=kind_frames(inputs.logs, "config"),
        warnings=warnings,
        activity=[stats, warnings, kind_frames(inputs.logs, "requests")],
        metrics=metrics,
        # Startup lines come a little before the first record they explain: one window early.
        span=(windows[0].start - (windows[0].end - windows[0].start), windows[-1].end)
        if windows
        else None,
    )
    # Advice is explored and decided by replaying the observed workload
    # (analysis/sim/observed.py) with the step cost whose replay of now reproduces the data
    # (closedloop.py), as `whatif` does: one calibration behind every "verified". An inferred
    # cap is the replay's current max_num_seqs.
    plan = advise(
        verdict,
        capacity,
        windows,
        params,
        replay=lambda: calibrated(
            build_replay(
                capacity,
                replay_inputs(inputs, latencies=lat),
                preemptions=preemptions.total,
                current={"max_num_seqs": inferred_cap} if inferred_cap else None,
            )
        ),
    )
    verdict = settle_limit(
        verdict, plan.relief, verified=plan.check is not None and plan.check.verified
    )
    return DeploymentReport(
        name=inputs.name,
        verdict=verdict,
        preemptions=preemptions,
        capacity=capacity,
        advice=plan.items,
        windows=windows,
        episodes=found,
        correlation=correlation,
        sources=source_paths(inputs),
        events=events,
        client_runs=runs,
        group=inputs.group,
        advice_check=None if plan.check is None else check_label(plan.check),
    )


def _no_count_reason(logs: Sequence[LogFrames], metrics: pl.DataFrame | None) -> str:
    """Why nothing counts preemptions here, in the words of the inputs given."""
    reasons = []
    eras = {lf.log_era for lf in logs if lf.log_era}
    if eras & {"v1", "mixed"}:
        reasons.append(
            "a V1 log prints no preemption line, and its stats lines have no Preemptions field"
        )
    if eras & {"v0", "mixed"}:
        reasons.append(
            "V0 warns on preemptions only from v0.4.3, and this log is older or does not "
            "print its version"
        )
    if metrics is not None:
        reasons.append("the /metrics samples have no vllm:num_preemptions_total")
    elif logs:
        reasons.append("give /metrics for vLLM's exact counter")
    return "; ".join(reasons) or "nothing in them counts preemptions"


def _sampling_interval(stats: pl.DataFrame, metrics: pl.DataFrame | None) -> float:
    """Median seconds between consecutive stats records (per file and engine), else scrapes."""
    gaps: list[pl.Series] = []
    if stats.height > 1:
        s = stats.filter(pl.col("timestamp").is_not_null()).sort("timestamp")
        gaps.append(
            s.select(
                pl.col("timestamp").diff().over(["source", "engine"]).dt.total_microseconds()
            ).to_series()
        )
    if not gaps and metrics is not None and metrics.height:
        stamps = metrics["timestamp"].drop_nulls().unique().sort()
        gaps.append(stamps.diff().dt.total_microseconds())
    values = pl.concat(gaps).drop_nulls() if gaps else pl.Series([], dtype=pl.Int64)
    values = values.filter(values > 0)
    median = values.median() if values.len() else None
    return float(median) / 1e6 if isinstance(median, int | float) else 0.0


def _latency(
    grid: Sequence[int],
    metrics: pl.DataFrame | None,
    lat: pl.DataFrame | None,
    params: AnalysisParams,
    reduced: MetricWindows | None = None,
) -> list[dict[str, LatencyStats]]:
    """Per window: exact stats from per-request samples, else histogram estimates."""
    result: list[dict[str, LatencyStats]] = [{} for _ in grid]
    if not grid:
        return result
    bounds = [(window_start(w, params), window_start(w + 1, params)) for w in grid]
    if lat is not None:
        for kind in SAMPLE_KINDS:
            if lat[kind].drop_nulls().is_empty():
                continue
            for i, stats in enumerate(latency.samples_windows_stats(lat, kind, bounds)):
                if stats is not None:
                    result[i][kind] = stats
    if reduced is not None:
        for i, win in enumerate(grid):
            for name, stats in reduced.latency.get(win, {}).items():
                result[i].setdefault(name, stats)
    elif metrics is not None:
        for name in HISTOGRAM_KINDS:
            for i, stats in enumerate(latency.histogram_windows_stats(metrics, name, bounds)):
                if stats is not None and name not in result[i]:
                    result[i][name] = stats
    return result


def _preemption_summary(
    windows: Sequence[Window], v0: V0Counter, metrics: pl.DataFrame | None
) -> Preemptions:
    counted = [w for w in windows if w.preemptions is not None]
    total: int | None = sum(w.preemptions or 0 for w in counted) if counted else None
    if v0.unplaced:
        total = (total or 0) + v0.unplaced
    sources = {w.preemption_source for w in windows}
    if v0.warning_lines:
        sources.add("v0_warning_counter")
    best: PreemptionSource = next(s for s in SOURCE_RANK if s in sources or s == "none")
    exact = bool(counted) and all(w.preemption_quality == "exact" for w in counted)
    since = v0.since_start
    lifetime = _counter_lifetime(metrics)
    if lifetime is not None:
        since = max(since or 0, lifetime)
    return Preemptions(
        total=total,
        exact=exact and not v0.unplaced,
        evidence=best,
        warning_lines=v0.warning_lines,
        windows_counted=len(counted),
        windows_with_preemption=sum(
            1 for w in counted if (w.preemptions or 0) > 0 and not w.forced_preemptions
        ),
        since_start=since,
        cache_reset_preemptions=sum(w.preemptions or 0 for w in counted if w.forced_preemptions),
        unplaced=v0.unplaced,
    )


def _counter_lifetime(metrics: pl.DataFrame | None) -> int | None:
    """num_preemptions since each engine started, summed over series and over restarts.

    Each run of a series (split where the counter goes down) ends at its largest value.
    """
    if metrics is None:
        return None
    values = metrics.filter((pl.col("metric") == "num_preemptions") & (pl.col("sample") == "value"))
    if values.is_empty():
        return None
    series = ["source", "model_name", "engine", "labels"]
    runs = (
        values.sort("timestamp")
        .with_columns(
            reset=(pl.col("value") < pl.col("value").shift(1).over(series)).fill_null(False)
        )
        .with_columns(run=pl.col("reset").cast(pl.Int64).cum_sum().over(series))
        .group_by([*series, "run"])
        .agg(pl.col("value").max())
    )
    return round(float(runs["value"].sum()))
