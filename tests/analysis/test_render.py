"""The terminal summary: sparklines, escaping of text that comes from logs."""

from __future__ import annotations

import io

from preemptscope.analysis.analyze import DeploymentInputs, analyze
from preemptscope.analysis.render import _correlation_line, render_report, sparkline
from preemptscope.analysis.report import Correlation, SourceSummary
from rich.console import Console

from .builders import config_frame, latencies_frame, logframes, request, setting, stat


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


def _line(**fields: object) -> str | None:
    base: dict[str, object] = {
        "metric": "e2e",
        "windows_with_preemption": 0,
        "windows_without_preemption": 0,
        "p99_over_mean_with": None,
        "p99_over_mean_without": None,
        "p99_with": None,
        "p99_without": None,
        "spearman_rho": None,
        "best_lag_windows": None,
        "best_lag_rho": None,
    }
    base.update(fields)
    text = _correlation_line(Correlation(**base))  # type: ignore[arg-type]
    return None if text is None else text.plain


def test_correlation_line_reads_well_with_and_without_preempting_windows() -> None:
    both = _line(
        windows_with_preemption=4,
        windows_without_preemption=11,
        p99_over_mean_with=3.1,
        p99_over_mean_without=1.9,
        p99_with=12.0,
        p99_without=4.0,
        spearman_rho=0.8,
        pairs=15,
        p_value=0.0004,
    )
    assert both == (
        "Correlation (e2e): p99/mean 3.10 with preemption (4 windows) vs 1.90 without (11); "
        "p99 12.00 s vs 4.00 s; Spearman rho +0.80 (p99/mean, 15 windows, p = 0.0004)"
    )
    none_preempting = _line(
        windows_without_preemption=11, p99_over_mean_without=2.53, p99_without=4.1
    )
    assert none_preempting == (
        "Correlation (e2e): no window with preemption to compare; "
        "without preemption (11 windows): p99/mean 2.53, p99 4.10 s"
    )
    only_preempting = _line(windows_with_preemption=1, p99_over_mean_with=3.0)
    assert only_preempting == (
        "Correlation (e2e): with preemption (1 window): p99/mean 3.00; "
        "no window without preemption to compare"
    )
    no_latency_there = _line(
        windows_with_preemption=3, windows_without_preemption=2, p99_over_mean_without=1.5
    )
    assert no_latency_there == (
        "Correlation (e2e): no e2e latency in the 3 windows with preemption; "
        "without preemption (2 windows): p99/mean 1.50"
    )
    for text in (both, none_preempting, only_preempting, no_latency_there):
        assert text is not None and ":;" not in text and " - " not in text and "(0 " not in text


def test_correlation_line_without_any_latency_says_so_in_the_summary() -> None:
    nothing = Correlation(None, 0, 0, None, None, None, None, None, None, None)
    assert _correlation_line(nothing, has_windows=False) is None
    rows = [stat(i * 10, running=40, waiting=12, kv=0.99, preemptions=3) for i in range(30)]
    text = summary(rows)
    assert "Correlation: no latency in these inputs" in text


def test_summary_of_a_quiet_deployment_with_latency_has_a_clean_correlation_line() -> None:
    rows = [stat(i * 10, running=10, waiting=0, kv=0.3, preemptions=0) for i in range(60)]
    source = SourceSummary(path="/logs/d.log", kind="log", deployment="d", lines=60)
    lat = latencies_frame([request(i * 5.0, 1.0 + (i % 7) * 0.3) for i in range(120)])
    report = analyze(
        [DeploymentInputs("d", logs=[logframes(rows)], latencies=lat, sources=[source])]
    )
    out = io.StringIO()
    render_report(report, Console(file=out, width=200, color_system=None))
    line = next(x for x in out.getvalue().splitlines() if "Correlation" in x)
    assert "no window with preemption to compare; without preemption (10 windows): p99/mean" in line
    assert ":;" not in line and "p99/mean -" not in line


def test_summary_lists_restarts_and_config_changes() -> None:
    rows = [stat(t, running=8, waiting=0, kv=0.4) for t in range(10, 600, 10) if t != 300]
    lf = logframes(rows)
    lf.frames["config"] = config_frame(
        [
            setting(0, "vllm_version", "0.11.0", line=1, origin="version_line"),
            setting(0, "max_num_seqs", "256", line=2),
            setting(300, "vllm_version", "0.11.0", line=301, origin="version_line"),
            setting(300, "max_num_seqs", "128", line=302),
        ]
    )
    report = analyze([DeploymentInputs("d", logs=[lf])])
    out = io.StringIO()
    render_report(report, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "Events (restarts, config changes):" in text
    assert "11-20 10:05:00  vLLM restarted: a new startup in vllm.log (vLLM 0.11.0)" in text
    assert "11-20 10:05:00  config change: max_num_seqs 256 → 128" in text
