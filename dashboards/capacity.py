"""The report's capacity section: concurrency the KV cache allows, the configured limit,
observed demand, and the what-if curve when a sweep was run.

Owns `capacity_figure`; it draws the Report's capacity facts and never runs the simulator.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots
from preemptscope.analysis.report import DeploymentReport
from preemptscope.dashboards._plot import COLORS, TITLE_PLACE, WhatIfInput, WhatIfPoint, plot_text


def _fmt_int(value: float | int | None) -> str:
    return "unknown" if value is None else f"{value:,.0f}"


def capacity_figure(
    dep: DeploymentReport, whatif: Sequence[WhatIfInput] | None = None
) -> go.Figure:
    """Concurrency the KV cache allows vs the configured limit vs observed demand; what-if curve."""
    cap = dep.capacity
    windows = dep.windows
    running_peak = max((w.running_max for w in windows if w.running_max is not None), default=None)
    running_means = [w.running_mean for w in windows if w.running_mean is not None]
    demand_peak = max(
        (
            (w.running_max or 0) + (w.waiting_max or 0)
            for w in windows
            if w.running_max is not None or w.waiting_max is not None
        ),
        default=None,
    )
    ctx = cap.max_concurrency_context_tokens
    bars = [
        (
            f"KV fits: {ctx:,}-token requests" if ctx else "KV fits (vLLM's max concurrency)",
            cap.max_concurrency,
            "#2ca02c",
        ),
        (
            f"KV fits: observed {cap.mean_tokens_per_request:,.0f} tokens/request"
            if cap.mean_tokens_per_request
            else "",
            cap.kv_cache_tokens / cap.mean_tokens_per_request
            if cap.kv_cache_tokens and cap.mean_tokens_per_request
            else None,
            "#98df8a",
        ),
        ("max_num_seqs", cap.max_num_seqs, "#7f7f7f"),
        ("running, peak", running_peak, COLORS["running"]),
        (
            "running, mean",
            sum(running_means) / len(running_means) if running_means else None,
            "#aec7e8",
        ),
        ("demand peak (running + waiting)", demand_peak, COLORS["waiting"]),
    ]
    has_whatif = bool(whatif)
    # The what-if panel goes below, not beside: in a half-width cell two panels side by side
    # left the bar labels no room and the two subplot titles ran into each other.
    fig = make_subplots(
        rows=2 if has_whatif else 1,
        cols=1,
        row_heights=[0.45, 0.55] if has_whatif else None,
        vertical_spacing=0.2,
        specs=[[{}], [{"secondary_y": True}]] if has_whatif else [[{}]],
        subplot_titles=(
            ("Concurrency: capacity vs demand", "What-if: max_num_seqs (simulated)")
            if has_whatif
            else None
        ),
    )
    shown = [(label, value, color) for label, value, color in bars if value is not None]
    fig.add_trace(
        go.Bar(
            x=[round(float(v), 1) for _, v, _ in shown],
            y=[label for label, _, _ in shown],
            orientation="h",
            marker={"color": [c for _, _, c in shown]},
            text=[f"{v:,.0f}" for _, v, _ in shown],
            textposition="auto",
            name="requests",
            showlegend=False,
            hovertemplate="%{y}: %{x:,.1f} requests<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="concurrent requests", rangemode="tozero", row=1, col=1)
    if whatif:
        _whatif_traces(fig, [WhatIfPoint(*p) for p in whatif], cap.max_num_seqs)
    kv = f"KV cache {_fmt_int(cap.kv_cache_tokens)} tokens"
    if cap.num_gpu_blocks is not None and cap.block_size is not None:
        kv += f" ({cap.num_gpu_blocks:,} blocks × {cap.block_size})"
    if cap.gpu_memory_utilization is not None:
        kv += f" · gpu_memory_utilization {cap.gpu_memory_utilization:g}"
    details = [kv]
    served = " · ".join(
        part
        for part in (cap.model, f"vLLM {cap.vllm_version}" if cap.vllm_version else None)
        if part
    )
    if served:
        details.append(served)
    heading = "Capacity" if has_whatif else "Capacity vs demand (concurrent requests)"
    fig.update_layout(
        title={
            "font": {"size": 15},
            "text": heading + "".join(f"<br><sup>{plot_text(d)}</sup>" for d in details),
            **TITLE_PLACE,
        },
        height=760 if has_whatif else 420,
        template="plotly_white",
        margin={"l": 70, "r": 30, "t": 110, "b": 50},
        legend={"orientation": "h", "y": -0.12 if has_whatif else -0.2},
        uirevision=dep.name,
    )
    return fig


def _whatif_traces(fig: go.Figure, points: list[WhatIfPoint], current: int | None) -> None:
    points = sorted(points)
    xs = [p.max_num_seqs for p in points]
    fig.add_trace(
        go.Bar(
            x=xs,
            y=[p.preemptions for p in points],
            name="predicted preemptions",
            marker={"color": COLORS["exact"], "opacity": 0.6},
            hovertemplate="max_num_seqs %{x}: %{y:,.0f} preemptions<extra></extra>",
        ),
        row=2,
        col=1,
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[None if p.p99 is None else round(p.p99, 4) for p in points],
            mode="lines+markers",
            name="predicted p99 (s)",
            line={"color": COLORS["e2e"]},
            hovertemplate="max_num_seqs %{x}: p99 %{y:.2f} s<extra></extra>",
        ),
        row=2,
        col=1,
        secondary_y=True,
    )
    if current is not None:
        # Inside the plot, on the side of the line with more room: above it sits the title.
        side = "left" if xs and current > (xs[0] + xs[-1]) / 2 else "right"
        fig.add_vline(
            x=current,
            row=2,
            col=1,
            line={"color": "#555", "dash": "dash"},
            annotation_text=f"current {current}",
            annotation_position=f"top {side}",
        )
    fig.update_xaxes(title_text="max_num_seqs", row=2, col=1)
    fig.update_yaxes(
        title_text="preemptions",
        rangemode="tozero",
        ticklabelstandoff=6,  # clear of the x axis's "0" at the corner
        row=2,
        col=1,
        secondary_y=False,
    )
    fig.update_yaxes(title_text="p99 (s)", rangemode="tozero", row=2, col=1, secondary_y=True)
