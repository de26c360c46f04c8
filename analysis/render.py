"""The terminal summary of a Report (rich): the same facts as `--json`, for people.

Text that comes from logs (paths, model names) is printed through rich's escaping, so a log
cannot inject console markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from preemptscope.analysis.report import (
    Capacity,
    Correlation,
    DeploymentReport,
    Event,
    Preemptions,
    Report,
    SourceSummary,
    Window,
)
from preemptscope.analysis.verdict import limit_line
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

STATE_STYLE = {
    "ok": "bold green",
    "at_risk": "bold yellow",
    "over_capacity": "bold red",
    "insufficient_data": "bold bright_black",
}
QUALITY_MARK = {"exact": "", "lower_bound": "≥", "inferred": "~", "none": ""}
MAX_WINDOW_ROWS = 12
MAX_EVENT_ROWS = 10


def _time(value: datetime | None) -> str:
    return value.strftime("%m-%d %H:%M:%S") if value is not None else "-"


def _num(value: float | int | None, fmt: str = "{:,.0f}") -> str:
    return fmt.format(value) if value is not None else "-"


def _pct(value: float | None) -> str:
    return f"{value * 100:.0f} %" if value is not None else "-"


def sources_table(sources: Sequence[SourceSummary]) -> Table:
    table = Table(title="Sources", title_justify="left", expand=False)
    for name in ("path", "kind", "deployment", "lines", "unrecognised", "era", "vLLM"):
        table.add_column(
            name,
            justify="right" if name in ("lines", "unrecognised") else "left",
            overflow="fold",
        )
    for s in sources:
        table.add_row(
            escape(s.path),
            s.kind,
            escape(s.deployment),
            _num(s.lines),
            _num(s.unrecognized_lines),
            s.log_era or "-",
            escape(s.vllm_version or "-"),
        )
    return table


def _preemption_line(p: Preemptions) -> Text:
    if p.total is None:
        note = "inferred only (no count in these inputs)" if p.evidence == "inferred" else "none"
        return Text(f"Preemptions: {note}")
    quality = "exact" if p.exact else "lower bound"
    parts = [
        f"Preemptions: {p.total:,} ({quality}, from {p.evidence.replace('_', ' ')})",
        f"in {p.windows_with_preemption} of {p.windows_counted} window(s) with a count",
    ]
    if p.unplaced:
        parts.append(f"{p.unplaced:,} without a timestamp")
    if p.warning_lines:
        parts.append(f"{p.warning_lines} V0 warning line(s)")
    if p.since_start is not None:
        parts.append(f"counter since engine start {p.since_start:,}")
    if p.cache_reset_preemptions:
        parts.append(f"{p.cache_reset_preemptions:,} in cache resets")
    return Text("; ".join(parts))


def capacity_table(c: Capacity) -> Table | None:
    rows = [
        ("model", escape(c.model) if c.model else None),
        ("vLLM", escape(c.vllm_version) if c.vllm_version else None),
        ("GPU blocks", _num(c.num_gpu_blocks) if c.num_gpu_blocks is not None else None),
        ("block size", str(c.block_size) if c.block_size else None),
        ("KV cache tokens", _num(c.kv_cache_tokens) if c.kv_cache_tokens is not None else None),
        (
            "max concurrency",
            f"{c.max_concurrency:.2f}x"
            + (
                f" for {c.max_concurrency_context_tokens:,} tokens"
                if c.max_concurrency_context_tokens
                else ""
            )
            if c.max_concurrency is not None
            else None,
        ),
        (
            "KV memory / GPU",
            f"{c.available_kv_memory_gib:.2f} GiB" if c.available_kv_memory_gib else None,
        ),
        ("weights / GPU", f"{c.model_weights_gib:.2f} GiB" if c.model_weights_gib else None),
        ("GPU memory", f"{c.gpu_memory_total_gib:.2f} GiB" if c.gpu_memory_total_gib else None),
        ("gpu_memory_utilization", _opt(c.gpu_memory_utilization)),
        ("max_num_seqs", _opt(c.max_num_seqs)),
        ("max_num_batched_tokens", _opt(c.max_num_batched_tokens)),
        ("tensor / pipeline parallel", _parallel(c)),
        ("scheduling_policy", c.scheduling_policy),
        ("max_model_len", _opt(c.max_model_len)),
        (
            "mean tokens / request",
            _num(c.mean_tokens_per_request) if c.mean_tokens_per_request else None,
        ),
        ("peak running", _opt(c.peak_running)),
    ]
    shown = [(k, v) for k, v in rows if v is not None]
    if not shown:
        return None
    table = Table(title="Capacity", title_justify="left", show_header=False)
    table.add_column("fact")
    table.add_column("value")
    for key, value in shown:
        table.add_row(key, value)
    return table


def _opt(value: float | int | None) -> str | None:
    return None if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _parallel(c: Capacity) -> str | None:
    if c.tensor_parallel_size is None and c.pipeline_parallel_size is None:
        return None
    return f"{c.tensor_parallel_size or 1} / {c.pipeline_parallel_size or 1}"


def _tail(window: Window, metric: str | None) -> str:
    """p99/mean of the deployment's one latency metric (the correlation's), nothing else."""
    stats = window.latency.get(metric) if metric is not None else None
    if stats is None or stats.p99_over_mean is None:
        return "-"
    return f"{stats.p99_over_mean:.1f}{'*' if stats.bucket_limited else ''}"


def windows_table(windows: Sequence[Window], metric: str | None = None) -> Table:
    """Over-capacity and preempting windows first (up to MAX_WINDOW_ROWS), in time order."""
    interesting = [
        w
        for w in windows
        if w.over_capacity
        or w.queue_bound
        or w.forced_preemptions
        or w.likely_preempting
        or (w.preemptions or 0)
    ]
    shown = interesting[:MAX_WINDOW_ROWS]
    active = sum(1 for w in windows if w.samples and not w.idle)
    idle = sum(1 for w in windows if w.idle)
    over = sum(1 for w in windows if w.over_capacity)
    title = f"Windows: {len(windows)} ({active} active, {idle} idle, {over} over capacity)" + (
        f"; first {len(shown)} of {len(interesting)} notable" if shown else ""
    )
    table = Table(title=title, title_justify="left")
    tail = f"{metric} p99/mean" if metric is not None else "p99/mean"
    for name in ("start", "preempt", "KV max", "running", "waiting", tail, "state"):
        table.add_column(name, justify="left" if name in ("start", "state") else "right")
    for w in shown:
        count = (
            f"{QUALITY_MARK[w.preemption_quality]}{w.preemptions}"
            if w.preemptions is not None
            else ("likely" if w.likely_preempting else "-")
        )
        state = (
            "cache reset"
            if w.forced_preemptions
            else "over capacity"
            if w.over_capacity
            else "queue-bound"
            if w.queue_bound
            else "idle"
            if w.idle
            else ""
        )
        table.add_row(
            _time(w.start),
            count,
            _pct(w.kv_usage_max),
            _num(w.running_max),
            _num(w.waiting_max),
            _tail(w, metric),
            state,
        )
    return table


BARS = " ▁▂▃▄▅▆▇█"
SPARK_WIDTH = 60


def sparkline(values: Sequence[float | None], top: float | None = None) -> str:
    """One character per value (max over groups when longer than SPARK_WIDTH); blank = none."""
    if len(values) > SPARK_WIDTH:
        size = -(-len(values) // SPARK_WIDTH)
        groups = [values[i : i + size] for i in range(0, len(values), size)]
        values = [max((v for v in g if v is not None), default=None) for g in groups]
    known = [v for v in values if v is not None]
    ceiling = top if top is not None else max(known, default=0.0)
    out = []
    for v in values:
        if v is None:
            out.append("·")
        elif ceiling <= 0 or v <= 0:
            out.append(BARS[1] if v is not None and v <= 0 else " ")
        else:
            out.append(BARS[min(8, max(1, round(8 * v / ceiling)))])
    return "".join(out)


def timeline(windows: Sequence[Window], metric: str | None = None) -> Text | None:
    """KV, waiting, preemptions and the latency metric's p99 and p99/mean, one line each."""
    if len(windows) < 2:
        return None
    rows = [
        ("KV usage", [w.kv_usage_max for w in windows], 1.0),
        (
            "waiting",
            [None if w.waiting_max is None else float(w.waiting_max) for w in windows],
            None,
        ),
        (
            "preemptions",
            [
                None
                if w.preemptions is None and not w.likely_preempting
                else float(w.preemptions or (1 if w.likely_preempting else 0))
                for w in windows
            ],
            None,
        ),
        (f"{metric} p99", [_tail_value(w, metric, "p99") for w in windows], None),
        (f"{metric} p99/mean", [_tail_value(w, metric) for w in windows], None),
    ]
    text = Text(f"Timeline {_time(windows[0].start)} → {_time(windows[-1].end)} (· no data)\n")
    shown = [row for row in rows if any(v is not None for v in row[1])]
    for i, (label, values, top) in enumerate(shown):
        end = "\n" if i < len(shown) - 1 else ""
        text.append(f"  {label:<16}{sparkline(values, top)}{end}")
    return text


