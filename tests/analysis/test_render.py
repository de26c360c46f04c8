"""The terminal summary: sparklines, escaping of text that comes from logs."""

from __future__ import annotations

import io

from preemptscope.analysis.analyze import DeploymentInputs, analyze
from preemptscope.analysis.render import render_report, sparkline
from preemptscope.analysis.report import SourceSummary
from rich.console import Console

from .builders import logframes, stat


def test_sparkline_scales_and_marks_missing() -> None:
    assert sparkline([0.0, 0.5, 1.0], top=1.0) == "▁▄█"
    assert sparkline([None, 2.0, 4.0]) == "·▄█"
    assert len(sparkline([float(i) for i in range(600)])) == 60  # grouped by max


def summary(rows: list[dict[str, object]], name: str = "d") -> str:
    source = SourceSummary(path=f"/logs/{name}.log", kind="log", deployment=name, lines=12)
    report = analyze([DeploymentInputs(name, logs=[logframes(rows)], sources=[source])])
    out = io.StringIO()
    render_report(report, Console(file=out, width=120, color_system=None))
    return out.getvalue()


def test_summary_shows_verdict_timeline_and_advice() -> None:
    rows = [stat(i * 10, running=40, waiting=12, kv=0.99, preemptions=3) for i in range(60)]
    rows = [stat(i * 10, running=10, waiting=0, kv=0.3, preemptions=0) for i in range(60, 90)]
    text = summary(
        [stat(i * 10, running=40, waiting=12, kv=0.99, preemptions=3) for i in range(60)] + rows
    )
    assert "OVER CAPACITY" in text and "(capacity problem)" in text
    assert "Timeline" in text and "preemptions" in text
    assert "180 preemptions (exact, from v1 stats field)" in text
    assert "Advice, in the order to try it" in text and "--gpu-memory-utilization" in text


def test_text_from_logs_cannot_inject_console_markup() -> None:
    rows = [stat(i * 10, running=0, waiting=0, kv=0.0) for i in range(12)]
    text = summary(rows, name="[bold red]evil[/bold red]")
    sources, panel = text.split("╭─", 1)
    assert "[bold red]evil[/bold red]" in panel  # the panel title shows it as typed
    assert "/logs/[bold red]evil[/bold red].log" in sources.replace("\n", "").replace("│", "")
