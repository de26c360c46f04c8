"""What every figure shares: colours and limits, the time axis, escaping, the what-if input.

Every string that may come from a log (deployment and model names, evidence text, flag values)
goes through `esc` or `plot_text` before it reaches Plotly: Plotly renders titles, hover text
and annotations as a subset of HTML, so an unescaped `<a href=...>` or `<br>` from a log would be
interpreted. This module builds no figure and never reads a file.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol

import plotly.graph_objects as go
from preemptscope.analysis.report import Window

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


def round_or_none(value: float | int | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def sig_digits(value: float | None, digits: int = 4) -> float | None:
    """Latencies span 1 ms to minutes: keep significant digits, not decimals."""
    return None if value is None else float(f"{value:.{digits}g}")


def scatter_trace(n_points: int, **kwargs: Any) -> go.Scatter | go.Scattergl:
    """WebGL above GL_LIMIT points: SVG scatter is too slow to draw that many."""
    if n_points > GL_LIMIT:
        return go.Scattergl(_validate=n_points <= VALIDATE_LIMIT, **kwargs)
    return go.Scatter(**kwargs)


def column_values(
    windows: Sequence[Window], get: Callable[[Window], float | int | None], digits: int
) -> list[float | None]:
    """One value per window, rounded; None stays None (no value is not zero)."""
    return [round_or_none(get(w), digits) for w in windows]


def shown_latency_metrics(windows: Sequence[Window]) -> list[str]:
    present = {name for w in windows for name, stats in w.latency.items() if stats.count}
    shown = [m for m in LATENCY_METRICS if m in present]
    if "itl" in shown and "tpot" in shown:
        shown.remove("tpot")
    return shown
