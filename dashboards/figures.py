"""Plotly figures built from a DeploymentReport, once, for the HTML report and the live page.

This module owns the live page's bundle (`figures_json`: every figure of one deployment, from a
time on) and keeps every figure importable from one place; each page section is its own module:
`timeline`, `tail` (preemptions against the tail), `capacity`, `card` (verdict and advice), with
what they share in `_plot`. Figures read the Report only; none computes a number of its own.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go
from preemptscope.analysis.report import DeploymentReport
from preemptscope.dashboards._plot import (
    BAR_LIMIT,
    COLORS,
    GL_LIMIT,
    KV_FULL,
    KV_HIGH,
    LATENCY_METRICS,
    METRIC_LABELS,
    SHAPE_LIMIT,
    STATE_LABELS,
    TITLE_PLACE,
    VALIDATE_LIMIT,
    SweepOutcome,
    TimeAxis,
    WhatIfInput,
    WhatIfPoint,
    esc,
    plot_text,
    plot_time,
    time_axis,
    whatif_points,
)
from preemptscope.dashboards.capacity import capacity_figure
from preemptscope.dashboards.card import verdict_card_html
from preemptscope.dashboards.predicted import advice_classes_html
from preemptscope.dashboards.tail import preemption_vs_tail_figure
from preemptscope.dashboards.timeline import EVENT_STYLE, timeline_figure

__all__ = [
    "BAR_LIMIT",
    "COLORS",
    "EVENT_STYLE",
    "GL_LIMIT",
    "KV_FULL",
    "KV_HIGH",
    "LATENCY_METRICS",
    "METRIC_LABELS",
    "SHAPE_LIMIT",
    "STATE_LABELS",
    "TITLE_PLACE",
    "VALIDATE_LIMIT",
    "SweepOutcome",
    "TimeAxis",
    "WhatIfInput",
    "WhatIfPoint",
    "capacity_figure",
    "esc",
    "figures_json",
    "plot_text",
    "plot_time",
    "plotly_json",
    "preemption_vs_tail_figure",
    "time_axis",
    "timeline_figure",
    "verdict_card_html",
    "whatif_points",
    "windows_since",
]


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
        # The card, then the advice's replays per priority class (as the HTML report shows).
        "card_html": verdict_card_html(dep) + advice_classes_html(dep),
        "windows": len(shown.windows),
        "last_window_end": last.isoformat() if last else None,
        "since": since.isoformat() if since else None,
        "figures": {
            "timeline": plotly_json(timeline_figure(shown)),
            "preemption_vs_tail": plotly_json(preemption_vs_tail_figure(shown, rho_scope=scope)),
            "capacity": plotly_json(capacity_figure(dep)),
        },
    }