def _tail_value(window: Window, metric: str | None, field: str = "p99_over_mean") -> float | None:
    stats = window.latency.get(metric) if metric is not None else None
    value = getattr(stats, field) if stats is not None else None
    return float(value) if value is not None else None


def _windows(n: int) -> str:
    return f"{n} window{'' if n == 1 else 's'}"


def _tail_figures(p99_over_mean: float | None, p99: float | None) -> str | None:
    parts = [
        f"p99/mean {p99_over_mean:.2f}" if p99_over_mean is not None else None,
        f"p99 {p99:.2f} s" if p99 is not None else None,
    ]
    shown = [p for p in parts if p is not None]
    return ", ".join(shown) if shown else None


def _correlation_line(
    c: Correlation, *, has_windows: bool = True, has_runs: bool = False
) -> Text | None:
    """Tail latency with vs without preemption, and the rank correlation, in plain words.

    Every case reads as a sentence: both groups, only one of them, or no latency at all.
    """
    n_with, n_without = c.windows_with_preemption, c.windows_without_preemption
    if c.metric is None:
        if not has_windows:
            return None
        if has_runs:
            return Text(
                "Correlation: the client results hold whole-run figures only (no per-request "
                "rows), so preemption cannot be set against the tail window by window"
            )
        return Text(
            "Correlation: no latency in these inputs (client results, request log lines or "
            "/metrics histograms), so preemption cannot be set against the tail"
        )
    with_p = _tail_figures(c.p99_over_mean_with, c.p99_with)
    without = _tail_figures(c.p99_over_mean_without, c.p99_without)
    parts: list[str] = []
    pairs = (
        ("p99/mean", c.p99_over_mean_with, c.p99_over_mean_without, "{:.2f}"),
        ("p99", c.p99_with, c.p99_without, "{:.2f} s"),
    )
    for label, mine, other, fmt in pairs:
        if mine is None or other is None:
            continue
        a, b = fmt.format(mine), fmt.format(other)
        parts.append(
            f"{label} {a} vs {b}"
            if parts  # the groups are named once, in the first comparison
            else f"{label} {a} with preemption ({_windows(n_with)}) vs {b} without ({n_without})"
        )
    if not parts:  # one group has no figure to compare with: say what each group has
        if with_p is not None:
            parts.append(f"with preemption ({_windows(n_with)}): {with_p}")
        elif n_with:
            parts.append(f"no {c.metric} latency in the {_windows(n_with)} with preemption")
        else:
            parts.append("no window with preemption to compare")
        if without is not None:
            parts.append(f"without preemption ({_windows(n_without)}): {without}")
        elif n_without:
            parts.append(f"no {c.metric} latency in the {_windows(n_without)} without preemption")
        else:
            parts.append("no window without preemption to compare")
    if c.conclusion == "too_few":
        parts.append(f"rank correlation: too few windows to tell ({c.pairs} pair(s))")
    elif c.spearman_rho is not None:
        p = f", p = {c.p_value:.2g}" if c.p_value is not None else ""
        parts.append(f"Spearman rho {c.spearman_rho:+.2f} (p99/mean, {c.pairs} windows{p})")
        if c.spearman_rho_p99 is not None:
            p99 = f", p = {c.p_value_p99:.2g}" if c.p_value_p99 is not None else ""
            parts.append(f"{c.spearman_rho_p99:+.2f} (p99, {c.pairs_p99} windows{p99})")
        if c.best_lag_windows and c.best_lag_rho is not None and c.best_lag_p_value is not None:
            parts.append(
                f"strongest at lag {c.best_lag_windows} ({c.best_lag_rho:+.2f}, "
                f"{c.best_lag_pairs} pairs, adjusted p = {c.best_lag_p_value:.2g})"
            )
    return Text(f"Correlation ({c.metric}): " + "; ".join(parts))


