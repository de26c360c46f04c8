"""Plotly figures built from a DeploymentReport, once, for the HTML report and the live page.

Every string that may come from a log (deployment and model names, evidence text, flag values) is
HTML-escaped before it reaches Plotly: Plotly renders titles, hover text and annotations as a
subset of HTML, so an unescaped `<a href=...>` or `<br>` from a log would be interpreted.

Long ranges: a week of 10-s windows is ~60k points per series. Figures carry every window
(WebGL `scattergl` above `GL_LIMIT` points); regular windows are sent as `x0`/`dx` instead of 60k
timestamps per trace, which keeps the files small. The browser side (static/plots.js) draws long
traces min/max-downsampled and redraws from the full data on zoom.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol

import plotly.graph_objects as go
from plotly.subplots import make_subplots
from preemptscope.analysis.report import DeploymentReport, Episode, Event, Window
from preemptscope.analysis.verdict import limit_line

KV_HIGH = 0.9  # vLLM's usual "getting full" mark
KV_FULL = 0.98  # at or above this, the next block allocation preempts
GL_LIMIT = 1000  # above this many points a trace is drawn with WebGL
BAR_LIMIT = 3000  # above this many windows, SVG bars are too slow: a WebGL step area instead
VALIDATE_LIMIT = 5000  # plotly's per-element validation costs seconds on a week of windows
SHAPE_LIMIT = 300  # more episode rectangles than this: shade with a WebGL band instead
LATENCY_METRICS = ("e2e", "ttft", "itl", "tpot")  # tpot only where itl is absent (same quantity)
METRIC_LABELS = {
    "e2e": "end-to-end",
    "ttft": "TTFT",
    "itl": "inter-token",
    "tpot": "time per output token",
    "queue": "queue",
}
COLORS = {
    "kv_max": "#d62728",
    "kv_mean": "#ff9896",
    "running": "#1f77b4",
    "waiting": "#ff7f0e",
    "waiting_capacity": "#8c564b",
    "exact": "#d62728",
    "lower_bound": "#9467bd",
    "inferred": "#bcbd22",
    "likely": "#7f7f7f",
    "forced": "#17becf",
    "e2e": "#2ca02c",
    "ttft": "#1f77b4",
    "itl": "#9467bd",
    "tpot": "#9467bd",
    "episode": "rgba(214, 39, 40, 0.12)",
}
STATE_LABELS = {
    "ok": "OK",
    "at_risk": "At risk",
    "over_capacity": "Over capacity",
    "insufficient_data": "Insufficient data",
}


class WhatIfPoint(NamedTuple):
    """One simulated configuration: max_num_seqs → predicted preemptions and p99 (seconds)."""

    max_num_seqs: int
    preemptions: float | None
    p99: float | None


# A plain (max_num_seqs, preemptions, p99) tuple is accepted too.
WhatIfInput = tuple[int, float | None, float | None]


class SweepOutcome(Protocol):
    """What `preemptscope.analysis.sim.whatif.sweep` returns per value (read by duck typing, so
    the dashboards do not import the simulator)."""

    @property
    def settings(self) -> dict[str, Any]: ...
    @property
    def preemptions(self) -> int: ...
    @property
    def e2e_p99(self) -> float | None: ...


# A title with notes under it is several lines: anchored at the top and allowed to push the
# plot down (automargin), it cannot sit on the top tick label whatever the width.
TITLE_PLACE: dict[str, Any] = {
    "x": 0.01,
    "y": 1.0,
    "yref": "container",
    "yanchor": "top",
    "pad": {"t": 24},  # yanchor "top" places the first line's baseline, not its top
    "automargin": True,
}


def whatif_points(outcomes: Iterable[SweepOutcome]) -> list[WhatIfPoint]:
    """A simulator sweep over max_num_seqs → the capacity figure's what-if curve."""
    return [
        WhatIfPoint(int(o.settings["max_num_seqs"]), float(o.preemptions), o.e2e_p99)
        for o in outcomes
    ]


def esc(text: object) -> str:
    """Escape text for HTML (element content and quoted attributes)."""
    return html.escape(str(text), quote=True)


def plot_text(text: object) -> str:
    """Escape text for Plotly's HTML-like labels, which decode &lt; &gt; &amp; but not &quot;."""
    return html.escape(str(text), quote=False)


