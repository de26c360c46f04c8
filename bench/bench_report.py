"""Benchmark the HTML report on 7 days of 10-s windows (60,480 per series).

Measures: Python time to build the figures and the file, file size, and in headless chromium the
time from navigation start until every plot reports rendered (Plotly.newPlot promises resolved).
Run from the repository root:  python bench/bench_report.py [--days 7] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright.sync_api import sync_playwright
from preemptscope.dashboards.figures import figures_json
from preemptscope.dashboards.html import plotly_js, render_report_html, script_json

from tests.dashboards.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.dashboards.synthetic import make_report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seconds", type=int, default=10, help="window length")
    parser.add_argument("--runs", type=int, default=3, help="browser loads to time")
    args = parser.parse_args()
    windows = int(args.days * 86400 / args.seconds)
    report = make_report(windows, seconds=args.seconds)

    dep = report.deployments[0]
    live: list[str] = []
    for label, span in (("1h", timedelta(hours=1)), ("24h", timedelta(days=1)), ("all", None)):
        since = dep.windows[-1].end - span if span else None
        started = time.perf_counter()
        body = script_json(figures_json(dep, since=since))
        live.append(f"{label} {time.perf_counter() - started:.2f} s / {len(body) / 1e6:.1f} MB")

    started = time.perf_counter()
    text = render_report_html(report)
    build_s = time.perf_counter() - started
    size_mb = len(text.encode()) / 1e6

    timings: list[float] = []
    floor: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        path = Path(tmp) / "report.html"
        path.write_text(text, encoding="utf-8")
        # The floor: a page that only evaluates the same inlined plotly.js.
        bare = Path(tmp) / "plotly-only.html"
        bare.write_text(
            f"<!doctype html><script>{plotly_js()}</script>"
            "<script>window.__preemptscopeRendered = performance.now()</script>",
            encoding="utf-8",
        )
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for _ in range(args.runs):
                for target, out in ((path, timings), (bare, floor)):
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.goto(target.as_uri(), wait_until="commit")
                    page.wait_for_function(
                        "window.__preemptscopeRendered !== undefined", timeout=120_000
                    )
                    # performance.now() is measured from navigation start.
                    out.append(page.evaluate("window.__preemptscopeRendered") / 1000.0)
                    page.close()
        finally:
            browser.close()
    print(f"windows per series      {windows:,} ({args.days:g} days of {args.seconds}-s windows)")
    print(f"build HTML (python)     {build_s:.2f} s")
    print(f"file size               {size_mb:.1f} MB")
    print(f"live figures API build  {', '.join(live)} (uncached; cached: a dict lookup)")
    print(
        f"rendered in chromium    median {statistics.median(timings):.2f} s, "
        f"min {min(timings):.2f} s, max {max(timings):.2f} s over {len(timings)} loads"
    )
    print(
        f"  of which plotly.js    median {statistics.median(floor):.2f} s "
        "(a page that only evaluates the inlined plotly.js)"
    )
    print(
        f"load average            {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
        f" on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
