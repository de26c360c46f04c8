"""The self-contained HTML report: structure and escaping, then in a real headless chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from preemptscope.dashboards.figures import STATE_LABELS
from preemptscope.dashboards.html import (
    plotly_js,
    render_report_html,
    static_text,
    write_report_html,
)

from preemptscope.errors import InputError
from tests.dashboards.conftest import Watched, plotted
from tests.dashboards.synthetic import XSS, make_report


def figures_block(text: str) -> dict[str, Any]:
    match = re.search(
        r'<script type="application/json" id="preemptscope-figures">(.*?)</script>', text, re.S
    )
    assert match
    result: dict[str, Any] = json.loads(match.group(1))
    return result


def test_plotly_is_inlined_once_and_nothing_is_fetched() -> None:
    text = render_report_html(make_report(60))
    assert text.count(plotly_js()[:200]) == 1
    ours = text.replace(plotly_js(), "")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", ours)
    assert "cdn.plot.ly" not in ours
    assert "default-src 'none'" in text and "connect-src 'none'" in text


def test_report_holds_figures_card_sources_and_parameters() -> None:
    report = make_report(120, deployments=2)
    text = render_report_html(report)
    figures = figures_block(text)
    assert set(figures) == {
        f"fig-{i}-{kind}" for i in (0, 1) for kind in ("timeline", "tail", "capacity")
    }
    assert all(f'id="{fid}"' in text for fid in figures)
    assert text.count('class="verdict-card') == 2
    assert "Lines read" in text and "480" in text  # 120*3+120 lines
    assert "v1" in text and "0.11.0" in text
    assert "<code>kv_high</code>" in text and "0.98" in text
    assert "<title>preemptscope: llama-3.1-8b ok, llama-3.1-8b-1 ok</title>" in text


def test_log_text_cannot_escape_into_markup_or_script() -> None:
    text = render_report_html(make_report(60, hostile=True))
    outside_plotly = text.replace(plotly_js(), "")
    assert XSS not in outside_plotly
    assert "<img" not in outside_plotly
    # Only our own five script elements exist: plotly, plots.js, config, figures, loader.
    assert outside_plotly.count("<script") == 5
    figures = figures_block(text)
    assert "&lt;script&gt;" in json.dumps(figures)


def test_write_report_html_reports_unwritable_path(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    write_report_html(make_report(10), target)
    assert target.read_text().startswith("<!doctype html>")
    with pytest.raises(InputError, match="cannot write the HTML report"):
        write_report_html(make_report(10), tmp_path / "missing" / "report.html")


@pytest.mark.integration
def test_report_renders_offline_in_chromium(tmp_path: Path, watched: Watched) -> None:
    path = tmp_path / "report.html"
    write_report_html(make_report(1200, hostile=True, deployments=2), path)
    page = watched.page
    page.goto(path.as_uri())
    page.wait_for_function("window.__preemptscopeRendered !== undefined", timeout=30_000)
    graphs = plotted(page)
    assert len(graphs) == 6
    timeline = next(g for g in graphs if g["id"] == "fig-0-timeline")
    assert timeline["traces"] >= 12 and timeline["points"] >= 12 * 1200
    assert timeline["gl"] > 0  # 1,200 windows: WebGL traces drew
    # plotly.js ran from a blob: script (compiled off the main thread), not the inline fallback.
    assert page.evaluate("Array.from(document.scripts).some(s => s.src.startsWith('blob:'))")
    assert page.evaluate("window.__xss") is None
    assert page.locator("text=onerror").count() > 0  # the payload shows as text
    assert watched.console_errors == []
    assert watched.foreign_requests() == []
    watched.screenshot("report.png")


@pytest.mark.integration
def test_plotly_runs_inline_where_a_blob_script_cannot_load(
    tmp_path: Path, watched: Watched
) -> None:
    """plotly.js normally starts as a blob: script (compiled off the main thread); without blob
    URLs the same inlined text runs as an inline script and every figure is still drawn."""
    path = tmp_path / "report.html"
    write_report_html(make_report(120), path)
    page = watched.page
    page.add_init_script("URL.createObjectURL = () => { throw new Error('no blob URLs'); };")
    page.goto(path.as_uri())
    page.wait_for_function("window.__preemptscopeRendered !== undefined", timeout=30_000)
    graphs = plotted(page)
    assert len(graphs) == 3 and all(g["traces"] > 0 for g in graphs)
    assert page.evaluate("Array.from(document.scripts).filter(s => s.src).length") == 0
    assert watched.console_errors == []
    assert watched.foreign_requests() == []


@pytest.mark.integration
@pytest.mark.slow
def test_long_series_are_downsampled_and_zoom_brings_back_every_window(
    tmp_path: Path, watched: Watched
) -> None:
    report = make_report(5_000)
    path = tmp_path / "week.html"
    write_report_html(report, path)
    page = watched.page
    page.goto(path.as_uri())
    page.wait_for_function("window.__preemptscopeRendered !== undefined", timeout=60_000)
    running = """() => {
        const gd = document.getElementById('fig-0-timeline');
        const t = gd.data.find(t => t.name === 'running');
        return {n: t.y.length, y: Array.from(t.y), x: Array.from(t.x)};
    }"""
    full = [w.running_mean for w in report.deployments[0].windows]
    drawn = page.evaluate(running)
    assert drawn["n"] <= 4000  # min/max pairs per bucket, not 5,000 points
    assert max(y for y in drawn["y"] if y is not None) == max(v for v in full if v is not None)
    assert min(y for y in drawn["y"] if y is not None) == min(v for v in full if v is not None)
    # Zoom to one hour: every 10-s window of that hour is drawn, values exact.
    page.evaluate(
        """() => Plotly.relayout('fig-0-timeline',
            {'xaxis4.range': ['2026-03-02 10:00:00', '2026-03-02 11:00:00']})"""
    )
    page.wait_for_function(
        "document.getElementById('fig-0-timeline').data.find(t => t.name === 'running')"
        ".y.length < 1000"
    )
    zoomed = page.evaluate(running)
    first = 3600  # window index of 10:00:00
    assert 360 <= zoomed["n"] <= 366
    offset = zoomed["y"].index(full[first])
    assert zoomed["y"][offset : offset + 360] == full[first : first + 360]
    # Double-click reset: back to the whole range, downsampled.
    page.evaluate("() => Plotly.relayout('fig-0-timeline', {'xaxis4.autorange': true})")
    page.wait_for_function(
        "document.getElementById('fig-0-timeline').data.find(t => t.name === 'running')"
        ".y.length > 1000"
    )
    assert watched.console_errors == []


@pytest.mark.integration
def test_min_max_slice_keeps_extremes_order_and_gaps(watched: Watched) -> None:
    page = watched.page
    page.set_content(f"<script>{static_text('plots.js')}</script>")
    out = page.evaluate(
        """() => {
        const s = window.preemptscopePlots.slice;
        const full = [];
        for (let i = 0; i < 3000; i++) full.push(i >= 1000 && i < 1500 ? null : (i % 7));
        full[2500] = 99;  // a one-window spike
        full[2600] = -5;
        return {
            few: s([1, null, 3], 0, 10, 0, 3, 500),
            many: s(full, 1000, 10, 0, 3000, 500),
        };
    }"""
    )
    assert out["few"] == {"x": [0, 10, 20], "y": [1, None, 3]}  # short: drawn as is
    many = out["many"]
    assert len(many["y"]) <= 1000
    assert max(y for y in many["y"] if y is not None) == 99
    assert min(y for y in many["y"] if y is not None) == -5
    assert many["x"] == sorted(many["x"])  # min and max of a bucket kept in time order
    # An all-empty stretch stays a gap (null), never zero.
    gap = [
        y
        for x, y in zip(many["x"], many["y"], strict=True)
        if 1000 + 10 * 1000 <= x < 1000 + 10 * 1500
    ]
    assert gap and all(y is None for y in gap)
    assert watched.console_errors == []


@pytest.mark.integration
def test_demo_pipeline_report_renders(tmp_path: Path, watched: Watched) -> None:
    """Simulator logs → ingest → analysis → this HTML, through the real CLI."""
    from preemptscope.cli import main

    out = tmp_path / "demo"
    html = tmp_path / "demo.html"
    code = main(
        ["demo", "--out", str(out), "--duration", "3m", "--window", "10s", "--html", str(html)]
    )
    assert code == 0
    figures = figures_block(html.read_text())
    assert len(figures) == 6  # two deployments × three figures
    page = watched.page
    page.goto(html.as_uri())
    page.wait_for_function("window.__preemptscopeRendered !== undefined", timeout=30_000)
    graphs = plotted(page)
    assert len(graphs) == 6 and all(g["traces"] > 0 for g in graphs)
    badges = page.locator("ul.deployments .badge").all_text_contents()
    assert len(badges) == 2 and set(badges) <= set(STATE_LABELS.values())
    assert watched.console_errors == []
    assert watched.foreign_requests() == []


def test_empty_report_still_renders() -> None:
    from preemptscope.analysis.report import Report

    text = render_report_html(Report(deployments=[], sources=[]))
    assert figures_block(text) == {}
    assert "No sources." in text and "<title>preemptscope report</title>" in text
