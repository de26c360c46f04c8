"""The report's second section: preemption rate against the tail, one point per window.

Owns `preemption_vs_tail_figure`; the correlation it quotes is the Report's own.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from preemptscope.analysis.report import DeploymentReport, Window
from preemptscope.dashboards._plot import (
    COLORS,
    GL_LIMIT,
    METRIC_LABELS,
    TITLE_PLACE,
    VALIDATE_LIMIT,
    plot_text,
    plot_time,
    round_or_none,
    scatter_trace,
)


def _rate_per_minute(window: Window) -> float | None:
    seconds = (window.end - window.start).total_seconds()
    if window.preemptions is None or seconds <= 0:
        return None
    return window.preemptions * 60.0 / seconds


def preemption_vs_tail_figure(dep: DeploymentReport, *, rho_scope: str = "") -> go.Figure:
    """Per window: preemption rate against p99/mean of the correlation's latency metric.

    ρ is the analyzer's (never recomputed here); `rho_scope` says so when the points shown are
    a subset, e.g. " over the whole report" on the live page's shorter ranges.
    """
    corr = dep.correlation
    metric = corr.metric
    traces: list[Any] = []
    # Per group: rates, p99/mean, p99 (hover) and window start (hover, small inputs only: at a
    # week of windows the timestamps alone would be megabytes).
    Group = tuple[list[float], list[float], list[float | None], list[str]]
    points: dict[tuple[bool, str], Group] = {}
    uncounted = 0
    for window in dep.windows:
        stats = window.latency.get(metric) if metric else None
        if stats is None or stats.p99_over_mean is None:
            continue
        rate = _rate_per_minute(window)
        if rate is None:
            uncounted += 1  # no count is not zero preemptions: leave it out, and say so
            continue
        key = (window.over_capacity, window.preemption_quality)
        xs, ys, p99s, starts = points.setdefault(key, ([], [], [], []))
        xs.append(round(rate, 3))
        ys.append(round(stats.p99_over_mean, 3))
        p99s.append(round_or_none(stats.p99, 4))
        starts.append(plot_time(window.start))
    total = sum(len(v[0]) for v in points.values())
    with_time = total <= GL_LIMIT
    for (over, quality), (xs, ys, p99s, starts) in sorted(points.items()):
        state = "over-capacity window" if over else "window"
        traces.append(
            scatter_trace(
                total,
                x=xs,
                y=ys,
                customdata=p99s,
                text=[f"{s} UTC" for s in starts] if with_time else None,
                mode="markers",
                name=f"{state} ({quality.replace('_', ' ')} count)",
                marker={
                    "color": COLORS["exact"] if over else COLORS["running"],
                    "symbol": "circle" if quality == "exact" else "diamond-open",
                    "size": 6,
                    "opacity": 0.6,
                },
                hovertemplate=(
                    "%{x:.2f} preemptions/min<br>p99/mean %{y:.2f}<br>p99 %{customdata:.3f} s"
                    + ("<br>%{text}" if with_time else "")
                    + "<extra></extra>"
                ),
            )
        )
    fig = go.Figure(data=traces, _validate=total <= VALIDATE_LIMIT)
    rho = corr.spearman_rho
    label = METRIC_LABELS.get(metric or "", "latency")
    title = f"Preemption rate vs {label} p99/mean"
    notes = []
    # ρ heads the notes, not the title line: with its scope the line outgrew a half-width chart.
    if corr.conclusion == "too_few":
        notes.append(f"ρ: too few windows to tell ({corr.pairs} pairs)")
    elif rho is not None:
        p = f", p = {corr.p_value:.2g}" if corr.p_value is not None else ""
        notes.append(f"Spearman ρ = {rho:.2f} (n = {corr.pairs}{p}){rho_scope}")
    else:
        title += " (ρ: not enough data)"
    if corr.p99_over_mean_with is not None and corr.p99_over_mean_without is not None:
        notes.append(
            f"p99/mean {corr.p99_over_mean_with:.2f} in {corr.windows_with_preemption} windows "
            f"with preemption vs {corr.p99_over_mean_without:.2f} in "
            f"{corr.windows_without_preemption} without"
        )
    if corr.spearman_rho_p99 is not None:
        notes.append(f"ρ of preemption rate vs p99 itself = {corr.spearman_rho_p99:.2f}")
    if corr.best_lag_windows and corr.best_lag_rho is not None:
        notes.append(
            f"strongest at lag {corr.best_lag_windows} windows (ρ = {corr.best_lag_rho:.2f})"
        )
    if uncounted:
        notes.append(f"{uncounted} windows without a preemption count left out")
    if not total:
        notes.append("no window has both a preemption count and latency")
    # Notes go under the title, where they cannot cover the points.
    title += "".join(f"<br><sup>{plot_text(n)}</sup>" for n in notes)
    fig.update_xaxes(title_text="preemptions per minute", rangemode="tozero")
    # Both axes start at 0: without a standoff the two "0" tick labels touch at the corner.
    fig.update_yaxes(title_text=f"{label} p99 / mean", rangemode="tozero", ticklabelstandoff=6)
    fig.update_layout(
        title={"text": title, "font": {"size": 15}, **TITLE_PLACE},
        height=420,
        legend={"orientation": "h", "y": -0.2},
        template="plotly_white",
        margin={"l": 70, "r": 30, "t": 60 + 20 * len(notes), "b": 50},
        uirevision=dep.name,
    )
    return fig
