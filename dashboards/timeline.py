"""The report's first section: the timeline of one deployment, window by window.

Owns `timeline_figure` (preemptions, latency, KV, queue and running on one time axis, episodes
and events marked). Long ranges: every window is carried (WebGL `scattergl` above `GL_LIMIT`
points; regular windows as `x0`/`dx`); static/plots.js downsamples in the browser. It never
computes a number the Report does not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots
from preemptscope.analysis.report import DeploymentReport, Episode, Event, Window
from preemptscope.dashboards._plot import (
    BAR_LIMIT,
    COLORS,
    KV_FULL,
    KV_HIGH,
    METRIC_LABELS,
    SHAPE_LIMIT,
    VALIDATE_LIMIT,
    TimeAxis,
    column_values,
    plot_text,
    plot_time,
    scatter_trace,
    shown_latency_metrics,
    sig_digits,
    time_axis,
)


def _preemption_traces(windows: Sequence[Window], axis: TimeAxis, row: int) -> list[Any]:
    """Counted preemptions by quality, plus markers for windows with only an inference."""
    n = len(windows)
    traces: list[Any] = []
    kinds = (
        ("exact", "preemptions (exact)", None),
        ("lower_bound", "preemptions (lower bound)", "/"),
        ("inferred", "preemptions (inferred count)", "."),
    )
    for quality, label, pattern in kinds:
        ys = [
            w.preemptions if w.preemption_quality == quality and w.preemptions is not None else None
            for w in windows
        ]
        if all(y is None for y in ys):
            continue
        values = axis.spread(ys)
        common: dict[str, Any] = {
            "name": label,
            "legendgroup": "preemptions",
            "hovertemplate": f"%{{y}} {plot_text(label)}<extra></extra>",
            **axis.trace_x(),
        }
        if n <= BAR_LIMIT:
            # No outline: the template's white edge washes out thin bars.
            marker: dict[str, Any] = {"color": COLORS[quality], "line": {"width": 0}}
            if pattern:
                marker["pattern"] = {"shape": pattern, "fgcolor": "white", "solidity": 0.3}
            traces.append(go.Bar(y=values, width=axis.width_ms, marker=marker, **common))
        else:
            traces.append(
                go.Scattergl(
                    _validate=n <= VALIDATE_LIMIT,
                    y=values,
                    mode="lines",
                    fill="tozeroy",
                    line={"shape": "hv", "width": 1, "color": COLORS[quality]},
                    **common,
                )
            )
    markers: tuple[tuple[Callable[[Window], bool], str, str, str], ...] = (
        (
            lambda w: w.likely_preempting and w.preemptions is None,
            "likely preempting (inferred, no count)",
            "likely",
            "x",
        ),
        (lambda w: w.forced_preemptions, "forced preemptions (cache reset)", "forced", "star"),
    )
    for keep, label, color, symbol in markers:
        ys = [0 if keep(w) else None for w in windows]
        if all(y is None for y in ys):
            continue
        traces.append(
            scatter_trace(
                n,
                mode="markers",
                name=label,
                legendgroup="preemptions",
                marker={"color": COLORS[color], "symbol": symbol, "size": 8},
                hovertemplate=f"{plot_text(label)}<extra></extra>",
                **axis.markers(ys),
            )
        )
    return [(trace, row) for trace in traces]


def _latency_traces(windows: Sequence[Window], axis: TimeAxis, row: int) -> list[Any]:
    n = len(windows)
    traces: list[Any] = []
    for metric in shown_latency_metrics(windows):
        label = METRIC_LABELS[metric]
        stats = [w.latency.get(metric) for w in windows]
        p99 = [sig_digits(s.p99) if s else None for s in stats]
        mean = [sig_digits(s.mean) if s else None for s in stats]
        color = COLORS[metric]
        traces.append(
            scatter_trace(
                n,
                y=axis.spread(p99),
                mode="lines",
                name=f"{label} p99",
                legendgroup=f"lat-{metric}",
                line={"color": color, "width": 2},
                hovertemplate=f"{label} p99 %{{y:.3f}} s<extra></extra>",
                **axis.trace_x(),
            )
        )
        traces.append(
            scatter_trace(
                n,
                y=axis.spread(mean),
                mode="lines",
                name=f"{label} mean",
                legendgroup=f"lat-{metric}",
                line={"color": color, "width": 1, "dash": "dot"},
                hovertemplate=f"{label} mean %{{y:.3f}} s<extra></extra>",
                **axis.trace_x(),
            )
        )
        limited = [
            p if s is not None and s.bucket_limited else None
            for p, s in zip(p99, stats, strict=True)
        ]
        if any(v is not None for v in limited):
            traces.append(
                scatter_trace(
                    n,
                    mode="markers",
                    name=f"{label} p99 is a bucket bound",
                    legendgroup=f"lat-{metric}",
                    marker={"color": color, "symbol": "triangle-up-open", "size": 9},
                    hovertemplate=(
                        f"{label} p99 ≥ %{{y:.3f}} s (histogram bucket bound)<extra></extra>"
                    ),
                    **axis.markers(limited),
                )
            )
    return [(trace, row) for trace in traces]


def _line(
    windows: Sequence[Window],
    axis: TimeAxis,
    get: Callable[[Window], float | int | None],
    digits: int,
    name: str,
    color: str,
    fmt: str,
    dash: str = "solid",
) -> Any:
    return scatter_trace(
        len(windows),
        y=axis.spread(column_values(windows, get, digits)),
        mode="lines",
        name=name,
        line={"color": color, "width": 1.5, "dash": dash},
        hovertemplate=f"{name} %{{y:{fmt}}}<extra></extra>",
        **axis.trace_x(),
    )


def _episode_shapes(episodes: Sequence[Episode]) -> list[dict[str, Any]]:
    return [
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": plot_time(episode.start),
            "x1": plot_time(episode.end),
            "y0": 0,
            "y1": 1,
            "fillcolor": COLORS["episode"],
            "line": {"width": 0},
            "layer": "below",
            "name": "over-capacity episode",
        }
        for episode in episodes
    ]


def _episode_band(windows: Sequence[Window], axis: TimeAxis) -> Any:
    """Over-capacity windows as a WebGL step band in the KV row: exact at any zoom, no shapes."""
    return go.Scattergl(
        _validate=len(windows) <= VALIDATE_LIMIT,
        y=axis.spread([1.05 if w.over_capacity else 0 for w in windows]),
        mode="lines",
        fill="tozeroy",
        line={"shape": "hv", "width": 0, "color": COLORS["episode"]},
        fillcolor=COLORS["episode"],
        name="over-capacity window",
        hoverinfo="skip",
        **axis.trace_x(),
    )


EVENT_STYLE = {
    "restart": ("engine restart", "#000000", "triangle-down"),
    "config_change": ("config change", "#8c564b", "diamond"),
}


def _event_marks(events: Sequence[Event]) -> tuple[list[dict[str, Any]], list[Any]]:
    """A dashed line through every row per event, and a hoverable marker per kind on top."""
    shapes: list[dict[str, Any]] = []
    traces: list[Any] = []
    for kind, (label, color, symbol) in EVENT_STYLE.items():
        mine = [e for e in events if e.kind == kind]
        if not mine:
            continue
        if len(events) <= SHAPE_LIMIT:
            shapes += [
                {
                    "type": "line",
                    "xref": "x",
                    "yref": "paper",
                    "x0": plot_time(e.time),
                    "x1": plot_time(e.time),
                    "y0": 0,
                    "y1": 1,
                    "line": {"color": color, "width": 1, "dash": "dot"},
                    "name": label,
                }
                for e in mine
            ]
        traces.append(
            scatter_trace(
                len(mine),
                x=[plot_time(e.time) for e in mine],
                y=[1.03] * len(mine),
                text=[plot_text(e.message) for e in mine],
                mode="markers",
                name=label,
                marker={"color": color, "symbol": symbol, "size": 10},
                hovertemplate=f"{label}: %{{text}}<extra></extra>",
                cliponaxis=False,
            )
        )
    return shapes, traces


def timeline_figure(dep: DeploymentReport) -> go.Figure:
    """KV usage, requests, preemptions and latency over time, over-capacity episodes shaded."""
    windows = dep.windows
    axis = time_axis(windows)
    metrics = shown_latency_metrics(windows)
    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        row_heights=[0.22, 0.22, 0.22, 0.34],
        subplot_titles=(
            "KV cache usage",
            "Requests running / waiting",
            "Preemptions per window",
            "Latency p99 (solid) and mean (dotted)" if metrics else "Latency: no data",
        ),
    )
    rows: list[tuple[Any, int]] = [
        (
            _line(
                windows, axis, lambda w: w.kv_usage_max, 4, "KV usage max", COLORS["kv_max"], ".1%"
            ),
            1,
        ),
        (
            _line(
                windows,
                axis,
                lambda w: w.kv_usage_mean,
                4,
                "KV usage mean",
                COLORS["kv_mean"],
                ".1%",
                "dot",
            ),
            1,
        ),
        (_line(windows, axis, lambda w: w.running_mean, 2, "running", COLORS["running"], ".1f"), 2),
        (_line(windows, axis, lambda w: w.waiting_mean, 2, "waiting", COLORS["waiting"], ".1f"), 2),
        (
            _line(
                windows,
                axis,
                lambda w: w.waiting_max,
                0,
                "waiting max",
                COLORS["waiting"],
                ".0f",
                "dot",
            ),
            2,
        ),
    ]
    if any(w.waiting_for_capacity_max is not None for w in windows):
        rows.append(
            (
                _line(
                    windows,
                    axis,
                    lambda w: w.waiting_for_capacity_max,
                    0,
                    "waiting, not skipped (slot, budget or KV)",
                    COLORS["waiting_capacity"],
                    ".0f",
                    "dash",
                ),
                2,
            )
        )
    if any(w.queue_bound for w in windows):
        rows.append(
            (
                scatter_trace(
                    len(windows),
                    mode="markers",
                    name="saturated (a limit pinned)",
                    marker={"color": COLORS["waiting"], "symbol": "diamond-open", "size": 7},
                    hovertemplate="saturated: %{y} waiting behind a pinned limit<extra></extra>",
                    **axis.markers([w.waiting_max if w.queue_bound else None for w in windows]),
                ),
                2,
            )
        )
    rows += _preemption_traces(windows, axis, 3)
    rows += _latency_traces(windows, axis, 4)
    if len(dep.episodes) > SHAPE_LIMIT:
        rows.insert(0, (_episode_band(windows, axis), 1))
    for level, label in ((KV_HIGH, "0.90"), (KV_FULL, "0.98")):
        fig.add_hline(
            y=level,
            row=1,
            col=1,
            line={"color": "#555", "width": 1, "dash": "dash"},
            annotation_text=label,
            annotation_position="right",
            annotation_font_size=10,
            exclude_empty_subplots=False,  # traces are added at the end (see _assemble)
        )
    event_shapes, event_traces = _event_marks(dep.events)
    rows += [(trace, 1) for trace in event_traces]
    if event_shapes:
        fig.update_layout(shapes=[*fig.layout.shapes, *event_shapes])
    if 0 < len(dep.episodes) <= SHAPE_LIMIT:
        fig.update_layout(shapes=[*fig.layout.shapes, *_episode_shapes(dep.episodes)])
        # Shapes have no legend entry: a stand-in trace explains the shading.
        rows.append(
            (
                go.Scatter(
                    x=[None],
                    y=[None],
                    mode="markers",
                    name="over-capacity episode",
                    marker={"symbol": "square", "size": 12, "color": "rgba(214, 39, 40, 0.35)"},
                    hoverinfo="skip",
                ),
                1,
            )
        )
    fig.update_yaxes(title_text="fraction", range=[0, 1.05], tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text="requests", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(title_text="count", rangemode="tozero", row=3, col=1)
    fig.update_yaxes(title_text="seconds (log)", type="log", dtick=1, row=4, col=1)
    fig.update_xaxes(type="date")
    fig.update_xaxes(title_text="time (UTC)", row=4, col=1)
    fig.update_layout(
        title={"text": f"{plot_text(dep.name)} — timeline", "x": 0.01},
        height=900,
        barmode="overlay",
        hovermode="x unified",
        legend={"orientation": "v", "x": 1.02, "y": 1, "groupclick": "toggleitem"},
        margin={"l": 70, "r": 30, "t": 60, "b": 50},
        template="plotly_white",
        uirevision=dep.name,  # live updates keep the user's zoom and legend toggles
    )
    return _assemble(fig, rows, len(windows))


def _assemble(grid: go.Figure, rows: list[tuple[Any, int]], n_points: int) -> go.Figure:
    """Traces placed in the rows of a one-column subplot grid, in one go.

    `add_trace` re-validates and copies every array (seconds for a week of windows); building
    the figure once, unvalidated past VALIDATE_LIMIT, does not. The tests validate the same
    trace dicts at smaller sizes.
    """
    for trace, row in rows:
        suffix = "" if row == 1 else str(row)
        trace.update(xaxis=f"x{suffix}", yaxis=f"y{suffix}")
    return go.Figure(
        data=[trace for trace, _ in rows],
        layout=grid.layout,
        _validate=n_points <= VALIDATE_LIMIT,
    )