def _events_text(events: Sequence[Event]) -> Text | None:
    """Restarts and config changes, one line each (the first MAX_EVENT_ROWS)."""
    if not events:
        return None
    text = Text("Events (restarts, config changes):")
    for e in events[:MAX_EVENT_ROWS]:
        label = "config change: " if e.kind == "config_change" else ""  # restarts say so
        text.append(f"\n  {_time(e.time)}  {label}{e.message}")
    if len(events) > MAX_EVENT_ROWS:
        text.append(f"\n  ... and {len(events) - MAX_EVENT_ROWS} more (see --json)")
    return text


def deployment_panel(d: DeploymentReport) -> Panel:
    state = d.verdict.state
    title = Text.assemble(
        (d.name, "bold"),  # Text is literal: no markup to escape
        "  ",
        (state.replace("_", " ").upper(), STATE_STYLE[state]),
        f"  ({d.verdict.problem} problem)"
        if d.verdict.problem in ("capacity", "throughput", "ordering")
        else "",
    )
    parts: list[RenderableType] = []
    limit = limit_line(d.verdict)
    if limit is not None:
        parts.append(Text(limit, style="bold"))
    for e in d.verdict.evidence:
        if e.code == "limit" and limit is not None:
            continue  # the line above says it
        parts.append(Text(f"• {e.message}"))
    parts.append(_preemption_line(d.preemptions))
    correlation = _correlation_line(
        d.correlation, has_windows=bool(d.windows), has_runs=bool(d.client_runs)
    )
    if correlation is not None:
        parts.append(correlation)
    line = timeline(d.windows, d.correlation.metric)
    if line is not None:
        parts.append(line)
    events = _events_text(d.events)
    if events is not None:
        parts.append(events)
    if d.windows:
        table = windows_table(d.windows, d.correlation.metric)
        parts.append(table if table.row_count else Text(str(table.title)))
    if d.episodes:
        episodes = Table(title="Over-capacity episodes", title_justify="left")
        for name in ("start", "end", "windows", "preemptions", "peak KV", "peak waiting"):
            episodes.add_column(name)
        for ep in d.episodes:
            episodes.add_row(
                _time(ep.start),
                _time(ep.end),
                str(ep.windows),
                _num(ep.preemptions),
                _pct(ep.peak_kv_usage),
                _num(ep.peak_waiting),
            )
        parts.append(episodes)
    capacity = capacity_table(d.capacity)
    if capacity is not None:
        parts.append(capacity)
    if d.advice:
        parts.append(Text("Advice, in the order to try it:", style="bold"))
        if d.advice_check:
            parts.append(Text(d.advice_check + "."))
        for a in d.advice:
            change = f"{a.flag}: {a.current or '?'} -> {a.suggested or 'lower'}" if a.flag else ""
            parts.append(
                Text.assemble(
                    f"{a.rank}. ",
                    (change or a.action.replace("_", " "), "bold"),
                    f"  {a.reason}",
                )
            )
    return Panel(Group(*parts), title=title, title_align="left")


def render_report(report: Report, console: Console) -> None:
    if report.sources:
        console.print(sources_table(report.sources))
        for source in report.sources:
            for note in source.notes:
                console.print(Text(f"note ({source.path}): {note}", style="yellow"))
    for deployment in report.deployments:
        console.print(deployment_panel(deployment))
    for group in report.groups:
        style = STATE_STYLE[group.state]
        console.print(Text.assemble(("Group ", "bold"), (group.state.upper(), style), "  "),
                      Text(group.message))  # fmt: skip
