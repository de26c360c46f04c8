"""The analyzer's entry point: frames of one or more deployments in, a typed Report out.

Pure: no file, socket or clock. The batch report, the exporter (on sliding windows) and the
demo all call `analyze` / `analyze_deployment`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

import polars as pl
from preemptscope.analysis import latency
from preemptscope.analysis.advice import advise
from preemptscope.analysis.correlation import correlate, episodes
from preemptscope.analysis.events import clean_setting as _clean
from preemptscope.analysis.events import find_events
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import (
    Capacity,
    ClientRun,
    DeploymentReport,
    Evidence,
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
from preemptscope.ingest.bench import BenchRun
from preemptscope.ingest.gathered import DeploymentInputs
from preemptscope.ingest.lifecycle import log_latencies
from preemptscope.ingest.schema import LogFrames, empty
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


def _frames(logs: Iterable[LogFrames], kind: str) -> pl.DataFrame:
    parts = [lf[kind] for lf in logs if kind in lf.frames and not lf[kind].is_empty()]
    return pl.concat(parts, how="vertical_relaxed") if parts else empty(kind)


def analyze_deployment(inputs: DeploymentInputs, params: AnalysisParams) -> DeploymentReport:
    stats = _frames(inputs.logs, "scheduler_stats")
    warnings = _frames(inputs.logs, "preemption_warning")
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
    spans = _source_spans(
        {
            "log": [(stats, "timestamp"), (warnings, "timestamp")],
            "/metrics": [(metrics, "timestamp")],
            "client results": [(lat, "start"), (_run_times(inputs.runs), "start")],
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
    now = params.now or _span_end(spans, last_over)
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
    disjoint = _disjoint_evidence(spans, judged=params.now is None and len(spans) > 1)
    if disjoint is not None:
        verdict = dataclasses.replace(verdict, evidence=[*verdict.evidence, disjoint])
    if runs:
        extra = [run_evidence(i, r, correlation.metric, params) for i, r in enumerate(runs)]
        verdict = dataclasses.replace(verdict, evidence=[*verdict.evidence, *extra])
    events = find_events(
        config=_frames(inputs.logs, "config"),
        warnings=warnings,
        activity=[stats, warnings, _frames(inputs.logs, "requests")],
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
        sources=_source_paths(inputs),
        events=events,
        client_runs=runs,
        group=inputs.group,
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


def _run_times(runs: Sequence[tuple[str, BenchRun]]) -> pl.DataFrame:
    """Start and end of the client runs that say when they ran, as one `start` column."""
    times = [t for _, run in runs for t in (run.start, run.end) if t is not None]
    return pl.DataFrame({"start": times}, schema={"start": pl.Datetime("us", "UTC")})


def client_run(path: str, run: BenchRun) -> ClientRun:
    """A client run's whole-run figures in the report's units and names."""
    latency: dict[str, LatencyStats] = {}
    for name, figures in run.stats.items():
        if name not in ("e2e", "ttft", "tpot", "itl"):
            continue
        ratio = (
            figures.p99 / figures.mean
            if figures.p99 is not None and figures.mean not in (None, 0)
            else None
        )
        latency[name] = LatencyStats(
            metric=name,  # type: ignore[arg-type]
            source="run",
            count=figures.count,
            mean=figures.mean,
            p50=figures.p50,
            p90=figures.p90,
            p99=figures.p99,
            p99_over_mean=ratio,
        )
    tokens = None
    if run.input_tokens is not None and run.output_tokens is not None and run.requests:
        tokens = (run.input_tokens + run.output_tokens) / run.requests
    return ClientRun(
        source=path,
        label=run.label,
        start=run.start,
        end=run.end,
        duration_s=run.duration_s,
        requests=run.requests,
        failed=run.failed,
        request_throughput=run.request_throughput,
        goodput=run.goodput,
        mean_tokens_per_request=tokens,
        request_rate=run.request_rate
        if run.request_rate is not None and math.isfinite(run.request_rate)
        else None,
        max_concurrency=run.max_concurrency,
        latency=latency,
    )


def run_evidence(
    index: int, run: ClientRun, metric: str | None, params: AnalysisParams
) -> Evidence:
    """One sentence per client run, from its own whole-run figures."""
    chosen = metric if metric in run.latency else None
    chosen = chosen or next((m for m in params.latency_preference if m in run.latency), None)
    path = f"client_runs.{index}"
    quotes: dict[str, float | int | str | None] = {f"{path}.label": run.label}
    parts = []
    if run.requests is not None:
        quotes[f"{path}.requests"] = run.requests
        parts.append(f"{run.requests} requests")
    if run.duration_s is not None:
        quotes[f"{path}.duration_s"] = run.duration_s
        parts.append(f"in {run.duration_s:.1f} s")
    if run.request_throughput is not None:
        quotes[f"{path}.request_throughput"] = run.request_throughput
        parts.append(f"({run.request_throughput:.2f} req/s)")
    if run.goodput is not None:
        quotes[f"{path}.goodput"] = run.goodput
        parts.append(f"goodput {run.goodput:.2f} req/s")
    when = (
        f" from {run.start:%Y-%m-%d %H:%M:%S} UTC"
        if run.start is not None
        else " (the file does not say when it ran: not placed in time)"
    )
    figures = ""
    value = None
    if chosen is not None:
        stats = run.latency[chosen]
        lat = f"{path}.latency.{chosen}"
        shown = []
        if stats.p99 is not None:
            quotes[f"{lat}.p99"] = stats.p99
            shown.append(f"p99 {stats.p99:.3f} s")
        if stats.mean is not None:
            quotes[f"{lat}.mean"] = stats.mean
            shown.append(f"mean {stats.mean:.3f} s")
        if stats.p99_over_mean is not None:
            quotes[f"{lat}.p99_over_mean"] = stats.p99_over_mean
            shown.append(f"p99/mean {stats.p99_over_mean:.2f}")
            value = stats.p99_over_mean
        figures = f"; whole-run {chosen} " + ", ".join(shown) if shown else ""
    # vllm bench labels an unlabelled run by its request rate: say so rather than "run 4.0".
    rate = run.request_rate
    named = (
        f"at {rate:g} req/s offered"
        if rate is not None and run.label in (str(rate), f"{rate:g}")
        else run.label
    )
    return Evidence(
        "client_run",
        f"client run {named}{when}: " + " ".join(parts) + figures,
        value,
        quotes,
    )


Span = tuple[str, datetime, datetime]


def _source_spans(
    sources: dict[str, list[tuple[pl.DataFrame | None, str]]],
) -> list[Span]:
    """(source, first, last) time of each input kind that has timestamps."""
    spans: list[Span] = []
    for name, parts in sources.items():
        lows, highs = [], []
        for frame, column in parts:
            if frame is None or frame.is_empty():
                continue
            times = frame[column].drop_nulls()
            low, high = times.min(), times.max()
            if isinstance(low, datetime) and isinstance(high, datetime):
                lows.append(low)
                highs.append(high)
        if lows:
            spans.append((name, min(lows), max(highs)))
    return spans


def _clusters(spans: Sequence[Span]) -> list[tuple[list[str], datetime, datetime]]:
    """Sources that overlap in time, merged; disjoint groups stay apart, in time order."""
    out: list[tuple[list[str], datetime, datetime]] = []
    for name, low, high in sorted(spans, key=lambda s: s[1]):
        if out and low <= out[-1][2]:
            names, first, last = out[-1]
            out[-1] = ([*names, name], first, max(last, high))
        else:
            out.append(([name], low, high))
    return out


def _span_end(spans: Sequence[Span], moment: datetime | None) -> datetime | None:
    """The end of the data for recency: the end of the overlapping sources holding `moment`.

    A source that does not overlap the others (a /metrics snapshot copied today beside an
    old log) must not make the others' evidence old: each group is judged on its own span.
    """
    groups = _clusters(spans)
    if not groups:
        return None
    if moment is not None:
        before = [g for g in groups if g[1] <= moment]
        if before:
            return before[-1][2]
    return groups[-1][2]


def _disjoint_evidence(spans: Sequence[Span], *, judged: bool) -> Evidence | None:
    """Sources of one deployment that never overlap in time: usually a wrong --tz or --year."""
    groups = _clusters(spans)
    if len(groups) < 2:
        return None
    (a_names, a0, a1), (b_names, b0, b1) = groups[0], groups[1]
    gap = (b0 - a1).total_seconds()
    a, b = " + ".join(a_names), " + ".join(b_names)
    how = "recency is judged on each one's own span; " if judged else ""
    return Evidence(
        "sources_disjoint",
        f"the sources are disjoint: the {a} ({a0:%Y-%m-%d %H:%M} to {a1:%Y-%m-%d %H:%M} UTC) "
        f"and the {b} ({b0:%Y-%m-%d %H:%M} to {b1:%Y-%m-%d %H:%M} UTC) never overlap "
        f"({gap / 3600:.1f} h apart): {how}check --tz / --year for the log and "
        "--bench-start for client results",
        gap,
    )


def _source_paths(inputs: DeploymentInputs) -> list[str]:
    paths = [s.path for s in inputs.sources] or [lf.source for lf in inputs.logs]
    return list(dict.fromkeys(paths))


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


# -------------------------------------------------------------------------------------------
# Capacity facts: startup KV lines, engine config, cache_config_info, observed load

_INT_KEYS = {
    "max_num_seqs",
    "max_num_batched_tokens",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "block_size",
    "max_model_len",
}


def _as_int(value: Any) -> int | None:
    text = _clean(value)
    try:
        return int(float(text.replace(",", ""))) if text is not None else None
    except ValueError:
        return None


def _as_float(value: Any) -> float | None:
    text = _clean(value)
    try:
        number = float(text.replace(",", "")) if text is not None else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


def _as_bool(value: Any) -> bool | None:
    """A flag as vLLM prints it (True/False in args and config lines, true/false elsewhere)."""
    text = _clean(value)
    if text is None:
        return None
    return {"true": True, "1": True, "false": False, "0": False}.get(text.lower())


def capacity_facts(
    logs: Sequence[LogFrames],
    metrics: pl.DataFrame | None,
    latencies: pl.DataFrame | None,
    windows: Sequence[Window],
) -> Capacity:
    """What the deployment had (KV blocks/tokens, memory, flags) and what the load needed."""
    config: dict[str, str] = {}
    for labels in latency.info_labels(metrics) if metrics is not None else []:
        for key, value in labels.items():
            if (clean := _clean(value)) is not None:
                config.setdefault(key, clean)
    conf = _frames(logs, "config")
    for key, value in conf.select("key", "value").iter_rows():
        if (clean := _clean(value)) is not None:
            config[key] = clean  # later lines win: the last start of the engine
    kv: dict[str, tuple[float, int | None]] = {}
    kv_frame = _frames(logs, "kv_capacity").filter(pl.col("value").is_not_null())
    for kind, value, context in kv_frame.select("kind", "value", "context_tokens").iter_rows():
        kv[kind] = (float(value), context)
    versions = [lf.vllm_version for lf in logs if lf.vllm_version]

    def kv_value(kind: str) -> float | None:
        return kv[kind][0] if kind in kv else None

    tokens = kv_value("kv_cache_tokens") or _as_float(config.get("kv_cache_size_tokens"))
    blocks = kv_value("gpu_blocks") or _as_float(config.get("num_gpu_blocks"))
    block_size = _as_int(config.get("block_size"))
    if tokens is None and blocks is not None and block_size:
        tokens = blocks * block_size
    if block_size is None and tokens and blocks and tokens % blocks == 0:
        block_size = int(tokens // blocks)  # V1 logs tokens and blocks but not the block size
    if blocks is None and tokens and block_size and tokens % block_size == 0:
        # V1 logs the KV cache in tokens only ("GPU KV cache size: N tokens"); with the block
        # size printed (non-default args, engine config) the block count follows.
        blocks = tokens / block_size
    context = kv["max_concurrency"][1] if "max_concurrency" in kv else None
    concurrency = kv_value("max_concurrency") or _as_float(config.get("kv_cache_max_concurrency"))
    running = [w.running_max for w in windows if w.running_max is not None]
    return Capacity(
        num_gpu_blocks=round(blocks) if blocks is not None else None,
        block_size=block_size,
        kv_cache_tokens=round(tokens) if tokens is not None else None,
        max_concurrency=concurrency,
        max_concurrency_context_tokens=kv["max_concurrency"][1]
        if "max_concurrency" in kv
        else None,
        available_kv_memory_gib=kv_value("available_kv_memory") or kv_value("memory_for_kv"),
        model_weights_gib=kv_value("model_weights"),
        gpu_memory_utilization=_as_float(config.get("gpu_memory_utilization"))
        or kv_value("gpu_memory_utilization"),
        max_num_seqs=_as_int(config.get("max_num_seqs")),
        max_num_batched_tokens=_as_int(config.get("max_num_batched_tokens")),
        tensor_parallel_size=_as_int(config.get("tensor_parallel_size")),
        pipeline_parallel_size=_as_int(config.get("pipeline_parallel_size")),
        scheduling_policy=_clean(config.get("scheduling_policy")),
        vllm_version=versions[-1] if versions else _clean(config.get("vllm_version")),
        model=_clean(config.get("served_model_name") or config.get("model")),
        gpu_memory_total_gib=kv_value("memory_total"),
        max_model_len=_as_int(config.get("max_model_len")),
        enable_prefix_caching=_as_bool(config.get("enable_prefix_caching")),
        mean_tokens_per_request=_mean_tokens(latencies, metrics),
        peak_running=max(running) if running else None,
    )


def _mean_tokens(latencies: pl.DataFrame | None, metrics: pl.DataFrame | None) -> float | None:
    """Mean prompt + output tokens per request: client rows first, else vLLM's histograms."""
    if latencies is not None:
        both = latencies.filter(
            pl.col("prompt_tokens").is_not_null() & pl.col("output_tokens").is_not_null()
        )
        if both.height:
            return float((both["prompt_tokens"] + both["output_tokens"]).mean())  # type: ignore[arg-type]
    if metrics is None:
        return None
    total = 0.0
    for name in ("request_prompt_tokens", "request_generation_tokens"):
        rows = metrics.filter((pl.col("metric") == name) & pl.col("sample").is_in(["sum", "count"]))
        if rows.is_empty():
            return None
        last = rows.filter(pl.col("timestamp") == pl.col("timestamp").max())
        sums = last.filter(pl.col("sample") == "sum")["value"].sum()
        counts = last.filter(pl.col("sample") == "count")["value"].sum()
        if not counts:
            return None
        total += float(sums) / float(counts)
    return total