def plot_time(moment: datetime) -> str:
    """A timestamp as Plotly reads it: UTC wall clock without offset (Plotly has no time zones)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    spec = "milliseconds" if moment.microsecond else "seconds"
    return moment.isoformat(sep=" ", timespec=spec)


@dataclass(frozen=True)
class TimeAxis:
    """Where each window sits on the x axis: a regular grid (x0/dx) or explicit timestamps."""

    slots: list[int]  # grid position of each window
    size: int  # number of grid positions
    x0: str | None
    dx_ms: float | None
    x: list[str] | None
    width_ms: float  # window duration, for bar widths
    origin: datetime | None = None  # grid: the first slot's time
    step: timedelta | None = None  # grid: one slot

    def spread(self, values: Sequence[Any]) -> list[Any]:
        """Values per window → values per grid position, None where no window exists."""
        if self.x is not None:
            return list(values)
        out: list[Any] = [None] * self.size
        for slot, value in zip(self.slots, values, strict=True):
            out[slot] = value
        return out

    def trace_x(self) -> dict[str, Any]:
        if self.x is not None:
            return {"x": self.x}
        return {"x0": self.x0, "dx": self.dx_ms}

    def markers(self, values: Sequence[Any]) -> dict[str, Any]:
        """x and y of a marker series: when few windows have a value, only those (on a week's
        grid the nulls alone would be ~300 kB per trace); else the shared encoding."""
        present = [i for i, v in enumerate(values) if v is not None]
        if len(present) * 4 >= len(values):
            return {"y": self.spread(values), **self.trace_x()}
        if self.x is not None:
            xs = [self.x[i] for i in present]
        else:
            assert self.origin is not None and self.step is not None
            xs = [plot_time(self.origin + self.step * self.slots[i]) for i in present]
        return {"x": xs, "y": [values[i] for i in present]}


def time_axis(windows: Sequence[Window]) -> TimeAxis:
    """Window midpoints: a regular grid when windows share one duration and align to it."""
    if not windows:
        return TimeAxis([], 0, None, None, [], 0.0)
    duration = windows[0].end - windows[0].start
    width_ms = duration.total_seconds() * 1000.0
    first = windows[0].start
    slots = [(w.start - first) // duration for w in windows] if duration > timedelta(0) else []
    regular = bool(slots) and all(
        w.end - w.start == duration and (w.start - first) % duration == timedelta(0)
        for w in windows
    )
    # Regular, increasing, and not so sparse that the None padding outweighs the saving.
    if regular and all(b > a for a, b in itertools.pairwise(slots)):
        size = slots[-1] + 1
        if size <= 2 * len(windows) + 16:
            mid = first + duration / 2
            return TimeAxis(slots, size, plot_time(mid), width_ms, None, width_ms, mid, duration)
    mids = [plot_time(w.start + (w.end - w.start) / 2) for w in windows]
    return TimeAxis(list(range(len(windows))), len(windows), None, None, mids, width_ms)


def _round(value: float | int | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def _sig(value: float | None, digits: int = 4) -> float | None:
    """Latencies span 1 ms to minutes: keep significant digits, not decimals."""
    return None if value is None else float(f"{value:.{digits}g}")


def _scatter(n_points: int, **kwargs: Any) -> go.Scatter | go.Scattergl:
    if n_points > GL_LIMIT:
        return go.Scattergl(_validate=n_points <= VALIDATE_LIMIT, **kwargs)
    return go.Scatter(**kwargs)


def _column(
    windows: Sequence[Window], get: Callable[[Window], float | int | None], digits: int
) -> list[float | None]:
    return [_round(get(w), digits) for w in windows]


def _latency_metrics(windows: Sequence[Window]) -> list[str]:
    present = {name for w in windows for name, stats in w.latency.items() if stats.count}
    shown = [m for m in LATENCY_METRICS if m in present]
    if "itl" in shown and "tpot" in shown:
        shown.remove("tpot")
    return shown


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
            _scatter(
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
    for metric in _latency_metrics(windows):
        label = METRIC_LABELS[metric]
        stats = [w.latency.get(metric) for w in windows]
        p99 = [_sig(s.p99) if s else None for s in stats]
        mean = [_sig(s.mean) if s else None for s in stats]
        color = COLORS[metric]
        traces.append(
            _scatter(
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
            _scatter(
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
                _scatter(
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
    return _scatter(
        len(windows),
        y=axis.spread(_column(windows, get, digits)),
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
            _scatter(
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
    metrics = _latency_metrics(windows)
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
                _scatter(
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
        p99s.append(_round(stats.p99, 4))
        starts.append(plot_time(window.start))
    total = sum(len(v[0]) for v in points.values())
    with_time = total <= GL_LIMIT
    for (over, quality), (xs, ys, p99s, starts) in sorted(points.items()):
        state = "over-capacity window" if over else "window"
        traces.append(
            _scatter(
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


def _fmt_value(value: float | None) -> str:
    if value is None:
        return ""
    if float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.3g}"


def verdict_card_html(dep: DeploymentReport) -> str:
    """An escaped HTML fragment: verdict, evidence numbers, ranked advice with flag values."""
    verdict = dep.verdict
    state = verdict.state
    pre = dep.preemptions
    if pre.total is None:
        counted = "no preemption count in the inputs"
    else:
        quality = "exact" if pre.exact else "lower bound"
        counted = f"{pre.total:,} preemptions ({quality}, from {pre.evidence.replace('_', ' ')})"
        if pre.cache_reset_preemptions:
            counted += f", {pre.cache_reset_preemptions:,} of them in cache resets"
        if pre.since_start is not None and pre.since_start != pre.total:
            counted += f"; {pre.since_start:,} since the engine started"
    parts = [
        f'<section class="verdict-card state-{esc(state)}" data-state="{esc(state)}">',
        f'<h2><span class="badge state-{esc(state)}">{esc(STATE_LABELS.get(state, state))}</span> '
        f"{esc(dep.name)}</h2>",
        '<p class="summary">'
        + (
            f"Problem: <b>{esc(verdict.problem)}</b> · "
            if verdict.problem not in ("none", "unknown")
            else ""
        )
        + f"{esc(counted)}"
        f" · {len(dep.episodes)} over-capacity episode{'s' if len(dep.episodes) != 1 else ''}"
        f" · {len(dep.windows)} windows</p>",
    ]
    limit = limit_line(verdict)
    if limit is not None:
        parts.append(f'<p class="limit" data-limit="{esc(verdict.limit)}">{esc(limit)}</p>')
    if verdict.evidence:
        parts.append('<h3>Evidence</h3><table class="evidence"><tbody>')
        for ev in verdict.evidence:
            if ev.code == "limit" and limit is not None:
                continue  # the limit line above says it
            parts.append(
                f'<tr data-code="{esc(ev.code)}"><td class="num">{esc(_fmt_value(ev.value))}</td>'
                f"<td>{esc(ev.message)}</td></tr>"
            )
        parts.append("</tbody></table>")
    if dep.advice:
        parts.append(
            '<h3>What to do</h3><table class="advice"><thead><tr><th>#</th><th>Action</th>'
            "<th>Flag</th><th>Current</th><th>Suggested</th><th>Why</th></tr></thead><tbody>"
        )
        for advice in sorted(dep.advice, key=lambda a: a.rank):
            parts.append(
                f"<tr><td>{advice.rank}</td><td>{esc(advice.action.replace('_', ' '))}</td>"
                f"<td><code>{esc(advice.flag or '')}</code></td>"
                f"<td>{esc(advice.current or '')}</td>"
                f"<td><b>{esc(advice.suggested or '')}</b></td><td>{esc(advice.reason)}</td></tr>"
            )
        parts.append("</tbody></table>")
    parts.append("</section>")
    return "\n".join(parts)


def windows_since(dep: DeploymentReport, since: datetime | None) -> DeploymentReport:
    """The deployment restricted to windows ending after `since` (episodes clipped alike)."""
    if since is None:
        return dep
    if since.tzinfo is None and dep.windows and dep.windows[0].end.tzinfo is not None:
        since = since.replace(tzinfo=UTC)
    return replace(
        dep,
        windows=[w for w in dep.windows if w.end > since],
        episodes=[e for e in dep.episodes if e.end > since],
    )


def plotly_json(fig: go.Figure) -> dict[str, Any]:
    """{"data": [...], "layout": {...}} for serialising, without to_plotly_json()'s deep copy
    (seconds for a week of windows). The result shares the figure's lists: read-only use."""
    data = getattr(fig, "_data", None)
    layout = getattr(fig, "_layout", None)
    if isinstance(data, list) and isinstance(layout, dict):
        return {"data": data, "layout": layout}
    copied: dict[str, Any] = fig.to_plotly_json()  # plotly changed its internals: copy
    return {"data": copied["data"], "layout": copied["layout"]}


def figures_json(dep: DeploymentReport, *, since: datetime | None = None) -> dict[str, Any]:
    """Everything the live page draws for one deployment, as JSON-ready data."""
    shown = windows_since(dep, since)
    last = dep.windows[-1].end if dep.windows else None
    scope = " over the whole report" if since else ""
    return {
        "name": dep.name,
        "state": dep.verdict.state,
        "card_html": verdict_card_html(dep),
        "windows": len(shown.windows),
        "last_window_end": last.isoformat() if last else None,
        "since": since.isoformat() if since else None,
        "figures": {
            "timeline": plotly_json(timeline_figure(shown)),
            "preemption_vs_tail": plotly_json(preemption_vs_tail_figure(shown, rho_scope=scope)),
            "capacity": plotly_json(capacity_figure(dep)),
        },
    }
